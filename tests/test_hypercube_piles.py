"""Issue 22's piles (fixtures/make_hypercube.py): the makers write what they document, and,
once the hypercube planner is merged, each pile becomes the cube the issue's Done-when asks
for, read back bit-identically (virtualize.open, xarray engine="virtualize", the kerchunk
export) — or is refused naming the missing member-year."""

from __future__ import annotations

import datetime as dt
import importlib.util
import inspect
import json

import make_hypercube as mh
import netCDF4
import numpy as np
import pytest
import tifffile

import virtualize

from helpers import assert_same, kerchunk_group, source_values

NTIME = sum(366 if y % 4 == 0 else 365 for y in mh.YEARS)  # 2015-2018: 1461 days


@pytest.fixture(scope="module")
def piles(tmp_path_factory):
    """Every case, built once for this module."""
    root = tmp_path_factory.mktemp("hypercube")
    return {name: mh.make(name, root) for name in mh.CASES}


def _by_name(paths):
    return {p.name: p for p in paths}


# -- the makers -----------------------------------------------------------------------

def test_cmip_pile_is_as_documented(piles):
    paths = piles["hc_cmip"]
    names = [p.name for p in paths]
    assert len(paths) == 18 and names[0] == "tas_day_MODEL_ssp585_r1i1p1f1_gn_20150101-20151231.nc"
    assert names[11] == "tas_day_MODEL_ssp585_r3i1p1f1_gn_20180101-20181231.nc"
    assert names[12:14] == ["pr_day_MODEL_ssp585_r1i1p1f1_gn_20150101-20161231.nc",
                            "pr_day_MODEL_ssp585_r1i1p1f1_gn_20170101-20181231.nc"]
    seen = {"history": set(), "creation_date": set(), "tracking_id": set()}
    chunks = set()
    for p in paths:
        var = p.name.split("_")[0]
        member = p.name.split("_")[4]
        m = mh.MEMBERS.index(member)
        start, end = (int(s[:4]) for s in p.stem.split("_")[-1].split("-"))
        t0 = mh.day(dt.date(start, 1, 1))
        n = mh.day(dt.date(end, 12, 31)) - t0 + 1
        with netCDF4.Dataset(p) as nc:
            assert nc.variant_label == member and int(nc["realization"][...]) == m + 1
            assert nc["realization"].dimensions == ()
            for k in seen:
                seen[k].add(nc.getncattr(k))
            t = nc["time"]
            assert t.units == mh.TIME_UNITS and t.calendar == "standard"
            assert nc.dimensions["time"].isunlimited()
            np.testing.assert_array_equal(t[:], np.arange(t0, t0 + n) + 0.5)
            np.testing.assert_array_equal(nc["time_bnds"][:], np.stack(
                [np.arange(t0, t0 + n), np.arange(t0, t0 + n) + 1], axis=1))
            assert nc["lat_bnds"].shape == (3, 2) and nc["lon_bnds"].shape == (4, 2)
            np.testing.assert_array_equal(nc["lat"][:], mh.LAT)
            v = nc[var]
            assert v.dimensions == ("time", "lat", "lon") and v.shape == (n, 3, 4)
            assert v.chunking() == [n, 3, 4] and v.filters()["zlib"]
            v.set_auto_maskandscale(False)
            assert_same(v[...], mh.cmip_values(var, m, t0, n), p.name)
            chunks.add(n)
            # (the values are exactly what the formula says, and 2015-2018 has no fill)
            assert int(v[0, 2, 3]) == m * 1_000_000 + t0 * 100 + 23
    assert chunks == {365, 366, 730, 731}  # the leap year, a chunk length per file
    assert all(len(s) == 18 for s in seen.values())  # differ in every file


def test_cmip_pile_without_one_member_year(piles):
    paths = piles["hc_cmip_missing"]
    names = {p.name for p in paths}
    assert len(paths) == 17
    assert "tas_day_MODEL_ssp585_r3i1p1f1_gn_20170101-20171231.nc" not in names
    assert "tas_day_MODEL_ssp585_r2i1p1f1_gn_20170101-20171231.nc" in names
    assert "pr_day_MODEL_ssp585_r3i1p1f1_gn_20170101-20181231.nc" in names


def test_ensemble_pile(piles):
    paths = piles["hc_ensemble"]
    assert [p.name for p in paths] == [f"tas_{m}.nc" for m in mh.MEMBERS]
    for m, p in enumerate(paths):
        with netCDF4.Dataset(p) as nc:
            assert nc.variant_label == mh.MEMBERS[m] and int(nc["realization"][...]) == m + 1
            np.testing.assert_array_equal(nc["time"][:], np.arange(10) + 0.5)
            assert_same(nc["tas"][...].data, mh.ensemble_values(m), p.name)


def test_forecast_pile(piles):
    paths = piles["hc_forecast"]
    assert [p.name for p in paths] == ["fc_2024010100.nc", "fc_2024010112.nc",
                                       "fc_2024010200.nc", "fc_2024010212.nc"]
    for i, p in enumerate(paths):
        with netCDF4.Dataset(p) as nc:
            run = mh.RUNS[i]
            assert nc.reference_time == run.isoformat()
            ref = nc["reference_time"]
            assert ref.dimensions == () and netCDF4.num2date(
                ref[...], ref.units, ref.calendar) == run
            np.testing.assert_array_equal(nc["step"][:], mh.STEPS)
            assert nc["t2m"].dimensions == ("step", "lat", "lon")
            assert_same(nc["t2m"][...].data, mh.forecast_values(i), p.name)


def test_tiles_over_time_pile(piles):
    paths = piles["hc_tiles_time"]
    assert len(paths) == 20 and paths[0].name == "tile_0_20240501.tif" \
        and paths[-1].name == "tile_3_20240505.tif"
    stack = np.zeros((5, *mh.TILE_SHAPE), dtype=np.uint32)
    for k, date in enumerate(mh.DATES):
        for i, (r0, c0, h, w) in enumerate(mh.TILES):
            p = _by_name(paths)[f"tile_{i}_{date:%Y%m%d}.tif"]
            with tifffile.TiffFile(p) as tf:
                page = tf.pages[0]
                assert page.shape == (h, w) and page.is_tiled and page.tilewidth == 32
                tie = page.tags["ModelTiepointTag"].value
                assert tie[3:5] == (mh.ORIGIN[0] + 10 * c0, mh.ORIGIN[1] - 10 * r0)
                assert page.tags["ModelPixelScaleTag"].value[:2] == (10.0, 10.0)
                data = page.asarray()
            assert_same(data, mh.tile_values(k, i), p.name)
            stack[k, r0:r0 + h, c0:c0 + w] = data
    assert_same(stack, mh.tiles_expected(), "the tiles stacked")
    assert len({int(stack[k, 0, 0]) for k in range(5)}) == 5  # each date its own values


def test_cli_builds_and_lists(tmp_path, capsys):
    assert mh.main([str(tmp_path), "--only", "hc_ensemble"]) == 0
    assert sorted(p.name for p in (tmp_path / "hc_ensemble").iterdir()) == \
        [f"tas_{m}.nc" for m in mh.MEMBERS]
    capsys.readouterr()
    assert mh.main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(mh.CASES)


# -- the cubes (run once the planner is merged) ---------------------------------------

def needs_hypercube():
    if importlib.util.find_spec("virtualize.plan.hypercube") is None:
        pytest.skip("planner for hypercubes not merged yet")


CMIP = dict(concat_dims=["member", "time"], coords={"member": "attr:variant_label"})


def cmip_source(paths, var: str) -> np.ndarray:
    """(member, time, lat, lon) as netCDF4 reads the files: each member's files along time."""
    per = [[p for p in paths if p.name.startswith(f"{var}_") and f"_{m}_" in p.name]
           for m in mh.MEMBERS]
    return np.stack([source_values(f, var, "time", ("time", "lat", "lon")) for f in per])


def roundtrip(paths, tmp_path, variables, members=mh.MEMBERS, **kw):
    """`paths` virtualized into a cube and a kerchunk export with `kw`, each of `variables`
    read back through virtualize.open, the export and xarray, compared bit for bit with
    netCDF4's reads of the files; returns the report and the xarray Dataset."""
    import xarray as xr

    cube, refs = tmp_path / "cube.zarr", tmp_path / "refs.json"
    report = virtualize.virtualize(paths, cube, **kw)
    virtualize.virtualize(paths, refs, **kw)
    assert report.ok
    g, k = virtualize.open(cube), kerchunk_group(refs)
    ds = xr.open_dataset(cube, engine="virtualize", mask_and_scale=False)
    for var in variables:
        want = cmip_source(paths, var)
        assert want.shape == (3, NTIME, 3, 4)
        assert_same(g[var][...], want, f"{var} through virtualize.open")
        assert_same(k[var][...], want, f"{var} through the kerchunk export")
        assert ds[var].dims == ("member", "time", "lat", "lon")
        assert_same(ds[var].values, want, f"{var} through xarray")
        assert_same(ds[var].sel(member=members[1]).values, want[1], f"{var} of {members[1]}")
    # the member coordinate is real and indexed; time is the files' days, decoded
    assert "member" in ds.indexes and list(ds.indexes["member"]) == members
    assert str(ds["time"].values[0])[:10] == "2015-01-01" and ds.sizes["time"] == NTIME
    lay = json.loads(report.to_json())["layout"]
    assert [a["dim"] for a in lay["axes"]] == ["member", "time"] and lay["missing"] == []
    assert lay["axes"][0]["labels"] == [str(m) for m in members] and lay["axes"][0]["new"]
    return report, ds


def test_cmip_tas_becomes_member_time_cube_read_back_bit_identically(piles, tmp_path):
    """The yearly tas files of 3 members (365/366-day chunks): tas(member, time, lat, lon),
    the members named by their scalar `realization` (--coord member=var:realization)."""
    needs_hypercube()
    paths = [p for p in piles["hc_cmip"] if p.name.startswith("tas_")]
    report, ds = roundtrip(paths, tmp_path, ["tas"], members=[1, 2, 3],
                           concat_dims=["member", "time"], coords={"member": "var:realization"})
    assert json.loads(report.to_json())["layout"]["shape"] == [3, 4]


def test_cmip_becomes_one_cube_read_back_bit_identically(piles, tmp_path):
    """The Done-when: tas in yearly files and pr in 2-year files, 3 members, one cube with
    tas(member, time, lat, lon) and pr(...), each on its own grid along time."""
    needs_hypercube()
    if importlib.util.find_spec("virtualize.plan.merge") is None:
        pytest.skip("merge of files holding different variables not merged yet")
    _, ds = roundtrip(piles["hc_cmip"], tmp_path, ["tas", "pr"], **CMIP)
    # each variable on its own grid along time: tas yearly (2016 a leap year), pr 2-yearly
    assert ds["tas"].encoding["preferred_chunks"]["time"] == (365, 366, 365, 365)
    assert ds["pr"].encoding["preferred_chunks"]["time"] in (731, (731, 730))  # (regular)
    # the per-member scalar `realization` differs between the members: stacked along
    # member (xarray's combine_nested); lat/lon and their bounds are shared
    assert ds["realization"].dims == ("member",)
    assert ds["realization"].values.tolist() == [1, 2, 3]
    assert ds["lat_bnds"].dims == ("lat", "bnds")


def test_a_missing_member_year_is_refused_naming_it(piles, tmp_path):
    needs_hypercube()
    paths = [p for p in piles["hc_cmip_missing"] if p.name.startswith("tas_")]
    with pytest.raises(virtualize.VirtualizeError) as e:
        virtualize.virtualize(paths, tmp_path / "gap.zarr", **CMIP)
    assert not (tmp_path / "gap.zarr").exists()
    named = [p for p in e.value.problems if p.fatal and "r3i1p1f1" in p.message
             and "2017" in p.message]
    assert named, [str(p) for p in e.value.problems]
    report = e.value.report
    if report is not None and report.plan is not None and report.plan.layout is not None:
        # the report's file grid marks it too
        text = report.to_text()
        assert "member='r3i1p1f1', time='2017" in text and "MISSING" in text


def test_tiles_over_five_dates_read_back_as_time_y_x(piles, tmp_path):
    if "concat_dim" not in inspect.signature(virtualize.mosaic).parameters:
        pytest.skip("mosaic over time (issue 22) not merged yet")
    paths = piles["hc_tiles_time"]
    cube, refs = tmp_path / "tiles.zarr", tmp_path / "tiles.json"
    report = virtualize.mosaic(paths, cube, concat_dim="time")
    virtualize.mosaic(paths, refs, concat_dim="time")
    assert report.ok
    want = mh.tiles_expected()
    for g, how in ((virtualize.open(cube), "virtualize.open"), (kerchunk_group(refs), "kerchunk")):
        name = next(n for n in g.array_keys() if g[n].ndim == 3)
        assert g[name].shape == (5, *mh.TILE_SHAPE)
        assert_same(g[name][...], want, f"tiles over time through {how}")


def test_check_shows_the_grid_and_its_missing_member_year(piles):
    """`check` of the pile without r3i1p1f1's 2017: its file grid in the text, the JSON and
    the HTML page, the missing cell marked at (member r3i1p1f1, 2017)."""
    needs_hypercube()
    paths = [p for p in piles["hc_cmip_missing"] if p.name.startswith("tas_")]
    report = virtualize.check(paths, drop=["realization"], **CMIP)
    assert not report.ok and report.plan is not None and report.plan.layout is not None
    text = report.to_text()
    assert "layout (member 3 × time 4 = 12 cell(s), 11 file(s), 1 missing):" in text
    row = next(line for line in text.splitlines() if line.startswith("    r3i1p1f1 "))
    assert row.split()[1:] == ["ok", "ok", "MISSING", "ok"]
    doc = json.loads(report.to_json())
    cells = doc["layout"]["missing_cells"]
    assert [c["index"] for c in cells] == [[2, 2]] and doc["layout"]["missing"] == [[2, 2]]
    assert cells[0]["coords"]["member"] == "r3i1p1f1" and "2017" in cells[0]["coords"]["time"]
    page = report.to_html()
    assert page.count('<rect class="missing"') == 1 and 'data-index="2,2"' in page


def stacked(paths, tmp_path, var: str, dims: tuple[str, ...], **kw):
    """`paths` (one file each along a new leading axis) virtualized with `kw`; `var`
    read back through virtualize.open, the kerchunk export and xarray equals netCDF4's
    reads of the files stacked; returns the xarray Dataset."""
    import xarray as xr

    cube, refs = tmp_path / "cube.zarr", tmp_path / "refs.json"
    assert virtualize.virtualize(paths, cube, **kw).ok
    virtualize.virtualize(paths, refs, **kw)
    want = np.stack([source_values([p], var, None, dims[1:]) for p in paths])
    assert_same(virtualize.open(cube)[var][...], want, f"{var} through virtualize.open")
    assert_same(kerchunk_group(refs)[var][...], want, f"{var} through the kerchunk export")
    ds = xr.open_dataset(cube, engine="virtualize", mask_and_scale=False)
    assert ds[var].dims == dims
    assert_same(ds[var].values, want, f"{var} through xarray")
    return ds


@pytest.mark.parametrize("coord,values", [
    ("attr:variant_label", mh.MEMBERS),
    (r"name:tas_(r\d+i1p1f1)\.nc", mh.MEMBERS),
    ("m1,m2,m3", ["m1", "m2", "m3"]),
    ("var:realization", [1, 2, 3]),
])
def test_ensemble_members_along_a_new_axis_by_each_coord_form(piles, tmp_path, coord, values):
    """One file per member: tas(member, time, lat, lon), the member coordinate from a
    global attribute, the file name, explicit values or the scalar `realization`; the
    other forms leave `realization` out (it differs per member)."""
    needs_hypercube()
    drop = [] if coord.startswith("var:") else ["realization"]
    ds = stacked(piles["hc_ensemble"], tmp_path, "tas", ("member", "time", "lat", "lon"),
                 concat_dims=["member"], coords={"member": coord}, drop=drop)
    assert "member" in ds.indexes and list(ds.indexes["member"]) == values
    assert_same(ds["tas"].sel(member=values[2]).values, mh.ensemble_values(2), "member 3")


def test_forecast_runs_stack_along_a_new_run_axis(piles, tmp_path):
    """Runs x lead times: each file holds its run's steps; t2m(run, step, lat, lon), the
    run named by its reference time (the attribute)."""
    needs_hypercube()
    ds = stacked(piles["hc_forecast"], tmp_path, "t2m", ("run", "step", "lat", "lon"),
                 concat_dims=["run"], coords={"run": "attr:reference_time"},
                 drop=["reference_time"])
    assert [str(v)[:19] for v in ds["run"].values] == [r.isoformat() for r in mh.RUNS]
    np.testing.assert_array_equal(ds["step"].values, mh.STEPS)


def test_forecast_runs_by_name_and_the_scalar_left_stacked(piles, tmp_path):
    """--coord run=name:fc_(DIGITS): YYYYMMDDHH in the names are dates; the scalar
    reference_time (differing per run) is stacked along run, reference_time(run)."""
    needs_hypercube()
    ds = stacked(piles["hc_forecast"], tmp_path, "t2m", ("run", "step", "lat", "lon"),
                 concat_dims=["run"], coords={"run": r"name:fc_(\d{10})\.nc"})
    assert list(ds["run"].values) == [np.datetime64(r, "ns") for r in mh.RUNS]
    assert ds["reference_time"].dims == ("run",)
    assert list(ds["reference_time"].values) == [np.datetime64(r, "ns") for r in mh.RUNS]


def test_forecast_run_from_the_reference_time_variable_keeps_its_units(piles, tmp_path):
    """--coord run=var:reference_time: the scalar is hours since 2024-01-01 (CF units);
    the run coordinate must keep that meaning (read by xarray as the runs' times), not
    become bare numbers."""
    needs_hypercube()
    ds = stacked(piles["hc_forecast"], tmp_path, "t2m", ("run", "step", "lat", "lon"),
                 concat_dims=["run"], coords={"run": "var:reference_time"})
    assert list(ds["run"].values) == [np.datetime64(r, "ns") for r in mh.RUNS]
    # the scalar's other attributes stay on the coordinate, its units as the encoding
    assert ds["run"].attrs["standard_name"] == "forecast_reference_time"
    assert ds["run"].encoding["units"] == "hours since 2024-01-01 00:00:00"
    assert "reference_time" not in ds.variables  # (it is the run coordinate now)


def test_join_outer_leaves_the_missing_member_year_absent(piles, tmp_path):
    """--join outer: r3i1p1f1's 2017 has no file; its cells are absent chunks reading as
    tas' fill value (1e20), every other value as the files hold it; the report says so."""
    needs_hypercube()
    paths = [p for p in piles["hc_cmip_missing"] if p.name.startswith("tas_")]
    cube = tmp_path / "outer.zarr"
    report = virtualize.virtualize(paths, cube, join="outer", drop=["realization"], **CMIP)
    assert report.ok and "absent chunks, read as the fill value" in report.to_text(verbose=True)
    got = virtualize.open(cube)["tas"][...]
    full = [p for p in piles["hc_cmip"] if p.name.startswith("tas_")]
    want = cmip_source(full, "tas")
    t0, t1 = mh.day(dt.date(2017, 1, 1)), mh.day(dt.date(2018, 1, 1))
    want[2, t0:t1] = np.float32(1e20)
    assert_same(got, want, "tas with r3i1p1f1's 2017 absent")


def test_cmip_attributes_are_combined_across_members(piles, tmp_path):
    """tracking_id / creation_date / history differ in every file: left out by default
    and named in a note, the first file's with override, refused with identical; what is
    the same everywhere (source_id) is kept; variant_label is the member coordinate's."""
    needs_hypercube()
    paths = [p for p in piles["hc_cmip"] if p.name.startswith("tas_")]
    cube = tmp_path / "tas.zarr"
    report = virtualize.virtualize(paths, cube, **CMIP)
    root = dict(virtualize.open(cube).attrs)
    assert root["source_id"] == mh.MODEL and "variant_label" not in root
    assert not {"tracking_id", "creation_date", "history"} & set(root)
    assert any("tracking_id" in n and "left out" in n for n in report.notes)
    report = virtualize.virtualize(paths, tmp_path / "o.zarr", combine_attrs="override", **CMIP)
    with netCDF4.Dataset(sorted(paths)[0]) as nc:
        first = nc.tracking_id
    assert dict(virtualize.open(tmp_path / "o.zarr").attrs)["tracking_id"] == first
    report = virtualize.check(paths, combine_attrs="identical", **CMIP)
    bad = [p for p in report.problems if p.kind == "attribute-conflict"]
    assert not report.ok and bad and all("variant_label" not in p.message for p in bad)


def test_members_given_as_one_stack_are_refused_with_the_hypercube_hint(piles):
    """A new user's first try, the members' files as one stack along time: refused (the
    same days in each member), the message naming the way through."""
    report = virtualize.check([p for p in piles["hc_cmip"] if p.name.startswith("tas_")])
    dup = [p for p in report.problems if p.kind == "duplicate-coordinate"]
    assert not report.ok and dup
    assert "--concat-dim NEW --concat-dim time --coord NEW=attr:variant_label" in dup[0].message
