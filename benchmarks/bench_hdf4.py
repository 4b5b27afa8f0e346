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

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

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
    n, repeats = (30, 1) if args.quick else (300, 5)
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
