#!/usr/bin/env python
"""Scan speed of virtualize on GRIB files, against kerchunk's GRIB scanner and the floor
(ecCodes' own headers-only walk of the messages), measured in the same run on the same
files.

    python benchmarks/bench_grib.py            # 600 messages per file; median of 5
    python benchmarks/bench_grib.py --quick    # 60 messages, 1 repeat (smoke test)

The inputs, written by ecCodes from its samples: `grib2.grib2`, N GRIB2 messages (t, u,
v, z on 10 pressure levels x N/40 steps) on a 1-degree regular_ll grid (65,160 points,
16-bit simple packing: 130 kB a message), and `grib1.grib1`, the same as GRIB1.

Cases (each the nearest equivalent of "where are the arrays' bytes"):

  virtualize   virtualize.formats.scan(path): the length walk, every message's keys
               (headers only), arrays with cfgrib's axes and coordinates
  kerchunk     kerchunk.grib2.scan_grib(path): one reference set per message (it
               decodes every message's values with cfgrib to build its coordinates)
  floor        eccodes.codes_grib_new_from_file(f, headers_only=True) for every message,
               the keys virtualize reads asked of each: the headers parsed, nothing else

Warm page cache; one process; times are medians of the repeats.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

KEYS = ("shortName", "paramId", "typeOfLevel", "level", "dataDate", "dataTime", "endStep",
        "gridType", "numberOfPoints")


def make(d: Path, n: int) -> list[Path]:
    import eccodes as ec

    out = []
    for sample, name in (("GRIB2", "grib2.grib2"), ("GRIB1", "grib1.grib1")):
        h = ec.codes_grib_new_from_samples(sample)
        points = ec.codes_get(h, "numberOfPoints")
        values = np.random.default_rng(0).normal(280, 10, points)
        path = d / name
        with open(path, "wb") as f:
            k = 0
            for step in range(0, 6 * (n // 40 + 1), 6):
                for level in (1000, 925, 850, 700, 500, 400, 300, 250, 200, 100):
                    for short in ("t", "u", "v", "z"):
                        if k == n:
                            break
                        if sample == "GRIB2":
                            ec.codes_set(h, "typeOfFirstFixedSurface", 100)
                        ec.codes_set(h, "shortName", short)
                        ec.codes_set(h, "level", level)
                        ec.codes_set(h, "step", step)
                        ec.codes_set(h, "bitsPerValue", 16)
                        ec.codes_set_values(h, values)
                        f.write(ec.codes_get_message(h))
                        k += 1
        ec.codes_release(h)
        out.append(path)
    return out


def virtualize_scan(path: Path):
    from virtualize.formats import scan

    return scan(path)


def kerchunk_scan(path: Path):
    from kerchunk.grib2 import scan_grib

    return scan_grib(str(path))


def floor(path: Path):
    import eccodes as ec

    n = 0
    with open(path, "rb") as f:
        while (h := ec.codes_grib_new_from_file(f, headers_only=True)) is not None:
            for k in KEYS:
                ec.codes_get(h, k)
            ec.codes_release(h)
            n += 1
    return n


def timed(fn, path: Path, repeats: int) -> tuple[float, str]:
    try:
        fn(path)  # warm-up (imports)
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn(path)
            times.append(time.perf_counter() - t)
        return statistics.median(times), ""
    except Exception as e:  # a tool that fails is reported, the run goes on
        return float("nan"), f"{type(e).__name__}: {str(e)[:80]}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    n, repeats = (60, 1) if args.quick else (600, 5)
    with tempfile.TemporaryDirectory() as tmp:
        files = make(Path(tmp), n)
        print(f"{'file':12} {'tool':12} {'median s':>10}  note", file=sys.stderr)
        for path in files:
            base = None
            for name, fn in [("virtualize", virtualize_scan), ("kerchunk", kerchunk_scan),
                             ("floor", floor)]:
                t, note = timed(fn, path, repeats)
                base = t if name == "virtualize" else base
                ratio = f"x{t / base:.2f} of virtualize" if name != "virtualize" and t == t else ""
                print(f"{path.name:12} {name:12} {t:10.4f}  {note or ratio}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
