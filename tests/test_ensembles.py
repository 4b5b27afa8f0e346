"""Ensembles as modelling centres publish them (issue 30), each built exactly — every
variable equal to what `xarray.open_mfdataset` shows for the same files — or refused with a
true reason: per-file time units (MPI-GE), members split differently in time and grid
variables without time (CESM-LE ocean), members starting later (CESM-LE's 1850 / 1920),
members starting at different months in other units (CMIP6), a scalar label named like a
dimension (IPSL land); `--compat override`. Fixtures: fixtures/make_ensembles.py.

The reference: per member, `open_mfdataset(its files, combine="by_coords")` (a member's
files are one time series); the members then concatenated along `member` as
`combine_nested` concatenates its outer level (join outer; a variable without time is
concatenated only when it differs between members, `data_vars="different"`). Nested
lists cannot describe members split into different numbers of files, so the members are
combined by `xr.concat` over the per-member datasets.
"""

from __future__ import annotations

import json
import re
import warnings

import make_ensembles as me
import netCDF4
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import virtualize
from virtualize.cli import main

from helpers import kerchunk_group

MPI = dict(concat_dims=["member", "time"], coords={"member": r"name:_r(\d{3})i"})
CESM = dict(concat_dims=["member", "time"], coords={"member": r"name:f09_g16\.(\d{3})\."})
CMIP6 = dict(concat_dims=["member", "time"], coords={"member": "attr:variant_label"})


def _mpi_member(path) -> int:
    return int(re.search(r"_r(\d{3})i", str(path)).group(1))


def _cesm_member(path) -> int:
    return int(re.search(r"f09_g16\.(\d{3})\.", str(path)).group(1))


def _cmip6_member(path) -> str:
    return re.search(r"_(r\d+i1p1f1)_", str(path)).group(1)


def reference(files, member, data_vars="different", compat="equals") -> xr.Dataset:
    """What xarray shows for the pile: each member's files by open_mfdataset, the members
    concatenated along a new `member` axis (values decoded: times as dates)."""
    by: dict = {}
    for f in files:
        by.setdefault(member(f), []).append(str(f))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parts = [xr.open_mfdataset(sorted(fs), combine="by_coords", data_vars="minimal",
                                   coords="minimal", compat="override").load()
                 for _, fs in sorted(by.items())]
        ds = xr.concat(parts, dim="member", join="outer", data_vars=data_vars,
                       coords="minimal", compat=compat)
    return ds.assign_coords(member=sorted(by))


def opened(cube) -> xr.Dataset:
    """The cube as xarray opens it with default arguments (it must open, and read)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return xr.open_dataset(cube, engine="virtualize").load()


def _values(a) -> np.ndarray:
    v = np.asarray(a)
    if v.dtype.kind == "S":
        v = np.char.decode(v, "utf-8")
    if v.dtype.kind in "TU":
        v = np.asarray(v.tolist(), dtype=object)
    return v


def same(got: xr.DataArray, want: xr.DataArray, what: str) -> None:
    assert got.dims == want.dims, f"{what}: dims {got.dims} != {want.dims}"
    a, b = _values(got.values), _values(want.values)
    assert a.shape == b.shape, f"{what}: shape {a.shape} != {b.shape}"
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        assert a.dtype == b.dtype, f"{what}: dtype {a.dtype} != {b.dtype}"
        assert np.array_equal(a, b, equal_nan=True), f"{what}: values differ"
    else:
        assert np.array_equal(a, b), f"{what}: values differ"


def assert_like(cube, want: xr.Dataset, union_bounds=()) -> xr.Dataset:
    """Every variable of `want` in the cube, equal (times decoded). `union_bounds`: bounds
    xarray stacks along member after its outer join (each member's, NaN where it has no
    step); the cube holds them once over the union: equal to every member's where it has
    them, and to some member's at every step."""
    got = opened(cube)
    assert set(got.variables) == set(want.variables), \
        (set(got.variables) ^ set(want.variables))
    for name in want.variables:
        if name in union_bounds:
            stacked = want[name].values
            have = ~pd.isnull(stacked).any(axis=tuple(range(2, stacked.ndim)))
            mine = got[name].values
            for m in range(stacked.shape[0]):
                assert np.array_equal(mine[have[m]], stacked[m][have[m]]), (name, m)
            assert have.any(axis=0).all()
            continue
        same(got[name], want[name], name)
    return got


# -- per-file time units -------------------------------------------------------------

@pytest.mark.parametrize("join", ["exact", "outer"])
def test_per_file_time_units_place_the_cells_by_re_expressed_time(tmp_path, join):
    """MPI-GE: every yearly file counts hours since its own start, so each file's first
    value is 743.25: the cells were placed by it (`duplicate-cell ... (member=1,
    time=1850-01-31T23:15 .. 1850-12-31T23:15): two files at one place of the grid`)."""
    files = me.mpi_ge(tmp_path / "mpi")
    with netCDF4.Dataset(files[1]) as nc:  # (the layout: the second year in its own units)
        assert nc["time"].units == "hours since 1851-01-01 00:00:00" and nc["time"][0] == 743.25
    cube = tmp_path / f"mpi_{join}.zarr"
    report = virtualize.virtualize(files, cube, join=join, **MPI)
    assert report.ok, report.problems
    got = assert_like(cube, reference(files, _mpi_member))
    assert got["tas"].dims == ("member", "time", "lat", "lon")
    assert got["tas"].shape == (3, 36, me.NLAT, me.NLON)
    assert str(got["time"].values[12])[:16] == "1851-01-31T23:15"
    for m in me.MPI_MEMBERS:  # (the values say where they are: member, month)
        assert np.array_equal(got["tas"].sel(member=m).values, me.values(m, 0, 36))


# -- members split differently in time ------------------------------------------------

@pytest.mark.parametrize("storage", ["zlib", "contiguous"])
def test_members_split_differently_in_time(tmp_path, storage):
    """CESM-LE: members 001-003 in 2006-2007 + 2008 files, 004 in one 2006-2008 file. A
    cell is not a file: one stack per member; the grid variables (ANGLE, TAREA, TLAT,
    TLONG, dz), char labels (moc_components, transport_regions, sector) and constants the
    same everywhere are held once, never stacked."""
    files = me.cesm_le(tmp_path / "cesm", me.SPLIT, storage=storage)
    cube = tmp_path / "cesm.zarr"
    report = virtualize.virtualize(files, cube, **CESM)
    assert report.ok, report.problems
    got = assert_like(cube, reference(files, _cesm_member))
    for name in ("ANGLE", "TAREA", "TLAT", "TLONG"):
        assert got[name].dims == ("nlat", "nlon"), name
    assert got["moc_components"].dims == ("moc_comp",)
    assert list(got["moc_components"].values) == me.MOC_COMPONENTS
    assert got["SHF"].shape == (4, 36, me.NLAT, me.NLON)
    for m in (1, 2, 3, 4):
        assert np.array_equal(got["SHF"].sel(member=m).values, me.values(m, 0, 36))
    lengths = report.plan.arrays["SHF"].chunk_lengths[1]
    # one grid for every member: contiguous files are one block each, member 4's cut at
    # 2008 where the others' files meet (exact byte ranges of its uncompressed block)
    assert lengths == ((24, 12) if storage == "contiguous" else (1,) * 36)
    if storage == "contiguous":
        assert any("cut at every cell's chunk edges" in n for n in report.notes)
        # the cut byte ranges as fsspec + zarr read them (no virtualize code)
        refs = tmp_path / "cesm.json"
        assert virtualize.virtualize(files, refs, **CESM).ok
        shf = kerchunk_group(refs)["SHF"][...]
        for m in (1, 2, 3, 4):
            assert np.array_equal(shf[m - 1], me.values(m, 0, 36)), m


def test_a_compressed_block_an_edge_falls_inside_is_refused_located(tmp_path):
    """Member 004 stores SHF in 9-month compressed chunks, the others in 12: the union of
    edges cuts 001's first chunk (months 0..11) at 9, which a compressed block cannot be."""
    files = me.cesm_le(tmp_path / "cesm", me.SPLIT, time_chunk={1: 12, 2: 12, 3: 12, 4: 9})
    cube = tmp_path / "no.zarr"
    with pytest.raises(virtualize.VirtualizeError) as e:
        virtualize.virtualize(files, cube, **CESM)
    assert not cube.exists()
    [p] = e.value.problems
    assert (p.kind, p.loc.file, p.loc.variable, p.loc.axis, p.loc.block) == \
        ("blocks-differ", str(files[0]), "SHF", "time", (0,))
    assert "(time steps 0..11) at the cell member=1" in p.message
    assert "compressed" in p.message and "cut at step 9 (time=2006-11-01)" in p.message
    assert "where the chunks of member=4 end" in p.message


# -- members covering different spans -------------------------------------------------

def test_members_covering_different_spans_join_outer(tmp_path):
    """CESM-LE: member 001 from 1850, the others from 1920. With --join outer the grid
    variables and labels (no time, no fill value) are held once: no `no-fill-value`."""
    files = me.cesm_le(tmp_path / "spans", me.SPANS)
    cube = tmp_path / "spans.zarr"
    report = virtualize.virtualize(files, cube, join="outer", **CESM)
    assert report.ok, report.problems
    want = reference(files, _cesm_member)
    got = assert_like(cube, want, union_bounds=("time_bound",))
    assert got["SHF"].shape == (3, 72 * 12, me.NLAT, me.NLON)
    late = (1920 - 1850) * 12
    assert np.isnan(got["SHF"].sel(member=2).values[:late]).all()
    assert np.array_equal(got["SHF"].sel(member=2).values[late:], me.values(2, late, 24))
    assert np.array_equal(got["SHF"].sel(member=1).values, me.values(1, 0, 72 * 12))
    assert got["TAREA"].dims == ("nlat", "nlon")
    assert any("member=2 holds time 1850-02-01 .. 1920-01-01 (840 step(s))" in n
               for n in report.notes), report.notes


def test_members_covering_different_spans_without_outer_name_the_steps(tmp_path):
    files = me.cesm_le(tmp_path / "spans", me.SPANS)
    report = virtualize.check(files, **CESM)
    assert not report.ok
    ps = [p for p in report.problems if p.fatal]
    assert [p.kind for p in ps] == ["missing-cell", "missing-cell"]
    for p, m in zip(ps, (2, 3)):  # (time is each month's end, as POP stamps it)
        assert p.message.startswith(f"no file for the cell member={m}, time=1850-02-01 .. "
                                    "1920-01-01 (840 step(s)), which member=1 has")


def _with_unfilled(files) -> None:
    """A time-varying variable written without a fill value, in every file."""
    for f in files:
        with netCDF4.Dataset(f, "a") as nc:
            v = nc.createVariable("HMXL", "f4", ("time", "nlat", "nlon"), fill_value=False)
            v[:] = np.ones(v.shape, "f4")


def test_members_in_other_calendars_are_never_joined(tmp_path):
    """A member counting time in another calendar: its numbers are other instants, so the
    union is not taken (it would misplace them): refused, naming the calendar."""
    files = me.cesm_le(tmp_path / "spans", me.SPANS)
    with netCDF4.Dataset(files[1], "a") as nc:
        nc["time"].calendar = "standard"
    report = virtualize.check(files, join="outer", **CESM)
    assert not report.ok
    drift = [p for p in report.problems if p.kind == "attribute-drift"]
    assert drift and drift[0].loc.variable == "time" and "'calendar' is 'standard' at " \
        "member=2, where it is 'noleap' at member=1" in drift[0].message


@pytest.mark.parametrize("how", [dict(drop=["HMXL"]), dict(variables=["SHF"])])
def test_drop_and_variables_under_join_outer(tmp_path, how):
    """The refusal's remedy (`--drop HMXL`) and `--variables` act under --join outer (they
    were ignored where cells are filled: the same refusals again)."""
    files = me.cesm_le(tmp_path / "spans", me.SPANS)
    _with_unfilled(files)
    bad = virtualize.check(files, join="outer", **CESM)
    ps = [p for p in bad.problems if p.fatal]
    assert {(p.kind, p.loc.variable) for p in ps} == {("no-fill-value", "HMXL")}
    assert all("--drop HMXL" in p.message for p in ps)
    cube = tmp_path / "ok.zarr"
    report = virtualize.virtualize(files, cube, join="outer", **CESM, **how)
    assert report.ok, report.problems
    got = opened(cube)
    assert "HMXL" not in got and got["SHF"].shape == (3, 864, me.NLAT, me.NLON)
    if "variables" in how:  # (SHF and what it needs: its coordinates, time bounds)
        assert "ANGLE" not in got and {"TLAT", "TLONG", "time_bound"} <= set(got.variables)


@pytest.mark.parametrize("mode", ["plain", "merge", "hypercube", "outer"])
def test_drop_in_every_mode(tmp_path, mode):
    files = me.cesm_le(tmp_path / "c", me.SPLIT)
    kw: dict = dict(drop=["TAREA", "moc_components"])
    if mode == "plain":
        files = [f for f in files if ".001." in f.name]
    elif mode == "merge":
        files = me.ipsl_lmon(tmp_path / "ipsl")
        kw = dict(drop=["type"])
    else:
        kw.update(CESM, join="outer" if mode == "outer" else "exact")
    cube = tmp_path / "c.zarr"
    report = virtualize.virtualize(files, cube, **kw)
    assert report.ok, report.problems
    got = opened(cube)
    assert not set(kw["drop"]) & set(got.variables)
    assert len(got.data_vars) >= 2


# -- members starting at different months, in other units -----------------------------

def test_members_starting_at_different_months_in_other_units(tmp_path):
    """r2i1p1f1 from 2015-01 in days since 1850, r9i1p1f1 from 2015-03 in days since
    2015-03-01: refused as `shape-differs length 4 along 'time' differs at
    member=r9i1p1f1 than at member=r2i1p1f1 (2)`. Exact: the months r9 lacks, named;
    outer: built, r9's January and February the fill value."""
    files = me.cmip6_months(tmp_path / "cmip6")
    report = virtualize.check(files, **CMIP6)
    [p] = [p for p in report.problems if p.fatal]
    assert p.kind == "missing-cell" and p.message.startswith(
        "no file for the cell member='r9i1p1f1', time=2015-01-16T12:00:00 .. 2015-02-15 "
        "(2 step(s)), which member='r2i1p1f1' has")
    cube = tmp_path / "outer.zarr"
    report = virtualize.virtualize(files, cube, join="outer", **CMIP6)
    assert report.ok, report.problems
    got = assert_like(cube, reference(files, _cmip6_member), union_bounds=("time_bnds",))
    tas = got["tas"].sel(member="r9i1p1f1").values
    assert np.isnan(tas[:2]).all() and np.array_equal(tas[2:], me.values(9, 2, 10))
    assert float(got["height"]) == 2.0 and got["height"].dims == ()


# -- a scalar label named like a dimension --------------------------------------------

@pytest.mark.parametrize("pft_coordinate", [False, True])
def test_label_named_like_a_dimension(tmp_path, pft_coordinate):
    """IPSL land: cropFrac's scalar label `type` beside landCoverFrac's `type` axis. The
    cube was written and xarray could not open it (`dimension 'type' already exists as a
    scalar variable`), as xarray cannot merge the files either; with a `type(type)`
    coordinate xarray keeps it and silently loses cropFrac's label. Refused before
    anything is written, with the remedy; with it, the cube is what xarray shows without
    `type`."""
    files = me.ipsl_lmon(tmp_path / "ipsl", pft_coordinate=pft_coordinate)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if pft_coordinate:
            shown = xr.open_mfdataset(files, combine="by_coords")
            assert shown["type"].dims == ("type",) and "type" not in shown["cropFrac"].coords
        else:
            with pytest.raises(ValueError, match="'type' already exists as a scalar variable"):
                xr.open_mfdataset(files, combine="by_coords")
    cube = tmp_path / "no.zarr"
    with pytest.raises(virtualize.VirtualizeError) as e:
        virtualize.virtualize(files, cube)
    assert not cube.exists()
    [p] = e.value.problems
    assert p.loc.variable == "type" and p.remedy == "--drop type"
    assert p.kind == ("differs-between-files" if pft_coordinate else "dimension-clash")
    cube = tmp_path / "ok.zarr"
    report = virtualize.virtualize(files, cube, drop=["type"])
    assert report.ok, report.problems
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = xr.open_mfdataset(files, combine="by_coords", drop_variables=["type"]).load()
    got = opened(cube)
    assert set(got.variables) == set(want.variables)
    for name in want.variables:
        same(got[name], want[name], name)


def test_label_alone_opens_as_xarray_shows_it(tmp_path):
    files = me.ipsl_lmon(tmp_path / "crop", variables=["cropFrac"])
    cube = tmp_path / "crop.zarr"
    assert virtualize.virtualize(files, cube).ok
    got = opened(cube)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = xr.open_mfdataset(files, combine="by_coords").load()
    assert str(got["type"].values) == want["type"].values.item().decode() == "crops"
    same(got["cropFrac"], want["cropFrac"], "cropFrac")


# -- --compat override ----------------------------------------------------------------

def _differing_tarea(files, which) -> None:
    for f in files:
        if which(f):
            with netCDF4.Dataset(f, "a") as nc:
                nc["TAREA"][0, 0] = 1.0


def test_compat_override_in_a_stack(tmp_path):
    """One member's files whose TAREA differs: refused by default; with compat="override"
    the first file's, named in a note, as xarray's compat="override"."""
    files = [f for f in me.cesm_le(tmp_path / "c", me.SPLIT) if ".001." in f.name]
    _differing_tarea(files, lambda f: "200801" in f.name)
    bad = virtualize.check(files)
    [p] = [p for p in bad.problems if p.fatal]
    assert (p.kind, p.loc.variable, p.loc.file) == ("differs-between-files", "TAREA",
                                                    str(files[1]))
    cube = tmp_path / "o.zarr"
    report = virtualize.virtualize(files, cube, compat="override")
    assert report.ok, report.problems
    [note] = [n for n in report.notes if "--compat override" in n]
    assert note.startswith("'TAREA' differs between the files") and str(files[0]) in note
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = xr.open_mfdataset(files, combine="by_coords", data_vars="minimal",
                                 coords="minimal", compat="override").load()
    got = opened(cube)
    for name in want.variables:
        same(got[name], want[name], name)
    assert json.loads((cube / "virtualize.json").read_text())["recipe"]["compat"] == "override"
    # append re-plans with the recorded compat: a third file whose TAREA differs too
    more = me.cesm_le(tmp_path / "more", {1: [((2009, 1), (2009, 12))]}, epoch=2006)
    _differing_tarea(more, lambda f: True)
    assert virtualize.append(cube, more).ok
    assert opened(cube)["SHF"].shape == (48, me.NLAT, me.NLON)
    # coordinates are never overridden
    files = [f for f in me.cesm_le(tmp_path / "tlat", me.SPLIT) if ".001." in f.name]
    with netCDF4.Dataset(files[1], "a") as nc:
        nc["TLAT"][0, 0] = 5.0
    bad = virtualize.check(files, compat="override")
    assert [(p.kind, p.loc.variable) for p in bad.problems if p.fatal] == \
        [("differs-between-files", "TLAT")]


def test_compat_override_across_cells(tmp_path):
    """Member 3's TAREA differs: by default it is member data (stacked, as xarray's
    data_vars="different"); with compat="override" the first member's, named."""
    files = me.cesm_le(tmp_path / "c", me.SPLIT)
    _differing_tarea(files, lambda f: ".003." in f.name)
    cube = tmp_path / "d.zarr"
    report = virtualize.virtualize(files, cube, **CESM)
    assert report.ok, report.problems
    got = assert_like(cube, reference(files, _cesm_member))
    assert got["TAREA"].dims == ("member", "nlat", "nlon")
    assert any(n.startswith("'TAREA' differs between the cells") for n in report.notes)
    cube = tmp_path / "o.zarr"
    report = virtualize.virtualize(files, cube, compat="override", **CESM)
    assert report.ok, report.problems
    assert any("'TAREA' differs between the files" in n and "--compat override" in n
               for n in report.notes)
    got = opened(cube)
    assert got["TAREA"].dims == ("nlat", "nlon")
    with netCDF4.Dataset(files[0]) as nc:
        assert np.array_equal(got["TAREA"].values, nc["TAREA"][...])
    # a coordinate (TLAT) is never overridden: differing, it stays the members' own
    files = me.cesm_le(tmp_path / "tlat", me.SPLIT)
    for f in files:
        if ".003." in f.name:
            with netCDF4.Dataset(f, "a") as nc:
                nc["TLAT"][0, 0] = 5.0
    cube = tmp_path / "t.zarr"
    report = virtualize.virtualize(files, cube, compat="override", **CESM)
    assert report.ok, report.problems
    got = opened(cube)
    assert got["TLAT"].dims == ("member", "nlat", "nlon") and got["TLAT"].values[2, 0, 0] == 5.0


def test_compat_on_the_command_line(tmp_path, capsys):
    files = [str(f) for f in me.cesm_le(tmp_path / "c", me.SPLIT) if ".001." in f.name]
    _differing_tarea(files, lambda f: "200801" in f)
    assert main(["check", *files]) == 1
    assert main(["check", *files, "--compat", "override", "-v"]) == 0
    assert "--compat override" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["check", *files, "--compat", "first"])
    assert e.value.code == 2


# -- the chunk-grid arithmetic, on plans ------------------------------------------------

def _plan_array(lengths, codecs, cells=None) -> "virtualize.model.ArrayPlan":
    from virtualize.model import MATERIALIZED, REF_DTYPE, ArrayPlan

    refs = np.zeros((len(lengths), 2), REF_DTYPE)
    offset = 0
    for j, n in enumerate(lengths):
        for c in range(2):
            size = n * 3 * 4  # rows of (3,) float32 per chunk column
            refs[j, c] = (1, 1000 + offset, size)
            offset += size
    for key in cells or {}:
        refs[key] = (MATERIALIZED, 0, 0)
    return ArrayPlan("v", np.dtype("f4"), (sum(lengths), 6), ("time", "x"),
                     (tuple(lengths), (3, 3)), codecs, None, {}, refs,
                     materialize=dict(cells or {}))


def test_cut_at_makes_exact_byte_ranges_and_regions():
    from virtualize.model import Cell
    from virtualize.plan.union import Misfit, cut_at

    raw = [{"name": "bytes", "configuration": {"endian": "little"}}]
    a = _plan_array([5, 7], raw, {(1, 1): Cell(0, "v", ((5, 12), (3, 6)))})
    b = cut_at(a, 0, {2, 5, 9, 12})
    assert b.chunk_lengths[0] == (2, 3, 4, 3)
    row = 3 * 4
    # chunk 0 (rows 0..4, column 0 at 1000) cut at 2: rows 0-1 and 2-4 of its bytes
    assert [tuple(b.refs[i, 0])[1:] for i in range(2)] == [(1000, 2 * row), (1000 + 2 * row, 3 * row)]
    # chunk 1 column 0 starts after chunk 0's two columns; cut at 9 (its row 4)
    start = 1000 + 2 * 5 * row
    assert [tuple(b.refs[i, 0])[1:] for i in (2, 3)] == [(start, 4 * row),
                                                         (start + 4 * row, 3 * row)]
    assert b.materialize == {(2, 1): Cell(0, "v", ((5, 9), (3, 6))),
                             (3, 1): Cell(0, "v", ((9, 12), (3, 6)))}
    z = [{"name": "bytes", "configuration": {"endian": "little"}},
         {"name": "zstd", "configuration": {"level": 1}}]
    assert cut_at(_plan_array([5, 7], z), 0, {2}) == Misfit("blocks-differ", 0, 2)
    assert cut_at(_plan_array([5, 7], z), 0, {5, 12}).chunk_lengths[0] == (5, 7)  # (no cut)
