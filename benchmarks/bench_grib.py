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

import sys
from pathlib import Path

import numpy as np

from _harness import compare_scans

KEYS = ("shortName", "paramId", "typeOfLevel", "level", "dataDate", "dataTime", "endStep",
        "gridType", "numberOfPoints")


def make(d: Path, n: int) -> list[Path]:
    from virtualize.codecs import load_eccodes

    ec = load_eccodes()  # (after pyproj: docs/grib.md, "Known issue")

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
    from virtualize.codecs import load_eccodes

    ec = load_eccodes()  # (after pyproj: docs/grib.md, "Known issue")

    n = 0
    with open(path, "rb") as f:
        while (h := ec.codes_grib_new_from_file(f, headers_only=True)) is not None:
            for k in KEYS:
                ec.codes_get(h, k)
            ec.codes_release(h)
            n += 1
    return n


def main(argv=None) -> int:
    tools = [("virtualize", virtualize_scan), ("kerchunk", kerchunk_scan), ("floor", floor)]
    return compare_scans(__doc__, make, tools, argv,
                         quick=(60, 1), full=(600, 5))


if __name__ == "__main__":
    sys.exit(main())
