"""Scan workers never run the caller's code: an ingest script without a main guard, with a
second thread (a web framework's, dask's, a progress bar's), under whatever start method it
chose, scans in workers and writes its cube; its top-level code runs once (scan/_worker.py,
docs/robustness.md)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import netCDF4
import numpy as np
import pytest

import virtualize
from virtualize.run import workers as _worker

# no `if __name__ == "__main__":` on purpose: multiprocessing's spawn and forkserver would
# run all of it again in each worker
SCRIPT = textwrap.dedent("""
    import multiprocessing, sys, threading, time
    method, thread, ran, out, *files = sys.argv[1:]
    if method != "default":
        multiprocessing.set_start_method(method)
    if thread == "thread":
        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
    with open(ran, "a") as f:
        f.write("top-level code ran\\n")
    import virtualize
    report = virtualize.check(files, jobs=2)
    print("check", report.ok, report.verdict)
    virtualize.virtualize(files, out, jobs=2)
    # the caller's own multiprocessing setting is neither read nor changed
    print("start method", multiprocessing.get_start_method(allow_none=True))
""")


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    d = tmp_path_factory.mktemp("nomain")
    files = []
    for i in range(6):
        p = d / f"m{i}.nc"
        with netCDF4.Dataset(p, "w") as ds:
            ds.createDimension("time", None)
            ds.createDimension("x", 5)
            t = ds.createVariable("time", "f8", ("time",))
            t.units = "days since 2000-01-01"
            t[:] = [2 * i, 2 * i + 1]
            v = ds.createVariable("tas", "f4", ("time", "x"), chunksizes=(1, 5))
            v[:] = np.arange(10, dtype="f4").reshape(2, 5) * (i + 1)
        files.append(str(p))
    script = d / "ingest.py"
    script.write_text(SCRIPT)
    return files, script


def _run(script: Path, method: str, thread: str, tmp: Path, files: list[str]):
    ran = tmp / "ran.txt"
    out = tmp / "cube.zarr"
    src = str(Path(virtualize.__file__).parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(script), method, thread, str(ran), str(out), *files],
                          capture_output=True, text=True, timeout=600, env=env, cwd=tmp)
    return proc, ran, out


@pytest.mark.parametrize("method,thread", [("default", "thread"), ("fork", "thread"),
                                           ("forkserver", "thread"), ("spawn", "thread"),
                                           ("spawn", "nothread")])
def test_script_without_main_guard_scans_in_workers(stack, method, thread, tmp_path):
    files, script = stack
    proc, ran, out = _run(script, method, thread, tmp_path, files)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "bootstrapping phase" not in proc.stderr
    assert "check True" in proc.stdout, proc.stdout
    assert f"start method {None if method == 'default' else method}" in proc.stdout
    assert ran.read_text().splitlines() == ["top-level code ran"]  # once: no worker re-ran it
    cube = virtualize.open(out)
    got = np.asarray(cube["tas"][...])
    want = np.concatenate([netCDF4.Dataset(f)["tas"][...].data for f in files])
    assert got.shape == (12, 5)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.asarray(cube["time"][...]), np.arange(12.0))


def test_started_worker_is_bounded_and_replaced(stack, tmp_path, monkeypatch):
    """A worker started while the caller has threads (a new interpreter) keeps the workers'
    bounds: a scan that loops in libhdf5 is killed at the time limit and reported, the
    files queued behind it are scanned by its replacement, and an idle one exits when told."""
    files, _ = stack
    loop = _heap_loop(tmp_path / "heap.h5")  # libhdf5 loops forever on it (test_hangs.py)
    _worker._shutdown()
    monkeypatch.setattr(_worker, "_threads", lambda: 2)  # as with a second thread
    results = list(_worker.scan_bounded([str(loop), *files], 15, 1))  # (the sound files too)
    assert [p.kind for p in results[0]] == ["scan-timeout"]
    assert [r.path for r in results[1:]] == files
    [w] = _worker._idle
    assert isinstance(w.proc, _worker._Started) and w.proc.is_alive()
    _worker._idle.clear()
    w.conn.send(None)  # told to stop (as `_shutdown` tells it, which waits 1 s then kills:
    w.proc.join(600)   # a loaded machine may take longer), it exits by itself
    w.conn.close()
    assert not w.proc.is_alive() and w.proc.exitcode == 0


def _heap_loop(path: Path) -> Path:
    import h5py

    with h5py.File(path, "w") as f:
        f.attrs["title"] = "a variable length string"
        f.create_dataset("x", data=np.arange(100, dtype="f4"), chunks=(10,))
    b = bytearray(path.read_bytes())
    at = b.find(b"GCOL")
    b[at + 24] ^= 0xFF
    path.write_bytes(b)
    return path


@pytest.mark.parametrize("threads", [1, 2], ids=["forked", "started"])
def test_both_kinds_of_worker_are_capped_and_report_their_death(tmp_path, monkeypatch, threads):
    """Forked or started afresh, a worker has the address-space cap, and its death in a
    scan (here a SIGKILL, as the kernel OOM killer sends) is reported with the signal (`scan-crashed`)."""
    import signal
    import time

    monkeypatch.setattr(_worker, "_threads", lambda: threads)
    w = _worker._Worker()
    try:
        assert isinstance(w.proc, _worker._Forked if threads == 1 else _worker._Started)
        assert w.conn.recv() is _worker.READY
        pid = w.proc.proc.pid if threads == 1 else w.proc.popen.pid
        limits = Path(f"/proc/{pid}/limits").read_text()
        [line] = [x for x in limits.splitlines() if x.startswith("Max address space")]
        assert int(line.split()[3]) == _worker.WORKER_MEMORY
        w.conn.send((str(_heap_loop(tmp_path / "heap.h5")), None))  # it loops in libhdf5
        time.sleep(0.5)
        os.kill(pid, signal.SIGKILL)
        with pytest.raises((EOFError, OSError)):
            w.conn.recv()
        w.proc.join()
        assert w.proc.exitcode == -signal.SIGKILL and not w.proc.is_alive()
        [p] = _worker.crashed("heap.h5", w.proc.exitcode)
        assert p.kind == "scan-crashed" and "signal 9" in p.message
    finally:
        w.kill()


ALONE = textwrap.dedent("""
    import os, time
    from virtualize.run import workers
    def run_alone(*a):  # (once per process: each case as if it were the first)
        workers._alone_in.clear()
        return workers.run_alone(*a)
    def done(scanned):
        scanned("inv")
        return 42
    seen = []
    assert run_alone(done, "f", 60, seen.append) == ("done", 42) and seen == ["inv"]
    def raises(scanned):
        raise ValueError("the caller raises it itself")
    assert run_alone(raises, "f", 60) is None
    def hangs(scanned):
        time.sleep(60)
    kind, [p] = run_alone(hangs, "f", 0.5)
    assert kind == "scan" and p.kind == "scan-timeout" and p.loc.file == "f", p
    def dies(scanned):
        os._exit(3)
    kind, [p] = run_alone(dies, "f", 60)
    assert kind == "scan" and p.kind == "scan-crashed" and "exit code 3" in p.message, p
    def dies_later(scanned):
        scanned(None)
        os._exit(3)
    assert run_alone(dies_later, "f", 60) is None  # (done again the usual way)
    t0 = time.monotonic()
    def slow_after_scan(scanned):  # (scanned within 5 s, however loaded the machine)
        scanned(None)
        time.sleep(max(0.0, t0 + 6 - time.monotonic()))  # past the limit, surely
        return "unbounded once scanned"
    assert run_alone(slow_after_scan, "f", 5) == ("done", "unbounded once scanned")
    # once per process: a later job is the caller's, with its reused workers
    assert workers.run_alone(done, "f", 60) is None
    print("ok")
""")


def test_run_alone_bounds_the_scan_only():
    """A one-file job in its own forked process (`run_alone`): its value and the scan's
    inventory come back; its scan is stopped at the limit (scan-timeout) or dies
    (scan-crashed); after its scan it is unbounded; a job that raises, or dies after its
    scan, is left to the caller (None), as is a process' second job. In a fresh process:
    one thread, so it forks."""
    r = subprocess.run([sys.executable, "-c", ALONE], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
