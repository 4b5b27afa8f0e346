"""Codec mappings, file by file from real writers: every cube that is written reads
exactly as the source library reads the file (virtualize.open, xarray engine="virtualize");
what has no exact zarr decoding is refused with a located problem, never written.

Writers: tifffile, GDAL (gdal_translate), libtiff (tiffcp), h5py + hdf5plugin, h5repack.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess

import h5py
import numpy as np
import pytest
import tifffile
import xarray as xr

import virtualize

from conftest import missing, needs
from helpers import assert_same

RNG = np.random.default_rng(20261130)
H, W = 70, 90  # not multiples of the blocks: short last strips, padded edge tiles


def _rgba(opaque: bool) -> np.ndarray:
    y, x = np.mgrid[0:H, 0:W]
    img = np.stack([(y * 3) % 251, (x * 2) % 251, (x + y) % 251, np.full_like(x, 255)], -1)
    img = img.astype("u1")
    if not opaque:
        img[5:9, 5:9, 3] = 0  # one tile with transparency; the others all opaque
    return img


def _gdal(src, dst, *options) -> None:
    subprocess.run(["gdal_translate", "-q", *options, str(src), str(dst)], check=True,
                   capture_output=True)
    aux = str(dst) + ".aux.xml"
    if os.path.exists(aux):
        os.remove(aux)


def roundtrip(path, tmp_path, var="image"):
    """The cube's values and xarray's, after writing the cube."""
    out = tmp_path / f"{os.path.basename(path)}.zarr"
    virtualize.virtualize([path], out)
    g = virtualize.open(out)
    ds = xr.open_dataset(out, engine="virtualize", mask_and_scale=False, decode_times=False)
    return g[var][...], ds[var].values


def assert_reads_like_tifffile(path, tmp_path):
    expected = tifffile.imread(path)
    got, via_xarray = roundtrip(path, tmp_path)
    assert_same(got, expected, f"{path}")
    assert_same(via_xarray, expected, f"{path} via xarray")


# -- JPEG and WebP: colour spaces and alpha --------------------------------------------

@pytest.fixture(scope="module")
def images(tmp_path_factory):
    d = tmp_path_factory.mktemp("images")
    rgba = _rgba(opaque=False)
    files = {}
    tifffile.imwrite(d / "src_rgba.tif", rgba, photometric="rgb", extrasamples=["unassalpha"])
    for name, kw in [("webp_rgba_tiles", dict(tile=(32, 32))),
                     ("webp_rgba_strips", dict(rowsperstrip=16))]:
        files[name] = d / f"{name}.tif"
        tifffile.imwrite(files[name], rgba, photometric="rgb", compression="webp",
                         compressionargs={"lossless": True}, **kw)
    files["webp_rgba_opaque"] = d / "webp_rgba_opaque.tif"
    tifffile.imwrite(files["webp_rgba_opaque"], _rgba(opaque=True), photometric="rgb",
                     compression="webp", tile=(32, 32), compressionargs={"lossless": True})
    files["jpeg_tifffile_rgb"] = d / "jpeg_tifffile_rgb.tif"
    tifffile.imwrite(files["jpeg_tifffile_rgb"], rgba[..., :3], photometric="rgb",
                     compression="jpeg", tile=(32, 32))
    if not missing("gdal_translate"):
        tiled = ["-co", "TILED=YES", "-co", "BLOCKXSIZE=32", "-co", "BLOCKYSIZE=32"]
        for name, options in [
            ("jpeg_gdal_rgba_tiles", ["-co", "COMPRESS=JPEG", *tiled]),
            ("jpeg_gdal_rgba_strips", ["-co", "COMPRESS=JPEG", "-co", "BLOCKYSIZE=16"]),
            ("jpeg_gdal_rgba_separate", ["-co", "COMPRESS=JPEG", "-co", "INTERLEAVE=BAND",
                                         *tiled]),
            ("jpeg_gdal_rgb_ycbcr", ["-co", "COMPRESS=JPEG", "-co", "PHOTOMETRIC=YCBCR",
                                     "-b", "1", "-b", "2", "-b", "3", *tiled]),
            ("webp_gdal_rgba_lossless", ["-co", "COMPRESS=WEBP", "-co", "WEBP_LOSSLESS=YES",
                                         *tiled]),
        ]:
            files[name] = d / f"{name}.tif"
            _gdal(d / "src_rgba.tif", files[name], *options)
    return files


IMAGES = ["webp_rgba_tiles", "webp_rgba_strips", "webp_rgba_opaque", "jpeg_tifffile_rgb",
          "jpeg_gdal_rgba_tiles", "jpeg_gdal_rgba_strips", "jpeg_gdal_rgba_separate",
          "jpeg_gdal_rgb_ycbcr", "webp_gdal_rgba_lossless"]


@pytest.mark.parametrize("name", [pytest.param(n, marks=needs("gdal_translate")) if "gdal" in n else n
                                  for n in IMAGES])
def test_image_codecs_read_like_tifffile(images, tmp_path, name):
    assert_reads_like_tifffile(images[name], tmp_path)


def test_webp_rgba_decodes_with_alpha(images):
    """libwebp drops an all-opaque alpha channel: the codec must ask for RGBA anyway."""
    inv = virtualize.inventory(images["webp_rgba_opaque"])
    assert inv.variables["image"].codecs == [
        {"name": "imagecodecs_webp", "configuration": {"hasalpha": True}}]


@needs("gdal_translate")
def test_jpeg_rgb_plus_alpha_keeps_its_components(images):
    """RGB + alpha JPEG has 4 components: no colour conversion (tifffile does none)."""
    conf = virtualize.inventory(images["jpeg_gdal_rgba_tiles"]).variables["image"].codecs[0]
    assert conf["name"] == "imagecodecs_jpeg"
    assert "colorspace_jpeg" not in conf["configuration"]
    assert "colorspace_data" not in conf["configuration"]
    sep = virtualize.inventory(images["jpeg_gdal_rgba_separate"]).variables["image"]
    assert sep.codecs[0]["configuration"]["colorspace_data"] == "GRAYSCALE"


# -- LZW from three writers, predictors 1/2/3, strips (short last) and tiles ------------

# every writer x predictor x layout; sample types and interleaving rotated through
LZW = [(w, {1: ["u1", "u2", "i4", "f4"][i % 4], 2: ["u1", "u2", "i4"][i % 3], 3: "f4"}[p], p, lay,
        ["gray", "contig", "separate"][i % 3])
       for i, (w, p, lay) in enumerate(itertools.product(["tifffile", "tiffcp", "gdal"], [1, 2, 3],
                                                         ["strips", "tiles"]))]


@pytest.fixture(scope="module")
def lzw_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("lzw")


def _lzw_file(d, writer, dt, pred, layout, planar):
    shape = {"gray": (H, W), "contig": (H, W, 3), "separate": (3, H, W)}[planar]
    data = (RNG.standard_normal(shape) * 100).astype(dt) if dt == "f4" else \
        RNG.integers(0, 120, shape).astype(dt)
    kw = dict(photometric="minisblack") if planar == "gray" else \
        dict(photometric="rgb", planarconfig=planar)
    name = f"{writer}_{dt}_p{pred}_{layout}_{planar}.tif"
    path = d / name
    if writer == "tifffile":
        block = dict(tile=(32, 32)) if layout == "tiles" else dict(rowsperstrip=16)
        tifffile.imwrite(path, data, compression="lzw", predictor=pred, **block, **kw)
        return path
    src = d / f"src_{name}"
    tifffile.imwrite(src, data, **kw)
    if writer == "tiffcp":
        block = ["-t", "-w", "32", "-l", "32"] if layout == "tiles" else ["-r", "16"]
        subprocess.run(["tiffcp", "-c", f"lzw:{pred}", *block, str(src), str(path)], check=True,
                       capture_output=True)
    else:
        block = ["-co", "TILED=YES", "-co", "BLOCKXSIZE=32", "-co", "BLOCKYSIZE=32"] \
            if layout == "tiles" else ["-co", "BLOCKYSIZE=16"]
        inter = [] if planar == "gray" else \
            ["-co", "INTERLEAVE=" + ("PIXEL" if planar == "contig" else "BAND")]
        _gdal(src, path, "-co", "COMPRESS=LZW", "-co", f"PREDICTOR={pred}", *block, *inter)
    return path


LZW_TOOLS = {"tiffcp": "tiffcp", "gdal": "gdal_translate"}


@pytest.mark.parametrize("writer,dt,pred,layout,planar",
                         [pytest.param(*c, marks=needs(LZW_TOOLS[c[0]]) if c[0] in LZW_TOOLS else ())
                          for c in LZW], ids=["-".join(map(str, c)) for c in LZW])
def test_lzw_reads_like_tifffile(lzw_dir, tmp_path, writer, dt, pred, layout, planar):
    path = _lzw_file(lzw_dir, writer, dt, pred, layout, planar)
    assert_reads_like_tifffile(path, tmp_path)


# -- HDF5: zstd, and types whose stored bytes are not the numpy type h5py reads ---------

@pytest.fixture(scope="module")
def zstd_files(tmp_path_factory):
    hdf5plugin = pytest.importorskip("hdf5plugin")
    d = tmp_path_factory.mktemp("zstd")
    data = RNG.standard_normal((20, 30, 40)).astype("f4")
    files = {}
    for level in (1, 22, -5):
        files[f"hdf5plugin_{level}"] = p = d / f"zstd_{level}.h5"
        with h5py.File(p, "w") as f:
            f.create_dataset("v", data=data, chunks=(7, 16, 16), **hdf5plugin.Zstd(clevel=level))
    if not missing("h5repack"):
        plain = d / "plain.h5"
        with h5py.File(plain, "w") as f:
            f.create_dataset("v", data=data, chunks=(7, 16, 16))
        env = dict(os.environ, HDF5_PLUGIN_PATH=hdf5plugin.PLUGIN_PATH)
        for spec in ("UD=32015,0,1,3", "UD=32015,1,1,19"):
            p = d / f"repack_{spec.replace(',', '_').replace('=', '')}.h5"
            r = subprocess.run(["h5repack", "-f", spec, str(plain), str(p)], env=env,
                               capture_output=True)
            if r.returncode == 0:
                files[f"h5repack {spec}"] = p
    return files


@pytest.mark.parametrize("name", ["hdf5plugin_1", "hdf5plugin_22", "hdf5plugin_-5",
                                  *(pytest.param(n, marks=needs("h5repack"))
                                    for n in ["h5repack UD=32015,0,1,3", "h5repack UD=32015,1,1,19"])])
def test_zstd_reads_like_h5py(zstd_files, tmp_path, name):
    if name not in zstd_files:  # (h5repack is here, but its zstd filter plugin did not load)
        pytest.skip("h5repack could not write zstd (HDF5_PLUGIN_PATH: hdf5plugin's filters)")
    path = zstd_files[name]
    with h5py.File(path) as f:
        expected = f["v"][()]
    got, via_xarray = roundtrip(path, tmp_path, "v")
    assert_same(got, expected, name)
    assert_same(via_xarray, expected, f"{name} via xarray")
    doc = json.loads((tmp_path / f"{path.name}.zarr" / "v" / "zarr.json").read_text())
    zstd = next(c for c in doc["codecs"] if c["name"] == "numcodecs.zstd")
    if name == "hdf5plugin_-5":  # a negative level, stored as an unsigned int by HDF5
        assert zstd["configuration"]["level"] == -5


def _custom_type(kind: str):
    t = h5py.h5t
    if kind == "bfloat16":  # float32's sign and exponent, 7 mantissa bits, in 2 bytes
        tid = t.IEEE_F32LE.copy()
        tid.set_fields(15, 7, 8, 0, 7)
        tid.set_offset(0)
        tid.set_precision(16)
        tid.set_size(2)
        tid.set_ebias(127)
        return tid
    tid = (t.STD_I16LE if kind == "int12" else t.STD_U16LE).copy()
    tid.set_precision(12)
    tid.set_offset(2 if kind == "int12" else 0)
    return tid


@pytest.fixture(scope="module")
def odd_types(tmp_path_factory):
    path = tmp_path_factory.mktemp("types") / "types.h5"
    raw = np.array([[0x3F80, 0xC020, 0x4049], [0x7F80, 0x0004, 0x7FFC]], dtype="<u2")
    with h5py.File(path, "w") as f:
        f.create_dataset("plain", data=np.arange(6, dtype="f4").reshape(2, 3))
        for kind in ("bfloat16", "int12", "uint12"):
            for chunked in (False, True):
                tid = _custom_type(kind)
                dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
                if chunked:
                    dcpl.set_chunk((1, 3))
                name = f"{kind}_{'chunked' if chunked else 'contiguous'}"
                ds = h5py.h5d.create(f.id, name.encode(), tid, h5py.h5s.create_simple((2, 3)),
                                     dcpl=dcpl)
                ds.write(h5py.h5s.ALL, h5py.h5s.ALL, raw, mtype=tid)
    return path


def test_types_without_a_zarr_data_type_are_refused(odd_types, tmp_path):
    report = virtualize.check([odd_types], inline_threshold=0)
    assert not report.ok
    refused = {p.loc.variable: p for p in report.problems}
    assert set(refused) == {f"{k}_{c}" for k in ("bfloat16", "int12", "uint12")
                            for c in ("chunked", "contiguous")}
    for name, p in refused.items():
        assert p.kind == "unsupported-type" and p.fatal and p.loc.file == str(odd_types)
        assert f"--inline {name}" in p.remedy and f"--drop {name}" in p.remedy
    assert "bfloat16" in refused["bfloat16_chunked"].message
    assert "12-bit" in refused["int12_contiguous"].message
    out = tmp_path / "c.zarr"
    with pytest.raises(virtualize.VirtualizeError):
        virtualize.virtualize([odd_types], out, inline_threshold=0)
    assert not out.exists()
    # dropped, the rest is virtualized and reads like h5py
    virtualize.virtualize([odd_types], out, drop=list(refused), inline_threshold=0)
    assert_same(virtualize.open(out)["plain"][...], np.arange(6, dtype="f4").reshape(2, 3),
                "plain")


def test_types_without_a_zarr_data_type_are_inlined_as_h5py_reads_them(odd_types, tmp_path):
    """Small, they are inlined automatically with the type h5py reads them as (bfloat16
    as float32, which holds every bfloat16 exactly; 12-bit integers as int16 / uint16),
    each with a note."""
    out = tmp_path / "c.zarr"
    report = virtualize.virtualize([odd_types], out)
    cube = virtualize.open(out)
    with h5py.File(odd_types) as f:
        names = [n for n in f if n != "plain"]
        for name in names:
            assert_same(cube[name][...], f[name][()], name)
            assert any(n.startswith(f"{name}: ") and "inlined" in n for n in report.notes)
    assert cube["bfloat16_chunked"].dtype == np.float32
