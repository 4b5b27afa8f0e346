"""Mutation suite: damaged copies of real files, through every scanner.

Each source file (written by the real writers, see fixtures/) is mutated by hypothesis:
truncated at a structural boundary (where a block, an IFD or the header ends or starts,
or inside the first block), a byte flipped in a metadata region (the header, IFDs and
tag arrays, HDF5 object headers, heaps and chunk indexes: every byte not inside a
referenced data block), or an absurd value (0, all ones, 2**31 - 1, the file size)
written over a 4- or 8-byte field of a metadata region. Then the mutated file is
virtualized alone, its scan in a worker process bounded by a time limit.

The rule every outcome must follow (`_oracle.judge`):

- refused: `VirtualizeError` whose problems name the file. Always acceptable: refusing
  is safe, whether or not the format's library can still read the file ("refused-
  consistent" when it cannot, conservative when it can).
- accepted: a cube is written, and every array in it reads back bit-exactly equal to the
  format's library's read of the mutated file (h5py for HDF5 / netCDF-4, netCDF4-python
  for netCDF classic, tifffile for TIFF, astropy for FITS). When the library cannot read
  an accepted array at all (a mutated offset points a compressed block at bytes that do not decode), reading
  it through the cube must fail too ("unreadable-consistent"): the cube never invents
  values the library does not have. (Comparing the readable parts of such an array block
  by block is not done.)
- anything else fails: another exception type, a hang (the scan's time limit turns it
  into a `scan-timeout` refusal, which is fine), a refusal not naming the file.

Budget: a fixed number of derandomized examples per source (`VIRTUALIZE_MUTATIONS`,
default 60: 1,320 mutated files over 22 sources, about 30 s of the directory's 40 s)
on 2 cores. Maintainers run longer, e.g. ``VIRTUALIZE_MUTATIONS=500 pytest
tests/robustness``, and other examples with ``VIRTUALIZE_MUTATIONS_SEED=N``; the counts of
mutated files, formats and outcomes are printed at the end of the session (conftest.py).
"""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from virtualize.formats import scan

from ._oracle import judge
from .conftest import OUTCOMES

EXAMPLES = int(os.environ.get("VIRTUALIZE_MUTATIONS", "60"))
SEED = os.environ.get("VIRTUALIZE_MUTATIONS_SEED")  # other examples than the suite's fixed ones

# (label, fixture case, file index): every scanner and the layouts it handles
SOURCES = [
    ("netcdf3-cdf1", "nc3_months_classic", 0),
    ("netcdf3-cdf2", "nc3_months_offset64", 0),
    ("netcdf3-cdf5", "nc3_months_data64", 0),
    ("netcdf4-chunked", "filters_none", 0),
    ("netcdf4-contiguous", "contiguous", 0),
    ("netcdf4-compressed", "filters_gzip_shuffle", 0),
    ("hdf5-h5py", "h5py_plain", 0),
    ("tiff-strips", "strips_short_last", 0),
    ("tiff-tiles", "tiles_padded", 0),
    ("bigtiff", "bigtiff_strips", 0),
    ("geotiff", "geotiff_tifffile", 0),
    ("tiff-multipage", "multipage", 0),
    ("tiff-multipage-shaped", "multipage_shaped", 0),  # tifffile's JSON shape: frames
    ("tiff-hyperstack", "imagej_hyperstack", 0),  # ImageJ: frames as one contiguous block
    ("tiff-series", "shaped_series", 0),  # four shaped series in one file
    ("tiff-ome", "ome_tzcyx", 0),  # OME-XML: a TZCYX series and a ZYX one
    ("tiff-subifds", "tifffile_subifds", 0),  # overview levels as SubIFDs
    ("tiff-tiffcp", "tiffcp_tiles", 0),  # libtiff: IFD after the data
    ("cog-gdal", "cog", 0),  # GDAL COG: overviews, ghost header
    ("netcdf4-groups", "groups", 0),
    ("fits-images", "fits_multi", 0),  # every BITPIX, unsigned offsets, a table
    ("fits-scaled", "fits_scaled", 0),  # BSCALE / BZERO / BLANK, an inlined uint64
    ("fits-tiles", "fits_tiles", 0),  # tile-compressed: RICE_1, GZIP_2 (uint16), per tile
    ("fits-gzip-old", "fits_gzip", 1),  # GZIP tiles of 4-byte values: virtualize.fitsgzip
    ("grib2", "grib2_levels", 0),  # GRIB2: levels x steps, a bit-map
    ("grib1", "grib1_members", 0),  # GRIB1: ensemble members x steps
]


class Source:
    def __init__(self, label: str, path):
        self.label = label
        self.path = path
        self.data = path.read_bytes()
        n = len(self.data)
        inv = scan(path)
        ranges = []
        for v in inv.variables.values():
            if v.blocks is not None:
                r = v.blocks.refs.reshape(-1)
                r = r[r["length"] > 0]
                ranges += list(zip(r["offset"].tolist(), (r["offset"] + r["length"]).tolist()))
        data = np.zeros(n, dtype=bool)
        for a, b in ranges:
            data[a:b] = True
        if label.startswith("grib"):  # a chunk is a whole message: its headers are metadata
            from virtualize.formats.grib import messages

            with open(path, "rb") as f:
                for m in messages.walk(f, str(path), n)[0]:
                    data[m.offset:m.offset + len(m.head)] = False
                    data[m.offset + m.length - 4:m.offset + m.length] = False
        self.meta = np.flatnonzero(~data)  # every byte outside referenced blocks
        cuts = {0, 1, 4, 8, 16, n - 1}
        for a, b in ranges:
            cuts |= {a, b, a + 1, (a + b) // 2}
        edges = np.flatnonzero(np.diff(data.astype(np.int8))) + 1  # metadata/data edges
        cuts |= set(edges.tolist())
        if label.startswith(("tiff", "bigtiff", "geotiff")):
            cuts |= set(_ifd_offsets(self.data))
        first = min(ranges) if ranges else (0, 0)
        cuts |= {first[0] + max(1, (first[1] - first[0]) // 3)}  # inside the first block
        self.cuts = sorted(c for c in cuts if 0 <= c < n)


def _ifd_offsets(b: bytes) -> list[int]:
    order = "<" if b[:2] == b"II" else ">"
    big = b[2:4] in (b"+\x00", b"\x00+")
    off = struct.unpack_from(order + ("Q" if big else "I"), b, 8 if big else 4)[0]
    out = []
    while 0 < off < len(b) and off not in out and len(out) < 64:
        out.append(off)
        cnt = struct.unpack_from(order + ("Q" if big else "H"), b, off)[0]
        nxt = off + (8 if big else 2) + cnt * (20 if big else 12)
        if nxt + 8 > len(b):
            break
        off = struct.unpack_from(order + ("Q" if big else "I"), b, nxt)[0]
    return out


@pytest.fixture(scope="module")
def sources(case):
    """label -> Source, built on first use (a case whose writer is missing skips its test)."""
    built: dict[str, Source] = {}

    def get(label: str) -> Source:
        if label not in built:
            name, index = next((n, i) for lab, n, i in SOURCES if lab == label)
            built[label] = Source(label, case(name)[index])
        return built[label]

    return get


def mutate(src: Source, data) -> tuple[bytes, str]:
    b = bytearray(src.data)
    kind = data.draw(st.sampled_from(["truncate", "flip", "absurd"]), label="kind")
    if kind == "truncate" or not len(src.meta):
        at = data.draw(st.sampled_from(src.cuts), label="cut at")
        return bytes(b[:at]), f"truncated at {at}"
    pos = int(src.meta[data.draw(st.integers(0, len(src.meta) - 1), label="meta byte")])
    if kind == "flip":
        x = data.draw(st.integers(1, 255), label="xor")
        b[pos] ^= x
        return bytes(b), f"byte {pos} ^= {x:#x}"
    width = data.draw(st.sampled_from([4, 8]), label="width")
    pos -= pos % width
    value = data.draw(st.sampled_from([0, 2**31 - 1, 2**32 - 1, len(b), 2 ** (8 * width) - 1]),
                      label="value")
    order = data.draw(st.sampled_from(["big", "little"]), label="order")
    b[pos:pos + width] = (value % 2 ** (8 * width)).to_bytes(width, order)[: len(b) - pos]
    return bytes(b), f"{width} bytes at {pos} = {value} ({order}-endian)"


def judge_mutants(label: str, examples: int, mutant, work) -> None:
    """Judge `examples` derandomized mutants (`VIRTUALIZE_MUTATIONS_SEED`: others), each made
    by `mutant(data) -> (path, what was done)`, the cube written to `work`; every outcome
    counted in the session's summary."""

    @settings(max_examples=examples, derandomize=SEED is None, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @seed(int(SEED or 0))
    @given(st.data())
    def run(data):
        path, what = mutant(data)
        try:
            outcome = judge(path, work / "cube.zarr")
        except AssertionError as e:
            raise AssertionError(f"{label} {what}: {e}") from None
        OUTCOMES.append((label, outcome))

    run()


def file_mutant(src: Source, path):
    """Mutants of `src` written to `path` (`mutate`)."""
    def mutant(data):
        mutated, what = mutate(src, data)
        path.write_bytes(mutated)
        return path, f"({src.path.name}) {what}"
    return mutant


@pytest.mark.parametrize("label", [s[0] for s in SOURCES])
def test_mutated_files_are_read_exactly_or_refused(sources, label, tmp_path_factory):
    src = sources(label)
    work = tmp_path_factory.mktemp(f"mut-{label}")
    judge_mutants(label, EXAMPLES, file_mutant(src, work / f"mutated{src.path.suffix}"), work)
