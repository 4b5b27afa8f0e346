#!/usr/bin/env python
"""Archive scale, side by side in one run: 1k / 10k small files end to end (wall time,
peak RSS of the main process and of its workers, per-file cost) with -j 1, -j 2, -j auto,
a concurrent.futures executor and dask.distributed; the dask cube checked against the
local one; flat memory; append cost against a full build (cube directory and Icechunk);
the open of a 1M-chunk cube (cube directory, Icechunk, kerchunk JSON) through
virtualize.open and xarray. kerchunk (and VirtualiZarr when installed) on the same files
for reference.

    python benchmarks/bench_scale.py                         # 1,000 and 10,000 files, 1M chunks
    python benchmarks/bench_scale.py --quick                 # a smoke run (1-4 minutes)
    python benchmarks/bench_scale.py --sizes 1000 --workdir /tmp/bench_scale
    python benchmarks/bench_scale.py --json > r.json         # the tables then go to stderr

Inputs (written once under --workdir/inputs and reused): hourly files, one step each
(tas(time=1, lat=4, lon=4) f4 with CF coordinates, the header of the other benchmarks),
netCDF-4 (netCDF4-python; chunked (1, 4, 4), shuffle + deflate 1) and netCDF classic
(CDF-2). A size N uses the first N files of one sequence; the next file and the next 24
(a day) are what the append cases add. For the open case, one netCDF classic file of
1,000,000 records (`--open-chunks`), so 1,000,000 tas chunks, virtualized to a cube
directory, an Icechunk repository and a kerchunk JSON (built once, cached).

Every measurement runs in a fresh process (this script with --_measure SPEC): imports
first, then the timed call. `main MB` is that process's peak resident set (VmHWM) over
its whole life, imports included (`+MB`: the rise during the timed call); `workers MB`
the largest peak of any process below it (scan workers, dask nanny/worker processes),
sampled by this runner every 20 ms (psutil when installed, else /proc). dask rows use a
LocalCluster of `--workers` single-threaded processes, started and with virtualize
imported before the timed call (both times are in the note). The open case runs
benchmarks/bench_open.py when it exists, else a minimal version here.

Features that are not there yet (executor=, jobs="auto") are reported as
"n/a (feature missing)"; the run goes on.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness  # noqa: E402
from _harness import MB, log  # noqa: E402

HERE = Path(__file__).resolve().parent
FORMATS = ("nc4", "nc3")
MODES = ("j1", "j2", "auto", "pool", "dask")
CASES = ("build", "compare", "append", "peers", "open")
MODE_LABEL = {"j1": "-j 1", "j2": "-j 2", "auto": "-j auto", "pool": "executor=ProcessPool(2)",
              "dask": "dask LocalCluster"}
FORMAT_LABEL = {"nc4": "netCDF-4", "nc3": "netCDF classic"}
PACKAGES = ("virtualize", "numpy", "zarr", "h5py", "netCDF4", "xarray", "icechunk", "dask",
            "distributed", "kerchunk", "virtualizarr", "psutil")
MISSING = "n/a (feature missing)"
OPEN_CHUNKS = 1_000_000


# -- input files -------------------------------------------------------------------------

def _write_one(args: tuple[str, str, int]) -> str:
    """One hourly file: step `i` (hours since 2000-01-01) of a 4 x 4 tas field."""
    import netCDF4
    import numpy as np

    path, fmt, i = args
    tmp = path + ".part"
    kw = {"chunksizes": (1, 4, 4), "zlib": True, "complevel": 1, "shuffle": True} \
        if fmt == "nc4" else {}
    with netCDF4.Dataset(tmp, "w", format="NETCDF4" if fmt == "nc4" else "NETCDF3_64BIT_OFFSET") as nc:
        t, lat, lon, tas = _harness.define_hourly(nc, "virtualize scale benchmark: hourly", 4, 4,
                                                  **kw)
        _harness.write_coords(t, lat, lon, 1)
        t[:] = [float(i)]
        rng = np.random.default_rng(i)
        tas[:] = (280 + 5 * np.sin(2 * np.pi * i / 24) + rng.normal(0, 0.5, (1, 4, 4))).astype("f4")
    os.replace(tmp, path)
    return path


def make_inputs(workdir: Path, fmt: str, count: int) -> Path:
    """At least `count` hourly files of format `fmt` under workdir/fmt (kept across runs);
    returns a list file naming them in order, one per line."""
    from concurrent.futures import ProcessPoolExecutor

    d = workdir / fmt
    d.mkdir(parents=True, exist_ok=True)
    paths = [str(d / f"tas_1hr_{i:07d}.nc") for i in range(count)]
    todo = [(p, fmt, i) for i, p in enumerate(paths) if not os.path.exists(p)]
    if todo:
        t0 = time.perf_counter()
        with ProcessPoolExecutor(min(4, os.cpu_count() or 1)) as ex:
            for _ in ex.map(_write_one, todo, chunksize=64):
                pass
        log(f"  wrote {len(todo)} {fmt} files in {time.perf_counter() - t0:.1f} s under {d}")
    lst = d / f"files_{count}.txt"
    lst.write_text("\n".join(paths) + "\n")
    return lst


def _files(spec: dict, start: int, stop: int) -> list[str]:
    return Path(spec["list"]).read_text().split()[start:stop]


# -- in the measuring process ------------------------------------------------------------

def _rss(field: str) -> int | None:
    return _harness.proc_field("/proc/self/status", field, 1024)


def _mb(n: int | None) -> float | None:
    return None if n is None else n / MB


def _timed(fn) -> tuple[float, object, float | None]:
    """(seconds, result, rise of the resident set in MB) of one call."""
    gc.collect()
    rss0 = _rss("VmRSS")
    t0 = time.perf_counter()
    result = fn()
    dt = time.perf_counter() - t0
    hwm = _rss("VmHWM")
    return dt, result, (None if hwm is None or rss0 is None else max(0, hwm - rss0) / MB)


def _accepts(fn, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _shape_note(rep) -> str:
    plan = getattr(rep, "plan", None)
    arr = plan.arrays.get("tas") if plan is not None else None
    return f"ok={rep.ok}" + (f", tas{tuple(arr.shape)}" if arr is not None else "")


def m_build(spec: dict) -> dict:
    """virtualize.virtualize of the first n files to a cube directory or Icechunk repository."""
    import virtualize

    files = _files(spec, 0, spec["n"])
    mode, out = spec["mode"], spec["out"]
    kw: dict = {}
    cleanup = None
    note = ""
    if mode == "j1":
        kw["jobs"] = 1
    elif mode == "j2":
        kw["jobs"] = 2
    elif mode == "auto":
        kw["jobs"] = "auto"
    else:
        if not _accepts(virtualize.virtualize, "executor"):
            return {"missing": MISSING + ": virtualize(executor=)"}
        if mode == "pool":
            from concurrent.futures import ProcessPoolExecutor
            ex = ProcessPoolExecutor(spec["workers"])
            kw["executor"], cleanup = ex, ex.shutdown
        else:
            try:
                from dask.distributed import Client, LocalCluster
            except ImportError as e:
                return {"missing": f"n/a (dask.distributed not installed: {e})"}
            t0 = time.perf_counter()
            cluster = LocalCluster(n_workers=spec["workers"], threads_per_worker=1, processes=True,
                                   dashboard_address=None)
            client = Client(cluster)
            t1 = time.perf_counter()
            # a running cluster has its imports done: virtualize imported on every worker
            client.run(importlib.import_module, "virtualize")
            note = (f"cluster start {t1 - t0:.1f} s, worker imports "
                    f"{time.perf_counter() - t1:.1f} s; ")

            def cleanup():
                client.close()
                cluster.close()
            kw["executor"] = client
    try:
        dt, rep, rise = _timed(lambda: virtualize.virtualize(files, out, overwrite=True, **kw))
    except Exception as e:
        if mode == "auto" and "jobs" in str(e):
            return {"missing": MISSING + f": jobs='auto' ({type(e).__name__})"}
        raise
    finally:
        if cleanup is not None:
            cleanup()
    return {"wall_s": dt, "rise_mb": rise, "note": note + _shape_note(rep)}


def m_append(spec: dict) -> dict:
    """virtualize.append (-j 1, as the full build it is set against) of files n..n+k to a
    copy of the n-file cube (the copy untimed)."""
    import virtualize

    base, work = spec["base"], spec["work"]
    if not os.path.exists(base):
        return {"failed": f"no base cube {base} (its build failed or was not selected)"}
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(base, work, symlinks=True)
    new = _files(spec, spec["n"], spec["n"] + spec["k"])
    dt, rep, rise = _timed(lambda: virtualize.append(work, new, jobs=1))
    note = appended_ok(base, work, new, spec["n"])
    shutil.rmtree(work, ignore_errors=True)
    return {"wall_s": dt, "rise_mb": rise, "note": note}


def appended_ok(base: str, work: str, new: list[str], n: int) -> str:
    """Check (untimed) the grown cube: its length, its first n steps of tas and time equal
    to the cube it grew from, the new steps equal to netCDF4's read of the new files."""
    import netCDF4
    import numpy as np

    import virtualize

    g, b = virtualize.open(work), virtualize.open(base)
    shape = g["tas"].shape
    if shape[0] != n + len(new):
        return f"tas{tuple(shape)} WRONG LENGTH"
    bad = [name for name in ("tas", "time") if not np.array_equal(g[name][:n], b[name][...])]
    want = {"tas": [], "time": []}
    for path in new:
        with netCDF4.Dataset(path) as nc:
            nc.set_auto_maskandscale(False)
            for name in want:
                want[name].append(nc[name][...])
    bad += [f"new {name}" for name, parts in want.items()
            if not np.array_equal(g[name][n:], np.concatenate(parts))]
    return f"tas{tuple(shape)}, " + ("values = base cube + netCDF4's read of the new files"
                                     if not bad else "VALUES DIFFER: " + ", ".join(bad))


def _tree(path: str) -> dict[str, Path]:
    root = Path(path)
    return {str(p.relative_to(root)): p for p in sorted(root.rglob("*")) if p.is_file()}


def _same_file(a: Path, b: Path) -> bool:
    import numpy as np

    if a.suffix == ".json":
        da, db = json.loads(a.read_text()), json.loads(b.read_text())
        if a.name == "virtualize.json":  # when it was written, by which run
            for d in (da, db):
                d.pop("created", None)
        return da == db
    if a.suffix == ".npy":
        xa, xb = np.load(a, allow_pickle=False), np.load(b, allow_pickle=False)
        return xa.dtype == xb.dtype and xa.shape == xb.shape and bool((xa == xb).all())
    return a.read_bytes() == b.read_bytes()


def m_compare(spec: dict) -> dict:
    """Two cube directories: the same documents and manifests (file by file; the creation
    time aside) and the same values in every array (read through virtualize.open)."""
    import numpy as np

    import virtualize

    a, b = spec["a"], spec["b"]
    for p in (a, b):
        if not os.path.exists(p):
            return {"missing": f"n/a (no cube {Path(p).name})"}
    ta, tb = _tree(a), _tree(b)
    diffs = sorted(set(ta) ^ set(tb))
    diffs += [k for k in sorted(set(ta) & set(tb)) if not _same_file(ta[k], tb[k])]
    t0 = time.perf_counter()
    ga, gb = virtualize.open(a), virtualize.open(b)
    names_a = sorted(n for n, _ in ga.arrays())
    names_b = sorted(n for n, _ in gb.arrays())
    values = names_a == names_b
    cells = 0
    for name in names_a if values else []:
        xa, xb = ga[name][...], gb[name][...]
        cells += xa.size
        if xa.dtype != xb.dtype or xa.shape != xb.shape or \
                not np.array_equal(xa, xb, equal_nan=xa.dtype.kind in "fc"):
            values = False
            diffs.append(f"values of {name}")
    same = not diffs
    return {"identical": same, "wall_s": time.perf_counter() - t0,
            "note": (f"identical: {len(ta)} files, {len(names_a)} arrays, {cells} values"
                     if same else "DIFFER: " + ", ".join(diffs[:6]))}


def m_peer(spec: dict) -> dict:
    """kerchunk (per-file translate + MultiZarrToZarr + JSON dump) or VirtualiZarr
    (open_virtual_mfdataset + to_kerchunk JSON) on the same n files."""
    files, out, fmt = _files(spec, 0, spec["n"]), Path(spec["out"]), spec["fmt"]
    if spec["tool"] == "kerchunk":
        try:
            from kerchunk.combine import MultiZarrToZarr
            if fmt == "nc4":
                from kerchunk.hdf import SingleHdf5ToZarr as Translator
            else:
                from kerchunk.netCDF3 import NetCDF3ToZarr as Translator
        except ImportError as e:
            return {"missing": f"n/a (not installed: {e})"}
        one = _harness.kerchunk_one(Translator)

        def combine():
            return MultiZarrToZarr([one(p) for p in files], concat_dims=["time"],
                                   identical_dims=["lat", "lon"]).translate()
        dt, refs, rise = _timed(_harness.json_job(combine, out))
        return {"wall_s": dt, "rise_mb": rise, "note": _harness.kerchunk_note(refs)}
    import importlib.util

    if importlib.util.find_spec("virtualizarr") is None:
        return {"missing": "n/a (virtualizarr not installed)"}
    from virtualizarr import open_virtual_mfdataset
    from virtualizarr.parsers import HDFParser, NetCDF3Parser

    registry = _harness.local_registry()
    parser = HDFParser() if fmt == "nc4" else NetCDF3Parser()

    def mf():
        return open_virtual_mfdataset([Path(p).as_uri() for p in files], registry=registry,
                                      parser=parser, combine="nested", concat_dim="time",
                                      data_vars="minimal", coords="minimal", compat="override")
    dt, ds, rise = _timed(_harness.to_kerchunk_job(mf, out))
    return {"wall_s": dt, "rise_mb": rise, "note": f"{_harness.dataset_refs(ds)} tas refs"}


def m_open_prepare(spec: dict) -> dict:
    """The 1M-chunk inputs of the open case (kept across runs): one netCDF classic file of
    `chunks` records of tas(4, 4), virtualized to a cube directory, an Icechunk repository
    and a kerchunk JSON."""
    import netCDF4
    import numpy as np

    import virtualize

    d, n = Path(spec["dir"]), spec["chunks"]
    d.mkdir(parents=True, exist_ok=True)
    src = d / f"records_{n}.nc"
    stamp = d / f"done_{n}.json"
    outs = {kind: str(d / f"cube_{n}{ext}") for kind, ext in
            (("cube", ".zarr"), ("icechunk", ".icechunk"), ("kerchunk", ".json"))}
    done = json.loads(stamp.read_text()) if stamp.exists() else {}
    notes = []
    if not src.exists():
        t0 = time.perf_counter()
        with netCDF4.Dataset(str(src) + ".part", "w", format="NETCDF3_64BIT_OFFSET") as nc:
            t, lat, lon, tas = _harness.define_hourly(nc, "virtualize scale benchmark: 1M records",
                                                      4, 4)
            _harness.write_coords(t, lat, lon, n)
            step = 100_000
            for i in range(0, n, step):
                m = min(step, n - i)
                tas[i:i + m] = (280 + np.arange(i, i + m, dtype="f4") % 24)[:, None, None] \
                    * np.ones((1, 4, 4), "f4")
        os.replace(str(src) + ".part", src)
        notes.append(f"source written in {time.perf_counter() - t0:.1f} s")
        done = {}
    for kind, out in outs.items():
        if done.get(kind) and os.path.exists(out):
            continue
        t0 = time.perf_counter()
        try:
            virtualize.virtualize([str(src)], out, overwrite=True, scan_timeout=0)
            done[kind] = True
            notes.append(f"{kind} built in {time.perf_counter() - t0:.1f} s")
        except Exception as e:  # an output kind that cannot be written: its rows say so
            done[kind] = False
            notes.append(f"{kind} FAILED: {type(e).__name__}: {e}"[:300])
        stamp.write_text(json.dumps(done))
    return {"outputs": {k: v for k, v in outs.items() if done.get(k)}, "source": str(src),
            "note": "; ".join(notes) or "cached"}


def m_open(spec: dict) -> dict:
    """Open a cube and read one chunk of tas: virtualize.open + g['tas'][0], or
    xr.open_dataset(engine='virtualize') + ds.tas[0].values."""
    import virtualize

    path, via = spec["path"], spec["via"]
    if via == "xarray":
        import xarray as xr
    _harness.reset_peak_rss()
    gc.collect()
    rss0 = _rss("VmRSS")
    t0 = time.perf_counter()
    if via == "zarr":
        g = virtualize.open(path)
        t1 = time.perf_counter()
        v = g["tas"][0]
        shape = g["tas"].shape
    else:
        ds = xr.open_dataset(path, engine="virtualize")
        t1 = time.perf_counter()
        v = ds["tas"][0].values
        shape = ds["tas"].shape
    t2 = time.perf_counter()
    hwm = _rss("VmHWM")
    return {"open_s": t1 - t0, "read_s": t2 - t1, "wall_s": t2 - t0,
            "rise_mb": None if hwm is None or rss0 is None else (hwm - rss0) / MB,
            "note": f"tas{tuple(shape)}, chunk 0 mean {float(v.mean()):.2f}"}


def m_probe(spec: dict) -> dict:
    """Which features this virtualize has: executor= (virtualize and append), jobs="auto"
    (asked of check() on no files: an old version refuses the jobs value first)."""
    import virtualize

    try:
        virtualize.check([], jobs="auto", scan_timeout=0)
        auto = True
    except Exception as e:
        auto = "jobs" not in str(e)
    return {"executor": _accepts(virtualize.virtualize, "executor"),
            "append_executor": _accepts(virtualize.append, "executor"), "jobs_auto": auto}


MEASURES = {"probe": m_probe, "build": m_build, "append": m_append, "compare": m_compare, "peer": m_peer,
            "open-prepare": m_open_prepare, "open": m_open}


def serve(spec_json: str) -> None:
    """The --_measure mode: one measurement; its result as the last line of stdout."""
    import traceback

    spec = json.loads(spec_json)
    try:
        res = MEASURES[spec["kind"]](spec)
    except Exception as e:
        tb = traceback.format_exc().strip().splitlines()
        res = {"failed": f"{type(e).__name__}: {e}"[:400], "traceback": tb[-6:]}
    res["main_peak_mb"] = _mb(_rss("VmHWM"))
    sys.stdout.flush()
    print("\n" + json.dumps(res), flush=True)


# -- in the runner: a fresh process per measurement, its tree sampled -------------------

def _children_psutil(pid: int) -> list[int]:
    import psutil
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def _children_proc(pid: int) -> list[int]:
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
                parent[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    out, frontier = [], {pid}
    while frontier:
        frontier = {c for c, p in parent.items() if p in frontier}
        out += sorted(frontier)
    return out


def _children_fn():
    try:
        import psutil  # noqa: F401
        return _children_psutil
    except ImportError:
        return _children_proc


def run_measure(spec: dict, timeout: float) -> dict:
    """Run one measurement in a fresh process (this script --_measure SPEC) in its own
    session; sample its descendants' peak resident sets meanwhile. Adds `workers_peak_mb`
    (the largest peak of one descendant), `workers_sum_mb` (the largest sum of their
    resident sets at one sample) and `workers` (each descendant and its peak)."""
    children = _children_fn()
    cmd = [sys.executable, os.path.abspath(__file__), "--_measure", json.dumps(spec)]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, start_new_session=True)
        peaks: dict[int, int] = {}
        names: dict[int, str] = {}
        sum_peak = 0
        deadline = time.monotonic() + timeout
        timed_out = False
        while p.poll() is None:
            total = 0
            for pid in children(p.pid):
                hwm = _harness.proc_field(f"/proc/{pid}/status", "VmHWM", 1024)
                rss = _harness.proc_field(f"/proc/{pid}/status", "VmRSS", 1024)
                if hwm is not None:
                    peaks[pid] = max(peaks.get(pid, 0), hwm)
                    if pid not in names:
                        names[pid] = _name(pid)
                total += rss or 0
            sum_peak = max(sum_peak, total)
            if time.monotonic() > deadline:
                timed_out = True
                try:
                    os.killpg(p.pid, signal.SIGKILL)  # the session this runner started
                except ProcessLookupError:
                    pass
                p.wait()
                break
            time.sleep(0.02)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if timed_out:
        return {"failed": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        last = (stderr.strip().splitlines() or ["no output"])[-1]
        return {"failed": f"exited {p.returncode}: {last}"[:400]}
    res = json.loads(lines[-1])
    res |= {"workers_peak_mb": _mb(max(peaks.values())) if peaks else None,
            "workers_sum_mb": _mb(sum_peak) if peaks else None,
            "workers": sorted(f"{names.get(pid, '?')} {_mb(v):.0f} MB" for pid, v in peaks.items())}
    return res


def _name(pid: int) -> str:
    """What a descendant process is, in a few words (for the JSON)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return "?"
    if "--_measure" in args:  # forked from the measuring process (scan workers)
        return "forked worker"
    return " ".join(Path(args[0]).name if i == 0 else a[:60] for i, a in enumerate(args[:4]))


# -- the plan of a run -------------------------------------------------------------------

class Run:
    def __init__(self, args, workdir: Path) -> None:
        self.args, self.workdir = args, workdir
        self.results: list[dict] = []
        self.features: dict = {}

    def missing(self, mode: str) -> str | None:
        """Why `mode` cannot run with this virtualize (None: it can)."""
        if mode == "auto" and not self.features.get("jobs_auto", True):
            return MISSING + ": jobs='auto'"
        if mode in ("pool", "dask") and not self.features.get("executor", True):
            return MISSING + ": virtualize(executor=)"
        return None

    def measure(self, label: str, spec: dict) -> dict:
        """Run `spec` --repeats times (timed kinds; each in a fresh process) and keep the
        fastest run; `times_s` holds every run's wall time."""
        log(f"  {label} ...")
        repeats = self.args.repeats if spec["kind"] in ("build", "append", "peer", "open") else 1
        runs = []
        for _ in range(max(1, repeats)):
            t0 = time.perf_counter()
            r = run_measure(spec, self.args.timeout)
            log("    " + (why(r) if not ok(r) else
                          f"{r.get('wall_s', 0):.3f} s (main {fmt_mb(r.get('main_peak_mb'))} MB) "
                          f"[{time.perf_counter() - t0:.1f} s]")
                + (f"  {r['note']}" if r.get("note") else ""))
            runs.append(r)
            if not ok(r):
                break
        timed = [r for r in runs if ok(r) and r.get("wall_s") is not None]
        best = min(timed, key=lambda r: r["wall_s"]) if timed else runs[-1]
        r = {"label": label, **{k: v for k, v in spec.items() if k != "list"}, **best}
        if len(timed) > 1:
            r["times_s"] = [x["wall_s"] for x in timed]
        self.results.append(r)
        return r


def ok(r: dict) -> bool:
    return "failed" not in r and "missing" not in r


def why(r: dict) -> str:
    return r.get("missing") or "FAILED: " + r.get("failed", "?")


def fmt_mb(v) -> str:
    return "-" if v is None else f"{v:.0f}"


def run_scale(run: Run, fmt: str, sizes: list[int], lst: Path, cases: list[str],
              modes: list[str]) -> None:
    a, out = run.args, run.workdir / "outputs"
    out.mkdir(exist_ok=True)
    for n in sizes:
        base = {"list": str(lst), "n": n, "fmt": fmt, "workers": a.workers}
        cube = {m: str(out / f"{fmt}_{n}_{m}.zarr") for m in MODES}
        ice = str(out / f"{fmt}_{n}_j1.icechunk")
        if "build" in cases or "append" in cases or "compare" in cases:
            for m in modes:
                spec = {"kind": "build", **base, "mode": m, "out": cube[m], "output": "cube"}
                shutil.rmtree(cube[m], ignore_errors=True)  # never compare a stale cube
                if run.missing(m):
                    run.results.append({"label": f"{fmt} {n} build {m}", **spec,
                                        "missing": run.missing(m)})
                    continue
                run.measure(f"{fmt} {n} build {m}", spec)
        if "append" in cases:
            run.measure(f"{fmt} {n} build icechunk",
                        {"kind": "build", **base, "mode": "j1", "out": ice, "output": "icechunk"})
        if "compare" in cases:
            for m in modes:
                if m != "j1" and not run.missing(m):
                    run.measure(f"{fmt} {n} compare {m} = j1",
                                {"kind": "compare", **base, "mode": m, "a": cube["j1"],
                                 "b": cube[m]})
        if "append" in cases:
            for output, target in (("cube", cube["j1"]), ("icechunk", ice)):
                for k in (1, a.batch):
                    ext = ".icechunk" if output == "icechunk" else ".zarr"
                    run.measure(f"{fmt} {n} append {k} to {output}",
                                {"kind": "append", **base, "k": k, "output": output,
                                 "base": target, "work": str(out / f"append_work{ext}")})
        if "peers" in cases and n <= a.peers_max:
            for tool in ("kerchunk", "virtualizarr"):
                run.measure(f"{fmt} {n} {tool}",
                            {"kind": "peer", **base, "tool": tool,
                             "out": str(out / f"{tool}_{fmt}_{n}.json")})


def run_bench_open(run: Run) -> str | None:
    """The open benchmark of its own (benchmarks/bench_open.py, or --bench-open), when
    present: run with the options its --help names (a work directory under ours; with
    --quick, its --quick or --sizes N) and keep its output (None: not there)."""
    script = run.args.bench_open
    if script is None or not script.exists() or run.args.open_minimal:
        return None
    helptext = subprocess.run([sys.executable, str(script), "--help"], capture_output=True,
                              text=True, timeout=300).stdout
    cmd = [sys.executable, str(script)]
    for opt in ("--workdir", "--work"):
        if opt + " " in helptext or opt + "\n" in helptext or opt + "=" in helptext:
            cmd += [opt, str(run.workdir / "bench_open")]
            break
    if run.args.quick and "--quick" in helptext:
        cmd.append("--quick")
    elif (run.args.quick or run.args.open_chunks != OPEN_CHUNKS) and "--sizes" in helptext:
        cmd += ["--sizes", str(run.args.open_chunks)]
    log(f"  {' '.join(cmd[1:])} ...")
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=run.args.timeout * 4)
    except subprocess.TimeoutExpired:
        return f"{script.name} timed out after {run.args.timeout * 4:.0f} s"
    text = p.stdout.strip()
    if p.returncode != 0:
        text += f"\n({script.name} exited {p.returncode}: " \
                f"{(p.stderr.strip().splitlines() or ['?'])[-1]})"
    return text


def run_open(run: Run) -> None:
    """The minimal 1M-chunk open: build (cached), then each output x (zarr, xarray)."""
    prep = run.measure(f"open: prepare {run.args.open_chunks} chunks",
                       {"kind": "open-prepare", "dir": str(run.workdir / "inputs" / "open"),
                        "chunks": run.args.open_chunks})
    if not ok(prep):
        return
    for kind in ("cube", "icechunk", "kerchunk"):
        path = prep["outputs"].get(kind)
        for via in ("zarr", "xarray"):
            spec = {"kind": "open", "output": kind, "via": via, "chunks": run.args.open_chunks}
            if path is None:
                run.results.append({"label": f"open {kind} {via}", **spec,
                                    "failed": "its build failed (see the prepare row)"})
                continue
            run.measure(f"open {kind} {via}", {**spec, "path": path})


# -- reporting ---------------------------------------------------------------------------

def _find(results, **kw) -> dict | None:
    for r in results:
        if all(r.get(k) == v for k, v in kw.items()):
            return r
    return None


def _cell(r: dict | None, key: str, digits: int = 2) -> str:
    if r is None:
        return "-"
    if not ok(r):
        return why(r)
    v = r.get(key)
    return "-" if v is None else f"{v:.{digits}f}"


def md(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"] + \
        ["| " + " | ".join(r) + " |" for r in rows]


def tables(results: list[dict], formats: list[str], sizes: list[int], modes: list[str],
           batch: int, open_text: str | None) -> list[str]:
    out: list[str] = []
    builds = [r for r in results if r.get("kind") == "build" and r.get("output") == "cube"]
    peers = [r for r in results if r.get("kind") == "peer"]
    if builds or peers:
        rows = []
        for fmt in formats:
            for n in sizes:
                j1 = _find(builds, fmt=fmt, n=n, mode="j1")
                for r in [r for r in builds if r["fmt"] == fmt and r["n"] == n] + \
                        [r for r in peers if r["fmt"] == fmt and r["n"] == n]:
                    tool = MODE_LABEL.get(r.get("mode"), "") if r["kind"] == "build" else r["tool"]
                    if not ok(r):
                        rows.append([FORMAT_LABEL[fmt], f"{n:,}", tool, why(r), "", "", "", "", ""])
                        continue
                    speed = (f"{j1['wall_s'] / r['wall_s']:.2f}x"
                             if j1 and ok(j1) and r["kind"] == "build" else "-")
                    rows.append([FORMAT_LABEL[fmt], f"{n:,}", tool, f"{r['wall_s']:.2f}",
                                 f"{r['wall_s'] / n * 1e3:.2f}", speed,
                                 fmt_mb(r.get("main_peak_mb")) + f" (+{fmt_mb(r.get('rise_mb'))})",
                                 fmt_mb(r.get("workers_peak_mb")), r.get("note") or ""])
        out += ["### End to end (cube directory)", ""]
        out += md(["format", "files", "tool", "wall s", "ms/file", "vs -j 1", "main MB (+MB)",
                   "workers MB", "note"], rows) + [""]

    cmps = [r for r in results if r.get("kind") == "compare"]
    if cmps:
        rows = [[FORMAT_LABEL[r["fmt"]], f"{r['n']:,}", MODE_LABEL[r["mode"]] + " = -j 1",
                 ("yes" if r.get("identical") else "**NO**") if ok(r) else why(r),
                 r.get("note", "") if ok(r) else ""] for r in cmps]
        out += ["### Same cube (manifests + values)", ""]
        out += md(["format", "files", "cube", "identical", "note"], rows) + [""]

    apps = [r for r in results if r.get("kind") == "append"]
    if apps:
        rows = []
        for r in apps:
            full = _find(results, kind="build", fmt=r["fmt"], n=r["n"], mode="j1",
                         output=r["output"])
            pct = (f"{100 * r['wall_s'] / full['wall_s']:.1f} %"
                   if ok(r) and full and ok(full) else "-")
            rows.append([FORMAT_LABEL[r["fmt"]], r["output"], f"{r['n']:,}", f"+{r['k']}",
                         _cell(r, "wall_s"), _cell(full, "wall_s"), pct,
                         fmt_mb(r.get("main_peak_mb")) + f" (+{fmt_mb(r.get('rise_mb'))})"
                         if ok(r) else "",
                         r.get("note", "") if ok(r) else ""])
        out += ["### Append vs full build (-j 1; goal < 5 %)", ""]
        out += md(["format", "output", "cube files", "append", "append s", "full build s",
                   "append / build", "main MB (+MB)", "note"], rows) + [""]

    opens = [r for r in results if r.get("kind") == "open"]
    if opens:
        rows = [[r["output"], f"{r['chunks']:,}",
                 "virtualize.open + g['tas'][0]" if r["via"] == "zarr"
                 else "xr.open_dataset(engine='virtualize') + tas[0]",
                 _cell(r, "open_s", 3), _cell(r, "read_s", 3), _cell(r, "wall_s", 3),
                 fmt_mb(r.get("rise_mb")) if ok(r) else "", r.get("note", "") if ok(r) else ""]
                for r in opens]
        out += ["### Open a 1M-chunk cube and read one chunk (goal < 1 s)", ""]
        out += md(["output", "chunks", "via", "open s", "read s", "total s", "+MB", "note"],
                  rows) + [""]
    if open_text:
        out += ["### Open at scale (bench_open.py)", "", "```", open_text, "```", ""]

    rows = summary(results, formats, sizes, batch)
    if open_text:
        rows.append(["open a 1M-chunk cube / Icechunk repository + read a chunk",
                     "bench_open.py's table above", "< 1 s", "-"])
    out += ["### Summary", ""] + md(["check", "figure", "goal", "met"], rows) + [""]
    return out


def summary(results: list[dict], formats: list[str], sizes: list[int], batch: int) -> list[list[str]]:
    rows = []
    small, big = min(sizes), max(sizes)
    for fmt in formats:
        label = FORMAT_LABEL[fmt]
        for mode in ("dask", "pool"):
            c = _find(results, kind="compare", fmt=fmt, n=big, mode=mode)
            b = _find(results, kind="build", output="cube", fmt=fmt, n=big, mode=mode)
            if c is None and b is not None and not ok(b):
                rows.append([f"{label}, {big:,} files: {MODE_LABEL[mode]} cube = -j 1 cube", why(b),
                             "identical", "-"])
            if c is not None:
                rows.append([f"{label}, {big:,} files: {MODE_LABEL[mode]} cube = -j 1 cube",
                             ("identical" if c.get("identical") else "differs") if ok(c) else why(c),
                             "identical", ("yes" if c.get("identical") else "**no**") if ok(c) else "-"])
        for mode in ("j1", "dask"):
            a = _find(results, kind="build", output="cube", fmt=fmt, n=small, mode=mode)
            b = _find(results, kind="build", output="cube", fmt=fmt, n=big, mode=mode)
            if small != big and a and b and ok(a) and ok(b) and a.get("main_peak_mb"):
                x = b["main_peak_mb"] / a["main_peak_mb"]
                rows.append([f"{label}, {MODE_LABEL[mode]}: main peak RSS {big:,} / {small:,} files",
                             f"{x:.2f} ({b['main_peak_mb']:.0f} / {a['main_peak_mb']:.0f} MB)",
                             "<= 1.2", "yes" if x <= 1.2 else "**no**"])
            elif small != big and b is not None and not ok(b):
                rows.append([f"{label}, {MODE_LABEL[mode]}: main peak RSS {big:,} / {small:,} files",
                             why(b), "<= 1.2", "-"])
            elif mode == "j1" and small == big and b is not None:
                rows.append([f"{label}: flat memory", "n/a (one size; --sizes 1000,10000)",
                             "<= 1.2", "-"])
        for mode in ("j2", "auto", "pool", "dask"):
            a = _find(results, kind="build", output="cube", fmt=fmt, n=big, mode="j1")
            b = _find(results, kind="build", output="cube", fmt=fmt, n=big, mode=mode)
            if a and b and ok(a):
                fig = f"{a['wall_s'] / b['wall_s']:.2f}x" if ok(b) else why(b)
                rows.append([f"{label}, {big:,} files: speed-up of {MODE_LABEL[mode]} over -j 1",
                             fig, "> 1", ("yes" if a["wall_s"] > b["wall_s"] else "**no**")
                             if ok(b) else "-"])
        for output in ("cube", "icechunk"):
            for k in (1, batch):
                r = _find(results, kind="append", fmt=fmt, n=big, k=k, output=output)
                full = _find(results, kind="build", fmt=fmt, n=big, mode="j1", output=output)
                if r and full and ok(full):
                    x = r["wall_s"] / full["wall_s"] if ok(r) else None
                    rows.append([f"{label}, append {k} file(s) to a {big:,}-file {output}",
                                 f"{100 * x:.1f} % of a full build" if x is not None else why(r),
                                 "< 5 %", ("yes" if x < 0.05 else "**no**") if x is not None else "-"])
    for output in ("cube", "icechunk"):
        for via in ("zarr", "xarray"):
            r = _find(results, kind="open", output=output, via=via)
            if r:
                rows.append([f"open {r['chunks']:,}-chunk {output} + read a chunk ({via})",
                             f"{r['wall_s']:.3f} s" if ok(r) else why(r), "< 1 s",
                             ("yes" if r["wall_s"] < 1 else "**no**") if ok(r) else "-"])
    return rows


# -- main --------------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = _harness.parser(__doc__)
    ap.add_argument("--workdir", type=Path,
                    help="inputs (reused across runs) and outputs; default: /tmp/bench_scale")
    ap.add_argument("--sizes", default="1000,10000", help="comma-separated file counts")
    ap.add_argument("--formats", default=",".join(FORMATS), help="of " + ", ".join(FORMATS))
    ap.add_argument("--modes", default=",".join(MODES),
                    help="of " + ", ".join(MODES) + " (j1 is always run: the reference)")
    ap.add_argument("--cases", default=",".join(CASES), help="of " + ", ".join(CASES))
    ap.add_argument("--repeats", "-n", type=int, default=1,
                    help="fresh-process runs of each timed measurement; the fastest is shown")
    ap.add_argument("--batch", type=int, default=24, help="files of the batch append (a day)")
    ap.add_argument("--workers", type=int, default=2, help="processes of the executor / dask rows")
    ap.add_argument("--peers-max", type=int, default=1000,
                    help="run kerchunk / VirtualiZarr only on sizes up to this")
    ap.add_argument("--open-chunks", type=int, default=OPEN_CHUNKS, help="chunks of the open case")
    ap.add_argument("--bench-open", type=Path, default=HERE / "bench_open.py",
                    help="the open benchmark run for the open case when it exists "
                    "(default: benchmarks/bench_open.py)")
    ap.add_argument("--open-minimal", action="store_true",
                    help="measure the open here (a minimal version) even when --bench-open exists")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: sizes 50,150, batch 4, 20,000-chunk open, peers on 50 files")
    ap.add_argument("--json", action="store_true",
                    help="print results as JSON on stdout (the tables go to stderr)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per measurement")
    ap.add_argument("--_measure", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._measure:
        serve(args._measure)
        return 0
    MODE_LABEL["pool"] = f"executor=ProcessPool({args.workers})"
    if args.quick:
        args.sizes, args.batch, args.open_chunks = "50,150", 4, 20_000
        args.peers_max = min(args.peers_max, 50)
    sizes = sorted({int(s) for s in args.sizes.split(",") if s})
    formats = _harness.pick(ap, args.formats, FORMATS, "format")
    modes = _harness.pick(ap, args.modes, MODES, "mode")
    modes = ["j1"] + [m for m in modes if m != "j1"]
    cases = _harness.pick(ap, args.cases, CASES, "case")
    workdir = args.workdir or Path(tempfile.gettempdir()) / "bench_scale"
    workdir.mkdir(parents=True, exist_ok=True)

    run = Run(args, workdir)
    t0 = time.perf_counter()
    probe = run_measure({"kind": "probe"}, 300)
    run.features = {k: probe[k] for k in ("executor", "append_executor", "jobs_auto") if k in probe}
    log(f"features: {run.features or probe}")
    if set(cases) - {"open"}:
        for fmt in formats:
            log(f"{FORMAT_LABEL[fmt]}: inputs")
            lst = make_inputs(workdir / "inputs", fmt, max(sizes) + args.batch)
            run_scale(run, fmt, sizes, lst, cases, modes)
    open_text = None
    if "open" in cases:
        log("open")
        open_text = run_bench_open(run)
        if open_text is None:
            run_open(run)
    env = _harness.environment(PACKAGES)
    doc = {"environment": env,
           "parameters": {"sizes": sizes, "formats": formats, "modes": modes, "cases": cases,
                          "batch": args.batch, "workers": args.workers,
                          "repeats": args.repeats,
                          "open_chunks": args.open_chunks, "quick": args.quick,
                          "seconds": round(time.perf_counter() - t0, 1)},
           "results": run.results, "bench_open": open_text}
    lines = [f"# sizes {', '.join(f'{n:,}' for n in sizes)}; batch {args.batch}; "
             f"{args.workers} workers; fastest of {args.repeats}; "
             f"whole run {doc['parameters']['seconds']:.0f} s", ""]
    lines += tables(run.results, formats, sizes, modes, args.batch, open_text)
    _harness.report(doc, args.json, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
