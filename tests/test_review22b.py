"""Review of issue 22 (hypercubes) as a climate / NWP user: --join outer with missing cells
where the files carry per-cell scalars (CMIP's realization, a forecast's reference time),
and several missing cells at once."""

from __future__ import annotations

import datetime as dt

import make_hypercube as mh
import netCDF4
import numpy as np
import pytest

import virtualize

from helpers import assert_same, kerchunk_group

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
        t0, t1 = mh.day(dt.date(y, 1, 1)), mh.day(dt.date(y + 1, 1, 1))
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


def _forecast(root, skip):
    """runs x members x steps, one file a (run, member); scalars `ref` (by run) and `mem`
    (by member), each with a fill value."""
    files, want = [], {}
    for k in range(3):
        rt = dt.datetime(2024, 1, 1) + dt.timedelta(hours=6 * k)
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
    files, want = _forecast(tmp_path / "fc", {(1, 1)})
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
    files, _ = _forecast(tmp_path / "fc", {(2, 0)})
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
