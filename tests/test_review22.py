"""Review of issue 22's merge (plan/merge.py) as a new user from the climate field: the bugs
found, each pinned by a test that failed before its fix."""

from __future__ import annotations

import netCDF4
import numpy as np
import pytest
import xarray as xr

import virtualize

from helpers import kerchunk_group


def write(path, var, days, *, tdtype="f8", units="days since 2019-01-01", chunk=1,
          fill: object = np.float32(1e20), missing_value=None, history=None):
    """`var`(time, x) over the given time values (netCDF4-python); data = 100 * step index
    + x (+ 0.5 for pr), so a value shows where it came from."""
    with netCDF4.Dataset(path, "w") as ds:
        ds.createDimension("time", None)
        ds.createDimension("x", 2)
        ds.history = history or f"made {path.name}"
        t = ds.createVariable("time", tdtype, ("time",))
        t.units, t.calendar = units, "standard"
        t[:] = np.asarray(days)
        kw = {"fill_value": fill} if fill is not None else {}
        v = ds.createVariable(var, "f4", ("time", "x"), chunksizes=(chunk, 2), zlib=True, **kw)
        if missing_value is not None:
            v.missing_value = np.float32(missing_value)
        v.units = "K"
        n = len(days)
        v[:] = (np.arange(n)[:, None] * 100 + np.arange(2)[None, :]
                + (0.5 if var == "pr" else 0)).astype("f4")
    return path


def fatal(report):
    return [p for p in report.problems if p.fatal]


def test_outer_gap_of_a_variable_with_only_missing_value_is_refused(tmp_path):
    # tas declares missing_value but no _FillValue: its HDF5 fill is netCDF's default
    # (9.97e36), so absent chunks would read as that, which xarray does not mask (it masks
    # missing_value, 1e20): the gap would read as data. Refused, located, not silently.
    a = write(tmp_path / "tas.nc", "tas", np.arange(2) + 0.5, fill=None, missing_value=1e20)
    b = write(tmp_path / "pr.nc", "pr", np.arange(4) + 0.5)
    report = virtualize.check([a, b], join="outer")
    probs = fatal(report)
    assert [(p.kind, p.loc.variable, p.loc.file) for p in probs] == \
        [("no-fill-value", "tas", str(a))], probs
    assert "missing_value" in probs[0].message and "9.9692099" in probs[0].message


def test_outer_gap_with_missing_value_equal_to_the_fill_reads_masked(tmp_path):
    # the same, but the file's _FillValue is its missing_value: the gap reads as it
    a = write(tmp_path / "tas.nc", "tas", np.arange(2) + 0.5, fill=np.float32(1e20),
              missing_value=1e20)
    b = write(tmp_path / "pr.nc", "pr", np.arange(4) + 0.5)
    out = tmp_path / "c.zarr"
    virtualize.virtualize([a, b], out, join="outer")
    ds = xr.open_dataset(out, engine="virtualize")
    assert np.isnan(ds["tas"].values[2:]).all()
    assert ds["tas"].values[1, 1] == 101


def test_outer_union_keeps_steps_between_integer_ones(tmp_path):
    # tas counts whole days (int32), pr is at noon (float64): the union holds both, and
    # casting it to the first group's int32 made 0.5 into 0 (a traceback, or a time
    # coordinate with repeated steps). Given tas first, then the other way round.
    a = write(tmp_path / "tas.nc", "tas", np.arange(3), tdtype="i4")
    b = write(tmp_path / "pr.nc", "pr", np.arange(3) + 0.5)
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
    files = [write(tmp_path / "tas_b.nc", "tas", np.arange(3) + 3.5),
             write(tmp_path / "tas_a.nc", "tas", np.arange(3) + 0.5),
             write(tmp_path / "pr_2019.nc", "pr", (np.arange(6) + 0.5) * 24,
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
    tas = [write(d / f"tas_{i}.nc", "tas", np.arange(3) + 3 * i + 0.5, chunk=3)
           for i in range(3)]
    pr = [write(d / f"pr_{i}.nc", "pr", np.arange(6) + 6 * i + 0.5, chunk=3) for i in range(2)]
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


def test_a_refused_mosaic_over_time_shows_its_missing_tiles_as_absent(tmp_path):
    # A missing tile of a mosaic over time is never refused (it reads as the fill value);
    # when the mosaic is refused for another reason, the layout called its missing cells
    # "refused", sending the user after the wrong problem.
    import tifffile

    from virtualize.report import format_text, to_html

    import make_tiff

    def tile(name, col, dtype):
        data = np.arange(64 * 64, dtype=dtype).reshape(64, 64)
        tags = make_tiff.geotags(32633, (500000.0 + col * 10, 4000000.0), 10.0)
        tifffile.imwrite(tmp_path / name, data, tile=(32, 32), compression="zlib",
                         extratags=tags)
        return tmp_path / name

    files = [tile("a_20240101.tif", 0, "u2"), tile("b_20240101.tif", 64, "u2"),
             tile("a_20240102.tif", 0, "u1")]  # (another dtype: refused)
    report = virtualize.check_mosaic(files, concat_dim="time")
    assert not report.ok
    assert any(c.path is None for c in report.plan.layout.cells)
    text = format_text(report, verbose=True)
    assert "missing cells (1, absent chunks, read as the fill value)" in text
    assert "missing cells (1, refused)" not in text
    assert "; refused" not in to_html(report)


@pytest.mark.parametrize("cal0, cal1", [("standard", "gregorian"), ("noleap", "365_day"),
                                         (None, "Standard")])
def test_calendar_aliases_are_the_same_calendar(tmp_path, cal0, cal1):
    """CF's calendar aliases (and no calendar: the standard one) mean one calendar: a merge
    and a plain stack accept them, with their times re-expressed where the units differ."""
    a = write(tmp_path / "tas.nc", "tas", np.arange(3) + 0.5)
    b = write(tmp_path / "pr.nc", "pr", np.arange(3) + 0.5)
    c = write(tmp_path / "tas2.nc", "tas", np.arange(3) + 3.5)
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


def test_hypercube_missing_cell_of_a_variable_without_fill_is_refused(tmp_path):
    files = []
    for member, parts in (("r1", ((0, "a"), (3, "b"))), ("r2", ((0, "a"),))):
        for t0, part in parts:
            f = write(tmp_path / f"tas_{member}_{part}.nc", "tas", np.arange(3) + t0 + 0.5,
                      chunk=3, fill=None)
            with netCDF4.Dataset(f, "a") as ds:
                ds.variant_label = member
            files.append(f)
    report = virtualize.check(files, concat_dims=["member", "time"],
                              coords={"member": "attr:variant_label"}, join="outer")
    assert [p.kind for p in fatal(report)] == ["no-fill-value"], report.problems
