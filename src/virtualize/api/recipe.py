"""The recipe: every option that shapes a cube, as one value (`Recipe`).

`check` and `check_mosaic` build it from their arguments (`Recipe.from_options`), the
command line from its options (`cli.recipe_from_args`). An output records it
(`to_dict`: the record's `recipe`, outputs/record.py), and `append`, `export` and
`verify --decode` read it back (`from_dict`: any record virtualize wrote) to plan the
stack as it was planned. `planner()`, `hint()` and `concat_options()` are the one place
a recipe becomes the planner's options; each option has one default, its field's
(`DEFAULTS`: the API's and the command line's defaults are read from it).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..conventions import ScanHint
from ..formats import read_values
from ..model import FileInventory, Plan, Problem, UsageError
from ..plan import DEFAULT_INLINE_THRESHOLD, ConcatOptions, MosaicOptions, plan_mosaic
from ..plan.attrs import COMBINE_ATTRS
from ..plan.coords import CoordSpec, label, parse_coords
from ..plan.cut import DEFAULT_CHUNK_SIZE, chunk_bytes
from ..plan.hypercube import HypercubeOptions, plan_hypercube
from ..plan.merge import JOINS

Planner = Callable[[list[FileInventory]], tuple[Plan, list[Problem]]]
KINDS = ("concat", "mosaic")

# What a record written before an option existed was made with: its absence means this,
# not the option's default (no cut before --chunk-size; nothing inlined for its size
# before --inline-threshold).
_BEFORE = {"chunk_size": None, "inline_threshold": 0}


@dataclass(frozen=True)
class Recipe:
    """How a stack is planned into a cube. `kind` "concat" (a stack along one axis, or a
    hypercube along several) or "mosaic" (tiles side by side, or a mosaic over time)."""

    kind: str = "concat"
    # the concatenation axes, outermost first (one: a stack's --concat-dim; none: the
    # planner's choice); a mosaic over time's one axis
    concat_dims: tuple[str, ...] = ()
    # a new axis' values of each file: a stack's {dim: CoordSpec} (plan/coords.py), a
    # mosaic over time's {dim: its --coord text}
    coords: Mapping[str, Any] = field(default_factory=dict, hash=False)
    drop: frozenset[str] = frozenset()
    split: bool = True  # padded uncompressed blocks cut to their valid rows
    materialize: bool = False  # blocks that cannot be referenced copied into the cube
    materialize_limit: int | None = None  # refuse a plan copying more bytes
    chunk_size: int | None = DEFAULT_CHUNK_SIZE  # uncompressed blocks cut at whole rows
    combine_attrs: str = "drop_conflicts"  # attributes differing between files (plan/attrs.py)
    # a stack's
    inline: frozenset[str] = frozenset()
    inline_threshold: int = DEFAULT_INLINE_THRESHOLD  # what cannot be referenced, inlined
    sort: bool = True  # files sorted by their coordinate (--no-sort: in the order given)
    no_gaps: bool = False  # a gap is fatal (each run's: never recorded)
    join: str = "exact"  # variables or cells some file lacks: "exact" refuses, "outer" fills
    variables: frozenset[str] | None = None  # kept with the coordinates they need
    # what a check found, recorded for `append`: each file's value of a listed new axis
    coord_values: Mapping[str, list] | None = field(default=None, hash=False)
    # a mosaic's
    offsets: tuple[tuple[int, int], ...] | None = None  # each tile's (row, col), no georeference
    overlap: str | None = None  # None: overlaps are problems; "last" / "first": who wins
    tolerance: float = 1e-3  # pixels from whole-pixel alignment

    def __post_init__(self) -> None:
        # (each field in its one form, however it was given: names without a leading
        # "/", sets, tuples; a stack's coords parsed, plan/coords.py)
        def put(name: str, value) -> None:
            object.__setattr__(self, name, value)

        if self.kind not in KINDS:
            raise ValueError(f"a recipe's kind is one of {', '.join(KINDS)}, not {self.kind!r}")

        put("concat_dims", tuple(self.concat_dims))
        put("drop", frozenset(_names(self.drop)))
        put("inline", frozenset(_names(self.inline)))
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
        allowed = {"concat": _CONCAT_OPTIONS, "mosaic": _MOSAIC_OPTIONS}.get(kind)
        if allowed is None:
            raise UsageError(f"a recipe's kind is one of {', '.join(KINDS)}, not {kind!r}")
        unknown = sorted(set(options) - allowed)
        if unknown:
            raise TypeError(f"{', '.join(unknown)}: not an option of a {kind} recipe")
        given = {k: v for k, v in options.items() if k not in ("concat_dim", "concat_dims")}
        given["chunk_size"] = chunk_size_bytes(options.get("chunk_size", cls.chunk_size))
        concat_dim = options.get("concat_dim")
        if kind == "mosaic":
            given["coords"] = _mosaic_coords(concat_dim, options.get("coords"))
            _check_combine_attrs(given.get("combine_attrs", cls.combine_attrs))
            if concat_dim is not None and given.get("materialize"):
                raise UsageError("--materialize is not supported for a mosaic over time yet")
            if given.get("overlap") not in (None, "last", "first"):
                raise UsageError(f"overlap must be None, 'last' or 'first', not "
                                 f"{given['overlap']!r}")
            return cls("mosaic", (concat_dim,) if concat_dim is not None else (), **given)
        if given.get("join", cls.join) not in JOINS:
            raise UsageError(f"join must be one of {', '.join(JOINS)}, not {given['join']!r}")
        _check_combine_attrs(given.get("combine_attrs", cls.combine_attrs))
        dims = _concat_dims(concat_dim, options.get("concat_dims"))
        return cls("concat", tuple(dims), **given)  # (coords parsed: __post_init__)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Recipe | None:
        """The recipe an output recorded (`to_dict`, or what an earlier virtualize
        wrote: an option it did not record has its default, or what the record's time
        meant, `_BEFORE`); None when it records none (written before recipes were)."""
        if not isinstance(d, Mapping) or d.get("kind") not in KINDS:
            return None
        got = {k: d.get(k, _BEFORE.get(k, getattr(DEFAULTS, k))) for k in _RECORDED[d["kind"]]}
        got.update(drop=d.get("drop") or (), coords=d.get("coords") or {})
        dims = list(d.get("concat_dims") or ()) or \
            ([d["concat_dim"]] if d.get("concat_dim") is not None else [])
        if d["kind"] == "mosaic":
            got["offsets"] = d.get("offsets") or None
        else:
            got.update(inline=d.get("inline") or (), coord_values=d.get("coord_values"))
        return cls(d["kind"], tuple(dims), **got)

    def to_dict(self) -> dict[str, Any]:
        """The record's `recipe` (JSON): what `from_dict` reads back. A plain stack's
        records what it always did; the merge's options only when not their default, a
        hypercube's axes and coordinates when it is one, a mosaic over time's axis."""
        dims = list(self.concat_dims)
        if self.kind == "mosaic":
            out: dict[str, Any] = {
                "kind": "mosaic", "overlap": self.overlap, "tolerance": self.tolerance,
                "offsets": [list(o) for o in self.offsets] if self.offsets else None,
                "drop": sorted(self.drop), "split": self.split, "materialize": self.materialize,
                "chunk_size": self.chunk_size}
            if dims:
                out.update(concat_dim=dims[0], coords=dict(self.coords) or None)
            if self.combine_attrs != "drop_conflicts":
                out["combine_attrs"] = self.combine_attrs
            return out
        out = {"kind": "concat", "concat_dim": self.concat_dim, "inline": sorted(self.inline),
               "drop": sorted(self.drop), "sort": self.sort, "split": self.split,
               "materialize": self.materialize, "materialize_limit": self.materialize_limit,
               "inline_threshold": self.inline_threshold, "chunk_size": self.chunk_size}
        if self.join != "exact":
            out["join"] = self.join
        if self.combine_attrs != "drop_conflicts":
            out["combine_attrs"] = self.combine_attrs
        if self.variables is not None:
            out["variables"] = sorted(self.variables)
        if self.hypercube:  # (a plain stack's recipe stays as it was)
            out.update(concat_dim=None, concat_dims=dims,
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
        """The one-axis planner's options (plan/concat.py, plan/merge.py)."""
        return ConcatOptions(concat_dim=self.concat_dim, inline=self.inline, drop=self.drop,
                             sort=self.sort, split=self.split, materialize=self.materialize,
                             inline_threshold=self.inline_threshold, no_gaps=self.no_gaps,
                             read=read_values, join=self.join, combine_attrs=self.combine_attrs,
                             variables=self.variables)

    def mosaic_options(self) -> MosaicOptions:
        return MosaicOptions(offsets=self.offsets, overlap=self.overlap, tolerance=self.tolerance,
                             drop=self.drop, split=self.split, materialize=self.materialize,
                             concat_dim=self.concat_dim, coords=dict(self.coords) or None,
                             combine_attrs=self.combine_attrs)

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
                        dims=self.concat_dims if self.hypercube else ())


_SHARED = {"drop", "split", "materialize", "materialize_limit", "chunk_size", "combine_attrs",
           "concat_dim", "coords"}
_CONCAT_OPTIONS = _SHARED | {"concat_dims", "inline", "inline_threshold", "sort", "no_gaps",
                             "join", "variables"}
_MOSAIC_OPTIONS = _SHARED | {"offsets", "overlap", "tolerance"}
# the plain options a record holds of each kind (`to_dict`)
_RECORDED = {"concat": ("split", "materialize", "materialize_limit", "chunk_size",
                        "combine_attrs", "inline_threshold", "sort", "join", "variables"),
             "mosaic": ("split", "materialize", "chunk_size", "combine_attrs", "overlap",
                        "tolerance")}


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
