#!/usr/bin/env python
"""Speed of virtualize on a netCDF classic file with many records, against VirtualiZarr
and kerchunk, measured in the same run on the same file.

    python benchmarks/bench_netcdf3.py                 # 80,000 records, median of 5
    python benchmarks/bench_netcdf3.py --quick         # 8,000 records, 1 repeat (smoke test)
    python benchmarks/bench_netcdf3.py --json > r.json # machine-readable (table on stderr)

The input: one NETCDF3_64BIT_OFFSET (CDF-2) file written by netCDF4-python with an
unlimited `time` and three record variables, time (f8), tas (f4, 4 x 4) and count
(i2, 4 x 4), so records are interleaved (104 bytes a record, 8.3 MB for 80,000 records):
every record of tas is its own chunk, 80,000 chunk references per variable.

Cases (each tool does the nearest equivalent of the same job):

  scan   the file to references in memory:
           virtualize           virtualize.scan(path)   (header + the time values)
           virtualizarr-parser  NetCDF3Parser()(url, registry)   (header only: a
                                ManifestStore, no coordinate values read)
           virtualizarr         open_virtual_dataset(url, registry=..., parser=NetCDF3Parser())
                                (header + loads `time` through its 80,000 chunks)
           kerchunk             NetCDF3ToZarr(path, inline_threshold=0).translate()  (needs scipy)
  job    the file to an output on disk:
           virtualize           virtualize.virtualize(path, "cube.zarr")
           virtualize-json      virtualize.virtualize(path, "refs.json")  (kerchunk JSON)
           virtualizarr         open_virtual_dataset + .vz.to_kerchunk(json)
           kerchunk             translate() + JSON dump

Every (tool, case) runs in a fresh worker process (this script with --_worker): imports
and one warm-up call on a small file first, then up to N timed repeats (fewer when a tool
has used up --budget seconds; at least one), median reported. The file is in the page
cache (it was just written or read), so times are warm-cache times. Columns:

  median s  wall time, median of the repeats (runs = how many)
  read      bytes the process read from files per repeat (/proc/self/io rchar: every
            read syscall, the same yardstick for all tools); for virtualize the note
            also gives its own count (scan().bytes_read)
  RSS MB    rise of the worker's peak resident set (VmHWM, reset before measuring)
  x virt.   median / virtualize's median for the same case (> 1: virtualize is faster)

A tool that is not installed, or that fails, is reported with the reason; the run goes on.
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
import traceback
from datetime import datetime, timezone
from pathlib import Path

CASES = ("scan", "job")
TOOLS = ("virtualize", "virtualize-json", "virtualizarr-parser", "virtualizarr", "kerchunk")
PLAN = {
    "virtualize": CASES,
    "virtualize-json": ("job",),
    "virtualizarr-parser": ("scan",),
    "virtualizarr": CASES,
    "kerchunk": CASES,
}
MB = 1024 * 1024
NY = NX = 4


# -- the input ---------------------------------------------------------------------------

def write_file(path: Path, n_records: int) -> None:
    import netCDF4
    import numpy as np

    rng = np.random.default_rng(42)
    with netCDF4.Dataset(path, "w", format="NETCDF3_64BIT_OFFSET") as nc:
        nc.Conventions = "CF-1.8"
        nc.title = "virtualize benchmark: many interleaved records"
        nc.createDimension("time", None)
        nc.createDimension("lat", NY)
        nc.createDimension("lon", NX)
        t = nc.createVariable("time", "f8", ("time",))
        t.units, t.calendar, t.standard_name = "hours since 2000-01-01", "standard", "time"
        lat = nc.createVariable("lat", "f8", ("lat",))
        lat.units, lat.standard_name = "degrees_north", "latitude"
        lon = nc.createVariable("lon", "f8", ("lon",))
        lon.units, lon.standard_name = "degrees_east", "longitude"
        tas = nc.createVariable("tas", "f4", ("time", "lat", "lon"), fill_value=np.float32(1e20))
        tas.units, tas.standard_name = "K", "air_temperature"
        count = nc.createVariable("count", "i2", ("time", "lat", "lon"))
        count.long_name = "number of observations"
        lat[:] = [-67.5, -22.5, 22.5, 67.5]
        lon[:] = [45.0, 135.0, 225.0, 315.0]
        t[:] = np.arange(n_records, dtype="f8")
        tas[:] = (280 + rng.normal(0, 2, (n_records, NY, NX))).astype("f4")
        count[:] = rng.integers(0, 1000, (n_records, NY, NX)).astype("i2")


def make_files(workdir: Path, n_records: int) -> dict:
    """The big file and a small warm-up file; reused when the parameters match."""
    workdir.mkdir(parents=True, exist_ok=True)
    stamp = workdir / "params.json"
    params = {"records": n_records, "grid": [NY, NX], "v": 1}
    big = workdir / f"records_{n_records}.nc"
    small = workdir / "records_100.nc"
    if not (stamp.exists() and json.loads(stamp.read_text()) == params and big.exists()
            and small.exists()):
        write_file(big, n_records)
        write_file(small, 100)
        stamp.write_text(json.dumps(params))
    return {"big": str(big), "small": str(small)}


# -- the jobs each tool does -------------------------------------------------------------

def tool_ops(tool: str, case: str, files: dict, out: Path):
    """(warmup, run, summarize): `run()` does the timed work and returns its result;
    `summarize(result)` says in a few words what came out."""
    big, small = files["big"], files["small"]
    url, small_url = Path(big).resolve().as_uri(), Path(small).resolve().as_uri()

    if tool in ("virtualize", "virtualize-json"):
        import virtualize

        if case == "scan":
            def summarize(inv):
                refs = inv.variables["tas"].blocks.refs
                return (f"{int((refs['length'] > 0).sum())} tas refs; "
                        f"scan().bytes_read {inv.bytes_read:,} B")
            return (lambda: virtualize.scan(small)), (lambda: virtualize.scan(big)), summarize
        target = out / ("virtualize.json" if tool == "virtualize-json" else "virtualize.zarr")

        def run():
            return virtualize.virtualize(big, target, overwrite=True)

        def summarize(rep):
            a = rep.plan.arrays["tas"]
            return (f"ok={rep.ok}, tas{a.shape} in {a.refs.size} chunks; "
                    f"scan().bytes_read {sum(rep.bytes_read.values()):,} B")
        warm = out / ("warm.json" if tool == "virtualize-json" else "warm.zarr")
        return (lambda: virtualize.virtualize(small, warm, overwrite=True)), run, summarize

    if tool == "kerchunk":
        import ujson
        from kerchunk.netCDF3 import NetCDF3ToZarr  # ImportError without scipy

        def one(path):
            return NetCDF3ToZarr(path, inline_threshold=0).translate()

        def summarize(refs):
            r = refs.get("refs", refs)
            n = sum(1 for k in r
                    if k.startswith("tas/") and not k.rsplit("/", 1)[1].startswith("."))
            fmt = "zarr v3" if any(k.endswith("zarr.json") for k in r) else "zarr v2"
            return f"{n} tas refs, {fmt}"
        if case == "scan":
            return (lambda: one(small)), (lambda: one(big)), summarize
        target = out / "kerchunk.json"

        def run():
            refs = one(big)
            with open(target, "w") as f:
                ujson.dump(refs, f)
            return refs
        return (lambda: one(small)), run, summarize

    if tool in ("virtualizarr", "virtualizarr-parser"):
        import warnings

        from obspec_utils.registry import ObjectStoreRegistry
        from obstore.store import LocalStore
        from virtualizarr import open_virtual_dataset
        from virtualizarr.parsers import NetCDF3Parser

        warnings.filterwarnings("ignore")
        registry = ObjectStoreRegistry({"file://": LocalStore()})

        if tool == "virtualizarr-parser":
            def summarize(ms):
                m = ms._group.arrays["tas"].manifest
                return f"{int((m._lengths > 0).sum())} tas refs (ManifestStore, no values read)"
            return (lambda: NetCDF3Parser()(small_url, registry)), \
                (lambda: NetCDF3Parser()(url, registry)), summarize

        def ovd(u):
            return open_virtual_dataset(u, registry=registry, parser=NetCDF3Parser())

        def summarize(ds):
            m = ds["tas"].data.manifest
            return f"{int((m._lengths > 0).sum())} tas refs; time loaded ({ds.time.size})"
        if case == "scan":
            return (lambda: ovd(small_url)), (lambda: ovd(url)), summarize
        target = out / "virtualizarr.json"

        def run():
            ds = ovd(url)
            ds.vz.to_kerchunk(str(target), format="json")
            return ds
        return (lambda: ovd(small_url)), run, (lambda ds: summarize(ds) + ", kerchunk json")

    raise ValueError(f"unknown tool {tool}")


# -- measuring, in a worker process ------------------------------------------------------

def _proc_field(path: str, field: str, scale: int = 1) -> int | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * scale
    except OSError:
        pass
    return None


def _reset_peak_rss() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def worker(spec: dict) -> dict:
    tool, case = spec["tool"], spec["case"]
    res: dict = {"tool": tool, "case": case}
    try:
        warmup, run, summarize = tool_ops(tool, case, spec["files"], Path(spec["out"]))
    except ImportError as e:
        return res | {"skipped": f"not installed ({e})"}
    try:
        warmup()
        gc.collect()
        _reset_peak_rss()
        rss0 = _proc_field("/proc/self/status", "VmRSS", 1024)
        times, reads, note = [], [], None
        started = time.perf_counter()
        while len(times) < spec["repeats"]:
            r0 = _proc_field("/proc/self/io", "rchar")
            t0 = time.perf_counter()
            result = run()
            times.append(time.perf_counter() - t0)
            r1 = _proc_field("/proc/self/io", "rchar")
            if r0 is not None and r1 is not None:
                reads.append(r1 - r0)
            if note is None:
                note = summarize(result)
            del result
            if time.perf_counter() - started > spec["budget"]:
                break
        hwm = _proc_field("/proc/self/status", "VmHWM", 1024)
    except Exception as e:  # a peer tool failing on this file is a result, not a crash
        tb = traceback.format_exc().strip().splitlines()
        return res | {"failed": f"{type(e).__name__}: {e}"[:400], "traceback": tb[-8:]}
    return res | {
        "runs": len(times),
        "times_s": times,
        "median_s": statistics.median(times),
        "bytes_read": int(statistics.median(reads)) if reads else None,
        "rss_delta_mb": (hwm - rss0) / MB if hwm is not None and rss0 is not None else None,
        "note": note,
    }


def run_worker(spec: dict, timeout: float) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--_worker", json.dumps(spec)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"tool": spec["tool"], "case": spec["case"],
                "failed": f"timed out after {timeout:.0f} s"}
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
    for pkg in ("virtualize", "numpy", "zarr", "virtualizarr", "obstore", "kerchunk", "scipy",
                "xarray", "netCDF4"):
        try:
            vers[pkg] = version(pkg)
        except PackageNotFoundError:
            vers[pkg] = None
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f
                        if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.system()} {platform.machine()}, {cpu}, {os.cpu_count()} cores",
            "python": platform.python_version(), "versions": vers}


def ratios(results: list[dict]) -> dict[str, dict[str, float]]:
    """Per case: each tool's median / virtualize's median."""
    base = {r["case"]: r["median_s"] for r in results
            if r["tool"] == "virtualize" and "median_s" in r}
    out: dict[str, dict[str, float]] = {}
    for r in results:
        if "median_s" in r and base.get(r["case"]):
            out.setdefault(r["case"], {})[r["tool"]] = r["median_s"] / base[r["case"]]
    return out


def _human(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def table(results: list[dict]) -> str:
    rel = ratios(results)
    head = (f"{'tool':<20} {'case':<5} {'median s':>9} {'runs':>4} {'read':>9} {'RSS MB':>7} "
            f"{'x virt.':>8}  note")
    lines = [head, "-" * len(head)]
    for r in results:
        if "median_s" not in r:
            why = r.get("skipped") or "FAILED: " + r.get("failed", "?")
            lines.append(f"{r['tool']:<20} {r['case']:<5} {'-':>9} {'-':>4} {'-':>9} {'-':>7} "
                         f"{'-':>8}  {why}")
            continue
        x = rel.get(r["case"], {}).get(r["tool"])
        ratio = f"{x:.1f}x" if x is not None else "-"
        read = _human(r["bytes_read"]) if r.get("bytes_read") is not None else "-"
        rss = f"{r['rss_delta_mb']:.1f}" if r.get("rss_delta_mb") is not None else "-"
        lines.append(f"{r['tool']:<20} {r['case']:<5} {r['median_s']:>9.4f} {r['runs']:>4} "
                     f"{read:>9} {rss:>7} {ratio:>8}  {r.get('note') or ''}")
    return "\n".join(lines)


# -- main --------------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", type=Path, help="where to write the input and outputs "
                    "(default: a temporary directory, removed afterwards)")
    ap.add_argument("--records", type=int, default=80_000, help="records in the file")
    ap.add_argument("--repeats", "-n", type=int, default=5, help="timed repeats per row (median)")
    ap.add_argument("--budget", type=float, default=60.0,
                    help="seconds of repeats per row before stopping early (at least one run)")
    ap.add_argument("--quick", action="store_true", help="8,000 records, 1 repeat")
    ap.add_argument("--tools", default=",".join(TOOLS),
                    help="comma-separated subset of " + ", ".join(TOOLS))
    ap.add_argument("--cases", default=",".join(CASES),
                    help="comma-separated subset of " + ", ".join(CASES))
    ap.add_argument("--json", action="store_true",
                    help="print the results as JSON on stdout (the table goes to stderr)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per row before giving up")
    ap.add_argument("--_worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args._worker:
        print(json.dumps(worker(json.loads(args._worker))))
        return 0
    if args.quick:
        args.records = min(args.records, 8_000)
        args.repeats = 1
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
        tmp = tempfile.mkdtemp(prefix="bench_netcdf3_")
        workdir = Path(tmp)
    try:
        t0 = time.perf_counter()
        files = make_files(workdir / "inputs", args.records)
        size = os.path.getsize(files["big"])
        log(f"input ready in {time.perf_counter() - t0:.1f} s: {files['big']} "
            f"({args.records:,} records, {size / MB:.1f} MB)")
        out = workdir / "outputs"
        out.mkdir(exist_ok=True)
        results = []
        for case in cases:
            for tool in tools:
                if case not in PLAN[tool]:
                    continue
                log(f"  {tool} / {case} ...")
                spec = {"tool": tool, "case": case, "repeats": args.repeats,
                        "budget": args.budget, "files": files, "out": str(out)}
                r = run_worker(spec, args.timeout)
                log(f"    {r['median_s']:.4f} s" if "median_s" in r else
                    f"    {r.get('skipped') or 'FAILED: ' + r.get('failed', '?')}")
                results.append(r)
        doc = {"environment": environment(),
               "parameters": {"records": args.records, "grid": [NY, NX],
                              "format": "NETCDF3_64BIT_OFFSET", "file_bytes": size,
                              "repeats": args.repeats, "budget_s": args.budget},
               "results": results,
               "ratio_to_virtualize": ratios(results)}
        show = log if args.json else print
        env = doc["environment"]
        show(f"# {env['date']} | {env['machine']} | Python {env['python']}")
        show("# " + ", ".join(f"{k} {v}" for k, v in env["versions"].items() if v))
        show(f"# one CDF-2 file, {args.records:,} records (time f8, tas f4 {NY}x{NX}, count i2 "
             f"{NY}x{NX}, interleaved), {size / MB:.1f} MB; median of up to {args.repeats}")
        show(table(results))
        rel = doc["ratio_to_virtualize"]
        for case, tool in (("scan", "virtualizarr-parser"), ("scan", "virtualizarr"),
                           ("job", "virtualizarr")):
            x = rel.get(case, {}).get(tool)
            if x is not None:
                show(f"# {case}: {tool} takes {x:.1f}x virtualize's time")
        if args.json:
            print(json.dumps(doc, indent=1))
        return 0
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
