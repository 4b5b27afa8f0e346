#!/usr/bin/env python
"""What the decode check costs: `virtualize.check` with and without it, on the inputs of
bench_hdf5.py and bench_netcdf3.py (reused from --workdir), on a longer monthly stack
written the same way, on one file of 100 variables, and on a stack of tiled TIFFs.

    python benchmarks/bench_decode_check.py            # full-size inputs, median of 5
    python benchmarks/bench_decode_check.py --quick    # small inputs, median of 3

Per case: `scan+plan` (check with the decode check replaced by a no-op), `decode` (the
decode check alone on the same plan: `virtualize.checks.decode.decode_check`), the chunks it
decoded and the bytes it read, and decode / scan+plan.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_hdf5  # noqa: E402
import bench_netcdf3  # noqa: E402

import virtualize  # noqa: E402
import virtualize.api.steps  # noqa: E402
from virtualize.checks.decode import DecodeCheck, decode_check  # noqa: E402


def tiff_stack(workdir: Path, n: int, size: int) -> list[str]:
    import numpy as np
    import tifffile

    d = workdir / f"tiff_{n}x{size}"
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    rng = np.random.default_rng(0)
    for i in range(n):
        p = d / f"2024-01-{i + 1:02d}.tif"
        if not p.exists():
            data = (rng.normal(1000, 50, (size, size))).astype("u2")
            tifffile.imwrite(p, data, tile=(256, 256), compression="zlib", predictor=2)
        paths.append(str(p))
    return paths


def wide_file(workdir: Path, n: int) -> str:
    """One netCDF-4 file with n variables (24 x 50 x 50 f4, one chunk a step, shuffle +
    deflate): the decode check's cost grows with arrays, not files."""
    import netCDF4
    import numpy as np

    path = workdir / f"wide_{n}.nc"
    if not path.exists():
        rng = np.random.default_rng(1)
        with netCDF4.Dataset(path, "w") as nc:
            nc.createDimension("time", None)
            nc.createDimension("y", 50)
            nc.createDimension("x", 50)
            for i in range(n):
                v = nc.createVariable(f"v{i}", "f4", ("time", "y", "x"), chunksizes=(1, 50, 50),
                                      zlib=True, complevel=1, shuffle=True)
                v[:] = rng.standard_normal((24, 50, 50)).astype("f4")
    return str(path)


def median_time(fn, repeats: int) -> tuple[float, object]:
    fn()  # warm
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def measure(name: str, files, repeats: int, **kw) -> dict:
    real = virtualize.api.steps.decode_check
    virtualize.api.steps.decode_check = lambda *a, **k: DecodeCheck()
    try:
        t_plan, report = median_time(lambda: virtualize.check(files, **kw), repeats)
    finally:
        virtualize.api.steps.decode_check = real
    assert report.ok, report.problems
    invs = [virtualize.inventory(f) for f in (files if isinstance(files, list) else [files])]
    t_dc, dc = median_time(lambda: decode_check(report.plan, invs), repeats)
    assert not dc.problems, dc.problems
    chunks = sum(int((a.refs["length"] > 0).sum()) for a in report.plan.arrays.values()
                 if a.refs is not None and a.inline is None)
    return {"case": name, "files": len(invs), "chunks": chunks, "scan_plan_s": t_plan,
            "decode_s": t_dc, "decoded": dc.chunks, "bytes": dc.bytes_read,
            "fraction": t_dc / t_plan}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("-n", type=int, default=None, help="repeats (median)")
    args = ap.parse_args(argv)
    workdir = args.workdir or Path(tempfile.gettempdir()) / "virtualize-bench-decode"
    workdir.mkdir(parents=True, exist_ok=True)
    repeats = args.n or (3 if args.quick else 5)
    n_time = 10_000 if args.quick else 100_000
    n_stack = 24 if args.quick else 120
    for sub in ("hdf5", "nc3", "hdf5_stack"):
        (workdir / sub).mkdir(exist_ok=True)
    h5 = bench_hdf5.make_files(workdir / "hdf5", n_time, 12, 90, 180)
    h5_many = bench_hdf5.make_files(workdir / "hdf5_stack", 100, n_stack, 90, 180)
    nc3 = bench_netcdf3.make_files(workdir / "nc3", 8_000 if args.quick else 80_000)
    tifs = tiff_stack(workdir, 12, 1024 if args.quick else 4096)
    rows = [
        measure(f"hdf5 one file, {n_time} chunks", h5["big"], repeats),
        measure("hdf5 stack, 12 files", h5["stack"], repeats),
        measure(f"hdf5 stack, {n_stack} files", h5_many["stack"], repeats),
        measure("netCDF classic, records", nc3["big"], repeats),
        measure("netCDF-4 one file, 100 variables", wide_file(workdir, 100), repeats),
        measure("tiff stack, 12 files (new time axis)", tifs, repeats, concat_dim="time"),
    ]
    print(f"{'case':40} {'files':>5} {'chunks':>8} {'scan+plan s':>11} {'decode s':>9} "
          f"{'decoded':>7} {'read':>9} {'decode/scan+plan':>16}")
    for r in rows:
        print(f"{r['case']:40} {r['files']:5d} {r['chunks']:8d} {r['scan_plan_s']:11.4f} "
              f"{r['decode_s']:9.4f} {r['decoded']:7d} {r['bytes'] / 1e3:7.1f}kB "
              f"{100 * r['fraction']:15.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
