"""Scans bounded in time and memory: each file is scanned in a long-lived worker process.

Why a process: libhdf5 runs in C holding the GIL. A corrupt file can make it loop inside
one call (a flipped byte in a global heap object's size makes reading a variable-length
attribute spin forever), where no Python signal handler or thread can interrupt it. The
only true bound is to do the scan in a child process and kill the child when its time is
up. The same child bounds memory (an RLIMIT_AS cap, `WORKER_MEMORY`) and survives a crash
of a C library (reported as a located `scan-crashed` problem, not the caller's death).

Cost: the workers are started once per process and reused for every later scan (a scan
costs one pipe round trip, well under a millisecond, plus pickling its inventory). A
worker is forked when the caller has no other Python threads (about 20 ms), else started
as a new interpreter running this module's `_BOOTSTRAP` (about 0.4 s: it imports
virtualize afresh). A worker that timed out is killed and replaced on the next scan.

A worker never runs the caller's code: multiprocessing's spawn and forkserver start
methods import the caller's `__main__` again in the child (an ingest script without
`if __name__ == "__main__":` would run again there, and fail with "An attempt has been
made to start a new process before the current process has finished its bootstrapping
phase"), so neither is used; a fork copies the caller without running anything, and the
new interpreter imports only virtualize. The caller's own multiprocessing settings
(`set_start_method`, the forkserver's preload) are neither read nor changed.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import subprocess
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from multiprocessing.connection import wait

from ..model import FileInventory, Location, Problem, VirtualizeError

# Address-space cap of a scan worker (a backstop: sizes and counts read from headers are
# checked against the file size before anything is allocated).
WORKER_MEMORY = 8 << 30

Result = FileInventory | list[Problem]
READY = None  # a new worker's first message: it has started
START_LIMIT = 120.0  # seconds a worker may take to start (a new interpreter imports virtualize)


def scan_or_problems(path: str, hint=None) -> Result:
    """Scan in this process: the inventory, or the problems that stopped the scan
    (`hint`: how the caller will plan it, a `ScanHint`)."""
    from ..formats import scan
    try:
        return scan(path, hint)
    except VirtualizeError as e:
        return list(e.problems)


def _serve(conn, preload: bool = False, die_with_parent: bool = True) -> None:  # its main loop
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the caller decides; Ctrl-C kills us
    parent = os.getppid()
    if die_with_parent:
        _die_with_parent()
    _cap_memory()
    from .. import storage
    if preload:  # started afresh: the scanners' imports are not a scan's time
        import importlib

        from ..formats import registry
        for fmt in registry.formats():
            for module in fmt.modules:
                importlib.import_module(module)
    conn.send(READY)  # (a new interpreter may take seconds to start: not a scan's time)
    hint = None
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
        # jobs are queued in the pipe (several per worker): the worker goes from one file to
        # the next without waiting for its caller; the storage settings come with a job
        # only when they changed (with the scan hint: what the caller will plan)
        path, settings = job
        if settings is not None:
            storage.set_options(settings[0])
            storage.set_environment(settings[1])
            hint = settings[2]
        result = scan_or_problems(path, hint)
        try:
            conn.send(result)
        except Exception as e:  # an inventory that cannot be sent back (should not happen)
            conn.send([Problem(Location(path), "corrupt", f"{type(e).__name__}: {e}")])


def _cap_memory() -> None:
    """This process' address space capped at `WORKER_MEMORY` (or the hard limit)."""
    import resource

    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = WORKER_MEMORY if hard == resource.RLIM_INFINITY else min(WORKER_MEMORY, hard)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (ValueError, OSError):
        pass


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
        # event-loop thread (or the caller's own) makes it unsafe, then a new interpreter
        # is started (never multiprocessing's spawn or forkserver: they import the caller's
        # __main__ again in the child)
        if _threads() == 1:
            ctx = multiprocessing.get_context("fork")
            self.conn, child = ctx.Pipe()
            self.proc = _Forked(ctx.Process(target=_serve, args=(child,), daemon=True,
                                            name="virtualize-scan"))
        else:
            self.conn, child = multiprocessing.Pipe()
            self.proc = _Started(child)
            # its first message: the caller's sys.path, and where this virtualize is (the
            # worker imports the same copy, whatever else the path holds)
            here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            try:
                self.conn.send((list(sys.path), here))
            except OSError:  # it died at once: the caller's next receive reports it
                pass
        child.close()
        self.owner = os.getpid()  # a forked caller must not use its parent's workers
        self.queue: deque[int] = deque()  # indexes of the files sent, in order
        self.settings: tuple | None = None  # the storage settings it has
        self.deadline = 0.0  # when the head of the queue must be done
        self.started = time.monotonic()
        self.ready = False  # READY received: its start is over

    def submit(self, i: int, path: str, settings: tuple, timeout: float | None) -> None:
        """Queue file `i` (`path`) on this worker, after the files already queued."""
        if not self.queue:
            self._restart_clock(timeout)
        self.queue.append(i)
        try:
            self.conn.send((path, settings if settings != self.settings else None))
        except OSError:  # it died since its last answer: the caller's next receive reports
            return  # it (its head crashed; the files queued behind it go to the others)
        self.settings = settings

    def started_next(self, timeout: float | None) -> None:
        """The head of the queue is done: the next one's time starts now."""
        self.queue.popleft()
        self._restart_clock(timeout)

    def _restart_clock(self, timeout: float | None) -> None:
        if not timeout:
            self.deadline = float("inf")
        elif self.ready:
            self.deadline = time.monotonic() + timeout
        else:  # its start does not count (bounded on its own)
            self.deadline = self.started + START_LIMIT + timeout

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


class _Forked:
    """A worker forked from the caller (multiprocessing's fork context)."""

    def __init__(self, proc) -> None:
        self.proc = proc
        # a daemonic process (a dask worker) may not start children: multiprocessing would
        # not wait for them at exit; this one dies with its parent anyway (PDEATHSIG, the
        # parent check), so the rule is lifted for its start
        config = multiprocessing.current_process()._config
        daemonic = config.pop("daemon", None)
        try:
            with warnings.catch_warnings():  # (a thread Python counts differently, in exit)
                warnings.simplefilter("ignore", DeprecationWarning)
                proc.start()
        finally:
            if daemonic is not None:
                config["daemon"] = daemonic

    def kill(self) -> None:
        self.proc.kill()

    def join(self, timeout: float | None = None) -> None:
        self.proc.join(timeout)

    def is_alive(self) -> bool:
        return self.proc.is_alive()

    @property
    def exitcode(self) -> int | None:
        return self.proc.exitcode


# The new interpreter's first lines: only the standard library until it has the caller's
# sys.path and the directory of the caller's virtualize (its first message), then that
# virtualize's worker loop (its own directory first while it is imported); nothing of the
# caller's code.
_BOOTSTRAP = ("import signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
              "from multiprocessing.connection import Connection; "
              "conn = Connection(int(sys.argv[1])); path, here = conn.recv(); "
              "sys.path[:] = [here, *path]; "
              "from virtualize.run.workers import _serve; "
              "sys.path[:] = path; "
              "_serve(conn, True, sys.argv[2] == '1')")


class _Started:
    """A worker started as a new interpreter (`_BOOTSTRAP`), talking over `child`, a
    socket of a multiprocessing Pipe passed as its file descriptor."""

    def __init__(self, child) -> None:
        from multiprocessing import spawn

        # PR_SET_PDEATHSIG fires when the *thread* that started the child ends: only a
        # worker started by the main thread asks for it (the others check their parent
        # every second)
        main = threading.current_thread() is threading.main_thread()
        argv = [spawn.get_executable(), *subprocess._args_from_interpreter_flags(),
                "-c", _BOOTSTRAP, str(child.fileno()), "1" if main else "0"]
        self.popen = subprocess.Popen(argv, pass_fds=(child.fileno(),),
                                      stdin=subprocess.DEVNULL)

    def kill(self) -> None:
        try:
            self.popen.kill()
        except OSError:
            pass

    def join(self, timeout: float | None = None) -> None:
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def is_alive(self) -> bool:
        return self.popen.poll() is None

    @property
    def exitcode(self) -> int | None:
        return self.popen.returncode


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


def start(n: int) -> None:
    """`n` workers ready (started now if idle ones are missing): a job that will hold much
    in memory (`catalog`: an archive's listing) starts them before it does, since a forked
    worker's memory is its caller's at the fork."""
    with _lock:
        have = sum(w.owner == os.getpid() and w.proc.is_alive() for w in _idle)
    for _ in range(max(0, n - have)):
        _give_back(_Worker())


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


# -- one file's whole job in one worker ----------------------------------------------

SCANNED = "scanned"  # the job's first message: its scan is over (its bound with it)
_alone_in: set[int] = set()  # the processes that ran a job alone already


def run_alone(job, path: str, timeout: float, forward=None):
    """Run `job(scanned)` in a process forked for it, `path`'s scan bounded by `timeout`
    seconds: `job` calls `scanned(inventory)` when the file is scanned, which lifts the
    bound (the rest of the job, planning and decode-checking one file, is the caller's
    own work, unbounded as it would be in the caller) and calls `forward(inventory)` here.

    Why: a one-file job in the caller, its scan in a worker, loads the format's library
    and pays its first use (ecCodes' definitions, astropy's first header) twice, in the
    worker and again for the caller's decode check; run whole in one forked process,
    each is paid once, and the caller imports nothing of the format. Once per process (a
    command's run is one job): a caller checking file after file is better served by its
    reused scan workers and the libraries it then holds (each job alone would load them
    anew).

    Returns ("done", the job's value) or ("scan", the scan's problems: it timed out or the
    process died before the scan was over). None: no answer, the caller does the job its
    usual way: the caller has other Python threads (no fork); the job raised (its exception
    is raised again by the caller's own run: a VirtualizeError does not survive pickling
    whole); its value could not be sent back; the process died after the scan, in the
    job's own work."""
    if _threads() != 1 or os.getpid() in _alone_in:
        return None
    _alone_in.add(os.getpid())
    ctx = multiprocessing.get_context("fork")
    conn, child = ctx.Pipe()
    proc = _Forked(ctx.Process(target=_alone, args=(child, job, forward is not None),
                               daemon=True, name="virtualize-check"))
    child.close()
    deadline = time.monotonic() + timeout
    scanned = False
    try:
        while True:
            left = None if scanned else max(0.0, deadline - time.monotonic())
            if not wait([conn], left):
                proc.kill()
                return "scan", timed_out(path, timeout)
            try:
                kind, value = conn.recv()
            except (EOFError, OSError):
                proc.join()
                return None if scanned else ("scan", crashed(path, proc.exitcode))
            if kind == SCANNED:
                scanned = True
                if forward is not None:
                    forward(value)
            elif kind == "raised":
                return None
            else:
                return "done", value
    finally:
        proc.join(1)  # (done: it is exiting)
        if proc.is_alive():
            proc.kill()
            proc.join()
        conn.close()


def _alone(conn, job, send_inventory: bool) -> None:  # a forked child's main
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the caller decides; Ctrl-C kills us
    _die_with_parent()
    _cap_memory()
    try:
        value = job(lambda inv: conn.send((SCANNED, inv if send_inventory else None)))
        conn.send(("done", value))
    except BaseException:  # noqa: BLE001 - the caller does the job itself, and raises it
        conn.send(("raised", None))


# Files queued on one worker at a time: it goes on to the next without a round trip through
# its caller (on a loaded machine each wake-up of a waiting process can cost a scheduler
# slice, milliseconds, more than scanning a small file).
QUEUE = 8


def scan_bounded(paths: Iterable[str], timeout: float | None, jobs: int = 1,
                 hint=None) -> Iterator[Result]:
    """Scan `paths` in worker processes (`jobs` of them), each file within `timeout` seconds
    (None: no limit), yielding each file's result in the order given (`hint`: how the
    caller will plan them, a `ScanHint`). Each worker has up to
    `QUEUE` files queued; one that times out or crashes is replaced, the files queued behind
    the one it was scanning are scanned again by the others."""
    from .. import storage
    if not isinstance(paths, Sequence):
        paths = list(paths)
    # (a sequence, each path normalized as it is sent: an archive's 10^5 paths are not all
    # held as strings at once; those sent and not yet answered are)
    n = len(paths)
    sent: dict[int, str] = {}
    settings = (storage.get_options(), storage.environment(), hint)
    results: dict[int, Result] = {}
    again: deque[int] = deque()  # files queued on a worker that died, scanned again first
    fresh = 0  # the next file not sent yet
    workers: list[_Worker] = []
    depth = max(1, min(QUEUE, n // (max(1, jobs) * 4)))
    done = 0
    try:
        while done < n:
            while (again or fresh < n) and len(workers) < max(1, jobs):
                workers.append(_take())
            for w in workers:
                while (again or fresh < n) and len(w.queue) < depth:
                    if again:
                        i = again.popleft()
                    else:
                        i, fresh = fresh, fresh + 1
                        sent[i] = storage.normalize(paths[i])
                    w.submit(i, sent[i], settings, timeout)
            busy = [w for w in workers if w.queue]
            soonest = min(w.deadline for w in busy)
            ready = wait([w.conn for w in busy],
                         None if soonest == float("inf") else max(0.0, soonest - time.monotonic()))
            for w in busy:
                lost = None
                if w.conn in ready:
                    try:
                        while True:  # every result that is there
                            result = w.conn.recv()
                            if result is READY:
                                w.ready = True
                                w._restart_clock(timeout)
                            else:
                                results[w.queue[0]] = result
                                w.started_next(timeout)
                            if not w.queue or not w.conn.poll():
                                break
                    except (EOFError, OSError):
                        w.proc.join()
                        lost = crashed(sent[w.queue[0]], w.proc.exitcode)
                        w.conn.close()
                elif time.monotonic() >= w.deadline:
                    w.kill()
                    lost = timed_out(sent[w.queue[0]], timeout or 0)
                if lost is not None:
                    results[w.queue.popleft()] = lost
                    again.extendleft(reversed(w.queue))  # the others scan them
                    workers.remove(w)
            while done in results:
                sent.pop(done, None)
                yield results.pop(done)
                done += 1
    finally:  # abandoned (an exception, a generator closed early): stop what still runs
        for w in workers:
            if w.queue:
                w.kill()
            else:
                _give_back(w)
