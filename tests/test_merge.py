"""Files holding different variables merged into one cube (plan/merge.py): the CMIP layout
(tas in yearly files, pr in a 2-year file, each with its own chunking) read back bit for
bit through every output, spans (exact / outer), attributes combined (plan/attrs.py) and
`variables=` selection; every refusal located."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import netCDF4
import numpy as np
import pytest
import xarray as xr

import virtualize
from virtualize.plan import ConcatOptions, plan_concat
from virtualize.plan.attrs import combine
from virtualize.plan.merge import plan_merge

from helpers import (
    assert_same,
    fatal,
    kerchunk_group,
    kerchunk_xarray,
    rectilinear,
    time_series_file,
)

DAYS = {2015: 365, 2016: 366, 2017: 365, 2018: 365}


def write(path, var, first_day, ndays, chunk, *, units=None, lat_shift=0.0, fill=True,
          history=None, bnds_shift=0.0):
    """One CMIP-style file (netCDF4-python): `var`(time, lat, lon) daily from `first_day`
    (days since 2015-01-01), time / time_bnds / lat / lon / their bounds / scalar height."""
    with netCDF4.Dataset(path, "w") as ds:
        ds.createDimension("time", None)
        ds.createDimension("lat", 3)
        ds.createDimension("lon", 4)
        ds.createDimension("bnds", 2)
        ds.history = history or f"made {path.name}"
        ds.tracking_id = f"hdl:{path.stem}"
        ds.Conventions = "CF-1.7"
        t = ds.createVariable("time", "f8", ("time",))
        t.units, t.calendar, t.bounds = "days since 2015-01-01", "standard", "time_bnds"
        tb = ds.createVariable("time_bnds", "f8", ("time", "bnds"))
        lat = ds.createVariable("lat", "f8", ("lat",))
        lat.units, lat.bounds = "degrees_north", "lat_bnds"
        lon = ds.createVariable("lon", "f8", ("lon",))
        lon.units, lon.bounds = "degrees_east", "lon_bnds"
        latb = ds.createVariable("lat_bnds", "f8", ("lat", "bnds"))
        lonb = ds.createVariable("lon_bnds", "f8", ("lon", "bnds"))
        h = ds.createVariable("height", "f8", ())
        h.units = "m"
        h[...] = 2.0
        kw = {"fill_value": np.float32(1e20)} if fill else {"fill_value": False}
        v = ds.createVariable(var, "f4", ("time", "lat", "lon"), chunksizes=(chunk, 3, 4),
                              zlib=True, **kw)
        v.units = units or ("K" if var == "tas" else "kg m-2 s-1")
        v.coordinates = "height"
        days = np.arange(first_day, first_day + ndays, dtype="f8")
        t[:] = days + 0.5
        tb[:] = np.stack([days, days + 1], 1) + bnds_shift
        lat[:] = np.array([-10.0, 0.0, 10.0]) + lat_shift
        lon[:] = [0.0, 90.0, 180.0, 270.0]
        latb[:] = np.stack([lat[:] - 5, lat[:] + 5], 1)
        lonb[:] = np.stack([lon[:] - 45, lon[:] + 45], 1)
        rng = np.random.default_rng(first_day * 7 + len(var))
        v[:] = (rng.random((ndays, 3, 4)) * 300).astype("f4")
    return path


def start(year):
    return sum(DAYS[y] for y in DAYS if y < year)


def tas(d, year, chunk=None, **kw):
    return write(d / f"tas_day_{year}0101-{year}1231.nc", "tas", start(year), DAYS[year],
                 chunk or (73 if DAYS[year] == 365 else 61), **kw)


def pr(d, y0, y1, chunk=43, **kw):
    return write(d / f"pr_day_{y0}0101-{y1}1231.nc", "pr", start(y0),
                 sum(DAYS[y] for y in range(y0, y1 + 1)), chunk, **kw)


@pytest.fixture
def pile(tmp_path):
    d = tmp_path / "cmip"
    d.mkdir()
    return [tas(d, 2015), tas(d, 2016), pr(d, 2015, 2016)]


def raw(files, name):
    parts = []
    for f in files:
        with netCDF4.Dataset(f) as ds:
            v = ds[name]
            v.set_auto_maskandscale(False)
            parts.append(np.asarray(v[...]))
    return np.concatenate(parts) if parts[0].ndim and name not in ("lat", "lon", "lat_bnds",
                                                                    "lon_bnds") else parts[0]


def expected(pile):
    tas_files, pr_files = pile[:2], pile[2:]
    return {"tas": raw(tas_files, "tas"), "pr": raw(pr_files, "pr"),
            "time": raw(tas_files, "time"), "time_bnds": raw(tas_files, "time_bnds"),
            "lat": raw(pr_files, "lat"), "lon": raw(tas_files, "lon"),
            "lat_bnds": raw(tas_files, "lat_bnds"), "height": raw(pr_files[:1], "height")}


def kinds(report):
    return sorted({p.kind for p in report.problems if p.fatal})


def test_cmip_pile_is_merged_each_variable_on_its_own_grid(pile):
    report = virtualize.check(pile)
    assert report.ok, report.problems
    arrays = report.plan.arrays
    assert arrays["tas"].chunk_lengths[0] == (73,) * 5 + (61,) * 6  # 2015, then leap 2016
    assert arrays["pr"].chunk_lengths[0] == (43,) * 17  # one 2-year file
    assert arrays["tas"].shape == arrays["pr"].shape == (731, 3, 4)
    assert arrays["time"].inline is not None and arrays["time"].shape == (731,)
    assert any("hold different variables" in n for n in report.notes)
    # one source table, each array referencing only its own files
    paths = [s.path for s in report.plan.sources]
    assert sorted(paths) == sorted(str(f) for f in pile)
    for name, files in (("tas", pile[:2]), ("pr", pile[2:])):
        used = {paths[i] for i in np.unique(arrays[name].refs["path"])}
        assert used == {str(f) for f in files}
    # the layout: one axis, a cell per file with the variables it holds
    layout = report.plan.layout
    assert [a.dim for a in layout.axes] == ["time"]
    held = {c.path: c.variables for c in layout.cells}
    assert held[str(pile[0])] == ("tas",) and held[str(pile[2])] == ("pr",)
    assert report.to_dict()["layout"]["cells"]


@pytest.mark.parametrize("suffix", [".zarr", ".json", ".icechunk"])
def test_merged_cube_reads_back_bit_identical(pile, tmp_path, suffix):
    if suffix == ".icechunk":
        pytest.importorskip("icechunk")
    out = tmp_path / f"cube{suffix}"
    virtualize.virtualize(pile, out)
    want = expected(pile)
    with rectilinear():
        g = virtualize.open(out)
        for name, value in want.items():
            assert_same(g[name][...], value, f"{name} via virtualize.open")
    ds = xr.open_dataset(out, engine="virtualize", mask_and_scale=False, decode_times=False)
    for name, value in want.items():
        assert_same(ds[name].values, value, f"{name} via xarray engine=virtualize")
    assert "history" not in ds.attrs and "tracking_id" not in ds.attrs  # differing: dropped
    assert ds.attrs["Conventions"] == "CF-1.7"
    if suffix == ".json":
        kg = kerchunk_group(out)
        for name, value in want.items():
            assert_same(kg[name][...], value, f"{name} via fsspec + zarr")
        kx = kerchunk_xarray(out, mask_and_scale=False, decode_times=False)
        assert_same(kx.pr.values, want["pr"], "pr via kerchunk + xarray")


def test_same_variables_plan_exactly_as_plan_concat(case):
    invs = [virtualize.inventory(f) for f in case("months2024")[:3]]
    a, pa = plan_merge(invs, ConcatOptions())
    b, pb = plan_concat(invs, ConcatOptions())
    assert [str(p) for p in pa] == [str(p) for p in pb]
    assert a.notes == b.notes and a.groups == b.groups and a.layout is None
    assert [s.path for s in a.sources] == [s.path for s in b.sources]
    assert a.arrays.keys() == b.arrays.keys()
    for name in a.arrays:
        x, y = a.arrays[name], b.arrays[name]
        assert x.chunk_lengths == y.chunk_lengths and x.attrs == y.attrs
        assert (x.refs is None and y.refs is None) or np.array_equal(x.refs, y.refs)
    assert a.append_state == b.append_state


def test_a_shared_coordinate_that_differs_is_located(pile):
    d = pile[0].parent
    bad = pr(d, 2015, 2016, lat_shift=0.25)
    report = virtualize.check([*pile[:2], bad])
    p = next(p for p in report.problems if p.kind == "differs-between-files")
    assert p.loc.variable == "lat" and p.loc.file in (str(bad), str(pile[0]))
    assert "index (0,)" in p.message and (str(pile[0]) in p.message or str(bad) in p.message)
    assert not report.ok


def test_shared_bounds_along_the_axis_that_differ_are_located(pile):
    bad = pr(pile[0].parent, 2015, 2016, bnds_shift=0.5)
    report = virtualize.check([*pile[:2], bad])
    p = next(p for p in report.problems if p.kind == "differs-between-files")
    # (located at either file, naming the other: the groups are ordered by their first
    # step, then by name, whatever order the files are given in)
    assert p.loc.variable == "time_bnds" and p.loc.file in (str(bad), str(pile[0]))
    other = str(pile[0]) if p.loc.file == str(bad) else str(bad)
    assert "first at index (0, 0)" in p.message and other in p.message


def test_span_mismatch_is_refused_naming_the_steps(pile, tmp_path):
    d = pile[0].parent
    short = write(d / "pr_day_20150101-20151231.nc", "pr", 0, 365, 73)
    report = virtualize.check([*pile[:2], short])
    (p,) = [p for p in report.problems if p.fatal]
    assert p.kind == "span-differs" and p.loc.variable == "pr" and p.loc.file == str(short)
    assert "366 time step(s)" in p.message and "2016-01-01" in p.message
    assert str(pile[1]) in p.message and "--join outer" in p.message


def test_join_outer_reads_missing_steps_as_the_fill_value(pile, tmp_path):
    d = pile[0].parent
    short = write(d / "pr_day_20150101-20151231.nc", "pr", 0, 365, 73)
    out = tmp_path / "outer.zarr"
    report = virtualize.virtualize([*pile[:2], short], out, join="outer")
    assert report.plan.arrays["pr"].chunk_lengths[0] == (73,) * 5 + (366,)
    ds = xr.open_dataset(out, engine="virtualize", mask_and_scale=False, decode_times=False)
    assert_same(ds.pr.values[:365], raw([short], "pr"), "pr's own steps")
    assert (ds.pr.values[365:] == np.float32(1e20)).all()
    assert_same(ds.tas.values, raw(pile[:2], "tas"), "tas")
    assert_same(ds.time.values, raw(pile[:2], "time"), "time over the union")
    assert virtualize.open(out).attrs.get("Conventions") == "CF-1.7"


def test_join_outer_refuses_a_padded_block_before_absent_steps(pile):
    """A compressed block stored padded (365 steps in blocks of 100) cannot be followed
    by absent steps: its chunk would cover them."""
    d = pile[0].parent
    short = write(d / "pr_day_20150101-20151231.nc", "pr", 0, 365, 100)
    report = virtualize.check([*pile[:2], short], join="outer")
    (p,) = [p for p in report.problems if p.fatal]
    assert (p.kind, p.loc.file, p.loc.variable, p.loc.block) == \
        ("padded-block", str(short), "pr", (3,))


@pytest.mark.parametrize("suffix", [".json", ".icechunk"])
def test_join_outer_union_of_both_spans(tmp_path, suffix):
    """pr holds 2015-2016, tas 2016-2017: the axis is 2015-2017, each variable absent
    where it has no file; shared bounds composed from both."""
    if suffix == ".icechunk":
        pytest.importorskip("icechunk")
    d = tmp_path
    files = [tas(d, 2016), tas(d, 2017), pr(d, 2015, 2016)]
    out = tmp_path / f"u{suffix}"
    virtualize.virtualize(files, out, join="outer")
    with rectilinear():
        kx = kerchunk_group(out) if suffix == ".json" else virtualize.open(out)
        _check_union(kx, files)


def _check_union(kx, files):
    n15 = DAYS[2015]
    t = kx["tas"][...]
    assert t.shape == (n15 + 366 + 365, 3, 4)
    assert (t[:n15] == np.float32(1e20)).all()
    assert_same(t[n15:], raw(files[:2], "tas"), "tas after 2015")
    p = kx["pr"][...]
    assert_same(p[:n15 + 366], raw(files[2:], "pr"), "pr")
    assert (p[n15 + 366:] == np.float32(1e20)).all()
    time = kx["time"][...]
    assert_same(time, np.arange(n15 + 366 + 365) + 0.5, "time, the union")
    tb = kx["time_bnds"][...]
    assert_same(tb[:, 0], np.arange(n15 + 366 + 365, dtype="f8"), "time_bnds, the union")


def test_join_outer_refuses_a_variable_without_fill_value(pile):
    d = pile[0].parent
    short = write(d / "pr_day_20150101-20151231.nc", "pr", 0, 365, 73, fill=False)
    report = virtualize.check([*pile[:2], short], join="outer")
    (p,) = [p for p in report.problems if p.fatal]
    assert p.kind == "no-fill-value" and p.loc.variable == "pr" and p.loc.file == str(short)
    assert "366 time step(s)" in p.message


def test_differing_units_are_refused(pile):
    d = pile[0].parent
    bad = tas(d, 2016, units="degC")
    report = virtualize.check([pile[0], bad, pile[2]])
    p = next(p for p in report.problems if p.kind == "attribute-drift")
    assert p.loc.file == str(bad) and p.loc.variable == "tas" and "'units'" in p.message
    assert not report.ok


def test_a_shared_coordinates_units_differing_across_the_merge_is_refused(pile):
    """lat in degrees_north in the tas files, 'degrees' in the pr file."""
    bad = pile[2]
    with netCDF4.Dataset(bad, "a") as ds:
        ds["lat"].units = "degrees"
    report = virtualize.check(pile)
    p = next(p for p in report.problems if p.kind == "attribute-drift")
    assert p.loc.variable == "lat" and "'units'" in p.message
    assert str(bad) in (p.loc.file, ) or str(bad) in p.message


def test_the_same_file_twice_is_still_refused(pile):
    report = virtualize.check([pile[0], pile[0], pile[1], pile[2]])
    # (that problem alone: the spans are not compared with a refused coordinate)
    (p,) = [p for p in report.problems if p.fatal]
    assert p.kind == "duplicate-coordinate" and p.loc.file == str(pile[0])


def test_combine_attrs_modes(pile):
    report = virtualize.check(pile)
    assert "history" not in report.plan.groups[""]
    (note,) = [n for n in report.notes if n.startswith("attributes that differ")]
    assert "global: history, tracking_id" in note  # one note for the whole pile
    over = virtualize.check(pile, combine_attrs="override")
    # the first file in the cube's order (by first step, then name: pr's, tied with
    # tas 2015's), whatever order the files are given in
    assert over.plan.groups[""]["history"] == f"made {pile[2].name}"
    again = virtualize.check(pile[::-1], combine_attrs="override")
    assert again.plan.groups[""]["history"] == f"made {pile[2].name}"
    ident = virtualize.check(pile, combine_attrs="identical")
    conflicts = [p for p in ident.problems if p.kind == "attribute-conflict"]
    assert {"history", "tracking_id"} <= {p.message.split("'")[1] for p in conflicts}
    assert all(p.loc.file for p in conflicts) and not ident.ok
    with pytest.raises(ValueError, match="combine_attrs"):
        virtualize.check(pile, combine_attrs="first")


def copies(files, d):
    """Copies of a session fixture's files, to be edited."""
    d.mkdir(exist_ok=True)
    out = [d / f.name for f in files]
    for f, o in zip(files, out):
        shutil.copyfile(f, o)
    return out


def test_combine_attrs_in_a_plain_concatenation(case, tmp_path):
    """Before, a one-variable stack's attributes were the first file's, silently."""
    files = copies(case("months2024")[:2], tmp_path / "m")
    for i, f in enumerate(files):
        with netCDF4.Dataset(f, "a") as ds:
            ds.history = f"edited {i}"
            ds["tas"].long_name = f"tas {i}"
    with netCDF4.Dataset(files[1], "a") as ds:
        ds["tas"].comment = "second"
    report = virtualize.check(files)
    assert report.ok
    assert "history" not in report.plan.groups[""]
    assert "long_name" not in report.plan.arrays["tas"].attrs
    dropped = next(n for n in report.notes if "left out" in n)
    assert "global: history" in dropped and "tas: long_name" in dropped
    # an attribute only one file has is kept (xarray's drop_conflicts)
    assert report.plan.arrays["tas"].attrs.get("comment") == "second"


def test_combine_unit():
    attrs, dropped, problems = combine([{"a": 1, "b": "x", "units": "K"},
                                        {"a": 1, "b": "y", "units": "K", "c": 2}],
                                       "drop_conflicts", "tas", ["f0", "f1"])
    assert attrs == {"a": 1, "units": "K", "c": 2} and dropped == ["b"] and not problems
    attrs, _, problems = combine([{"units": "K"}, {"units": "degC"}], "override", "tas",
                                 ["f0", "f1"])
    assert [(p.kind, p.loc.file, p.loc.variable) for p in problems] == \
        [("attribute-drift", "f1", "tas")]
    attrs, _, problems = combine([{"b": "x"}, {"b": "y"}], "identical", "", ["f0", "f1"])
    assert [(p.kind, p.loc.file) for p in problems] == [("attribute-conflict", "f1")]


def test_variables_keeps_what_they_need(pile):
    report = virtualize.check(pile, variables=["tas"])
    assert report.ok, report.problems
    assert set(report.plan.arrays) == {"tas", "time", "time_bnds", "lat", "lon", "lat_bnds",
                                       "lon_bnds", "height"}
    assert any("holding none of the variables" in n for n in report.notes)
    report = virtualize.check(pile, variables=["pr", "tas"])
    assert {"pr", "tas"} <= set(report.plan.arrays)
    bad = virtualize.check(pile, variables=["tas", "psl"])
    (p,) = bad.problems
    assert p.kind == "unknown-name" and "psl" in p.message and "pr, tas, time" in p.message


def test_cli_options(pile, tmp_path):
    d = pile[0].parent
    short = write(d / "pr_day_20150101-20151231.nc", "pr", 0, 365, 73)
    files = [str(f) for f in (*pile[:2], short)]
    exe = [str(Path(sys.executable).with_name("virtualize"))]
    no = subprocess.run([*exe, "check", *files], capture_output=True, text=True)
    assert no.returncode == 1 and "span-differs" in no.stdout
    out = tmp_path / "o.zarr"
    yes = subprocess.run([*exe, *files, "-o", str(out), "--join", "outer",
                          "--combine-attrs", "override", "--variables", "pr,tas"],
                         capture_output=True, text=True)
    assert yes.returncode == 0, yes.stdout + yes.stderr
    with rectilinear():
        cube = virtualize.open(out)
        # override: the first file's (by first step, then name)
        assert cube.attrs["history"] == f"made {short.name}"
        assert (cube["pr"][365:] == np.float32(1e20)).all()  # outer
    selected = tmp_path / "s.zarr"
    subprocess.run([*exe, *files, "-o", str(selected), "--join", "outer", "--variables", "pr"],
                   check=True, capture_output=True)
    assert "tas" not in virtualize.open(selected)
    unknown = subprocess.run([*exe, "check", *files, "--variables", "nope"],
                             capture_output=True, text=True)
    assert unknown.returncode == 2 and "nope" in unknown.stdout + unknown.stderr


def test_append_to_a_merged_cube_rebuilds_with_the_same_checks(pile, tmp_path):
    d = pile[0].parent
    out = tmp_path / "a.zarr"
    virtualize.virtualize(pile, out)
    new = [tas(d, 2017), tas(d, 2018), pr(d, 2017, 2018)]
    report = virtualize.append(out, new)
    assert report.ok
    ds = xr.open_dataset(out, engine="virtualize", mask_and_scale=False, decode_times=False)
    assert_same(ds.tas.values, raw([*pile[:2], *new[:2]], "tas"), "tas appended")
    assert_same(ds.pr.values, raw([pile[2], new[2]], "pr"), "pr appended")
    # the same checks: a pr file alone does not cover tas's span
    out2 = tmp_path / "b.zarr"
    virtualize.virtualize(pile, out2)
    with pytest.raises(virtualize.VirtualizeError, match="span-differs"):
        virtualize.append(out2, [tas(d, 2017)])


def test_recipe_records_the_options(pile, tmp_path):
    out = tmp_path / "r.zarr"
    d = pile[0].parent
    short = write(d / "pr_day_20150101-20151231.nc", "pr", 0, 365, 73)
    virtualize.virtualize([*pile[:2], short], out, join="outer", combine_attrs="override",
                          variables=["tas", "pr"])
    recipe = json.loads((out / "virtualize.json").read_text())["recipe"]
    assert recipe["join"] == "outer" and recipe["combine_attrs"] == "override"
    assert recipe["variables"] == ["pr", "tas"]
    # planned again from the record (verify --decode) as it was: the outer join holds
    assert not [p for p in virtualize.verify_cube(out, decode=True) if p.fatal]


def test_a_file_of_a_one_variable_stack_lacking_it_is_still_refused(pile):
    """A tas file without tas holds no data variable: no merge, `missing-variable`."""
    d = pile[0].parent
    lacking = tas(d, 2017)
    with netCDF4.Dataset(pile[1]) as src, netCDF4.Dataset(lacking, "w") as ds:
        for name, dim in src.dimensions.items():
            ds.createDimension(name, None if dim.isunlimited() else len(dim))
        for name, v in src.variables.items():
            if name != "tas":
                out = ds.createVariable(name, v.dtype, v.dimensions)
                out.setncatts({k: v.getncattr(k) for k in v.ncattrs()})
                out[...] = v[...] + (365 if name.startswith("time") else 0)
    report = virtualize.check([*pile[:2], lacking])
    missing = [p for p in report.problems if p.kind == "missing-variable"]
    assert [(p.loc.file, p.loc.variable) for p in missing] == [(str(lacking), "tas")]


def test_bad_option_values_are_usage_errors(pile):
    with pytest.raises(virtualize.UsageError, match="join must be one of exact, outer"):
        virtualize.check(pile, join="inner")
    with pytest.raises(virtualize.UsageError, match="combine_attrs must be one of"):
        virtualize.check(pile, combine_attrs="no_conflicts")


def test_append_with_a_differing_attribute_gives_the_rebuilds_attributes(case, tmp_path):
    """The one-axis append fast path keeps the cube's array attributes: a new file whose
    attribute differs makes the cube differ from a full build, so it rebuilds."""
    files = copies(case("months2024")[:3], tmp_path / "m")
    with netCDF4.Dataset(files[2], "a") as ds:
        ds["tas"].long_name = "changed in March"
    out = tmp_path / "a.zarr"
    virtualize.virtualize(files[:2], out)
    report = virtualize.append(out, files[2:])
    assert not any("scanning only" in n for n in report.notes)
    full = virtualize.check(files).plan.arrays["tas"].attrs
    with rectilinear():
        attrs = dict(virtualize.open(out)["tas"].attrs)
    # the files disagree: left out by the full build, and so by the append
    assert "long_name" not in full and "long_name" not in attrs
    assert {k: v for k, v in attrs.items() if k != "_FillValue"} == \
        {k: v for k, v in full.items() if k != "_FillValue"}


@pytest.mark.parametrize("join", ["exact", "outer"])
def test_time_counted_from_another_origin_is_re_expressed(pile, tmp_path, join):
    """The pr file counts days since 2014-12-31: the same instants; the tas files
    re-expressed exactly in its units (time and its bounds: pr's file comes first in the
    cube, tied with tas 2015 by first step and first by name); a calendar that differs is
    refused."""
    d = pile[0].parent
    other = pr(d, 2015, 2016)
    with netCDF4.Dataset(other, "a") as ds:
        ds["time"].units = "days since 2014-12-31"
        ds["time"][:] = ds["time"][:] + 1
        ds["time_bnds"][:] = ds["time_bnds"][:] + 1
    out = tmp_path / "t.zarr"
    report = virtualize.virtualize([*pile[:2], other], out, join=join)
    assert any("re-expressed" in n for n in report.notes)
    ds = xr.open_dataset(out, engine="virtualize", mask_and_scale=False, decode_times=False)
    assert ds.time.attrs["units"] == "days since 2014-12-31"
    assert_same(ds.time.values, raw([other], "time"), "time")
    assert_same(ds.time_bnds.values, raw([other], "time_bnds"), "time_bnds")
    assert_same(ds.time.values, raw(pile[:2], "time") + 1, "time")  # tas', re-expressed
    assert_same(ds.pr.values, raw([other], "pr"), "pr")
    assert_same(ds.tas.values, raw(pile[:2], "tas"), "tas")
    with netCDF4.Dataset(other, "a") as ds:
        ds["time"].calendar = "noleap"
    report = virtualize.check([*pile[:2], other], join=join)
    p = next(p for p in report.problems if p.kind == "attribute-drift")
    assert p.loc.file == str(other) and p.loc.variable == "time"


def test_append_with_a_differing_global_attribute_drops_it_as_a_rebuild(case, tmp_path):
    files = copies(case("months2024")[:3], tmp_path / "m")
    for i, f in enumerate(files):
        with netCDF4.Dataset(f, "a") as ds:
            ds.history = "first run" if i < 2 else "second run"
    out = tmp_path / "g.zarr"
    virtualize.virtualize(files[:2], out)
    with rectilinear():
        assert virtualize.open(out).attrs["history"] == "first run"
    report = virtualize.append(out, files[2:])
    assert not any("scanning only" in n for n in report.notes)
    with rectilinear():
        assert "history" not in virtualize.open(out).attrs
    # then files whose history differs again, or repeats the last file's (the cube's
    # older files still disagree): appended by the fast path, the cube as a full build
    for i, history in ((3, "third run"), (4, "third run")):
        more = copies(case("months2024")[i:i + 1], tmp_path / "m")
        with netCDF4.Dataset(more[0], "a") as ds:
            ds.history = history
        assert any("scanning only" in n for n in virtualize.append(out, more).notes)
        with rectilinear():
            assert "history" not in virtualize.open(out).attrs
    assert "history" not in virtualize.check(sorted((tmp_path / "m").iterdir())).plan.groups[""]


def test_merge_on_an_executor_plans_alike(pile):
    """Scanned as tasks of an executor (the files' inventories come back), planned here:
    the same merged plan."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        report = virtualize.check(pile, executor=pool)
    local = virtualize.check(pile)
    assert report.ok and set(report.plan.arrays) == set(local.plan.arrays)
    for name, a in local.plan.arrays.items():
        b = report.plan.arrays[name]
        assert a.chunk_lengths == b.chunk_lengths
        assert (a.refs is None) == (b.refs is None)
        if a.refs is not None:
            assert np.array_equal(a.refs, b.refs)


def test_icechunk_references_a_scalar_at_its_chunk_key(pile, tmp_path):
    """A 0-d array's one chunk is at key `c`: referenced there, it reads as its value
    (before, it was set at index (0,) and read as the fill value)."""
    pytest.importorskip("icechunk")
    out = tmp_path / "s.icechunk"
    virtualize.virtualize(pile[:2], out)
    with rectilinear():
        assert virtualize.open(out)["height"][...] == 2.0


def test_join_outer_refuses_steps_falling_inside_a_chunk(pile):
    """pr's steps at 06:00 fall between tas's at 12:00: no absent chunk can be cut inside
    a tas chunk (located at the file and chunk)."""
    other = pr(pile[0].parent, 2015, 2016)
    with netCDF4.Dataset(other, "a") as ds:
        ds["time"][:] = ds["time"][:] - 0.25
    report = virtualize.check([*pile[:2], other], join="outer")
    bad = [p for p in report.problems if p.kind == "span-interleaved"]
    assert {p.loc.variable for p in bad} == {"tas", "pr"}
    tas_p = next(p for p in bad if p.loc.variable == "tas")
    assert tas_p.loc.file == str(pile[0]) and tas_p.loc.block == (0,)
    assert not report.ok


def test_outer_gap_of_a_variable_with_only_missing_value_is_refused(tmp_path):
    # tas declares missing_value but no _FillValue: its HDF5 fill is netCDF's default
    # (9.97e36), so absent chunks would read as that, which xarray does not mask (it masks
    # missing_value, 1e20): the gap would read as data. Refused, located, not silently.
    a = time_series_file(tmp_path / "tas.nc", "tas", np.arange(2) + 0.5, fill=None, missing_value=1e20)
    b = time_series_file(tmp_path / "pr.nc", "pr", np.arange(4) + 0.5)
    report = virtualize.check([a, b], join="outer")
    probs = fatal(report)
    assert [(p.kind, p.loc.variable, p.loc.file) for p in probs] == \
        [("no-fill-value", "tas", str(a))], probs
    assert "missing_value" in probs[0].message and "9.9692099" in probs[0].message


def test_outer_gap_with_missing_value_equal_to_the_fill_reads_masked(tmp_path):
    # the same, but the file's _FillValue is its missing_value: the gap reads as it
    a = time_series_file(tmp_path / "tas.nc", "tas", np.arange(2) + 0.5, fill=np.float32(1e20),
              missing_value=1e20)
    b = time_series_file(tmp_path / "pr.nc", "pr", np.arange(4) + 0.5)
    out = tmp_path / "c.zarr"
    virtualize.virtualize([a, b], out, join="outer")
    ds = xr.open_dataset(out, engine="virtualize")
    assert np.isnan(ds["tas"].values[2:]).all()
    assert ds["tas"].values[1, 1] == 101


def test_outer_union_keeps_steps_between_integer_ones(tmp_path):
    # tas counts whole days (int32), pr is at noon (float64): the union holds both, and
    # casting it to the first group's int32 made 0.5 into 0 (a traceback, or a time
    # coordinate with repeated steps). Given tas first, then the other way round.
    a = time_series_file(tmp_path / "tas.nc", "tas", np.arange(3), tdtype="i4")
    b = time_series_file(tmp_path / "pr.nc", "pr", np.arange(3) + 0.5)
    for order in ([a, b], [b, a]):
        out = tmp_path / f"c{len(list(tmp_path.iterdir()))}.json"
        report = virtualize.virtualize(order, out, join="outer")
        assert report.ok, report.problems
        for g in (virtualize.open(out), kerchunk_group(out)):
            np.testing.assert_array_equal(g["time"][:], [0, 0.5, 1, 1.5, 2, 2.5])
            tas, pr = g["tas"][:, 1], g["pr"][:, 1]
            np.testing.assert_array_equal(tas[0::2], [1, 101, 201])
            np.testing.assert_array_equal(pr[1::2], [1.5, 101.5, 201.5])
            assert (tas[1::2] == np.float32(1e20)).all() and (pr[0::2] == np.float32(1e20)).all()


def test_merged_cube_does_not_depend_on_the_order_files_are_given(tmp_path):
    # The cube's time units and --combine-attrs override's "first file's" attributes came
    # from the first group in the order given: the same pile, shuffled, made another cube
    # (tas in days, pr in hours).
    # Now the groups are ordered by their first step (then their first file's name): the
    # first file is the first in time, as in a concatenation.
    files = [time_series_file(tmp_path / "tas_b.nc", "tas", np.arange(3) + 3.5),
             time_series_file(tmp_path / "tas_a.nc", "tas", np.arange(3) + 0.5),
             time_series_file(tmp_path / "pr_2019.nc", "pr", (np.arange(6) + 0.5) * 24,
                   units="hours since 2019-01-01")]
    got = set()
    for order in (files, files[::-1], [files[2], files[0], files[1]]):
        report = virtualize.check(order, combine_attrs="override")
        assert report.ok, report.problems
        time = report.plan.arrays["time"]
        got.add((time.attrs["units"], report.plan.groups[""]["history"],
                 tuple(np.asarray(time.inline).tolist())))
    assert len(got) == 1, got
    # pr's first step (2019-01-01T12) ties tas_a's: the first file's name decides
    (units, history, _), = got
    assert history == "made pr_2019.nc" and units == "hours since 2019-01-01"


def test_variables_keeps_what_formula_terms_name(tmp_path):
    # CMIP's model-level variables (cl on lev): the vertical coordinate's formula_terms
    # (p0, a, b, ps, and a_bnds, b_bnds through lev_bnds') are needed to compute pressure;
    # --variables cl dropped them.
    def write_cl(path, var, t0):
        with netCDF4.Dataset(path, "w") as ds:
            ds.createDimension("time", None)
            ds.createDimension("lev", 2)
            ds.createDimension("bnds", 2)
            t = ds.createVariable("time", "f8", ("time",))
            t.units = "days since 2019-01-01"
            t[:] = [t0 + 0.5, t0 + 1.5]
            lev = ds.createVariable("lev", "f8", ("lev",))
            lev.standard_name = "atmosphere_hybrid_sigma_pressure_coordinate"
            lev.formula_terms = "p0: p0 a: a b: b ps: ps"
            lev.bounds = "lev_bnds"
            lev[:] = [0.9, 0.5]
            lb = ds.createVariable("lev_bnds", "f8", ("lev", "bnds"))
            lb.formula_terms = "p0: p0 a: a_bnds b: b_bnds ps: ps"
            lb[:] = [[1.0, 0.8], [0.8, 0.2]]
            for n, dims, val in (("p0", (), 1e5), ("a", ("lev",), [0.1, 0.2]),
                                 ("b", ("lev",), [0.8, 0.3]),
                                 ("a_bnds", ("lev", "bnds"), [[0, 0.1], [0.1, 0.3]]),
                                 ("b_bnds", ("lev", "bnds"), [[1, 0.7], [0.7, 0.1]])):
                ds.createVariable(n, "f8", dims)[...] = val
            ps = ds.createVariable("ps", "f4", ("time",), fill_value=np.float32(1e20))
            ps[:] = [1e5, 1.01e5]
            v = ds.createVariable(var, "f4", ("time", "lev"), fill_value=np.float32(1e20))
            v[:] = [[1, 2], [3, 4]]
            other = ds.createVariable("orog", "f4", ())
            other[...] = 5
        return path

    files = [write_cl(tmp_path / "cl_1.nc", "cl", 0), write_cl(tmp_path / "cl_2.nc", "cl", 2)]
    report = virtualize.check(files, variables=["cl"])
    assert report.ok, report.problems
    kept = set(report.plan.arrays)
    assert {"cl", "time", "lev", "lev_bnds", "p0", "a", "b", "ps", "a_bnds",
            "b_bnds"} <= kept, kept
    assert "orog" not in kept


def test_append_to_a_selected_cube_leaves_out_the_other_variables_files(tmp_path):
    # A cube of --variables tas from a tas + pr pile (pr's files left out with a note):
    # appending the next tas and pr files (all of a day's new files, as a cron job gives
    # them) was refused (missing-variable, coordinate-not-increasing) where a full build
    # leaves pr's out again.
    d = tmp_path / "pile"
    d.mkdir()
    tas = [time_series_file(d / f"tas_{i}.nc", "tas", np.arange(3) + 3 * i + 0.5, chunk=3)
           for i in range(3)]
    pr = [time_series_file(d / f"pr_{i}.nc", "pr", np.arange(6) + 6 * i + 0.5, chunk=3) for i in range(2)]
    out = tmp_path / "c.zarr"
    virtualize.virtualize([*tas[:2], pr[0]], out, variables=["tas"])
    report = virtualize.append(out, [tas[2], pr[1]])
    assert report.ok, report.problems
    assert any("left out 1 file(s)" in n and str(pr[1]) in n for n in report.notes), report.notes
    g = virtualize.open(out)
    assert "pr" not in g
    want = np.concatenate([netCDF4.Dataset(f)["tas"][:].data for f in tas])
    np.testing.assert_array_equal(g["tas"][:], want)
    np.testing.assert_array_equal(g["time"][:], np.arange(9) + 0.5)
    full = virtualize.check([*tas, *pr], variables=["tas"])
    assert [s.path for s in full.plan.sources] == [str(f) for f in tas]


@pytest.mark.parametrize("cal0, cal1", [("standard", "gregorian"), ("noleap", "365_day"),
                                         (None, "Standard")])
def test_calendar_aliases_are_the_same_calendar(tmp_path, cal0, cal1):
    """CF's calendar aliases (and no calendar: the standard one) mean one calendar: a merge
    and a plain stack accept them, with their times re-expressed where the units differ."""
    a = time_series_file(tmp_path / "tas.nc", "tas", np.arange(3) + 0.5)
    b = time_series_file(tmp_path / "pr.nc", "pr", np.arange(3) + 0.5)
    c = time_series_file(tmp_path / "tas2.nc", "tas", np.arange(3) + 3.5)
    for f, cal in ((a, cal0), (b, cal1), (c, cal1)):
        with netCDF4.Dataset(f, "a") as ds:
            if cal is None:
                if "calendar" in ds["time"].ncattrs():
                    ds["time"].delncattr("calendar")
            else:
                ds["time"].calendar = cal
    with netCDF4.Dataset(c, "a") as ds:  # another origin: re-expressed in tas.nc's units
        ds["time"].units = "hours since 2019-01-01"
        ds["time"][:] = (np.arange(3) + 3.5) * 24
    report = virtualize.check([a, b])
    assert report.ok, report.problems
    report = virtualize.check([a, c])
    assert report.ok, report.problems
    out = tmp_path / "stack.zarr"
    virtualize.virtualize([a, c], out)
    ds = virtualize.open(out)
    np.testing.assert_array_equal(np.asarray(ds["time"][:]), np.arange(6) + 0.5)
    # a calendar that is another one stays refused
    with netCDF4.Dataset(c, "a") as d:
        d["time"].calendar = "360_day"
    assert not virtualize.check([a, c]).ok
