#!/usr/bin/env python
"""Scan speed of virtualize on FITS files, against kerchunk's FITS scanner and the floor
(astropy's own walk of the headers), measured in the same run on the same files.

    python benchmarks/bench_fits.py            # 300 image extensions; median of 5
    python benchmarks/bench_fits.py --quick    # 30 extensions, 1 repeat (smoke test)

The inputs, written by astropy: `many.fits`, a primary and N IMAGE extensions of 64 x 64
int16 (each with a few header cards), and `tiles.fits`, one 2048 x 2048 int32 image
RICE_1-compressed in 64 x 64 tiles (1,024 tiles).

Cases (each the nearest equivalent of "where are the arrays' bytes"):

  virtualize   virtualize.formats.scan(path): every image, its header cards as attributes,
               the tile table of a compressed image (no pixel read)
  kerchunk     kerchunk.fits.process_file(path, extension=k) for every image extension k
               (kerchunk scans one extension a call; a compressed image it does not read
               tile by tile)
  floor        astropy.io.fits.open(path, memmap=True, lazy_load_hdus=True) and
               `fileinfo(k)` of every HDU: the headers parsed, nothing else

Warm page cache; one process; times are medians of the repeats.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from _harness import compare_scans


def make(d: Path, n: int) -> tuple[Path, Path]:
    from astropy.io import fits

    rng = np.random.default_rng(0)
    hdus = [fits.PrimaryHDU()]
    for k in range(n):
        h = fits.ImageHDU(rng.integers(0, 1000, (64, 64)).astype(np.int16), name=f"SCI{k}")
        h.header["EXPTIME"] = 30.0
        h.header["FILTER"] = "F606W"
        hdus.append(h)
    many = d / "many.fits"
    fits.HDUList(hdus).writeto(many)
    tiles = d / "tiles.fits"
    fits.HDUList([fits.PrimaryHDU(), fits.CompImageHDU(
        rng.integers(0, 1000, (2048, 2048)).astype(np.int32), compression_type="RICE_1",
        tile_shape=(64, 64))]).writeto(tiles)
    return many, tiles


def virtualize_scan(path: Path):
    from virtualize.formats import scan

    return scan(path)


def kerchunk_scan(path: Path):
    from astropy.io import fits
    from kerchunk.fits import process_file

    with fits.open(path, memmap=True, lazy_load_hdus=True) as hdul:
        exts = [k for k, h in enumerate(hdul) if k and h.header.get("NAXIS", 0)]
    return [process_file(str(path), extension=k) for k in exts]


def floor(path: Path):
    from astropy.io import fits

    with fits.open(path, memmap=True, lazy_load_hdus=True) as hdul:
        k = 0
        while True:
            try:
                hdul.fileinfo(k)
            except IndexError:
                return k
            k += 1


def main(argv=None) -> int:
    tools = [("virtualize", virtualize_scan), ("kerchunk", kerchunk_scan), ("floor", floor)]
    return compare_scans(__doc__, make, tools, argv,
                         quick=(30, 1), full=(300, 5))


if __name__ == "__main__":
    sys.exit(main())
