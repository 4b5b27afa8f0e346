"""Scans bounded in time and memory: each file is scanned in a long-lived worker process.

Why a process: libhdf5 runs in C holding the GIL. A corrupt file can make it loop inside
one call (a flipped byte in a global heap object's size makes reading a variable-length
attribute spin forever), where no Python signal handler or thread can interrupt it. The
only true bound is to do the scan in a child process and kill the child when its time is
up. The same child bounds memory (an RLIMIT_AS cap, `WORKER_MEMORY`) and survives a crash
of a C library (reported as a located `scan-crashed` problem, not the caller's death).

Cost: the workers are started once per process and reused for every later scan (a scan
costs one pipe round trip, well under a millisecond, plus pickling its inventory). A
worker is forked when the caller has no other Python threads (about 20 ms), else started by the
forkserver (about a second: it imports virtualize afresh). A worker that timed out is
killed and replaced on the next scan.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import threading
import time
import warnings
from collections.abc import Iterable, Iterator
from multiprocessing.connection import wait

from ..model import FileInventory, Location, Problem, VirtualizeError

# Address-space cap of a scan worker (a backstop: sizes and counts read from headers are
# checked against the file size before anything is allocated).
WORKER_MEMORY = 8 << 30

Result = FileInventory | list[Problem]


def scan_or_problems(path: str) -> Result:
    """Scan in this process: the inventory, or the problems that stopped the scan."""
    from . import scan
    try:
        return scan(path)
    except VirtualizeError as e:
        return list(e.problems)


def _serve(conn) -> None:  # the worker's main loop
    import resource
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the caller decides; Ctrl-C kills us
    parent = os.getppid()
    _die_with_parent()
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = WORKER_MEMORY if hard == resource.RLIM_INFINITY else min(WORKER_MEMORY, hard)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (ValueError, OSError):
        pass
    while True:
        # a worker never outlives its caller: a forked child also holds the caller's end of
        # the pipe (no EOF when the caller dies) and its stdout/stderr (a `subprocess.run`
        # of a killed caller would wait for them forever)
        while not conn.poll(1.0):
            if os.getppid() != parent:
                return
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        path, options, env = job
        from .. import storage
        storage.set_options(options)
        storage.set_environment(env)
        result = scan_or_problems(path)
        try:
            conn.send(result)
        except Exception as e:  # an inventory that cannot be sent back (should not happen)
            conn.send([Problem(Location(path), "corrupt", f"{type(e).__name__}: {e}")])


def _die_with_parent() -> None:
    """Linux: be killed when the process that started us dies (prctl PR_SET_PDEATHSIG)."""
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class _Worker:
    def __init__(self) -> None:
        # fork is cheap and safe while the caller has no other Python threads; zarr's
        # event-loop thread (or the caller's own) makes it unsafe, then the forkserver
        # starts us
        method = "fork" if _threads() == 1 else "forkserver"
        ctx = multiprocessing.get_context(method)
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child,), daemon=True,
                                name="virtualize-scan")
        with warnings.catch_warnings():  # (a thread Python counts differently, in exit)
            warnings.simplefilter("ignore", DeprecationWarning)
            self.proc.start()
        child.close()
        self.owner = os.getpid()  # a forked caller must not use its parent's workers
        self.path: str | None = None
        self.deadline = 0.0

    def submit(self, path: str, timeout: float | None) -> None:
        self.path = path
        self.deadline = time.monotonic() + timeout if timeout else float("inf")
        from .. import storage
        self.conn.send((path, storage.get_options(), storage.environment()))

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join()
        self.conn.close()

    def close(self) -> None:
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.proc.join(1)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()


def _threads() -> int:
    """Python threads of this process. Threads of C libraries (OpenBLAS's pool, started
    when numpy is imported) are not counted: they register fork handlers and the worker
    never calls into them; a Python thread (zarr's event loop) may hold a lock the child
    would need."""
    return threading.active_count()


_idle: list[_Worker] = []
_lock = threading.Lock()


def _take() -> _Worker:
    with _lock:
        while _idle:
            w = _idle.pop()
            if w.owner != os.getpid():
                continue
            if w.proc.is_alive():
                return w
            w.conn.close()
    return _Worker()


def _give_back(w: _Worker) -> None:
    with _lock:
        _idle.append(w)


@atexit.register
def _shutdown() -> None:
    with _lock:
        workers, _idle[:] = list(_idle), []
    for w in workers:
        if w.owner == os.getpid():
            w.close()


def timed_out(path: str, timeout: float) -> list[Problem]:
    return [Problem(Location(path), "scan-timeout",
                    f"scanning did not finish within {timeout:g} s and was stopped (a corrupt "
                    "index or heap can make the format's library loop); raise the limit with "
                    "--scan-timeout / scan_timeout= if the file is just very large")]


def crashed(path: str, code: int | None) -> list[Problem]:
    how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
    return [Problem(Location(path), "scan-crashed",
                    f"the process scanning this file died ({how}): the format's library "
                    "crashed or ran out of memory on it")]


def scan_bounded(paths: Iterable[str], timeout: float | None, jobs: int = 1) -> Iterator[Result]:
    """Scan `paths` in worker processes (`jobs` at a time), each within `timeout` seconds
    (None: no limit), yielding each file's result in the order given."""
    from .. import storage
    paths = [storage.normalize(p) for p in paths]
    results: dict[int, Result] = {}
    busy: dict[int, _Worker] = {}  # file index -> its worker
    nxt = done = 0
    try:
        while done < len(paths):
            while nxt < len(paths) and len(busy) < max(1, jobs):
                w = _take()
                w.submit(paths[nxt], timeout)
                busy[nxt] = w
                nxt += 1
            now = time.monotonic()
            soonest = min(w.deadline for w in busy.values())
            ready = wait([w.conn for w in busy.values()],
                         None if soonest == float("inf") else max(0.0, soonest - now))
            for i, w in list(busy.items()):
                if w.conn in ready:
                    try:
                        results[i] = w.conn.recv()
                    except (EOFError, OSError):
                        w.proc.join()
                        results[i] = crashed(paths[i], w.proc.exitcode)
                        w.conn.close()
                    else:
                        _give_back(w)
                    del busy[i]
                elif time.monotonic() >= w.deadline:
                    w.kill()
                    results[i] = timed_out(paths[i], timeout or 0)
                    del busy[i]
            while done in results:
                yield results.pop(done)
                done += 1
    finally:  # abandoned (an exception, a generator closed early): stop what still runs
        for w in busy.values():
            w.kill()
