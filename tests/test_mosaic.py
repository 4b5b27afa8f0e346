"""Mosaics: every cell of the cube equals the responsible tile's pixel; what cannot be
referenced is refused naming the tile, block and pixel row/column."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import netCDF4
import numpy as np
import pytest
import xarray as xr
import zarr_metadata.model

import virtualize

import make_mosaic as mm
from helpers import assert_same, kerchunk_group


def build(case, name, tmp_path, **kw):
    files = case(name)
    if name == "mosaic_offsets_plain":
        kw.setdefault("offsets", [(r, c) for r, c, _, _ in mm.LAYOUT[name]])
    cube, refs = tmp_path / "cube.zarr", tmp_path / "cube.json"
    report = virtualize.mosaic(files, cube, **kw)
    virtualize.mosaic(files, refs, **kw)
    for name in report.plan.arrays:
        doc = json.loads((cube / name / "zarr.json").read_text())
        assert zarr_metadata.model.read_array_metadata_v3(doc).problems == ()
    return report, virtualize.open(cube), kerchunk_group(refs)


def data_name(report):
    return next(n for n in report.plan.arrays if n not in ("x", "y", "spatial_ref", "crs"))


@pytest.mark.parametrize("name", ["mosaic_uneven_2x2", "mosaic_uneven_strips",
                                  "mosaic_staggered_aligned", "mosaic_gap", "mosaic_bands",
                                  "mosaic_netcdf", "mosaic_gdal_srcwin", "mosaic_offsets_plain"])
def test_mosaic_reads_every_pixel_from_its_tile(case, tmp_path, name):
    report, g, k = build(case, name, tmp_path)
    var = data_name(report)
    expected = mm.expected(name)
    assert_same(g[var][...], expected.astype(g[var].dtype), f"{name} via virtualize.open")
    assert_same(k[var][...], expected.astype(g[var].dtype), f"{name} via kerchunk")


def test_uneven_strips_make_a_rectilinear_grid(case, tmp_path):
    report, g, _ = build(case, "mosaic_uneven_strips", tmp_path)
    doc = json.loads((tmp_path / "cube.zarr" / "image" / "zarr.json").read_text())
    assert doc["chunk_grid"]["name"] == "rectilinear"
    assert doc["chunk_grid"]["configuration"]["chunk_shapes"] == [[[16, 6], 8], [96, 50]]


def test_georeferenced_mosaic_has_union_coordinates(case, tmp_path):
    report, g, _ = build(case, "mosaic_uneven_2x2", tmp_path)
    rows, cols = mm.union_shape("mosaic_uneven_2x2")
    x0, y0 = mm.ORIGIN
    np.testing.assert_array_equal(g["x"][...], x0 + (np.arange(cols) + 0.5) * mm.PIXEL)
    np.testing.assert_array_equal(g["y"][...], y0 - (np.arange(rows) + 0.5) * mm.PIXEL)
    gt = g["spatial_ref"].attrs["GeoTransform"].split()
    assert [float(v) for v in gt] == [x0, mm.PIXEL, 0.0, y0, 0.0, -mm.PIXEL]
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize")
    assert ds.image.dims == ("y", "x") and ds.sizes == {"y": rows, "x": cols}


def test_netcdf_tiles_keep_their_grid_mapping(case, tmp_path):
    report, g, _ = build(case, "mosaic_netcdf", tmp_path)
    assert "crs" in report.plan.arrays
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize")
    assert ds.elev.attrs["grid_mapping"] == "crs"


def test_gap_reads_as_fill(case, tmp_path):
    report, g, _ = build(case, "mosaic_gap", tmp_path)
    data = g["image"][...]
    assert (data == 0).sum() > 0 and int(g["image"].fill_value) == 0
    assert any("gaps" in n for n in report.notes)


def test_staggered_misaligned_is_refused_naming_the_cut_block(case, tmp_path):
    files = case("mosaic_staggered_misaligned")
    report = virtualize.check_mosaic(files)
    cuts = [p for p in report.problems if p.kind == "cut-through-block"]
    assert cuts and not report.ok
    p = cuts[0]
    assert p.loc.file in map(str, files) and p.loc.variable == "image"
    assert p.loc.axis == "x" and p.loc.block is not None
    assert "is cut at mosaic column" in p.message and ".tif" in p.message
    with pytest.raises(virtualize.VirtualizeError):
        virtualize.mosaic(files, tmp_path / "cube.zarr")
    assert not (tmp_path / "cube.zarr").exists()


def test_overlap_is_refused_naming_both_tiles_and_the_window(case):
    files = case("mosaic_overlap_aligned")
    report = virtualize.check_mosaic(files)
    (p,) = [p for p in report.problems if p.kind == "overlap"]
    assert p.loc.file == str(files[1]) and str(files[0]) in p.message
    assert "rows 0..63, columns 32..63" in p.message


@pytest.mark.parametrize("rule", ["last", "first"])
def test_overlap_settled_block_by_block(case, tmp_path, rule):
    report, g, k = build(case, "mosaic_overlap_aligned", tmp_path, overlap=rule)
    expected = mm.expected("mosaic_overlap_aligned", rule)
    assert_same(g["image"][...], expected.astype(g["image"].dtype), f"overlap {rule}")


def test_overlap_not_on_block_boundaries_stays_refused(case):
    report = virtualize.check_mosaic(case("mosaic_overlap_misaligned"), overlap="last")
    assert {p.kind for p in report.problems if p.fatal} == {"cut-through-block"}


def test_misaligned_pixels_need_warping(case):
    files = case("mosaic_misaligned_phase")
    report = virtualize.check_mosaic(files)
    (p,) = [p for p in report.problems if p.kind == "needs-warping"]
    assert p.loc.file == str(files[1]) and "0.35" in p.message


def test_disagreeing_nodata_is_refused(case):
    report = virtualize.check_mosaic(case("mosaic_nodata_disagree"))
    assert "fill-value-differs" in {p.kind for p in report.problems}


def test_plain_tiles_need_offsets(case):
    report = virtualize.check_mosaic(case("mosaic_offsets_plain"))
    assert {p.kind for p in report.problems} == {"no-georeferencing"}


def test_cli_mosaic_check_and_write(case, tmp_path):
    exe = os.path.join(os.path.dirname(sys.executable), "virtualize")
    files = [str(f) for f in case("mosaic_overlap_aligned")]
    r = subprocess.run([exe, "mosaic", "--check", *files], capture_output=True, text=True)
    assert r.returncode == 1 and "overlap" in r.stdout
    r = subprocess.run([exe, "mosaic", "--check", "--overlap", "last", "--json", *files],
                       capture_output=True, text=True)
    assert r.returncode == 0 and json.loads(r.stdout)["ok"] is True
    r = subprocess.run([exe, "mosaic", *files, "--overlap", "last", "-o", str(tmp_path / "m.zarr")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert virtualize.open(tmp_path / "m.zarr")["image"].shape == (64, 96)


def test_lon_lat_tiles_with_ascending_latitude(tmp_path):
    """netCDF tiles on a regular lon/lat grid, latitude increasing (south-up)."""
    import netCDF4

    step = 0.25
    files = []
    for i, (lat0, lon0) in enumerate([(0, 0), (0, 32), (32, 0), (32, 32)]):
        path = tmp_path / f"t{i}.nc"
        with netCDF4.Dataset(path, "w") as d:
            d.createDimension("lat", 32)
            d.createDimension("lon", 32)
            lat = d.createVariable("lat", "f8", ("lat",))
            lat[:] = -10 + (lat0 + np.arange(32) + 0.5) * step
            lon = d.createVariable("lon", "f8", ("lon",))
            lon[:] = 20 + (lon0 + np.arange(32) + 0.5) * step
            v = d.createVariable("t2m", "f4", ("lat", "lon"), chunksizes=(16, 16), zlib=True)
            gy, gx = np.meshgrid(lat0 + np.arange(32), lon0 + np.arange(32), indexing="ij")
            v[:] = gy * 1000 + gx
        files.append(path)
    virtualize.mosaic(files, tmp_path / "m.zarr")
    g = virtualize.open(tmp_path / "m.zarr")
    gy, gx = np.meshgrid(np.arange(64), np.arange(64), indexing="ij")
    assert_same(g["t2m"][...], (gy * 1000 + gx).astype("f4"), "lon/lat mosaic")
    np.testing.assert_allclose(g["lat"][...], -10 + (np.arange(64) + 0.5) * step)
    np.testing.assert_allclose(g["lon"][...], 20 + (np.arange(64) + 0.5) * step)


# Found by #20's review (smaller): a mosaic of netCDF tiles whose leading `time` axis holds different
# dates (0 and 5 days) is accepted: the `time` coordinate and the scalar `height` are left
# out of the cube without a note (only `meta` is noted "not part of the mosaic") and the
# tiles' times are never compared, so tiles of different dates become one array.
def test_mosaic_tiles_of_different_times(tmp_path):
    tiles = []
    for i, (x0, tv) in enumerate([(0, 0.0), (10, 5.0)]):
        p = tmp_path / f"t{i}.nc"
        with netCDF4.Dataset(p, "w") as ds:
            ds.createDimension("time", 1)
            ds.createDimension("y", 4)
            ds.createDimension("x", 10)
            t = ds.createVariable("time", "f8", ("time",))
            t.units = "days since 2000-01-01"
            t[:] = [tv]
            ds.createVariable("x", "f8", ("x",))[:] = np.arange(10) + x0 + 0.5
            ds.createVariable("y", "f8", ("y",))[:] = np.arange(4)[::-1] + 0.5
            ds.createVariable("height", "f8", ())[...] = 2.0
            crs = ds.createVariable("crs", "i4", ())
            crs.grid_mapping_name = "latitude_longitude"
            v = ds.createVariable("band", "f4", ("time", "y", "x"))
            v.grid_mapping = "crs"
            v[:] = np.full((1, 4, 10), i, "f4")
        tiles.append(str(p))
    r = virtualize.check_mosaic(tiles)
    said = " ".join([p.message for p in r.problems] + [str(n) for n in r.notes])
    assert "time" in said and "height" in said, (r.verdict, said)


def _time_tiles(tmp_path, times):
    tiles = []
    for i, (x0, tv) in enumerate(zip((0, 10), times)):
        p = tmp_path / f"t{i}.nc"
        with netCDF4.Dataset(p, "w") as ds:
            ds.createDimension("time", 1)
            ds.createDimension("y", 4)
            ds.createDimension("x", 10)
            t = ds.createVariable("time", "f8", ("time",))
            t.units = "days since 2000-01-01"
            t[:] = [tv]
            ds.createVariable("x", "f8", ("x",))[:] = np.arange(10) + x0 + 0.5
            ds.createVariable("y", "f8", ("y",))[:] = np.arange(4)[::-1] + 0.5
            ds.createVariable("height", "f8", ())[...] = 2.0
            v = ds.createVariable("band", "f4", ("time", "y", "x"))
            v[:] = np.full((1, 4, 10), i, "f4")
        tiles.append(str(p))
    return tiles


# Found by #20's review: tiles of one time: the time coordinate is kept in the mosaic (compared), the
# scalar left out with a note naming it; of different times: refused at `time`, located.
def test_mosaic_tiles_of_one_time_keep_it(tmp_path):
    tiles = _time_tiles(tmp_path, (3.0, 3.0))
    out = tmp_path / "m.zarr"
    report = virtualize.mosaic(tiles, out)
    assert report.ok and any("height" in str(n) for n in report.notes), report.notes
    g = virtualize.open(out)
    assert g["time"][...].tolist() == [3.0] and g["time"].attrs["units"] == "days since 2000-01-01"
    assert g["band"].shape == (1, 4, 20)
    (tmp_path / "b").mkdir()
    bad = virtualize.check_mosaic(_time_tiles(tmp_path / "b", (3.0, 4.0)))
    [p] = [p for p in bad.problems if p.fatal]
    assert (p.kind, p.loc.variable) == ("differs-between-files", "time") and "not supported" in p.remedy
