"""Hypercubes: several concatenation axes, new axes from --coord (plan/coords.py,
plan/hypercube.py): built with netCDF4-python, read back through virtualize, xarray and the
kerchunk export, compared bit for bit with netCDF4-python's reads."""

from __future__ import annotations

import datetime
import json
import os

import make_hypercube as mh
import netCDF4
import numpy as np
import pytest
import xarray as xr

import virtualize
from virtualize.model import UsageError
from virtualize.plan.coords import CoordSpec, coordinate_plan, parse_coord, resolve

from helpers import assert_same, fatal, kerchunk_group, kerchunk_xarray, rectilinear, time_series_file

MEMBERS = ("r1i1p1f1", "r2i1p1f1", "r3i1p1f1")


def _member_year(path, member: str, year: int, realization: int, split_lat: int = 4):
    """A CMIP-like yearly tas file of one member (leap years have 366 days)."""
    days = 366 if year % 4 == 0 else 365
    start = (datetime.date(year, 1, 1) - datetime.date(2015, 1, 1)).days
    with netCDF4.Dataset(path, "w") as nc:
        nc.variant_label = member
        nc.source_id = "TOY"
        nc.createDimension("time", None)
        nc.createDimension("lat", 4)
        nc.createDimension("lon", 5)
        nc.createDimension("bnds", 2)
        t = nc.createVariable("time", "f8", ("time",))
        t.units, t.calendar, t.bounds = "days since 2015-01-01", "standard", "time_bnds"
        t[:] = np.arange(days) + start + 0.5
        b = nc.createVariable("time_bnds", "f8", ("time", "bnds"))
        b[:] = np.stack([np.arange(days) + start, np.arange(days) + start + 1], axis=1)
        lat = nc.createVariable("lat", "f8", ("lat",))
        lat[:] = [-60, -20, 20, 60]
        lon = nc.createVariable("lon", "f8", ("lon",))
        lon[:] = np.arange(5) * 72.0
        r = nc.createVariable("realization", "i4", ())
        r[...] = realization
        tas = nc.createVariable("tas", "f4", ("time", "lat", "lon"), zlib=True,
                                chunksizes=(1, split_lat, 5), fill_value=1e20)
        rng = np.random.default_rng(realization * 10000 + year)
        tas[:] = rng.normal(280, 5, (days, 4, 5)).astype("f4")
    return path


@pytest.fixture
def ensemble(tmp_path):
    files = []
    for i, m in enumerate(MEMBERS, start=1):
        for year in (2015, 2016):
            files.append(str(_member_year(tmp_path / f"tas_day_TOY_ssp585_{m}_gn_{year}.nc",
                                          m, year, i)))
    return files


def _nc(path, name):
    with netCDF4.Dataset(path) as nc:
        v = nc[name]
        v.set_auto_maskandscale(False)
        return np.asarray(v[...])


def _expected_tas(files, members=MEMBERS, years=(2015, 2016)):
    by = {os.path.basename(f): f for f in files}
    return np.stack([np.concatenate([_nc(by[f"tas_day_TOY_ssp585_{m}_gn_{y}.nc"], "tas")
                                     for y in years]) for m in members])


def _bits_equal(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
    assert a.tobytes() == b.tobytes()


# -- plan/coords.py ------------------------------------------------------------------

def test_parse_coord_forms():
    assert parse_coord("attr:variant_label") == CoordSpec("attr", "variant_label")
    assert parse_coord("var:realization") == CoordSpec("var", "realization")
    assert parse_coord(r"name:_(r\d+)i").kind == "name"
    assert parse_coord("1,2,3").values == (1, 2, 3)
    assert parse_coord("0.5,2").values == (0.5, 2.0)
    assert parse_coord("a,b").values == ("a", "b")
    for bad, why in (("attr:", "needs a name"), ("name:(", "not a regular expression"),
                     (r"name:r\d", "no group"), ("foo:x", "unknown form"), ("a,,b", "empty"),
                     ("", "empty")):
        with pytest.raises(UsageError, match=why):
            parse_coord(bad)


def test_coordinate_plan_kinds():
    d = coordinate_plan("t", [datetime.datetime(2020, 1, 2), datetime.datetime(2020, 1, 1)])
    assert d.inline.tolist() == [1, 0] and d.attrs["units"] == "days since 2020-01-01"
    s = coordinate_plan("t", [datetime.datetime(2020, 1, 1, 6), datetime.datetime(2020, 1, 1)])
    assert s.inline.tolist() == [21600, 0] and s.attrs["units"].startswith("seconds since")
    assert coordinate_plan("m", ["a", "b"]).dtype.kind == "T"
    assert coordinate_plan("m", [1, 2]).dtype == np.dtype("<i8")
    assert coordinate_plan("m", [1, 2.5]).dtype == np.dtype("<f8")


def test_resolve_each_form_and_its_refusals(ensemble):
    invs = [virtualize.inventory(f) for f in ensemble]
    vals, ps = resolve(invs, "member", parse_coord("attr:variant_label"))
    assert not ps and vals == [m for m in MEMBERS for _ in (0, 1)]
    # the scan records a small scalar's value (formats/_planning.py)
    vals, ps = resolve(invs, "member", parse_coord("var:realization"))
    assert not ps and vals == [1, 1, 2, 2, 3, 3]
    vals, ps = resolve(invs, "member", parse_coord(r"name:_r(\d+)i"))
    assert not ps and vals == [1, 1, 2, 2, 3, 3]
    vals, ps = resolve(invs, "year", parse_coord(r"name:_(\d{4})\.nc$"))
    assert not ps and vals == [2015, 2016] * 3
    vals, ps = resolve(invs[:2], "run", parse_coord(r"name:_(\d{4})\.nc$"))
    vals, ps = resolve(invs, "m", parse_coord("a,b,c,d,e,f"))
    assert vals == list("abcdef")
    # refusals, located at the file
    vals, ps = resolve(invs, "member", parse_coord("attr:nope"))
    assert vals is None and len(ps) == 6 and ps[0].loc.file == invs[0].path
    assert ps[0].kind == "coord-unresolved" and "no global attribute 'nope'" in ps[0].message
    vals, ps = resolve(invs, "member", parse_coord("var:lat"))
    assert vals is None and "not a scalar" in ps[0].message
    vals, ps = resolve(invs, "member", parse_coord(r"name:_(x\d)_"))
    assert vals is None and "does not match the name" in ps[0].message
    assert os.path.basename(invs[0].path) in ps[0].message
    invs[1].groups[""]["listed"] = [1, 2]
    vals, ps = resolve(invs[:2], "member", parse_coord("attr:listed"))
    assert vals is None and ps[0].loc.file == invs[0].path  # (the first has none)
    assert "not one number or text" in ps[-1].message and ps[-1].loc.file == invs[1].path
    vals, ps = resolve(invs, "member", parse_coord("1,2"))
    assert vals is None and "2 value(s) for 6 file(s)" in ps[0].message


def test_dates_in_names_become_dates(tmp_path):
    files = [str(_member_year(tmp_path / f"run_{d}.nc", "r1i1p1f1", 2015, 1))
             for d in ("20200101", "20200102")]
    invs = [virtualize.inventory(f) for f in files]
    vals, ps = resolve(invs, "run", parse_coord(r"name:run_(\d{8})"))
    assert vals == [datetime.datetime(2020, 1, 1), datetime.datetime(2020, 1, 2)]


def test_dates_in_attributes_and_listed_values_become_dates(ensemble, tmp_path):
    """attr: text and listed values that are all dates (the forms name: accepts) are dates,
    a datetime coordinate; mixed, they stay text."""
    D = datetime.datetime
    assert parse_coord("2024-01-01,20240102,2024-01-03T06:00:00").values == (
        D(2024, 1, 1), D(2024, 1, 2), D(2024, 1, 3, 6))
    assert parse_coord("2024-01-01,next").values == ("2024-01-01", "next")
    assert parse_coord("2024010100,2024010112").values == (D(2024, 1, 1), D(2024, 1, 1, 12))
    files = [f for f in ensemble if f.endswith("2015.nc")]
    for f, when in zip(files, ("2024-01-01T00:00:00", "2024-01-01T06:00:00Z",
                               "2024-01-01 12:00")):
        with netCDF4.Dataset(f, "a") as nc:
            nc.run_start = when
    invs = [virtualize.inventory(f) for f in files]
    vals, ps = resolve(invs, "run", parse_coord("attr:run_start"))
    assert not ps and vals == [D(2024, 1, 1), D(2024, 1, 1, 6), D(2024, 1, 1, 12)]
    invs[2].groups[""]["run_start"] = "soon"
    vals, ps = resolve(invs, "run", parse_coord("attr:run_start"))
    assert vals == ["2024-01-01T00:00:00", "2024-01-01T06:00:00Z", "soon"]
    cube = tmp_path / "runs.zarr"
    virtualize.virtualize(files, cube, concat_dims=["run"], coords={"run": "attr:run_start"},
                          drop=["realization"])
    ds = xr.open_dataset(cube, engine="virtualize")
    assert list(ds["run"].values) == [np.datetime64(D(2024, 1, 1, h), "ns") for h in (0, 6, 12)]
    assert ds["tas"].dims[0] == "run"


# -- an ensemble: member x time ------------------------------------------------------

@pytest.mark.parametrize("form", ["attr:variant_label", "var:realization",
                                  r"name:_(r\d+i\d+p\d+f\d+)_", "list"])
def test_ensemble_member_by_time(ensemble, tmp_path, form):
    if form == "list":  # explicit values, in file order
        form = ",".join(m for m in MEMBERS for _ in (0, 1))
    out = tmp_path / "cube.zarr"
    # (realization differs between members: the member coordinate, or dropped)
    drop = [] if form.startswith("var:") else ["realization"]
    report = virtualize.virtualize(ensemble, out, concat_dims=["member", "time"],
                                   coords={"member": form}, drop=drop)
    assert report.ok, report.problems
    a = report.plan.arrays
    assert a["tas"].dims == ("member", "time", "lat", "lon")
    assert a["tas"].shape == (3, 731, 4, 5)
    assert a["time"].dims == ("time",) and a["lat"].dims == ("lat",)
    assert a["time_bnds"].dims == ("time", "bnds")
    layout = report.plan.layout
    assert [ax.dim for ax in layout.axes] == ["member", "time"]
    assert layout.axes[1].labels[0].startswith("2015-01-01")
    assert len(layout.cells) == 6 and all(c.path for c in layout.cells)
    expected = _expected_tas(ensemble)
    _bits_equal(virtualize.open(out)["tas"][...], expected)
    with rectilinear():
        ds = xr.open_dataset(out, engine="virtualize", mask_and_scale=False)
        want = MEMBERS if form.startswith(("attr", "name:_(r", "r1")) else [1, 2, 3]
        assert [str(v) if isinstance(v, str) else int(v) for v in ds["member"].values] == \
            list(want)
        sel = ds["tas"].sel(member=want[1]).values
        _bits_equal(sel, expected[1])
        assert ds["time"].values[0] == np.datetime64("2015-01-01T12:00")
        _bits_equal(ds["time_bnds"].values[365:367, 0].astype("datetime64[D]"),
                    np.array(["2016-01-01", "2016-01-02"], "datetime64[D]"))
    if form.startswith("var:"):
        assert "realization" not in a  # its values are the member coordinate
    if form.startswith("attr:"):
        assert "variant_label" not in report.plan.groups[""]


def test_ensemble_kerchunk_export_read_by_fsspec(ensemble, tmp_path):
    out = tmp_path / "cube.json"
    report = virtualize.virtualize(ensemble, out, concat_dims=["member", "time"],
                                   coords={"member": "attr:variant_label"}, drop=["realization"])
    assert report.ok, report.problems
    g = kerchunk_group(out)
    _bits_equal(g["tas"][...], _expected_tas(ensemble))
    assert [str(v) for v in g["member"][...]] == list(MEMBERS)
    _bits_equal(g["time"][...], np.concatenate([_nc(ensemble[0], "time"),
                                                _nc(ensemble[1], "time")]))
    ds = kerchunk_xarray(out, mask_and_scale=False)  # xarray's zarr engine, over fsspec
    _bits_equal(ds["tas"].sel(member="r3i1p1f1").values, _expected_tas(ensemble)[2])


def test_cli_repeated_concat_dim_and_coord(ensemble, tmp_path, capsys):
    from virtualize.cli import main

    out = tmp_path / "cli.zarr"
    rc = main(["create", *ensemble, "-o", str(out), "--concat-dim", "member",
               "--concat-dim", "time", "--coord", "member=attr:variant_label", "--drop",
               "realization"])
    assert rc == 0
    _bits_equal(virtualize.open(out)["tas"][...], _expected_tas(ensemble))
    with pytest.raises(SystemExit) as e:
        main(["check", *ensemble, "--concat-dim", "member", "--concat-dim", "time",
              "--coord", "member"])
    assert e.value.code == 2
    assert "give DIM=FORM" in capsys.readouterr().err


def test_one_new_axis_from_an_attribute(ensemble, tmp_path):
    """`--concat-dim member --coord member=attr:variant_label` on one file per member."""
    files = ensemble[::2]
    out = tmp_path / "m.zarr"
    report = virtualize.virtualize(files, out, "member", coords={"member": "attr:variant_label"},
                                   drop=["realization"])
    assert report.ok, report.problems
    assert report.plan.layout is not None and report.plan.layout.axes[0].new
    with rectilinear():
        ds = xr.open_dataset(out, engine="virtualize", mask_and_scale=False)
        _bits_equal(ds["tas"].sel(member="r3i1p1f1").values, _nc(files[2], "tas"))
        assert ds["tas"].dims == ("member", "time", "lat", "lon")


def test_missing_member_year_refused_naming_the_cell(ensemble, tmp_path):
    files = [f for f in ensemble if not f.endswith("r3i1p1f1_gn_2016.nc")]
    report = virtualize.check(files, concat_dims=["member", "time"],
                              coords={"member": "attr:variant_label"}, drop=["realization"])
    assert not report.ok
    [p] = [p for p in report.problems if p.kind == "missing-cell"]
    assert "member='r3i1p1f1'" in p.message and "time=2016-01-01" in p.message
    assert "2016-12-31" in p.message
    missing = report.to_dict()["layout"]["missing"]
    assert missing == [[2, 1]]


def test_duplicate_member_refused(ensemble, tmp_path):
    report = virtualize.check(ensemble, concat_dims=["member", "time"],
                              coords={"member": "1,1,2,2,2,2"}, drop=["realization"])
    assert not report.ok
    [p, *_] = [p for p in report.problems if p.kind == "duplicate-cell"]
    assert p.loc.file == ensemble[4] and "member=2" in p.message and ensemble[2] in p.message
    # one axis named where the files span two: the other is hinted
    report = virtualize.check(ensemble, "member", coords={"member": "attr:variant_label"},
                              drop=["realization"])
    [p, *_] = [p for p in report.problems if p.kind == "duplicate-cell"]
    assert "--concat-dim member --concat-dim DIM" in p.message


def test_member_split_differently_refused(tmp_path):
    """r2's files split lat into other chunks than r1's: refused, located."""
    files = [str(_member_year(tmp_path / f"tas_{m}_{y}.nc", m, y, i, split_lat=4 if i == 1 else 2))
             for i, m in enumerate(MEMBERS[:2], start=1) for y in (2015, 2016)]
    report = virtualize.check(files, concat_dims=["member", "time"],
                              coords={"member": "attr:variant_label"}, drop=["realization"])
    assert not report.ok
    [p] = [p for p in report.problems if p.kind == "blocks-differ"]
    assert p.loc.variable == "tas" and p.loc.file == files[2] and "'lat'" in p.message


def test_shared_coordinate_differing_between_members_refused(ensemble, tmp_path):
    with netCDF4.Dataset(ensemble[3], "a") as nc:
        nc["lat"][0] = -61.0
    report = virtualize.check(ensemble, concat_dims=["member", "time"],
                              coords={"member": "attr:variant_label"}, drop=["realization"])
    assert not report.ok
    bad = [p for p in report.problems if p.kind == "differs-between-files"]
    assert bad and bad[0].loc.variable == "lat"
    assert ensemble[3] in {p.loc.file for p in bad}


def test_usage_errors(ensemble):
    with pytest.raises(UsageError, match="not a concatenation axis"):
        virtualize.check(ensemble, concat_dims=["time"], coords={"member": "attr:x"})
    with pytest.raises(UsageError, match="comes from the files"):
        virtualize.check(ensemble, concat_dims=["member", "time"],
                         coords={"member": "attr:variant_label", "time": "1,2,3,4,5,6"})
    report = virtualize.check(ensemble, concat_dims=["member", "time"],
                              coords={"member": "attr:nope"})
    assert {p.kind for p in report.problems if p.fatal} == {"coord-unresolved"}


# -- forecast runs x lead times --------------------------------------------------------

def _forecast(path, run: datetime.datetime, steps=4):
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("step", steps)
        nc.createDimension("y", 3)
        s = nc.createVariable("step", "i4", ("step",))
        s.units = "hours"
        s[:] = np.arange(steps) * 6
        y = nc.createVariable("y", "f4", ("y",))
        y[:] = [0, 1, 2]
        t2m = nc.createVariable("t2m", "f4", ("step", "y"), chunksizes=(2, 3))
        rng = np.random.default_rng(run.toordinal() + run.hour)
        t2m[:] = rng.normal(0, 1, (steps, 3)).astype("f4")
    return str(path)


def test_forecast_runs_by_lead_times(tmp_path):
    runs = [datetime.datetime(2024, 1, d, h) for d in (1, 2) for h in (0, 12)]
    files = [_forecast(tmp_path / f"fc_{r:%Y%m%dT%H%M}.nc", r) for r in runs]
    out = tmp_path / "fc.zarr"
    report = virtualize.virtualize(files, out, concat_dims=["run", "step"],
                                   coords={"run": r"name:fc_(\d{8}T\d{4})"})
    assert report.ok, report.problems
    assert report.plan.arrays["t2m"].dims == ("run", "step", "y")
    with rectilinear():
        ds = xr.open_dataset(out, engine="virtualize")
        assert ds["run"].values[1] == np.datetime64("2024-01-01T12:00")
        _bits_equal(ds["t2m"].sel(run="2024-01-02T00:00").values, _nc(files[2], "t2m"))
    _bits_equal(virtualize.open(out)["t2m"][...], np.stack([_nc(f, "t2m") for f in files]))


def test_runs_by_members_two_new_axes(tmp_path):
    files, want = [], []
    for m in (1, 2):
        for d in (1, 2, 3):
            r = datetime.datetime(2024, 1, d)
            files.append(_forecast(tmp_path / f"fc_m{m}_{r:%Y%m%d}.nc", r.replace(hour=m)))
    report = virtualize.virtualize(files, tmp_path / "c.zarr", concat_dims=["member", "run"],
                                   coords={"member": r"name:_m(\d)_", "run": r"name:_(\d{8})"})
    assert report.ok, report.problems
    a = report.plan.arrays["t2m"]
    assert a.dims == ("member", "run", "step", "y") and a.shape == (2, 3, 4, 3)
    got = virtualize.open(tmp_path / "c.zarr")["t2m"][...]
    want = np.stack([np.stack([_nc(f, "t2m") for f in files[:3]]),
                     np.stack([_nc(f, "t2m") for f in files[3:]])])
    _bits_equal(got, want)


# -- TIFFs stacked along band ----------------------------------------------------------

def test_tiffs_along_band_with_coord(tmp_path):
    tifffile = pytest.importorskip("tifffile")
    files = []
    for i, name in enumerate(("red", "green", "blue")):
        data = (np.arange(64 * 48, dtype="u2").reshape(64, 48) * (i + 1)).astype("u2")
        p = tmp_path / f"scene_{name}.tif"
        tifffile.imwrite(p, data, tile=(16, 16))
        files.append(str(p))
    plain = virtualize.check(files, "band")
    assert any("--coord band=" in n for n in plain.notes)
    out = tmp_path / "b.zarr"
    report = virtualize.virtualize(files, out, "band", coords={"band": r"name:scene_(\w+)\."})
    assert report.ok, report.problems
    with rectilinear():
        ds = xr.open_dataset(out, engine="virtualize")
        assert [str(v) for v in ds["band"].values] == ["blue", "green", "red"]
        _bits_equal(ds[list(ds.data_vars)[0]].sel(band="green").values,
                    tifffile.imread(files[1]))


# -- append along either axis ----------------------------------------------------------

def test_append_new_years_and_a_new_member(ensemble, tmp_path):
    base = [f for f in ensemble if "r3" not in f]
    out = tmp_path / "cube.zarr"
    assert virtualize.virtualize(base, out, concat_dims=["member", "time"],
                                 coords={"member": "attr:variant_label"}, drop=["realization"]).ok
    recipe = virtualize.open(out).attrs.get("virtualize", {}).get("recipe") or \
        json.loads((out / "virtualize.json").read_text())["recipe"]
    assert recipe["concat_dims"] == ["member", "time"]
    assert recipe["coords"] == {"member": "attr:variant_label"} and recipe["join"] == "exact"
    # a new member
    report = virtualize.append(out, [f for f in ensemble if "r3" in f])
    assert report.ok, report.problems
    _bits_equal(virtualize.open(out)["tas"][...], _expected_tas(ensemble))
    # a new year for every member
    more = [str(_member_year(tmp_path / f"tas_day_TOY_ssp585_{m}_gn_2017.nc", m, 2017, i))
            for i, m in enumerate(MEMBERS, start=1)]
    report = virtualize.append(out, more)
    assert report.ok, report.problems
    _bits_equal(virtualize.open(out)["tas"][...],
                _expected_tas(ensemble + more, years=(2015, 2016, 2017)))
    # a year for one member only: the grid is not filled, nothing changed
    lone = str(_member_year(tmp_path / "tas_day_TOY_ssp585_r1i1p1f1_gn_2018.nc",
                            "r1i1p1f1", 2018, 1))
    with pytest.raises(virtualize.VirtualizeError, match="missing-cell"):
        virtualize.append(out, [lone])
    assert virtualize.open(out)["tas"].shape == (3, 365 * 2 + 366, 4, 5)


def test_append_to_listed_values_takes_the_new_files_values(ensemble, tmp_path):
    out = tmp_path / "cube.zarr"
    assert virtualize.virtualize(ensemble[:4], out, concat_dims=["member", "time"],
                                 coords={"member": "a,a,b,b"}, drop=["realization"]).ok
    with pytest.raises(virtualize.VirtualizeError, match="give the new files'"):
        virtualize.append(out, ensemble[4:])
    with pytest.raises(UsageError, match="1 value"):
        virtualize.append(out, ensemble[4:], coords={"member": "c"})
    with pytest.raises(UsageError, match="not a new axis"):
        virtualize.append(out, ensemble[4:], coords={"run": "c,c"})
    report = virtualize.append(out, ensemble[4:], coords={"member": "c,c"})
    assert report.ok, report.problems
    _bits_equal(virtualize.open(out)["tas"][...], _expected_tas(ensemble))
    assert [str(m) for m in virtualize.open(out)["member"][...]] == ["a", "b", "c"]
    # and again, from the command line
    from virtualize.cli import main

    more = [str(_member_year(tmp_path / f"tas_day_TOY_ssp585_r4i1p1f1_gn_{y}.nc",
                             "r4i1p1f1", y, 4)) for y in (2015, 2016)]
    assert main(["append", str(out), *more, "--coord", "member=d,d"]) == 0
    assert [str(m) for m in virtualize.open(out)["member"][...]] == ["a", "b", "c", "d"]


def test_append_to_listed_dates(ensemble, tmp_path):
    """Listed values that are dates: recorded as their text (the recipe is JSON), the
    append's new dates joined to them."""
    out = tmp_path / "runs.zarr"
    assert virtualize.virtualize(ensemble[:4], out, concat_dims=["run", "time"],
                                 coords={"run": "2024-01-01,2024-01-01,20240102,20240102"},
                                 drop=["realization"]).ok
    report = virtualize.append(out, ensemble[4:], coords={"run": "2024-01-03T06:00:00,"
                                                                 "2024-01-03T06:00:00"})
    assert report.ok, report.problems
    ds = xr.open_dataset(out, engine="virtualize")
    assert [str(v)[:19] for v in ds["run"].values] == [
        "2024-01-01T00:00:00", "2024-01-02T00:00:00", "2024-01-03T06:00:00"]
    _bits_equal(virtualize.open(out)["tas"][...], _expected_tas(ensemble))


# -- other outputs and executors -------------------------------------------------------

def test_ensemble_to_icechunk(ensemble, tmp_path):
    pytest.importorskip("icechunk")
    out = tmp_path / "cube.icechunk"
    report = virtualize.virtualize(ensemble, out, concat_dims=["member", "time"],
                                   coords={"member": "attr:variant_label"}, drop=["realization"])
    assert report.ok, report.problems
    _bits_equal(virtualize.open(out)["tas"][...], _expected_tas(ensemble))


def test_ensemble_on_the_dask_executor(ensemble, tmp_path):
    """Scanned on dask workers (other processes: the hint's axes travel with the scan)."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        report = virtualize.virtualize(ensemble, tmp_path / "e.zarr",
                                       concat_dims=["member", "time"],
                                       coords={"member": "var:realization"}, executor=client)
    assert report.ok, report.problems
    _bits_equal(virtualize.open(tmp_path / "e.zarr")["tas"][...], _expected_tas(ensemble))


def test_join_outer_missing_member_year_reads_as_fill(ensemble, tmp_path):
    files = [f for f in ensemble if not f.endswith("r3i1p1f1_gn_2016.nc")]
    out = tmp_path / "outer.zarr"
    report = virtualize.virtualize(files, out, concat_dims=["member", "time"],
                                   coords={"member": "attr:variant_label"},
                                   drop=["realization"], join="outer")
    assert report.ok, report.problems
    # (a cell is not a file: r3's stack lacks 2016, its steps read as the fill value)
    assert any(n.startswith("--join outer: no file of the cell member='r3i1p1f1' holds time "
                            "2016-01-01") for n in report.notes), report.notes
    assert report.to_dict()["layout"]["missing"] == [[2, 1]]
    got = virtualize.open(out)["tas"][...]
    full = _expected_tas(ensemble)
    _bits_equal(got[:2], full[:2])
    _bits_equal(got[2, :365], full[2, :365])
    assert (got[2, 365:] == np.float32(1e20)).all()  # the fill value
    with rectilinear():  # the time coordinate is the other members' (the same everywhere)
        ds = xr.open_dataset(out, engine="virtualize", mask_and_scale=False)
        assert ds["time"].shape == (731,) and np.isnan(
            xr.open_dataset(out, engine="virtualize")["tas"].sel(member="r3i1p1f1")
            .values[365:]).all()
    # the kerchunk export reads the absent chunks as the fill value too
    k = tmp_path / "outer.json"
    virtualize.virtualize(files, k, concat_dims=["member", "time"],
                          coords={"member": "attr:variant_label"}, drop=["realization"],
                          join="outer")
    _bits_equal(kerchunk_group(k)["tas"][...], got)


def test_join_outer_refuses_a_variable_without_fill_value(tmp_path):
    """(planned from inventories: a TIFF image has fill value 0, a variable without one
    is made so here)"""
    from virtualize.plan import ConcatOptions
    from virtualize.plan.coords import parse_coords
    from virtualize.plan.hypercube import HypercubeOptions, plan_hypercube

    tifffile = pytest.importorskip("tifffile")
    invs = []
    for m, d in ((1, 1), (1, 2), (2, 1)):
        p = tmp_path / f"m{m}_2024010{d}.tif"
        tifffile.imwrite(p, np.full((32, 32), m * 10 + d, "u1"), tile=(16, 16))
        invs.append(virtualize.inventory(p))
    opts = HypercubeOptions(["member", "time"],
                            parse_coords({"member": r"name:m(\d)_", "time": r"name:_(\d{8})"}),
                            ConcatOptions(join="outer"))
    # a TIFF without a nodata value declares no fill: its absent cell would read as 0,
    # which readers take as data
    plan, problems = plan_hypercube(invs, opts)
    [p] = [p for p in problems if p.kind == "no-fill-value"]
    assert "declares no fill value" in p.message
    for inv in invs:  # (as a GDAL_NODATA of 0 declares it)
        inv.variables["image"].attrs["_FillValue"] = 0
    plan, problems = plan_hypercube(invs, opts)
    assert not [p for p in problems if p.fatal] and plan.arrays["image"].shape == (2, 2, 32, 32)
    assert plan.arrays["image"].refs["length"][1, 1].max() == 0  # absent: reads as 0
    invs[1].variables["image"].fill_value = None
    plan, problems = plan_hypercube(invs, opts)
    [p] = [p for p in problems if p.kind == "no-fill-value"]
    assert p.loc == virtualize.model.Location(invs[1].path, "image")
    assert "member=2, time=2024-01-02" in p.message


def test_time_outer_member_inner(ensemble, tmp_path):
    """The axes in the other order: the yearly cells are member stacks joined along time;
    the bounds of time get no member axis (compared across members, by value)."""
    out = tmp_path / "tm.zarr"
    report = virtualize.virtualize(ensemble, out, concat_dims=["time", "member"],
                                   coords={"member": "attr:variant_label"}, drop=["realization"])
    assert report.ok, report.problems
    a = report.plan.arrays
    assert a["tas"].dims == ("member", "time", "lat", "lon")
    assert a["time_bnds"].dims == ("time", "bnds")
    assert [ax.dim for ax in report.plan.layout.axes] == ["time", "member"]
    assert report.plan.layout.axes[0].labels[1] == "2016-01-01T12:00:00 .. 2016-12-31T12:00:00"
    _bits_equal(virtualize.open(out)["tas"][...], _expected_tas(ensemble))
    _bits_equal(virtualize.open(out)["time_bnds"][...],
                np.concatenate([_nc(ensemble[0], "time_bnds"), _nc(ensemble[1], "time_bnds")]))


def test_bounds_differing_between_members_refused(ensemble):
    with netCDF4.Dataset(ensemble[5], "a") as nc:
        nc["time_bnds"][3, 1] = 999.0
    report = virtualize.check(ensemble, concat_dims=["member", "time"],
                              coords={"member": "attr:variant_label"}, drop=["realization"])
    bad = [p for p in report.problems if p.kind == "differs-between-files"]
    assert not report.ok and bad[0].loc.variable == "time_bnds"
    assert "member='r3i1p1f1'" in bad[0].message or bad[0].loc.file == ensemble[5]


def test_append_a_member_to_an_icechunk_hypercube(ensemble, tmp_path):
    pytest.importorskip("icechunk")
    out = tmp_path / "ens.icechunk"
    assert virtualize.virtualize([f for f in ensemble if "r3" not in f], out,
                                 concat_dims=["member", "time"],
                                 coords={"member": "attr:variant_label"},
                                 drop=["realization"]).ok
    report = virtualize.append(out, [f for f in ensemble if "r3" in f])
    assert report.ok, report.problems
    _bits_equal(virtualize.open(out)["tas"][...], _expected_tas(ensemble))
    assert [str(m) for m in virtualize.open(out)["member"][...]] == list(MEMBERS)


def test_ensemble_from_http_sources(ensemble, tmp_path):
    pytest.importorskip("aiohttp")
    from servers import RangeHTTPServer

    srv = RangeHTTPServer(os.path.dirname(ensemble[0]))
    try:
        urls = [f"{srv.url}/{os.path.basename(f)}" for f in ensemble[:4]]  # (two members)
        out = tmp_path / "remote.zarr"
        report = virtualize.virtualize(urls, out, concat_dims=["member", "time"],
                                       coords={"member": r"name:_(r\d+i\d+p\d+f\d+)_"},
                                       drop=["realization"])
        assert report.ok, report.problems
        assert report.plan.layout.cells[0].path.startswith("http://")
        _bits_equal(virtualize.open(out)["tas"][...], _expected_tas(ensemble, MEMBERS[:2]))
    finally:
        srv.stop()


def test_no_sort_keeps_a_new_axis_in_file_order(ensemble, tmp_path):
    files = ensemble[4:] + ensemble[:4]  # r3 first
    report = virtualize.virtualize(files, tmp_path / "ns.zarr", concat_dims=["member", "time"],
                                   coords={"member": "attr:variant_label"},
                                   drop=["realization"], sort=False)
    assert report.ok, report.problems
    assert report.plan.layout.axes[0].labels == ["r3i1p1f1", "r1i1p1f1", "r2i1p1f1"]
    _bits_equal(virtualize.open(tmp_path / "ns.zarr")["tas"][...],
                _expected_tas(ensemble, ("r3i1p1f1", "r1i1p1f1", "r2i1p1f1")))


def test_join_outer_with_time_outer_takes_the_cells_steps_from_its_year(ensemble, tmp_path):
    """[time, member]: the stand-in of (2016, r3) is a 2016 file (its steps), not r3's 2015."""
    files = [f for f in ensemble if not f.endswith("r3i1p1f1_gn_2016.nc")]
    out = tmp_path / "to.zarr"
    report = virtualize.virtualize(files, out, concat_dims=["time", "member"],
                                   coords={"member": "attr:variant_label"},
                                   drop=["realization"], join="outer")
    assert report.ok, report.problems
    got = virtualize.open(out)
    full = _expected_tas(ensemble)
    _bits_equal(got["tas"][:, :365], full[:, :365])
    _bits_equal(got["tas"][:2, 365:], full[:2, 365:])
    assert (got["tas"][2, 365:] == np.float32(1e20)).all()
    _bits_equal(got["time"][...], np.concatenate([_nc(ensemble[0], "time"),
                                                  _nc(ensemble[1], "time")]))


def test_verify_decode_and_export_replan_a_hypercube(ensemble, tmp_path):
    out = tmp_path / "cube.zarr"
    assert virtualize.virtualize(ensemble, out, concat_dims=["member", "time"],
                                 coords={"member": "attr:variant_label"},
                                 drop=["realization"]).ok
    assert virtualize.verify_cube(out, decode=True) == []
    virtualize.export(out, tmp_path / "cube.json")
    _bits_equal(kerchunk_group(tmp_path / "cube.json")["tas"][...], _expected_tas(ensemble))


def test_a_touched_source_of_a_hypercube_is_rescanned_as_the_cube_was(ensemble, tmp_path):
    out = tmp_path / "cube.zarr"
    assert virtualize.virtualize(ensemble, out, concat_dims=["member", "time"],
                                 coords={"member": "attr:variant_label"},
                                 drop=["realization"]).ok
    os.utime(ensemble[3], ns=(1, 10**18))  # touched: blocks as recorded
    problems = virtualize.verify_cube(out)
    assert [(p.kind, p.fatal, p.loc.file) for p in problems] == \
        [("source-touched", False, ensemble[3])]


def _pr_years(path, member: str, years: tuple[int, ...], realization: int):
    """A pr file of one member over several years (the CMIP layout: other files than tas')."""
    days = sum(366 if y % 4 == 0 else 365 for y in years)
    start = (datetime.date(years[0], 1, 1) - datetime.date(2015, 1, 1)).days
    with netCDF4.Dataset(path, "w") as nc:
        nc.variant_label = member
        nc.createDimension("time", None)
        nc.createDimension("lat", 4)
        nc.createDimension("lon", 5)
        nc.createDimension("bnds", 2)
        t = nc.createVariable("time", "f8", ("time",))
        t.units, t.calendar, t.bounds = "days since 2015-01-01", "standard", "time_bnds"
        t[:] = np.arange(days) + start + 0.5
        b = nc.createVariable("time_bnds", "f8", ("time", "bnds"))
        b[:] = np.stack([np.arange(days) + start, np.arange(days) + start + 1], axis=1)
        nc.createVariable("lat", "f8", ("lat",))[:] = [-60, -20, 20, 60]
        nc.createVariable("lon", "f8", ("lon",))[:] = np.arange(5) * 72.0
        pr = nc.createVariable("pr", "f4", ("time", "lat", "lon"), zlib=True,
                               chunksizes=(1, 4, 5), fill_value=1e20)
        pr[:] = np.random.default_rng(realization).gamma(1, 1e-5, (days, 4, 5)).astype("f4")
    return str(path)


def _cmip(tmp_path, ensemble):
    pr = [_pr_years(tmp_path / f"pr_day_TOY_ssp585_{m}_gn_2015-2016.nc", m, (2015, 2016), i)
          for i, m in enumerate(MEMBERS, start=1)]
    return pr, [f for f in ensemble]


def test_files_holding_other_variables_fill_their_own_grid(ensemble, tmp_path):
    """tas in yearly files, pr in 2-year files: one cell holds one file of each, no
    duplicate; a member's missing pr file is a missing cell naming pr."""
    pr, tas = _cmip(tmp_path, ensemble)
    report = virtualize.check(tas + pr[:2], concat_dims=["member", "time"],
                              coords={"member": "attr:variant_label"}, drop=["realization"])
    assert not [p for p in report.problems if p.kind == "duplicate-cell"]
    [p] = [p for p in report.problems if p.kind == "missing-cell"]
    assert "for pr" in p.message and "member='r3i1p1f1'" in p.message
    layout = report.plan.layout
    assert sum(c.variables == ("pr",) for c in layout.cells) == 3
    assert [c.index for c in layout.cells if c.path is None] == [(2, 0)]


def test_cmip_layout_merged_per_member(ensemble, tmp_path):
    """The done-when of #22: tas(member, time, ...) and pr(member, time, ...) from yearly
    tas and 2-year pr files, once the one-axis planner merges variables (plan/merge.py)."""
    pytest.importorskip("virtualize.plan.merge")
    pr, tas = _cmip(tmp_path, ensemble)
    out = tmp_path / "cmip.zarr"
    report = virtualize.virtualize(tas + pr, out, concat_dims=["member", "time"],
                                   coords={"member": "attr:variant_label"},
                                   drop=["realization"])
    assert report.ok, report.problems
    g = virtualize.open(out)
    _bits_equal(g["tas"][...], _expected_tas(ensemble))
    _bits_equal(g["pr"][...], np.stack([_nc(f, "pr") for f in pr]))
    with rectilinear():
        ds = xr.open_dataset(out, engine="virtualize", mask_and_scale=False)
        _bits_equal(ds["pr"].sel(member="r2i1p1f1").values, _nc(pr[1], "pr"))


def test_a_member_of_another_shape_refused(tmp_path):
    """r2's tas has 7 latitudes, r1's 8, both in chunks of 4: the chunk lengths agree
    (4, 4), the shapes do not: refused, located (never read past r2's last latitude)."""
    files = []
    for m, nlat in (("r1i1p1f1", 8), ("r2i1p1f1", 7)):
        for year in (2015, 2016):
            p = tmp_path / f"tas_{m}_{year}.nc"
            with netCDF4.Dataset(p, "w") as nc:
                nc.variant_label = m
                nc.createDimension("time", None)
                nc.createDimension("lat", nlat)
                t = nc.createVariable("time", "f8", ("time",))
                t.units = "days since 2015-01-01"
                t[:] = np.arange(2) + (year - 2015) * 365
                tas = nc.createVariable("tas", "f4", ("time", "lat"), chunksizes=(1, 4))
                tas[:] = np.zeros((2, nlat), "f4")
            files.append(str(p))
    report = virtualize.check(files, concat_dims=["member", "time"],
                              coords={"member": "attr:variant_label"})
    assert not report.ok
    [p] = [p for p in report.problems if p.fatal]
    assert (p.kind, p.loc.variable, p.loc.file) == ("shape-differs", "tas", files[2])
    assert "length 7 along 'lat'" in p.message


@pytest.mark.parametrize("fmt", ["NETCDF3_CLASSIC", "NETCDF4"])
def test_var_form_reads_the_scalar_of_each_format(tmp_path, fmt):
    files = []
    for r in (3, 1, 2):
        p = tmp_path / f"member_{r}.nc"
        with netCDF4.Dataset(p, "w", format=fmt) as nc:
            nc.createDimension("x", 6)
            nc.createVariable("realization", "i4", ())[...] = r
            nc.createVariable("height", "f8", ())[...] = 2.0
            nc.createVariable("v", "f4", ("x",))[:] = np.arange(6, dtype="f4") * r
        files.append(str(p))
    out = tmp_path / "m.zarr"
    report = virtualize.virtualize(files, out, "member", coords={"member": "var:realization"})
    assert report.ok, report.problems
    with rectilinear():
        ds = xr.open_dataset(out, engine="virtualize")
        assert ds["member"].values.tolist() == [1, 2, 3]
        _bits_equal(ds["v"].sel(member=3).values, _nc(files[0], "v"))
        assert float(ds["height"]) == 2.0 and "realization" not in ds


def test_a_cells_own_refusal_is_said_once(tmp_path):
    """r2's 2015 file stores tas in padded 100-day blocks (compressed: no remedy without
    --materialize): refused there, as in a stack, and not again as missing from r2."""
    files = [str(_member_year(tmp_path / f"tas_{m}_{y}.nc", m, y, 1))
             for m in MEMBERS[:2] for y in (2015, 2016)]
    bad = files[2]
    os.remove(bad)
    with netCDF4.Dataset(bad, "w") as nc:  # the same as _member_year, other chunks
        src = netCDF4.Dataset(files[0])
        nc.variant_label = "r2i1p1f1"
        for name, dim in src.dimensions.items():
            nc.createDimension(name, None if dim.isunlimited() else len(dim))
        for name, v in src.variables.items():
            kw = dict(zlib=True, chunksizes=(100, 4, 5), fill_value=1e20) if name == "tas" else {}
            w = nc.createVariable(name, v.dtype, v.dimensions, **kw)
            w.setncatts({k: v.getncattr(k) for k in v.ncattrs() if k != "_FillValue"})
            w[...] = v[...]
        src.close()
    report = virtualize.check(files, concat_dims=["member", "time"],
                              coords={"member": "attr:variant_label"}, drop=["realization"])
    fatal = [p for p in report.problems if p.fatal]
    assert fatal and {(p.kind, p.loc.file) for p in fatal} == {("padded-block", bad)}


# -- scalars along a new axis ------------------------------------------------------------

def _add_scalar(path, name, value, coordinate_of=None):
    with netCDF4.Dataset(path, "a") as nc:
        v = nc.createVariable(name, "f8", ())
        v.units = "m"
        v[...] = value
        if coordinate_of:
            nc[coordinate_of].coordinates = name


@pytest.mark.parametrize("dims", [["member", "time"], ["member"]])
def test_a_scalar_differing_between_members_is_stacked_an_equal_one_shared(
        ensemble, tmp_path, dims):
    """`realization` (1, 2, 3) differs between the members: stacked along member, as
    xarray's combine_nested does with data variables; `height` (2 m in every file) is the
    same in every cell: shared, compared bit for bit."""
    files = ensemble if len(dims) == 2 else [f for f in ensemble if f.endswith("2015.nc")]
    for f in files:
        _add_scalar(f, "height", 2.0)
    cube = tmp_path / "stacked.zarr"
    report = virtualize.virtualize(files, cube, concat_dims=dims,
                                   coords={"member": "attr:variant_label"})
    assert report.ok, report.to_text()
    assert "'realization' differs between the" in report.to_text(verbose=True)
    ds = xr.open_dataset(cube, engine="virtualize")
    assert ds["realization"].dims == ("member",)
    assert ds["realization"].values.tolist() == [1, 2, 3]
    assert ds["realization"].sel(member="r2i1p1f1").item() == 2
    assert ds["height"].dims == () and ds["height"].item() == 2.0
    want = np.array([_nc(files[i], "realization") for i in range(0, len(files), len(dims))])
    _bits_equal(virtualize.open(cube)["realization"][...], want)
    refs = tmp_path / "stacked.json"
    virtualize.virtualize(files, refs, concat_dims=dims, coords={"member": "attr:variant_label"})
    _bits_equal(kerchunk_group(refs)["realization"][...], want)


def test_a_scalar_coordinate_differing_between_members_is_refused(ensemble):
    """A scalar named as a coordinate (tas:coordinates = "height") is a coordinate: it must
    be the same in every cell; differing, it is refused, located, not stacked."""
    for i, f in enumerate(ensemble):
        _add_scalar(f, "height", 2.0 if i < 4 else 10.0, coordinate_of="tas")
    report = virtualize.check(ensemble, concat_dims=["member", "time"],
                              coords={"member": "attr:variant_label"})
    bad = [p for p in report.problems if p.kind == "differs-between-files"]
    assert not report.ok and bad and {p.loc.variable for p in bad} == {"height"}
    assert bad[0].loc.file == ensemble[4]
    # and realization, a scalar data variable, was stacked, not refused
    assert not [p for p in report.problems if p.loc.variable == "realization"]


def test_var_coord_keeps_the_scalars_units_and_refuses_differing_ones(ensemble, tmp_path):
    """--coord member=var:realization takes the scalar's attributes onto the coordinate;
    files giving it other units are refused (the values would mean different things)."""
    files = [f for f in ensemble if f.endswith("2015.nc")]
    for f in files:
        with netCDF4.Dataset(f, "a") as nc:
            nc["realization"].long_name = "realization index"
    cube = tmp_path / "var.zarr"
    virtualize.virtualize(files, cube, concat_dims=["member"],
                          coords={"member": "var:realization"})
    ds = xr.open_dataset(cube, engine="virtualize")
    assert ds["member"].values.tolist() == [1, 2, 3]
    assert ds["member"].attrs["long_name"] == "realization index"
    with netCDF4.Dataset(files[2], "a") as nc:
        nc["realization"].units = "1"
    report = virtualize.check(files, concat_dims=["member"], coords={"member": "var:realization"})
    [p] = [p for p in report.problems if p.kind == "coord-unresolved"]
    assert p.loc.file == files[2] and "'units'" in p.message


def test_hypercube_missing_cell_of_a_variable_without_fill_is_refused(tmp_path):
    files = []
    for member, parts in (("r1", ((0, "a"), (3, "b"))), ("r2", ((0, "a"),))):
        for t0, part in parts:
            f = time_series_file(tmp_path / f"tas_{member}_{part}.nc", "tas", np.arange(3) + t0 + 0.5,
                      chunk=3, fill=None)
            with netCDF4.Dataset(f, "a") as ds:
                ds.variant_label = member
            files.append(f)
    report = virtualize.check(files, concat_dims=["member", "time"],
                              coords={"member": "attr:variant_label"}, join="outer")
    assert [p.kind for p in fatal(report)] == ["no-fill-value"], report.problems


CMIP = dict(concat_dims=["member", "time"], coords={"member": "attr:variant_label"})


FILL = np.float32(1e20)


def _tas(paths):
    return [p for p in paths if p.name.startswith("tas_")]


def _want(full, drop):
    """tas(member, time, lat, lon) of the full pile, the `drop` cells as the fill value."""
    by = {}
    for p in _tas(full):
        member, year = p.name.split("_")[4], int(p.stem.split("_")[-1][:4])
        with netCDF4.Dataset(p) as nc:
            nc.set_auto_maskandscale(False)
            by[member, year] = np.asarray(nc["tas"][...])
    want = np.stack([np.concatenate([by[m, y] for y in mh.YEARS]) for m in mh.MEMBERS])
    for m, y in drop:
        t0, t1 = mh.day(datetime.date(y, 1, 1)), mh.day(datetime.date(y + 1, 1, 1))
        want[mh.MEMBERS.index(m), t0:t1] = FILL
    return want


@pytest.mark.parametrize("drop", [
    [("r1i1p1f1", 2015)],                                   # the first cell of both axes
    [("r3i1p1f1", 2018)],                                   # the last
    [("r1i1p1f1", 2015), ("r3i1p1f1", 2018)],               # two cells
    [("r1i1p1f1", 2015), ("r2i1p1f1", 2015)],               # two at one time position
])
def test_join_outer_keeps_the_stacked_realization(tmp_path, drop):
    """README: a member-year missing 'with join="outer" reads as the fill value' — on the
    CMIP pile as made, whose files hold the scalar realization (1, 2, 3 by member). The
    missing cell's stand-in took realization from a file of another member, so the planner
    refused 'realization has no time axis ... 1 here and 2 there' (and two missing cells
    raised IndexError)."""
    full = mh.cmip(tmp_path / "full", pr_spans=None)
    paths = mh.cmip(tmp_path / "gap", pr_spans=None, drop=drop)
    cube = tmp_path / "outer.zarr"
    report = virtualize.virtualize(paths, cube, join="outer", **CMIP)
    assert report.ok
    g = virtualize.open(cube)
    assert_same(g["tas"][...], _want(full, drop), "tas with cells absent")
    assert_same(g["realization"][...], np.array([1, 2, 3], dtype="i4"), "realization(member)")
    k = tmp_path / "outer.json"
    virtualize.virtualize(paths, k, join="outer", **CMIP)
    assert_same(kerchunk_group(k)["tas"][...], _want(full, drop), "kerchunk tas")
    assert_same(kerchunk_group(k)["realization"][...], np.array([1, 2, 3], dtype="i4"),
                "kerchunk realization")


def _runs_by_members(root, skip):
    """runs x members x steps, one file a (run, member); scalars `ref` (by run) and `mem`
    (by member), each with a fill value."""
    files, want = [], {}
    for k in range(3):
        rt = datetime.datetime(2024, 1, 1) + datetime.timedelta(hours=6 * k)
        for m in range(3):
            if (k, m) in skip:
                continue
            f = root / f"fc_{rt:%Y%m%d%H}_m{m}.nc"
            root.mkdir(parents=True, exist_ok=True)
            with netCDF4.Dataset(f, "w") as nc:
                nc.member_id = f"m{m}"
                nc.createDimension("step", None)
                nc.createDimension("lat", 3)
                s = nc.createVariable("step", "f8", ("step",))
                s.units = "hours"
                s[:] = [0.0, 6.0, 12.0]
                v = nc.createVariable("t2m", "f4", ("step", "lat"), fill_value=FILL)
                v[:] = (k * 100 + m * 10 + np.arange(3)[:, None] + np.zeros(3)).astype("f4")
                want[k, m] = np.asarray(v[...])
                r = nc.createVariable("ref", "f8", (), fill_value=-1.0)
                r[...] = 6.0 * k
                e = nc.createVariable("mem", "f8", (), fill_value=-1.0)
                e[...] = float(m)
            files.append(f)
    return files, want


def test_join_outer_three_axes_scalars_by_run_and_by_member(tmp_path):
    """run x member x step with the (run 1, member 1) file missing: `ref` depends on the
    run, `mem` on the member; the stand-in must give each its own value, not the
    neighbour's (it was refused 'dims-differ ... ('member',) differ from ()')."""
    files, want = _runs_by_members(tmp_path / "fc", {(1, 1)})
    cube = tmp_path / "runs.zarr"
    report = virtualize.virtualize(files, cube, concat_dims=["run", "member", "step"],
                                   coords={"run": r"name:fc_(\d{10})",
                                           "member": "attr:member_id"}, join="outer")
    assert report.ok
    g = virtualize.open(cube)
    t2m = g["t2m"][...]
    for (k, m), w in want.items():
        assert_same(t2m[k, m], w, f"t2m run {k} member {m}")
    assert (t2m[1, 1] == FILL).all()
    ref, mem = g["ref"][...], g["mem"][...]
    assert ref.shape == (3,) and list(ref) == [0.0, 6.0, 12.0], ref
    # (stacked along member inside each run, then along run: mem(run, member), as for a
    # full grid)
    assert mem.shape[-1] == 3 and (mem.reshape(-1, 3) == [0.0, 1.0, 2.0]).all(), mem


def test_join_outer_refuses_a_scalar_that_differs_in_every_cell(tmp_path):
    """A scalar whose value is the file's own (it follows no axis: here run*10 + member)
    cannot be known at a missing cell: refused naming it, not the neighbour's value."""
    files, _ = _runs_by_members(tmp_path / "fc", {(2, 0)})
    for f in files:
        with netCDF4.Dataset(f, "a") as nc:
            k = int(nc["ref"][...]) // 6
            v = nc.createVariable("own", "f8", (), fill_value=-1.0)
            v[...] = k * 10 + int(nc["mem"][...])
    report = virtualize.check(files, concat_dims=["run", "member", "step"],
                              coords={"run": r"name:fc_(\d{10})", "member": "attr:member_id"},
                              join="outer")
    bad = [p for p in report.problems if p.fatal]
    assert not report.ok and bad and all(p.loc.variable == "own" for p in bad)
    assert "member='m0'" in bad[0].message and "--drop own" in bad[0].message
    for kw in (dict(drop=["own"]), dict(variables=["t2m"])):  # left out: nothing to know
        report = virtualize.check(files, concat_dims=["run", "member", "step"],
                                  coords={"run": r"name:fc_(\d{10})",
                                          "member": "attr:member_id"}, join="outer", **kw)
        assert report.ok, (kw, [p.message for p in report.problems])


def _member_years(root, hours_member):
    """tas of members r1, r2 x years 2015, 2016; `hours_member`'s files count time in
    hours since 2015-01-01, the others in days (the same instants)."""
    files = []
    for m in ("r1", "r2"):
        for y, t0, n in ((2015, 0, 365), (2016, 365, 366)):
            f = root / f"tas_{m}_{y}.nc"
            root.mkdir(parents=True, exist_ok=True)
            with netCDF4.Dataset(f, "w") as nc:
                nc.variant_label = m
                nc.createDimension("time", None)
                nc.createDimension("lat", 3)
                t = nc.createVariable("time", "f8", ("time",))
                days = t0 + np.arange(n) + 0.5
                if m == hours_member:
                    t.units, t[:] = "hours since 2015-01-01", days * 24
                else:
                    t.units, t[:] = "days since 2015-01-01", days
                t.calendar = "standard"
                v = nc.createVariable("tas", "f4", ("time", "lat"), fill_value=FILL)
                v[:] = (days[:, None] * 10 + np.arange(3)).astype("f4")
            files.append(f)
    return files


def test_members_whose_time_units_differ(tmp_path):
    """The cells are placed by re-expressed time (r2's hours as r1's days), as the plain
    concatenation does (it was refused as missing / duplicate cells)."""
    files = _member_years(tmp_path / "t", "r2")
    cube = tmp_path / "t.zarr"
    report = virtualize.virtualize(files, cube, concat_dims=["member", "time"],
                                   coords={"member": "attr:variant_label"})
    assert report.ok
    tas = virtualize.open(cube)["tas"][...]
    assert tas.shape == (2, 731, 3) and (tas[0] == tas[1]).all()


def test_members_whose_time_units_differ_are_not_misplaced(tmp_path):
    """Never a cube with r2's years at other places: with either join, r2's steps are r1's."""
    files = _member_years(tmp_path / "t", "r2")
    for join in ("exact", "outer"):
        cube = tmp_path / f"{join}.zarr"
        report = virtualize.virtualize(files, cube, concat_dims=["member", "time"],
                                       coords={"member": "attr:variant_label"}, join=join)
        assert report.ok, report.problems
        tas = virtualize.open(cube)["tas"][...]
        assert tas.shape == (2, 731, 3) and (tas[0] == tas[1]).all()


def _bands(root):
    files = []
    root.mkdir(parents=True, exist_ok=True)
    for k in range(3):
        f = root / f"b{k}.nc"
        with netCDF4.Dataset(f, "w") as nc:
            nc.createDimension("y", 2)
            v = nc.createVariable("v", "f4", ("y",))
            v[:] = [k, k + 0.5]
        files.append(f)
    return files


@pytest.mark.parametrize("form", ["red,green,blue", "attr:colour"])
def test_no_sort_keeps_a_new_axis_in_the_order_given(tmp_path, form):
    """docs/planning.md: 'with --no-sort a new axis' positions are in the order the files
    give them' — it was refused as 'coordinate-not-increasing ... the files overlap in
    band'."""
    files = _bands(tmp_path / "b")
    for f, c in zip(files, ["red", "green", "blue"]):
        with netCDF4.Dataset(f, "a") as nc:
            nc.colour = c
    cube = tmp_path / "b.zarr"
    report = virtualize.virtualize(files, cube, concat_dims=["band"], coords={"band": form},
                                   sort=False)
    assert report.ok
    g = virtualize.open(cube)
    assert list(g["band"][...]) == ["red", "green", "blue"]
    assert_same(g["v"][...], np.array([[0, 0.5], [1, 1.5], [2, 2.5]], dtype="f4"), "v(band)")
    bad = virtualize.check(files[:2] + files[:1], concat_dims=["band"],
                           coords={"band": "red,green,red"}, sort=False)
    assert not bad.ok  # (the same value twice is still two files in one cell)
