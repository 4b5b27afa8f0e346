"""netCDF classic stacks (CDF-1, CDF-2, CDF-5, and mixed) become cubes that read back
bit-identically: through virtualize.open, the kerchunk export via fsspec + zarr, and xarray,
against netCDF4-python's reads of the files; broken files are located problems and nothing
is written."""

from __future__ import annotations

import json
import os
import shutil

import netCDF4
import numpy as np
import pytest
import xarray as xr
from test_roundtrip_hdf5 import roundtrip

import virtualize
from virtualize.formats.netcdf3 import parse_header
from virtualize.model import VirtualizeError

import make_fixtures as mf
from conftest import needs
from helpers import assert_same, kerchunk_xarray, source_values

MONTHS_2024 = [31, 29, 31]
BIG = {"name": "bytes", "configuration": {"endian": "big"}}
ONE_BYTE = {"name": "bytes", "configuration": {}}
RECORD_STACKS = {
    "nc3_months_classic": ["netcdf3-cdf1"] * 3,
    "nc3_months_offset64": ["netcdf3-cdf2"] * 3,
    "nc3_months_data64": ["netcdf3-cdf5"] * 3,
    "nc3_mixed": ["netcdf3-cdf1", "netcdf3-cdf2", "netcdf3-cdf5"],
}
# bytes of one record of each record variable of the nc3_months_* files, and its padding
RECORD_BYTES = {"time": 8, "tas": 3 * 4 * 4, "count": 3 * 4 * 2, "qc": 3}


def array_doc(cube, name: str) -> dict:
    return json.loads((cube / name / "zarr.json").read_text())


def header(path):
    with open(path, "rb") as f:
        return parse_header(f, str(path), os.path.getsize(path))


def decoded_sources(files) -> xr.Dataset:
    """What xarray makes of the stack itself: concat along time; variables without time
    (orog) must be equal in every file."""
    return xr.concat([xr.open_dataset(f, engine="netcdf4") for f in files], dim="time",
                     data_vars="minimal", coords="minimal", compat="equals")


def assert_decodes_like_netcdf4(files, tmp_path):
    cube, refs = tmp_path / "decoded.zarr", tmp_path / "decoded.json"
    virtualize.virtualize(files, cube)
    virtualize.virtualize(files, refs)
    src = decoded_sources(files)
    ds = xr.open_dataset(cube, engine="virtualize")
    xr.testing.assert_identical(ds, src)
    xr.testing.assert_identical(kerchunk_xarray(refs), src)
    return ds


def rewrite(src, dst, fmt: str, *, records: int | None = None,
            dtypes: dict[str, str] | None = None):
    """Copy a classic file with netCDF4 into `fmt`, keeping only `records` records and
    giving variables other types."""
    dtypes = dtypes or {}
    with netCDF4.Dataset(src) as s, netCDF4.Dataset(dst, "w", format=fmt) as d:
        s.set_auto_maskandscale(False)
        d.setncatts({k: s.getncattr(k) for k in s.ncattrs()})
        for n, dim in s.dimensions.items():
            d.createDimension(n, None if dim.isunlimited() else len(dim))
        for n, v in s.variables.items():
            attrs = {k: v.getncattr(k) for k in v.ncattrs()}
            fill = attrs.pop("_FillValue", None)
            nv = d.createVariable(n, dtypes.get(n, v.dtype), v.dimensions, fill_value=fill)
            nv.set_auto_maskandscale(False)
            nv.setncatts(attrs)
            data = v[...]
            if records is not None and v.dimensions[:1] == ("time",):
                data = data[:records]
            nv[...] = data
    return dst


def copies(files, d) -> list:
    d.mkdir()
    return [str(shutil.copy(f, d / os.path.basename(f))) for f in files]


def assert_nothing_written(files, tmp_path):
    for out in ("cube.zarr", "cube.json"):
        with pytest.raises(VirtualizeError) as e:
            virtualize.virtualize(files, tmp_path / out)
        assert not (tmp_path / out).exists()
        assert "nothing was written" in str(e.value)
    return e.value


# -- stacks that virtualize -----------------------------------------------------------------

@pytest.mark.parametrize("name", RECORD_STACKS)
def test_record_stacks_one_chunk_per_record(case, tmp_path, name):
    files = case(name)
    assert [virtualize.inventory(f).format for f in files] == RECORD_STACKS[name]
    report = roundtrip(files, tmp_path)
    assert report.ok and report.problems == [] and report.plan.concat_dim == "time"
    cube = tmp_path / "cube.zarr"
    plan = report.plan
    assert [s.path for s in plan.sources] == [str(f) for f in files]
    # records are interleaved: every record of every record variable is its own chunk
    for var, shape, chunk, codec in [("tas", (91, 3, 4), [1, 3, 4], BIG),
                                     ("count", (91, 3, 4), [1, 3, 4], BIG),
                                     ("qc", (91, 3), [1, 3], ONE_BYTE)]:
        doc = array_doc(cube, var)
        assert doc["shape"] == list(shape)
        assert doc["chunk_grid"] == {"name": "regular", "configuration": {"chunk_shape": chunk}}
        assert doc["codecs"] == [codec]
    assert array_doc(cube, "orog")["codecs"] == [BIG]
    assert array_doc(cube, "orog")["chunk_grid"]["configuration"]["chunk_shape"] == [3, 4]
    assert plan.arrays["time"].inline is not None and plan.arrays["time"].shape == (91,)
    # every chunk is exactly one record's bytes, `recsize` apart, in its own file
    start = 0
    for i, (f, n) in enumerate(zip(files, MONTHS_2024)):
        h = header(f)
        assert h.recsize == 8 + 48 + 24 + 4  # qc's 3 bytes are padded to 4 in a record
        begins = {v.name: v.begin for v in h.variables}
        for var in ("tas", "count", "qc"):
            refs = plan.arrays[var].refs.reshape(-1)[start:start + n]
            assert (refs["path"] == i).all()
            assert refs["offset"].tolist() == [begins[var] + r * h.recsize for r in range(n)]
            assert (refs["length"] == RECORD_BYTES[var]).all()
        start += n
    orog = plan.arrays["orog"].refs.reshape(-1)
    assert orog["path"].tolist() == [0] and orog["length"].tolist() == [48]


@pytest.mark.parametrize("name", RECORD_STACKS)
def test_record_stacks_decode_like_netcdf4(case, tmp_path, name):
    files = case(name)
    ds = assert_decodes_like_netcdf4(files, tmp_path)
    assert ds.time.dt.month.values.tolist() == [1] * 31 + [2] * 29 + [3] * 31
    assert ds.tas.dtype == np.float32 and ds["count"].dtype == np.int16
    assert "time" not in ds.orog.dims


def test_one_record_variable_is_one_chunk_per_file(case, tmp_path):
    files = case("nc3_one_record_var")
    report = roundtrip(files, tmp_path)
    assert report.ok and report.problems == [] and report.plan.concat_dim == "time"
    doc = array_doc(tmp_path / "cube.zarr", "tas")
    assert doc["chunk_grid"] == {"name": "rectilinear", "configuration": {
        "kind": "inline", "chunk_shapes": [MONTHS_2024, [3], [4]]}}
    assert doc["codecs"] == [BIG]
    refs = report.plan.arrays["tas"].refs.reshape(-1)
    for i, (f, n) in enumerate(zip(files, MONTHS_2024)):
        h = header(f)
        assert h.lone_record_var and h.recsize == 48
        (tas,) = [v for v in h.variables if v.name == "tas"]
        assert refs[i].tolist() == (i, tas.begin, n * 48)
    assert_decodes_like_netcdf4(files, tmp_path)


def test_cdf5_unsigned_and_64_bit_types(case, tmp_path):
    files = case("nc3_cdf5_types")
    report = roundtrip(files, tmp_path)
    assert report.ok and report.problems == []
    cube = tmp_path / "cube.zarr"
    expected = {"uint8": ("uint8", [1, 3], ONE_BYTE), "uint16": ("uint16", [1, 3], BIG),
                "uint32": ("uint32", [1, 3, 4], BIG), "int64": ("int64", [1, 3, 4], BIG),
                "uint64": ("uint64", [1, 3, 4], BIG)}
    for name, (dtype, chunk, codec) in expected.items():
        doc = array_doc(cube, name)
        assert doc["data_type"] == dtype and doc["shape"][0] == 5
        assert doc["chunk_grid"]["configuration"]["chunk_shape"] == chunk
        assert doc["codecs"] == [codec]
    g = virtualize.open(cube)
    assert int(g["uint64"][...].min()) >= 2**63  # beyond int64: read as unsigned
    assert int(g["uint32"][...].min()) >= 3_000_000_000
    assert_decodes_like_netcdf4(files, tmp_path)


@needs("ncgen")
def test_ncgen_stack(case, tmp_path):
    files = case("nc3_ncgen")
    assert [virtualize.inventory(f).format for f in files] == ["netcdf3-cdf2"] * 2
    report = roundtrip(files, tmp_path)
    assert report.ok and report.problems == []
    assert report.plan.arrays["tas"].shape == (60, 3, 4)
    assert array_doc(tmp_path / "cube.zarr", "count")["chunk_grid"]["configuration"][
        "chunk_shape"] == [1, 3, 4]
    assert_decodes_like_netcdf4(files, tmp_path)


@pytest.mark.parametrize("name", ["nc3_months_classic", "nc3_months_data64"])
def test_streaming_numrecs_counts_records_from_the_size(case, tmp_path, name):
    """numrecs = STREAMING (all bits set): the records are counted from the file size."""
    originals = case(name)
    files = copies(originals, tmp_path / "src")
    width = 8 if name.endswith("data64") else 4
    with open(files[1], "r+b") as f:
        f.seek(4)
        assert int.from_bytes(f.read(width), "big") == 29
        f.seek(4)
        f.write(b"\xff" * width)
    report = virtualize.virtualize(files, tmp_path / "cube.zarr")
    assert report.ok and report.problems == []
    g = virtualize.open(tmp_path / "cube.zarr")
    for name_, array in report.plan.arrays.items():
        expected = source_values(originals, name_, "time", array.dims)
        assert_same(g[name_][...], expected, name_)
    assert g["tas"].shape == (91, 3, 4)


# -- a file with no records ------------------------------------------------------------------

def test_zero_record_file_adds_nothing(case, tmp_path):
    jan, feb, mar = case("nc3_months_offset64")
    empty = rewrite(feb, tmp_path / "empty.nc", "NETCDF3_64BIT_OFFSET", records=0)
    assert header(empty).numrecs == 0
    files = [feb, empty, jan, mar]
    report = virtualize.check(files)
    assert report.ok
    assert [(p.kind, p.fatal, p.loc.file, p.loc.variable, p.loc.axis)
            for p in report.problems] == [("no-steps", False, str(empty), "time", "time")]
    # the files with records are sorted around the empty one, which keeps its place
    assert [s.path for s in report.plan.sources] == [str(jan), str(empty), str(feb), str(mar)]
    out = tmp_path / "out"
    out.mkdir()
    roundtrip(files, out)
    assert virtualize.open(out / "cube.zarr")["tas"].shape == (91, 3, 4)
    ds = xr.open_dataset(out / "cube.zarr", engine="virtualize")
    xr.testing.assert_identical(ds, decoded_sources([jan, empty, feb, mar]))


def test_zero_record_file_does_not_switch_off_the_time_checks(case, tmp_path):
    jan, feb, mar = case("nc3_months_classic")
    empty = rewrite(feb, tmp_path / "empty.nc", "NETCDF3_CLASSIC", records=0)
    report = virtualize.check([feb, empty, jan, mar], sort=False)
    bad = [p for p in report.problems if p.fatal]
    assert [(p.kind, p.loc.file) for p in bad] == [("coordinate-not-increasing", str(jan))]
    report = virtualize.check([jan, empty, jan])
    assert [(p.kind, p.loc.file) for p in report.problems if p.fatal] == [
        ("duplicate-coordinate", str(jan))]
    assert not report.ok


# -- stacks that are refused -----------------------------------------------------------------

def test_mixed_flavours_whose_types_disagree_are_refused(case, tmp_path):
    jan, feb, mar = case("nc3_mixed")
    src = tmp_path / "src"
    src.mkdir()
    mar = rewrite(mar, src / "tas_day_202403_data64.nc", "NETCDF3_64BIT_DATA",
                  dtypes={"count": "i4"})
    files = [jan, feb, mar]
    report = virtualize.check(files)
    # int's default fill (-2147483647) is not short's (-32767) either
    assert [(p.kind, p.loc.file, p.loc.variable) for p in report.problems] == [
        ("dtype-differs", str(mar), "count"), ("fill-value-differs", str(mar), "count")]
    assert ">i4" in report.problems[0].message and ">i2" in report.problems[0].message
    out = tmp_path / "out"
    out.mkdir()
    assert_nothing_written(files, out)
    assert list(out.iterdir()) == []


def test_truncated_records_are_located(case, tmp_path):
    files = copies(case("nc3_months_offset64"), tmp_path / "src")
    size = os.path.getsize(files[1])
    with open(files[1], "r+b") as f:
        f.truncate(size - 100)  # the last two records (84 bytes each) lose their end
    report = virtualize.check(files)
    assert not report.ok
    assert sorted((p.kind, p.loc.file, p.loc.variable) for p in report.problems) == [
        ("truncated", files[1], v) for v in ("count", "qc", "tas", "time")]
    for p in report.problems:
        assert p.fatal and f"the file has only {size - 100} bytes" in p.message
    out = tmp_path / "out"
    out.mkdir()
    err = assert_nothing_written(files, out)
    assert {p.kind for p in err.problems} == {"truncated"}
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("index", [0, 1])
def test_file_cut_after_its_header_has_every_variable_truncated(case, tmp_path, index):
    """Zero records left where the header promises a month: every variable of that file is
    truncated, and the fixed ones are not also reported as differing from other files."""
    files = copies(case("nc3_months_classic"), tmp_path / "src")
    h = header(files[index])
    with open(files[index], "r+b") as f:
        f.truncate(h.header_len)
    report = virtualize.check(files)
    assert not report.ok
    assert sorted((p.kind, p.loc.file, p.loc.variable) for p in report.problems) == [
        ("truncated", files[index], v)
        for v in sorted(["time", "lat", "lon", "tas", "count", "qc", "orog"])]
    out = tmp_path / "out"
    out.mkdir()
    assert_nothing_written(files, out)
    assert list(out.iterdir()) == []


def test_truncated_header_and_empty_file_are_located(case, tmp_path):
    files = copies(case("nc3_months_data64"), tmp_path / "src")
    with open(files[1], "r+b") as f:
        f.truncate(40)
    empty = tmp_path / "src" / "zero_bytes.nc"
    empty.write_bytes(b"")
    stack = [*files, str(empty)]
    report = virtualize.check(stack)
    assert not report.ok
    fatal = [p for p in report.problems if p.fatal]  # (and a note: the month it leaves out)
    assert [(p.kind, p.loc.file) for p in fatal] == [
        ("corrupt", files[1]), ("unknown-format", str(empty))]
    assert "byte offset" in fatal[0].message
    assert "40" in fatal[0].message
    assert [p.kind for p in report.problems if not p.fatal] == ["coordinate-gap"]
    assert sorted(report.bytes_read) == sorted([files[0], files[2]])  # the others were scanned
    out = tmp_path / "out"
    out.mkdir()
    assert_nothing_written(stack, out)
    assert list(out.iterdir()) == []


def test_many_records_read_through_in_windows(tmp_path):
    """A record coordinate of 20,000 records 72 bytes apart: read through in windows of
    whole records (a few reads), not one read per record; values exact either way."""
    from virtualize.formats.netcdf3 import WINDOW

    n = 20_000
    path = tmp_path / "long.nc"
    with netCDF4.Dataset(path, "w", format="NETCDF3_64BIT_OFFSET") as ds:
        ds.createDimension("time", None)
        ds.createDimension("lat", 4)
        ds.createDimension("lon", 4)
        t = ds.createVariable("time", "f8", ("time",))
        t.units = "hours since 2000-01-01"
        tas = ds.createVariable("tas", "f4", ("time", "lat", "lon"))
        t[:] = np.arange(n) * 0.5 + 3
        tas[:] = mf.pattern(0, n, 4, 4).astype("f4")
    h = header(path)
    assert h.recsize == 72 and n * h.recsize > WINDOW  # more than one window
    inv = virtualize.inventory(path)
    per = WINDOW // h.recsize
    windows = [min(per, n - r0) for r0 in range(0, n, per)]
    assert len(windows) == 2
    assert inv.bytes_read == 8192 + sum((k - 1) * h.recsize + 8 for k in windows)
    expected_time = source_values([path], "time", None, ("time",))
    assert_same(inv.variables["time"].values.astype("=f8"), expected_time, "time values")
    virtualize.virtualize(path, tmp_path / "cube.zarr")
    g = virtualize.open(tmp_path / "cube.zarr")
    assert_same(g["time"][...], expected_time, "time")
    assert_same(g["tas"][per - 3:per + 3], source_values([path], "tas", None, ())[per - 3:per + 3],
                "tas across the window boundary")
