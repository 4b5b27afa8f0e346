"""Scans on an executor (dask.distributed, concurrent.futures) and in queued local workers:
the same cube as the local path, every failure a located problem (docs/scale.md)."""

import concurrent.futures as cf
import json
import os
import pickle

import h5py
import netCDF4
import numpy as np
import pytest

import virtualize
from virtualize.api import AUTO_SERIAL, REMOTE_JOBS, scan_jobs
from virtualize.cli import main
from virtualize.run import workers as _worker
from virtualize.run.executors import scan_on
from virtualize.run.share import Sharer

distributed = pytest.importorskip("distributed")

N = 12
# the scan limit of a run holding a file that hangs: that file times out whatever the
# machine's speed; the sound files beside it (milliseconds of scanning each) must finish
# within it on a loaded machine too (2 cores at load 25), hence seconds, not one or two
HANG_LIMIT = 15


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """N one-step netCDF-4 files (time, y, x) and one that is not a netCDF file."""
    d = tmp_path_factory.mktemp("stack")
    files = []
    for i in range(N):
        p = d / f"s{i:02d}.nc"
        with netCDF4.Dataset(p, "w") as ds:
            ds.createDimension("time", None)
            ds.createDimension("y", 3)
            ds.createDimension("x", 4)
            t = ds.createVariable("time", "f8", ("time",))
            t.units = "days since 2000-01-01"
            t[:] = [i]
            v = ds.createVariable("tas", "f4", ("time", "y", "x"), chunksizes=(1, 3, 2))
            v.units = "K"
            v[:] = np.arange(12, dtype="f4").reshape(1, 3, 4) + i
        files.append(str(p))
    bad = d / "bad.nc"
    bad.write_bytes(b"CDF\x01" + b"\xff" * 40)
    return files, str(bad)


@pytest.fixture(scope="module")
def heap_loop(tmp_path_factory):
    """An HDF5 file libhdf5 loops on forever (tests/robustness/test_hangs.py)."""
    path = tmp_path_factory.mktemp("gheap") / "heap.h5"
    with h5py.File(path, "w") as f:
        f.attrs["title"] = "a variable length string"
        f.create_dataset("x", data=np.arange(100, dtype="f4"), chunks=(10,))
    b = bytearray(path.read_bytes())
    at = b.find(b"GCOL")
    b[at + 24] ^= 0xFF
    path.write_bytes(b)
    return str(path)


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def local_cube(stack, tmp_path_factory):
    out = tmp_path_factory.mktemp("local") / "cube.zarr"
    virtualize.virtualize(stack[0], out, jobs=1)
    return out


def _same_cube(a, b):
    """Every document and manifest of two cube directories equal, and every value."""
    names = sorted(str(p.relative_to(a)) for p in a.rglob("*") if p.is_file())
    assert names == sorted(str(p.relative_to(b)) for p in b.rglob("*") if p.is_file())
    for n in names:
        if n == "virtualize.json":  # (its "created" time differs)
            ja, jb = (json.loads((c / n).read_text()) for c in (a, b))
            ja.pop("created"), jb.pop("created")
            assert ja == jb
        else:
            assert (a / n).read_bytes() == (b / n).read_bytes(), n
    ga, gb = virtualize.open(a), virtualize.open(b)
    for name in ("time", "tas"):
        np.testing.assert_array_equal(ga[name][...], gb[name][...])


def test_dask_scan_gives_the_local_cube(stack, client, local_cube, tmp_path):
    out = tmp_path / "cube.zarr"
    report = virtualize.virtualize(stack[0], out, executor=client)
    assert report.ok
    _same_cube(local_cube, out)
    values = virtualize.open(out)["tas"][...]
    assert values.shape == (N, 3, 4) and values[5, 2, 3] == 11 + 5


@pytest.mark.parametrize("pool", [cf.ThreadPoolExecutor, cf.ProcessPoolExecutor])
def test_concurrent_futures_executors_give_the_local_cube(stack, local_cube, tmp_path, pool):
    out = tmp_path / "cube.zarr"
    with pool(2) as ex:
        assert virtualize.virtualize(stack[0], out, executor=ex).ok
    _same_cube(local_cube, out)


def _located(report):
    return sorted((p.kind, p.loc.file, p.loc.variable, p.fatal) for p in report.problems)


def test_a_bad_file_on_a_worker_is_located_as_locally(stack, client):
    files, bad = stack
    local = virtualize.check(files[:3] + [bad], jobs=1)
    remote = virtualize.check(files[:3] + [bad], executor=client)
    assert not remote.ok
    assert _located(remote) == _located(local) and any(p.loc.file == bad for p in remote.problems)


def test_a_hanging_scan_on_a_dask_worker_is_a_located_timeout(stack, heap_loop, client):
    """Dask workers are daemonic processes; the scan still runs in a bounded child."""
    results = list(virtualize.inventories([stack[0][0], heap_loop, stack[0][1]],
                                          executor=client, scan_timeout=HANG_LIMIT))
    assert [type(r).__name__ for r in results] == ["FileInventory", "list", "FileInventory"]
    [p] = results[1]
    assert (p.kind, p.loc.file, p.fatal) == ("scan-timeout", heap_loop, True)


class _Failing(cf.ThreadPoolExecutor):
    """A task that holds `bad` fails as a whole (as when its worker dies)."""

    def __init__(self, bad):
        super().__init__(2)
        self.bad = bad
        self.tasks = []

    def submit(self, fn, paths, *args):
        self.tasks.append(list(paths))
        if self.bad in paths:
            f = cf.Future()
            f.set_exception(RuntimeError("worker lost"))
            return f
        return super().submit(fn, paths, *args)


def test_a_failed_task_is_run_again_file_by_file(stack):
    files = stack[0]
    with _Failing(files[5]) as ex:
        results = list(scan_on(ex, files, None, batch=4))
    assert [i for i, r in enumerate(results) if not isinstance(r, virtualize.api.FileInventory)] == [5]
    [p] = results[5]
    assert (p.kind, p.loc.file) == ("scan-crashed", files[5]) and "worker lost" in p.message
    assert [len(t) for t in ex.tasks] == [4, 4, 4, 1, 1, 1, 1]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork in a threaded test process
def test_queued_files_behind_a_crash_are_scanned_by_others(stack, monkeypatch):
    """Each worker has several files queued: one that dies takes only the file it was
    scanning; those queued behind it are scanned again, in order."""
    files = stack[0] * 3  # 36 files, 2 workers: each has several queued
    real = _worker.scan_or_problems
    _worker._shutdown()
    monkeypatch.setattr(_worker, "_threads", lambda: 1)
    monkeypatch.setattr(_worker, "scan_or_problems",
                        lambda p, hint=None: os._exit(3) if p == files[7] else real(p, hint))
    results = list(_worker.scan_bounded(files, 120, 2))
    _worker._shutdown()  # no worker with the patch is kept
    assert [r.path if hasattr(r, "path") else r[0].kind for r in results] == \
        [f if f != files[7] else "scan-crashed" for f in files]


def test_queued_files_behind_a_timeout_are_scanned(stack, heap_loop):
    files = stack[0][:6] + [heap_loop] + stack[0][6:]
    results = list(_worker.scan_bounded(files, HANG_LIMIT, 2))
    kinds = [r.path if hasattr(r, "path") else r[0].kind for r in results]
    assert kinds == [f if f != heap_loop else "scan-timeout" for f in files]


def test_cli_scheduler(stack, client, local_cube, tmp_path):
    out = tmp_path / "cube.zarr"
    assert main(["create", *stack[0], "-o", str(out), "-q",
                 "--scheduler", client.scheduler.address]) == 0
    _same_cube(local_cube, out)


def test_cli_jobs_auto_and_bad_values(stack, capsys):
    assert main(["check", "-q", "-j", "auto", *stack[0]]) == 0
    with pytest.raises(SystemExit):
        main(["check", "-j", "many", *stack[0]])
    assert "not a number or 'auto'" in capsys.readouterr().err


def test_api_refuses_a_non_executor(stack):
    with pytest.raises(virtualize.UsageError, match="executor must be"):
        virtualize.check(stack[0], executor=object())


def test_jobs_auto():
    local = [f"/d/f{i}.nc" for i in range(AUTO_SERIAL)]
    assert scan_jobs("auto", local[:AUTO_SERIAL - 1]) == 1
    assert scan_jobs("auto", local) == (os.cpu_count() or 1)
    assert scan_jobs("auto", ["https://h/a.nc", "https://h/b.nc"]) == 2
    assert scan_jobs("auto", [f"s3://b/{i}.nc" for i in range(50)]) == REMOTE_JOBS
    assert scan_jobs(3, local[:2]) == 2


def test_an_inventory_pickles_compactly(tmp_path):
    """Block tables travel as numpy arrays: a few bytes a chunk, no object per chunk."""
    path = tmp_path / "many.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(40_000, dtype="f4"), chunks=(10,))
    inv = virtualize.inventory(path)
    assert inv.variables["x"].blocks.refs.size == 4000
    assert len(pickle.dumps(inv)) < 4000 * 20 + 2000


def test_shared_inventories_keep_their_values(stack):
    """The caller holds what files repeat once: equal attributes and block tables are one
    read-only object, per-file values stay each file's own."""
    share = Sharer()
    a, b = (share(virtualize.inventory(f)) for f in stack[0][:2])
    assert a.variables["tas"].attrs is b.variables["tas"].attrs
    assert a.variables["tas"].blocks.refs is b.variables["tas"].blocks.refs
    assert not a.variables["tas"].blocks.refs.flags.writeable
    assert (a.variables["time"].values[0], b.variables["time"].values[0]) == (0, 1)
    assert a.variables["tas"].dtype is b.variables["tas"].dtype


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork in a threaded test process
def test_a_file_queued_on_a_worker_that_just_died_is_reported_not_raised(stack, monkeypatch):
    """A worker may die between its last answer and the next file sent to it (the caller
    queues files before it sees the death): the send's broken pipe is no error of the
    caller's; the death is reported at the next receive, and the file scanned by another."""
    files = stack[0][:3]
    _worker._shutdown()
    monkeypatch.setattr(_worker, "_threads", lambda: 1)
    w = _worker._Worker()
    w.proc.kill()
    w.proc.join()
    settings = (virtualize.storage.get_options(), virtualize.storage.environment(), None)
    for i, f in enumerate(files):
        w.submit(i, f, settings, None)  # (the first send may still fill the pipe's buffer)
    assert list(w.queue) == [0, 1, 2]
    w.conn.close()
    results = list(_worker.scan_bounded(files, 120, 2))
    assert [r.path for r in results] == files
    _worker._shutdown()
