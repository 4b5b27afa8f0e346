"""Every header value that sizes an array is checked against what the file's bytes can hold
before a cube is written (issue 28): a GRIB message's Ni, Nj, numberOfDataPoints and coded
values, FITS NAXISn and a tile-compressed image's ZNAXISn / ZTILEn, TIFF tile geometry,
HDF4 dimension sizes, a Zarr v2 array's shape and chunks. Each file here is written by its
format's own writer and then edited as a damaged header would be; each must be refused
with a located problem (the file, the array, the right kind), never a traceback, a cube
whose every read fails, nor one whose every read needs gigabytes."""

from __future__ import annotations

import json
import struct
import subprocess
import sys

import numpy as np
import pytest
import tifffile

import virtualize
from virtualize.model import VirtualizeError

from ._oracle import SCAN_TIMEOUT


def refused(path, **kw) -> list:
    """The fatal problems virtualize refuses `path` with (it must refuse)."""
    with pytest.raises(VirtualizeError) as e:
        virtualize.virtualize([path], path.parent / "cube.zarr", scan_timeout=SCAN_TIMEOUT, **kw)
    assert not (path.parent / "cube.zarr").exists()
    return [p for p in e.value.problems if p.fatal]


def _card(data: bytes, key: str, value: int) -> bytes:
    b = bytearray(data)
    k = b.index(key.encode().ljust(8) + b"=")
    b[k:k + 80] = f"{key:<8}= {value:>20d}".encode().ljust(80)
    return bytes(b)


@pytest.mark.parametrize("naxis1", [2 ** 62, 2 ** 40, 2 ** 31])
def test_fits_axis_lengths_past_the_file_are_refused_located(tmp_path, naxis1):
    """NAXIS1 = 2**62 was refused only as "OverflowError: Python int too large to convert
    to C long", naming no array: now `truncated`, at the HDU's array, its cards named."""
    fits = pytest.importorskip("astropy.io.fits")
    src = tmp_path / "src.fits"
    fits.HDUList([fits.PrimaryHDU(np.arange(600, dtype=">i2").reshape(20, 30)),
                  fits.ImageHDU(np.ones((4, 5), ">f4"), name="SCI")]).writeto(src)
    path = tmp_path / "wide.fits"
    path.write_bytes(_card(src.read_bytes(), "NAXIS1", naxis1))
    (p,) = refused(path)
    assert (p.kind, p.loc.file, p.loc.variable) == ("truncated", str(path), "hdu0")
    assert f"NAXIS1 = {naxis1}" in p.message and "Overflow" not in p.message


@pytest.mark.parametrize("key", ["ZNAXIS1", "ZNAXIS2", "ZTILE1"])
def test_fits_tile_geometry_past_the_table_is_refused_located(tmp_path, key):
    """A tile-compressed image's ZNAXISn / ZTILEn give its tiles: more (or fewer) than its
    table's rows is `corrupt` at the image."""
    fits = pytest.importorskip("astropy.io.fits")
    data = np.arange(64 * 48, dtype="i2").reshape(48, 64)
    src = tmp_path / "src.fits"
    fits.HDUList([fits.PrimaryHDU(), fits.CompImageHDU(data, name="TILED", tile_shape=(16, 16),
                                                       compression_type="RICE_1")]).writeto(src)
    path = tmp_path / "tiles.fits"
    path.write_bytes(_card(src.read_bytes(), key, 2 ** 40))
    (p,) = refused(path)
    assert (p.kind, p.loc.file, p.loc.variable) == ("corrupt", str(path), "TILED")
    assert "tiles" in p.message


def _tiff_tag(data: bytes, path, tag: int, value: int) -> bytes:
    b = bytearray(data)
    with tifffile.TiffFile(path) as tif:
        t = tif.pages[0].tags[tag]
        fmt = {3: "<H", 4: "<I"}[int(t.dtype)]
        struct.pack_into(fmt, b, t.valueoffset, value)
    return bytes(b)


@pytest.mark.parametrize("compression", ["zlib", "lzw", "packbits"])
def test_tiff_tile_geometry_past_the_bytes_is_refused_located(tmp_path, compression):
    """TileWidth and TileLength edited to 8192 make one 16 x 16 tile of a few hundred
    compressed bytes a 128 MiB chunk: more than its codec can decode those bytes to (deflate
    at most 1032 times its input, LZW 4096, PackBits 64), so `decode-mismatch` at the image's
    tile, where it was written and every read of it failed or needed 128 MiB."""
    src = tmp_path / "src.tif"
    tifffile.imwrite(src, np.arange(256, dtype="u2").reshape(16, 16), tile=(16, 16),
                     compression=compression, photometric="minisblack")
    data = src.read_bytes()
    for tag in (322, 323):  # TileWidth, TileLength
        data = _tiff_tag(data, src, tag, 8192)
    path = tmp_path / "tiles.tif"
    path.write_bytes(data)
    (p,) = refused(path)
    assert (p.kind, p.loc.file, p.loc.variable, p.loc.block) == (
        "decode-mismatch", str(path), "image", (0, 0))
    assert "cannot decode to the 134217728 bytes of its chunk" in p.message


def test_zarr2_shape_past_a_block_table_is_refused_located(tmp_path):
    """A .zarray whose shape makes 2**80 chunks: `corrupt` at the array before a block
    table is allocated (it was walked chunk by chunk until the scan's time ran out)."""
    import zarr

    store = tmp_path / "big.zarr"
    z = zarr.open_array(store, mode="w", shape=(4, 4), chunks=(2, 2), dtype="i4", zarr_format=2)
    z[...] = np.arange(16).reshape(4, 4)
    doc = json.loads((store / ".zarray").read_text())
    doc["shape"] = [2 ** 40, 2 ** 40]
    (store / ".zarray").write_text(json.dumps(doc))
    (p,) = refused(store)
    assert (p.kind, p.loc.file, p.loc.variable) == ("corrupt", str(store), "data")
    assert "more than a block table holds" in p.message


INFO = """
import json, sys
from pyhdf.SD import SD
sd = SD(sys.argv[1])
print(json.dumps([sd.select(i).info()[:3] for i in range(sd.info()[0])]))
"""


def test_hdf4_dimension_sizes_past_the_bytes_are_refused_located(tmp_path):
    """The SD interface keeps a dimension's length in a one-record vdata (`DimVal0.1`): set
    to 2**31 - 1 for the dimensions of the chunked SDS (10 and 11 long), pyhdf reads that
    length, and the SDS is refused at its name (a chunk grid past a block table), never
    allocated (other edits: the mutation suite's)."""
    pytest.importorskip("pyhdf.SD")
    import make_hdf4

    from virtualize.formats.hdf4 import layout

    (src,) = make_hdf4.make("hdf4_sds", tmp_path)
    raw = src.read_bytes()

    class File:
        def pread(self, n, at):
            return raw[at:at + n]

    fields = [off for (tag, _), (_, off, ln) in layout.descriptors(File(), len(raw)).items()
              if tag == layout.VS and ln == 4 and raw[off:off + 4] in (b"\0\0\0\n", b"\0\0\0\x0b")]
    seen = set()
    for at in fields:
        b = bytearray(raw)
        b[at:at + 4] = struct.pack(">I", 2 ** 31 - 1)
        path = tmp_path / f"m{at}.hdf"
        path.write_bytes(bytes(b))
        proc = subprocess.run([sys.executable, "-c", INFO, str(path)], capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        big = [name for name, _rank, dims in json.loads(proc.stdout)
               if 2 ** 31 - 1 in (dims if isinstance(dims, list) else [dims])]
        assert big
        seen |= set(big)
        report = virtualize.check([path], scan_timeout=SCAN_TIMEOUT)
        fatal = [p for p in report.problems if p.fatal]
        assert not report.ok and {p.loc.variable for p in fatal} >= set(big), fatal
        assert all(p.loc.file == str(path) for p in fatal)
    assert {"chunked", "chunked_deflate"} <= seen
