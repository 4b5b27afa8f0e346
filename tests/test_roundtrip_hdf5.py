"""Every HDF5 / netCDF-4 case that virtualizes: read back through virtualize.open, the
kerchunk export via fsspec + zarr, and xarray; compare with h5py / netCDF4 reads."""

from __future__ import annotations

import calendar
import json

import netCDF4
import pytest
import xarray as xr
import zarr_metadata.model

import virtualize

from conftest import needs
from helpers import assert_same, kerchunk_group, kerchunk_xarray, source_values

LEAP_2024 = [31, 29, 31, 30, 31, 30, [31, 2], 30, 31, 30, 31]


def roundtrip(files, tmp_path, concat_dim=None, **kw):
    """Virtualize `files` into a cube and a kerchunk export; check every array, read four
    ways, against the sources. Returns the report."""
    cube, refs = tmp_path / "cube.zarr", tmp_path / "cube.json"
    report = virtualize.virtualize(files, cube, concat_dim, **kw)
    virtualize.virtualize(files, refs, concat_dim, **kw)
    plan = report.plan
    ordered = [s.path for s in plan.sources]
    g = virtualize.open(cube)
    k = kerchunk_group(refs)
    xr_cube, xr_refs = {}, {}
    for name, array in plan.arrays.items():
        doc = json.loads((cube / name / "zarr.json").read_text())
        assert zarr_metadata.model.read_array_metadata_v3(doc).problems == ()
        expected = source_values(ordered, name, plan.concat_dim, array.dims)
        assert_same(g[name][...], expected, f"{name} via virtualize.open")
        assert_same(k[name][...], expected, f"{name} via kerchunk JSON + zarr")
        group, _, base = name.rpartition("/")
        if group not in xr_cube:
            raw = dict(mask_and_scale=False, decode_times=False, group=group or None)
            xr_cube[group] = xr.open_dataset(cube, engine="virtualize", **raw)
            xr_refs[group] = kerchunk_xarray(refs, **raw)
        assert_same(xr_cube[group][base].values, expected, f"{name} via xarray (cube)")
        assert_same(xr_refs[group][base].values, expected, f"{name} via xarray (kerchunk)")
    return report


def time_grid(cube) -> object:
    doc = json.loads((cube / "tas" / "zarr.json").read_text())
    grid = doc["chunk_grid"]
    if grid["name"] == "regular":
        return grid["configuration"]["chunk_shape"][0]
    return grid["configuration"]["chunk_shapes"][0]


def test_months_2024_one_chunk_per_month(case, tmp_path):
    files = case("months2024")
    report = roundtrip(files, tmp_path)
    assert report.ok and report.plan.concat_dim == "time"
    assert time_grid(tmp_path / "cube.zarr") == LEAP_2024
    doc = json.loads((tmp_path / "cube.zarr" / "tas" / "zarr.json").read_text())
    assert doc["chunk_grid"]["configuration"]["chunk_shapes"][1:] == [[3], [4]]
    # the 1-D time coordinate (chunked 1024 by netCDF-4, so padded) is inlined
    assert report.plan.arrays["time"].inline is not None


def test_months_2024_decoded_like_netcdf4(case, tmp_path):
    files = case("months2024")
    virtualize.virtualize(files, tmp_path / "cube.zarr")
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize")
    src = xr.concat([xr.open_dataset(f, engine="netcdf4") for f in files], dim="time")
    xr.testing.assert_equal(ds, src)
    assert ds.time.dt.year.values.tolist() == [2024] * 366
    assert ds.tas.attrs["units"] == src.tas.attrs["units"]


def test_years_2000_2010(case, tmp_path):
    files = case("years2000_2010")
    roundtrip(files, tmp_path)
    lengths = [366 if calendar.isleap(y) else 365 for y in range(2000, 2011)]
    assert time_grid(tmp_path / "cube.zarr") == [366, [365, 3], 366, [365, 3], 366, [365, 2]]
    assert sum(lengths) == virtualize.open(tmp_path / "cube.zarr")["tas"].shape[0]


def test_appended_batches_of_uneven_length(case, tmp_path):
    roundtrip(case("appended_batches"), tmp_path)
    assert time_grid(tmp_path / "cube.zarr") == [7, 3, 12, 1, 5]


@pytest.mark.parametrize("name", ["filters_gzip_shuffle", "filters_fletcher32", "filters_none"])
def test_filter_pipelines(case, tmp_path, name):
    roundtrip(case(name), tmp_path)
    assert time_grid(tmp_path / "cube.zarr") == [31, 28, 31]
    codecs = [c["name"] for c in json.loads(
        (tmp_path / "cube.zarr" / "tas" / "zarr.json").read_text())["codecs"]]
    if name == "filters_gzip_shuffle":
        assert codecs == ["bytes", "numcodecs.shuffle", "numcodecs.zlib"]
    elif name == "filters_fletcher32":
        assert "numcodecs.fletcher32" in codecs and "numcodecs.zlib" in codecs
    else:
        assert codecs == ["bytes"]


def test_contiguous_files_are_one_chunk_each(case, tmp_path):
    roundtrip(case("contiguous"), tmp_path)
    assert time_grid(tmp_path / "cube.zarr") == [31, 28, 31]


def test_big_endian(case, tmp_path):
    report = roundtrip(case("bigendian"), tmp_path)
    doc = json.loads((tmp_path / "cube.zarr" / "tas" / "zarr.json").read_text())
    assert doc["codecs"][0] == {"name": "bytes", "configuration": {"endian": "big"}}
    assert "count" in report.plan.arrays


def test_groups_are_kept(case, tmp_path):
    report = roundtrip(case("groups"), tmp_path)
    assert {"surface/tas", "surface/stats/nobs"} <= set(report.plan.arrays)
    g = virtualize.open(tmp_path / "cube.zarr")
    src = netCDF4.Dataset(case("groups")[0])
    assert dict(g["surface"].attrs) == {k: src["surface"].getncattr(k) for k in src["surface"].ncattrs()}


def test_every_numeric_type_and_inlined_string(case, tmp_path):
    files = case("dtypes")
    report = roundtrip(files, tmp_path)
    assert not [p for p in report.problems if p.kind == "unsupported-type"]
    station = report.plan.arrays["station_name"]  # netCDF-4 `string`: inlined as text
    assert station.inline is not None and station.dtype.kind == "T"
    with netCDF4.Dataset(files[0]) as nc:
        assert station.inline.tolist() == list(nc["station_name"][...])
    assert "crs" in report.plan.arrays  # the scalar variable


def test_files_out_of_order_are_sorted(case, tmp_path):
    files = case("unordered")
    report = roundtrip(files, tmp_path)
    assert any("sorted" in n for n in report.notes)
    assert [s.path.rsplit("/", 1)[1] for s in report.plan.sources] == [
        "c_jan.nc", "a_feb.nc", "b_mar.nc"]


def test_plain_hdf5_with_compact_dataset_dropped(case, tmp_path):
    files = case("h5py_plain")
    report = roundtrip(files, tmp_path, concat_dim="data_dim0", drop=["small"])
    assert report.plan.arrays["data"].shape[0] == 4 + 6 + 5


def test_plain_hdf5_compact_dataset_inlined(case, tmp_path):
    report = roundtrip(case("h5py_plain"), tmp_path, concat_dim="data_dim0", inline=["small"])
    assert report.plan.arrays["small"].inline is not None


@needs("h5repack")
def test_h5repack_gzip(case, tmp_path):
    roundtrip(case("h5repack_gzip"), tmp_path)


def test_dask_chunks_follow_the_rectilinear_grid(case, tmp_path):
    pytest.importorskip("dask")
    files = case("months2024")
    virtualize.virtualize(files, tmp_path / "cube.zarr")
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize", chunks={})
    assert ds.tas.chunks[0] == (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
    eager = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize")
    xr.testing.assert_identical(ds.compute(), eager.compute())
