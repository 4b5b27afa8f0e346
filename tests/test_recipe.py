"""The recipe (api/recipe.py): one value for every option that shapes a cube. What `check`
records is what `Recipe.to_dict` writes and `from_dict` reads back; every record an
earlier virtualize wrote reads as it was made; each option has one default (the API's,
the command line's and a record's reader agree)."""

from __future__ import annotations

import dataclasses
import datetime
import inspect
import json

import netCDF4
import numpy as np
import pytest

import virtualize
from virtualize.api import DEFAULTS, Recipe
from virtualize.cli import build_parser, recipe_from_args
from virtualize.model import UsageError
from virtualize.plan.coords import CoordSpec

# records as virtualize wrote them, oldest first (the commit that wrote each form)
OLD_RECORDS = {
    # ab33274: the first recipe (append)
    "concat-first": {"kind": "concat", "concat_dim": "time", "inline": [], "drop": ["x"],
                     "sort": False, "split": True, "materialize": True,
                     "materialize_limit": 1000},
    "mosaic-first": {"kind": "mosaic", "overlap": "last", "tolerance": 0.01,
                     "offsets": [[0, 0], [0, 4]], "drop": [], "split": False,
                     "materialize": False},
    # bf3b0e3: --inline-threshold recorded; e0cf834: --chunk-size
    "concat-chunked": {"kind": "concat", "concat_dim": None, "inline": ["lat"], "drop": [],
                       "sort": True, "split": True, "materialize": False,
                       "materialize_limit": None, "inline_threshold": 100,
                       "chunk_size": 65536},
    # 9bf0588 / e31f8ea: a hypercube, with each file's listed value (dates as their text)
    "hypercube": {"kind": "concat", "concat_dim": None, "inline": [], "drop": [],
                  "sort": True, "split": True, "materialize": False,
                  "materialize_limit": None, "inline_threshold": 65536,
                  "chunk_size": 16777216, "concat_dims": ["run", "step"],
                  "coords": {"run": "2024-01-01 00:00:00,2024-01-02 00:00:00"},
                  "join": "outer",
                  "coord_values": {"run": [["/d/a.grib", "2024-01-01"],
                                           ["/d/b.grib", "2024-01-02"]]}},
    # 8ca7099: the merge's options, when not their default
    "merged": {"kind": "concat", "concat_dim": "time", "inline": [], "drop": [], "sort": True,
               "split": True, "materialize": False, "materialize_limit": None,
               "inline_threshold": 65536, "chunk_size": 16777216, "join": "outer",
               "combine_attrs": "override", "variables": ["pr", "tas"]},
    # 951333a / bdf1dba: a mosaic over time, its attributes combined
    "mosaic-time": {"kind": "mosaic", "overlap": None, "tolerance": 0.001, "offsets": None,
                    "drop": [], "split": True, "materialize": False, "chunk_size": 16777216,
                    "concat_dim": "time", "coords": {"time": "name:_(\\d{8})"},
                    "combine_attrs": "identical"},
}


def test_every_record_an_earlier_virtualize_wrote_reads_as_it_was_made():
    first = Recipe.from_dict(OLD_RECORDS["concat-first"])
    assert (first.kind, first.concat_dims, first.drop, first.sort, first.materialize,
            first.materialize_limit) == ("concat", ("time",), {"x"}, False, True, 1000)
    # written before --inline-threshold and --chunk-size: nothing inlined for its size,
    # nothing cut (not today's defaults), for append and verify --decode alike
    assert (first.inline_threshold, first.chunk_size) == (0, None)
    assert first.concat_options().inline_threshold == 0
    assert (first.join, first.combine_attrs, first.variables) == ("exact", "drop_conflicts", None)
    mosaic = Recipe.from_dict(OLD_RECORDS["mosaic-first"])
    assert (mosaic.kind, mosaic.overlap, mosaic.tolerance, mosaic.offsets, mosaic.split,
            mosaic.chunk_size) == ("mosaic", "last", 0.01, ((0, 0), (0, 4)), False, None)
    assert mosaic.mosaic_options().offsets == ((0, 0), (0, 4))
    chunked = Recipe.from_dict(OLD_RECORDS["concat-chunked"])
    assert (chunked.concat_dims, chunked.inline, chunked.inline_threshold,
            chunked.chunk_size) == ((), {"lat"}, 100, 65536)
    cube = Recipe.from_dict(OLD_RECORDS["hypercube"])
    assert cube.hypercube and cube.concat_dims == ("run", "step") and cube.join == "outer"
    assert cube.coords == {"run": CoordSpec("values", values=(datetime.datetime(2024, 1, 1),
                                                              datetime.datetime(2024, 1, 2)))}
    assert cube.named_dims == ("step",)  # (the files need no "run" dimension)
    assert cube.hint().dims == ("run", "step")
    merged = Recipe.from_dict(OLD_RECORDS["merged"])
    assert (merged.join, merged.combine_attrs, merged.variables) == \
        ("outer", "override", {"pr", "tas"})
    over_time = Recipe.from_dict(OLD_RECORDS["mosaic-time"])
    assert over_time.concat_dim == "time" and over_time.combine_attrs == "identical"
    assert over_time.mosaic_options().coords == {"time": "name:_(\\d{8})"}
    # and each writes back what it read (a record keeps its form)
    for name in ("hypercube", "merged", "mosaic-time", "concat-chunked"):
        assert Recipe.from_dict(OLD_RECORDS[name]).to_dict() == OLD_RECORDS[name], name
    # no recipe recorded (written before recipes were): none
    assert Recipe.from_dict(None) is None and Recipe.from_dict({"concat_dim": "time"}) is None


def _month(path, year, month, days=3):
    with netCDF4.Dataset(path, "w") as ds:
        ds.createDimension("time", None)
        ds.createDimension("x", 4)
        ds.member = path.stem
        t = ds.createVariable("time", "f8", ("time",))
        t.units = f"days since {year}-01-01"
        t[:] = np.arange(days) + 31 * (month - 1)
        v = ds.createVariable("tas", "f4", ("time", "x"), chunksizes=(1, 4))
        v[:] = np.arange(days * 4, dtype="f4").reshape(days, 4) + 100 * month
        ds.createVariable("orog", "f4", ("x",))[:] = np.arange(4, dtype="f4")
    return str(path)


@pytest.mark.parametrize("kind, options", [
    ("concat", {}),
    ("concat", dict(concat_dim="time", drop=["/orog"], sort=False, materialize=True,
                    materialize_limit=10**6, inline_threshold=0, chunk_size="1M")),
    ("concat", dict(join="outer", combine_attrs="override", variables=["tas"])),
    ("concat", dict(concat_dims=["member"], coords={"member": "attr:member"})),
    ("concat", dict(concat_dims=["member", "time"], coords=["member=a,b"])),
])
def test_what_check_records_is_the_recipe_and_reads_back(tmp_path, kind, options):
    # (a new member axis: two members of one month; else two months)
    months = (1, 1) if "member" in options.get("concat_dims", ()) else (1, 2)
    files = [_month(tmp_path / f"m{i}.nc", 2024, m) for i, m in enumerate(months)]
    report = virtualize.check(files, **options)
    assert report.ok, report.problems
    recipe = Recipe.from_options(kind, **options)
    recorded = report.plan.recipe
    assert recorded == json.loads(json.dumps(recorded))  # (the record is JSON)
    assert recorded == recipe.record(report.files)
    back = Recipe.from_dict(recorded)
    assert back.to_dict() == recorded
    assert dataclasses.replace(back, coord_values=None) == recipe
    if "coords" in options and "member=a,b" in options["coords"]:  # for append
        assert recorded["coord_values"] == {"member": [[files[0], "a"], [files[1], "b"]]}


def test_each_option_has_one_default():
    """The API's signatures, the command line's options and a recipe not given an option
    agree: the Recipe's field is the one default."""
    plain = ("sort", "split", "materialize", "materialize_limit", "inline_threshold",
             "chunk_size", "no_gaps", "join", "combine_attrs", "tolerance", "overlap")
    for fn in (virtualize.check, virtualize.virtualize, virtualize.check_mosaic,
               virtualize.mosaic):
        for name, p in inspect.signature(fn).parameters.items():
            if name in plain:
                assert p.default == getattr(DEFAULTS, name), (fn.__name__, name)
    parser = build_parser()
    for argv in (["check", "f.nc"], ["create", "f.nc", "-o", "c.zarr"]):
        assert recipe_from_args(parser.parse_args(argv)) == DEFAULTS == Recipe.from_options()
    mosaic = recipe_from_args(parser.parse_args(["mosaic", "t.tif", "--check"]))
    assert mosaic == Recipe(kind="mosaic") == Recipe.from_options("mosaic")


def test_the_command_lines_recipe_is_the_apis():
    args = build_parser().parse_args(
        ["check", "f.nc", "--concat-dim", "member", "--concat-dim", "time",
         "--coord", "member=attr:variant_label", "--drop", "x", "--inline", "lat",
         "--no-sort", "--join", "outer", "--combine-attrs", "identical", "--variables", "tas,pr",
         "--inline-threshold", "1K", "--materialize", "--materialize-limit", "2M",
         "--no-split", "--chunk-size", "0", "--no-gaps"])
    assert recipe_from_args(args) == Recipe.from_options(
        concat_dims=["member", "time"], coords={"member": "attr:variant_label"}, drop=["x"],
        inline=["lat"], sort=False, join="outer", combine_attrs="identical",
        variables=["tas", "pr"], inline_threshold=1024, materialize=True,
        materialize_limit=2 << 20, split=False, chunk_size=0, no_gaps=True)
    args = build_parser().parse_args(["mosaic", "a.tif", "b.tif", "--check", "--offsets", "0,0",
                                      "0,8", "--overlap", "first", "--tolerance", "0.5"])
    assert recipe_from_args(args) == Recipe.from_options(
        "mosaic", offsets=[(0, 0), (0, 8)], overlap="first", tolerance=0.5)


def test_a_recipe_is_refused_before_anything_is_scanned():
    with pytest.raises(TypeError, match="tolerance: not an option of a concat recipe"):
        Recipe.from_options("concat", tolerance=1.0)
    with pytest.raises(TypeError, match="inline: not an option of a mosaic recipe"):
        Recipe.from_options("mosaic", inline=["x"])
    for kind, options, message in [
            ("concat", dict(join="inner"), "join must be one of exact, outer"),
            ("concat", dict(combine_attrs="first"), "combine_attrs must be one of"),
            ("concat", dict(chunk_size="lots"), "chunk_size: not a size"),
            ("concat", dict(concat_dim="time", concat_dims=["x", "y"]), "give one of them"),
            ("concat", dict(coords=["member"]), "give DIM=FORM"),
            ("mosaic", dict(overlap="middle"), "overlap must be None"),
            ("mosaic", dict(coords={"time": "name:(x)"}), "needs concat_dim"),
            ("mosaic", dict(concat_dim="time", materialize=True), "not supported"),
            ("mosaic", dict(concat_dim="time", coords={"band": "v1,v2"}), "one concat axis"),
            ("cube", {}, "kind is one of concat, mosaic")]:
        with pytest.raises(UsageError, match=message):
            Recipe.from_options(kind, **options)


def test_every_option_reaches_its_planner():
    """A recipe field named as a planner option is that option (a new one is one field)."""
    from virtualize.formats import read_values
    from virtualize.plan import ConcatOptions

    stack = Recipe.from_options(concat_dim="t", inline=["a"], drop=["b"], sort=False,
                                split=False, materialize=True, inline_threshold=5, no_gaps=True,
                                join="outer", combine_attrs="override", variables=["v"],
                                compat="override")
    opts = stack.concat_options()
    shared = {f.name for f in dataclasses.fields(ConcatOptions)} & set(Recipe.__dataclass_fields__)
    assert shared >= {"inline", "drop", "sort", "split", "materialize", "inline_threshold",
                      "no_gaps", "join", "combine_attrs", "variables", "compat"}
    for name in shared:
        assert getattr(opts, name) == getattr(stack, name) != getattr(DEFAULTS, name), name
    assert opts.concat_dim == "t" and opts.read is read_values
    tiles = Recipe.from_options("mosaic", offsets=[(0, 0), (0, 4)], overlap="last",
                                tolerance=0.5, drop=["b"], split=False,
                                combine_attrs="identical", concat_dim="time",
                                coords={"time": "name:_(\\d{8})"})
    opts = tiles.mosaic_options()
    assert (opts.offsets, opts.overlap, opts.tolerance, opts.drop, opts.split,
            opts.combine_attrs, opts.concat_dim, opts.coords) == \
        (((0, 0), (0, 4)), "last", 0.5, {"b"}, False, "identical", "time",
         {"time": "name:_(\\d{8})"})
