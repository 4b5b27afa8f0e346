#!/usr/bin/env python
"""Scan speed of virtualize on HDF4 files, against kerchunk's HDF4 scanner and the floor
(pyhdf's own walk of the SD metadata), measured in the same run on the same files.

    python benchmarks/bench_hdf4.py            # 300 SDS; a 1,024-chunk SDS; median of 5
    python benchmarks/bench_hdf4.py --quick    # 30 SDS, 1 repeat (smoke test)

The inputs, written by pyhdf (chunking through the HDF4 library's SDsetchunk, as
fixtures/make_hdf4.py does): `many.hdf`, N contiguous 64 x 64 int16 SDS with two
attributes each, and `chunks.hdf`, one 2048 x 2048 int32 SDS deflated in 64 x 64 chunks.

Cases (each the nearest equivalent of "where are the arrays' bytes"):

  virtualize   virtualize.formats.scan(path): every SDS, its attributes and dimensions,
               the chunk table of a chunked SDS (no data read)
  kerchunk     kerchunk.hdf4.HDF4ToZarr(path).translate()
  floor        pyhdf: SD(path), and for every SDS select, info, attributes, dimensions

Warm page cache; one process; times are medians of the repeats.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from _harness import compare_scans

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fixtures"))


def make(d: Path, n: int) -> tuple[Path, Path]:
    import make_hdf4
    from pyhdf.SD import SD, SDC

    rng = np.random.default_rng(0)
    many = d / "many.hdf"
    sd = SD(str(many), SDC.WRITE | SDC.CREATE | SDC.TRUNC)
    for k in range(n):
        v = sd.create(f"sds{k:04d}_v", SDC.INT16, (64, 64))
        v[:] = rng.integers(0, 1000, (64, 64)).astype(np.int16)
        v.units = "K"
        v.long_name = f"field {k}"
        v.endaccess()
    sd.end()
    chunks = d / "chunks.hdf"
    sd = SD(str(chunks), SDC.WRITE | SDC.CREATE | SDC.TRUNC)
    v = sd.create("big", SDC.INT32, (2048, 2048))
    make_hdf4._setchunk(v, (64, 64), SDC.COMP_DEFLATE, 1)
    v[:] = rng.integers(0, 1000, (2048, 2048)).astype(np.int32)
    v.endaccess()
    sd.end()
    return many, chunks


def virtualize_scan(path: Path):
    from virtualize.formats import scan

    return scan(path)


def kerchunk_scan(path: Path):
    from kerchunk.hdf4 import HDF4ToZarr

    return HDF4ToZarr(str(path)).translate()


def floor(path: Path):
    from pyhdf.SD import SD

    sd = SD(str(path))
    try:
        for k in range(sd.info()[0]):
            v = sd.select(k)
            info = v.info()
            v.attributes()
            [v.dim(i).info() for i in range(info[1])]
            v.endaccess()
    finally:
        sd.end()


def main(argv=None) -> int:
    tools = [("virtualize", virtualize_scan), ("kerchunk", kerchunk_scan), ("floor", floor)]
    return compare_scans(__doc__, make, tools, argv,
                         quick=(30, 1), full=(300, 5))


if __name__ == "__main__":
    sys.exit(main())
