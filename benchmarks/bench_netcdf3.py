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
           virtualize           virtualize.inventory(path)   (header + the time values)
           virtualizarr-parser  NetCDF3Parser()(url, registry)   (header only: a
                                ManifestStore, no coordinate values read)
           virtualizarr         open_virtual_dataset(url, registry=..., parser=NetCDF3Parser())
                                (header + loads `time` through its 80,000 chunks)
           kerchunk             NetCDF3ToZarr(path, inline_threshold=0).translate()  (needs scipy)
  job    the file to an output on disk:
           virtualize           virtualize.virtualize(path, "cube.zarr")
           virtualize-json      virtualize.virtualize(path, "refs.json")  (kerchunk JSON)
           virtualize-cut       virtualize.virtualize(huge, "cut.zarr"): another file, a
                                sparse CDF-2 one whose fixed variable claims 4 TiB
                                (2**20 x 2**20 float32), cut at --chunk-size (16 MiB) into
                                262,144 references (no peer cuts blocks: its `x virt.` is
                                against virtualize's job on the record file, a floor
                                measured in the same run); skipped where the file system
                                holds no sparse file
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

import json
import os
import sys
import time
from pathlib import Path

import _harness
from _harness import MB, log

CASES = ("scan", "job")
TOOLS = ("virtualize", "virtualize-json", "virtualize-cut", "virtualizarr-parser", "virtualizarr",
         "kerchunk")
PLAN = {
    "virtualize": CASES,
    "virtualize-json": ("job",),
    "virtualize-cut": ("job",),
    "virtualizarr-parser": ("scan",),
    "virtualizarr": CASES,
    "kerchunk": CASES,
}
NY = NX = 4
# the result fields of a row, in the order of the JSON output
FIELDS = ("runs", "times_s", "median_s", "bytes_read", "rss_delta_mb", "note")


# -- the input ---------------------------------------------------------------------------

def write_file(path: Path, n_records: int) -> None:
    import netCDF4
    import numpy as np

    rng = np.random.default_rng(42)
    with netCDF4.Dataset(path, "w", format="NETCDF3_64BIT_OFFSET") as nc:
        t, lat, lon, tas = _harness.define_hourly(
            nc, "virtualize benchmark: many interleaved records", NY, NX)
        count = nc.createVariable("count", "i2", ("time", "lat", "lon"))
        count.long_name = "number of observations"
        _harness.write_coords(t, lat, lon, n_records)
        tas[:] = (280 + rng.normal(0, 2, (n_records, NY, NX))).astype("f4")
        count[:] = rng.integers(0, 1000, (n_records, NY, NX)).astype("i2")


def write_sparse(path: Path) -> bool:
    """A CDF-2 file claiming v(2**20, 2**20) float32 (4 TiB), written without fill: netCDF-C
    extends it sparsely. False (and no file) where the file system does not hold it so."""
    import netCDF4

    with netCDF4.Dataset(path, "w", format="NETCDF3_64BIT_OFFSET") as nc:
        nc.set_fill_off()
        nc.createDimension("y", 2**20)
        nc.createDimension("x", 2**20)
        nc.createVariable("v", "f4", ("y", "x"))
    if os.path.getsize(path) < 2**42 or os.stat(path).st_blocks * 512 > 2**20:
        path.unlink()
        return False
    return True


def make_files(workdir: Path, n_records: int) -> dict:
    """The big file and a small warm-up file (and the sparse one the cut is timed on);
    reused when the parameters match."""
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
    huge = workdir / "sparse_4tib.nc"
    if not huge.exists():
        write_sparse(huge)
    return {"big": str(big), "small": str(small),
            "huge": str(huge) if huge.exists() else None}


# -- the jobs each tool does -------------------------------------------------------------

def tool_ops(tool: str, case: str, files: dict, out: Path):
    """(warmup, run, summarize): `run()` does the timed work and returns its result;
    `summarize(result)` says in a few words what came out."""
    big, small = files["big"], files["small"]
    url, small_url = Path(big).resolve().as_uri(), Path(small).resolve().as_uri()

    if tool == "virtualize-cut":
        import virtualize

        if files["huge"] is None:
            raise RuntimeError("this file system does not hold a sparse 4 TiB file")

        def summarize(rep):
            a = rep.plan.arrays["v"]
            return f"ok={rep.ok}, v{a.shape} cut into {a.refs.size} chunks"
        return (lambda: virtualize.virtualize(small, out / "warm-cut.zarr", overwrite=True)), \
            (lambda: virtualize.virtualize(files["huge"], out / "cut.zarr", overwrite=True)), \
            summarize

    if tool in ("virtualize", "virtualize-json"):
        import virtualize

        if case == "scan":
            def summarize(inv):
                refs = inv.variables["tas"].blocks.refs
                return (f"{int((refs['length'] > 0).sum())} tas refs; "
                        f"scan().bytes_read {inv.bytes_read:,} B")
            return (lambda: virtualize.inventory(small)), (lambda: virtualize.inventory(big)), summarize
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
        from kerchunk.netCDF3 import NetCDF3ToZarr  # ImportError without scipy

        one = _harness.kerchunk_one(NetCDF3ToZarr)
        if case == "scan":
            return (lambda: one(small)), (lambda: one(big)), _harness.kerchunk_note
        run = _harness.json_job(lambda: one(big), out / "kerchunk.json")
        return (lambda: one(small)), run, _harness.kerchunk_note

    if tool in ("virtualizarr", "virtualizarr-parser"):
        from virtualizarr import open_virtual_dataset
        from virtualizarr.parsers import NetCDF3Parser

        registry = _harness.local_registry()

        if tool == "virtualizarr-parser":
            def summarize(ms):
                return f"{_harness.store_refs(ms)} tas refs (ManifestStore, no values read)"
            return (lambda: NetCDF3Parser()(small_url, registry)), \
                (lambda: NetCDF3Parser()(url, registry)), summarize

        def ovd(u):
            return open_virtual_dataset(u, registry=registry, parser=NetCDF3Parser())

        def summarize(ds):
            return f"{_harness.dataset_refs(ds)} tas refs; time loaded ({ds.time.size})"
        if case == "scan":
            return (lambda: ovd(small_url)), (lambda: ovd(url)), summarize
        run = _harness.to_kerchunk_job(lambda: ovd(url), out / "virtualizarr.json")
        return (lambda: ovd(small_url)), run, (lambda ds: summarize(ds) + ", kerchunk json")

    raise ValueError(f"unknown tool {tool}")


# -- reporting ---------------------------------------------------------------------------

PACKAGES = ("virtualize", "numpy", "zarr", "virtualizarr", "obstore", "kerchunk", "scipy",
            "xarray", "netCDF4")


def table(results: list[dict]) -> str:
    """The results table: median time and how many runs, bytes read, RSS rise."""
    return _harness.table(results, 5, [
        ("median s", 9, _harness.median_cell(4)), ("runs", 4, lambda r, x: f"{r['runs']}"),
        ("read", 9, _harness.read_cell), ("RSS MB", 7, _harness.rss_cell),
        ("x virt.", 8, _harness.ratio_cell)])


# -- main --------------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = _harness.parser(__doc__)
    ap.add_argument("--workdir", type=Path, help="where to write the input and outputs "
                    "(default: a temporary directory, removed afterwards)")
    ap.add_argument("--records", type=int, default=80_000, help="records in the file")
    ap.add_argument("--repeats", "-n", type=int, default=5, help="timed repeats per row (median)")
    ap.add_argument("--budget", type=float, default=60.0,
                    help="seconds of repeats per row before stopping early (at least one run)")
    ap.add_argument("--quick", action="store_true", help="8,000 records, 1 repeat")
    _harness.add_selection(ap, TOOLS, CASES)
    ap.add_argument("--json", action="store_true",
                    help="print the results as JSON on stdout (the table goes to stderr)")
    args = _harness.parse_args(ap, argv, tool_ops, FIELDS, quick={"records": 8_000})
    if args is None:  # this was a worker
        return 0
    tools = _harness.pick(ap, args.tools, TOOLS, "tool")
    cases = _harness.pick(ap, args.cases, CASES, "case")

    with _harness.workdir(args.workdir, "bench_netcdf3_") as workdir:
        t0 = time.perf_counter()
        files = make_files(workdir / "inputs", args.records)
        size = os.path.getsize(files["big"])
        log(f"input ready in {time.perf_counter() - t0:.1f} s: {files['big']} "
            f"({args.records:,} records, {size / MB:.1f} MB)")
        results = _harness.run_rows(__file__, workdir, cases, tools, PLAN,
                                    {"repeats": args.repeats, "budget": args.budget,
                                     "files": files},
                                    args.timeout, digits=4)
        doc = {"environment": _harness.environment(PACKAGES),
               "parameters": {"records": args.records, "grid": [NY, NX],
                              "format": "NETCDF3_64BIT_OFFSET", "file_bytes": size,
                              "repeats": args.repeats, "budget_s": args.budget},
               "results": results,
               "ratio_to_virtualize": _harness.ratios(results)}
        lines = [f"# one CDF-2 file, {args.records:,} records (time f8, tas f4 {NY}x{NX}, "
                 f"count i2 {NY}x{NX}, interleaved), {size / MB:.1f} MB; median of up to "
                 f"{args.repeats}",
                 table(results)]
        rel = doc["ratio_to_virtualize"]
        for case, tool in (("scan", "virtualizarr-parser"), ("scan", "virtualizarr"),
                           ("job", "virtualizarr")):
            x = rel.get(case, {}).get(tool)
            if x is not None:
                lines.append(f"# {case}: {tool} takes {x:.1f}x virtualize's time")
        _harness.report(doc, args.json, lines)
        return 0


if __name__ == "__main__":
    sys.exit(main())
