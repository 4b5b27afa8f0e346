"""GRIB in cfgrib's layout (the default; docs/grib.md, "Layouts"): for GRIB files of every
grid type (fixtures/make_grib_grids.py: ecCodes' samples, the grid's keys set) and cfgrib's
own test files, the cube opened with xarray (`open_datatree`, engine="virtualize") has
cfgrib's datasets (`cfgrib.open_datasets`; one: `xr.open_dataset(engine="cfgrib")`), each
with cfgrib's variable names, dimensions, coordinates and attributes, coordinates equal to
cfgrib's, values equal to ecCodes' bit for bit (and to cfgrib's float32 once cast); stacks
of forecast files join along the axes cfgrib squeezes."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import virtualize
from virtualize.model import UsageError

from helpers import assert_same, kerchunk_xarray

try:
    from virtualize.codecs import load_eccodes

    ec = load_eccodes()  # (after pyproj: docs/grib.md, "Known issue")
except ImportError:
    pytest.skip("the Python package eccodes is not installed", allow_module_level=True)
cfgrib = pytest.importorskip("cfgrib")
xr = pytest.importorskip("xarray")

from test_grib import CFGRIB, eccodes_messages, expected  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "fixtures"))
import make_grib_grids  # noqa: E402

MORE = CFGRIB / "layout"
# cfgrib's test files (tests/data/cfgrib and its layout/) whose cube differs from cfgrib's
# reading on purpose (docs/grib.md, "Compared with cfgrib"), or that cfgrib cannot read
DIFFERENT = {"regular_ll_wrong_increment.grib",  # no coordinates: its increments lie
             "spherical_harmonics.grib", "era5-levels-corrupted.grib"}  # refused


@pytest.fixture(scope="module")
def grids(tmp_path_factory):
    d = tmp_path_factory.mktemp("grids")
    return lambda name: make_grib_grids.make(name, d) if not (d / name).exists() else \
        sorted((d / name).glob("*.grib?"))


def _plain(v):
    if isinstance(v, np.ndarray):
        return v.tolist()
    return v.item() if isinstance(v, np.generic) else v


def _attrs(a) -> dict:
    return {k: _plain(v) for k, v in a.items() if k != "history"}  # (cfgrib's: a timestamp)


def cfgribs(path) -> list:
    """cfgrib's datasets of the file: `open_datasets`, or `xr.open_dataset` when it
    gives one."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = cfgrib.open_datasets(str(path), backend_kwargs={"indexpath": ""})
        if len(out) == 1:
            out = [xr.open_dataset(path, engine="cfgrib", backend_kwargs={"indexpath": ""})]
    return out


def _members(ds) -> list:
    return sorted((n, v.attrs.get("GRIB_typeOfLevel"), v.attrs.get("GRIB_stepType"))
                  for n, v in ds.data_vars.items())


MAPPINGS = {"lambert_conformal_conic", "polar_stereographic", "mercator",
            "rotated_latitude_longitude"}


def assert_cfgribs_layout(cube, path) -> dict:
    """The cube (one file's) opened as a DataTree holds cfgrib's datasets of `path`, one
    node each: names, dims, sizes, coordinates (equal), attributes; every data variable
    equal to ecCodes' values. What cfgrib does not give: a projected or rotated grid's x,
    y and grid mapping (GDAL's: `test_projected_grids_have_gdals_x_y_and_a_grid_mapping`).
    The nodes by path."""
    tree = xr.open_datatree(cube, engine="virtualize")
    nodes = {n.path: n.to_dataset(inherit=False) for n in tree.subtree
             if n.to_dataset(inherit=False).variables}
    theirs = cfgribs(path)
    assert len(nodes) == len(theirs), (list(nodes), [list(d.data_vars) for d in theirs])
    for ds in theirs:
        level = next(iter(ds.data_vars.values())).attrs.get("GRIB_typeOfLevel", "")
        match = [p for p, o in nodes.items() if _members(o) == _members(ds)
                 and dict(o.sizes) == dict(ds.sizes) and
                 (len(nodes) == 1 or p.lstrip("/").split("_")[0] == level)]
        assert len(match) == 1, (path.name, list(ds.data_vars), list(nodes))
        ours, where = nodes[match[0]], f"{path.name} {match[0]}"
        assert _attrs(tree[match[0]].attrs) == _attrs(ds.attrs), where
        extra = set(ours.coords) - set(ds.coords)
        mapping = extra & MAPPINGS
        assert extra <= {"x", "y"} | MAPPINGS and len(mapping) <= 1, where
        assert set(ds.coords) <= set(ours.coords), where
        for name, v in ds.variables.items():
            o = ours[name]
            assert o.dims == v.dims, (where, name)
            mine = _attrs(o.attrs)
            if mapping and name in ds.data_vars:
                assert mine.pop("grid_mapping") == next(iter(mapping)), (where, name)
            assert mine == _attrs(v.attrs), (where, name)
            if name in ds.coords:
                assert o.dtype == v.dtype, (where, name)
                assert_same(o.values, v.values, f"{where} {name}: cfgrib's")
            else:
                assert o.dtype == np.float64
                assert_same(o.values.astype(np.float32), v.values, f"{where} {name}: cfgrib's")
        for name, want in expected(ours, path).items():
            assert_same(ours[name].values, want, f"{where} {name}: ecCodes'")
    return nodes


@pytest.mark.parametrize("grid", list(make_grib_grids.GRIDS))
def test_every_grid_type_is_cfgribs_layout_with_ecCodes_values(grids, tmp_path, grid):
    (path,) = grids(grid)
    report = virtualize.virtualize([path], tmp_path / "c.zarr")
    assert report.ok and not [p for p in report.problems if p.kind == "grib-grid"], \
        report.problems
    nodes = assert_cfgribs_layout(tmp_path / "c.zarr", path)
    # a forecast's fields: several datasets (cfgrib's), groups named by level type
    assert sorted(nodes) == ["/heightAboveGround", "/heightAboveGround_2", "/isobaricInhPa",
                             "/surface"]
    # (cfgrib's order: by paramId, 10u's 165 before 2t's 167)
    assert sorted(nodes["/heightAboveGround"].data_vars) == ["u10", "v10"]
    t2m = nodes["/heightAboveGround_2"]
    assert float(t2m["heightAboveGround"]) == 2.0 and t2m["heightAboveGround"].ndim == 0
    assert t2m["valid_time"].dims == ("step",) and t2m["time"].ndim == 0
    # latitude / longitude: ecCodes' every point (regular grids: its distinct ones)
    m = eccodes_messages(path)[0]
    if t2m["latitude"].ndim == 1 and t2m["latitude"].dims == ("latitude",):
        assert_same(t2m["latitude"].values, m["latitudes"].reshape(m["Nj"], m["Ni"])[:, 0], "lat")
    else:
        assert_same(t2m["latitude"].values.reshape(-1), m["latitudes"], "latitude per point")
        assert_same(t2m["longitude"].values.reshape(-1), m["longitudes"], "longitude per point")


CFGRIB_FILES = sorted(p for p in [*CFGRIB.glob("*.grib"), *MORE.glob("*.grib")]
                      if p.name not in DIFFERENT)


@pytest.mark.parametrize("path", CFGRIB_FILES, ids=lambda p: p.name)
def test_cfgribs_test_files_are_its_layout(path, tmp_path):
    report = virtualize.virtualize([path], tmp_path / "c.zarr")
    assert report.ok, report.problems
    assert_cfgribs_layout(tmp_path / "c.zarr", path)


def test_a_file_of_one_dataset_is_the_root_as_xarrays_cfgrib_engine_opens_it(tmp_path):
    """xr.open_dataset on the cube gives what xr.open_dataset(engine="cfgrib") gives."""
    path = CFGRIB / "regular_ll_sfc.grib"
    virtualize.virtualize([path], tmp_path / "c.zarr")
    ours = xr.open_dataset(tmp_path / "c.zarr", engine="virtualize")
    (theirs,) = cfgribs(path)
    (name,) = theirs.data_vars
    assert list(ours.data_vars) == [name] and ours[name].dims == ("latitude", "longitude")
    assert {c: ours[c].ndim for c in ours.coords} == {c: theirs[c].ndim for c in theirs.coords}
    coords = theirs.drop_vars(name)
    coords.attrs.pop("history")  # (cfgrib's: a timestamp)
    xr.testing.assert_identical(ours.drop_vars(name), coords)
    assert_same(ours[name].values.astype(np.float32), theirs[name].values, name)


def test_the_virtualize_layout_stays_an_option(tmp_path):
    """`grib_layout="virtualize"` (--grib-layout virtualize): shortName, `time` an axis,
    one group; recorded, and read back from the record (a record without it: what it was
    made with, virtualize's)."""
    from virtualize.api import Recipe
    from virtualize.cli import main

    path = CFGRIB / "t_on_different_level_types.grib"
    assert main([str(path), "-o", str(tmp_path / "old.zarr"), "--grib-layout",
                 "virtualize"]) in (0, None)
    old = xr.open_dataset(tmp_path / "old.zarr", engine="virtualize")
    assert {"t_isobaricInhPa", "t_hybrid"} <= set(old.data_vars)
    assert all(v.dims[0] == "time" for v in old.data_vars.values())
    report = virtualize.check([path], grib_layout="virtualize")
    assert "grib_layout" not in report.plan.recipe  # (a record without it: virtualize's)
    assert Recipe.from_dict(report.plan.recipe).grib_layout == "virtualize"
    new = virtualize.check([path]).plan.recipe
    assert new["grib_layout"] == "cfgrib" and Recipe.from_dict(new).grib_layout == "cfgrib"
    assert Recipe.from_dict({"kind": "concat", "concat_dim": "time"}).grib_layout == \
        "virtualize"
    with pytest.raises(UsageError, match="grib_layout"):
        virtualize.check([path], grib_layout="cfgrib2")
    virtualize.virtualize([path], tmp_path / "new.zarr")
    tree = xr.open_datatree(tmp_path / "new.zarr", engine="virtualize")
    assert sorted(tree.children) == ["hybrid", "isobaricInhPa"]


def test_a_hint_with_a_layout_is_a_fingerprints_and_read_back():
    from virtualize.conventions import ScanHint
    from virtualize.formats._fingerprint import hint_of, hint_tag

    for hint in (ScanHint(layout="virtualize"), ScanHint("concat", "time", True,
                                                         frozenset({"a"}), ("x", "y"),
                                                         "virtualize"), ScanHint()):
        assert hint_of(f"v1:{hint_tag(hint)}:00") == hint


def test_forecast_files_stack_along_the_time_cfgrib_squeezes(grids, tmp_path):
    """Three runs (a file each, steps 0 and 6) on a Lambert grid: each file's `time` is a
    scalar (cfgrib's), the stack's an axis (what `xr.concat` of cfgrib's datasets along
    time gives, as users of open_mfdataset(concat_dim="time", combine="nested") do), with
    or without --concat-dim time; valid_time (time, step); values ecCodes'."""
    files = grids("forecasts")
    for kw in ({}, {"concat_dim": "time"}):
        cube = tmp_path / f"stack{len(kw)}.zarr"
        report = virtualize.virtualize(files[::-1], cube, **kw)
        assert report.ok, report.problems
        tree = xr.open_datatree(cube, engine="virtualize")
        singles = [cfgribs(f) for f in files]
        assert len(tree.children) == len(singles[0]) == 3
        for k, ds in enumerate(singles[0]):
            want = xr.concat([s[k] for s in singles], dim="time", data_vars="minimal",
                             coords="different", compat="equals")
            level = next(iter(ds.data_vars.values())).attrs["GRIB_typeOfLevel"]
            (node,) = [n for n in tree.children.values() if n.name.split("_")[0] == level and
                       sorted(n.data_vars) == sorted(ds.data_vars)]
            ours = node.to_dataset(inherit=False)
            assert dict(ours.sizes) == dict(want.sizes)
            for name, v in want.variables.items():
                assert ours[name].dims == v.dims, name
                if name in want.coords:
                    assert_same(ours[name].values, v.values, name)
            assert ours["valid_time"].dims == ("time", "step")
            for name in ours.data_vars:
                parts = [expected(xr.open_datatree(_one(f, tmp_path), engine="virtualize")
                                  [node.name].to_dataset(inherit=False), f)[name]
                         for f in files]
                assert_same(ours[name].values, np.stack(parts), f"{node.name}/{name}")


def _one(path, tmp_path):
    out = tmp_path / f"{Path(path).stem}.zarr"
    if not out.exists():
        virtualize.virtualize([path], out)
    return out


def test_one_file_per_run_and_step_is_a_time_by_step_cube_that_verifies(case, tmp_path):
    """make_grib's one file per (run, step): both axes squeezed in each file, promoted
    by the stack's axes; the cube's decode check (each chunk against ecCodes' read of its
    file, found by the array's name in cfgrib's layout) finds nothing."""
    from concurrent.futures import ThreadPoolExecutor

    from test_grib import LEAD_TIMES, RUN_TIMES, _forecast_cube

    files = [f for f in case("grib_forecast_cells") if f.parent.name == "cells"]
    cube, refs = tmp_path / "fc.zarr", tmp_path / "fc.json"
    for out in (cube, refs):
        report = virtualize.virtualize(files, out, concat_dims=["time", "step"])
        assert report.ok, report.problems
    want = _forecast_cube(files)
    for ds in (xr.open_dataset(cube, engine="virtualize"), kerchunk_xarray(refs)):
        assert ds["t2m"].dims == ("time", "step", "latitude", "longitude")
        assert np.array_equal(ds.time.values, RUN_TIMES)
        assert np.array_equal(ds.step.values, LEAD_TIMES)
        assert np.array_equal(ds.valid_time.values, RUN_TIMES[:, None] + LEAD_TIMES[None, :])
        assert_same(ds["t2m"].values, want, "t2m")
    with ThreadPoolExecutor(1) as pool:
        assert virtualize.verify_cube(cube, decode=True, executor=pool) == []


def test_a_grouped_cube_verifies_and_reads_regions_like_ecCodes(grids, tmp_path):
    """The decode check and the format's reads find a group's array (cfgrib's name under
    its group) in the file."""
    from concurrent.futures import ThreadPoolExecutor

    from virtualize.formats import registry

    (path,) = grids("polar_stereographic")
    cube = tmp_path / "c.zarr"
    virtualize.virtualize([path], cube)
    with ThreadPoolExecutor(1) as pool:
        assert virtualize.verify_cube(cube, decode=True, executor=pool) == []
    fmt = registry.by_name("grib")
    node = xr.open_datatree(cube, engine="virtualize")["heightAboveGround_2"]
    want = expected(node.to_dataset(inherit=False), path)["t2m"]
    assert_same(fmt.read_region(str(path), "heightAboveGround_2/t2m", ((1, 2), (3, 9), (0, 5))),
                want[1:2, 3:9, :5], "a region")


PROJECTED = ["lambert", "polar_stereographic", "polar_stereographic_grib1", "mercator"]


@pytest.mark.parametrize("grid", PROJECTED + ["rotated_ll", "rotated_ll_grib1"])
def test_projected_grids_have_gdals_x_y_and_a_grid_mapping(grids, tmp_path, grid):
    """x / y in metres (rotated grids: rotated degrees) along the grid's axes and a CF grid
    mapping (pyproj's description): the mapping takes x / y to ecCodes' latitude /
    longitude of every point (PROJ), and x / y are GDAL's pixel centres (rasterio; GDAL
    shows the rows north up: ours reversed). cfgrib's layout gives Mercator as cfgrib
    does (one `values` axis: its grid mapping, no x / y); virtualize's keeps (y, x)."""
    pyproj = pytest.importorskip("pyproj")
    (path,) = grids(grid)
    virtualize.virtualize([path], tmp_path / "c.zarr", grib_layout="virtualize")
    ds = xr.open_dataset(tmp_path / "c.zarr", engine="virtualize")
    (mapping,) = set(ds.coords) & MAPPINGS
    assert ds["sp"].attrs["grid_mapping"] == mapping and ds["sp"].dims[-2:] == ("y", "x")
    assert ds.x.dims == ("x",) and ds.y.dims == ("y",)
    m = eccodes_messages(path)[0]
    lat, lon = (m[k].reshape(m["Nj"], m["Ni"]) for k in ("latitudes", "longitudes"))
    assert_same(ds.latitude.values, lat, "latitude: ecCodes'")
    assert_same(ds.longitude.values, lon, "longitude: ecCodes'")
    gm = ds[mapping].attrs
    X, Y = np.meshgrid(ds.x.values, ds.y.values)
    if mapping == "rotated_latitude_longitude":
        assert ds.x.attrs["standard_name"] == "grid_longitude"
        rotation = ("+proj=pipeline +step +proj=unitconvert +xy_in=deg +xy_out=rad +step +inv "
                    f"+proj=ob_tran +o_proj=longlat +o_lat_p={gm['grid_north_pole_latitude']} "
                    f"+o_lon_p={gm['north_pole_grid_longitude']} "
                    f"+lon_0={gm['grid_north_pole_longitude'] + 180} +R=1 "
                    "+step +proj=unitconvert +xy_in=rad +xy_out=deg")
        got_lon, got_lat = pyproj.Transformer.from_pipeline(rotation).transform(X, Y)
        tolerance = 1e-5  # (ecCodes rounds rotated coordinates to 1e-6 degrees)
    else:
        assert ds.x.attrs["units"] == "m" and gm["grid_mapping_name"] == mapping
        crs = pyproj.CRS.from_cf(gm)
        got_lon, got_lat = pyproj.Transformer.from_crs(crs, crs.geodetic_crs,
                                                       always_xy=True).transform(X, Y)
        tolerance = 1e-7
        rasterio = pytest.importorskip("rasterio")
        with rasterio.open(path) as r:
            t = r.transform
            gdal_x = t.c + (np.arange(r.width) + 0.5) * t.a
            gdal_y = t.f + (np.arange(r.height) + 0.5) * t.e
            gdal = pyproj.CRS(r.crs.to_wkt())
        gdal_lon, gdal_lat = pyproj.Transformer.from_crs(gdal, gdal.geodetic_crs,
                                                         always_xy=True).transform(X, Y)
        assert np.abs(gdal_lat - lat).max() < tolerance  # (GDAL's projection: the same)
        assert np.abs((gdal_lon - lon + 180) % 360 - 180).max() < tolerance
        np.testing.assert_allclose(ds.x.values, gdal_x, rtol=0, atol=1e-3)
        np.testing.assert_allclose(ds.y.values[::-1], gdal_y, rtol=0, atol=1e-3)
    assert np.abs(got_lat - lat).max() < tolerance
    assert np.abs((got_lon - lon + 180) % 360 - 180).max() < tolerance
    virtualize.virtualize([path], tmp_path / "d.zarr")  # (cfgrib's layout)
    node = xr.open_datatree(tmp_path / "d.zarr", engine="virtualize")["surface"]
    assert node["sp"].attrs["grid_mapping"] == mapping and mapping in node.coords
    assert ("x" in node.coords) == (grid != "mercator")
