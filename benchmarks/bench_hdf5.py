#!/usr/bin/env python
"""Speed and memory of virtualize on netCDF-4 / HDF5 input, against kerchunk and
VirtualiZarr, measured in the same run on the same files.

    python benchmarks/bench_hdf5.py                 # full run: 100,000-chunk file + 12-month stack
    python benchmarks/bench_hdf5.py --quick         # small files, 1 repeat (a smoke test)
    python benchmarks/bench_hdf5.py --json > r.json # machine-readable results
    python benchmarks/bench_hdf5.py --profile       # also cProfile virtualize.inventory on the big file
    python benchmarks/bench_hdf5.py --floor-only    # only the scan-vs-floor table (below)

Cases (each tool does the nearest equivalent of the same job):

  scan-100k   one file, tas(time=100000, lat=4, lon=4) chunked (1,4,4), shuffle+zlib:
              virtualize.inventory(path) | SingleHdf5ToZarr(path, inline_threshold=0).translate()
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

Then (skip with --no-floor, or run alone with --floor-only) virtualize's scan against its
floor, in this process, each file's rows measured in interleaved rounds (the minimum of
N rounds; wall and CPU time): `floor` opens the file with h5py, reads every attribute
the output holds (all but HDF5's and netCDF-C's own: DIMENSION_LIST, CLASS, ...), the
values of the variables whose values the inventory holds (coordinates), and runs
`DatasetID.chunk_iter` with a no-op callback on every chunked dataset (h5py's StoreInfo
per chunk included); `bare` only opens the file and runs that `chunk_iter` (no attributes,
no values: the floor of issue #32); `walk` only opens and asks HDF5 for each chunked
dataset's chunk count (HDF5's own index walk, no Python per chunk). The scan is
`virtualize.inventory`, every check on (the fingerprint, digests of the variables a stack
compares, planning data, the extent check). Inputs: one dataset
tas(N, 4, 4) f4 in (1, 4, 4) chunks (shuffle + deflate) per HDF5 chunk index type
(written by h5py: libver "earliest" gives a v1 B-tree; "latest" a fixed array for a
fixed extent, an extensible array for one unlimited axis, a v2 B-tree for two, an
implicit index for unfiltered data allocated early, a single chunk for one chunk), the
netCDF-4 file of scan-100k (v1 B-tree, time coordinate), the monthly stack (small
netCDF-4 files, all of them per row), 200 one-step hourly netCDF-4 files (tas(1, 4, 4),
deflate; --small-files) and 3 netCDF-4 files of tas(1, 1264, 1264) in (1, 4, 4) chunks
(99,856 chunks each in a 2-D grid: a v1 B-tree of ~2,000 nodes).
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

import _harness
from _harness import MB, log

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
# the result fields of a row, in the order of the JSON output
FIELDS = ("repeats", "times_s", "median_s", "py_peak_mb", "rss_delta_mb", "rss_peak_exact",
          "bytes_read", "note")


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
        t, lat, lon, tas = _harness.define_hourly(
            nc, "virtualize benchmark: many small chunks", 4, 4, {"bnds": 2},
            chunksizes=(1, 4, 4), zlib=True, complevel=1, shuffle=True)
        _harness.write_coords(t, lat, lon, n_time)
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
                return virtualize.inventory(big)

            def summarize(inv):
                refs = inv.variables["tas"].blocks.refs
                return (f"{int((refs['length'] > 0).sum())} tas refs; HDF5 asked for "
                        f"{inv.bytes_read:,} B")
            return (lambda: virtualize.inventory(small)), run, summarize
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
        from kerchunk.hdf import SingleHdf5ToZarr

        one = _harness.kerchunk_one(SingleHdf5ToZarr)
        kc_note = _harness.kerchunk_note
        if case == "scan-100k":
            return (lambda: one(small)), (lambda: one(big)), kc_note
        if case == "job-100k":
            run = _harness.json_job(lambda: one(big), out / "kerchunk_job-100k.json")
            return (lambda: one(small)), run, (lambda refs: kc_note(refs) + " json")

        from kerchunk.combine import MultiZarrToZarr

        def combine():
            singles = [one(p) for p in stack]
            return MultiZarrToZarr(singles, concat_dims=["time"],
                                   identical_dims=["lat", "lon", "bnds"]).translate()
        run = combine if case == "stack-check" else \
            _harness.json_job(combine, out / "kerchunk_stack-job.json")
        return (lambda: one(small)), run, kc_note

    if tool in ("virtualizarr", "virtualizarr-parser"):
        from virtualizarr import open_virtual_dataset, open_virtual_mfdataset
        from virtualizarr.parsers import HDFParser

        registry = _harness.local_registry()

        def ovd(path):
            return open_virtual_dataset(_url(path), registry=registry, parser=HDFParser())

        def vz_note(ds):
            return f"{_harness.dataset_refs(ds)} tas refs"

        if tool == "virtualizarr-parser":
            # the parser alone: file -> ManifestStore, no xarray, no coordinate loading
            def run():
                return HDFParser()(_url(big), registry)

            def summarize(ms):
                return f"{_harness.store_refs(ms)} tas refs (ManifestStore)"
            return (lambda: HDFParser()(_url(small), registry)), run, summarize
        if case == "scan-100k":
            return (lambda: ovd(small)), (lambda: ovd(big)), vz_note
        if case == "job-100k":
            run = _harness.to_kerchunk_job(lambda: ovd(big), out / "virtualizarr_job-100k.json")
            return (lambda: ovd(small)), run, (lambda ds: vz_note(ds) + ", kerchunk json (zarr v2)")

        def mf():
            return open_virtual_mfdataset([_url(p) for p in stack], registry=registry,
                                          parser=HDFParser(), combine="nested",
                                          concat_dim="time", data_vars="minimal",
                                          coords="minimal", compat="override")
        run = mf if case == "stack-check" else \
            _harness.to_kerchunk_job(mf, out / "virtualizarr_stack-job.json")
        return (lambda: ovd(small)), run, (lambda ds: f"{vz_note(ds)}, tas{tuple(ds['tas'].shape)}")

    raise ValueError(f"unknown tool {tool}")


# -- reporting ---------------------------------------------------------------------------

PACKAGES = ("virtualize", "h5py", "numpy", "zarr", "kerchunk", "virtualizarr", "obstore",
            "xarray", "netCDF4")


def environment() -> dict:
    env = _harness.environment(PACKAGES)
    try:
        import h5py
        env["versions"]["HDF5"] = h5py.version.hdf5_version
    except ImportError:
        pass
    return env


def table(results: list[dict]) -> str:
    """The results table: median and fastest time, Python and RSS peaks, bytes read."""
    return _harness.table(results, 12, [
        ("median s", 9, _harness.median_cell(3)),
        ("min s", 7, lambda r, x: f"{min(r['times_s']):.3f}"),
        ("py MB", 8, lambda r, x: f"{r['py_peak_mb']:.1f}"),
        ("RSS MB", 8, _harness.rss_cell), ("read", 10, _harness.read_cell),
        ("x virt.", 8, _harness.ratio_cell)])


def profile_scan(path: str, var: str = "tas", top: int = 20) -> str:
    """Where virtualize.inventory's time goes on one file: the scan beside HDF5's own index
    walk and h5py's chunk_iter with a no-op callback (what a scan through chunk_iter
    cannot go below; the scan reads v1/v2 B-tree, fixed array and implicit indexes
    directly, so it can), then cProfile's top functions by own time.

    cProfile cannot see inside DatasetID.chunk_iter or get_num_chunks (compiled Cython):
    their HDF5 walk is charged to the caller (`_chunk_index`)."""
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

    virtualize.inventory(path)  # warm
    n = num_chunks()
    t_scan, t_walk, t_iter = med(lambda: virtualize.inventory(path)), med(num_chunks), med(chunk_iter_noop)
    out = io.StringIO()
    out.write(f"virtualize.inventory, whole                        {t_scan * 1e3:7.1f} ms\n"
              f"  HDF5 index walk (open + get_num_chunks, no Python per chunk) {t_walk * 1e3:7.1f} ms\n"
              f"  h5py chunk_iter with a no-op callback              {t_iter * 1e3:7.1f} ms "
              f"({(t_iter - t_walk) / n * 1e9:.0f} ns/chunk over the walk: StoreInfo + call)\n"
              f"  scan - chunk_iter floor                            {(t_scan - t_iter) * 1e3:7.1f} ms\n"
              f"  ({n} chunks)\n\n")
    pr = cProfile.Profile()
    pr.enable()
    virtualize.inventory(path)
    pr.disable()
    pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


# -- the scan against its floor ---------------------------------------------------------

# how HDF5 picks the chunk index (see the docstring); "early": space allocated at creation
INDEX_TYPES = {
    "fixed-array": dict(libver="latest"),
    "extensible-array": dict(libver="latest", maxshape=(None, 4, 4)),
    "btree-v2": dict(libver="latest", maxshape=(None, None, 4)),
    "btree-v1": dict(libver="earliest"),
    "implicit": dict(libver="latest", early=True),
    "single-chunk": dict(libver="latest", single=True),
}


def make_index_files(workdir: Path, n: int) -> dict[str, str]:
    """One file per chunk index type: tas(n, 4, 4) f4 in n chunks of (1, 4, 4) (one chunk
    for single-chunk), shuffle + deflate (none for implicit). Reused when present."""
    import h5py
    import numpy as np

    workdir.mkdir(parents=True, exist_ok=True)
    out = {}
    for index, spec in INDEX_TYPES.items():
        path = workdir / f"{index}_{n}.h5"
        out[index] = str(path)
        if path.exists():
            continue
        chunks = (n, 4, 4) if spec.get("single") else (1, 4, 4)
        data = np.random.default_rng(1).normal(280, 5, (n, 4, 4)).astype("f4")
        tmp = path.with_suffix(".tmp")
        with h5py.File(tmp, "w", libver=spec["libver"]) as f:
            if spec.get("early"):
                dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
                dcpl.set_chunk(chunks)
                dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
                h5py.h5d.create(f.id, b"tas", h5py.h5t.IEEE_F32LE,
                                h5py.h5s.create_simple((n, 4, 4), (n, 4, 4)), dcpl=dcpl)
                f["tas"][...] = data
            else:
                f.create_dataset("tas", data=data, chunks=chunks, maxshape=spec.get("maxshape"),
                                 compression="gzip", compression_opts=1, shuffle=True)
        tmp.rename(path)
    return out


def _floor_read(path: str, values: frozenset) -> None:
    """What any scan must do at least (see the docstring): attributes, values, chunk_iter."""
    import h5py

    from virtualize.formats.hdf5.attrs import HIDDEN_ATTRS

    def noop(_info):
        return None

    with h5py.File(path, "r") as f:
        objs = [("", f)]
        f.visititems(lambda name, obj: objs.append((name, obj)))
        for name, obj in objs:
            attrs = obj.attrs
            for key in attrs:
                if key not in HIDDEN_ATTRS:
                    attrs[key]
            if isinstance(obj, h5py.Dataset):
                if obj.chunks is not None:
                    obj.id.chunk_iter(noop)
                if name in values:
                    obj[()]


def _bare_floor(path: str) -> None:
    """The bare floor: h5py opens the file and runs `DatasetID.chunk_iter` with a no-op
    callback on every chunked dataset (nothing else: no attributes, no values)."""
    import h5py

    def noop(_info):
        return None

    with h5py.File(path, "r") as f:
        dsets = []
        f.visititems(lambda name, obj: dsets.append(obj) if isinstance(obj, h5py.Dataset) else None)
        for ds in dsets:
            if ds.chunks is not None:
                ds.id.chunk_iter(noop)


def make_one_step_files(workdir: Path, n_files: int, side: int) -> list[str]:
    """`n_files` netCDF-4 files (netCDF4-python; reused when present), file i one step
    (hour i) of tas(time, lat=4*side, lon=4*side) f4 in (1, 4, 4) chunks, shuffle +
    deflate 1, with CF coordinates (time unlimited): side**2 chunks a file. side 1: an
    archive's hourly files; 316: 99,856 chunks in a 2-D grid, a v1 B-tree of ~2,000 nodes."""
    import netCDF4
    import numpy as np

    workdir.mkdir(parents=True, exist_ok=True)
    n = 4 * side
    out = []
    for i in range(n_files):
        path = workdir / f"tas_{side * side}chunks_{i:05d}.nc"
        out.append(str(path))
        if path.exists():
            continue
        tmp = path.with_suffix(".part")
        with netCDF4.Dataset(tmp, "w", format="NETCDF4") as nc:
            t, lat, lon, tas = _harness.define_hourly(
                nc, "virtualize benchmark: one step", n, n, chunksizes=(1, 4, 4), zlib=True,
                complevel=1, shuffle=True)
            if side == 1:
                _harness.write_coords(t, lat, lon, 1)
            else:
                lat[:], lon[:] = np.linspace(-89.5, 89.5, n), np.linspace(0, 359.5, n)
            t[:] = [float(i)]
            tas[0] = np.random.default_rng(i).normal(280, 5, (n, n)).astype("f4")
        tmp.rename(path)
    return out


def _index_walk(path: str) -> None:
    import h5py

    with h5py.File(path, "r") as f:
        dsets = []
        f.visititems(lambda name, obj: dsets.append(obj) if isinstance(obj, h5py.Dataset) else None)
        for ds in dsets:
            if ds.chunks is not None:
                ds.id.get_num_chunks()


def floor_rows(inputs: dict[str, list[str]], repeats: int) -> list[dict]:
    """virtualize.inventory against the floor and the index walk on each input (a list of
    files: all of them per measurement), in interleaved rounds; minimum of `repeats`."""
    import virtualize

    rows = []
    for case, paths in inputs.items():
        values = {}
        chunks = 0
        for p in paths:
            inv = virtualize.inventory(p)  # warm-up; which values the output holds
            values[p] = frozenset(name.lstrip("/") for name, v in inv.variables.items()
                                  if v.values is not None)
            chunks += sum(int((v.blocks.refs["length"] > 0).sum()) for v in inv.variables.values()
                          if v.blocks is not None)
        ops = {
            "scan": lambda: [virtualize.inventory(p) for p in paths],
            "floor": lambda: [_floor_read(p, values[p]) for p in paths],
            "bare": lambda: [_bare_floor(p) for p in paths],
            "walk": lambda: [_index_walk(p) for p in paths],
        }
        wall = {k: [] for k in ops}
        cpu = {k: [] for k in ops}
        for _ in range(max(repeats, 1)):
            for k, op in ops.items():
                gc.collect()
                c0, t0 = time.process_time(), time.perf_counter()
                op()
                wall[k].append(time.perf_counter() - t0)
                cpu[k].append(time.process_time() - c0)
        row = {"case": case, "files": len(paths), "chunks": chunks, "repeats": repeats}
        for k in ops:
            row[f"{k}_wall_s"], row[f"{k}_cpu_s"] = min(wall[k]), min(cpu[k])
        row["scan_over_floor_wall"] = row["scan_wall_s"] / row["floor_wall_s"]
        row["scan_over_floor_cpu"] = row["scan_cpu_s"] / row["floor_cpu_s"]
        row["scan_over_bare_wall"] = row["scan_wall_s"] / row["bare_wall_s"]
        row["scan_over_bare_cpu"] = row["scan_cpu_s"] / row["bare_cpu_s"]
        rows.append(row)
        log(f"floor: {case} done")
    return rows


def floor_table(rows: list[dict]) -> str:
    head = (f"{'input':25s} {'files':>5s} {'chunks':>8s} {'scan ms':>9s} {'floor ms':>9s} "
            f"{'bare ms':>8s} {'walk ms':>8s} {'scan/floor':>10s} {'(cpu)':>6s} "
            f"{'scan/bare':>9s} {'(cpu)':>6s}")
    lines = [head]
    for r in rows:
        lines.append(f"{r['case']:25s} {r['files']:5d} {r['chunks']:8d} {r['scan_wall_s'] * 1e3:9.2f} "
                     f"{r['floor_wall_s'] * 1e3:9.2f} {r['bare_wall_s'] * 1e3:8.2f} "
                     f"{r['walk_wall_s'] * 1e3:8.2f} "
                     f"{r['scan_over_floor_wall']:9.2f}x {r['scan_over_floor_cpu']:5.2f}x "
                     f"{r['scan_over_bare_wall']:8.2f}x {r['scan_over_bare_cpu']:5.2f}x")
    return "\n".join(lines)


# -- main --------------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = _harness.parser(__doc__)
    ap.add_argument("--workdir", type=Path, help="where to write inputs and outputs "
                    "(default: a temporary directory, removed afterwards)")
    ap.add_argument("--repeats", "-n", type=int, default=3, help="timed repeats per row (median)")
    ap.add_argument("--chunks", type=int, default=100_000, help="chunks in the big file")
    ap.add_argument("--months", type=int, default=12, help="files in the stack")
    ap.add_argument("--grid", default="90x180", help="lat x lon of the monthly files")
    ap.add_argument("--quick", action="store_true",
                    help="small run: 10,000 chunks, 1 repeat")
    _harness.add_selection(ap, TOOLS, CASES)
    ap.add_argument("--json", action="store_true",
                    help="print results as JSON on stdout (the table goes to stderr)")
    ap.add_argument("--profile", action="store_true",
                    help="also cProfile virtualize.inventory on the big file")
    ap.add_argument("--no-floor", action="store_true",
                    help="leave out the scan-vs-floor table")
    ap.add_argument("--floor-only", action="store_true",
                    help="only the scan-vs-floor table (its repeats: --floor-repeats)")
    ap.add_argument("--small-files", type=int, default=200,
                    help="one-step netCDF-4 files of the small-file row of the floor table")
    ap.add_argument("--floor-repeats", type=int, default=15,
                    help="rounds of the scan-vs-floor table (minimum reported; 3 with --quick)")
    args = _harness.parse_args(ap, argv, tool_ops, FIELDS, quick={"chunks": 10_000})
    if args is None:  # this was a worker
        return 0
    ny, nx = (int(v) for v in args.grid.lower().split("x"))
    tools = _harness.pick(ap, args.tools, TOOLS, "tool")
    cases = _harness.pick(ap, args.cases, CASES, "case")

    with _harness.workdir(args.workdir, "bench_hdf5_") as workdir:
        t0 = time.perf_counter()
        files = make_files(workdir / "inputs", args.chunks, args.months, ny, nx)
        log(f"inputs ready in {time.perf_counter() - t0:.1f} s under {workdir}: "
            f"{Path(files['big']).name} ({os.path.getsize(files['big']) / MB:.1f} MB), "
            f"{len(files['stack'])} monthly files")
        results = [] if args.floor_only else \
            _harness.run_rows(__file__, workdir, cases, tools, PLAN,
                              {"repeats": args.repeats, "files": files},
                              args.timeout, digits=3)
        floor = None
        if not args.no_floor:
            index_files = make_index_files(workdir / "inputs" / "index", args.chunks)
            inputs = {k: [v] for k, v in index_files.items()}
            inputs["netcdf4 v1 B-tree+coords"] = [files["big"]]
            inputs[f"netcdf4 small x{len(files['stack'])}"] = files["stack"]
            small = make_one_step_files(workdir / "inputs" / "small", args.small_files, 1)
            inputs[f"netcdf4 1-step x{len(small)}"] = small
            side = 100 if args.quick else 316
            tiled = make_one_step_files(workdir / "inputs" / "tiled", 3, side)
            inputs[f"netcdf4 {side * side} chunks x3"] = tiled
            floor = floor_rows(inputs, 3 if args.quick else args.floor_repeats)
        doc = {"environment": environment(),
               "parameters": {"chunks": args.chunks, "months": args.months, "grid": [ny, nx],
                              "repeats": args.repeats,
                              "big_file_bytes": os.path.getsize(files["big"]),
                              "stack_bytes": sum(os.path.getsize(p) for p in files["stack"])},
               "results": results, "floor": floor}
        if args.profile:
            doc["profile_scan"] = profile_scan(files["big"])
        p = doc["parameters"]
        lines = [f"# big file: {p['chunks']} chunks, {p['big_file_bytes'] / MB:.1f} MB; stack: "
                 f"{p['months']} files {ny}x{nx}, {p['stack_bytes'] / MB:.1f} MB; "
                 f"median of {p['repeats']}",
                 table(results) if results else "(tool table skipped)"]
        if floor is not None:
            lines += [f"\n# scan vs floor: minimum of {floor[0]['repeats']} interleaved rounds; "
                      "ms per input (all its files); scan/floor on wall time, (cpu) on CPU time",
                      floor_table(floor)]
        if args.profile:
            lines += ["\n# cProfile of virtualize.inventory on the big file (by own time)",
                      doc["profile_scan"]]
        # with --json the JSON goes to stdout and the table to stderr
        _harness.report(doc, args.json, lines)
        return 0


if __name__ == "__main__":
    sys.exit(main())
