"""Append cost vs full build: one new file appended to a cube of N small files, against
building the cube of all N + 1 files (issue 13: "appending one file to a 10,000-file cube
costs < 5 % of a full build").

    python benchmarks/bench_append.py --files 1000 10000 [--dir /tmp/bench-append]

Each file: netCDF classic, one day of an unlimited `time`, `tas(time, 4, 4)` f4 and a
shared `orog(4, 4)` (compared across files by its scan-time digest). Prints, per N, the
full build's time, the append's time (cube directory and Icechunk repository) and their
ratio (on stderr as each is measured); `--json` for machine-readable results. Times are
wall-clock on whatever machine runs it: the ratio is the figure.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np


def make_files(d: Path, n: int) -> list[Path]:
    import netCDF4

    d.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        p = d / f"tas_{i:06d}.nc"
        out.append(p)
        if p.exists():
            continue
        with netCDF4.Dataset(p, "w", format="NETCDF3_CLASSIC") as ds:
            ds.createDimension("time", None)
            ds.createDimension("y", 4)
            ds.createDimension("x", 4)
            t = ds.createVariable("time", "f8", ("time",))
            t.units = "days since 2000-01-01"
            v = ds.createVariable("tas", "f4", ("time", "y", "x"))
            o = ds.createVariable("orog", "f4", ("y", "x"))
            t[:] = [i]
            v[:] = np.full((1, 4, 4), i, "f4")
            o[:] = np.arange(16, dtype="f4").reshape(4, 4)
    return out


def timed(f) -> float:
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def run(n: int, base: Path, kinds: list[str]) -> dict:
    import virtualize

    files = make_files(base / "files", n + 1)
    out = {"files": n}
    for kind in kinds:
        suffix = {"cube": ".zarr", "icechunk": ".icechunk"}[kind]
        full, cube = base / f"full{suffix}", base / f"cube{suffix}"
        for p in (full, cube):
            shutil.rmtree(p, ignore_errors=True)
        out[f"full_{kind}_s"] = timed(lambda: virtualize.virtualize(files, full))
        virtualize.virtualize(files[:n], cube)
        out[f"append_{kind}_s"] = timed(lambda: virtualize.append(cube, files[n:]))
        out[f"ratio_{kind}"] = out[f"append_{kind}_s"] / out[f"full_{kind}_s"]
        g, h = virtualize.open(cube), virtualize.open(full)
        for sel in (slice(0, 10), slice(n - 9, n + 1)):  # (not all: one open file per source)
            assert np.array_equal(g["tas"][sel], h["tas"][sel]), "append differs from full build"
        assert np.array_equal(g["time"][...], h["time"][...]), "append differs from full build"
        print(f"{n:>6} files  {kind:9s} full build {out[f'full_{kind}_s']:8.2f} s   "
              f"append 1 {out[f'append_{kind}_s']:6.2f} s   "
              f"ratio {100 * out[f'ratio_{kind}']:5.2f} %", file=sys.stderr, flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/bench-append"))
    ap.add_argument("--kinds", default="cube,icechunk")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    results = [run(n, args.dir / str(n), args.kinds.split(",")) for n in args.files]
    if args.json:
        json.dump(results, sys.stdout, indent=1)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
