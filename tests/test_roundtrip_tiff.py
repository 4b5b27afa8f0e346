"""TIFF / GeoTIFF / COG: every array read through the cube equals tifffile's read."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tifffile
import xarray as xr
import zarr_metadata.model

import virtualize
from virtualize.formats.tiff.read import read_tiff_region

from helpers import assert_same, kerchunk_group, kerchunk_xarray

LOSSLESS = ["strips_short_last", "strips_lzw", "strips_deflate_pred", "strips_packbits",
            "tiles_padded", "rgb_contig_tiles", "rgb_planar_separate", "rgb_planar_strips",
            "float_predictor3", "float_predictor3_bigendian", "bigendian_tiles", "bigtiff_strips",
            "multipage", "multipage_shaped", "zstd_tiles", "webp_tiles", "lerc_tiles",
            "geotiff_tifffile", "geotiff_gdal", "geotiff_geographic", "geotiff_pixel_is_point",
            "tiffcp_strips", "tiffcp_tiles", "sparse_tiles", "sparse_tiles_gdal"]
LOSSY = ["jpeg_tiles", "jpeg_gdal", "jpeg_ycbcr"]


def tifffile_image(path) -> np.ndarray:
    """What tifffile reads for the main image: all full-resolution pages that agree."""
    with tifffile.TiffFile(path) as tif:
        pages = [p for p in tif.pages if not (p.subfiletype & 0b101)]
        data = [p.asarray() for p in pages]
    return data[0] if len(data) == 1 else np.stack(data)


def tifffile_levels(path) -> list[np.ndarray]:
    with tifffile.TiffFile(path) as tif:
        return [level.asarray() for level in tif.series[0].levels]


def roundtrip_tiff(files, tmp_path, **kw):
    cube, refs = tmp_path / "cube.zarr", tmp_path / "cube.json"
    report = virtualize.virtualize(files, cube, **kw)
    virtualize.virtualize(files, refs, **kw)
    g, k = virtualize.open(cube), kerchunk_group(refs)
    for name in report.plan.arrays:
        doc = json.loads((cube / name / "zarr.json").read_text())
        assert zarr_metadata.model.read_array_metadata_v3(doc).problems == ()
        assert_same(k[name][...], g[name][...], f"{name}: kerchunk export vs cube")
    ds = kerchunk_xarray(refs, mask_and_scale=False, decode_times=False)
    assert_same(ds["image"].values, g["image"][...], "image: kerchunk export via xarray")
    return report, g


@pytest.mark.parametrize("name", LOSSLESS + LOSSY)
def test_single_file_reads_like_tifffile(case, tmp_path, name):
    (path,) = case(name)
    report, g = roundtrip_tiff([path], tmp_path)
    assert_same(g["image"][...], tifffile_image(path), f"{name} image")
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize", mask_and_scale=False)
    assert_same(ds["image"].values, tifffile_image(path), f"{name} via xarray")


def test_short_last_strip_is_a_rectilinear_edge(case, tmp_path):
    (path,) = case("strips_short_last")
    roundtrip_tiff([path], tmp_path)
    grid = json.loads((tmp_path / "cube.zarr" / "image" / "zarr.json").read_text())["chunk_grid"]
    assert grid == {"name": "rectilinear",
                    "configuration": {"kind": "inline", "chunk_shapes": [[[30, 2], 10], [100]]}}


def test_padded_tiles_are_a_regular_overhanging_grid(case, tmp_path):
    (path,) = case("tiles_padded")
    roundtrip_tiff([path], tmp_path)
    grid = json.loads((tmp_path / "cube.zarr" / "image" / "zarr.json").read_text())["chunk_grid"]
    assert grid == {"name": "regular", "configuration": {"chunk_shape": [32, 32]}}


def test_layouts_name_their_axes(case, tmp_path):
    dims = {}
    for name in ["rgb_contig_tiles", "rgb_planar_separate", "multipage"]:
        (path,) = case(name)
        dims[name] = virtualize.check([path]).plan.arrays["image"].dims
    assert dims == {"rgb_contig_tiles": ("y", "x", "band"),
                    "rgb_planar_separate": ("band", "y", "x"),
                    "multipage": ("page", "y", "x")}


@pytest.mark.parametrize("name", ["cog", "cog_blocksize32", "tifffile_subifds"])
def test_overview_levels(case, tmp_path, name):
    (path,) = case(name)
    report, g = roundtrip_tiff([path], tmp_path)
    levels = tifffile_levels(path)
    assert len(levels) >= 2
    assert_same(g["image"][...], levels[0], f"{name} level 0")
    for k, expected in enumerate(levels[1:], start=1):
        assert_same(g[f"overview/{k}/image"][...], expected, f"{name} level {k}")
    ms = dict(g.attrs)["multiscales"][0]["datasets"]
    assert [d["path"] for d in ms] == ["image"] + [f"overview/{k}/image" for k in range(1, len(levels))]


@pytest.mark.parametrize("name", ["geotiff_tifffile", "geotiff_gdal", "geotiff_pixel_is_point"])
def test_utm_coordinates_are_pixel_centres(case, tmp_path, name):
    (path,) = case(name)
    virtualize.virtualize([path], tmp_path / "cube.zarr")
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize", decode_coords="all")
    np.testing.assert_array_equal(ds.x.values, 399975.0 + 30.0 * np.arange(100))
    np.testing.assert_array_equal(ds.y.values, 5800005.0 - 30.0 * np.arange(70))
    sr = ds["spatial_ref"].attrs
    assert sr["GeoTransform"].split() == ["399960.0", "30.0", "0.0", "5800020.0", "0.0", "-30.0"]
    assert sr["epsg"] == 32633 and "UTM zone 33N" in sr["crs_wkt"]
    assert ds["image"].attrs.get("grid_mapping") == "spatial_ref" or \
        ds["image"].encoding.get("grid_mapping") == "spatial_ref"
    nodata = 0 if name == "geotiff_pixel_is_point" else 65535  # that file sets no GDAL_NODATA
    assert int(virtualize.open(tmp_path / "cube.zarr")["image"].fill_value) == nodata


def test_geographic_coordinates(case, tmp_path):
    (path,) = case("geotiff_geographic")
    virtualize.virtualize([path], tmp_path / "cube.zarr")
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize")
    np.testing.assert_allclose(ds.x.values, -9.875 + 0.25 * np.arange(100), rtol=0, atol=1e-12)
    np.testing.assert_allclose(ds.y.values, 59.875 - 0.25 * np.arange(70), rtol=0, atol=1e-12)
    assert ds.x.attrs["units"] == "degrees_east" and ds.y.attrs["standard_name"] == "latitude"


def test_nodata_that_does_not_fit_is_reported_not_used(case, tmp_path):
    (path,) = case("geotiff_nodata_unfit")
    report, g = roundtrip_tiff([path], tmp_path)
    (p,) = [p for p in report.problems if p.kind == "nodata-unfit"]
    assert not p.fatal and "-9999" in p.message
    assert int(g["image"].fill_value) == 0
    assert_same(g["image"][...], tifffile_image(path), "unfit nodata image")


def test_stack_of_dates_along_a_new_time_axis(case, tmp_path):
    files = case("stack_dates")
    report, g = roundtrip_tiff(files, tmp_path, concat_dim="time")
    assert g["image"].shape == (3, 70, 100)
    assert report.plan.arrays["image"].dims == ("time", "y", "x")
    assert_same(g["image"][...], np.stack([tifffile_image(f) for f in files]), "stack")
    assert g["x"].shape == (100,) and g["spatial_ref"].shape == ()
    assert any("new leading 'time' axis" in n for n in report.notes)


@pytest.mark.parametrize("name,kind", [("ccitt_bilevel", "unsupported-tiff"),
                                       ("fillorder2", "unsupported-tiff"),
                                       ("odd_bitdepth", "unsupported-tiff")])
def test_undecodable_tiffs_are_refused(case, tmp_path, name, kind):
    (path,) = case(name)
    report = virtualize.check([path])
    assert not report.ok
    assert [p.kind for p in report.problems if p.fatal] == [kind]
    assert report.problems[0].loc.file == str(path)


def test_sparse_tiles_read_as_fill(case, tmp_path):
    (path,) = case("sparse_tiles")
    report = virtualize.check([path])
    refs = report.plan.arrays["image"].refs
    assert (refs["length"] == 0).sum() == 3


def test_stack_time_coordinate_comes_from_the_file_names(case, tmp_path):
    files = case("stack_dates")
    virtualize.virtualize(list(reversed(files)), tmp_path / "cube.zarr", concat_dim="time")
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize")
    assert [str(t)[:10] for t in ds.time.values] == ["2024-01-01", "2024-01-02", "2024-01-03"]
    # sorted by date although given in reverse; nodata (0) is masked by xarray
    assert_same(ds.image.isel(time=0).fillna(0).values.astype("u2"), tifffile_image(files[0]), "t0")
    assert bool(ds.image.isel(time=1)[:10, :10].isnull().all())


def test_dates_in_names():
    from virtualize.plan.concat import dates_in_names

    assert [d.isoformat() for d in dates_in_names(
        ["/a/S2_20240101T103021_B04.tif", "/a/S2_20240102T103021_B04.tif"])] == [
        "2024-01-01T10:30:21", "2024-01-02T10:30:21"]
    assert dates_in_names(["2024-01-01.tif", "x.tif"]) is None
    assert dates_in_names(["tile_123456789.tif"]) is None
    assert dates_in_names(["2024-13-01.tif"]) is None


@pytest.mark.parametrize("byteorder", ["<", ">"])
@pytest.mark.parametrize("compression", ["zlib", "lzw"])
def test_horizontal_predictor_in_both_byte_orders(tmp_path, byteorder, compression):
    rgb = np.stack([np.arange(70 * 100, dtype="u2").reshape(70, 100) * 7 + k for k in range(3)], -1)
    path = tmp_path / "p.tif"
    tifffile.imwrite(path, rgb, byteorder=byteorder, rowsperstrip=16, compression=compression,
                     predictor=True, photometric="rgb")
    report, g = roundtrip_tiff([path], tmp_path)
    assert [c["name"] for c in report.plan.arrays["image"].codecs][0] == "imagecodecs_delta"
    assert_same(g["image"][...], tifffile_image(path), f"predictor 2 {byteorder} {compression}")


@pytest.mark.parametrize("compression", ["lzma", "deflate", "zstd"])
def test_more_compressions(tmp_path, compression):
    path = tmp_path / "c.tif"
    tifffile.imwrite(path, np.arange(70 * 100, dtype="u2").reshape(70, 100) * 7, tile=(32, 32),
                     compression=compression)
    report, g = roundtrip_tiff([path], tmp_path)
    assert_same(g["image"][...], tifffile_image(path), compression)


def _geotiff(path, data, matrix=None, nodata=None):
    import make_tiff as mt

    keys = mt.geokeys(32633, mt.RASTER_PIXEL_IS_AREA)
    tags = [(34735, "H", len(keys), keys, True)]
    if matrix is not None:
        tags.append((34264, "d", 16, tuple(matrix), True))  # ModelTransformationTag
    if nodata is not None:
        tags.append((42113, "s", 0, nodata, True))
    tifffile.imwrite(path, data, tile=(32, 32), extratags=tags)


def test_model_transformation_geotiff(tmp_path):
    path = tmp_path / "mt.tif"
    m = [30.0, 0, 0, 399960.0, 0, -30.0, 0, 5800020.0, 0, 0, 0, 0, 0, 0, 0, 1]
    _geotiff(path, np.arange(70 * 100, dtype="u2").reshape(70, 100), matrix=m)
    virtualize.virtualize([path], tmp_path / "c.zarr")
    ds = xr.open_dataset(tmp_path / "c.zarr", engine="virtualize")
    np.testing.assert_array_equal(ds.x.values, 399975.0 + 30.0 * np.arange(100))
    np.testing.assert_array_equal(ds.y.values, 5800005.0 - 30.0 * np.arange(70))


def test_rotated_geotiff_keeps_its_transform_without_xy(tmp_path):
    path = tmp_path / "rot.tif"
    m = [30.0, 5.0, 0, 399960.0, 5.0, -30.0, 0, 5800020.0, 0, 0, 0, 0, 0, 0, 0, 1]
    _geotiff(path, np.arange(70 * 100, dtype="u2").reshape(70, 100), matrix=m)
    report = virtualize.check([path])
    assert report.ok
    assert [p.kind for p in report.problems] == ["rotated-geotransform"]
    assert "x" not in report.plan.arrays and "spatial_ref" in report.plan.arrays
    gt = report.plan.arrays["spatial_ref"].attrs["GeoTransform"].split()
    assert [float(v) for v in gt] == [399960.0, 30.0, 5.0, 5800020.0, 5.0, -30.0]


def test_nan_nodata_on_floats(tmp_path):
    path = tmp_path / "f.tif"
    data = np.linspace(0, 1, 70 * 100, dtype="f4").reshape(70, 100)
    data[:5, :5] = np.nan
    _geotiff(path, data, matrix=[30.0, 0, 0, 0, 0, -30.0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
             nodata="nan")
    report, g = roundtrip_tiff([path], tmp_path)
    assert np.isnan(g["image"].fill_value)
    assert_same(g["image"][...], tifffile_image(path), "nan nodata")
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize")
    assert int(ds.image.isnull().sum()) == 25


def test_tifffile_warnings_land_in_the_report(tmp_path, capfd):
    path = tmp_path / "w.tif"
    tifffile.imwrite(path, np.zeros((10, 10), "u1"))
    data = bytearray(path.read_bytes())
    with tifffile.TiffFile(path) as tif:  # damage one tag's data type: tifffile skips the tag
        tag = tif.pages[0].tags["ResolutionUnit"]
    data[tag.offset + 2:tag.offset + 4] = (999).to_bytes(2, "little")
    path.write_bytes(bytes(data))
    report = virtualize.check([path])
    assert any(p.kind == "tiff-warning" and not p.fatal for p in report.problems)
    assert "tifffile" not in capfd.readouterr().err


@pytest.mark.parametrize("name,var", [("multipage", "image"), ("rgb_contig_tiles", "image"),
                                      ("rgb_planar_separate", "image"),
                                      ("tifffile_subifds", "overview/1/image")])
def test_region_reads_for_materialize(case, name, var):
    from virtualize.formats import SourceReader

    (path,) = case(name)
    full = (tifffile_levels(path)[1] if var.startswith("overview") else tifffile_image(path))
    region = tuple((1, min(n, 1 + 17)) if i == 0 else (3, min(n, 40)) for i, n in enumerate(full.shape))
    with SourceReader(str(path)) as reader:
        got = reader.read(var, region)
    assert_same(got, full[tuple(slice(a, b) for a, b in region)], f"{name} region")


SERIES_CORNERS = ["subifds_nested", "imagej_hyperstack", "ome_tzcyx", "shaped_series", "webp_rgba",
                  "jpeg_rgba_gdal", "ten_channel_float32", "ten_channel_uint32_planar",
                  "ten_channel_gdal"]


@pytest.mark.parametrize("name", SERIES_CORNERS)
def test_series_corners_read_like_tifffile_series(case, tmp_path, name):
    """Every series k (and level l) tifffile presents reads back from the cube as
    `series[k].levels[l].asarray()`, shape included: `image`, `series/<k>/image`,
    `overview/<l>/image`. JPEG is lossy, but decoding is exact: the same bytes decode alike."""
    (path,) = case(name)
    report, g = roundtrip_tiff([path], tmp_path)
    assert report.ok and not [p for p in report.problems if p.kind == "decode-mismatch"]
    with tifffile.TiffFile(path) as tif:
        expected = {}
        for k, series in enumerate(tif.series):
            for level_index, level in enumerate(series.levels):
                key = "image" if level_index == 0 else f"overview/{level_index}/image"
                expected[f"series/{k}/{key}" if k else key] = level.asarray()
    assert sorted(expected) == sorted(a for a in report.plan.arrays if a.endswith("image"))
    for key, want in expected.items():
        assert_same(g[key][...], want, f"{name} {key}")
    for key in expected:  # the region reader (decode check, materialize) agrees
        region = tuple((0, min(n, 3)) for n in expected[key].shape)
        assert_same(read_tiff_region(str(path), key, region),
                    expected[key][tuple(slice(a, b) for a, b in region)], f"{name} {key} region")


def test_series_corners_keep_tifffile_warnings_and_nested_levels_as_notes(case):
    report = virtualize.check(case("ten_channel_gdal"))
    assert report.ok
    assert [p.kind for p in report.problems] == ["tiff-warning"]
    assert "shaped series metadata does not match" in report.problems[0].message
    report = virtualize.check(case("subifds_nested"))
    assert report.ok and [(p.kind, p.fatal) for p in report.problems] == [("overviews-skipped", False)]
    dims = virtualize.check(case("imagej_hyperstack")).plan.arrays["image"].dims
    assert dims == ("page_t", "page_z", "y", "x")


def _damaged_tag_tiff(path):
    """A 4-page tiled TIFF whose page 0 ResolutionUnit entry has no TIFF data type:
    tifffile logs a warning each time it reads the page's tags, and skips the tag."""
    import struct
    tifffile.imwrite(path, np.arange(4 * 70 * 100, dtype="<u2").reshape(4, 70, 100),
                     tile=(32, 32), resolution=(1, 1), photometric="minisblack", metadata=None)
    b = bytearray(path.read_bytes())
    ifd = struct.unpack_from("<I", b, 4)[0]
    for i in range(struct.unpack_from("<H", b, ifd)[0]):
        at = ifd + 2 + 12 * i
        if struct.unpack_from("<H", b, at)[0] == 296:
            struct.pack_into("<H", b, at + 2, 99)
    path.write_bytes(bytes(b))
    return path


def test_tifffile_warnings_are_notes_not_stderr(tmp_path, capfd, caplog):
    """What tifffile logs (a damaged tag) is the report's `tiff-warning` note only: nothing
    reaches logging's handlers (stderr) from the scan in this process, in a worker process,
    the decode check of a write or `verify --decode` (tifffile reads the tags again for
    each region); and nothing on a real command line's stderr."""
    import subprocess
    import sys

    from virtualize.cli import main

    path = _damaged_tag_tiff(tmp_path / "damaged.tif")
    with tifffile.TiffFile(path) as tif:  # tifffile does warn about this file
        tif.pages[0].tags
    assert any("invalid data type 99" in r.getMessage() for r in caplog.records)
    caplog.clear()
    cube = tmp_path / "c.zarr"
    for args in (["check", "-v", "--scan-timeout", "0", path], ["check", "-v", path],
                 [path, "-o", cube, "-v"], ["verify", "--decode", cube]):
        assert main([str(a) for a in args]) == 0
        out, err = capfd.readouterr()
        assert err == "" and not caplog.records, (args, err, caplog.records)
        if args[0] != "verify":
            assert "tiff-warning" in out and "invalid data type 99" in out, (args, out)
    with tifffile.TiffFile(path) as tif:
        want = tif.series[0].asarray()
    assert_same(virtualize.open(cube)["image"][...], want, "damaged.tif")
    exe = [sys.executable, "-m", "virtualize.cli"]
    for args in (["check", "-v", "--scan-timeout", "0", path], ["check", "-v", path],
                 ["verify", "--decode", cube]):
        r = subprocess.run([*exe, *map(str, args)], capture_output=True, text=True)
        assert r.returncode == 0 and r.stderr == "", (args, r.stderr)
