"""FITS images: every array read through the cube (virtualize.open, xarray's
engine="virtualize", the kerchunk JSON export read with fsspec + zarr) equals astropy's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import virtualize
from virtualize.model import VirtualizeError

from helpers import assert_same, kerchunk_group, kerchunk_xarray

fits = pytest.importorskip("astropy.io.fits")
xr = pytest.importorskip("xarray")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fits_case(case):
    return lambda name: case(f"fits_{name}")


def hdu_of(path, name: str) -> int:
    """The HDU index of the cube's array `name` (its FITS_HDU attribute's rule)."""
    with fits.open(path) as hdul:
        for k, h in enumerate(hdul):
            if name in (h.name, f"hdu{k}") and (k or name == "hdu0"):
                return k
    raise KeyError(name)


def astropy_data(path, k: int) -> np.ndarray:
    """astropy's `hdu.data`: scaled by BSCALE / BZERO, NaN at BLANK, of astropy's type."""
    return fits.getdata(path, k)


def roundtrip(files, tmp_path, **kw):
    cube, refs = tmp_path / "cube.zarr", tmp_path / "cube.json"
    report = virtualize.virtualize(files, cube, **kw)
    virtualize.virtualize(files, refs, **kw)
    return report, virtualize.open(cube), kerchunk_group(refs)


@pytest.mark.parametrize("name,kw", [("multi", {}), ("scaled", {}),
                                     ("compressed", {"drop": ["HCLOSSY"]}),
                                     ("cube3d", {"chunk_size": "256K"})])
def test_every_image_reads_like_astropy(fits_case, tmp_path, name, kw):
    (path,) = fits_case(name)
    report, g, k = roundtrip([path], tmp_path, **kw)
    assert report.ok
    # (xarray's CF decoding on: nothing left for it to scale or mask)
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize")
    kx = kerchunk_xarray(tmp_path / "cube.json")
    assert report.plan.arrays
    for var in report.plan.arrays:
        h = hdu_of(path, var)
        attrs = dict(g[var].attrs)
        assert attrs["FITS_HDU"] == h
        want = astropy_data(path, h)  # scaled, NaN at BLANK: bit for bit
        assert_same(g[var][...], want, f"{name} {var}")
        assert_same(k[var][...], want, f"{name} {var}: kerchunk export")
        assert_same(ds[var].values, want, f"{name} {var}: xarray")
        assert_same(kx[var].values, want, f"{name} {var}: kerchunk via xarray")


def test_data_offsets_are_astropys(fits_case):
    from virtualize.formats import scan

    (path,) = fits_case("multi")
    inv = scan(path)
    with fits.open(path, memmap=True, lazy_load_hdus=True) as hdul:
        for v in inv.variables.values():
            info = hdul.fileinfo(v.attrs["FITS_HDU"])
            ref = v.blocks.refs.reshape(-1)[0]
            assert int(ref["offset"]) == info["datLoc"]
            assert int(ref["length"]) == info["datSpan"] - (-int(ref["length"]) % 2880) or \
                int(ref["length"]) == hdul[v.attrs["FITS_HDU"]].data.nbytes


def test_names_dims_and_header_cards(fits_case):
    (path,) = fits_case("multi")
    report = virtualize.check([path])
    arrays = report.plan.arrays
    assert set(arrays) == {"hdu0", "I16", "I32", "I64", "F32", "F64", "U16", "U32", "hdu9"}
    assert arrays["I16"].dims == ("I16_naxis2", "I16_naxis1")  # lengths differ in the file
    assert arrays["I16"].shape == fits.getdata(path, 1).shape == (5, 7)
    assert arrays["I16"].codecs == [{"name": "bytes", "configuration": {"endian": "big"}}]
    attrs = arrays["hdu0"].attrs
    assert attrs["OBJECT"] == "M31" and attrs["EXPTIME"] == 12.5
    assert attrs["HISTORY"] == ["first line", "second line"]
    assert attrs["COMMENT"][-1] == "a comment"
    assert "BZERO" not in arrays["U16"].attrs and arrays["U16"].dtype == np.dtype("u2")
    (skip,) = [p for p in report.problems if p.kind == "unsupported-object"]
    assert not skip.fatal and skip.loc.variable == "hdu8" and "BINTABLE" in skip.message
    json.dumps(attrs)


def test_shared_axes_are_named_naxis(fits_case):
    (path,) = fits_case("cube3d")
    assert virtualize.check([path]).plan.arrays["hdu0"].dims == ("naxis3", "naxis2", "naxis1")


def test_unsigned_offsets_decode_every_value_exactly(tmp_path):
    """BZERO 2**15 / 2**31 / -128: the fixedscaleoffset codec's float64 arithmetic holds
    every 8- and 16-bit value and the 32-bit extremes exactly."""
    u16 = np.arange(65536, dtype=np.uint16).reshape(256, 256)
    u32 = np.array([0, 1, 2**31 - 1, 2**31, 2**32 - 2, 2**32 - 1], dtype=np.uint32)
    i8 = np.arange(-128, 128, dtype=np.int16)
    s8 = fits.ImageHDU((i8 + 128).astype(np.uint8), name="S8", do_not_scale_image_data=True)
    s8.header["BZERO"] = -128
    path = tmp_path / "u.fits"
    fits.HDUList([fits.PrimaryHDU(u16), fits.ImageHDU(u32, name="U32"), s8]).writeto(path)
    _, g, k = roundtrip([path], tmp_path)
    for var, h in [("hdu0", 0), ("U32", 1), ("S8", 2)]:
        want = fits.getdata(path, h)
        assert_same(g[var][...], want, var)
        assert_same(k[var][...], want, f"{var}: kerchunk export")
    assert g["S8"].dtype == np.int8 and g["hdu0"].dtype == np.uint16


def test_scaling_and_blank_are_the_fitsscale_codec(fits_case):
    (path,) = fits_case("scaled")
    report = virtualize.check([path])
    a = report.plan.arrays
    assert a["S16"].codecs[0] == {"name": "virtualize.fitsscale", "configuration": {
        "scale": 0.25, "zero": 10.5, "blank": -32768, "dtype": "<f4", "astype": "<i2"}}
    assert a["S16"].dtype == np.float32 and np.isnan(a["S16"].fill_value)
    assert a["S32"].dtype == np.float64 and a["FSCALED"].dtype == np.float32
    assert "BSCALE" not in a["S16"].attrs and "BLANK" not in a["S16"].attrs
    assert not any(k in a[v].attrs for v in a for k in ("scale_factor", "add_offset",
                                                         "_FillValue"))
    assert a["BLANKED"].codecs[0]["configuration"]["blank"] == -1
    # astropy ignores BLANK in an unsigned image: the cube too (the card stays)
    assert a["U16B"].dtype == np.uint16 and a["U16B"].attrs["BLANK"] == -32768
    assert not any(p.kind == "cf-scaling" for p in report.problems)
    assert not [p for p in report.problems if p.loc.variable == "U64"]  # small: inlined
    assert any(n.startswith("U64: cannot be referenced (unsupported-scaling)") for n in report.notes)
    assert a["U64"].inline is not None and a["U64"].dtype == np.dtype("u8")


@pytest.mark.parametrize("bitpix,bscale,bzero,blank", [
    (16, 0.045777764213996, 1500.0, None),  # (astropy's scale.fits: inexact in float32)
    (16, 1.0 / 3.0, -7.1, -32768), (8, 0.1, 0.7, 255), (8, 2, 1, 0),  # (BLANK 0: no NaN)
    (32, 1.0 / 3.0, 0.1, -1), (64, 0.1, 3.0, None), (-32, 1.0 / 7.0, 0.3, None),
    (-64, 0.1, -2.5, None), (16, 1, 0, 7),  # (BLANK alone: floats, NaN at 7)
])
def test_scaled_images_read_as_astropys_data_bit_for_bit(tmp_path, bitpix, bscale, bzero, blank):
    """BSCALE / BZERO / BLANK decoded by the `virtualize.fitsscale` codec: astropy's
    `hdu.data` (its type: float32 for BITPIX 8, 16 and -32; its float32 arithmetic) bit for
    bit, through virtualize.open, xarray (CF decoding on) and the kerchunk export."""
    from virtualize.codecs import fits_scale

    types = {8: "u1", 16: ">i2", 32: ">i4", 64: ">i8", -32: ">f4", -64: ">f8"}
    rng = np.random.default_rng(abs(bitpix))
    if bitpix > 0:
        info = np.iinfo(types[bitpix])
        raw = rng.integers(info.min, info.max, (40, 50), endpoint=True).astype(types[bitpix])
        if blank is not None:
            raw.flat[::7] = blank
    else:
        raw = rng.normal(0, 1e3, (40, 50)).astype(types[bitpix])
    path = tmp_path / "s.fits"
    hdu = fits.PrimaryHDU(raw, do_not_scale_image_data=True)
    hdu.header["BSCALE"], hdu.header["BZERO"] = bscale, bzero
    if blank is not None:
        hdu.header["BLANK"] = blank
    hdu.writeto(path)
    want = fits.getdata(path)
    assert want.dtype.kind == "f"
    if blank:
        assert np.array_equal(np.isnan(want), raw == blank) and (raw == blank).sum() >= 285
    _, g, k = roundtrip([path], tmp_path)
    assert_same(g["hdu0"][...], want, "virtualize.open")
    assert_same(k["hdu0"][...], want, "kerchunk export")
    assert_same(xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize")["hdu0"].values,
                want, "xarray")
    assert_same(kerchunk_xarray(tmp_path / "cube.json")["hdu0"].values, want,
                "kerchunk via xarray")
    # (and not float64 arithmetic cast to float32, which differs in the last bit)
    if want.dtype == np.float32 and bscale not in (1, 2):
        f64 = (raw.astype(np.float64) * bscale + bzero).astype(np.float32)
        assert not np.array_equal(f64.view("u4"), want.astype("=f4").view("u4"))
    assert_same(fits_scale(raw.astype(raw.dtype.newbyteorder("=")), bscale, bzero, blank,
                           want.dtype.newbyteorder("=")), want, "fits_scale")


def test_scaled_kerchunk_export_reads_without_importing_virtualize(tmp_path):
    """A fresh interpreter that never imports virtualize reads a scaled image's kerchunk
    export with zarr + fsspec: zarr finds `virtualize.fitsscale` by the entry point
    pyproject.toml declares (given to it as a dist-info: this venv's install untouched)."""
    import os
    import subprocess
    import sys
    import textwrap
    import tomllib

    raw = np.arange(-500, 700, dtype=">i2").reshape(30, 40)
    hdu = fits.PrimaryHDU(raw, do_not_scale_image_data=True)
    hdu.header["BSCALE"], hdu.header["BZERO"], hdu.header["BLANK"] = 1 / 3, 0.1, 7
    path, refs = tmp_path / "s.fits", tmp_path / "s.json"
    hdu.writeto(path)
    virtualize.virtualize([path], refs)
    np.save(tmp_path / "want.npy", fits.getdata(path))
    root = Path(__file__).resolve().parents[1]
    dist = tmp_path / "site" / "virtualize_fits_probe-0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: virtualize-fits-probe\n"
                                   "Version: 0\n")
    eps = tomllib.loads((root / "pyproject.toml").read_text())["project"]["entry-points"]
    (dist / "entry_points.txt").write_text(
        "[zarr.codecs]\n" + "".join(f"{k} = {v}\n" for k, v in eps["zarr.codecs"].items()))
    script = textwrap.dedent("""
        import sys
        import fsspec, numpy as np, zarr
        from zarr.storage import FsspecStore
        want = np.load(sys.argv[2])
        zarr.config.set({"array.rectilinear_chunks": True})
        fs = fsspec.filesystem("reference", fo=sys.argv[1], asynchronous=True)
        g = zarr.open_group(FsspecStore(fs, read_only=True, path=""), mode="r", zarr_format=3)
        got = g["hdu0"][...]
        assert got.dtype == want.dtype.newbyteorder("=") == np.float32, got.dtype
        assert np.array_equal(got.view("u4"), want.astype("=f4").view("u4"))
        print(sorted(m for m in sys.modules if m.startswith("virtualize")))
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root / "src"), str(dist.parent)]))
    got = subprocess.run([sys.executable, "-c", script, str(refs), str(tmp_path / "want.npy")],
                         env=env, capture_output=True, text=True)
    assert got.returncode == 0, got.stderr[-3000:]
    assert "virtualize.codecs" in got.stdout  # (loaded by the entry point, not imported)


def test_tile_compressed_images_are_one_chunk_per_tile(fits_case, tmp_path):
    (path,) = fits_case("compressed")
    report, g, k = roundtrip([path], tmp_path, drop=["HCLOSSY"])
    a = report.plan.arrays
    assert a["RICE"].chunk_lengths == ((16, 16, 16, 2), (32, 32, 6))  # edge tiles short
    assert a["RICE"].codecs == [{"name": "imagecodecs_rcomp", "configuration": {"nblock": 32}}]
    assert [c["name"] for c in a["GZ2"].codecs] == ["bytes", "numcodecs.shuffle", "gzip"]
    assert [c["name"] for c in a["GZ1"].codecs] == ["bytes", "gzip"]
    assert a["RICEU16"].dtype == np.dtype("u2")
    assert [c["name"] for c in a["RICEU16"].codecs] == ["numcodecs.fixedscaleoffset",
                                                       "imagecodecs_rcomp"]
    assert a["GZ3D"].chunk_lengths == ((2, 2, 2), (5,), (40,))
    assert a["HC"].codecs == [{"name": "imagecodecs_hcomp"}]
    assert a["HC"].chunk_lengths == ((16, 16, 16, 4), (36, 36))
    for var in ("RICE", "GZ1", "GZ2", "RICEU16", "GZ3D", "HC"):
        assert a[var].inline is None
        assert "ZCMPTYPE" not in a[var].attrs and "TFORM1" not in a[var].attrs
        h = hdu_of(path, var)
        assert_same(g[var][...], fits.getdata(path, h), var)
        assert_same(k[var][...], fits.getdata(path, h), f"{var}: kerchunk export")
        assert_same(g[var][5:9, 3:], fits.getdata(path, h)[5:9, 3:], f"{var}: a region")


GZIP_PLAIN = ["bytes", "gzip"]
GZIP_SHUFFLED = ["bytes", "numcodecs.shuffle", "gzip"]


def test_gzip_tiles_read_like_astropy(fits_case, tmp_path):
    """GZIP_1 / GZIP_2 images of every integer type, tiles that do not divide the image or
    exceed it, scaled and blanked integers (RICE_1 and HCOMPRESS_1 tiles too), lossless
    floats; tiles of 4-byte integers in 16- and 8-bit images (`virtualize.fitsgzip`:
    before it, `decode-mismatch ... [bytes, gzip] fails`); quantized floats inlined
    (small), never approximated."""
    path, old = fits_case("gzip")
    for src in (path, old):
        out = tmp_path / src.stem
        out.mkdir()
        report, g, k = roundtrip([src], out)
        assert report.ok, [p.message for p in report.problems if p.fatal]
        ds = xr.open_dataset(out / "cube.zarr", engine="virtualize")
        a = report.plan.arrays
        for var in a:
            h = hdu_of(src, var)
            want = fits.getdata(src, h)
            assert a[var].dtype.newbyteorder("=") == want.dtype.newbyteorder("="), var
            assert_same(g[var][...], want, var)
            assert_same(k[var][...], want, f"{var}: kerchunk export")
            assert_same(ds[var].values, want, f"{var}: xarray")
            region = tuple(slice(1, n - 1) for n in want.shape)
            assert_same(g[var][region], want[region], f"{var}: a region")
        if src == old:
            for var in ("OLD16", "OLD8", "OLDU16"):
                assert a[var].inline is None
                assert a[var].codecs[-1] == {"name": "virtualize.fitsgzip", "configuration": {
                    "bitpix": 8 if var == "OLD8" else 16, "shuffle": var == "OLD8"}}
            assert a["OLDU16"].dtype == np.dtype("u2")
            assert [c["name"] for c in a["ZBLANK"].codecs] == ["virtualize.fitsscale",
                                                               *GZIP_PLAIN]
            assert np.isnan(g["ZBLANK"][...]).any() and "ZBLANK" not in a["ZBLANK"].attrs
            continue
        referenced = {v for v in a if a[v].inline is None}
        assert referenced == {"I16", "I32", "I64", "U8", "I8", "U16", "U32", "ROWS", "CUBE",
                              "SCALED", "BLANK", "RSCALED", "HBLANK", "F32", "F64"}
        names = {v: [c["name"] for c in a[v].codecs] for v in referenced}
        assert names["I16"] == names["I32"] == names["U8"] == names["ROWS"] == GZIP_PLAIN
        assert names["I64"] == names["CUBE"] == names["F64"] == GZIP_SHUFFLED
        assert names["U16"] == ["numcodecs.fixedscaleoffset", *GZIP_SHUFFLED]
        assert names["I8"] == ["numcodecs.fixedscaleoffset", *GZIP_PLAIN]  # (1 byte: no shuffle)
        assert names["SCALED"] == ["virtualize.fitsscale", *GZIP_PLAIN]
        assert names["BLANK"] == ["virtualize.fitsscale", *GZIP_SHUFFLED]
        assert names["RSCALED"] == ["virtualize.fitsscale", "imagecodecs_rcomp"]
        assert names["HBLANK"] == ["virtualize.fitsscale", "imagecodecs_hcomp"]
        assert a["I32"].chunk_lengths == ((7,) * 7 + (1,), (13,) * 5 + (5,))
        assert a["U8"].chunk_lengths == ((40,), (30,))  # (a tile larger than the image)
        assert a["ROWS"].chunk_lengths == ((1,) * 20, (300,))
        assert "BSCALE" not in a["SCALED"].attrs and "BLANK" not in a["BLANK"].attrs
        assert np.isnan(g["BLANK"][3:5, 7:9]).all()
        for var in ("QUANT", "DITHER"):  # (quantized: astropy's values, inlined)
            assert any(n.startswith(f"{var}: cannot be referenced (unsupported-compression)")
                       for n in report.notes)
    strict = virtualize.check([path], inline_threshold=0)
    refused = {p.loc.variable: p for p in strict.problems if p.fatal}
    assert set(refused) == {"QUANT", "DITHER"}
    assert "ZSCALE / ZZERO" in refused["QUANT"].message
    assert "SUBTRACTIVE_DITHER_1" in refused["DITHER"].message and \
        "ZDITHER0 = 17" in refused["DITHER"].message


def test_fitsgzip_codec_types_a_tile_by_its_decoded_size():
    """`fits_gzip_decode` against astropy's own tile decoding (`_decompress_tile` +
    `_finalize_array`, then the assignment into the image's type): 2-, 4- and 8-byte
    integers in 8-, 16- and 32-bit images (values wrapped as numpy's cast wraps them),
    4-byte floats in a float64 image, shuffled or not; another length is an error."""
    import gzip

    from astropy.io.fits.hdu.compressed import _tiled_compression as tc

    from virtualize.codecs import fits_gzip_decode, fits_gzip_encode

    rng = np.random.default_rng(7)
    for kind, bitpix in ((">i4", 16), (">i4", 8), (">i8", 32), (">i2", 32), (">f4", -64),
                         (">i2", 8), (">i4", -32)):
        values = (rng.standard_normal(24) * 1e5).astype(kind)
        for shuffle in (False, True):
            raw = values.tobytes()
            if shuffle:
                raw = np.frombuffer(raw, np.uint8).reshape(-1, values.itemsize).T.tobytes()
            tile = gzip.compress(raw)
            algorithm = "GZIP_2" if shuffle else "GZIP_1"
            settings = {"itemsize": values.itemsize} if shuffle else {}
            want = np.empty((4, 6), BITPIX_TYPES[bitpix])
            want[...] = tc._finalize_array(tc._decompress_tile(tile, algorithm=algorithm,
                                                               **settings),
                                           bitpix=bitpix, tile_shape=(4, 6),
                                           algorithm=algorithm, lossless=True)
            got = np.frombuffer(fits_gzip_decode(tile, 24, bitpix, shuffle),
                                want.dtype.newbyteorder(">")).reshape(4, 6).astype(want.dtype)
            assert_same(got, want, f"{kind} in BITPIX {bitpix}, shuffle {shuffle}")
            stored = got.astype(want.dtype.newbyteorder(">")).tobytes()
            again = fits_gzip_encode(stored, bitpix, shuffle)
            assert fits_gzip_decode(again, 24, bitpix, shuffle) == stored
    with pytest.raises(ValueError, match="not 25 pixels"):
        fits_gzip_decode(gzip.compress(bytes(30)), 25, 16, False)
    with pytest.raises(ValueError, match="does not gunzip"):
        fits_gzip_decode(b"not gzip", 4, 16, False)


BITPIX_TYPES = {8: np.uint8, 16: np.int16, 32: np.int32, 64: np.int64, -32: np.float32,
                -64: np.float64}


def test_other_tile_compressions_are_inlined_when_small_else_refused(fits_case, tmp_path):
    (path,) = fits_case("compressed")
    report = virtualize.check([path])
    assert not report.ok
    (hc,) = [p for p in report.problems if p.fatal]
    assert (hc.kind, hc.loc.file, hc.loc.variable) == ("unsupported-compression", str(path),
                                                       "HCLOSSY")
    assert "HCOMPRESS_1" in hc.message and "--inline HCLOSSY" in hc.remedy
    for var in ("PLIO", "FRICE"):  # (FRICE: quantized floats) small: inlined by the planner
        assert any(n.startswith(f"{var}: cannot be referenced (unsupported-compression)")
                   for n in report.notes)
        assert report.plan.arrays[var].inline is not None
    # --inline-threshold 0 refuses them; --inline takes a large one
    strict = virtualize.check([path], inline_threshold=0)
    assert {p.loc.variable for p in strict.problems if p.fatal} == {"PLIO", "FRICE", "HCLOSSY"}
    report = virtualize.virtualize([path], tmp_path / "c.zarr", inline=["HCLOSSY"])
    g = virtualize.open(tmp_path / "c.zarr")
    for var in ("PLIO", "FRICE", "HCLOSSY"):
        assert_same(g[var][...], fits.getdata(path, hdu_of(path, var)), var)


def test_big_cube_is_cut_into_whole_rows_and_scan_reads_headers_only(fits_case, tmp_path):
    from virtualize.formats import scan

    (path,) = fits_case("cube3d")
    inv = scan(path)
    assert inv.bytes_read <= 2 * 2880 < inv.size
    report, g, _ = roundtrip([path], tmp_path, chunk_size="256K")
    assert report.plan.arrays["hdu0"].chunk_lengths[0] == (2,) * 8
    assert_same(g["hdu0"][3:7, 100:, :5], fits.getdata(path)[3:7, 100:, :5], "a region")


def test_exposures_stack_along_a_new_time_axis(fits_case, tmp_path):
    files = fits_case("exposures")
    report, g, k = roundtrip(list(reversed(files)), tmp_path, concat_dim="time")
    assert report.plan.arrays["hdu0"].dims == ("time", "naxis2", "naxis1")
    want = np.stack([fits.getdata(f) for f in files])
    assert_same(g["hdu0"][...], want, "stack")
    assert_same(k["hdu0"][...], want, "stack: kerchunk export")
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize")
    assert [str(t)[:10] for t in ds.time.values] == ["2024-01-01", "2024-01-02", "2024-01-03"]
    assert_same(ds["hdu0"].values, want, "stack via xarray")


def test_exposures_stack_along_time_from_their_date_obs(fits_case, tmp_path):
    """`--coord time=attr:DATE-OBS`: each exposure's place from its primary header (the
    primary's cards are the root group's attributes too), not from its name or order."""
    import shutil

    from virtualize.cli import main

    files = fits_case("exposures")
    named = []
    for f, name in zip(files, ("b.fits", "c.fits", "a.fits")):  # (names in another order)
        shutil.copy(f, tmp_path / name)
        named.append(tmp_path / name)
    cube, refs = tmp_path / "e.zarr", tmp_path / "e.json"
    for out in (cube, refs):
        assert main([*map(str, sorted(named)), "-o", str(out), "--concat-dim", "time",
                     "--coord", "time=attr:DATE-OBS"]) in (0, None)
    want = np.stack([fits.getdata(f) for f in files])  # (DATE-OBS order: the fixture's)
    assert_same(virtualize.open(cube)["hdu0"][...], want, "DATE-OBS stack")
    assert_same(kerchunk_group(refs)["hdu0"][...], want, "DATE-OBS stack: kerchunk export")
    ds = xr.open_dataset(cube, engine="virtualize")
    assert ds["hdu0"].dims == ("time", "naxis2", "naxis1")
    assert_same(ds["hdu0"].values, want, "DATE-OBS stack via xarray")
    assert ds.time.dtype == "M8[ns]" and list(ds.time.values) == [
        np.datetime64(fits.getheader(f)["DATE-OBS"], "ns") for f in files]
    assert "DATE-OBS" not in ds.attrs and ds.attrs["EXPTIME"] == 30.0


def test_cli_stacks_exposures(fits_case, tmp_path):
    from virtualize.cli import main

    files = fits_case("exposures")
    assert main([*map(str, files), "-o", str(tmp_path / "c.zarr"), "--concat-dim", "time"]) in (0, None)
    assert virtualize.open(tmp_path / "c.zarr")["hdu0"].shape == (3, 24, 32)


# -- damaged files: clean, located refusals -------------------------------------------------

def _damaged(fits_case, tmp_path, edit) -> str:
    (path,) = fits_case("multi")
    data = bytearray(path.read_bytes())
    data = edit(data)
    out = tmp_path / "damaged.fits"
    out.write_bytes(bytes(data))
    return str(out)


@pytest.mark.parametrize("edit,kind,where", [
    (lambda d: d[:2000], "corrupt", "before its END card"),  # inside the first header
    (lambda d: d[:40000], "truncated", "end past the end of the file"),  # inside U16's data
    (lambda d: d[:2880 * 2 + 100], "corrupt", "before its END card"),  # the 2nd header
    (lambda d: d[:80 + 28] + b"99" + d[80 + 30:], "corrupt", "BITPIX = 99"),
    (lambda d: d[:80 * 2 + 28] + b"-3" + d[80 * 2 + 30:], "corrupt", "NAXIS = -3"),
    (lambda d: d[:80 + 10] + b"x" + d[80 + 11:], "corrupt", "BITPIX card"),  # unparsable
    # an END astropy would read past or take for END with a warning: refused
    (lambda d: d.replace(b"END" + b" " * 77, b"END  {" + b" " * 74, 1), "corrupt", "damaged END"),
    (lambda d: d.replace(b"END" + b" " * 77, b"END     A" + b" " * 71, 1), "corrupt",
     "damaged END"),
    # no END: the cards run into the data, which are no ASCII text
    (lambda d: d.replace(b"END" + b" " * 77, b"ENX" + b" " * 77, 1), "corrupt",
     "cannot be parsed"),
])
def test_damaged_headers_are_refused_located(fits_case, tmp_path, edit, kind, where):
    path = _damaged(fits_case, tmp_path, edit)
    try:
        report = virtualize.check([path])
    except VirtualizeError as e:
        problems = e.problems
    else:
        assert not report.ok
        problems = [p for p in report.problems if p.fatal]
    assert problems and problems[0].kind == kind and problems[0].loc.file == path
    assert where in problems[0].message


def test_a_file_cut_in_its_last_padding_is_noted(fits_case, tmp_path):
    (path,) = fits_case("cube3d")
    data = path.read_bytes()
    out = tmp_path / "cut.fits"
    out.write_bytes(data[:2880 + 16 * 128 * 256 * 4 + 10])
    report = virtualize.check([str(out)])
    assert report.ok
    (p,) = [p for p in report.problems if p.kind == "truncated-padding"]
    assert not p.fatal and p.loc.file == str(out)


def test_bytes_after_the_last_hdu_are_noted_and_ignored(fits_case, tmp_path):
    (path,) = fits_case("cube3d")
    out = tmp_path / "trailing.fits"
    out.write_bytes(path.read_bytes() + b"\x00junk" * 100)
    report, g, _ = roundtrip([out], tmp_path)
    (p,) = [p for p in report.problems if p.kind == "trailing-bytes"]
    assert not p.fatal and p.loc.file == str(out)
    assert_same(g["hdu0"][...], fits.getdata(out), "hdu0")


def test_missing_astropy_is_a_located_problem_naming_the_extra(fits_case, monkeypatch):
    from virtualize.formats import fits as plugin
    from virtualize.formats import scan

    (path,) = fits_case("multi")
    monkeypatch.setattr(plugin, "_astropy_fits", lambda: None)
    with pytest.raises(VirtualizeError) as e:
        scan(path)
    (p,) = e.value.problems
    assert p.kind == "missing-library" and p.loc.file == str(path)
    assert "virtualize[fits]" in p.message


def test_sniff():
    from virtualize.formats import registry

    assert registry.sniff(b"SIMPLE  ").name == "fits"
    assert registry.sniff(b"SIMPLEX ") is None


def test_a_directory_of_exposures_is_expanded_to_its_fits_files(fits_case):
    files = fits_case("exposures")
    report = virtualize.check([str(files[0].parent)], concat_dim="time")
    assert report.ok and sorted(report.files) == sorted(map(str, files))


ASTROPY_FILES = Path(__file__).parent / "data" / "fits"  # (astropy's suite: README.md there)
# what each of astropy's test files holds as arrays (docs/fits.md); the others have none
ASTROPY_ARRAYS = {
    "arange.fits": {"hdu0"}, "blank.fits": {"hdu0"}, "checksum.fits": {"hdu0"},
    "checksum_false.fits": {"hdu0"}, "comp.fits": {"COMPRESSED_IMAGE"},
    "compressed_float_bzero.fits": {"COMPRESSED_IMAGE"},
    "compressed_image.fits": {"COMPRESSED_IMAGE"}, "double_ext.fits": {"COMPRESSED_IMAGE"},
    "fixed-1890.fits": {"hdu0"}, "o4sp040b0_raw.fits": {"SCI_1", "SCI_2"},
    "scale.fits": {"hdu0"}, "test0.fits": {f"SCI_{k}" for k in range(1, 5)},
    "test1.fits": {f"SCI_{k}" for k in range(1, 5)},
}


def _astropy_test_files() -> list:
    """astropy's own test files (real FITS from its suite: HST raw exposures, RICE tiles,
    random groups, tables), copied into tests/data/fits."""
    return sorted(ASTROPY_FILES.glob("*.fits"))


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("path", _astropy_test_files(), ids=lambda p: p.name)
def test_astropys_test_files_read_like_astropy_or_are_refused_for_having_no_image(path, tmp_path):
    """Each file virtualizes with every array equal to astropy's `getdata` (scaled, NaN at
    BLANK) through virtualize.open, xarray and the kerchunk export, or is refused as
    `no-arrays` (tables, random groups, empty primaries only), located at the file."""
    try:
        report = virtualize.virtualize([path], tmp_path / "cube.zarr")
    except VirtualizeError as e:
        assert path.name not in ASTROPY_ARRAYS, str(e)
        assert {p.kind for p in e.problems} == {"no-arrays"}, str(e)
        assert all(p.loc.file == str(path) for p in e.problems)
        with fits.open(path) as hdul:  # a file of tables (or random groups) only
            assert not any(h.is_image and h.size and not h.header.get("GROUPS") for h in hdul)
        return
    assert set(report.plan.arrays) == ASTROPY_ARRAYS[path.name]
    virtualize.virtualize([path], tmp_path / "cube.json")
    g, k = virtualize.open(tmp_path / "cube.zarr"), kerchunk_group(tmp_path / "cube.json")
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize")
    for var in report.plan.arrays:
        attrs = dict(g[var].attrs)
        want = astropy_data(path, attrs["FITS_HDU"])
        assert_same(g[var][...], want, f"{path.name} {var}")
        assert_same(k[var][...], want, f"{path.name} {var}: kerchunk export")
        assert_same(ds[var].values, want, f"{path.name} {var}: xarray")
    assert all(a.inline is None for a in report.plan.arrays.values())  # (all references)


def test_astropys_test_files_stack_along_a_new_axis(tmp_path):
    """Two of astropy's HST files of one layout (4 SCI int16 images each) in one cube."""
    files = [ASTROPY_FILES / "test0.fits", ASTROPY_FILES / "test1.fits"]
    report, g, k = roundtrip(files, tmp_path, concat_dims=["exposure"],
                             coords={"exposure": "test0,test1"})
    assert report.ok
    for var in (f"SCI_{n}" for n in range(1, 5)):
        want = np.stack([astropy_data(f, int(var[-1])) for f in files])
        assert report.plan.arrays[var].dims[0] == "exposure"
        assert_same(g[var][...], want, f"{var} stack")
        assert_same(k[var][...], want, f"{var} stack: kerchunk export")


def test_astropys_test_files_include_images():
    names = {p.name for p in _astropy_test_files()}
    assert len(names) == 33 and set(ASTROPY_ARRAYS) <= names


def test_fits_over_http_reads_like_the_local_file(fits_case, tmp_path):
    """A FITS source by URL: headers (and tile tables) fetched by range, every array equal
    to the local file's astropy read; the decode check reads through astropy on the
    remote file object."""
    import shutil

    from servers import RangeHTTPServer

    pytest.importorskip("aiohttp")
    root = tmp_path / "served"
    root.mkdir()
    for name in ("tiles", "multi"):
        (path,) = fits_case(name)
        shutil.copy2(path, root / path.name)
    srv = RangeHTTPServer(root)
    try:
        for name in ("tiles.fits", "multi.fits"):
            url = f"{srv.url}/{name}"
            report = virtualize.virtualize([url], tmp_path / f"{name}.zarr")
            g = virtualize.open(tmp_path / f"{name}.zarr")
            for var in report.plan.arrays:
                attrs = dict(g[var].attrs)
                want = astropy_data(root / name, attrs["FITS_HDU"])
                assert_same(g[var][...], want, f"{name} {var} over HTTP")
    finally:
        srv.stop()


def test_a_damaged_tile_card_is_refused_at_its_image(fits_case, tmp_path):
    (path,) = fits_case("tiles")
    data = bytearray(path.read_bytes())
    at = data.index(b"ZTILE1  =")
    data[at + 10:at + 30] = b"'forty'".ljust(20)
    out = tmp_path / "tile-card.fits"
    out.write_bytes(bytes(data))
    report = virtualize.check([str(out)])
    (p,) = [p for p in report.problems if p.loc.variable == "RICE"]
    assert (p.kind, p.loc.file, p.fatal) == ("corrupt", str(out), True)
    assert "forty" in p.message
    # (astropy cannot open the HDUs after it either: the decode check refuses those)
    assert not report.ok


def test_tile_compressed_exposures_stack_and_append(tmp_path):
    rng = np.random.default_rng(7)
    files = []
    for k in range(4):
        p = tmp_path / f"obs_2024010{k + 1}.fits"
        image = fits.CompImageHDU(rng.integers(0, 65536, (50, 70)).astype(np.uint16), name="SCI",
                                  compression_type="RICE_1", tile_shape=(16, 32))
        fits.HDUList([fits.PrimaryHDU(), image]).writeto(p)
        files.append(p)
    cube = tmp_path / "cube.zarr"
    report = virtualize.virtualize(files[:3], cube, concat_dim="time")
    assert report.plan.arrays["SCI"].chunk_lengths == ((1, 1, 1), (16, 16, 16, 2), (32, 32, 6))
    virtualize.append(cube, [files[3]])
    g = virtualize.open(cube)
    assert_same(g["SCI"][...], np.stack([fits.getdata(f, 1) for f in files]), "stack + append")


def test_extension_names_a_cube_cannot_hold_are_hdu_k(tmp_path):
    hdus = [fits.PrimaryHDU()]
    for name in ["a/b", "..", "__x", "SCI", "SCI", "hdu9", "AIPS FQ"]:
        hdus.append(fits.ImageHDU(np.zeros((2, 2), np.int16), name=name))
    hdus[4].header["EXTVER"] = 1
    hdus[5].header["EXTVER"] = 2
    path = tmp_path / "names.fits"
    fits.HDUList(hdus).writeto(path)
    report, g, _ = roundtrip([path], tmp_path)
    assert set(report.plan.arrays) == {"hdu1", "hdu2", "hdu3", "SCI_1", "SCI_2", "hdu6",
                                       "AIPS FQ"}


def test_without_astropy_check_reports_the_extra_to_install(fits_case, monkeypatch, tmp_path):
    """Wherever the scan ran (this process or a worker that has astropy), a check in a
    process without astropy refuses, located, naming the extra: never a traceback."""
    import shutil
    import sys
    from concurrent.futures import ThreadPoolExecutor

    (source,) = fits_case("multi")
    path = tmp_path / "multi.fits"
    shutil.copy(source, path)
    for name in ("astropy", "astropy.io", "astropy.io.fits"):  # their imports fail
        monkeypatch.setitem(sys.modules, name, None)
    with ThreadPoolExecutor(1) as pool:
        report = virtualize.check([path], executor=pool)
    fatal = [p for p in report.problems if p.fatal]
    assert not report.ok and fatal
    assert all(p.loc.file == str(path) and "pip install 'virtualize[fits]'" in p.message
               for p in fatal)


def test_rice_tiles_kerchunk_export_reads_with_imagecodecs_registered_as_documented(tmp_path):
    """A kerchunk export naming imagecodecs' codecs (a RICE_1 FITS image) read by plain
    fsspec + zarr in a fresh interpreter that never imports virtualize: zarr finds the codec
    through the entry points virtualize declares (imagecodecs registers them only by a
    call), and imagecodecs' own registration call changes nothing; equal to astropy's."""
    import os
    import subprocess
    import textwrap

    fits = pytest.importorskip("astropy.io.fits")
    pytest.importorskip("imagecodecs")
    data = np.random.default_rng(23).integers(-3000, 3000, (37, 53)).astype(np.int16)
    path, refs = tmp_path / "r.fits", tmp_path / "r.json"
    fits.HDUList([fits.PrimaryHDU(), fits.CompImageHDU(data, compression_type="RICE_1",
                                                       tile_shape=(10, 16), name="IMG")]
                 ).writeto(path)
    virtualize.virtualize([path], refs)
    np.save(tmp_path / "want.npy", fits.getdata(path, 1))
    script = textwrap.dedent("""
        import sys
        import fsspec, numpy as np, zarr
        from zarr.storage import FsspecStore
        if sys.argv[3] == "register":
            import imagecodecs.zarr
            imagecodecs.zarr.register_codecs()
        zarr.config.set({"array.rectilinear_chunks": True})
        fs = fsspec.filesystem("reference", fo=sys.argv[1], asynchronous=True)
        g = zarr.open_group(FsspecStore(fs, read_only=True, path=""), mode="r", zarr_format=3)
        got, want = g["IMG"][...], np.load(sys.argv[2])
        assert np.array_equal(got, want) and got.dtype == want.dtype.newbyteorder("=")
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    run = [sys.executable, "-c", script, str(refs), str(tmp_path / "want.npy")]
    script = script.replace("assert np.array_equal", "assert 'virtualize' not in sys.modules\n"
                            "assert np.array_equal")
    run[2] = script
    bare = subprocess.run(run + ["bare"], env=env, capture_output=True, text=True)
    assert bare.returncode == 0, bare.stderr[-3000:]
    done = subprocess.run(run + ["register"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


def test_date_obs_with_fractional_seconds_are_dates(tmp_path):
    """FITS writes DATE-OBS as `YYYY-MM-DDThh:mm:ss[.sss]` (FITS 4.0, 9.1.1); instruments
    give the fraction. `--coord time=attr:DATE-OBS` made such exposures a text axis (the
    dates were no dates): now they are dates to the microsecond, in time order."""
    fits = pytest.importorskip("astropy.io.fits")
    xr = pytest.importorskip("xarray")
    stamps = ["2024-01-01T06:00:01.250", "2024-01-01T06:00:00.5", "2024-01-01T06:00:00.750"]
    files = []
    for k, stamp in enumerate(stamps):
        hdu = fits.PrimaryHDU(np.full((3, 4), k, dtype=np.int16))
        hdu.header["DATE-OBS"] = stamp
        files.append(tmp_path / f"exp{k}.fits")
        hdu.writeto(files[-1])
    virtualize.virtualize(files, tmp_path / "c.zarr", concat_dims=["time"],
                          coords={"time": "attr:DATE-OBS"})
    ds = xr.open_dataset(tmp_path / "c.zarr", engine="virtualize")
    want = np.array(["2024-01-01T06:00:00.500", "2024-01-01T06:00:00.750",
                     "2024-01-01T06:00:01.250"], dtype="M8[ns]")
    assert_same(ds["time"].values, want, "time: DATE-OBS to the microsecond")
    assert_same(ds["hdu0"].values[:, 0, 0], np.array([1, 2, 0], dtype=np.int16), "order")
