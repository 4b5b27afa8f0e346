"""The GDAL VRT output: `gdal_translate` of the VRT equals the mosaic (or stack) read
through virtualize and the tiles read by tifffile, bit for bit; what GDAL would read
differently is refused, located, and nothing is written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tifffile

import virtualize
from virtualize.model import OutputExistsError, UnsafeOutputError, VirtualizeError

import make_mosaic as mm
from make_tiff import geotags

pytestmark = pytest.mark.needs("gdal_translate")


def gdal_read(vrt, tmp_path) -> np.ndarray:
    """The VRT as GDAL reads it: gdal_translate to a plain GeoTIFF, read by tifffile
    ((y, x) for one band, (y, x, band) for several, as tifffile returns a GTiff)."""
    out = tmp_path / f"{os.path.basename(vrt)}.gdal.tif"
    r = subprocess.run(["gdal_translate", "-q", "-of", "GTiff", str(vrt), str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    data = tifffile.imread(out)
    out.unlink()
    return data


def gdalinfo(path) -> dict:
    r = subprocess.run(["gdalinfo", "-json", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def data_name(plan):
    return next(n for n, a in plan.arrays.items() if a.inline is None)


def as_gtiff(cube: np.ndarray, dims) -> np.ndarray:
    """The cube's array in the axis order tifffile reads a multi-band GTiff: (y, x, band)."""
    return np.moveaxis(cube, 0, -1) if dims[0] not in ("y",) and cube.ndim == 3 else cube


def check_tiles(got, name, files):
    """Every tile read by tifffile equals GDAL's read of its window of the VRT."""
    for path, (row0, col0, h, w) in zip(files, mm.LAYOUT[name]):
        tile = tifffile.imread(path)
        if name in mm.OVERLAPPING:
            continue  # (the winner shows: compared with the expected union instead)
        np.testing.assert_array_equal(got[row0:row0 + h, col0:col0 + w], tile, err_msg=str(path))


@pytest.mark.parametrize("name", ["mosaic_uneven_2x2", "mosaic_uneven_strips", "mosaic_gap",
                                  "mosaic_bands", "mosaic_staggered_aligned",
                                  "mosaic_gdal_srcwin"])
def test_gdal_reads_the_mosaic_exactly(case, tmp_path, name):
    files = case(name)
    vrt = tmp_path / "m.vrt"
    report = virtualize.mosaic(files, vrt)
    assert report.output["kind"] == "vrt"
    var = data_name(report.plan)
    cube = virtualize.open(vrt)[var][...]
    expected = mm.expected(name)
    np.testing.assert_array_equal(cube, expected.astype(cube.dtype))
    got = gdal_read(vrt, tmp_path)
    assert got.dtype == cube.dtype
    np.testing.assert_array_equal(got, as_gtiff(cube, report.plan.arrays[var].dims))
    check_tiles(got, name, files)


def test_gdalinfo_shows_the_tiles_crs_and_geotransform(case, tmp_path):
    files = case("mosaic_uneven_2x2")
    vrt = tmp_path / "m.vrt"
    virtualize.mosaic(files, vrt)
    info, tile = gdalinfo(vrt), gdalinfo(files[0])  # tile 0 is the union's upper-left
    assert info["geoTransform"] == tile["geoTransform"]
    assert info["coordinateSystem"]["wkt"] == tile["coordinateSystem"]["wkt"]
    assert info["size"] == [146, 104]
    assert info["bands"][0]["type"] == tile["bands"][0]["type"] == "UInt32"
    # every other tile at its place: its own geotransform is the union's, moved
    for path, (row0, col0, _, _) in zip(files, mm.LAYOUT["mosaic_uneven_2x2"]):
        t = gdalinfo(path)["geoTransform"]
        g = info["geoTransform"]
        assert t == [g[0] + col0 * g[1], g[1], 0.0, g[3] + row0 * g[5], 0.0, g[5]]


def test_nodata_tiles_and_gaps_read_as_the_fill(case, tmp_path):
    files = case("mosaic_gap")  # GDAL_NODATA "0" in every tile; the upper-right quadrant missing
    vrt = tmp_path / "m.vrt"
    virtualize.mosaic(files, vrt)
    band = gdalinfo(vrt)["bands"][0]
    assert band["noDataValue"] == gdalinfo(files[0])["bands"][0]["noDataValue"] == 0
    got = gdal_read(vrt, tmp_path)
    assert (got[:64, 64:] == 0).all()
    np.testing.assert_array_equal(got, virtualize.open(vrt)["image"][...])


def test_a_gap_with_a_fill_other_than_0_gets_a_nodata_value(tmp_path):
    """Tiles with GDAL_NODATA 7 and a gap: the gap reads 7 in GDAL as in the cube."""
    d = tmp_path / "t"
    d.mkdir()
    a = (np.arange(32 * 32, dtype=np.int16).reshape(32, 32) % 300) + 100
    tiles = []
    for i, (x, y) in enumerate([(0, 0), (320.0, -320.0)]):  # diagonal: two gaps
        p = d / f"t{i}.tif"
        tifffile.imwrite(p, a + i, extratags=geotags(32633, (500000.0 + x, 4000000.0 + y), 10.0,
                                                     nodata="7"))
        tiles.append(p)
    vrt = tmp_path / "m.vrt"
    virtualize.mosaic(tiles, vrt)
    got = gdal_read(vrt, tmp_path)
    cube = virtualize.open(vrt)["image"][...]
    assert (cube[:32, 32:] == 7).all() and (cube[32:, :32] == 7).all()
    np.testing.assert_array_equal(got, cube)
    assert gdalinfo(vrt)["bands"][0]["noDataValue"] == 7


@pytest.mark.parametrize("overlap", ["last", "first"])
def test_overlaps_settled_as_gdal_paints(case, tmp_path, overlap):
    """--overlap last is GDAL's own rule (later sources on top); first: painted reversed."""
    name = "mosaic_overlap_aligned"
    files = case(name)
    vrt = tmp_path / "m.vrt"
    virtualize.mosaic(files, vrt, overlap=overlap)
    got = gdal_read(vrt, tmp_path)
    cube = virtualize.open(vrt)["image"][...]
    np.testing.assert_array_equal(got, cube)
    # the winner's values show in the overlap (columns 32..64)
    winner = 1 if overlap == "last" else 0
    tile = tifffile.imread(files[winner])
    col0 = mm.LAYOUT[name][winner][1]
    np.testing.assert_array_equal(got[:, 32:64], tile[:, 32 - col0:64 - col0])


def test_a_plan_gdal_would_paint_otherwise_is_refused(case, tmp_path):
    """The layout is checked against the plan's chunks: a plan whose overlap winner is
    not the tile GDAL paints on top is refused, located, and nothing written."""
    from virtualize.outputs.vrt.writer import write_vrt

    files = case("mosaic_overlap_aligned")
    report = virtualize.check_mosaic(files, overlap="last")
    plan = report.plan
    plan.recipe = dict(plan.recipe, overlap="first")  # GDAL would now paint tile 0 on top
    vrt = tmp_path / "m.vrt"
    with pytest.raises(VirtualizeError) as e:
        write_vrt(plan, vrt)
    kinds = {p.kind for p in e.value.problems}
    assert kinds == {"vrt-unsupported"}
    p = e.value.problems[0]
    assert p.loc.variable == "image" and p.loc.file == str(files[0]) and p.loc.block is not None
    assert "GDAL would show" in p.message and str(files[1]) in p.message
    assert not vrt.exists() and list(tmp_path.iterdir()) == []


def geotiff_stack(tmp_path, n=3, **kw):
    d = tmp_path / "stack"
    d.mkdir()
    paths = []
    for i in range(n):
        a = (np.arange(40 * 50, dtype=np.float32).reshape(40, 50) * (i + 1)) / 7
        p = d / f"day{i}.tif"
        tifffile.imwrite(p, a, tile=(16, 16), compression="zlib",
                         extratags=geotags(32633, (500000.0, 4000000.0), 10.0), **kw)
        paths.append(p)
    return paths


def test_a_tiff_stack_is_one_band_per_file(tmp_path):
    paths = geotiff_stack(tmp_path)
    vrt = tmp_path / "s.vrt"
    report = virtualize.virtualize(paths, vrt, concat_dim="time")
    var = data_name(report.plan)
    cube = virtualize.open(vrt)[var][...]
    assert cube.shape == (3, 40, 50)
    got = gdal_read(vrt, tmp_path)
    np.testing.assert_array_equal(got, np.moveaxis(cube, 0, -1))
    np.testing.assert_array_equal(got, np.stack([tifffile.imread(p) for p in paths], axis=-1))
    info, one = gdalinfo(vrt), gdalinfo(paths[0])
    assert len(info["bands"]) == 3
    # each band named by its file (these file names hold no date: no time coordinate)
    assert [band.get("description") for band in info["bands"]] == [p.name for p in paths]
    assert info["geoTransform"] == one["geoTransform"]
    assert info["coordinateSystem"]["wkt"] == one["coordinateSystem"]["wkt"]


def test_a_planar_band_tiff_is_its_bands(tmp_path):
    """A planar-separate 3-band TIFF, (band, y, x): band b of the VRT is the file's b."""
    a = np.arange(3 * 30 * 20, dtype=np.uint16).reshape(3, 30, 20)
    p = tmp_path / "rgb.tif"
    tifffile.imwrite(p, a, planarconfig="separate", photometric="rgb", rowsperstrip=8)
    vrt = tmp_path / "b.vrt"
    virtualize.virtualize([p], vrt)
    got = gdal_read(vrt, tmp_path)
    np.testing.assert_array_equal(got, np.moveaxis(a, 0, -1))
    np.testing.assert_array_equal(virtualize.open(vrt)["image"][...], a)
    colours = [band["colorInterpretation"] for band in gdalinfo(vrt)["bands"]]
    assert colours == [band["colorInterpretation"] for band in gdalinfo(p)["bands"]]


def test_relative_vrt_moves_with_its_files(case, tmp_path):
    files = case("mosaic_uneven_2x2")
    d = tmp_path / "here"
    shutil.copytree(files[0].parent, d / "tiles")
    vrt = d / "m.vrt"
    virtualize.mosaic(sorted((d / "tiles").glob("tile_*.tif")), vrt, relative=True)
    text = vrt.read_text()
    assert '<SourceFilename relativeToVRT="1">tiles/tile_0.tif</SourceFilename>' in text
    moved = tmp_path / "moved"
    d.rename(moved)
    got = gdal_read(moved / "m.vrt", tmp_path)
    np.testing.assert_array_equal(got, mm.expected("mosaic_uneven_2x2"))
    np.testing.assert_array_equal(virtualize.open(moved / "m.vrt")["image"][...], got)


def test_netcdf_tiles_are_refused_naming_gdals_reason(case, tmp_path):
    """GDAL's netCDF driver may flip rows (a y coordinate without the CF attributes it
    looks for is taken as bottom-up even when it decreases): not referenced, refused."""
    files = case("mosaic_netcdf")
    vrt = tmp_path / "m.vrt"
    with pytest.raises(VirtualizeError) as e:
        virtualize.mosaic(files, vrt)
    assert {p.kind for p in e.value.problems} == {"vrt-unsupported"}
    assert {p.loc.file for p in e.value.problems} == {str(f) for f in files}
    assert all("bottom-up" in p.message and "-o cube.zarr" in p.message
               for p in e.value.problems)
    assert not vrt.exists() and not list(tmp_path.glob(".m.vrt*"))
    virtualize.mosaic(files, tmp_path / "m.zarr")  # the same tiles as a cube are fine


def test_what_a_vrt_cannot_hold_is_refused_naming_what_to_use(tmp_path):
    """A FITS image: GDAL would read it through its FITS driver; refused."""
    pytest.importorskip("astropy")
    fits = tmp_path / "a.fits"
    from astropy.io import fits as afits
    afits.PrimaryHDU(np.ones((4, 5), np.float32)).writeto(fits)
    out = tmp_path / "m.vrt"
    with pytest.raises(VirtualizeError) as e:
        virtualize.virtualize([fits], out)
    assert {p.kind for p in e.value.problems} == {"vrt-unsupported"}
    assert "-o cube.zarr" in str(e.value)
    assert not out.exists() and not list(tmp_path.glob(".m.vrt*"))
    virtualize.virtualize([fits], tmp_path / "m.zarr")  # as a cube: fine


def test_lossy_and_inexact_types_are_refused(tmp_path):
    a = np.arange(32 * 32, dtype=np.uint8).reshape(32, 32)
    jpeg = tmp_path / "j.tif"
    tifffile.imwrite(jpeg, a, compression="jpeg", tile=(16, 16))
    f16 = tmp_path / "h.tif"
    tifffile.imwrite(f16, a.astype(np.float16))
    turned = tmp_path / "o.tif"
    tifffile.imwrite(turned, a, extratags=[(274, "H", 1, 3, True)])  # Orientation bottom-right
    for src, words in ((jpeg, "lossy"), (f16, "float16"), (turned, "Orientation is 3")):
        out = tmp_path / f"{src.stem}.vrt"
        with pytest.raises(VirtualizeError) as e:
            virtualize.virtualize([src], out)
        assert any(p.kind == "vrt-unsupported" and words in p.message for p in e.value.problems)
        assert not out.exists()


def test_overwrite_replaces_only_a_vrt_virtualize_wrote(case, tmp_path):
    files = case("mosaic_uneven_2x2")
    vrt = tmp_path / "m.vrt"
    virtualize.mosaic(files, vrt)
    with pytest.raises(OutputExistsError):
        virtualize.mosaic(files, vrt)
    first = vrt.read_text()
    virtualize.mosaic(files[:2], vrt, overwrite=True)
    assert vrt.read_text() != first and gdalinfo(vrt)["size"] == [146, 64]
    # a VRT gdalbuildvrt made is not ours: kept, even with --overwrite
    theirs = tmp_path / "theirs.vrt"
    r = subprocess.run(["gdalbuildvrt", "-q", str(theirs), *map(str, files)], capture_output=True)
    if r.returncode != 0:
        theirs.write_text('<VRTDataset rasterXSize="1" rasterYSize="1"></VRTDataset>\n')
    before = theirs.read_bytes()
    with pytest.raises(UnsafeOutputError):
        virtualize.mosaic(files, theirs, overwrite=True)
    assert theirs.read_bytes() == before
    # nor does virtualize read it back: GDAL's semantics are GDAL's
    with pytest.raises(VirtualizeError, match="did not write"):
        virtualize.open(theirs)


def test_an_edited_or_stale_vrt_is_refused_not_read(case, tmp_path):
    files = case("mosaic_uneven_2x2")
    d = tmp_path / "tiles"
    shutil.copytree(files[0].parent, d)
    tiles = sorted(d.glob("tile_*.tif"))
    vrt = tmp_path / "m.vrt"
    virtualize.mosaic(tiles, vrt)
    text = vrt.read_text()
    edited = tmp_path / "e.vrt"
    edited.write_text(text.replace('<DstRect xOff="96" yOff="0"', '<DstRect xOff="90" yOff="0"', 1))
    assert edited.read_text() != text
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(edited)
    assert e.value.problems[0].kind == "vrt-edited"
    # a tile rewritten with other values: stale
    tifffile.imwrite(tiles[3], np.zeros((40, 50), np.uint32))
    with pytest.raises(VirtualizeError):
        virtualize.open(vrt)


def test_cli_writes_a_vrt_by_name_and_by_format(case, tmp_path):
    files = case("mosaic_uneven_2x2")
    env = None  # (inherited: PYTHONPATH names the source tree under test)
    cli = [os.path.join(os.path.dirname(sys.executable), "virtualize")]
    r = subprocess.run([*cli, "mosaic", *map(str, files), "-o", str(tmp_path / "m.vrt")],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(gdal_read(tmp_path / "m.vrt", tmp_path),
                                  mm.expected("mosaic_uneven_2x2"))
    r = subprocess.run([*cli, "mosaic", *map(str, files), "-o", str(tmp_path / "g"),
                        "--format", "vrt"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert gdalinfo(tmp_path / "g")["driverShortName"] == "VRT"
    np.testing.assert_array_equal(virtualize.open(tmp_path / "g")["image"][...],
                                  mm.expected("mosaic_uneven_2x2"))
    # a .vrt name for another kind is a usage error
    r = subprocess.run([*cli, "mosaic", *map(str, files), "-o", str(tmp_path / "k.vrt"),
                        "--format", "kerchunk"], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "VRT" in r.stderr and not (tmp_path / "k.vrt").exists()


def test_append_verify_export_and_refresh_of_a_stack_vrt(tmp_path):
    paths = geotiff_stack(tmp_path, n=4)
    vrt = tmp_path / "s.vrt"
    virtualize.virtualize(paths[:3], vrt, concat_dim="time")
    report = virtualize.append(vrt, [paths[3]])  # the stack planned again, written anew
    assert report.output["kind"] == "vrt"
    got = gdal_read(vrt, tmp_path)
    np.testing.assert_array_equal(got, np.stack([tifffile.imread(p) for p in paths], axis=-1))
    assert virtualize.open(vrt)["image"].shape == (4, 40, 50)
    assert virtualize.verify_cube(vrt, decode=True) == []
    virtualize.export(vrt, tmp_path / "c.zarr")
    virtualize.export(tmp_path / "c.zarr", tmp_path / "back.vrt")
    np.testing.assert_array_equal(gdal_read(tmp_path / "back.vrt", tmp_path), got)
    os.utime(paths[0])  # touched only: refused when strict until refreshed
    with pytest.raises(VirtualizeError):
        virtualize.open(vrt, strict=True)
    assert [p.kind for p in virtualize.verify_cube(vrt, refresh=True)] == ["source-touched"]
    np.testing.assert_array_equal(virtualize.open(vrt, strict=True)["image"][...],
                                  np.moveaxis(got, -1, 0))
    assert virtualize.verify_cube(vrt, strict=True) == []
    np.testing.assert_array_equal(gdal_read(vrt, tmp_path), got)  # (its raster part as it was)


def test_int8_is_int8_for_gdal(tmp_path):
    """Int8 exists from GDAL 3.7: an older GDAL refuses to open the VRT rather than read
    its values as unsigned."""
    a = (np.arange(30 * 20) % 256 - 128).astype(np.int8).reshape(30, 20)
    p = tmp_path / "s.tif"
    tifffile.imwrite(p, a)
    vrt = tmp_path / "s.vrt"
    virtualize.virtualize([p], vrt)
    assert 'dataType="Int8"' in vrt.read_text()
    np.testing.assert_array_equal(virtualize.open(vrt)["image"][...], a)
    version = subprocess.run(["gdalinfo", "--version"], capture_output=True, text=True).stdout
    major, minor = (int(v) for v in version.split()[1].split(".")[:2])
    out = tmp_path / "o.tif"
    r = subprocess.run(["gdal_translate", "-q", "-of", "GTiff", str(vrt), str(out)],
                       capture_output=True, text=True)
    if (major, minor) < (3, 7):
        assert r.returncode != 0 and "Int8" in r.stderr
    else:
        assert r.returncode == 0, r.stderr
        np.testing.assert_array_equal(tifffile.imread(out), a)


def winner_with_nodata(tmp_path) -> list:
    """Two 64 x 64 GeoTIFFs (nodata 0), tile 1 over tile 0's columns 32..64 holding its
    nodata exactly there."""
    d = tmp_path / "t"
    d.mkdir()
    tiles = []
    for i, x in enumerate((0.0, 320.0)):  # tile 1 overlaps tile 0's columns 32..64
        a = np.full((64, 64), 100 + i, dtype=np.uint16)
        if i == 1:
            a[:, :32] = 0  # nodata exactly where it covers tile 0
        p = d / f"t{i}.tif"
        tifffile.imwrite(p, a, tile=(32, 32), extratags=geotags(
            32633, (500000.0 + x, 4000000.0), 10.0, nodata="0"))
        tiles.append(p)
    return tiles


def test_a_winners_nodata_pixels_stay_nodata_over_the_loser(tmp_path):
    """GDAL's transparency of source nodata (ComplexSource <NODATA>, gdalbuildvrt's) would
    show the losing tile through the winner's nodata pixels; the VRT's SimpleSources are
    opaque, so GDAL shows the winner's nodata there, as the cube does."""
    vrt = tmp_path / "m.vrt"
    virtualize.mosaic(winner_with_nodata(tmp_path), vrt, overlap="last")
    cube = virtualize.open(vrt)["image"][...]
    assert (cube[:, 32:64] == 0).all() and (cube[:, :32] == 100).all()
    np.testing.assert_array_equal(gdal_read(vrt, tmp_path), cube)
    assert "<SimpleSource>" in vrt.read_text() and "<NODATA>" not in vrt.read_text()


def test_xarray_engine_opens_a_vrt(case, tmp_path):
    import xarray as xr

    files = case("mosaic_uneven_2x2")
    vrt = tmp_path / "m.vrt"
    virtualize.mosaic(files, vrt)
    ds = xr.open_dataset(vrt, engine="virtualize")
    np.testing.assert_array_equal(ds["image"].values, gdal_read(vrt, tmp_path))
    assert ds["x"].size == 146 and ds["y"].size == 104


def test_a_tiff_whose_first_image_is_not_the_cubes_is_refused(tmp_path):
    """GDAL's dataset of a TIFF is its first image (IFD 0); here a reduced-resolution
    thumbnail comes first and the cube's image is the second page: refused, located."""
    p = tmp_path / "t.tif"
    with tifffile.TiffWriter(p) as w:
        w.write(np.ones((8, 10), np.uint16), subfiletype=1)
        w.write(np.arange(40 * 50, dtype=np.uint16).reshape(40, 50))
    out = tmp_path / "t.vrt"
    with pytest.raises(VirtualizeError) as e:
        virtualize.virtualize([p], out)
    (problem,) = e.value.problems
    assert problem.kind == "vrt-unsupported" and problem.loc.file == str(p)
    assert "IFD 0: 10 x 8" in problem.message
    assert not out.exists()
    virtualize.virtualize([p], tmp_path / "t.zarr")  # a cube is fine


def test_http_sources_through_vsicurl(case, tmp_path):
    from servers import RangeHTTPServer

    files = case("mosaic_uneven_2x2")
    srv = RangeHTTPServer(files[0].parent)
    try:
        urls = [f"{srv.url}/{p.name}" for p in files]
        vrt = tmp_path / "m.vrt"
        virtualize.mosaic(urls, vrt)
        text = vrt.read_text()
        assert f'<SourceFilename relativeToVRT="0">/vsicurl/{urls[0]}</SourceFilename>' in text
        np.testing.assert_array_equal(virtualize.open(vrt)["image"][...],
                                      mm.expected("mosaic_uneven_2x2"))
        np.testing.assert_array_equal(gdal_read(vrt, tmp_path), mm.expected("mosaic_uneven_2x2"))
    finally:
        srv.stop()


def test_pixel_is_point_and_ungeoreferenced_tiles(case, tmp_path):
    from make_tiff import RASTER_PIXEL_IS_POINT

    d = tmp_path / "p"
    d.mkdir()
    tiles = []
    for i in range(2):
        p = d / f"t{i}.tif"
        tifffile.imwrite(p, np.full((20, 30), i + 1, np.uint8), extratags=geotags(
            4326, (10.0 + i * 30 * 0.5, 50.0), 0.5, raster_type=RASTER_PIXEL_IS_POINT))
        tiles.append(p)
    vrt = tmp_path / "pt.vrt"
    virtualize.mosaic(tiles, vrt)
    info, tile = gdalinfo(vrt), gdalinfo(tiles[0])
    assert info["geoTransform"] == tile["geoTransform"]  # GDAL's half-pixel shift, as its own
    assert info["coordinateSystem"]["wkt"] == tile["coordinateSystem"]["wkt"]
    np.testing.assert_array_equal(gdal_read(vrt, tmp_path),
                                  np.hstack([tifffile.imread(p) for p in tiles]))
    # no georeferencing: placed by the offsets given, no SRS or GeoTransform written
    files = case("mosaic_offsets_plain")
    plain = tmp_path / "plain.vrt"
    virtualize.mosaic(files, plain, offsets=[(r, c) for r, c, _, _ in mm.LAYOUT["mosaic_offsets_plain"]])
    assert "<SRS>" not in plain.read_text() and "<GeoTransform>" not in plain.read_text()
    np.testing.assert_array_equal(gdal_read(plain, tmp_path),
                                  mm.expected("mosaic_offsets_plain"))


def test_several_arrays_and_4d_stacks_are_refused(tmp_path):
    import netCDF4

    nc = tmp_path / "two.nc"
    with netCDF4.Dataset(nc, "w") as ds:
        ds.createDimension("y", 10)
        ds.createDimension("x", 12)
        for name in ("a", "b"):
            ds.createVariable(name, "f4", ("y", "x"))[:] = np.ones((10, 12))
    with pytest.raises(VirtualizeError) as e:
        virtualize.virtualize([nc], tmp_path / "two.vrt")
    (p,) = e.value.problems
    assert p.kind == "vrt-unsupported" and "one raster" in p.message and "a, b" in p.message
    assert "-o cube.zarr" in p.message
    rgb = []
    for i in range(2):
        f = tmp_path / f"rgb{i}.tif"
        tifffile.imwrite(f, np.full((16, 16, 3), i, np.uint8), photometric="rgb")
        rgb.append(f)
    with pytest.raises(VirtualizeError) as e:
        virtualize.virtualize(rgb, tmp_path / "rgb.vrt", concat_dim="time")
    (p,) = e.value.problems
    assert p.loc.variable == "image" and "('time', 'y', 'x', 'band')" in p.message
    assert not list(tmp_path.glob("*.vrt")) and not list(tmp_path.glob(".*staging*"))


def test_a_killed_runs_staged_vrt_is_cleaned_up_and_a_foreign_one_kept(case, tmp_path):
    files = case("mosaic_uneven_2x2")
    vrt = tmp_path / "m.vrt"
    virtualize.mosaic(files, vrt)
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    ours = tmp_path / f".m.vrt.staging-{p.pid}-abc"
    ours.write_bytes(vrt.read_bytes()[:5000])  # half a VRT of ours
    theirs = tmp_path / f".m.vrt.staging-{p.pid}-xyz"
    theirs.write_text('<VRTDataset rasterXSize="1" rasterYSize="1"></VRTDataset>\n')
    virtualize.mosaic(files, vrt, overwrite=True)
    assert not ours.exists() and theirs.exists()


def test_a_vrt_on_object_storage(case, tmp_path, monkeypatch):
    """-o s3://bucket/m.vrt: built locally, uploaded; replaced with --overwrite (ours),
    read back by virtualize.open."""
    pytest.importorskip("moto")
    from servers import s3_bucket, start_moto

    files = case("mosaic_uneven_2x2")
    server, endpoint = start_moto()
    try:
        client = s3_bucket(monkeypatch, endpoint, "out")
        url = "s3://out/m.vrt"
        virtualize.mosaic(files, url)
        body = client.get_object(Bucket="out", Key="m.vrt")["Body"].read().decode()
        assert f"<SourceFilename relativeToVRT=\"0\">{files[0]}</SourceFilename>" in body
        with pytest.raises(OutputExistsError):
            virtualize.mosaic(files, url)
        virtualize.mosaic(files, url, overwrite=True)
        np.testing.assert_array_equal(virtualize.open(url)["image"][...],
                                      mm.expected("mosaic_uneven_2x2"))
        client.put_object(Bucket="out", Key="theirs.vrt", Body=b"<VRTDataset/>\n")
        with pytest.raises(UnsafeOutputError):
            virtualize.mosaic(files, "s3://out/theirs.vrt", overwrite=True)
    finally:
        server.stop()


def test_a_stacks_bands_are_named_by_their_dates(tmp_path):
    paths = []
    for i in range(3):
        p = tmp_path / f"ndvi_2024010{i + 1}.tif"
        tifffile.imwrite(p, np.full((10, 12), i, np.int16))
        paths.append(p)
    vrt = tmp_path / "s.vrt"
    virtualize.virtualize(paths, vrt, concat_dim="time")
    bands = gdalinfo(vrt)["bands"]
    assert [b["description"] for b in bands] == [f"time=2024-01-0{i + 1}" for i in range(3)]
    assert [b["metadata"][""] for b in bands] == [
        {"time": f"2024-01-0{i + 1}", "time_value": str(i), "time_units": "days since 2024-01-01"}
        for i in range(3)]
    np.testing.assert_array_equal(gdal_read(vrt, tmp_path),
                                  np.stack([tifffile.imread(p) for p in paths], axis=-1))


def test_a_mosaic_over_time_is_one_band_per_date(tmp_path):
    """(time, y, x) mosaics: band k is date k, its sources that date's tiles (a date
    missing a tile reads the fill there, in GDAL as in the cube)."""
    import test_mosaic_time as mt

    lay = mt.layouts()
    files = mt.write_tiles(tmp_path, lay)
    vrt = tmp_path / "t.vrt"
    virtualize.mosaic(files, vrt, concat_dim="time")
    want = mt.expected(lay)
    cube = virtualize.open(vrt)["image"][...]
    np.testing.assert_array_equal(cube, want)
    got = gdal_read(vrt, tmp_path)
    np.testing.assert_array_equal(np.moveaxis(got, -1, 0), want)
    info = gdalinfo(vrt)
    assert len(info["bands"]) == len(lay)
    assert [b["description"] for b in info["bands"]][0].startswith("time=")
    assert info["geoTransform"] == gdalinfo(files[0])["geoTransform"]
    # the date whose tile 1 covers only 32 rows: placed by its blocks, the header agrees
    text = vrt.read_text()
    assert text.count("<SimpleSource>") == len(files)


def test_the_json_report_of_a_vrt_write_follows_the_schema(case, tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    from importlib import resources

    schema = json.loads(resources.files("virtualize").joinpath("schemas/report-v1.json")
                        .read_text())
    report = virtualize.mosaic(case("mosaic_uneven_2x2"), tmp_path / "m.vrt")
    doc = json.loads(report.to_json())
    assert doc["output"]["kind"] == "vrt"
    jsonschema.validate(doc, schema)


def overlapping_dates(tmp_path, dates=("2024-01-01", "2024-01-02")):
    """Two 32 x 32 tiles (16 x 16 blocks) overlapping by 16 columns, on each date: the
    tile grid of a mosaic over time whose tiles overlap."""
    rng = np.random.default_rng(7)
    files, data = [], {}
    for date in dates:
        for j, col0 in enumerate((0, 16)):
            a = rng.integers(0, 60000, (32, 32)).astype("u2")
            p = tmp_path / f"t{j}_{date}.tif"
            tifffile.imwrite(p, a, tile=(16, 16),
                             extratags=geotags(32633, (500000 + col0 * 10.0, 4000000), 10.0))
            files.append(p)
            data[p] = (col0, a)
    return files, data


@pytest.mark.parametrize("overlap", ["last", "first"])
def test_a_mosaic_over_time_with_overlaps_is_a_vrt_gdal_reads_exactly(tmp_path, overlap):
    """docs/reading.md: `--overlap last` is GDAL's order itself, `first` written in
    reverse, also for a mosaic over time (each date's tiles placed as the grid's, not by
    the blocks they win)."""
    files, data = overlapping_dates(tmp_path)
    vrt = tmp_path / "t.vrt"
    virtualize.mosaic(files, vrt, concat_dim="time", overlap=overlap)
    want = np.zeros((2, 32, 48), "u2")
    for d, date in enumerate(("2024-01-01", "2024-01-02")):
        order = [f for f in files if date in f.name]
        for p in (order if overlap == "last" else order[::-1]):
            col0, a = data[p]
            want[d, :, col0:col0 + 32] = a
    cube = virtualize.open(vrt)["image"][...]
    np.testing.assert_array_equal(cube, want)
    np.testing.assert_array_equal(np.moveaxis(gdal_read(vrt, tmp_path), -1, 0), want)


@pytest.mark.skipif(shutil.which("gdalbuildvrt") is None,
                    reason="gdalbuildvrt not installed (Debian: apt-get install gdal-bin)")
def test_verify_export_append_of_a_foreign_vrt_say_what_it_is(tmp_path):
    """A VRT (or parquet set) virtualize did not write, given to verify / export / append:
    `not-a-cube`, the message naming every kind virtualize writes (it named three) and,
    for a VRT, that GDAL opens it (docs/reading.md)."""
    tile = tmp_path / "t.tif"
    tifffile.imwrite(tile, np.arange(64, dtype="u1").reshape(8, 8),
                     extratags=geotags(32633, (500000.0, 4000000.0), 10.0))
    vrt = tmp_path / "foreign.vrt"
    subprocess.run(["gdalbuildvrt", "-q", str(vrt), str(tile)], check=True)
    pq = tmp_path / "foreign.parq"
    pq.mkdir()
    (pq / ".zmetadata").write_text('{"metadata": {}, "record_size": 10}')
    for cube in (vrt, pq):
        for call in (lambda: virtualize.verify_cube(cube),
                     lambda: virtualize.export(cube, tmp_path / "x.zarr"),
                     lambda: virtualize.append(cube, [tile])):
            with pytest.raises(VirtualizeError) as e:
                call()
            (p,) = e.value.problems
            assert p.kind == "not-a-cube"
            assert "GDAL VRT" in p.message and "parquet" in p.message
            assert ("with GDAL" in p.message) == (cube == vrt)
        assert not (tmp_path / "x.zarr").exists()


def gdal_metadata(scale, offset, sample=0) -> tuple:
    """tifffile extratag GDAL_METADATA (42112): the band's scale and offset, as GDAL
    writes them (gdal_translate -a_scale / -a_offset)."""
    xml = (f'<GDALMetadata><Item name="SCALE" sample="{sample}" role="scale">{scale}</Item>'
           f'<Item name="OFFSET" sample="{sample}" role="offset">{offset}</Item>'
           "</GDALMetadata>")
    return (42112, "s", 0, xml, True)


def test_a_vrt_keeps_the_tiles_gdal_scale_and_offset(tmp_path):
    """GDAL shows a tile's band with the scale and offset its GDAL_METADATA declares (a
    reader unscales by them: rasterio's `scales`, QGIS); the VRT of such tiles declares
    them too, else GDAL users would read other physical values through it. Tiles that
    disagree are refused, never shown with one tile's scaling."""
    import json

    files = []
    for j in range(2):
        p = tmp_path / f"t{j}.tif"
        tifffile.imwrite(p, np.arange(256, dtype="i2").reshape(16, 16) + j, tile=(16, 16),
                         extratags=geotags(32633, (500000 + j * 160.0, 4000000), 10.0)
                         + [gdal_metadata(0.01, 5)])
        files.append(p)

    def band(path):
        r = subprocess.run(["gdalinfo", "-json", str(path)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        b = json.loads(r.stdout)["bands"][0]
        return b.get("scale", 1.0), b.get("offset", 0.0)

    assert band(files[0]) == (0.01, 5.0)
    vrt = tmp_path / "m.vrt"
    virtualize.mosaic(files, vrt)
    assert band(vrt) == band(files[0])
    np.testing.assert_array_equal(gdal_read(vrt, tmp_path), virtualize.open(vrt)["image"][...])
    # a tile scaled otherwise (or not at all): GDAL's one band cannot show both
    tifffile.imwrite(files[1], np.arange(256, dtype="i2").reshape(16, 16), tile=(16, 16),
                     extratags=geotags(32633, (500000 + 160.0, 4000000), 10.0))
    with pytest.raises(VirtualizeError) as e:
        virtualize.mosaic(files, tmp_path / "n.vrt")
    assert {p.kind for p in e.value.problems} == {"vrt-unsupported"}
    assert "scale" in str(e.value) and str(files[1]) in str(e.value)
    assert not (tmp_path / "n.vrt").exists()


def test_a_vrt_keeps_the_scale_gdal_takes_from_a_pam_sidecar(tmp_path):
    """GDAL shows a tile's band with the Scale / Offset of its `.aux.xml` when the TIFF
    declares none itself (the tag wins when it does): the VRT declares what GDAL shows."""
    import json

    files = []
    for j, internal in enumerate((False, True)):
        p = tmp_path / f"t{j}.tif"
        tags = geotags(32633, (500000 + j * 80.0, 4000000), 10.0)
        tifffile.imwrite(p, np.arange(64, dtype="i2").reshape(8, 8),
                         extratags=tags + ([gdal_metadata(0.5, 3)] if internal else []))
        pam = 2 if not internal else 9  # (the tag's 0.5 wins over the sidecar's 9)
        (tmp_path / f"t{j}.tif.aux.xml").write_text(
            f'<PAMDataset><PAMRasterBand band="1"><Offset>3</Offset><Scale>{pam}</Scale>'
            "</PAMRasterBand></PAMDataset>")
        files.append(p)

    def band(path):
        r = subprocess.run(["gdalinfo", "-json", str(path)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        b = json.loads(r.stdout)["bands"][0]
        return b.get("scale", 1.0), b.get("offset", 0.0)

    assert band(files[0]) == (2.0, 3.0) and band(files[1]) == (0.5, 3.0)
    with pytest.raises(VirtualizeError) as e:  # GDAL shows the two with other scales
        virtualize.mosaic(files, tmp_path / "m.vrt")
    assert "scale 0.5" in str(e.value) and "scale 2.0" in str(e.value)
    (tmp_path / "t1.tif.aux.xml").unlink()
    files[1].unlink()
    tifffile.imwrite(files[1], np.arange(64, dtype="i2").reshape(8, 8),
                     extratags=geotags(32633, (500000 + 80.0, 4000000), 10.0)
                     + [gdal_metadata(2, 3)])
    vrt = tmp_path / "m.vrt"
    virtualize.mosaic(files, vrt)
    assert band(vrt) == (2.0, 3.0) == band(files[1])


# -- tiles whose internal blocks are padded or cut: GDAL reads the tiles whole ----------

def copied_chunks(vrt, name="image") -> list[str]:
    """The chunk keys of the raster whose bytes the VRT's recorded references hold (copied
    into it; the inline coordinates' are, as in any reference set)."""
    from virtualize.outputs.vrt.reader import load

    return [k for k, v in load(vrt)["refs"].items()
            if k.startswith(f"{name}/c/") and isinstance(v, str) and v.startswith("base64:")]


def windows_of(vrt) -> dict:
    from pathlib import Path

    from virtualize.outputs.vrt.reader import _load

    return _load(Path(vrt))[1]


@pytest.mark.parametrize("name", ["mosaic_blocks128_2x2", "mosaic_blocks128_gdal",
                                  "mosaic_blocks128_staggered"])
def test_tiles_with_padded_128_blocks_are_a_vrt_gdal_reads_as_the_tiles(case, tmp_path, name):
    """2 x 2 GeoTIFFs with 128 x 128 internal blocks whose edges are not tile edges
    (tifffile's and gdal_translate -srcwin's), and staggered bricks cut inside blocks: the
    VRT's sources are the whole tiles; GDAL reads it equal to the tiles read by tifffile,
    virtualize too (its cells no block fits decoded from windows of the tiles), and
    nothing is copied into it. The same tiles as a cube stay refused, naming the block and
    --materialize."""
    files = case(name)
    vrt = tmp_path / "m.vrt"
    report = virtualize.mosaic(files, vrt)
    want = mm.expected(name)
    got = gdal_read(vrt, tmp_path)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    check_tiles(got, name, files)
    np.testing.assert_array_equal(virtualize.open(vrt)["image"][...], want)
    import xarray as xr
    ds = xr.open_dataset(vrt, engine="virtualize", mask_and_scale=False)  # (999999: raw)
    np.testing.assert_array_equal(ds["image"].values, want)
    assert vrt.read_text().count("<SimpleSource>") == len(files)
    windows = windows_of(vrt)["image"]
    assert windows and copied_chunks(vrt) == []
    assert "materialize" not in report.plan.remedies
    assert any("read as windows of their tiles" in n for n in report.notes)
    assert {p["path"] for p in load_sources(vrt)} == {str(f) for f in files}
    assert not any(p.get("copied") for p in load_sources(vrt))
    if name in mm.NODATA:  # the gaps read as the tiles' nodata, 999999, in GDAL and the cube
        assert gdalinfo(vrt)["bands"][0]["noDataValue"] == 999999
        assert (got[200:, :100] == 999999).all() and (got[:200, 600:] == 999999).all()
    with pytest.raises(VirtualizeError) as e:
        virtualize.mosaic(files, tmp_path / "m.zarr")
    kinds = {p.kind for p in e.value.problems}
    assert kinds <= {"padded-block", "cut-through-block"} and kinds
    assert all("--materialize" in (p.remedy or "") for p in e.value.problems
               if not p.message.startswith("..."))
    assert not (tmp_path / "m.zarr").exists()


def load_sources(vrt) -> list[dict]:
    from virtualize.outputs.vrt.reader import load

    return load(vrt)["virtualize"]["sources"]


@pytest.mark.parametrize("overlap", ["last", "first"])
def test_overlapping_tiles_cut_inside_their_blocks_paint_as_gdal_does(case, tmp_path, overlap):
    """Two tiles overlapping by 50 columns, inside 128-pixel blocks of both: the winner
    (GDAL's rule: the source painted last) shows there, in GDAL and in virtualize's read;
    without --overlap the overlap stays a choice to make (refused, naming --overlap)."""
    name = "mosaic_blocks128_overlap"
    files = case(name)
    vrt = tmp_path / "m.vrt"
    virtualize.mosaic(files, vrt, overlap=overlap)
    want = mm.expected(name, overlap=overlap)
    np.testing.assert_array_equal(gdal_read(vrt, tmp_path), want)
    np.testing.assert_array_equal(virtualize.open(vrt)["image"][...], want)
    winner = tifffile.imread(files[1 if overlap == "last" else 0])
    col0 = mm.LAYOUT[name][1 if overlap == "last" else 0][1]
    np.testing.assert_array_equal(want[:, 250:300], winner[:, 250 - col0:300 - col0])
    with pytest.raises(VirtualizeError) as e:
        virtualize.mosaic(files, tmp_path / "n.vrt")
    assert {p.kind for p in e.value.problems} == {"overlap"}
    assert "--overlap last" in e.value.problems[0].message


def test_materialize_copies_nothing_into_a_vrt(case, tmp_path):
    """--materialize with a VRT: the mosaic's cells are windows of the tiles all the same
    (a note says --materialize copies nothing); a stack's copied cells (concatenated
    along y: the first file's padded last block row inside the stack) are recorded as
    windows too: no chunk's bytes in the VRT, which GDAL would never read."""
    files = case("mosaic_blocks128_2x2")
    vrt = tmp_path / "m.vrt"
    report = virtualize.mosaic(files, vrt, materialize=True)
    assert copied_chunks(vrt) == [] and windows_of(vrt)["image"]
    assert "materialize" not in report.plan.remedies
    assert any("--materialize copies nothing" in n for n in report.notes)
    np.testing.assert_array_equal(gdal_read(vrt, tmp_path), mm.expected("mosaic_blocks128_2x2"))
    np.testing.assert_array_equal(virtualize.open(vrt)["image"][...],
                                  mm.expected("mosaic_blocks128_2x2"))
    plain = []
    for i in range(2):
        p = tmp_path / f"p{i}.tif"
        tifffile.imwrite(p, (np.arange(200 * 300).reshape(200, 300) + i * 100000).astype("u4"),
                         tile=(128, 128), compression="zlib")
        plain.append(p)
    with pytest.raises(VirtualizeError) as e:
        virtualize.virtualize(plain, tmp_path / "s.vrt", concat_dim="y")
    assert {p.kind for p in e.value.problems} == {"padded-block"}
    stack = tmp_path / "s.vrt"
    virtualize.virtualize(plain, stack, concat_dim="y", materialize=True)
    want = np.vstack([tifffile.imread(p) for p in plain])
    assert copied_chunks(stack) == [] and len(windows_of(stack)["image"]) == 3
    assert not any(s.get("copied") for s in load_sources(stack))
    np.testing.assert_array_equal(gdal_read(stack, tmp_path), want)
    np.testing.assert_array_equal(virtualize.open(stack)["image"][...], want)


def test_a_mosaic_over_dates_of_padded_tiles_is_one_band_per_date(case, tmp_path):
    """`mosaic --concat-dim time` over 2 x 2 tiles with 128-pixel blocks on 3 dates (one
    tile missing on a date): one band per date, named by its date (description and
    metadata), GDAL's band k equal to that date's tiles (the missing tile's place reads
    0), virtualize's read too; --materialize is not needed (and copies nothing)."""
    name = "mosaic_dates_blocks128"
    files = case(name)
    vrt = tmp_path / "t.vrt"
    virtualize.mosaic(files, vrt, concat_dim="time", materialize=True)
    want = mm.expected_dates(name)
    got = gdal_read(vrt, tmp_path)
    np.testing.assert_array_equal(np.moveaxis(got, -1, 0), want)
    for path, (row0, col0, h, w), when in zip(files, mm.LAYOUT[name], mm.DATED[name]):
        k = sorted(set(mm.DATED[name])).index(when)
        np.testing.assert_array_equal(got[row0:row0 + h, col0:col0 + w, k], tifffile.imread(path))
    assert (got[200:, 300:, 1] == 0).all()  # tile 3 is missing on 2024-01-02
    np.testing.assert_array_equal(virtualize.open(vrt)["image"][...], want)
    bands = gdalinfo(vrt)["bands"]
    assert [b["description"] for b in bands] == ["time=2024-01-01", "time=2024-01-02",
                                                 "time=2024-01-03"]
    assert [b["metadata"][""]["time"] for b in bands] == ["2024-01-01", "2024-01-02",
                                                          "2024-01-03"]
    assert windows_of(vrt)["image"] and copied_chunks(vrt) == []
    with pytest.raises(VirtualizeError) as e:  # as a cube: the padded blocks refused
        virtualize.mosaic(files, tmp_path / "t.zarr", concat_dim="time")
    assert {p.kind for p in e.value.problems} == {"padded-block"}


def test_a_stack_of_dates_is_a_band_per_date_as_gdalbuildvrt_separate(case, tmp_path):
    """One tile on 3 dates (128-pixel blocks, padded last ones), stacked along a new time
    axis: a band per date, as `gdalbuildvrt -separate` makes, each GDAL band equal to its
    date's file read by tifffile, named by its date."""
    name = "mosaic_dates_blocks128"
    files = [f for f in case(name) if f.name.startswith("tile_0_")]
    vrt = tmp_path / "s.vrt"
    virtualize.virtualize(files, vrt, concat_dim="time")
    got = gdal_read(vrt, tmp_path)
    assert got.shape == (200, 300, 3)
    for k, path in enumerate(files):
        np.testing.assert_array_equal(got[..., k], tifffile.imread(path))
    np.testing.assert_array_equal(virtualize.open(vrt)["image"][...], np.moveaxis(got, -1, 0))
    assert [b["description"] for b in gdalinfo(vrt)["bands"]] == [
        "time=2024-01-01", "time=2024-01-02", "time=2024-01-03"]
    theirs = tmp_path / "theirs.vrt"
    r = subprocess.run(["gdalbuildvrt", "-q", "-separate", str(theirs), *map(str, files)],
                       capture_output=True, text=True)
    if r.returncode == 0:  # (gdalbuildvrt is in gdal-bin too)
        np.testing.assert_array_equal(gdal_read(theirs, tmp_path), got)


def test_a_windowed_vrt_verifies_moves_and_exports(case, tmp_path):
    """verify --decode plans it again as a VRT (windows, not refused blocks); moved with
    its tiles (--relative) its windows are read from the tiles' new place; exported as a
    cube it is refused as the cube would be, as a VRT it is written again."""
    files = case("mosaic_blocks128_2x2")
    d = tmp_path / "here"
    shutil.copytree(files[0].parent, d / "tiles")
    vrt = d / "m.vrt"
    virtualize.mosaic(sorted((d / "tiles").glob("tile_*.tif")), vrt, relative=True)
    assert virtualize.verify_cube(vrt, decode=True) == []
    moved = tmp_path / "moved"
    d.rename(moved)
    want = mm.expected("mosaic_blocks128_2x2")
    np.testing.assert_array_equal(virtualize.open(moved / "m.vrt")["image"][...], want)
    np.testing.assert_array_equal(gdal_read(moved / "m.vrt", tmp_path), want)
    with pytest.raises(VirtualizeError) as e:
        virtualize.export(moved / "m.vrt", tmp_path / "c.zarr")
    assert {p.kind for p in e.value.problems} == {"padded-block"}
    virtualize.export(moved / "m.vrt", tmp_path / "again.vrt")
    np.testing.assert_array_equal(gdal_read(tmp_path / "again.vrt", tmp_path), want)
    os.utime(moved / "tiles" / "tile_0.tif")  # touched only: re-scanned, refreshed
    assert [p.kind for p in virtualize.verify_cube(moved / "m.vrt", refresh=True)] == \
        ["source-touched"]
    np.testing.assert_array_equal(virtualize.open(moved / "m.vrt", strict=True)["image"][...],
                                  want)
    # its windows are covered by the digest: one pointing at another tile is refused
    import base64
    import re
    import zlib

    text = (moved / "m.vrt").read_text()
    packed = re.search(r'<MDI key="windows">([^<]*)</MDI>', text).group(1)
    cells = json.loads(zlib.decompress(base64.b64decode(packed)))
    cells["image"][0][1] = 3
    edited = moved / "e.vrt"
    edited.write_text(text.replace(packed, base64.b64encode(zlib.compress(
        json.dumps(cells).encode())).decode()))
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(edited)
    assert e.value.problems[0].kind == "vrt-edited"
    tifffile.imwrite(moved / "tiles" / "tile_3.tif", np.zeros((150, 170), np.uint32))
    with pytest.raises(VirtualizeError):  # a rewritten tile: stale, not read
        virtualize.open(moved / "m.vrt")


def test_windows_whose_codec_cannot_encode_are_refused_before_writing(case, tmp_path,
                                                                      monkeypatch):
    """virtualize reads a window by encoding it again with the array's codecs: one window
    per array is tried when the VRT is written, and a failure is refused, located, with
    nothing written (never a VRT virtualize cannot read back)."""
    from virtualize.outputs import materialize

    def fails(*_a, **_k):
        raise ValueError("no encoder")
    monkeypatch.setattr(materialize, "encode_chunk", fails)
    files = case("mosaic_blocks128_2x2")
    vrt = tmp_path / "m.vrt"
    with pytest.raises(VirtualizeError) as e:
        virtualize.mosaic(files, vrt)
    (p,) = e.value.problems
    assert p.kind == "vrt-unsupported" and p.loc.variable == "image"
    assert p.loc.file == str(files[0]) and "no encoder" in p.message
    assert not vrt.exists()
