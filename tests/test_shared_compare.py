"""Every variable off the concatenation axis is compared across all files, whatever the
scan recorded of it (values or per-block digests): identical files give one copy and no
note, a difference is `differs-between-files` at the file, the variable and the first
differing index (values) or block (digests). And a coordinate's order is checked only
where files are ordered or joined by it."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import netCDF4
import numpy as np
import pytest
import xarray as xr

import virtualize
from virtualize.formats import _planning

from helpers import scaled_month

FORMATS = ["NETCDF4", "NETCDF3_CLASSIC"]
LAT, LON = 4, 5


def month(path, m: int, fmt: str = "NETCDF4", change: str | None = None) -> str:
    """One monthly file: 3 steps of `tas(time, lat, lon)` and every kind of variable the
    stack shares: bounds (`lat_bnds`, `lon_bnds`), 1-D coordinates off the axis (`lat`,
    `lon`), a 2-D static field (`orog`, chunked (2, 5) in netCDF-4), a scalar (`height`), a
    grid mapping (`crs`). `change`: one value of one of them changed in this file."""
    nc4 = fmt == "NETCDF4"
    with netCDF4.Dataset(path, "w", format=fmt) as d:
        d.createDimension("time", None)
        d.createDimension("lat", LAT)
        d.createDimension("lon", LON)
        d.createDimension("nv", 2)
        t = d.createVariable("time", "f8", ("time",))
        t.units, t.bounds = "days since 2024-01-01", "time_bnds"
        t[:] = np.arange(3) + 3 * m
        d.createVariable("time_bnds", "f8", ("time", "nv"))[:] = \
            np.stack([t[:], t[:] + 1], axis=1)
        lat = d.createVariable("lat", "f4", ("lat",))
        lat.bounds = "lat_bnds"
        lat[:] = np.arange(LAT, dtype="f4") * 10
        lon = d.createVariable("lon", "f4", ("lon",))
        lon.bounds = "lon_bnds"
        lon[:] = np.arange(LON, dtype="f4") * 10
        lat_bnds = np.stack([lat[:] - 5, lat[:] + 5], axis=1)
        lon_bnds = np.stack([lon[:] - 5, lon[:] + 5], axis=1)
        orog = np.arange(LAT * LON, dtype="f4").reshape(LAT, LON)
        height, crs = 2.0, 0
        if change == "lat_bnds":
            lat_bnds[0, 0] = -6
        elif change == "lat":
            lat[1] = 11
        elif change == "orog":
            orog[2, 3] = -1
        elif change == "height":
            height = 10.0
        elif change == "crs":
            crs = 1
        d.createVariable("lat_bnds", "f4", ("lat", "nv"))[:] = lat_bnds
        d.createVariable("lon_bnds", "f4", ("lon", "nv"))[:] = lon_bnds
        kw = {"chunksizes": (2, LON)} if nc4 else {}
        o = d.createVariable("orog", "f4", ("lat", "lon"), **kw)
        o.grid_mapping = "crs"
        o[:] = orog
        d.createVariable("height", "f8", ())[...] = height
        c = d.createVariable("crs", "i4", ())
        c.grid_mapping_name = "latitude_longitude"
        c.semi_major_axis = 6371000.0 if change != "crs_attr" else 6378137.0
        c[...] = crs
        v = d.createVariable("tas", "f4", ("time", "lat", "lon"))
        v.grid_mapping = "crs"
        v[:] = np.arange(3 * LAT * LON, dtype="f4").reshape(3, LAT, LON) + 100 * m
    return str(path)


def stack(tmp_path, fmt, change=None, n=3, bad=1) -> list[str]:
    return [month(tmp_path / f"m{m:02d}.nc", m, fmt, change if m == bad else None)
            for m in range(n)]


def refused(report, kind="differs-between-files"):
    return [(p.kind, p.loc.file, p.loc.variable, p.loc.block) for p in report.problems
            if p.fatal and p.kind == kind]


def assert_no_compare_note(report):
    for n in report.notes:
        assert "not compared" not in n and "from the first file" not in n, n


# -- identical files: one copy, no note ----------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_identical_shared_variables_give_one_copy_and_no_note(tmp_path, fmt):
    files = stack(tmp_path, fmt)
    r = virtualize.check(files, scan_timeout=0)
    assert r.ok, r.problems
    assert r.notes == [] and r.problems == []
    for name in ("lat_bnds", "lon_bnds", "orog", "height", "crs", "lat"):
        assert "time" not in r.plan.arrays[name].dims
    out = tmp_path / "cube.zarr"
    virtualize.virtualize(files, out, scan_timeout=0)
    ds = xr.open_dataset(out, engine="virtualize", decode_times=False)
    with netCDF4.Dataset(files[0]) as d:
        for name in ("lat_bnds", "lon_bnds", "orog", "height", "crs", "lat"):
            np.testing.assert_array_equal(ds[name].values, d[name][...].data)
    assert ds["tas"].shape == (9, LAT, LON)


# -- one value changed in one file: refused, located ---------------------------------------

# (variable changed, the index (values held) or block (digests) named)
CHANGES = {
    "lat_bnds": ((0, 0), "index (0, 0)"),
    "lat": ((1,), "index (1,)"),
    # (small scalars: by the value the scan records, formats/_planning.py)
    "height": (None, "its value is 10.0 here and 2.0 in"),
    "crs": (None, "its value is"),
}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", ["lat_bnds", "lat", "orog", "height", "crs", "crs_attr"])
def test_one_changed_value_of_a_shared_variable_is_refused_at_it(tmp_path, fmt, name):
    files = stack(tmp_path, fmt, change=name)
    r = virtualize.check(files, scan_timeout=0)
    assert not r.ok
    assert_no_compare_note(r)
    var = "crs" if name == "crs_attr" else name
    (p,) = [p for p in r.problems if p.fatal]
    assert (p.kind, p.loc.file, p.loc.variable) == ("differs-between-files", files[1], var)
    assert files[0] in p.message
    if name == "orog":  # its digests: the block holding [2, 3]
        block = (1, 0) if fmt == "NETCDF4" else (0, 0)
        assert p.loc.block == block
        assert f"first in block {block}" in p.message
    elif name == "crs_attr":
        assert "attribute 'semi_major_axis'" in p.message
    else:
        block, text = CHANGES[name]
        assert text in p.message
        if block is not None:
            assert p.loc.block == (0,) * len(block)  # the chunk holding that index
    with pytest.raises(virtualize.VirtualizeError):
        virtualize.virtualize(files, tmp_path / "cube.zarr", scan_timeout=0)
    assert not (tmp_path / "cube.zarr").exists()


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_differing_file_is_named(tmp_path, fmt):
    files = [month(tmp_path / f"m{m}.nc", m, fmt, "orog" if m else None) for m in range(3)]
    r = virtualize.check(files, scan_timeout=0)
    assert [p[1] for p in refused(r)] == files[1:]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_variable_over_the_digest_limit_is_still_compared(tmp_path, fmt, monkeypatch):
    """DIGEST_LIMIT bounds only what is decoded to be digested: stored bytes are digested
    whatever their size (scanned in this process, so that the patch holds)."""
    monkeypatch.setattr(_planning, "DIGEST_LIMIT", 1)
    files = stack(tmp_path, fmt, change="orog")
    invs = [virtualize.inventory(f) for f in files]
    assert all(inv.variables["orog"].block_digests is not None for inv in invs)
    r = virtualize.check(files, scan_timeout=0)
    (p,) = [p for p in r.problems if p.fatal]
    assert (p.kind, p.loc.file, p.loc.variable) == ("differs-between-files", files[1], "orog")
    assert p.loc.block == ((1, 0) if fmt == "NETCDF4" else (0, 0))


def test_held_by_value_over_the_digest_limit_is_refused_not_taken(tmp_path, monkeypatch):
    """A variable whose digests cannot be made (chunks held by value, more than
    DIGEST_LIMIT decoded bytes) is refused, located, with --drop as the way through."""
    from virtualize.model import MATERIALIZED
    from virtualize.plan import plan_concat

    files = stack(tmp_path, "NETCDF4")
    invs = [virtualize.inventory(f) for f in files]
    v = invs[1].variables["orog"]
    v.digest = v.block_digests = None  # as the scan leaves it past the limit
    v.blocks.refs["path"][0, 0] = MATERIALIZED
    _plan, problems = plan_concat(invs)
    (p,) = [p for p in problems if p.fatal]
    assert (p.kind, p.loc.file, p.loc.variable, p.remedy) == \
        ("not-comparable", files[1], "orog", "--drop orog")
    assert "held by value" in p.message


# -- a --concat-dim other than the record dimension ------------------------------------------

def along_x(path, i: int, fmt: str, change: str | None = None) -> str:
    """Files split along `x`, every one with the same unlimited `time`: `time` and `w(time)`
    are off the concatenation axis."""
    with netCDF4.Dataset(path, "w", format=fmt) as d:
        d.createDimension("time", None)
        d.createDimension("x", 4)
        t = d.createVariable("time", "f8", ("time",))
        t.units = "days since 2024-01-01"
        t[:] = [0.0, 1.0, 2.0] if change != "time" else [0.0, 1.5, 2.0]
        x = d.createVariable("x", "f8", ("x",))
        x[:] = np.arange(4) + 4 * i
        w = np.array([1.0, 2.0, 3.0], "f4")
        if change == "w":
            w[2] = 7.0
        d.createVariable("w", "f4", ("time",))[:] = w
        d.createVariable("v", "f4", ("time", "x"))[:] = np.arange(12, dtype="f4").reshape(3, 4) + i
    return str(path)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("change", ["w", "time", None])
def test_concat_dim_other_than_the_record_dimension(tmp_path, fmt, change):
    files = [along_x(tmp_path / f"p{i}.nc", i, fmt, change if i == 2 else None) for i in range(3)]
    # (scanned by the worker processes: the concat dim travels with the scan's settings)
    r = virtualize.check(files, "x")
    assert_no_compare_note(r)
    if change is None:
        assert r.ok, r.problems
        out = tmp_path / "cube.zarr"
        virtualize.virtualize(files, out, "x", scan_timeout=0)
        g = virtualize.open(out)
        assert g["v"].shape == (3, 12)
        np.testing.assert_array_equal(g["w"][...], [1.0, 2.0, 3.0])
        return
    (p,) = [p for p in r.problems if p.fatal]
    assert (p.kind, p.loc.file, p.loc.variable) == ("differs-between-files", files[2], change)
    # w: by its digests (its block); time, a coordinate: by its values (the index)
    # (a classic file's record variable: one block a record)
    block = "(0,)" if fmt == "NETCDF4" else "(2,)"
    assert (f"first in block {block}" if change == "w" else "index (1,)") in p.message


def test_inventories_scanned_for_another_dim_are_refused_not_taken(tmp_path):
    """Planned along `x` from inventories scanned for the default (time): `w` has no
    digests; it is refused (`not-comparable`), never taken from the first file."""
    from virtualize.plan import ConcatOptions, plan_concat

    files = [along_x(tmp_path / f"p{i}.nc", i, "NETCDF4") for i in range(2)]
    invs = [virtualize.inventory(f) for f in files]
    _plan, problems = plan_concat(invs, ConcatOptions(concat_dim="x"))
    assert [(p.kind, p.loc.variable) for p in problems if p.fatal] == [("not-comparable", "w")]


# -- a TIFF stack along a new axis, a mosaic -----------------------------------------------

def test_tiff_stack_along_a_new_axis_compares_its_georeferencing(tmp_path):
    tifffile = pytest.importorskip("tifffile")
    import make_tiff as mt

    files = []
    for i in range(3):
        ul = (500000.0, 5800000.0) if i != 1 else (500030.0, 5800000.0)
        f = tmp_path / f"2024-01-0{i + 1}.tif"
        tifffile.imwrite(f, np.full((8, 8), i, "u2"), extratags=mt.geotags(32633, ul, 30.0))
        files.append(str(f))
    r = virtualize.check(files, "time", scan_timeout=0)
    assert_no_compare_note(r)
    assert sorted((p.kind, p.loc.file, p.loc.variable) for p in r.problems if p.fatal) == \
        [("differs-between-files", files[1], "spatial_ref"),  # its GeoTransform attribute
         ("differs-between-files", files[1], "x")]
    (p,) = [p for p in r.problems if p.loc.variable == "x"]
    assert "first at index (0,) (500045.0 here, 500015.0 there)" in p.message
    files[1] = str(tmp_path / "2024-01-02.tif")
    tifffile.imwrite(files[1], np.full((8, 8), 1, "u2"),
                     extratags=mt.geotags(32633, (500000.0, 5800000.0), 30.0))
    r = virtualize.check(files, "time", scan_timeout=0)
    assert r.ok, r.problems
    assert_no_compare_note(r)


def test_mosaic_tiles_grid_mapping_is_compared(tmp_path):
    """A mosaic takes the grid mapping from the first tile: each tile's must hold the
    same value."""
    def tile(path, x0, crs):
        with netCDF4.Dataset(path, "w") as d:
            d.createDimension("lat", 4)
            d.createDimension("lon", 4)
            d.createVariable("lat", "f8", ("lat",))[:] = 35.0 - np.arange(4) * 10
            d.createVariable("lon", "f8", ("lon",))[:] = x0 + 5 + np.arange(4) * 10
            c = d.createVariable("crs", "i4", ())
            c.grid_mapping_name = "latitude_longitude"
            c[...] = crs
            v = d.createVariable("v", "f4", ("lat", "lon"))
            v.grid_mapping = "crs"
            v[:] = np.ones((4, 4), "f4")
        return str(path)

    files = [tile(tmp_path / "a.nc", 0.0, 0), tile(tmp_path / "b.nc", 40.0, 0)]
    r = virtualize.check_mosaic(files, scan_timeout=0)
    assert r.ok, r.problems
    files[1] = tile(tmp_path / "c.nc", 40.0, 5)
    r = virtualize.check_mosaic(files, scan_timeout=0)
    (p,) = [p for p in r.problems if p.fatal]
    assert (p.kind, p.loc.file, p.loc.variable) == ("differs-between-files", files[1], "crs")


# -- append: the new files against what the cube recorded ----------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", ["lat_bnds", "orog", "height"])
def test_append_of_a_file_with_a_different_shared_variable_is_refused(tmp_path, fmt, name):
    files = stack(tmp_path, fmt, n=2)
    cube = tmp_path / "cube.zarr"
    virtualize.virtualize(files, cube, scan_timeout=0)
    bad = month(tmp_path / "m02.nc", 2, fmt, name)
    with pytest.raises(virtualize.VirtualizeError) as e:
        virtualize.append(cube, [bad], scan_timeout=0)
    (p,) = [p for p in e.value.problems if p.fatal]
    assert (p.kind, p.loc.file, p.loc.variable) == ("differs-between-files", bad, name)
    where = {"lat_bnds": "index (0, 0)", "orog": "first in block",
             "height": "its value is 10.0 here and 2.0"}
    assert where[name] in p.message
    (tmp_path / "ok").mkdir()
    good = month(tmp_path / "ok" / "m02.nc", 2, fmt)
    virtualize.append(cube, [good], scan_timeout=0)
    ds = xr.open_dataset(cube, engine="virtualize", decode_times=False)
    assert ds["tas"].shape == (9, LAT, LON)


# -- nothing in the code says "not compared" ------------------------------------------------

def test_no_not_compared_note_in_the_code():
    src = pathlib.Path(virtualize.__file__).parent
    hits = [str(p) for p in src.rglob("*.py") if "not compared" in p.read_text()]
    assert hits == []


# -- a coordinate's order: checked only where files are ordered or joined by it ------------

def nc_times(path, times, fmt="NETCDF4") -> str:
    with netCDF4.Dataset(path, "w", format=fmt) as d:
        d.createDimension("time", None)
        d.createDimension("x", 2)
        t = d.createVariable("time", "f8", ("time",))
        t.units = "days since 2024-01-01"
        t[:] = times
        d.createVariable("v", "f4", ("time", "x"))[:] = \
            np.arange(2 * len(times), dtype="f4").reshape(-1, 2)
    return str(path)


@pytest.mark.parametrize("fmt", FORMATS)
def test_one_file_with_time_out_of_order_is_the_file(tmp_path, fmt):
    f = nc_times(tmp_path / "a.nc", [0.0, 2.0, 1.0, 3.0], fmt)
    r = virtualize.check([f], scan_timeout=0)
    assert r.ok, r.problems
    out = tmp_path / "a.zarr"
    virtualize.virtualize([f], out, scan_timeout=0)
    g = virtualize.open(out)
    with netCDF4.Dataset(f) as d:
        np.testing.assert_array_equal(g["time"][...], d["time"][:])
        np.testing.assert_array_equal(g["v"][...], d["v"][:])


@pytest.mark.parametrize("fmt", FORMATS)
def test_time_out_of_order_in_a_stack_is_refused_at_the_index(tmp_path, fmt):
    a = nc_times(tmp_path / "a.nc", [0.0, 2.0, 1.0, 3.0], fmt)
    b = nc_times(tmp_path / "b.nc", [4.0, 5.0], fmt)
    r = virtualize.check([a, b], scan_timeout=0)
    (p,) = [p for p in r.problems if p.kind == "coordinate-not-increasing"]
    assert (p.loc.file, p.loc.variable, p.loc.axis) == (os.path.abspath(a), "time", "time")
    assert "index 2 (1.0) is not after index 1 (2.0)" in p.message


@pytest.mark.parametrize("fmt", FORMATS)
def test_coordinate_off_the_axis_need_not_increase(tmp_path, fmt):
    """Files joined along `x` with the same decreasing `time`: fine (they are not
    ordered by it); the cube holds it as each file does."""
    def f(path, i):
        with netCDF4.Dataset(path, "w", format=fmt) as d:
            d.createDimension("time", None)
            d.createDimension("x", 2)
            d.createVariable("time", "f8", ("time",))[:] = [3.0, 1.0, 2.0]
            d.createVariable("x", "f8", ("x",))[:] = [2.0 * i, 2.0 * i + 1]
            d.createVariable("v", "f4", ("time", "x"))[:] = np.ones((3, 2), "f4") * i
        return str(path)

    files = [f(tmp_path / f"p{i}.nc", i) for i in range(2)]
    r = virtualize.check(files, "x", scan_timeout=0)
    assert r.ok, r.problems
    out = tmp_path / "c.zarr"
    virtualize.virtualize(files, out, "x", scan_timeout=0)
    np.testing.assert_array_equal(virtualize.open(out)["time"][...], [3.0, 1.0, 2.0])


def test_cli_check_names_the_differing_file(tmp_path):
    files = stack(tmp_path, "NETCDF4", change="lat_bnds")
    exe = os.path.join(os.path.dirname(sys.executable), "virtualize")
    out = subprocess.run([exe, "check", *files], capture_output=True, text=True)
    assert out.returncode == 1
    assert "differs-between-files" in out.stdout + out.stderr
    assert files[1] in out.stdout + out.stderr


def test_one_file_is_not_digested_and_its_cube_still_compares_on_append(tmp_path, monkeypatch):
    """A single file is compared with nothing: its shared variables are not read for
    digests. Appending to its cube, which recorded none, rebuilds it (both files
    scanned), so a differing file is still refused, and an agreeing one goes in."""
    from virtualize.formats import _io

    digested = []
    real = _io.digest_blocks
    monkeypatch.setattr(_io, "digest_blocks", lambda paths, refs, **kw: digested.append(1) or
                        real(paths, refs, **kw))
    first = month(tmp_path / "m00.nc", 0)
    cube = tmp_path / "cube.zarr"
    virtualize.virtualize([first], cube, scan_timeout=0)
    assert digested == []
    (tmp_path / "bad").mkdir()
    bad = month(tmp_path / "bad" / "m01.nc", 1, change="orog")
    with pytest.raises(virtualize.VirtualizeError) as e:
        virtualize.append(cube, [bad], scan_timeout=0)
    assert [(p.kind, p.loc.file, p.loc.variable) for p in e.value.problems if p.fatal] == \
        [("differs-between-files", bad, "orog")]
    good = month(tmp_path / "m01.nc", 1)
    assert virtualize.append(cube, [good], scan_timeout=0).ok
    assert virtualize.open(cube)["tas"].shape == (6, LAT, LON)
    # now the cube's last file has digests: the next append scans only the new file
    digested.clear()
    bad2 = month(tmp_path / "bad" / "m02.nc", 2, change="orog")
    with pytest.raises(virtualize.VirtualizeError) as e:
        virtualize.append(cube, [bad2], scan_timeout=0)
    assert [(p.kind, p.loc.file, p.loc.variable) for p in e.value.problems if p.fatal] == \
        [("differs-between-files", bad2, "orog")]
    # lat, lon, their bounds, orog, height, crs: of the new file alone
    assert len(digested) == 7


# Found by #20's review (smaller, not bit-exact): shared variables compared by recorded values use
# numeric equality, so 0.0 in one file and -0.0 in another are "the same" and the cube
# serves the first file's bits; the digest path (a variable without recorded values)
# refuses exactly this change ("its stored bytes differ"). One rule should decide.
def test_shared_values_compare_bitwise(tmp_path):
    files = []
    for m in range(2):
        f = scaled_month(tmp_path / f"m{m}.nc", m)
        with netCDF4.Dataset(f, "a") as ds:
            ds["lat"].bounds = "lat_bnds"
            ds.createDimension("bnds", 2)
            b = ds.createVariable("lat_bnds", "f8", ("lat", "bnds"))
            v = np.stack([np.arange(4) * 10.0 - 5, np.arange(4) * 10.0 + 5], 1)
            v[0, 0] = -0.0 if m == 1 else 0.0
            b[:] = v
        files.append(f)
    r = virtualize.check(files)
    assert not r.ok and "lat_bnds" in {p.loc.variable for p in r.problems}, r.verdict


# Found by #20's review: the same rule for NaN: equal only with the same bits.
def test_first_difference_is_bitwise():
    from virtualize.plan._common import first_difference
    nan1 = np.array([1.0, np.nan])
    nan2 = nan1.copy()
    nan2.view("u8")[1] ^= 1  # another NaN payload
    assert np.isnan(nan2[1])
    assert first_difference(nan1, nan1.copy()) is None
    assert first_difference(nan1, nan2) == (1,)
    assert first_difference(np.array(0.0), np.array(-0.0)) == ()
    assert first_difference(np.array([1, 2], "i4"), np.array([1, 2], "i4")) is None
