"""The recipe: every option that shapes a cube, as one value (`Recipe`).

`check` and `check_mosaic` build it from their arguments (`Recipe.from_options`), the
command line from its options (`cli.recipe_from_args`). An output records it
(`to_dict`: the record's `recipe`, outputs/record.py), and `append`, `export` and
`verify --decode` read it back (`from_dict`: any record virtualize wrote) to plan the
stack as it was planned. `planner()`, `hint()`, `concat_options()` and
`mosaic_options()` are the one place a recipe becomes the planner's options; each option
has one default, its field's (`DEFAULTS`: the API's and the command line's defaults are
read from it).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..conventions import ScanHint
from ..formats import read_values
from ..formats.grib import DEFAULT_LAYOUT, LAYOUTS
from ..model import FileInventory, Plan, Problem, UsageError
from ..plan import DEFAULT_INLINE_THRESHOLD, ConcatOptions, MosaicOptions, plan_mosaic
from ..plan.attrs import COMBINE_ATTRS
from ..plan.coords import CoordSpec, label, parse_coords
from ..plan.cut import DEFAULT_CHUNK_SIZE, chunk_bytes
from ..plan.hypercube import HypercubeOptions, plan_hypercube
from ..plan.merge import COMPATS, JOINS

Planner = Callable[[list[FileInventory]], tuple[Plan, list[Problem]]]
KINDS = ("concat", "mosaic")

# What a record written before an option existed was made with: its absence means this,
# not the option's default (no cut before --chunk-size; nothing inlined for its size
# before --inline-threshold).
_BEFORE = {"chunk_size": None, "inline_threshold": 0, "grib_layout": "virtualize"}

# Each option's metadata: the kinds it is an option of (default: both), and how the record
# holds it, `record`: "always" (the default), "set" (only when not its default), "never"
# (each run's own), "found" (what the check found: no option given), "changed" (only when
# not what a record without it was made with, `_BEFORE`); a dict by kind where
# the kinds differ. An option named as a planner option (ConcatOptions, MosaicOptions) is
# that option: a new option is one line here (and its argument in check / virtualize and
# the command line).
STACK, TILES = ("concat",), ("mosaic",)


def _option(default=None, *, kinds=KINDS, record="always", factory=None):
    meta = {"kinds": kinds, "record": record}
    if factory is not None:
        return field(default_factory=factory, metadata=meta, hash=False)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Recipe:
    """How a stack is planned into a cube. `kind` "concat" (a stack along one axis, or a
    hypercube along several) or "mosaic" (tiles side by side, or a mosaic over time)."""

    kind: str = "concat"
    # the concatenation axes, outermost first (one: a stack's --concat-dim; none: the
    # planner's choice); a mosaic over time's one axis
    concat_dims: tuple[str, ...] = _option(())
    # a new axis' values of each file: a stack's {dim: CoordSpec} (plan/coords.py), a
    # mosaic over time's {dim: its --coord text}
    coords: Mapping[str, Any] = _option(factory=dict)
    inline: frozenset[str] = _option(frozenset(), kinds=STACK)
    drop: frozenset[str] = _option(frozenset())
    sort: bool = _option(True, kinds=STACK)  # by coordinate (--no-sort: as given)
    split: bool = _option(True)  # padded uncompressed blocks cut to their valid rows
    materialize: bool = _option(False)  # blocks that cannot be referenced copied in
    # refuse a plan copying more bytes (a mosaic's record never held it)
    materialize_limit: int | None = _option(None, record={"concat": "always", "mosaic": "never"})
    inline_threshold: int = _option(DEFAULT_INLINE_THRESHOLD, kinds=STACK)  # else refused
    chunk_size: int | None = _option(DEFAULT_CHUNK_SIZE)  # uncompressed blocks cut at rows
    no_gaps: bool = _option(False, kinds=STACK, record="never")  # a gap is fatal
    # variables or cells some file lacks: "exact" refuses, "outer" reads the fill value
    join: str = _option("exact", kinds=STACK, record="set")
    # attributes differing between files (plan/attrs.py)
    combine_attrs: str = _option("drop_conflicts", record="set")
    variables: frozenset[str] | None = _option(None, kinds=STACK, record="set")  # kept
    # a variable no coordinate needs that differs between files or cells: "identical"
    # refuses, "override" takes the first's (named in a note; xarray's compat="override")
    compat: str = _option("identical", kinds=STACK, record="set")
    # how a GRIB file's arrays are laid out (docs/grib.md, Layouts): "cfgrib" (cfgrib's
    # names, squeezed axes, its datasets as groups) or "virtualize" (shortName, `time`
    # always an axis: what a record without it was made with)
    grib_layout: str = _option(DEFAULT_LAYOUT, kinds=STACK, record="changed")
    # what a check found, recorded for `append`: each file's value of a listed new axis
    coord_values: Mapping[str, list] | None = field(
        default=None, hash=False, metadata={"kinds": STACK, "record": "found"})
    # a mosaic's: each tile's (row, col) instead of its georeference; who wins an overlap
    # (None: a problem; "last", "first"); pixels from whole-pixel alignment
    offsets: tuple[tuple[int, int], ...] | None = _option(None, kinds=TILES)
    overlap: str | None = _option(None, kinds=TILES)
    tolerance: float = _option(1e-3, kinds=TILES)
    # the output reads whole tiles (`OutputKind.reads_windows`, a GDAL VRT): a mosaic's
    # cells no block fits are windows of their tiles; each run's own (its output's)
    windows: bool = _option(False, kinds=TILES, record="never")

    def __post_init__(self) -> None:
        # (each field in its one form, however it was given: names without a leading
        # "/", sets, tuples; a stack's coords parsed, plan/coords.py)
        def put(name: str, value) -> None:
            object.__setattr__(self, name, value)

        if self.kind not in KINDS:
            raise ValueError(f"a recipe's kind is one of {', '.join(KINDS)}, not {self.kind!r}")

        put("concat_dims", tuple(self.concat_dims))
        put("drop", frozenset(_names(self.drop or ())))
        put("inline", frozenset(_names(self.inline or ())))
        if self.variables is not None:
            put("variables", frozenset(_names(self.variables)))
        put("coords", dict(self.coords or {}) if self.kind == "mosaic" else
            parse_coords(dict(self.coords) if isinstance(self.coords, Mapping) else self.coords))
        if self.offsets is not None:
            put("offsets", tuple(tuple(o) for o in self.offsets))

    # -- made from the API's arguments, and from a record -------------------------------

    @classmethod
    def from_options(cls, kind: str = "concat", **options) -> Recipe:
        """The recipe `check` (kind "concat") or `check_mosaic` ("mosaic") takes as keyword
        arguments: the fields by name (`concat_dim` for one axis, `concat_dims` for
        several; `coords` as `check` takes them; `chunk_size` in bytes or "16M"); a field
        not given keeps its default. Raises `UsageError` for a value that is not one,
        before anything is scanned."""
        if kind not in KINDS:
            raise UsageError(f"a recipe's kind is one of {', '.join(KINDS)}, not {kind!r}")
        allowed = {f.name for f in dataclasses.fields(cls) if _rule(f, kind) not in (None, "found")}
        allowed = allowed - {"concat_dims"} | {"concat_dim"} | \
            ({"concat_dims"} if kind == "concat" else set())
        unknown = sorted(set(options) - allowed)
        if unknown:
            raise TypeError(f"{', '.join(unknown)}: not an option of a {kind} recipe")
        given = {k: v for k, v in options.items() if k not in ("concat_dim", "concat_dims")}
        given["chunk_size"] = chunk_size_bytes(options.get("chunk_size", cls.chunk_size))
        concat_dim = options.get("concat_dim")
        if kind == "mosaic":
            given["coords"] = _mosaic_coords(concat_dim, options.get("coords"))
            _check_combine_attrs(given.get("combine_attrs", cls.combine_attrs))
            if concat_dim is not None and given.get("materialize") and not given.get("windows"):
                raise UsageError("--materialize is not supported for a mosaic over time yet")
            if given.get("overlap") not in (None, "last", "first"):
                raise UsageError(f"overlap must be None, 'last' or 'first', not "
                                 f"{given['overlap']!r}")
            return cls("mosaic", (concat_dim,) if concat_dim is not None else (), **given)
        if given.get("join", cls.join) not in JOINS:
            raise UsageError(f"join must be one of {', '.join(JOINS)}, not {given['join']!r}")
        _check_combine_attrs(given.get("combine_attrs", cls.combine_attrs))
        if given.get("grib_layout", cls.grib_layout) not in LAYOUTS:
            raise UsageError(f"grib_layout must be one of {', '.join(LAYOUTS)}, "
                             f"not {given['grib_layout']!r}")
        if given.get("compat", cls.compat) not in COMPATS:
            raise UsageError(f"compat must be one of {', '.join(COMPATS)}, "
                             f"not {given['compat']!r}")
        dims = _concat_dims(concat_dim, options.get("concat_dims"))
        return cls("concat", tuple(dims), **given)  # (coords parsed: __post_init__)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Recipe | None:
        """The recipe an output recorded (`to_dict`, or what an earlier virtualize
        wrote: an option it did not record has its default, or what the record's time
        meant, `_BEFORE`); None when it records none (written before recipes were)."""
        if not isinstance(d, Mapping) or d.get("kind") not in KINDS:
            return None
        kind = d["kind"]
        got = {f.name: d[f.name] if f.name in d else _BEFORE[f.name]
               for f in dataclasses.fields(cls) if _rule(f, kind) is not None
               and f.name != "concat_dims" and (f.name in d or f.name in _BEFORE)}
        if kind == "mosaic" and not got.get("offsets"):
            got["offsets"] = None  # (recorded [] or null: by georeference)
        dims = list(d.get("concat_dims") or ()) or \
            ([d["concat_dim"]] if d.get("concat_dim") is not None else [])
        return cls(kind, tuple(dims), **got)

    def to_dict(self) -> dict[str, Any]:
        """The record's `recipe` (JSON): what `from_dict` reads back. Each option of the
        kind as its field's `record` says (a plain stack's, a mosaic's as they always
        were; the merge's only when not their default); a hypercube's axes, coordinates
        and join when it is one, a mosaic over time's axis and coordinates."""
        out: dict[str, Any] = {"kind": self.kind}
        if self.kind == "concat":
            out["concat_dim"] = None if self.hypercube else self.concat_dim
        for f in dataclasses.fields(self):
            rule = _rule(f, self.kind)
            value = getattr(self, f.name)
            if f.name in ("concat_dims", "coords") or rule in (None, "never", "found") or \
                    rule == "set" and value == f.default or \
                    rule == "changed" and value == _BEFORE[f.name]:
                continue
            out[f.name] = sorted(value) if isinstance(value, frozenset) else \
                ([list(o) for o in value] if value else None) if f.name == "offsets" else value
        if self.kind == "mosaic" and self.concat_dims:
            out.update(concat_dim=self.concat_dims[0], coords=dict(self.coords) or None)
        if self.hypercube:  # (a plain stack's recipe stays as it was)
            out.update(concat_dims=list(self.concat_dims),
                       coords={d: s.text() for d, s in self.coords.items()}, join=self.join)
        if self.coord_values is not None:
            out["coord_values"] = self.coord_values
        return out

    def record(self, files: Sequence[str]) -> dict[str, Any]:
        """What an output of `files` records of this recipe (`to_dict`), with each file's
        value of a new axis given as a list (`--coord DIM=v1,v2,...`), so that `append`
        can list the new files' alone (dates as their text, which the record's JSON holds
        and plan/coords.py reads back)."""
        listed = {d: s.values for d, s in self.coords.items()
                  if isinstance(s, CoordSpec) and s.kind == "values"}
        if not listed or len(files) != len(next(iter(listed.values()))):
            return self.to_dict()
        return dataclasses.replace(self, coord_values={
            d: [[f, label(v) if isinstance(v, datetime.datetime) else v]
                for f, v in zip(files, values)] for d, values in listed.items()}).to_dict()

    # -- what the planner takes ------------------------------------------------------

    @property
    def concat_dim(self) -> str | None:
        """The one concatenation axis (None: several, or the planner's choice)."""
        return self.concat_dims[0] if len(self.concat_dims) == 1 else None

    @property
    def hypercube(self) -> bool:
        """Several axes, or a new one whose values `coords` gives (plan/hypercube.py)."""
        return self.kind == "concat" and (len(self.concat_dims) > 1 or bool(self.coords))

    @property
    def named_dims(self) -> tuple[str, ...]:
        """The axes the files must have (a new one's values come from `coords`)."""
        return () if self.kind == "mosaic" else \
            tuple(d for d in self.concat_dims if d not in self.coords)

    def concat_options(self) -> ConcatOptions:
        """The one-axis planner's options (plan/concat.py, plan/merge.py): every field of
        a stack named as one of them."""
        return ConcatOptions(concat_dim=self.concat_dim, read=read_values,
                             **self._options(ConcatOptions, "concat"))

    def mosaic_options(self) -> MosaicOptions:
        """The mosaic planner's options (plan/mosaic.py): every field of a mosaic named as
        one of them."""
        return MosaicOptions(concat_dim=self.concat_dim, coords=dict(self.coords) or None,
                             **self._options(MosaicOptions, "mosaic", but={"coords"}))

    def _options(self, options, kind: str, but=frozenset()) -> dict[str, Any]:
        names = {f.name for f in dataclasses.fields(options)} - set(but)
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name in names and _rule(f, kind) not in (None, "found")}

    def planner(self) -> Planner:
        """inventories -> (Plan, problems), as this recipe plans them."""
        if self.kind == "mosaic":
            opts = self.mosaic_options()
            return lambda invs: plan_mosaic(invs, opts)
        hyper = HypercubeOptions(dims=list(self.concat_dims), coords=dict(self.coords),
                                 concat=self.concat_options())
        return lambda invs: plan_hypercube(invs, hyper)

    def hint(self) -> ScanHint:
        """How the files are scanned for this planner (what it compares is digested)."""
        if self.kind == "mosaic":
            return ScanHint("mosaic", self.concat_dim)
        return ScanHint("concat", self.concat_dim, inline=self.inline,
                        dims=self.concat_dims if self.hypercube else (),
                        layout=None if self.grib_layout == DEFAULT_LAYOUT else self.grib_layout)


def _rule(f: dataclasses.Field, kind: str) -> str | None:
    """How field `f` is recorded for a recipe of `kind` ("always", "set", "never",
    "found"); None when it is no option of that kind."""
    if kind not in f.metadata.get("kinds", ()):
        return None
    rule = f.metadata["record"]
    return rule.get(kind) if isinstance(rule, dict) else rule


def chunk_size_bytes(value: int | str | None) -> int | None:
    """`chunk_size` as bytes (an int, or "16M"; None or 0: no cut); a `UsageError` when
    it is no size."""
    try:
        return chunk_bytes(value)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _check_combine_attrs(value: str) -> None:
    if value not in COMBINE_ATTRS:
        raise UsageError(f"combine_attrs must be one of {', '.join(COMBINE_ATTRS)}, "
                         f"not {value!r}")


def _concat_dims(concat_dim: str | None, concat_dims: Sequence[str] | str | None) -> list[str]:
    """The concatenation axes, outermost first, from `concat_dim` and `concat_dims`."""
    if isinstance(concat_dims, str):
        concat_dims = [concat_dims]
    dims = [d for d in (concat_dims or ()) if d]
    if concat_dim is not None and dims and dims != [concat_dim]:
        raise UsageError(f"concat_dim={concat_dim!r} and concat_dims={dims!r}: give one of them")
    return dims or ([concat_dim] if concat_dim is not None else [])


def _mosaic_coords(concat_dim: str | None, coords: Mapping[str, str] | None) -> dict | None:
    """A mosaic over time's `coords`, checked before anything is scanned."""
    if not coords:
        return None
    if concat_dim is None:
        raise UsageError("coords (--coord) needs concat_dim (--concat-dim) for a mosaic")
    extra = sorted(set(coords) - {concat_dim})
    if extra:
        raise UsageError(f"--coord {extra[0]}=...: a mosaic has one concat axis, {concat_dim!r}")
    from ..plan.mosaic_time import check_coord

    for dim, spec in coords.items():
        check_coord(dim, spec)
    return dict(coords)


def _names(names: Iterable[str] | str) -> list[str]:
    if isinstance(names, str):
        names = [names]
    return [n.strip("/") for n in names]


DEFAULTS = Recipe()  # every option's default (check's, check_mosaic's, the command line's)
