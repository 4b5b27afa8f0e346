"""Concatenation: many files' variables become one array per variable along one dimension.

Along the concatenation dimension, the chunk lengths are every file's block lengths in file
order (a rectilinear grid when they differ). Every other axis must agree across files.
Everything that keeps a variable from being referenced exactly is a located `Problem`;
all of them are collected before anything is returned.
"""

from __future__ import annotations

import datetime
import itertools
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..conventions import (
    at_shape,
    coordinate_bounds,
    default_concat_dim,
    grid_mappings,
    named_coordinates,
    py,
    scalar_data,
    stacks,
    unlimited_dims,
)
from ..model import (
    MATERIALIZED,
    REF_DTYPE,
    ArrayPlan,
    Cell,
    FileInventory,
    Location,
    Plan,
    Problem,
    Variable,
)
from ._common import (
    DEFAULT_INLINE_THRESHOLD,
    Context,
    SourceMaps,
    auto_inline,
    calendar_of,
    can_materialize,
    carry_scan_problems,
    compare_shared,
    consistent,
    coordinate_like,
    figure,
    figure_of,
    groups_for,
    inline_plan,
    is_uncompressed,
    settle_unknown_fills,
    source_table,
    variable_names,
)
from ._state import Resume, append_state
from .attrs import combine, dropped_note
from .gaps import coordinate_gaps
from .grid import block_lengths


@dataclass
class ConcatOptions:
    concat_dim: str | None = None
    inline: frozenset[str] = frozenset()
    drop: frozenset[str] = frozenset()
    sort: bool = True
    split: bool = True  # trim padded uncompressed blocks to their valid rows (exact, no copy)
    materialize: bool = False  # copy blocks that cannot be referenced into the cube
    # variables that cannot be referenced are inlined when their decoded values take at
    # most this many bytes per file (0: never)
    inline_threshold: int = DEFAULT_INLINE_THRESHOLD
    no_gaps: bool = False  # a gap in a regular concat coordinate is fatal (plan/gaps.py)
    # `read(path, name)`: a variable's values by its format's library, for one the scan did
    # not record (--inline VAR): the planner's one read of a source, passed in by the caller
    # (api: formats.read_values) so that plan/ imports no scanner; None: such a variable is
    # refused (located)
    read: Callable[[str, str], Any] | None = None
    # files holding different variables (plan/merge.py), and a hypercube's missing cells
    # (plan/hypercube.py): "exact" (every variable covers the same span of the concat
    # axis; a missing cell is refused) or "outer" (the union; steps or cells no file holds
    # read as the variable's fill value)
    join: str = "exact"
    # attributes differing between files (plan/attrs.py): drop_conflicts, override, identical
    combine_attrs: str = "drop_conflicts"
    # keep only these variables and the coordinates they need (None: all)
    variables: frozenset[str] | None = None
    # a new axis' values, one per file in the order given (plan/coords.py `resolve`): its
    # coordinate, instead of dates in the file names
    new_values: Sequence[Any] | None = None
    # and the attributes its coordinate keeps (plan/coords.py `coordinate_attrs`)
    new_attrs: dict | None = None
    # the CF time units the concatenation coordinate is re-expressed in (a hypercube's
    # cells all in one, plan/hypercube.py); None: the first file's
    units: str | None = None
    # a variable without the concatenation axis, that no coordinate needs, differing
    # between files: "identical" (refused) or "override" (the first file's, a note)
    compat: str = "identical"


@dataclass
class _Context(Context):
    dim: str | None = None
    opts: ConcatOptions = field(default_factory=ConcatOptions)
    # no file has the concat dim: data variables are stacked along a new leading axis
    new_axis: bool = False
    # per file: its refs' `path` (0 = itself, k = its k-th data file) -> Plan.sources index
    source_maps: SourceMaps | None = None
    # appending: the cube's last step, planned first (plan/_state.py)
    resume: Resume | None = None
    # per variable ('' / 'group g': a group's attributes), the attributes left out
    dropped_attrs: dict[str, list[str]] = field(default_factory=dict)


def plan_concat(inventories: Sequence[FileInventory], options: ConcatOptions | None = None,
                resume: Resume | None = None) -> tuple[Plan, list[Problem]]:
    """Plan one cube from `inventories` concatenated along `options.concat_dim`.

    Returns the plan (possibly partial) and every problem found; the plan may be written
    only when no problem is fatal. `resume`: the last step of a cube the inventories are
    appended to (`virtualize append`), planned first in its place: every check runs
    against it as against the cube's first file.
    """
    opts = options or ConcatOptions()
    if resume is not None:
        inventories = [resume.last, *inventories]
    # planning may add or re-express variables, never in the caller's objects: an
    # inventory is copied when it is edited (`Context.own`), not before
    invs = list(inventories)
    ctx = _Context(invs, inline=opts.inline, drop=opts.drop, opts=opts, resume=resume,
                   owned=set())
    if resume is not None:
        ctx.inline = ctx.inline | resume.inline
    auto_inline(ctx, opts.inline_threshold)
    carry_scan_problems(ctx, materialize=opts.materialize)
    settle_unknown_fills(ctx)
    ctx.dim = _choose_concat_dim(ctx)
    if ctx.dim is not None and (len(invs) > 1 or opts.units is not None):
        _harmonize_time_units(ctx)
    if ctx.dim is not None:
        _order_by_coordinate(ctx)
        ctx.problems.extend(coordinate_gaps(ctx.invs, ctx.dim, fatal=opts.no_gaps))
    invs = ctx.invs
    sources, ctx.source_maps = source_table(invs)
    arrays: dict[str, ArrayPlan] = {}
    if ctx.dim is None and len(invs) > 1:
        # without an axis to concatenate along, every variable would only repeat that
        return Plan(sources, groups_for(invs[0], arrays), arrays, None, ctx.notes), ctx.problems
    for name in variable_names(invs):
        if name in opts.drop:
            continue
        array = _plan_variable(ctx, name)
        if array is not None:
            arrays[name] = array
    groups = _combined_groups(ctx, arrays)
    plan = Plan(sources=sources, groups=groups, arrays=arrays, concat_dim=ctx.dim, notes=ctx.notes,
                figures=ctx.figures, remedies=ctx.remedies)
    if ctx.dim is not None and arrays:
        plan.append_state = append_state(ctx.invs[-1], ctx.dim, ctx.new_axis, ctx.inline,
                                         arrays)
    return plan, ctx.problems


# -- stack-level steps ---------------------------------------------------------------

def _choose_concat_dim(ctx: _Context) -> str | None:
    invs = ctx.invs
    dim = ctx.opts.concat_dim
    if ctx.resume is not None:  # as the cube was planned
        dim = ctx.resume.dim
        if ctx.resume.new_axis:
            ctx.new_axis = True
            _coordinate_from_names(ctx, dim)
            return dim
    if dim is None:
        # (as the scan chose it for each file, digesting what must agree: conventions.must_agree)
        dim = default_concat_dim(invs[0])
        unlimited = unlimited_dims(invs[0])
        if len(unlimited) > 1:
            # several unlimited dimensions (netCDF4-python makes every dimension created
            # with size 0 one): `time` if it is one of them, else the first; the report says
            ctx.notes.append(f"the files have several unlimited dimensions "
                             f"({', '.join(unlimited)}): concatenated along {dim!r} "
                             "(choose another with --concat-dim)")
        if dim is None and len(invs) > 1:
            ctx.problem(None, None, "no-concat-dim",
                        "the files have no unlimited dimension and no 'time' dimension: "
                        "name the dimension to concatenate along with --concat-dim")
            return None
        if dim is None:
            return None
    lacking = [inv for inv in invs if not any(dim in v.dims for v in inv.variables.values())]
    if len(lacking) == len(invs) and len(invs) == 1:
        # one file is never given a new axis: every variable keeps its shape
        return None
    if len(lacking) == len(invs):
        ctx.new_axis = True
        ctx.notes.append(f"no file has a {dim!r} dimension: data variables are stacked along a "
                         f"new leading {dim!r} axis, one step per file")
        _coordinate_from_names(ctx, dim)
        return dim
    for inv in lacking:
        have = sorted({d for v in inv.variables.values() for d in v.dims})
        ctx.problem(inv.path, None, "concat-dim-missing",
                    f"no variable has the dimension {dim!r} (dimensions: {', '.join(have)})",
                    axis=dim)
    return dim


DATE_IN_NAME = re.compile(
    r"(?<!\d)((?:18|19|20|21)\d\d)-?(0[1-9]|1[0-2])-?(0[1-9]|[12]\d|3[01])"
    r"(?:[T_ -]?([01]\d|2[0-3]):?([0-5]\d)(?::?([0-5]\d))?)?(?!\d)")


def dates_in_names(paths: Sequence[str]) -> list[datetime.datetime] | None:
    """The date (and time of day, if given) in each file's name, or None unless every
    name has exactly one."""
    out = []
    for p in paths:
        found = DATE_IN_NAME.findall(os.path.basename(p))
        if len(found) != 1:
            return None
        y, m, d, hh, mm, ss = found[0]
        try:
            out.append(datetime.datetime(int(y), int(m), int(d), int(hh or 0), int(mm or 0),
                                         int(ss or 0)))
        except ValueError:
            return None
    return out


def _coordinate_from_names(ctx: _Context, dim: str) -> None:
    """A stack along a new axis gets that axis' coordinate from dates in the file names
    (2024-01-01.tif, S2_20240101T103021.tif), when every name has one."""
    invs = ctx.invs
    if ctx.opts.new_values is not None and ctx.resume is None:
        from .coords import coordinate_plan

        coord = coordinate_plan(dim, ctx.opts.new_values, ctx.opts.new_attrs)
        for i in range(len(invs)):
            value = coord.inline[i:i + 1]
            ctx.own(i).variables[dim] = Variable(
                name=dim, dtype=value.dtype, shape=(1,), dims=(dim,), attrs=dict(coord.attrs),
                fill_value=None, codecs=[], blocks=None, values=value, is_coordinate=True)
        return
    anchor = ctx.resume is not None and dim in invs[0].variables
    if anchor:  # appending: the cube's coordinate keeps its origin and unit
        invs = invs[1:]
    dates = dates_in_names([inv.path for inv in invs])
    if dates is None:
        ctx.notes.append(f"the file names hold no date each: {dim!r} has no coordinate values "
                         f"(give them with --coord {dim}=v1,v2,... in file order, or from each "
                         f"file: --coord {dim}=attr:NAME, var:NAME or name:REGEX)")
        return
    start = min(dates)
    whole_days = all(d.hour == d.minute == d.second == 0 for d in dates)
    step, unit = (86400, "days") if whole_days else (1, "seconds")
    fmt = "%Y-%m-%d" if whole_days else "%Y-%m-%dT%H:%M:%S"
    attrs = {"units": f"{unit} since {start.strftime(fmt)}", "calendar": "proleptic_gregorian",
             "long_name": "date in the file name"}
    if anchor:
        attrs = dict(ctx.invs[0].variables[dim].attrs)
        unit, _, origin = str(attrs.get("units", "")).partition(" since ")
        try:
            start = datetime.datetime.fromisoformat(origin)
        except ValueError:
            return
        step = 86400 if unit == "days" else 1
        if step == 86400 and not whole_days:
            # the cube counts days; a time of day needs seconds: a full rebuild (a problem
            # at the cube's last file makes `append` rebuild the cube)
            ctx.problem(ctx.invs[0].path, dim, "append-rebuild",
                        f"{dim!r} counts days, a new file's name has a time of day")
            return
    for i, d in enumerate(dates, start=1 if anchor else 0):
        value = np.array([int((d - start).total_seconds()) // step], dtype="i8")
        ctx.own(i).variables[dim] = Variable(name=dim, dtype=value.dtype, shape=(1,),
                                             dims=(dim,), attrs=attrs, fill_value=None,
                                             codecs=[], blocks=None, values=value,
                                             is_coordinate=True)
    ctx.notes.append(f"{dim!r} values are the dates in the file names")


def _harmonize_time_units(ctx: _Context) -> None:
    """Monthly files often count time from their own start ("days since 2024-02-01").
    The concatenated coordinate is stored inline, so its values can be re-expressed in
    the first file's units, when that is exact (checked by converting back); otherwise
    the units stay as they are and the drift is reported as a problem.

    The coordinate's bounds (CF `bounds` / `climatology`, which carry no units of their
    own and so escape the drift check) are re-expressed with it and stored inline; where
    that is not exact, they are a problem: referenced as they are, they would be wrong.
    `ConcatOptions.units`: the units to re-express in (a hypercube's), the first file's too."""
    dim = ctx.dim
    coords = [inv.variables.get(dim) for inv in ctx.invs]
    if any(c is None or c.values is None for c in coords):
        return
    units0 = ctx.opts.units or coords[0].attrs.get("units")
    cal0 = coords[0].attrs.get("calendar", "standard")
    if not isinstance(units0, str) or " since " not in units0:
        return
    first = 1 if ctx.opts.units is None else 0
    for i, c in enumerate(coords[first:], start=first):
        inv = ctx.invs[i]
        units = c.attrs.get("units")
        if units == units0 or not isinstance(units, str) or " since " not in units or \
                calendar_of(c.attrs) != calendar_of(coords[0].attrs):
            continue
        converted = _reexpress(c.values, units, units0, cal0)
        if converted is None:
            continue
        inv = ctx.own(i)
        inv.variables[dim] = replace(c, values=converted, attrs=dict(c.attrs, units=units0))
        ctx.notes.append(f"{inv.path}: {dim} re-expressed from {units!r} in {units0!r} "
                         "(the cube stores the coordinate itself)")
        for key in ("bounds", "climatology"):
            bname = c.attrs.get(key)
            b = inv.variables.get(bname) if isinstance(bname, str) else None
            if b is None:
                continue
            ctx.inline = ctx.inline | {bname}  # every file's bounds go into the cube
            values = b.values if b.values is not None else _unscanned_values(ctx, inv, bname, b)
            bconv = _reexpress(np.asarray(values), units, units0, cal0) \
                if values is not None else None
            if bconv is None:
                ctx.problem(inv.path, bname, "attribute-drift",
                            f"{bname!r} holds {dim} bounds in {units!r} but cannot be "
                            f"re-expressed exactly in {units0!r} like {dim!r}")
                continue
            attrs = dict(b.attrs, units=units0) if "units" in b.attrs else b.attrs
            inv.variables[bname] = replace(b, values=bconv, attrs=attrs)


def _reexpress(values: np.ndarray, units: str, units0: str, calendar: str) -> np.ndarray | None:
    """CF time values in `units` as the same instants in `units0`, or None unless that is
    exact (converted back to the same numbers, integers staying integers)."""
    import cftime

    try:
        dates = cftime.num2date(values, units, calendar, only_use_cftime_datetimes=True)
        new = np.asarray(cftime.date2num(dates, units0, calendar), dtype="f8")
        back = cftime.date2num(cftime.num2date(new, units0, calendar,
                                               only_use_cftime_datetimes=True), units, calendar)
    except Exception:
        return None
    if not np.array_equal(np.asarray(back, dtype="f8"), values.astype("f8")):
        return None
    if values.dtype.kind in "iu" and not np.array_equal(new, np.round(new)):
        return None
    converted = new.astype(values.dtype.newbyteorder("="))
    if not np.array_equal(converted.astype("f8"), new):
        return None
    return converted


def _concat_coordinate(inv: FileInventory, dim: str) -> Variable | None:
    """The file's coordinate along `dim`: the root's, else (a file whose arrays are all
    in groups: GRIB's datasets in cfgrib's layout) the first group's holding one."""
    if dim in inv.variables:
        return inv.variables[dim]
    return next((v for n, v in sorted(inv.variables.items())
                 if v.basename == dim and v.is_coordinate), None)


def _order_by_coordinate(ctx: _Context) -> None:
    """Check every file's coordinate along the concat dim increases strictly; then, when
    every file has coordinate values, sort the files by their first value and check the
    coordinate increases strictly across the whole stack. One file is neither ordered nor
    joined by it: its coordinate is taken as it is, in whatever order (the cube equals the
    file)."""
    dim = ctx.dim
    if len(ctx.invs) < 2:
        return
    coords = [_concat_coordinate(inv, dim) for inv in ctx.invs]
    for inv, c in zip(ctx.invs, coords):
        if c is not None and c.values is not None and c.values.size > 1:
            _check_increasing(ctx, inv.path, np.asarray(c.values).reshape(-1))
        elif c is not None and c.values is None and c.is_coordinate:
            ctx.notes.append(f"{inv.path}: {dim!r} values were not read (too many), so their "
                             "order was not checked")
    if any(c is None or c.values is None for c in coords) or len(ctx.invs) < 2:
        return
    # A file without steps (e.g. a netCDF file with 0 records) adds nothing: it keeps its
    # place, the others are ordered and checked around it.
    for inv, c in zip(ctx.invs, coords):
        if not c.values.size:
            ctx.problems.append(Problem(
                Location(inv.path, dim, dim), "no-steps",
                f"this file has no {dim!r} steps (length 0): it adds nothing to the cube",
                fatal=False))
    if ctx.opts.sort:
        steps = [i for i, c in enumerate(coords) if c.values.size]
        by_first = sorted(steps, key=lambda i: coords[i].values[0])  # stable
        order = list(range(len(ctx.invs)))
        for slot, i in zip(steps, by_first):
            order[slot] = i
        if order != list(range(len(ctx.invs))):
            ctx.notes.append(
                f"files were given out of {dim} order and were sorted by their {dim!r} "
                "coordinate: " + ", ".join(ctx.invs[i].path for i in order))
            ctx.invs = [ctx.invs[i] for i in order]
            coords = [coords[i] for i in order]
    prev_last = None
    prev_path = None
    twin = _first_equal([c.values for c in coords])
    for inv, c, j in zip(ctx.invs, coords, twin.tolist()):
        vals = c.values
        if not vals.size:
            continue
        if j >= 0:
            ctx.problem(inv.path, dim, "duplicate-coordinate",
                        f"the same {dim} values as {ctx.invs[j].path} (the same steps twice: "
                        "the same file given twice?" + _another_axis(inv, ctx.invs[j], dim)
                        + ")", axis=dim)
        elif prev_last is not None and not vals[0] > prev_last and (
                ctx.opts.sort or not ctx.new_axis or _is_time(c)):
            # (a new axis' step a file, in the order given with --no-sort: labels need not
            # increase, only differ; dates must, as time does)
            ctx.problem(inv.path, dim, "coordinate-not-increasing",
                        f"{dim} starts at {py(vals[0])!r}, not after the previous file's last "
                        f"value {py(prev_last)!r} ({prev_path}): the files overlap in {dim}",
                        axis=dim)
        prev_last = vals[-1]
        prev_path = inv.path


def _is_time(c: Variable) -> bool:
    """A CF time coordinate ("UNIT since DATE")."""
    units = c.attrs.get("units")
    return isinstance(units, str) and " since " in units


def _first_equal(values: list[np.ndarray]) -> np.ndarray:
    """Per array, the index of the first earlier non-empty one with the same bytes (-1:
    none); by hashes, not a dict of every file's bytes."""
    hashes = np.fromiter((hash(v.tobytes()) for v in values), np.int64, len(values))
    out = np.full(len(values), -1, dtype=np.int64)
    order = np.argsort(hashes, kind="stable")
    h = hashes[order]
    starts = np.flatnonzero(np.r_[True, h[1:] != h[:-1]])
    for lo, hi in zip(starts.tolist(), [*starts[1:].tolist(), len(h)]):
        if hi - lo < 2:
            continue
        run = [i for i in order[lo:hi].tolist() if values[i].size]  # (in file order)
        for a, i in enumerate(run):
            key = values[i].tobytes()
            out[i] = next((j for j in run[:a] if values[j].tobytes() == key), -1)
    return out


def _check_increasing(ctx: _Context, path: str, vals: np.ndarray) -> None:
    """One file's coordinate must increase strictly: a step back, a repeated value or a
    NaN is a problem at the index where it breaks."""
    dim = ctx.dim
    with np.errstate(invalid="ignore"):
        bad = np.flatnonzero(~(vals[1:] > vals[:-1]))
    if bad.size:
        i = int(bad[0])
        what = "repeats" if vals[i + 1] == vals[i] else "is not after"
        more = f" ({bad.size} such places in this file)" if bad.size > 1 else ""
        ctx.problem(path, dim, "coordinate-not-increasing",
                    f"{dim} values must increase strictly within the file: index {i + 1} "
                    f"({py(vals[i + 1])!r}) {what} index {i} ({py(vals[i])!r}){more}",
                    axis=dim)


# -- one variable --------------------------------------------------------------------

def _plan_variable(ctx: _Context, name: str) -> ArrayPlan | None:
    invs = ctx.invs
    vs: list[Variable | None] = [inv.variables.get(name) for inv in invs]
    ok = True
    for inv, v in zip(invs, vs):
        if v is None and (inv.path, name) not in ctx.reported:
            ctx.problem(inv.path, name, "missing-variable",
                        f"{name!r} is in other files of the stack but not in this one")
            ok = False
        elif v is None:
            ok = False
    if not ok:
        return None
    vars_: list[Variable] = vs  # type: ignore[assignment]
    inline = name in ctx.inline
    # a scanner's own variables (TIFF coordinates, grid mappings, a reference set's inline
    # chunks) come with values, no blocks
    # (values a scanner recorded for a variable it refused are for inlining, if chosen)
    synthesized = any(v.blocks is None for v in vars_) and \
        all(v.values is not None for v in vars_ if v.blocks is None) and \
        not any((inv.path, name) in ctx.reported for inv in invs)
    if any(v.blocks is None for v in vars_) and not (inline or synthesized):
        return None  # the scanner reported why
    if ctx.new_axis and (_stacks(ctx, vars_[0]) or _scalar_differs(ctx, name, vars_)):
        vars_ = [_with_new_axis(v, ctx.dim) for v in vars_]
    first = vars_[0]
    dim = ctx.dim
    along = dim is not None and dim in first.dims
    consistent_ = consistent(ctx, name, vars_, frozenset({dim}) if along else frozenset())
    k = first.dims.index(dim) if along else None
    default_inline = synthesized or (first.is_coordinate and
                                     all(v.values is not None for v in vars_))
    if inline or default_inline:
        array = _inline_array(ctx, name, vars_, k) if consistent_ else None
    elif along:
        # reports padded blocks either way; refs are joined only when consistent
        array = _concat_array(ctx, name, vars_, k, consistent_)
        if not consistent_:
            array = None
            ctx.figures[name].refused = True
    else:
        array = _shared_array(ctx, name, vars_) if consistent_ else None
    if array is not None and name not in ctx.figures:
        ctx.figures[name] = figure_of(array)
    if array is not None and len(vars_) > 1:
        array.attrs = _combined_attrs(ctx, name, vars_, array.attrs)
    return array


def _combined_attrs(ctx: _Context, name: str, vs: list[Variable], attrs: dict) -> dict:
    """A variable's attributes over every file (plan/attrs.py), as re-expressed by the
    planner for the first (`attrs`); those that change its meaning were compared by
    `consistent` (its `attribute-drift` problems), the others per `--combine-attrs`."""
    dicts = [attrs, *(v.attrs for v in vs[1:])]
    out, dropped, problems = combine(dicts, ctx.opts.combine_attrs, name,
                                     [inv.path for inv in ctx.invs])
    ctx.problems.extend(p for p in problems if p.kind != "attribute-drift")
    if dropped:
        ctx.dropped_attrs[name] = dropped
    return out


def _combined_groups(ctx: _Context, arrays: dict[str, ArrayPlan]) -> dict[str, dict]:
    """Every group's attributes over every file (plan/attrs.py), and the note naming
    what `drop_conflicts` left out."""
    groups = groups_for(ctx.invs[0], arrays)
    if len(ctx.invs) > 1:
        for g in groups:
            if g not in ctx.invs[0].groups:
                continue
            out, dropped, problems = combine([inv.groups.get(g, {}) for inv in ctx.invs],
                                             ctx.opts.combine_attrs, g and f"group {g}",
                                             [inv.path for inv in ctx.invs])
            groups[g] = out
            ctx.problems.extend(problems)
            if dropped:
                ctx.dropped_attrs[g and f"group {g}"] = dropped
    note = dropped_note(ctx.dropped_attrs)
    if note:
        ctx.notes.append(note)
    return groups


def _stacks(ctx: _Context, v: Variable) -> bool:
    """In new-axis mode, which variables get the axis: data, not coordinates, their
    bounds, scalars or grid mappings (those must be the same in every file; the scan's
    rule)."""
    return stacks(v, grid_mappings(ctx.invs[0]), coordinate_bounds(ctx.invs[0]))


def _another_axis(inv: FileInventory, other: FileInventory, dim: str) -> str:
    """A hint for two files of the same steps whose global attributes tell them apart (an
    ensemble's members, a model's runs): the axis they are on, as a hypercube."""
    a, b = inv.groups.get("", {}), other.groups.get("", {})
    key = next((k for k in ("variant_label", "member_id", "realization", "run", "ensemble",
                            "experiment_id", "source_id") if k in a and k in b
                and str(a[k]) != str(b[k])), None)
    if key is None:
        return ""
    return (f"; or files of another axis, their {key!r} differs: --concat-dim NEW "
            f"--concat-dim {dim} --coord NEW=attr:{key}")


def _scalar_differs(ctx: _Context, name: str, vs: list[Variable]) -> bool:
    """A scalar data variable (`conventions.scalar_data`) that differs between the files
    of a new axis: stacked along it (`realization(member)`), as xarray's `combine_nested`
    stacks data variables; equal in every file, it stays shared. Decided by the one
    comparison (`compare_shared`), its findings kept only to decide."""
    inv0 = ctx.invs[0]
    if len(vs) < 2 or ctx.opts.compat == "override" or not scalar_data(
            vs[0], grid_mappings(inv0), coordinate_bounds(inv0), named_coordinates(inv0)):
        return False  # (override: the first file's, `_shared_array`)
    before = len(ctx.problems)
    same = compare_shared(ctx, name, vs, _why_shared(ctx))
    found = ctx.problems[before:]
    del ctx.problems[before:]
    if same or not all(p.kind == "differs-between-files" for p in found):
        return False  # (the same: shared; not comparable: refused where it is shared)
    ctx.notes.append(f"{name!r} differs between the files: stacked along the new "
                     f"{ctx.dim!r} axis")
    return True


def _why_shared(ctx: _Context) -> str:
    return (f"is not stacked along the new {ctx.dim!r} axis" if ctx.new_axis else
            f"has no {ctx.dim!r} axis" if ctx.dim is not None else "is in every file")


def _overrides(ctx: _Context, name: str) -> bool:
    """`--compat override` applies to `name`: no coordinate needs it (`coordinate_like`)."""
    return ctx.opts.compat == "override" and name not in coordinate_like(ctx.invs[0])


def _is_mapping(ctx: _Context, v: Variable) -> bool:
    """A grid mapping: its attributes are what it means (compared with its values)."""
    return "grid_mapping_name" in v.attrs or v.basename in grid_mappings(ctx.invs[0])


def _with_new_axis(v: Variable, dim: str) -> Variable:
    blocks = v.blocks
    if blocks is not None:
        blocks = replace(blocks, block_shape=(1, *blocks.block_shape), refs=blocks.refs[None])
    values = v.values[None] if v.values is not None else None
    return replace(v, shape=(1, *v.shape), dims=(dim, *v.dims), blocks=blocks, values=values)


def _concat_array(ctx: _Context, name: str, vs: list[Variable], k: int,
                  consistent_: bool = True) -> ArrayPlan | None:
    """`consistent_`: whether `consistent` found the files' `name` alike on every other
    axis; when not (reported there), padded blocks are still reported but the block tables,
    which need not line up, are not joined."""
    first = vs[0]
    dim = ctx.dim
    lengths_k: list[int] = []
    parts: list[np.ndarray] = []
    last = len(vs) - 1
    ok = True
    refused: set[int] = set()
    padded: dict[int, int] = {}  # chunk -> steps of padding, for the figure
    cells: dict[tuple[int, ...], Cell] = {}
    # the manifest is filled in place, file by file (no copy of each file's block table
    # held until the end), when the files' block grids line up (else they are refused)
    out = _concat_out(vs, k)
    for i, (inv, v) in enumerate(zip(ctx.invs, vs)):
        if v.dims != first.dims:  # dims-differ (reported by `consistent`)
            ok = False
            continue
        n, b = v.shape[k], v.blocks.block_shape[k]
        lens = block_lengths(n, b, v.blocks.padded)
        if out is not None:
            refs = out[(slice(None),) * k + (slice(len(lengths_k), len(lengths_k) + len(lens)),)]
            refs[...] = v.blocks.refs
        else:
            refs = v.blocks.refs.copy()
        held = refs["path"] == MATERIALIZED  # a reference set's inline chunks
        refs["path"] = np.where(held, MATERIALIZED, ctx.source_maps[i][np.where(held, 0, refs["path"])])
        if held.any():
            _held_cells(ctx, cells, held, v, i, name, k, len(lengths_k))
        if v.blocks.padded and n % b and i != last:
            j, r = len(lens) - 1, n % b
            slab = np.take(refs, [j], axis=k)  # every chunk of this padded block's layer
            count = int((slab["length"] > 0).sum())
            nbytes = count * r * math.prod(v.blocks.block_shape) // b * v.dtype.itemsize
            if not count:
                # no block of this layer is stored (a variable never written, or of a
                # zero-length dimension): every chunk reads as the fill value at any length
                lens[-1] = r
            elif ctx.opts.split and k == 0 and is_uncompressed(v.codecs):
                # exact: the first r rows of a C-ordered block are its first bytes
                row_bytes = math.prod(v.blocks.block_shape[1:]) * v.dtype.itemsize
                refs["length"][j] = np.where(refs["length"][j] > 0, r * row_bytes, 0)
                lens[-1] = r
                ctx.use_remedy("split", count, 0)
            elif ctx.opts.materialize and can_materialize(v.codecs):
                lens[-1] = r
                _materialize_layer(cells, refs, v, int(ctx.source_maps[i][0]), name, k, j,
                                   len(lengths_k) + j)
                ctx.use_remedy("materialize", count, nbytes)
            else:
                remedy = (f"materialize {count} block(s), {nbytes} bytes (--materialize)"
                          if can_materialize(v.codecs) else None)
                ctx.problem(inv.path, name, "padded-block",
                            f"block {j} along {dim!r} is stored padded to {b} steps but holds "
                            f"{r} (steps {j * b}..{n - 1} of {n}); a padded block can only be "
                            "the last chunk of the cube, and more files follow this one",
                            axis=dim, block=(j,), remedy=remedy)
                if remedy:
                    ctx.use_remedy("materialize", count, nbytes, enabled=False)
                ok = False
                refused.add(len(lengths_k) + j)
                padded[len(lengths_k) + j] = b - r
        lengths_k.extend(lens)
        if out is None:
            parts.append(refs)
    chunk_lengths = []
    for axis, (n, b) in enumerate(zip(first.shape, first.blocks.block_shape)):
        if axis == k:
            chunk_lengths.append(tuple(lengths_k))
        else:
            chunk_lengths.append(tuple(block_lengths(n, b, first.blocks.padded)))
    shape = list(first.shape)
    shape[k] = sum(v.shape[k] for v in vs)
    ctx.figures[name] = figure(name, first.dims, shape, chunk_lengths, {k: refused},
                               padding={k: padded})
    if not ok or not consistent_ or \
            any(p.shape[:k] + p.shape[k + 1:] != parts[0].shape[:k] + parts[0].shape[k + 1:]
                for p in parts):
        return None
    refs = out if out is not None else \
        np.concatenate(parts, axis=k) if parts else np.zeros((0,), REF_DTYPE)
    return ArrayPlan(name=name, dtype=first.dtype, shape=tuple(shape), dims=first.dims,
                     chunk_lengths=tuple(chunk_lengths), codecs=first.codecs,
                     fill_value=first.fill_value, attrs=dict(first.attrs), refs=refs,
                     materialize=cells)


def _concat_out(vs: list[Variable], k: int) -> np.ndarray | None:
    """The concatenated manifest, to be filled: None unless every file's block grid has
    the first one's extent on every axis but `k`, and one block per chunk along `k`."""
    grid0 = vs[0].blocks.refs.shape
    total = 0
    for v in vs:
        grid, n, b = v.blocks.refs.shape, v.shape[k], v.blocks.block_shape[k]
        if len(grid) != len(grid0) or any(g != h for a, (g, h) in enumerate(zip(grid, grid0))
                                          if a != k) or grid[k] != (-(-n // b) if n else 0):
            return None
        total += grid[k]
    shape = list(grid0)
    shape[k] = total
    return np.empty(shape, dtype=REF_DTYPE)


def _materialize_layer(cells, refs, v: Variable, source: int, name: str, k: int, j: int,
                       global_j: int) -> None:
    """Mark every chunk of block layer j (along axis k) of one file to be copied: its
    refs point nowhere, its cell says which region of the file holds its values."""
    shape, bs = v.shape, v.blocks.block_shape
    layer = [range(n) if a != k else [j] for a, n in enumerate(refs.shape)]
    for index in itertools.product(*layer):
        rec = refs[index]
        rec["path"], rec["offset"], rec["length"] = MATERIALIZED, 0, 0
        region = tuple((m * b, min((m + 1) * b, n)) for m, b, n in zip(index, bs, shape))
        key = tuple(global_j if a == k else m for a, m in enumerate(index))
        cells[key] = Cell(source, name, region)
        refs[index] = rec


def _held_cells(ctx: _Context, cells, held: np.ndarray, v: Variable, i: int, name: str,
                k: int | None, offset: int) -> None:
    """Chunks a reference set holds inline (no byte range): their values are decoded from
    it and stored in the cube like materialized chunks (re-encoded, checked exact)."""
    bs, shape = v.blocks.block_shape, v.shape
    for index in np.argwhere(held).tolist():
        region = tuple((m * b, min((m + 1) * b, n)) for m, b, n in zip(index, bs, shape))
        key = tuple(m + offset if a == k else m for a, m in enumerate(index))
        cells[key] = Cell(int(ctx.source_maps[i][0]), name, region)
    where = ("are held inline in the reference set" if ctx.invs[i].reference_set else
             "cannot be referenced (stored with a different HDF5 filter mask)")
    ctx.notes.append(f"{ctx.invs[i].path}: {int(held.sum())} chunk(s) of {name} {where}: decoded "
                     "and stored in the cube")


def _shared_array(ctx: _Context, name: str, vs: list[Variable]) -> ArrayPlan | None:
    """A variable without the concat dimension: the same in every file, referenced once."""
    first = vs[0]
    # compared by the values or per-block digests the scan recorded (planning reads
    # nothing): differing files, or files that cannot be compared, are refused
    if not compare_shared(ctx, name, vs, _why_shared(ctx), attrs=_is_mapping(ctx, first),
                          override=_overrides(ctx, name)):
        return None
    refs = first.blocks.refs.copy()
    held = refs["path"] == MATERIALIZED
    refs["path"] = np.where(held, MATERIALIZED, ctx.source_maps[0][np.where(held, 0, refs["path"])])
    cells: dict[tuple[int, ...], Cell] = {}
    if held.any():
        _held_cells(ctx, cells, held, first, 0, name, None, 0)
    chunk_lengths = tuple(tuple(block_lengths(n, b, first.blocks.padded))
                          for n, b in zip(first.shape, first.blocks.block_shape))
    return ArrayPlan(name=name, dtype=first.dtype, shape=first.shape, dims=first.dims,
                     chunk_lengths=chunk_lengths, codecs=first.codecs,
                     fill_value=first.fill_value, attrs=dict(first.attrs), refs=refs,
                     materialize=cells)


def _unscanned_values(ctx: _Context, inv: FileInventory, name: str, v: Variable
                      ) -> np.ndarray | None:
    """Values the plan stores but the scan did not record: a variable named with --inline
    beyond what the scanners record (small ones that cannot be referenced, coordinates and
    their bounds), or one its library could not decode when scanned. The one place
    planning reads a source (docs/planning.md); None (with a located problem) when the
    library cannot read it."""
    try:
        if ctx.opts.read is None:
            raise LookupError("the planner was given no source reader (ConcatOptions.read)")
        return at_shape(ctx.opts.read(inv.path, name), v)
    except Exception as e:  # the library cannot decode it (a damaged block, a filter
        # it has no plugin for): refused, located, like a scanner's corrupt data
        ctx.problem(inv.path, name, "corrupt", f"cannot be inlined: the source library "
                    f"cannot read it ({type(e).__name__}: {e})")
        return None


def _inline_array(ctx: _Context, name: str, vs: list[Variable], k: int | None) -> ArrayPlan | None:
    """Values stored in the cube itself: coordinates by default, others on request."""
    first = vs[0]
    values = []
    for inv, v in zip(ctx.invs, vs):
        value = v.values if v.values is not None else _unscanned_values(ctx, inv, name, v)
        if value is None:
            return None
        if v.dtype.names is not None:  # a struct: each file's layout as the cube's
            value = np.asarray(value).astype(v.dtype)
        values.append(value)
    if k is not None:
        data = np.concatenate(values, axis=k)
    else:
        data = values[0]
        if not compare_shared(ctx, name, vs, _why_shared(ctx), values=values,
                              attrs=_is_mapping(ctx, first), override=_overrides(ctx, name)):
            return None
    return inline_plan(name, np.asarray(data, dtype=first.dtype), first.dims, first.attrs,
                       first.fill_value)


# -- comparisons ---------------------------------------------------------------------

