#!/usr/bin/env python
"""Speed and memory of virtualize on netCDF-4 / HDF5 input, against kerchunk and
VirtualiZarr, measured in the same run on the same files.

    python benchmarks/bench_hdf5.py                 # full run: 100,000-chunk file + 12-month stack
    python benchmarks/bench_hdf5.py --quick         # small files, 1 repeat (a smoke test)
    python benchmarks/bench_hdf5.py --json > r.json # machine-readable results
    python benchmarks/bench_hdf5.py --profile       # also cProfile virtualize.scan on the big file

Cases (each tool does the nearest equivalent of the same job):

  scan-100k   one file, tas(time=100000, lat=4, lon=4) chunked (1,4,4), shuffle+zlib:
              virtualize.scan(path) | SingleHdf5ToZarr(path, inline_threshold=0).translate()
              | open_virtual_dataset(url, registry, HDFParser())  (and the parser alone)
  job-100k    the same file to an output on disk: virtualize.virtualize(path, cube.zarr)
              | translate + json dump | open_virtual_dataset + .vz.to_kerchunk(json)
  stack-check 12 monthly files, tas/pr(time=1, lat=90, lon=180), one chunk each, in memory:
              virtualize.check(files) (scan + plan) | 12 x translate + MultiZarrToZarr
              | open_virtual_mfdataset(..., combine="nested", concat_dim="time")
  stack-job   the stack to an output on disk: virtualize.virtualize(files, cube.zarr)
              | the above + json dump | the above + .vz.to_kerchunk(json)

Every (tool, case) runs in a fresh worker process (this script with --_worker): imports
and one warm-up call on a small file happen before measuring, then N timed repeats
(median reported), then one more run under tracemalloc. Reported per row:

  median s   wall time, median of N repeats (min s: the fastest; on a shared machine
             the min is the steadier figure, the median the one we track)
  py MB      peak of Python-tracked allocations (tracemalloc; numpy buffers included,
             HDF5's own C allocations not)
  RSS MB     rise of the worker's peak resident set (VmHWM, reset before measuring) over
             its resident set after imports and warm-up
  read       bytes the process read from files per repeat (/proc/self/io rchar: every
             read/pread syscall, so the same yardstick for all tools); virtualize's own
             count of the bytes HDF5 asked for (scan().bytes_read) is shown in the note
  x virt.    median time / virtualize's median time for the same case

A tool that is not installed, or that fails on a case, is reported with the reason and
the run goes on.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import traceback
from datetime import datetime, timezone
from pathlib import Path

CASES = ("scan-100k", "job-100k", "stack-check", "stack-job")
TOOLS = ("virtualize", "virtualize-json", "kerchunk", "virtualizarr", "virtualizarr-parser")
# which tools run which cases (the variants only where they say something new)
PLAN = {
    "virtualize": CASES,
    "virtualize-json": ("job-100k", "stack-job"),
    "kerchunk": CASES,
    "virtualizarr": CASES,
    "virtualizarr-parser": ("scan-100k",),
}
MB = 1024 * 1024


# -- input files -----------------------------------------------------------------------

def make_files(workdir: Path, n_time: int, n_months: int, ny: int, nx: int) -> dict:
    """Write the benchmark inputs with netCDF4-python (netCDF-C + HDF5 underneath), the
    way model output is written: unlimited time, CF attributes, shuffle + deflate level 1.
    Reuses files from an earlier run with the same parameters."""
    import netCDF4
    import numpy as np

    stamp = workdir / "params.json"
    params = {"n_time": n_time, "n_months": n_months, "ny": ny, "nx": nx, "v": 2}
    big = workdir / f"tas_{n_time}chunks.nc"
    stack_dir = workdir / "stack"
    months = [stack_dir / f"tas_pr_mon_2000{m + 1:02d}.nc" for m in range(n_months)]
    if stamp.exists() and json.loads(stamp.read_text()) == params and big.exists() \
            and all(p.exists() for p in months):
        return {"big": str(big), "stack": [str(p) for p in months]}
    workdir.mkdir(parents=True, exist_ok=True)
    stack_dir.mkdir(exist_ok=True)
    rng = np.random.default_rng(42)

    # (a) one file, n_time chunks of (1, 4, 4)
    with netCDF4.Dataset(big, "w", format="NETCDF4") as nc:
        nc.Conventions = "CF-1.8"
        nc.title = "virtualize benchmark: many small chunks"
        nc.createDimension("time", None)
        nc.createDimension("lat", 4)
        nc.createDimension("lon", 4)
        nc.createDimension("bnds", 2)
        t = nc.createVariable("time", "f8", ("time",))
        t.units, t.calendar, t.standard_name = "hours since 2000-01-01", "standard", "time"
        lat = nc.createVariable("lat", "f8", ("lat",))
        lat.units, lat.standard_name = "degrees_north", "latitude"
        lon = nc.createVariable("lon", "f8", ("lon",))
        lon.units, lon.standard_name = "degrees_east", "longitude"
        tas = nc.createVariable("tas", "f4", ("time", "lat", "lon"), chunksizes=(1, 4, 4),
                                zlib=True, complevel=1, shuffle=True, fill_value=np.float32(1e20))
        tas.units, tas.standard_name = "K", "air_temperature"
        lat[:] = [-67.5, -22.5, 22.5, 67.5]
        lon[:] = [45.0, 135.0, 225.0, 315.0]
        t[:] = np.arange(n_time, dtype="f8")
        base = 280 + 20 * np.cos(np.deg2rad(lat[:]))[None, :, None]
        cycle = 5 * np.sin(2 * np.pi * np.arange(n_time) / 24.0)[:, None, None]
        tas[:] = (base + cycle + rng.normal(0, 0.5, (n_time, 4, 4))).astype("f4")

    # (b) a stack of monthly files, one chunk per variable per month
    lats = np.linspace(-89, 89, ny)
    lons = np.linspace(0, 358, nx)
    for m, path in enumerate(months):
        with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
            nc.Conventions = "CF-1.8"
            nc.title = "virtualize benchmark: monthly means"
            nc.createDimension("time", None)
            nc.createDimension("lat", ny)
            nc.createDimension("lon", nx)
            nc.createDimension("bnds", 2)
            t = nc.createVariable("time", "f8", ("time",))
            t.units, t.calendar, t.bounds = "days since 2000-01-01", "standard", "time_bnds"
            tb = nc.createVariable("time_bnds", "f8", ("time", "bnds"))
            lat = nc.createVariable("lat", "f8", ("lat",))
            lat.units = "degrees_north"
            lon = nc.createVariable("lon", "f8", ("lon",))
            lon.units = "degrees_east"
            lat[:], lon[:] = lats, lons
            t[:] = [m * 30.4 + 15.2]
            tb[:] = [[m * 30.4, (m + 1) * 30.4]]
            field = 280 + 25 * np.cos(np.deg2rad(lats))[:, None] + 0 * lons[None, :]
            for name, units, data in (
                ("tas", "K", field + rng.normal(0, 1, (ny, nx))),
                ("pr", "kg m-2 s-1", np.abs(rng.gamma(0.5, 3e-5, (ny, nx)))),
            ):
                v = nc.createVariable(name, "f4", ("time", "lat", "lon"), chunksizes=(1, ny, nx),
                                      zlib=True, complevel=1, shuffle=True,
                                      fill_value=np.float32(1e20))
                v.units = units
                v[0] = data.astype("f4")
    stamp.write_text(json.dumps(params))
    return {"big": str(big), "stack": [str(p) for p in months]}


# -- the jobs each tool does -------------------------------------------------------------

def _url(path: str) -> str:
    return Path(path).resolve().as_uri()


def tool_ops(tool: str, case: str, files: dict, out: Path):
    """(warmup, run, summarize): `run()` does the timed work and returns its result;
    `summarize(result)` says in a few words what came out (for the note column)."""
    big, stack = files["big"], files["stack"]
    small = stack[0]

    if tool in ("virtualize", "virtualize-json"):
        import virtualize

        ext = ".json" if tool == "virtualize-json" else ".zarr"
        if case == "scan-100k":
            def run():
                return virtualize.scan(big)

            def summarize(inv):
                refs = inv.variables["tas"].blocks.refs
                return (f"{int((refs['length'] > 0).sum())} tas refs; HDF5 asked for "
                        f"{inv.bytes_read:,} B")
            return (lambda: virtualize.scan(small)), run, summarize
        srcs = [big] if case == "job-100k" else stack
        if case == "stack-check":
            def run():
                return virtualize.check(stack)
        else:
            target = out / f"virtualize_{case}{ext}"

            def run():
                return virtualize.virtualize(srcs, target, overwrite=True)

        def summarize(rep):
            return (f"ok={rep.ok} problems={len(rep.problems)}; HDF5 asked for "
                    f"{sum(rep.bytes_read.values()):,} B")
        return (lambda: virtualize.check([small])), run, summarize

    if tool == "kerchunk":
        import ujson
        from kerchunk.hdf import SingleHdf5ToZarr

        def one(path):
            return SingleHdf5ToZarr(path, inline_threshold=0).translate()

        def nrefs(refs):
            r = refs.get("refs", refs)
            return sum(1 for k in r if k.startswith("tas/") and not k.rsplit("/", 1)[1].startswith("."))

        def zfmt(refs):
            r = refs.get("refs", refs)
            return "zarr v3" if any(k.endswith("zarr.json") for k in r) else "zarr v2"

        if case == "scan-100k":
            return (lambda: one(small)), (lambda: one(big)), \
                (lambda refs: f"{nrefs(refs)} tas refs, {zfmt(refs)}")
        if case == "job-100k":
            target = out / "kerchunk_job-100k.json"

            def run():
                refs = one(big)
                with open(target, "w") as f:
                    ujson.dump(refs, f)
                return refs
            return (lambda: one(small)), run, (lambda refs: f"{nrefs(refs)} tas refs, {zfmt(refs)} json")

        from kerchunk.combine import MultiZarrToZarr

        def combine():
            singles = [one(p) for p in stack]
            return MultiZarrToZarr(singles, concat_dims=["time"],
                                   identical_dims=["lat", "lon", "bnds"]).translate()
        if case == "stack-check":
            run = combine
        else:
            target = out / "kerchunk_stack-job.json"

            def run():
                refs = combine()
                with open(target, "w") as f:
                    ujson.dump(refs, f)
                return refs
        return (lambda: one(small)), run, (lambda refs: f"{nrefs(refs)} tas refs, {zfmt(refs)}")

    if tool in ("virtualizarr", "virtualizarr-parser"):
        import warnings

        from obspec_utils.registry import ObjectStoreRegistry
        from obstore.store import LocalStore
        from virtualizarr import open_virtual_dataset, open_virtual_mfdataset
        from virtualizarr.parsers import HDFParser

        warnings.filterwarnings("ignore")
        registry = ObjectStoreRegistry({"file://": LocalStore()})

        def ovd(path):
            return open_virtual_dataset(_url(path), registry=registry, parser=HDFParser())

        def nrefs(ds):
            m = ds["tas"].data.manifest
            return f"{int((m._lengths > 0).sum())} tas refs"

        if tool == "virtualizarr-parser":
            # the parser alone: file -> ManifestStore, no xarray, no coordinate loading
            def run():
                return HDFParser()(_url(big), registry)

            def summarize(ms):
                m = ms._group.arrays["tas"].manifest
                return f"{int((m._lengths > 0).sum())} tas refs (ManifestStore)"
            return (lambda: HDFParser()(_url(small), registry)), run, summarize
        if case == "scan-100k":
            return (lambda: ovd(small)), (lambda: ovd(big)), nrefs
        if case == "job-100k":
            target = out / "virtualizarr_job-100k.json"

            def run():
                ds = ovd(big)
                ds.vz.to_kerchunk(str(target), format="json")
                return ds
            return (lambda: ovd(small)), run, (lambda ds: nrefs(ds) + ", kerchunk json (zarr v2)")

        def mf():
            return open_virtual_mfdataset([_url(p) for p in stack], registry=registry,
                                          parser=HDFParser(), combine="nested",
                                          concat_dim="time", data_vars="minimal",
                                          coords="minimal", compat="override")
        if case == "stack-check":
            run = mf
        else:
            target = out / "virtualizarr_stack-job.json"

            def run():
                ds = mf()
                ds.vz.to_kerchunk(str(target), format="json")
                return ds
        return (lambda: ovd(small)), run, (lambda ds: f"{nrefs(ds)}, tas{tuple(ds['tas'].shape)}")

    raise ValueError(f"unknown tool {tool}")


# -- measuring, in a worker process ------------------------------------------------------

def _proc_status(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _rchar() -> int | None:
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("rchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def worker(spec: dict) -> dict:
    tool, case, repeats = spec["tool"], spec["case"], spec["repeats"]
    res: dict = {"tool": tool, "case": case}
    try:
        warmup, run, summarize = tool_ops(tool, case, spec["files"], Path(spec["out"]))
    except ImportError as e:
        return res | {"skipped": f"not installed ({e})"}
    try:
        warmup()  # lazy imports, first-call caches; on a small file
        gc.collect()
        hwm_reset = _reset_peak_rss()
        rss0 = _proc_status("VmRSS")
        times, reads, note = [], [], None
        for i in range(repeats):
            r0 = _rchar()
            t0 = time.perf_counter()
            result = run()
            times.append(time.perf_counter() - t0)
            r1 = _rchar()
            if r0 is not None and r1 is not None:
                reads.append(r1 - r0)
            if note is None:
                note = summarize(result)
            del result
        hwm = _proc_status("VmHWM")
        gc.collect()
        tracemalloc.start()
        result = run()
        py_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        del result
    except Exception as e:  # a peer tool failing on these files is a result, not a crash
        tb = traceback.format_exc().strip().splitlines()
        return res | {"failed": f"{type(e).__name__}: {e}"[:400], "traceback": tb[-8:]}
    return res | {
        "repeats": repeats,
        "times_s": times,
        "median_s": statistics.median(times),
        "py_peak_mb": py_peak / MB,
        "rss_delta_mb": (hwm - rss0) / MB if hwm is not None and rss0 is not None else None,
        "rss_peak_exact": hwm_reset,
        "bytes_read": int(statistics.median(reads)) if reads else None,
        "note": note,
    }


def run_worker(spec: dict, timeout: float) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--_worker", json.dumps(spec)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"tool": spec["tool"], "case": spec["case"], "failed": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        err = (p.stderr.strip().splitlines() or ["no output"])[-1]
        return {"tool": spec["tool"], "case": spec["case"],
                "failed": f"worker exited {p.returncode}: {err}"[:400]}
    return json.loads(lines[-1])


# -- reporting ---------------------------------------------------------------------------

def environment() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    vers = {}
    for pkg in ("virtualize", "h5py", "numpy", "zarr", "kerchunk", "virtualizarr", "obstore",
                "xarray", "netCDF4"):
        try:
            vers[pkg] = version(pkg)
        except PackageNotFoundError:
            vers[pkg] = None
    try:
        import h5py
        vers["HDF5"] = h5py.version.hdf5_version
    except ImportError:
        pass
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.system()} {platform.machine()}, {cpu}, "
                       f"{os.cpu_count()} cores", "python": platform.python_version(),
            "versions": vers}


def table(results: list[dict]) -> str:
    base = {r["case"]: r["median_s"] for r in results if r["tool"] == "virtualize" and "median_s" in r}
    head = f"{'tool':<20} {'case':<12} {'median s':>9} {'min s':>7} {'py MB':>8} {'RSS MB':>8} {'read':>10} {'x virt.':>8}  note"
    lines = [head, "-" * len(head)]
    for r in results:
        if "median_s" not in r:
            why = r.get("skipped") or "FAILED: " + r.get("failed", "?")
            lines.append(f"{r['tool']:<20} {r['case']:<12} {'-':>9} {'-':>7} {'-':>8} {'-':>8} {'-':>10} {'-':>8}  {why}")
            continue
        ratio = f"{r['median_s'] / base[r['case']]:.1f}x" if base.get(r["case"]) else "-"
        rss = f"{r['rss_delta_mb']:.1f}" if r.get("rss_delta_mb") is not None else "-"
        read = _human(r["bytes_read"]) if r.get("bytes_read") is not None else "-"
        lines.append(f"{r['tool']:<20} {r['case']:<12} {r['median_s']:>9.3f} {min(r['times_s']):>7.3f} "
                     f"{r['py_peak_mb']:>8.1f} "
                     f"{rss:>8} {read:>10} {ratio:>8}  {r.get('note') or ''}")
    return "\n".join(lines)


def _human(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def profile_scan(path: str, var: str = "tas", top: int = 20) -> str:
    """Where virtualize.scan's time goes on one file: a split of the chunk-index pass into
    HDF5's own index walk, h5py's per-chunk callback machinery and virtualize's share, then
    cProfile's top functions by own time.

    cProfile cannot see inside DatasetID.chunk_iter (compiled Cython): its HDF5 walk and
    its per-chunk StoreInfo construction are charged to the caller (`_blocks`), which is
    why the split is measured directly."""
    import cProfile
    import io
    import pstats

    import h5py

    import virtualize

    def med(fn, n=7):
        ts = []
        for _ in range(n):
            gc.collect()
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    def num_chunks():
        with h5py.File(path, "r") as f:
            return f[var].id.get_num_chunks()

    def chunk_iter_noop():
        with h5py.File(path, "r") as f:
            f[var].id.chunk_iter(lambda info: None)

    virtualize.scan(path)  # warm
    n = num_chunks()
    t_scan, t_walk, t_iter = med(lambda: virtualize.scan(path)), med(num_chunks), med(chunk_iter_noop)
    out = io.StringIO()
    out.write(f"virtualize.scan, whole                             {t_scan * 1e3:7.1f} ms\n"
              f"  HDF5 index walk (open + get_num_chunks, no Python per chunk) {t_walk * 1e3:7.1f} ms\n"
              f"  h5py chunk_iter with a no-op callback              {t_iter * 1e3:7.1f} ms "
              f"({(t_iter - t_walk) / n * 1e9:.0f} ns/chunk over the walk: StoreInfo + call)\n"
              f"  rest: virtualize's callback, numpy, attributes, coords {(t_scan - t_iter) * 1e3:7.1f} ms\n"
              f"  ({n} chunks)\n\n")
    pr = cProfile.Profile()
    pr.enable()
    virtualize.scan(path)
    pr.disable()
    pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


# -- main --------------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", type=Path, help="where to write inputs and outputs "
                    "(default: a temporary directory, removed afterwards)")
    ap.add_argument("--repeats", "-n", type=int, default=3, help="timed repeats per row (median)")
    ap.add_argument("--chunks", type=int, default=100_000, help="chunks in the big file")
    ap.add_argument("--months", type=int, default=12, help="files in the stack")
    ap.add_argument("--grid", default="90x180", help="lat x lon of the monthly files")
    ap.add_argument("--quick", action="store_true",
                    help="small run: 10,000 chunks, 1 repeat")
    ap.add_argument("--tools", default=",".join(TOOLS), help="comma-separated subset of " + ", ".join(TOOLS))
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of " + ", ".join(CASES))
    ap.add_argument("--json", action="store_true", help="print results as JSON on stdout (the table goes to stderr)")
    ap.add_argument("--profile", action="store_true",
                    help="also cProfile virtualize.scan on the big file")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per row before giving up")
    ap.add_argument("--_worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args._worker:
        print(json.dumps(worker(json.loads(args._worker))))
        return 0

    if args.quick:
        args.chunks = min(args.chunks, 10_000)
        args.repeats = 1
    ny, nx = (int(v) for v in args.grid.lower().split("x"))
    tools = [t for t in args.tools.split(",") if t]
    cases = [c for c in args.cases.split(",") if c]
    for t in tools:
        if t not in TOOLS:
            ap.error(f"unknown tool {t!r}")
    for c in cases:
        if c not in CASES:
            ap.error(f"unknown case {c!r}")
    log = (lambda *a: print(*a, file=sys.stderr, flush=True))

    tmp = None
    workdir = args.workdir
    if workdir is None:
        tmp = tempfile.mkdtemp(prefix="bench_hdf5_")
        workdir = Path(tmp)
    try:
        t0 = time.perf_counter()
        files = make_files(workdir / "inputs", args.chunks, args.months, ny, nx)
        log(f"inputs ready in {time.perf_counter() - t0:.1f} s under {workdir}: "
            f"{Path(files['big']).name} ({os.path.getsize(files['big']) / MB:.1f} MB), "
            f"{len(files['stack'])} monthly files")
        out = workdir / "outputs"
        out.mkdir(exist_ok=True)
        results = []
        for case in cases:
            for tool in tools:
                if case not in PLAN[tool]:
                    continue
                log(f"  {tool} / {case} ...")
                spec = {"tool": tool, "case": case, "repeats": args.repeats,
                        "files": files, "out": str(out)}
                r = run_worker(spec, args.timeout)
                if "median_s" in r:
                    log(f"    {r['median_s']:.3f} s")
                else:
                    log(f"    {r.get('skipped') or 'FAILED: ' + r.get('failed', '?')}")
                results.append(r)
        doc = {"environment": environment(),
               "parameters": {"chunks": args.chunks, "months": args.months, "grid": [ny, nx],
                              "repeats": args.repeats,
                              "big_file_bytes": os.path.getsize(files["big"]),
                              "stack_bytes": sum(os.path.getsize(p) for p in files["stack"])},
               "results": results}
        if args.profile:
            doc["profile_scan"] = profile_scan(files["big"])
        # with --json the JSON goes to stdout and the table to stderr
        show = log if args.json else print
        env = doc["environment"]
        show(f"# {env['date']} | {env['machine']} | Python {env['python']}")
        show("# " + ", ".join(f"{k} {v}" for k, v in env["versions"].items() if v))
        p = doc["parameters"]
        show(f"# big file: {p['chunks']} chunks, {p['big_file_bytes'] / MB:.1f} MB; stack: "
             f"{p['months']} files {ny}x{nx}, {p['stack_bytes'] / MB:.1f} MB; "
             f"median of {p['repeats']}")
        show(table(results))
        if args.profile:
            show("\n# cProfile of virtualize.scan on the big file (by own time)")
            show(doc["profile_scan"])
        if args.json:
            print(json.dumps(doc, indent=1))
        return 0
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
