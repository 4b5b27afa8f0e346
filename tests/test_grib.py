"""GRIB 1 and 2: every array read through the cube (virtualize.open, xarray's
engine="virtualize", the kerchunk JSON export read with fsspec + zarr) equals ecCodes'
values bit for bit (missing points NaN), coordinates as cfgrib arranges them; damaged
files refused, located (docs/grib.md). These tests read virtualize's layout
(`grib_layout="virtualize"`, `--grib-layout virtualize`: shortName, `time` always an axis,
one group), whose names they use; cfgrib's, the default, is tests/test_grib_layout.py's."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import numpy as np
import pytest

import virtualize
from virtualize.codecs import load_eccodes
from virtualize.model import VirtualizeError

from helpers import assert_same, kerchunk_group, kerchunk_xarray

try:
    ec = load_eccodes()  # (after pyproj, as virtualize imports it: docs/grib.md, "Known issue")
except ImportError:
    pytest.skip("the Python package eccodes is not installed", allow_module_level=True)
xr = pytest.importorskip("xarray")
ROOT = Path(__file__).resolve().parents[1]
AXES = ("number", "time", "step", "level")
OLD = {"grib_layout": "virtualize"}  # (virtualize's layout: these tests' names)
OLD_FLAGS = ["--grib-layout", "virtualize"]


@pytest.fixture
def grib_case(case):
    return lambda name: case(f"grib_{name}" if not name.startswith("grib") else name)


def eccodes_messages(path) -> list[dict]:
    """Every field of the file as ecCodes reads it (its multi-field support on, as cfgrib
    reads: each field of a message of several its own handle): its keys and values (the
    points its bit-map marks missing NaN) in (y, x) order, in file order."""
    out = []
    with open(path, "rb") as f, _multi_support(f):
        while (h := ec.codes_grib_new_from_file(f)) is not None:
            try:
                values = ec.codes_get_values(h).astype(np.float64)
                if ec.codes_get(h, "bitmapPresent"):
                    values[ec.codes_get_array(h, "bitmap") == 0] = np.nan
                ec.codes_set(h, "stepUnits", 1)
                date, time = ec.codes_get(h, "dataDate"), ec.codes_get(h, "dataTime")
                out.append({
                    "shortName": ec.codes_get(h, "shortName"),
                    "typeOfLevel": ec.codes_get(h, "typeOfLevel"),
                    "stepType": ec.codes_get(h, "stepType"),
                    "number": ec.codes_get(h, "number") if ec.codes_is_defined(h, "number")
                    else 0,
                    "time": np.datetime64(dt.datetime(date // 10000, date // 100 % 100,
                                                      date % 100, time // 100, time % 100), "ns"),
                    "step": np.timedelta64(ec.codes_get(h, "endStep"), "h").astype("m8[ns]"),
                    "level": float(ec.codes_get(h, "level", float)),
                    "gridType": ec.codes_get(h, "gridType"),
                    "Ni": ec.codes_get(h, "Ni") if ec.codes_is_defined(h, "Ni") else None,
                    "Nj": ec.codes_get(h, "Nj") if ec.codes_is_defined(h, "Nj") else None,
                    "values": _yx(h, values),
                    "latitudes": _yx(h, _geo(h, "latitudes"), rows=False),
                    "longitudes": _yx(h, _geo(h, "longitudes"), rows=False),
                    "message": ec.codes_get_message(h),
                })
            finally:
                ec.codes_release(h)
    return out


@contextlib.contextmanager
def _multi_support(f):
    ec.codes_grib_multi_support_on()
    ec.codes_grib_multi_support_reset_file(f)  # (its state outlives a file: cfgrib's note)
    try:
        yield
    finally:
        ec.codes_grib_multi_support_reset_file(f)
        ec.codes_grib_multi_support_off()


def _yx(h, values, rows=True):
    """ecCodes' values (in the message's scanning order) in (y, x) order: points along
    columns (jPointsAreConsecutive) transposed, as ecCodes' own latitudes and longitudes
    place them; every second row of an alternating scan reversed (cfgrib's
    `get_values_in_order`; ecCodes' geo-iterator gives every row in the first row's
    direction, so its coordinates are not: `rows` False). Done here by ecCodes' keys
    alone, not virtualize's code."""
    if values is None or not ec.codes_is_defined(h, "Ni") or ec.codes_get(h, "Ni") in (0, None) \
            or ec.codes_get(h, "Ni") * ec.codes_get(h, "Nj") != values.size:
        return values
    ni, nj = ec.codes_get(h, "Ni"), ec.codes_get(h, "Nj")
    columns = ec.codes_is_defined(h, "jPointsAreConsecutive") and \
        ec.codes_get(h, "jPointsAreConsecutive")
    alternate = ec.codes_is_defined(h, "alternativeRowScanning") and \
        ec.codes_get(h, "alternativeRowScanning")
    grid = values.reshape((ni, nj) if columns else (nj, ni)).copy()
    if alternate and rows:
        grid[1::2, :] = grid[1::2, ::-1]
    return (grid.T if columns else grid).reshape(-1).copy()


def _geo(h, key):
    try:
        return ec.codes_get_array(h, key)
    except Exception:  # (ecCodes refuses a grid whose definition is inconsistent)
        return None


def expected(ds, path) -> dict[str, np.ndarray]:
    """Each data array of `ds` rebuilt from ecCodes' messages: every message placed at
    the cell its keys name along the array's coordinates; NaN where no message is."""
    want = {}
    msgs = eccodes_messages(path)
    for name, da in ds.data_vars.items():
        mine = [m for m in msgs if da.attrs["GRIB_shortName"] == m["shortName"] and
                da.attrs["GRIB_typeOfLevel"] == m["typeOfLevel"] and
                da.attrs["GRIB_stepType"] == m["stepType"] and
                m["values"].size == int(np.prod(da.shape[-1 if da.dims[-1] == "values"
                                                         else -2:]))]
        assert mine, name
        out = np.full(da.shape, np.nan)
        grid = 1 if da.dims[-1].startswith("values") else 2
        for m in mine:
            index = []
            for d in da.dims[:-grid]:
                key = next(k for k in AXES if d == k or d.startswith(k + "_") or
                           (k == "level" and (d == m["typeOfLevel"] or
                                              d.startswith(m["typeOfLevel"] + "_"))))
                index.append(int(np.nonzero(ds[d].values == m[key])[0][0]))
            out[tuple(index)] = m["values"].reshape(da.shape[-grid:])
        want[name] = out
    return want


def roundtrip(files, tmp_path, **kw):
    cube, refs = tmp_path / "cube.zarr", tmp_path / "cube.json"
    report = virtualize.virtualize(files, cube, **OLD, **kw)
    virtualize.virtualize(files, refs, **OLD, **kw)
    return report, virtualize.open(cube), kerchunk_group(refs)


@pytest.mark.parametrize("name", ["grib2_levels", "grib1_members", "reduced", "junk", "hole"])
def test_every_array_reads_like_eccodes(grib_case, tmp_path, name):
    path = grib_case(name)[0]
    report, g, k = roundtrip([path], tmp_path)
    assert report.ok, report.problems
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize")
    kx = kerchunk_xarray(tmp_path / "cube.json")
    want = expected(ds, path)
    assert want
    for var, w in want.items():
        assert_same(g[var][...], w, f"{name} {var}: virtualize.open")
        assert_same(ds[var].values, w, f"{name} {var}: xarray")
        assert_same(k[var][...], w, f"{name} {var}: kerchunk export")
        assert_same(kx[var].values, w, f"{name} {var}: kerchunk via xarray")
        assert g[var].dtype == np.float64 and np.isnan(g[var].fill_value)


def test_axes_and_coordinates_are_cfgribs(grib_case, tmp_path):
    (path,) = grib_case("grib2_levels")
    virtualize.virtualize([path], tmp_path / "c.zarr", **OLD)
    ds = xr.open_dataset(tmp_path / "c.zarr", engine="virtualize")
    assert ds["t"].dims == ("time", "step", "isobaricInhPa", "latitude", "longitude")
    assert ds["isobaricInhPa"].values.tolist() == [1000.0, 850.0, 500.0]  # cfgrib's order
    assert ds["step"].dtype == "m8[ns]"
    assert ds["step"].values.astype("m8[h]").astype(int).tolist() == [0, 6]
    assert ds["time"].values.tolist() == [np.datetime64("2007-03-23T12:00", "ns").astype(int)]
    assert ds["sp"].dims == ("time", "latitude", "longitude")  # one step, one level: scalars
    scalars = ds["sp"].attrs.get("coordinates", "").split() or \
        [c for c in ds["sp"].coords if ds[c].ndim == 0]
    steps = [c for c in scalars if c.startswith("step")]
    assert steps and ds[steps[0]].values == np.timedelta64(6, "h")
    m = eccodes_messages(path)[0]
    lat = m["latitudes"].reshape(m["Nj"], m["Ni"])
    lon = m["longitudes"].reshape(m["Nj"], m["Ni"])
    assert_same(ds["latitude"].values, lat[:, 0], "latitude: ecCodes'")
    assert_same(ds["longitude"].values, lon[0], "longitude: ecCodes'")
    assert ds["t"].attrs["units"] == "K" and ds["t"].attrs["GRIB_paramId"] == 130


def test_members_are_the_number_axis(grib_case, tmp_path):
    (path,) = grib_case("grib1_members")
    virtualize.virtualize([path], tmp_path / "c.zarr", **OLD)
    ds = xr.open_dataset(tmp_path / "c.zarr", engine="virtualize")
    assert ds["2t"].dims == ("number", "time", "step", "latitude", "longitude")
    assert ds["number"].values.tolist() == [1, 2, 3]
    assert ds["step"].values.astype("m8[h]").astype(int).tolist() == [0, 12]


def test_reduced_gaussian_grid_has_ecCodes_latitudes_and_longitudes_per_value(grib_case,
                                                                              tmp_path):
    (path,) = grib_case("reduced")
    virtualize.virtualize([path], tmp_path / "c.zarr", **OLD)
    ds = xr.open_dataset(tmp_path / "c.zarr", engine="virtualize")
    assert ds["t"].dims == ("time", "isobaricInhPa", "values")
    m = eccodes_messages(path)[0]
    assert m["gridType"] == "reduced_gg"
    assert_same(ds["latitude"].values, m["latitudes"], "latitude: ecCodes'")
    assert_same(ds["longitude"].values, m["longitudes"], "longitude: ecCodes'")
    assert ds["t"].attrs["GRIB_N"] == 32


def test_missing_points_are_nan_and_a_stored_9999_stays(grib_case, tmp_path):
    (path,) = grib_case("grib2_levels")
    g = roundtrip([path], tmp_path)[1]
    sp = g["sp"][0].reshape(-1)
    assert np.isnan(sp[[3, 4, 100]]).all() and np.isnan(sp).sum() == 3
    assert sp[10] == 9999.0


def test_a_hole_reads_as_nan_with_a_note_and_a_duplicate_is_refused(grib_case, tmp_path):
    hole, dup = grib_case("hole")
    report = virtualize.virtualize([hole], tmp_path / "c.zarr", **OLD)
    (note,) = [p for p in report.problems if p.kind == "grib-hole"]
    assert not note.fatal and note.loc.variable == "t" and note.loc.file == str(hole)
    t = virtualize.open(tmp_path / "c.zarr")["t"][...]
    assert np.isnan(t[0, 1, 1]).all() and not np.isnan(t[0, 1, 0]).any()
    report = virtualize.check([dup], **OLD)
    (p,) = [p for p in report.problems if p.fatal]
    assert p.kind == "duplicate-message" and p.loc.variable == "t" and p.loc.file == str(dup)
    assert "messages 1 and 4" in p.message


def test_bytes_after_the_last_message_are_noted_and_ignored(grib_case, tmp_path):
    (path,) = grib_case("junk")
    report = virtualize.virtualize([path], tmp_path / "c.zarr", **OLD)
    assert report.ok
    (p,) = [p for p in report.problems if p.kind == "trailing-bytes"]
    assert not p.fatal and p.loc.file == str(path) and "1000 byte(s) in 1 run(s)" in p.message


def test_a_truncated_file_is_refused_naming_the_message(grib_case):
    (path,) = grib_case("truncated")
    report = virtualize.check([path], **OLD)
    (p,) = [p for p in report.problems if p.fatal]
    assert p.kind == "truncated" and p.loc.file == str(path)
    assert "message 2 (at byte offset" in p.message


@pytest.mark.parametrize("where,edit,kind", [
    ("grib2 length", lambda b: b[:8] + (len(b) + 7).to_bytes(8, "big") + b[16:], "truncated"),
    ("grib2 length short", lambda b: b[:8] + (1000).to_bytes(8, "big") + b[16:], "corrupt"),
    ("end marker", lambda b: b[:1167] + b"7770" + b[1171:], "corrupt"),
    ("edition", lambda b: b[:7] + b"\x03" + b[8:], "unknown-format"),
    ("second edition", lambda b: b[:1171 + 7] + b"\x05" + b[1171 + 8:], "corrupt"),
])
def test_damaged_length_fields_are_refused_located(grib_case, tmp_path, where, edit, kind):
    (src,) = grib_case("junk")
    data = src.read_bytes()[:2342]
    assert data[1167:1171] == b"7777"
    path = tmp_path / "damaged.grib2"
    path.write_bytes(edit(data))
    report = virtualize.check([path], **OLD)
    fatal = [p for p in report.problems if p.fatal]
    assert fatal and all(p.loc.file == str(path) for p in fatal), where
    assert fatal[0].kind == kind, (where, fatal)


def test_grib1_large_message_convention(tmp_path):
    """A GRIB1 message over 16 MiB (ecCodes writes its length in 120-byte units, the
    data section's length under 120) is found by its length fields where ecCodes finds
    it, and reads equal."""
    from make_grib import message

    big = message("GRIB1", bits=24, Ni=3600, Nj=1801, iDirectionIncrement=100,
                  jDirectionIncrement=100, longitudeOfLastGridPoint=359900,
                  latitudeOfLastGridPoint=-90000,
                  values=np.random.default_rng(3).normal(0, 1, 3600 * 1801))
    assert len(big) > 1 << 24 and big[4] & 0x80  # the convention's flag
    small = message("regular_ll_sfc_grib1", shortName="2t")
    path = tmp_path / "large.grib1"
    path.write_bytes(big + small)
    from virtualize.formats.grib import messages

    with open(path, "rb") as f:
        found, notes = messages.walk(f, str(path), path.stat().st_size)
    assert [(m.offset, m.length) for m in found] == [(0, len(big)), (len(big), len(small))]
    assert not notes
    from virtualize.formats import scan

    inv = scan(str(path))  # (the length walk reads headers, never the packed data)
    assert inv.bytes_read < 200_000 < len(big)
    virtualize.virtualize([path], tmp_path / "c.zarr", **OLD)
    g = virtualize.open(tmp_path / "c.zarr")
    msgs = eccodes_messages(path)
    assert_same(g["z"][0], msgs[0]["values"].reshape(1801, 3600), "large message")


def test_forecast_files_stack_along_reference_time(grib_case, tmp_path):
    from virtualize.cli import main

    files = grib_case("forecasts")
    out = tmp_path / "c.zarr"
    assert main([*map(str, reversed(files)), "-o", str(out), "--concat-dim", "time",
                 *OLD_FLAGS]) in (0, None)
    ds = xr.open_dataset(out, engine="virtualize")
    assert ds["2t"].dims == ("time", "step", "latitude", "longitude")
    assert [str(t)[:10] for t in ds.time.values] == ["2024-01-01", "2024-01-02", "2024-01-03"]
    want = np.concatenate([expected(xr.open_dataset(_single(f, tmp_path), engine="virtualize"),
                                    f)["2t"] for f in files])
    assert_same(ds["2t"].values, want, "stack")


RUN_TIMES = np.array(["2024-01-01T00", "2024-01-01T12", "2024-01-02T00"], dtype="M8[ns]")
LEAD_TIMES = np.array([0, 6, 12, 18], dtype="m8[h]").astype("m8[ns]")


def _forecast_cube(files, full: bool = True) -> np.ndarray:
    """ecCodes' 2t of every message of `files`, placed at its (reference time, step)."""
    out = np.full((len(RUN_TIMES), len(LEAD_TIMES), 31, 16), np.nan)
    for f in files:
        for m in eccodes_messages(f):
            i = int(np.nonzero(RUN_TIMES == m["time"])[0][0])
            j = int(np.nonzero(LEAD_TIMES == m["step"])[0][0])
            assert np.isnan(out[i, j]).all()
            out[i, j] = m["values"].reshape(31, 16)
    assert not full or not np.isnan(out).any()
    return out


@pytest.mark.parametrize("layout,dims", [
    ("cells", ["time", "step"]),  # one file per (run, step): the step a scalar in each
    ("cells", ["step", "time"]),  # the files' grid in the other order: the arrays' axes
    # are the files' own (time, step) whatever the order of --concat-dim
    ("runs", ["time", "step"]),   # one file per run holding its 4 steps
    ("runs", ["time"]),
])
def test_forecast_files_become_one_reference_time_by_step_cube(grib_case, tmp_path, layout, dims):
    """A pile of forecast files, one per (run, step) or one per run, is one cube
    `2t(time, step, latitude, longitude)` equal to ecCodes' values through virtualize.open,
    xarray (time and step decoded: datetimes and timedeltas) and the kerchunk export; its
    decode check (each chunk against ecCodes' read of the file) finds nothing."""
    from concurrent.futures import ThreadPoolExecutor

    from virtualize.cli import main

    files = [f for f in grib_case("forecast_cells") if f.parent.name == layout]
    assert len(files) == (12 if layout == "cells" else 3)
    cube, refs = tmp_path / "fc.zarr", tmp_path / "fc.json"
    flags = [x for d in dims for x in ("--concat-dim", d)]
    for out in (cube, refs):  # (shuffled: the grid comes from the files' coordinates)
        assert main([*map(str, files[1::2] + files[::2]), "-o", str(out), *flags,
                     *OLD_FLAGS]) in (0, None)
    want = _forecast_cube(files)
    assert_same(virtualize.open(cube)["2t"][...], want, "virtualize.open")
    assert_same(kerchunk_group(refs)["2t"][...], want, "kerchunk export")
    for ds in (xr.open_dataset(cube, engine="virtualize"), kerchunk_xarray(refs)):
        da = ds["2t"]
        assert da.dims == ("time", "step", "latitude", "longitude")
        assert ds.time.dtype == "M8[ns]" and np.array_equal(ds.time.values, RUN_TIMES)
        assert ds.step.dtype == "m8[ns]" and np.array_equal(ds.step.values, LEAD_TIMES)
        assert_same(da.values, want, "xarray")
        assert_same(da.sel(time="2024-01-01T12", step=np.timedelta64(18, "h")).values,
                    want[1, 3], "xarray .sel")
    with ThreadPoolExecutor(1) as pool:
        assert virtualize.verify_cube(cube, decode=True, executor=pool) == []


def test_a_real_forecast_split_into_one_file_per_step_is_one_cube_again(tmp_path):
    """cfgrib's `step_60m.grib` (73 hourly steps of 2t) split into one file per message
    (its bytes unchanged, as `grib_copy` splits) is one `2t(time, step, ...)` cube equal to
    the whole file's and to ecCodes' values; the step coordinate is the whole file's."""
    whole = CFGRIB / "step_60m.grib"
    data = whole.read_bytes()
    files = []
    with open(whole, "rb") as f:
        while (h := ec.codes_grib_new_from_file(f)) is not None:
            at, n = ec.codes_get(h, "offset", int), ec.codes_get(h, "totalLength", int)
            ec.codes_release(h)
            files.append(tmp_path / f"m{len(files):03d}.grib")
            files[-1].write_bytes(data[at:at + n])
    assert len(files) == 73
    cube = tmp_path / "split.zarr"
    report = virtualize.virtualize(files[::-1], cube, concat_dims=["time", "step"], **OLD)
    assert report.ok, report.problems
    ref = xr.open_dataset(_single(whole, tmp_path), engine="virtualize")
    ds = xr.open_dataset(cube, engine="virtualize")
    assert ds["2t"].dims == ("time", "step", "latitude", "longitude")
    assert np.array_equal(ds.step.values, ref.step.values) and ds.step.dtype == "m8[ns]"
    assert np.array_equal(ds.time.values, ref.time.values)
    want = expected(ref, whole)["2t"]
    assert_same(ds["2t"].values, want, "split stack")
    assert_same(virtualize.open(cube)["2t"][...], want, "split stack: virtualize.open")


def test_one_run_of_step_files_joins_along_step_and_verifies(grib_case, tmp_path):
    """`--concat-dim step` alone (one run, a file per step): the recipe records the axis,
    so `verify --decode` plans the cube again along it and finds every chunk ecCodes'."""
    from virtualize.cli import main

    files = [f for f in grib_case("forecast_cells")
             if f.parent.name == "cells" and "2024010112" in f.name]
    cube = tmp_path / "one.zarr"
    assert main([*map(str, files), "-o", str(cube), "--concat-dim", "step",
                 *OLD_FLAGS]) in (0, None)
    ds = xr.open_dataset(cube, engine="virtualize")
    assert ds["2t"].dims == ("time", "step", "latitude", "longitude")
    assert_same(ds["2t"].values, _forecast_cube(files, full=False)[1:2], "one run")
    assert main(["verify", str(cube), "--decode"]) in (0, None)


def test_a_scalar_step_is_an_axis_only_when_the_stack_joins_along_it(grib_case):
    """One step per file is cfgrib's scalar coordinate, unless the scan is told the stack
    concatenates along `step`; ecCodes' read of a region of either shape is the same."""
    from virtualize.conventions import ScanHint
    from virtualize.formats import registry

    fmt = registry.by_name("grib")
    path = next(f for f in grib_case("forecast_cells") if f.name == "fc_2024010112_s006.grib2")
    alone = fmt.scan(str(path), ScanHint(layout="virtualize"))
    assert alone.variables["2t"].dims == ("time", "latitude", "longitude")
    assert alone.variables["step"].shape == () and "step" in alone.variables["2t"].attrs[
        "coordinates"].split()
    for hint in (ScanHint("concat", None, dims=("time", "step"), layout="virtualize"),
                 ScanHint("concat", "step", layout="virtualize")):
        inv = fmt.scan(str(path), hint)
        v = inv.variables["2t"]
        assert v.dims == ("time", "step", "latitude", "longitude") and v.shape == (1, 1, 31, 16)
        assert inv.variables["step"].dims == ("step",) and inv.variables["step"].values.tolist() \
            == [6] and "step" not in v.attrs["coordinates"].split()
        assert v.blocks.refs.shape == (1, 1, 1, 1) and v.blocks.refs["length"].all()
    (m,) = eccodes_messages(path)
    got = fmt.read_region(str(path), "2t", ((0, 1), (0, 1), (2, 9), (0, 16)))
    assert_same(got, m["values"].reshape(1, 1, 31, 16)[:, :, 2:9], "promoted region")
    assert_same(fmt.read_region(str(path), "2t", ((0, 1), (2, 9), (0, 16))),
                m["values"].reshape(1, 31, 16)[:, 2:9], "region")


def _single(path, tmp_path):
    out = tmp_path / f"{Path(path).stem}.zarr"
    virtualize.virtualize([path], out, **OLD)
    return out


def test_missing_eccodes_is_a_located_problem_naming_the_extra(grib_case, monkeypatch, tmp_path):
    import shutil
    from concurrent.futures import ThreadPoolExecutor

    from virtualize.formats import scan
    from virtualize.formats.grib import scan as plugin

    (source,) = grib_case("junk")
    path = tmp_path / "a.grib2"
    shutil.copy(source, path)
    monkeypatch.setitem(sys.modules, "eccodes", None)  # its import fails
    assert plugin.eccodes() is None
    with pytest.raises(VirtualizeError) as e:
        scan(str(path))
    (p,) = e.value.problems
    assert p.kind == "missing-library" and p.loc.file == str(path)
    assert "pip install 'virtualize[grib]'" in p.message
    with ThreadPoolExecutor(1) as pool:
        report = virtualize.check([path], executor=pool, **OLD)
    fatal = [p for p in report.problems if p.fatal]
    assert fatal and all("virtualize[grib]" in p.message and p.loc.file == str(path)
                         for p in fatal)


def test_the_codec_refuses_a_message_of_another_size(grib_case):
    from virtualize.codecs import grib_decode

    (path,) = grib_case("junk")
    data = path.read_bytes()[:1171]
    assert grib_decode(data, 496).shape == (496,)
    with pytest.raises(ValueError, match="496 points, not 495"):
        grib_decode(data, 495)
    with pytest.raises(ValueError):
        grib_decode(data[:-10], 496)


def test_sniff_and_suffixes():
    from virtualize.formats import registry

    fmt = registry.by_name("grib")
    assert fmt.sniff(b"GRIB\0\0\0\x02") and fmt.sniff(b"GRIB\0\0\0\x01")
    assert not fmt.sniff(b"GRIB\0\0\0\x03") and not fmt.sniff(b"\x89HDF\r\n\x1a\n")
    assert ".grib2" in registry.suffixes() and ".grb" in registry.suffixes()


def test_kerchunk_export_reads_without_importing_virtualize(grib_case, tmp_path):
    """A fresh interpreter that never imports virtualize reads the kerchunk export with
    zarr + fsspec: zarr finds `virtualize.grib` by the entry point pyproject.toml declares
    (given to it as a dist-info, so this venv's install is not touched)."""
    (path,) = grib_case("grib2_levels")
    refs = tmp_path / "c.json"
    virtualize.virtualize([path], refs, **OLD)
    want = expected(xr.open_dataset(_single(path, tmp_path), engine="virtualize"), path)
    np.savez(tmp_path / "want.npz", **want)
    dist = tmp_path / "site" / "virtualize_grib_probe-0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: virtualize-grib-probe\n"
                                   "Version: 0\n")
    eps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    (dist / "entry_points.txt").write_text(
        "[zarr.codecs]\n" + "".join(f"{k} = {v}\n" for k, v in eps["zarr.codecs"].items()))
    script = textwrap.dedent("""
        import sys
        import fsspec, numpy as np, zarr
        from zarr.storage import FsspecStore
        want = np.load(sys.argv[2])
        zarr.config.set({"array.rectilinear_chunks": True})
        assert "virtualize" not in sys.modules
        fs = fsspec.filesystem("reference", fo=sys.argv[1], asynchronous=True)
        g = zarr.open_group(FsspecStore(fs, read_only=True, path=""), mode="r", zarr_format=3)
        for name in want.files:
            got = g[name][...]
            a, e = got.view("u8"), want[name].view("u8")
            assert got.dtype == want[name].dtype and np.array_equal(a, e), name
        print(len(want.files), sorted(m for m in sys.modules if m.startswith("virtualize")))
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(dist.parent)]))
    got = subprocess.run([sys.executable, "-c", script, str(refs), str(tmp_path / "want.npz")],
                         env=env, capture_output=True, text=True)
    assert got.returncode == 0, got.stderr[-3000:]
    count, _sep, loaded = got.stdout.partition(" ")
    # (the entry point loaded the codec; the script itself imported no virtualize)
    assert int(count) == len(want) == 3 and "virtualize.codecs" in loaded


CFGRIB = ROOT / "tests" / "data" / "cfgrib"
# cfgrib's test files virtualize refuses, and why (docs/grib.md)
CFGRIB_REFUSED = {
    "spherical_harmonics.grib": "unsupported-grib",  # no grid points
    "era5-levels-corrupted.grib": "corrupt",  # a damaged length field
}


@pytest.mark.parametrize("path", sorted(CFGRIB.glob("*.grib")), ids=lambda p: p.name)
def test_cfgribs_test_files_read_like_eccodes_or_are_refused(path, tmp_path):
    refused = CFGRIB_REFUSED.get(path.name)
    report = virtualize.check([path], **OLD)
    if refused:
        fatal = [p for p in report.problems if p.fatal]
        assert fatal and fatal[0].kind == refused and fatal[0].loc.file == str(path)
        return
    assert report.ok, report.problems
    virtualize.virtualize([path], tmp_path / "c.zarr", **OLD)
    virtualize.virtualize([path], tmp_path / "c.json", **OLD)
    ds = xr.open_dataset(tmp_path / "c.zarr", engine="virtualize")
    k = kerchunk_group(tmp_path / "c.json")
    want = expected(ds, path)
    for var, w in want.items():
        assert_same(ds[var].values, w, f"{path.name} {var}")
        assert_same(k[var][...], w, f"{path.name} {var}: kerchunk export")
    m = eccodes_messages(path)[0]
    if "latitude" in ds and ds["latitude"].dims == ("latitude",):
        assert_same(ds["latitude"].values, m["latitudes"].reshape(m["Nj"], m["Ni"])[:, 0], "lat")
        assert_same(ds["longitude"].values, m["longitudes"].reshape(m["Nj"], m["Ni"])[0], "lon")
    elif "latitude" in ds:  # (per value, or per (y, x) point: ecCodes' grid iterator)
        assert_same(ds["latitude"].values.reshape(-1), m["latitudes"], "latitude per point")
        assert_same(ds["longitude"].values.reshape(-1), m["longitudes"], "longitude per point")
    if path.name == "lambert_grid.grib":  # (had none: 2-D, as cfgrib gives them)
        assert ds["latitude"].dims == ds["longitude"].dims == ("y", "x")
    if path.name == "regular_ll_wrong_increment.grib":
        assert "latitude" not in ds and "GRIB_gridType" in ds[next(iter(want))].attrs


@pytest.mark.parametrize("name", ["fields_with_missing_values.grib", "reduced_gg.grib",
                                  "cfrzr_and_cprat_0s.grib",
                                  "step_60m.grib", "regular_gg_sfc.grib", "hpa_and_pa.grib",
                                  "t_on_different_level_types.grib", "lambert_grid.grib"])
def test_coordinates_and_values_equal_cfgribs(name, tmp_path):
    """cfgrib's own reading (`open_datasets`: one dataset per level type; its float32
    values; its squeezed axes): every coordinate both give is equal, and the values equal
    cfgrib's once cast to its float32."""
    cfgrib = pytest.importorskip("cfgrib")
    import warnings

    path = CFGRIB / name
    virtualize.virtualize([path], tmp_path / "c.zarr", **OLD)
    ours = xr.open_dataset(tmp_path / "c.zarr", engine="virtualize")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = cfgrib.open_datasets(str(path), backend_kwargs={"indexpath": ""})
    compared = 0
    for var, a in ((v, ds[v]) for ds in theirs for v in ds.data_vars):
        mine = [v for v in ours.data_vars.values()
                if v.attrs["GRIB_shortName"] == a.attrs["GRIB_shortName"] and
                v.attrs["GRIB_typeOfLevel"] == a.attrs["GRIB_typeOfLevel"] and
                v.attrs["GRIB_stepType"] == a.attrs["GRIB_stepType"]]
        assert len(mine) == 1, var
        b = mine[0]
        assert_same(b.values.squeeze().astype(np.float32), a.values.squeeze(), f"{name} {var}")
        for c in a.coords:
            if c == "valid_time" or c not in ours.variables:
                assert c in ("valid_time", "latitude", "longitude") and \
                    (c == "valid_time" or b.dims[-2:] == ("y", "x")), (name, c)
                continue
            assert_same(ours[c].values.reshape(-1), a[c].values.reshape(-1), f"{name} {c}")
            compared += 1
    assert compared


def test_grib_over_http_reads_like_the_local_file(grib_case, tmp_path):
    """A GRIB source by URL: the length walk by ranged reads, each message's keys from its
    bytes (`codes_new_from_message`), every array equal to ecCodes' read of the file."""
    import shutil

    from servers import RangeHTTPServer

    pytest.importorskip("aiohttp")
    root = tmp_path / "served"
    root.mkdir()
    (path,) = grib_case("grib2_levels")
    shutil.copy2(path, root / path.name)
    srv = RangeHTTPServer(root)
    try:
        url = f"{srv.url}/{path.name}"
        report = virtualize.virtualize([url], tmp_path / "c.zarr", **OLD)
        assert report.ok
        ds = xr.open_dataset(tmp_path / "c.zarr", engine="virtualize")
        want = expected(ds, path)
        for var, w in want.items():
            assert_same(ds[var].values, w, f"{var} over HTTP")
        local = xr.open_dataset(_single(path, tmp_path), engine="virtualize")
        assert sorted(ds.variables) == sorted(local.variables)
    finally:
        srv.stop()


def test_read_region_is_ecCodes_values(grib_case, tmp_path):
    """The format's own reads (the decode check's reference, inlining) of a region."""
    from virtualize.formats import registry

    (path,) = grib_case("grib2_levels")
    want = expected(xr.open_dataset(_single(path, tmp_path), engine="virtualize"), path)
    fmt = registry.by_name("grib")
    assert_same(fmt.read_region(str(path), "t", ((0, 1), (1, 2), (0, 3), (5, 9), (2, 16))),
                want["t"][:, 1:2, :, 5:9, 2:], "a region")
    assert_same(fmt.read_values(str(path), "sp"), want["sp"], "the whole array")
    assert_same(fmt.read_region(str(path), "latitude", ((2, 4),)),
                np.array([56.0, 54.0]), "a coordinate")


def _run_clean(args: list[str]) -> subprocess.CompletedProcess:
    """`python args` from the repository, this source tree first on the path."""
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"),
                                          *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


def test_a_process_with_eccodes_then_pyproj_exits_cleanly():
    # ecCodes loaded first made pyproj's PROJ bind to eckitlib's copy: a double free at
    # exit (scripts/repro_exit_abort.py says how); load_eccodes imports pyproj first
    pytest.importorskip("pyproj")
    got = _run_clean([str(ROOT / "scripts" / "repro_exit_abort.py"), "virtualize"])
    assert (got.returncode, got.stdout.strip()) == (0, "done; the process now exits"), \
        got.stderr[-2000:]


def test_grib_and_netcdf_tests_in_one_process_exit_cleanly():
    # the pair of tests whose process aborted at exit (docs/grib.md, "Known issue"): the
    # process must end by itself, with status 0
    pytest.importorskip("pyproj")
    pytest.importorskip("netCDF4")
    got = _run_clean(["-m", "pytest", "-q", "-p", "no:cacheprovider",
                      "tests/test_grib.py::test_every_array_reads_like_eccodes",
                      "tests/test_mosaic_time.py::test_netcdf_tiles_over_time[coordinate]"])
    assert got.returncode == 0, (got.returncode, got.stdout[-2000:], got.stderr[-2000:])
    assert " passed" in got.stdout and "skipped" not in got.stdout, got.stdout[-2000:]


@pytest.mark.parametrize("edition", [1, 2])
@pytest.mark.parametrize("grid", [
    # (Ni, Nj, lat1, lat2, lon1, lon2, di, dj)
    (401, 201, 70.0, 20.0, 350.0, 30.0, 0.1, 0.25),   # a European area across Greenwich
    (360, 3, 1.0, -1.0, -180.0, 179.0, 1.0, 1.0),     # global, -180 .. 179
    (101, 51, 10.0, 5.0, 0.0, 10.0, 0.1, 0.1),        # 0.1 degrees: increments inexact
    (128, 10, 10.0, 1.0, 0.0, 357.1875, 2.8125, 1.0),  # GRIB1 rounds 2.8125 to millidegrees
], ids=["greenwich", "minus180", "tenth", "t42"])
def test_regular_ll_coordinates_are_ecCodes_bit_for_bit(tmp_path, edition, grid):
    """latitude / longitude of a regular_ll grid equal ecCodes' `latitudes` / `longitudes`
    bit for bit: GRIB2 stores longitudes in 0..360, so an area from -10 to 30 has
    lon1 = 350 > lon2 = 30 (ecCodes: -10 .. 30, was 350 .. 390), a global -180 .. 179
    grid lon1 = 180 (was 180 .. 539); ecCodes steps by (lon2 - lon1) / (Ni - 1), adding
    it point after point, and sets the last point to lon2 (was lon1 + k * di: other bits)."""
    ec = pytest.importorskip("eccodes")
    ni, nj, la1, la2, lo1, lo2, di, dj = grid
    h = ec.codes_grib_new_from_samples(f"GRIB{edition}")
    try:
        for k, v in dict(Ni=ni, Nj=nj, latitudeOfFirstGridPointInDegrees=la1,
                         latitudeOfLastGridPointInDegrees=la2,
                         longitudeOfFirstGridPointInDegrees=lo1,
                         longitudeOfLastGridPointInDegrees=lo2,
                         iDirectionIncrementInDegrees=di,
                         jDirectionIncrementInDegrees=dj).items():
            ec.codes_set(h, k, v)
        ec.codes_set_values(h, np.arange(ni * nj, dtype=np.float64))
        path = tmp_path / "area.grib"
        with open(path, "wb") as f:
            ec.codes_write(h, f)
        lats = ec.codes_get_array(h, "latitudes").reshape(nj, ni)[:, 0]
        lons = ec.codes_get_array(h, "longitudes").reshape(nj, ni)[0]
    finally:
        ec.codes_release(h)
    virtualize.virtualize([path], tmp_path / "c.zarr", **OLD)
    g = virtualize.open(tmp_path / "c.zarr")
    assert_same(g["latitude"][...], lats, "latitude: ecCodes'")
    assert_same(g["longitude"][...], lons, "longitude: ecCodes'")


def test_grib1_regular_gaussian_grid_has_ecCodes_coordinates(tmp_path):
    """ecCodes' GRIB1 regular_gg sample (T42-like: 128 longitudes of 2.8125 degrees,
    coded 2.812): its longitude step is 357.188 / 127, not the coded increment, so the
    coordinates exist (they were refused as `grib-grid`) and equal ecCodes'."""
    ec = pytest.importorskip("eccodes")
    from make_grib import message
    path = tmp_path / "gg.grib1"
    path.write_bytes(message("regular_gg_ml_grib1"))
    with open(path, "rb") as f:
        h = ec.codes_grib_new_from_file(f)
        nj, ni = ec.codes_get(h, "Nj"), ec.codes_get(h, "Ni")
        lats = ec.codes_get_array(h, "latitudes").reshape(nj, ni)[:, 0]
        lons = ec.codes_get_array(h, "longitudes").reshape(nj, ni)[0]
        ec.codes_release(h)
    report = virtualize.check([path], **OLD)
    assert not [p for p in report.problems if p.kind == "grib-grid"], report.problems
    virtualize.virtualize([path], tmp_path / "c.zarr", **OLD)
    g = virtualize.open(tmp_path / "c.zarr")
    assert_same(g["latitude"][...], lats, "latitude: ecCodes'")
    assert_same(g["longitude"][...], lons, "longitude: ecCodes'")


def test_grib_messages_behind_wmo_bulletin_headers_are_read(tmp_path):
    """GRIB as the GTS sends it (NOAAPORT, DWD): each message wrapped in a WMO bulletin
    (SOH CR CR LF nnn CR CR LF TTAAii CCCC YYGGgg CR CR LF ... CR CR LF ETX), so the file
    does not start with `GRIB`. ecCodes reads its messages; it was `unknown-format` ("not
    ... a GRIB file"). Now the bytes before, between and after the messages are a
    `trailing-bytes` note and every value is ecCodes'."""
    ec = pytest.importorskip("eccodes")
    from make_grib import message

    m1, m2 = message("GRIB2", level=0), message("GRIB2", shortName="2t")
    path = tmp_path / "gts.grib2"
    path.write_bytes(b"".join(b"\x01\r\r\n%03d\r\r\nHTXA5%d ECMF 010000\r\r\n" % (k, k) + m
                              + b"\r\r\n\x03" for k, m in enumerate([m1, m2])))
    report = virtualize.check([path], **OLD)
    assert report.ok, report.problems
    assert [p.kind for p in report.problems] == ["trailing-bytes"]
    virtualize.virtualize([path], tmp_path / "c.zarr", **OLD)
    g = virtualize.open(tmp_path / "c.zarr")
    for m, name in [(m1, "t"), (m2, "2t")]:
        h = ec.codes_new_from_message(m)
        want = ec.codes_get_values(h).reshape(1, ec.codes_get(h, "Nj"), ec.codes_get(h, "Ni"))
        ec.codes_release(h)
        assert_same(g[name][...], want, f"{name}: ecCodes'")


def test_a_text_file_mentioning_grib_is_no_grib_file(tmp_path):
    """The looser sniff (GRIB behind a few ASCII bytes) claims no text that names GRIB."""
    from virtualize.formats import detect

    path = tmp_path / "notes.grib"
    path.write_bytes(b"see the GRIB2 files in ../data\n")
    assert detect(str(path)) is None


def test_an_hdf4_file_holding_grib_bytes_early_stays_hdf4(tmp_path):
    """HDF4's magic (\\x0e\\x03\\x13\\x01) is no bulletin header: a GRIB signature in its first
    bytes does not make it a GRIB file."""
    from virtualize.formats import registry

    head = b"\x0e\x03\x13\x01" + b"\x00" * 20 + b"GRIB\x00\x00\x00\x02" + b"\x00" * 100
    path = tmp_path / "x.hdf"
    path.write_bytes(head)
    with open(path, "rb") as f:
        assert not registry.by_name("grib").sniff(head[:8], f)
