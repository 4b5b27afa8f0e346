"""Monthly files that count time from their own start."""

from __future__ import annotations

import netCDF4
import numpy as np
import xarray as xr

import virtualize


def write_month(path, start: str, ndays: int, calendar="standard", dtype="i4", bounds=False):
    with netCDF4.Dataset(path, "w") as d:
        d.createDimension("time", None)
        d.createDimension("x", 2)
        t = d.createVariable("time", dtype, ("time",))
        t.units = f"days since {start}"
        t.calendar = calendar
        t[:] = np.arange(ndays)
        if bounds:  # CF bounds: no units of their own, counted in time's units
            d.createDimension("nv", 2)
            t.bounds = "time_bnds"
            b = d.createVariable("time_bnds", "f8", ("time", "nv"), chunksizes=(ndays, 2))
            b[:] = np.stack([np.arange(ndays), np.arange(ndays) + 1], axis=1)
        v = d.createVariable("v", "f4", ("time", "x"), chunksizes=(ndays, 2))
        v[:] = np.arange(ndays * 2).reshape(ndays, 2) + 100 * int(start[5:7])


def test_per_file_time_units_are_re_expressed_exactly(tmp_path):
    files = [tmp_path / f"m{m}.nc" for m in (1, 2, 3)]
    for f, start, n in zip(files, ["2024-01-01", "2024-02-01", "2024-03-01"], [31, 29, 31]):
        write_month(f, start, n)
    report = virtualize.virtualize(files, tmp_path / "cube.zarr")
    assert sum("re-expressed" in n for n in report.notes) == 2
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize")
    src = xr.concat([xr.open_dataset(f) for f in files], dim="time")
    xr.testing.assert_equal(ds, src)
    raw = virtualize.open(tmp_path / "cube.zarr")["time"]
    assert raw.attrs["units"] == "days since 2024-01-01"
    assert raw[...].tolist() == list(range(91)) and raw.dtype == np.dtype("int32")


def test_files_given_in_any_order_are_sorted_after_re_expression(tmp_path):
    files = [tmp_path / f"m{m}.nc" for m in (3, 1, 2)]
    for f, start, n in zip(files, ["2024-03-01", "2024-01-01", "2024-02-01"], [31, 31, 29]):
        write_month(f, start, n)
    report = virtualize.virtualize(files, tmp_path / "cube.zarr")
    assert [s.path for s in report.plan.sources] == [str(files[1]), str(files[2]), str(files[0])]
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize")
    assert str(ds.time.values[0])[:10] == "2024-01-01" and ds.time.size == 91
    assert bool((ds.time.diff("time") > np.timedelta64(0, "D")).all())


def test_different_calendars_are_drift(tmp_path):
    files = [tmp_path / "a.nc", tmp_path / "b.nc"]
    write_month(files[0], "2024-01-01", 31)
    write_month(files[1], "2024-02-01", 29, calendar="noleap")
    report = virtualize.check(files)
    assert not report.ok
    assert {p.kind for p in report.problems} >= {"attribute-drift"}


def test_time_bounds_are_re_expressed_with_time(tmp_path):
    """Without this the bounds would be concatenated in each file's own units: February's
    would read as January's days, silently."""
    files = [tmp_path / f"m{m}.nc" for m in (1, 2, 3)]
    for f, start, n in zip(files, ["2024-01-01", "2024-02-01", "2024-03-01"], [31, 29, 31]):
        write_month(f, start, n, bounds=True)
    report = virtualize.virtualize(files, tmp_path / "cube.zarr")
    assert report.plan.arrays["time_bnds"].inline is not None
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize")
    src = xr.concat([xr.open_dataset(f) for f in files], dim="time")
    xr.testing.assert_equal(ds.time_bnds, src.time_bnds)
    raw = virtualize.open(tmp_path / "cube.zarr")["time_bnds"][...]
    assert raw[31].tolist() == [31.0, 32.0] and raw[-1].tolist() == [90.0, 91.0]


def test_concat_axis_need_not_be_the_first(tmp_path):
    """(lat, lon, time) files: chunks concatenate along the last axis."""
    files = []
    for i, n in enumerate([31, 29, 31]):
        path = tmp_path / f"t{i}.nc"
        with netCDF4.Dataset(path, "w") as d:
            d.createDimension("x", 3)
            d.createDimension("time", None)
            t = d.createVariable("time", "i4", ("time",))
            t.units = "days since 2024-01-01"
            t[:] = np.arange(n) + [0, 31, 60][i]
            v = d.createVariable("v", "f4", ("x", "time"), chunksizes=(3, n), zlib=True)
            v[:] = np.arange(3 * n, dtype="f4").reshape(3, n) + 1000 * i
        files.append(path)
    report = virtualize.virtualize(files, tmp_path / "c.zarr")
    assert report.plan.arrays["v"].chunk_lengths[1] == (31, 29, 31)
    ds = xr.open_dataset(tmp_path / "c.zarr", engine="virtualize")
    src = xr.concat([xr.open_dataset(f) for f in files], dim="time")
    xr.testing.assert_equal(ds.v, src.v)


def test_planning_edits_copies_of_the_inventories_it_changes_only(tmp_path):
    """Copy on write (flat memory): re-expressing a file's time leaves the caller's
    inventory as it was; files the planner does not change are not copied."""
    from virtualize.plan import plan_concat

    files = [tmp_path / f"m{m}.nc" for m in (1, 2, 3)]
    for f, start in zip(files, ["2024-01-01", "2024-02-01", "2024-01-01"]):
        write_month(f, start, 2 if start.endswith("02-01") else 1)
    invs = [virtualize.inventory(f) for f in files]
    invs[2].variables["time"].values = np.array([62], dtype="i4")  # (after February)
    before = [(dict(inv.variables), inv.variables["time"].values.copy(),
               inv.variables["time"].attrs["units"]) for inv in invs]
    plan, problems = plan_concat(invs)
    assert not [p for p in problems if p.fatal], problems
    assert plan.arrays["time"].inline.tolist() == [0, 31, 32, 62]
    for inv, (variables, values, units) in zip(invs, before):
        assert inv.variables == variables  # same keys, same Variable objects
        assert inv.variables["time"].values.tolist() == values.tolist()
        assert inv.variables["time"].attrs["units"] == units
    assert invs[1].variables["time"].attrs["units"] == "days since 2024-02-01"
