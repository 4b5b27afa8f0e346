"""Hypercubes: files stacked along several axes (`--concat-dim` given several times,
outermost first), new axes given their coordinate (`--coord`, plan/coords.py).

Each file's position along every axis is resolved (a new axis: its `--coord` value; an
axis the files have: the first value of its coordinate, in one CF time unit however each
file counts it), the files are put into the cells of the grid those positions span (a
missing cell, or two files in one, is refused naming the cell's coordinates; along an
axis the files have a cell is not a file: a member's files there are one stack, split
anywhere), the files along the innermost axis are planned by the one-axis planner, and
those sub-plans are stacked along the outer axes, innermost first, after their axes the
files have are made one (plan/align.py: one coordinate, the union under `--join outer`;
one chunk grid, cut at every cell's edges): data variables get a new axis (or are joined
along an axis they have), what does not vary along an axis (coordinates of the other
axes, bounds, grid mappings, scalars, data without an axis the files have) is compared
across the cells, bit for bit (`compare_shared`), never taken from the first unseen
(`--compat override`: the first cell's, named); every stacked variable's chunks on the
other axes must be the same in every cell.
"""

from __future__ import annotations

import datetime
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..conventions import (
    coordinate_bounds,
    grid_mappings,
    named_coordinates,
    py,
    scalar_data,
    stacks,
)
from ..model import (
    MATERIALIZED,
    ArrayPlan,
    Cell,
    FileInventory,
    Layout,
    LayoutAxis,
    LayoutCell,
    Location,
    Plan,
    Problem,
    Remedy,
    UsageError,
)
from ._common import (
    MEANING_ATTRS,
    Context,
    calendar_of,
    codec_key,
    compare_shared,
    coordinate_like,
    declares_fill,
    figure_of,
    first_difference,
    inline_plan,
    overridden,
    same_meaning,
    same_value,
    scalar_clashes,
)
from .align import align, value_label
from .attrs import combine, dropped_note
from .concat import ConcatOptions
from .coords import CoordSpec, coordinate_attrs, coordinate_plan, label, resolve
from .merge import plan_merge, select, selected_files


@dataclass
class HypercubeOptions:
    dims: Sequence[str] = ()  # the concatenation axes, outermost first
    coords: dict[str, CoordSpec] = field(default_factory=dict)  # new axes' values
    concat: ConcatOptions = field(default_factory=ConcatOptions)


def plan_hypercube(inventories: Sequence[FileInventory], options: HypercubeOptions | None = None
                   ) -> tuple[Plan, list[Problem]]:
    """Plan one cube from files stacked along `options.dims` (outermost first). One axis
    without a `--coord` is the one-axis planner's stack (`plan_merge`). A cube xarray
    could not open (a scalar named like a dimension: `scalar_clashes`) is refused."""
    plan, problems = _plan(inventories, options or HypercubeOptions())
    if not any(p.fatal for p in problems):
        problems.extend(scalar_clashes(plan))
    return plan, problems


def _plan(inventories: Sequence[FileInventory], opts: HypercubeOptions
          ) -> tuple[Plan, list[Problem]]:
    dims = list(opts.dims) or ([opts.concat.concat_dim] if opts.concat.concat_dim else [])
    invs = list(inventories)
    if len(set(dims)) != len(dims):
        raise UsageError(f"--concat-dim given twice for one axis: {', '.join(dims)}")
    for d in opts.coords:
        if d not in dims:
            raise UsageError(f"--coord {d}=...: {d!r} is not a concatenation axis "
                             f"(--concat-dim {d})" + (f"; the axes are {', '.join(dims)}"
                                                      if dims else ""))
    if len(dims) <= 1 and not opts.coords:
        return _inner(opts, invs, dims[0] if dims else None, None)
    problems: list[Problem] = []
    notes: list[str] = []
    if opts.concat.variables is not None:  # (files holding none of them are left out)
        invs, notes = selected_files(invs, replace(select(invs, opts.concat),
                                                   concat_dim=dims[-1] if dims else None))
    drop = set(opts.concat.drop)
    keys: dict[str, list] = {}  # per axis, each file's position
    spans: dict[str, list] = {}  # per axis the files have, each file's (first, last)
    new: dict[str, bool] = {}
    coord_attrs: dict[str, dict] = {}  # per new axis, what its coordinate keeps (var:)
    units: dict[str, str | None] = {}  # per axis the files have, the CF units keys are in
    for d in dims:
        has = [any(d in v.dims for v in inv.variables.values()) for inv in invs]
        new[d] = not any(has)
        spec = opts.coords.get(d)
        if new[d]:
            if spec is None and len(dims) > 1:
                problems.append(Problem(Location(None, None, d), "coord-unresolved",
                                        f"no file has a dimension {d!r}: give each file's "
                                        f"position along it with --coord {d}=attr:NAME, "
                                        f"var:NAME, name:REGEX or v1,v2,..."))
                continue
            if spec is None:
                return _inner(opts, invs, d, None)
            values, ps = resolve(invs, d, spec)
            problems.extend(ps)
            coord_attrs[d], ps = coordinate_attrs(invs, d, spec)
            problems.extend(ps)
            if values is not None:
                keys[d] = values
                notes.append(f"{d!r} is a new axis, its values from --coord {d}={spec.text()}")
                if spec.kind == "var":
                    drop.add(spec.arg)  # (its values are the axis' coordinate now)
            continue
        if spec is not None:
            raise UsageError(f"--coord {d}={spec.text()}: the files have a dimension {d!r}; "
                             "its coordinate comes from the files")
        for inv, h in zip(invs, has):
            if not h:
                problems.append(Problem(Location(inv.path, None, d), "concat-dim-missing",
                                        f"no variable has the dimension {d!r}", fatal=True))
        ks, sp = [], []
        for inv in invs:
            c = inv.variables.get(d)
            vals = np.asarray(c.values).reshape(-1) if c is not None and c.values is not None \
                else None
            if vals is None or not vals.size:
                if any(d in v.dims for v in inv.variables.values()):
                    problems.append(Problem(Location(inv.path, d, d), "coord-unresolved",
                                            f"the file has no {d!r} coordinate values: its "
                                            f"place along {d!r} is unknown"))
                ks.append(None)
                sp.append(None)
                continue
            ks.append(py(vals[0]))
            sp.append((py(vals[0]), py(vals[-1]), c.attrs))
        keys[d], spans[d], units[d] = _in_one_unit(ks, sp)
    if any(p.fatal for p in problems) or len(keys) != len(dims):
        return Plan([], {}, {}, dims[-1] if dims else None, notes), problems
    # the grid: every axis' positions in order, every file's cell
    # (--no-sort: a new axis' positions in the order the files give them)
    axis_values = {d: _ordered(keys[d], opts.concat.sort or not new[d]) for d in dims}
    where = {d: {_k(v): i for i, v in enumerate(axis_values[d])} for d in dims}
    cells: dict[tuple[int, ...], list[int]] = {}
    for f in range(len(invs)):
        cells.setdefault(tuple(where[d][_k(keys[d][f])] for d in dims), []).append(f)
    labels = {d: [_label(d, v, spans, keys, invs, coord_attrs.get(d)) for v in axis_values[d]]
              for d in dims}

    def cell_name(index: tuple[int, ...]) -> str:
        return ", ".join(f"{d}={labels[d][i]!r}" if new[d] and isinstance(
            axis_values[d][i], str) else f"{d}={labels[d][i]}" for d, i in zip(dims, index))

    # files holding different variables (a merge along the inner axis: tas in yearly
    # files, pr in 5-year ones) each fill their own grid: one cell holds one file of each
    drop |= set(select(invs, replace(opts.concat, drop=frozenset(drop))).drop)
    held = [tuple(n for n in _data_vars(inv) if n not in drop) for inv in invs]
    kinds = list(dict.fromkeys(held))
    for index, fs in cells.items():
        first: dict[tuple[str, ...], int] = {}
        for f in fs:
            if held[f] not in first:
                first[held[f]] = f
                continue
            problems.append(Problem(Location(invs[f].path), "duplicate-cell",
                                    f"the same cell as {invs[first[held[f]]].path} "
                                    f"({cell_name(index)}): two files at one place of the grid"
                                    + (f" (steps of another axis? name it too: --concat-dim "
                                       f"{dims[0]} --concat-dim DIM)" if len(dims) == 1
                                       else "")))
    # a cell no file of a kind fills: along a new inner axis, every cell is a file; along
    # an axis the files have (time), a cell is not a file: a row (the cells of one outer
    # position) holding the kind anywhere is one stack, its steps compared with the other
    # rows' when stacked (plan/align.py: a member may be split anywhere, start later); a
    # row holding none of it is missing (drawn in the layout either way)
    missing: list[tuple[tuple[int, ...], tuple[str, ...]]] = []
    empty: list[tuple[tuple[int, ...], tuple[str, ...]]] = []  # cells of rows without it
    outer = opts.concat.join == "outer"
    if opts.concat.join not in ("exact", "outer"):
        raise UsageError(f"join must be 'exact' or 'outer', not {opts.concat.join!r}")
    inner_new = new[dims[-1]]
    for kind in kinds:
        mine = [f for f in range(len(invs)) if held[f] == kind]
        inner = sorted({where[dims[-1]][_k(keys[dims[-1]][f])] for f in mine})
        rows = {i[:-1] for i, fs in cells.items() if any(held[f] == kind for f in fs)}
        for index in itertools.product(*(range(len(axis_values[d])) for d in dims[:-1]),
                                       inner):
            if any(held[f] == kind for f in cells.get(index, ())):
                continue
            if not inner_new and index[:-1] in rows:
                if not _covered(index, cells, dims, spans, axis_values, set(mine)):
                    missing.append((index, kind))
                continue
            missing.append((index, kind))
            empty.append((index, kind))
            if not outer:
                of = f" for {', '.join(kind)}" if len(kinds) > 1 else ""
                problems.append(Problem(Location(None, None, dims[-1]), "missing-cell",
                                        f"no file{of} for the cell {cell_name(index)}: the "
                                        "files must fill the grid their coordinates span "
                                        "(--join outer: absent chunks that read as the fill "
                                        "value)"))
    layout = Layout([LayoutAxis(d, labels[d], new[d]) for d in dims], sorted(
        [LayoutCell(index, invs[f].path, held[f]) for index, fs in cells.items() for f in fs]
        + [LayoutCell(index, None, kind) for index, kind in missing],
        key=lambda c: (c.index, c.path is None)))
    if problems and any(p.fatal for p in problems):
        plan = Plan([], {}, {}, dims[-1], notes)
        plan.layout = layout
        return plan, problems
    concat = replace(opts.concat, drop=frozenset(drop),
                     units=None if inner_new else units.get(dims[-1]))
    if outer and not inner_new:  # (the cells' bounds are merged over their union: by value)
        concat = replace(concat, inline=concat.inline | _bounds_of(invs, dims[-1]))
    static = _static(invs, dims, new)
    real = len(invs)  # (the stand-ins are appended after the files)
    for index, kind, f in _stand_ins(empty, cells, held, dims, new, real):
        # (--join outer) a stand-in whose data are absent chunks: of a file holding the
        # same variables at the same place along every axis the files have (its steps,
        # coordinates), the nearest; for a row holding none of them, each file of the
        # nearest row that does
        if f is None:
            problems.append(Problem(Location(None, None, dims[-1]), "missing-cell",
                                    f"no file for the cell {cell_name(index)}, and none at its "
                                    "place along the axes the files have to stand in for it "
                                    "(--join outer)"))
            continue
        # its scalars (realization by member, a reference time by run) from a file at its
        # place along the axes each one's value follows, not the template's
        keep = opts.concat.variables
        scalars = {n: _scalar_source(index, n, cells, invs, real) for n in _scalars(invs[f])
                   if n not in drop and (keep is None or n in keep)}
        for n, g in scalars.items():
            if g is None:
                problems.append(Problem(Location(invs[f].path, n), "missing-cell",
                                        f"{n!r} differs in every cell: its value at the cell "
                                        f"{cell_name(index)} that no file fills is unknown "
                                        f"(--join outer; --drop {n})"))
        invs.append(_absent(invs[f], problems, cell_name(index), dims, new,
                            {n: invs[g] for n, g in scalars.items() if g is not None},
                            keep=static | drop))
        cells.setdefault(index, []).append(len(invs) - 1)
        held.append(kind)
    if empty:
        notes.append(f"--join outer: {len(empty)} cell(s) no file fills read as the fill "
                     "value: " + "; ".join(cell_name(i) for i, _ in empty[:5])
                     + ("; ..." if len(empty) > 5 else ""))
    if any(p.fatal for p in problems):
        plan = Plan([], {}, {}, dims[-1], notes)
        plan.layout = layout
        return plan, problems
    attrs = {opts.coords[d].arg for d in dims if d in opts.coords and opts.coords[d].kind == "attr"}
    if attrs:  # (it differs between files; the axis' coordinate holds it: not combined)
        invs = [replace(inv, groups={**inv.groups, "": {k: v for k, v in inv.groups.get(
            "", {}).items() if k not in attrs}}) for inv in invs]
    ctx = _Stack(invs=invs, dims=dims, new=new, axis_values=axis_values, labels=labels,
                 coord_attrs=coord_attrs, how=opts.concat.combine_attrs,
                 leave=frozenset(attrs),
                 kept={n for inv in invs for n in _kept(inv)},
                 scalars={n for inv in invs for n in _scalars(inv)}, static=static, real=real,
                 join=opts.concat.join, compat=opts.concat.compat,
                 coordinates={n for inv in invs[:real] for n in coordinate_like(inv)})
    plan, _ = _build(ctx, concat, sorted(cells), cells, 0)
    problems.extend(ctx.problems)
    note = dropped_note(ctx.dropped)
    if note:
        ctx.notes.append(note.replace("between files", "between the cells"))
    root = plan.groups.get("", {})
    for a in sorted(attrs & set(root)):
        del root[a]  # (it differs between files; the axis' coordinate holds it)
    plan.notes[:0] = notes + ctx.notes
    plan.layout = layout
    plan.concat_dim = dims[-1]
    plan.append_state = None  # (grown by planning again: api/appending.py)
    return plan, problems


def _absent(inv: FileInventory, problems: list[Problem], where: str, dims, new,
            scalars: dict[str, FileInventory] | None = None,
            keep: set[str] | frozenset[str] = frozenset()) -> FileInventory:
    """A missing cell's stand-in (`--join outer`): the inventory of a file at the same
    inner position, its data variables' chunks absent (they read as the fill value); what
    does not vary along the outer axes (coordinates, bounds) stays, as it must be the same
    in every cell. A data variable without a fill value cannot be absent: refused.
    `scalars`: the file each scalar data variable is taken from (`_scalar_source`),
    referenced there (one of the stand-in's data files). `keep`: left as they are (what is
    dropped; the variables without an axis the files have, `_static`: held once when the
    same in every cell, made absent where stacked, `_stand_in_parts`)."""
    variables = dict(inv.variables)
    data_files = list(inv.data_files)
    for name, other in (scalars or {}).items():
        if other is inv:
            continue
        v = other.variables[name]
        at = len(data_files) + 1
        data_files.extend(other.sources())
        refs = v.blocks.refs.copy()
        moved = refs["path"] != MATERIALIZED
        refs["path"][moved] += at
        variables[name] = replace(v, blocks=replace(v.blocks, refs=refs))
    keep = _kept(inv) | set(keep)
    any_new = any(new[d] for d in dims)
    for name, v in inv.variables.items():
        # what varies from cell to cell: data along a new axis, or along an axis it has
        # (coordinates and their bounds are the template's: the same place)
        if name in keep or not (any_new or any(d in v.dims for d in dims)):
            continue
        declared = declares_fill(v.fill_value, v.dtype, v.attrs)
        if not declared or v.blocks is None:
            # (a netCDF variable declaring no _FillValue would read as the library's
            # default fill there, which xarray takes as data: plan._common.declares_fill)
            why = ("declares no fill value (_FillValue, or a missing_value equal to the "
                   "fill it would read as)") if not declared else "is stored in the cube"
            problems.append(Problem(Location(inv.path, name), "no-fill-value",
                                    f"{name!r} {why}: the cell {where} that no file fills "
                                    "cannot read as absent chunks (--join outer)"))
            continue
        refs = np.zeros_like(v.blocks.refs)
        variables[name] = replace(v, blocks=replace(v.blocks, refs=refs), values=None,
                                  digest=None, block_digests=None)
    return replace(inv, variables=variables, problems=[], data_files=data_files)


def _stand_ins(empty, cells, held, dims, new, real: int):
    """(cell, kind, template file or None) for each missing cell that gets a stand-in
    (`--join outer`). Along a new inner axis, a file at the cell's place along every axis
    the files have, the nearest (along the inner axes first); a row holding none of a kind
    along an axis the files have takes the files of the nearest row that holds it, each
    at its place (one row's files: steps that do not overlap)."""
    def nearest(index, candidates):
        return sorted((tuple(i[a] != index[a] for a in reversed(range(len(index)))), i, f)
                      for i, f in candidates)

    files = [(i, f) for i, fs in cells.items() for f in fs if f < real]
    if new[dims[-1]]:
        for index, kind in empty:
            near = nearest(index, [(i, f) for i, f in files if held[f] == kind and all(
                i[a] == index[a] for a, d in enumerate(dims) if not new[d])])
            yield index, kind, near[0][2] if near else None
        return
    seen: set[tuple] = set()
    for index, kind in empty:
        row = index[:-1]
        if (row, kind) in seen:
            continue
        seen.add((row, kind))
        near = nearest(row, [(i[:-1], f) for i, f in files if held[f] == kind and all(
            i[a] == row[a] for a, d in enumerate(dims[:-1]) if not new[d])])
        if not near:
            yield index, kind, None
            continue
        template = near[0][1]
        for i, f in files:
            if i[:-1] == template and held[f] == kind:
                yield (*row, i[-1]), kind, f


def _bounds_of(invs: list[FileInventory], dim: str) -> set[str]:
    """The names the files' `dim` coordinate gives as its bounds (or climatology)."""
    out = set()
    for inv in invs:
        c = inv.variables.get(dim)
        for key in ("bounds", "climatology"):
            b = c.attrs.get(key) if c is not None else None
            if isinstance(b, str) and b in inv.variables:
                out.add(b)
    return out


def _static(invs: list[FileInventory], dims: list[str], new: dict[str, bool]) -> set[str]:
    """Data variables without any axis the files have (a grid's ANGLE, TAREA, TLAT; char
    labels such as moc_components), in a hypercube that has one (time): held once when the
    same in every cell (compared bit for bit, as shared coordinates are), never needing a
    fill under `--join outer`; stacked along a new axis only when they differ (as scalars
    are). Empty when every axis is new (a member's data without time are data)."""
    axes = [d for d in dims if not new[d]]
    if not axes:
        return set()
    return {n for inv in invs for n, v in inv.variables.items()
            if v.shape and n not in _kept(inv) and not any(d in v.dims for d in axes)}


def _in_one_unit(keys: list, spans: list) -> tuple[list, list, str | None]:
    """An axis' positions (each file's first value) and spans in one CF time unit when the
    files count time in several ("hours since <the file's own start>"): the unit of the
    file that starts first, in which the cells are placed and the inner stacks planned
    (their coordinates re-expressed, ConcatOptions.units). As they are (None) when the
    units agree, are not CF time, or the calendars differ (refused when planned)."""
    import cftime

    attrs = [s[2] if s is not None else None for s in spans]
    found = {(a.get("units"), calendar_of(a)) for a in attrs if a is not None}
    if len(found) < 2 or None in attrs or len({c for _, c in found}) > 1 or \
            not all(isinstance(u, str) and " since " in u for u, _ in found):
        return keys, spans, None
    cal = attrs[0].get("calendar", "standard")
    try:
        starts = [cftime.num2date(k, a["units"], cal) for k, a in zip(keys, attrs)]
        ref = attrs[min(range(len(keys)), key=lambda i: starts[i])]["units"]

        def num(v, a):
            return py(cftime.date2num(cftime.num2date(v, a["units"], cal), ref, cal))

        out = [(num(s[0], a), num(s[1], a), dict(a, units=ref)) for s, a in zip(spans, attrs)]
    except Exception:  # (a date the calendar cannot hold: as they are)
        return keys, spans, None
    return [s[0] for s in out], out, ref


def _scalar_source(index, name: str, cells, invs, real: int) -> int | None:
    """The file a missing cell's scalar `name` is taken from: one at the cell's positions
    along the fewest axes whose positions give its value in every file holding it (none:
    the same everywhere, any file; `realization`: the member's). None when no file is at
    the cell's place along them (it differs in every cell)."""
    have = [(i, f) for i, fs in cells.items() for f in fs
            if f < real and name in invs[f].variables]

    def value(f):
        v = invs[f].variables[name]
        return (None if v.values is None else np.asarray(v.values).tobytes(), v.digest)

    for k in range(len(index) + 1):
        found = False
        for axes in itertools.combinations(range(len(index)), k):
            by: dict[tuple, Any] = {}
            if all(by.setdefault(tuple(i[a] for a in axes), value(f)) == value(f)
                   for i, f in have):
                found = True
                at = [f for i, f in have if all(i[a] == index[a] for a in axes)]
                if at:
                    return at[0]
        if found:
            return None
    return None


def _scalars(inv: FileInventory) -> set[str]:
    """The scalar data variables (`conventions.scalar_data`): stacked along a new axis
    when they differ between its cells, shared when the same."""
    mappings, bounds = grid_mappings(inv), coordinate_bounds(inv)
    named = named_coordinates(inv)
    return {n for n, v in inv.variables.items() if scalar_data(v, mappings, bounds, named)}


def _kept(inv: FileInventory) -> set[str]:
    """The variables that do not get a new axis: coordinates, their bounds, grid
    mappings, scalars (the scan's rule, conventions.stacks)."""
    mappings, bounds = grid_mappings(inv), coordinate_bounds(inv)
    return {n for n, v in inv.variables.items() if not stacks(v, mappings, bounds)}


def _inner(opts: HypercubeOptions, invs, dim, values) -> tuple[Plan, list[Problem]]:
    return _one_axis(invs, replace(opts.concat, concat_dim=dim, new_values=values))


def _one_axis(invs: list[FileInventory], opts: ConcatOptions) -> tuple[Plan, list[Problem]]:
    """The one-axis planner every stack along the innermost axis is planned by (files
    holding different variables are merged, plan/merge.py)."""
    return plan_merge(invs, opts)


def _k(v: Any) -> Any:
    return ("date", v) if isinstance(v, datetime.datetime) else (type(v).__name__, v)


def _ordered(values: list, sort: bool = True) -> list:
    """An axis' positions: sorted (or in the order given), each once."""
    seen = {_k(v): v for v in values}
    if not sort:
        return list(seen.values())
    try:
        return sorted(seen.values())
    except TypeError:
        return [seen[k] for k in sorted(seen, key=str)]


def _label(d, v, spans, keys, invs, attrs=None) -> str:
    if d not in spans:
        return value_label(v, attrs) if attrs and not isinstance(v, str) else label(v)
    f = next(i for i, k in enumerate(keys[d]) if _k(k) == _k(v))
    first, last, attrs = spans[d][f]
    return f"{value_label(first, attrs)} .. {value_label(last, attrs)}" if first != last \
        else value_label(first, attrs)


def _covered(index, cells, dims, spans, axis_values, files: set[int]) -> bool:
    """Whether a cell without a file of its own (of `files`) lies inside the span of one of
    `files` in the same outer cell (the inner axis split into other files there)."""
    d = dims[-1]
    start = axis_values[d][index[-1]]
    for other, fs in cells.items():
        if other[:-1] != index[:-1]:
            continue
        for f in fs:
            if f not in files:
                continue
            s = spans[d][f]
            if s is not None and s[0] <= start <= s[1]:
                return True
    return False


def _data_vars(inv: FileInventory) -> tuple[str, ...]:
    return tuple(n for n, v in inv.variables.items() if n not in _kept(inv))


@dataclass
class _Stack:
    invs: list[FileInventory]
    dims: list[str]
    new: dict[str, bool]
    axis_values: dict[str, list]
    labels: dict[str, list[str]]
    kept: set[str] = field(default_factory=set)  # what no new axis is given (`_kept`)
    scalars: set[str] = field(default_factory=set)  # of those, scalar data (`_scalars`)
    coord_attrs: dict[str, dict] = field(default_factory=dict)  # new axes' (coordinate_attrs)
    how: str = "drop_conflicts"  # --combine-attrs (plan/attrs.py), across the cells
    leave: frozenset[str] = frozenset()  # root attributes a --coord attr: takes
    dropped: dict[str, list[str]] = field(default_factory=dict)  # what drop_conflicts left out
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    static: set[str] = field(default_factory=set)  # without an axis the files have (`_static`)
    real: int = 0  # files before it in `invs` are files, the others stand-ins
    join: str = "exact"  # --join: the cells' steps along an axis the files have (`align`)
    compat: str = "identical"  # --compat: a shared variable no coordinate needs that differs
    coordinates: set[str] = field(default_factory=set)  # what --compat never overrides
    refused: set[str] = field(default_factory=set)  # arrays refused at a level (not stacked)


def _build(ctx: _Stack, concat: ConcatOptions, indices: list[tuple[int, ...]],
           cells: dict[tuple[int, ...], list[int]], level: int) -> tuple[Plan, list[int]]:
    """The cube of the cells `indices` (which share their first `level` positions), and
    its files in order (indices into `ctx.invs`: a stand-in has its template's path)."""
    d = ctx.dims[level]
    if level == len(ctx.dims) - 1:
        files = [f for i in indices for f in cells[i]]
        invs = [ctx.invs[f] for f in files]
        values = [ctx.axis_values[d][i[-1]] for i in indices for _ in cells[i]] \
            if ctx.new[d] else None
        plan, problems = _one_axis(invs, replace(concat, concat_dim=d, new_values=values,
                                                 new_attrs=ctx.coord_attrs.get(d)))
        ctx.problems.extend(problems)
        for n in plan.notes:
            if n not in ctx.notes:
                ctx.notes.append(n)
        plan.notes = []
        return plan, files
    groups: dict[int, list[tuple[int, ...]]] = {}
    for i in indices:
        groups.setdefault(i[level], []).append(i)
    positions = sorted(groups)
    built = [_build(ctx, concat, groups[p], cells, level + 1) for p in positions]
    subs = [p for p, _ in built]
    files = [f for _, f in built]
    return _stack(ctx, subs, files, d, positions, indices[0][:level]), \
        [f for fs in files for f in fs]


def _stack(ctx: _Stack, subs: list[Plan], members: list[list[int]], d: str,
           positions: list[int], prefix: tuple[int, ...] = ()) -> Plan:
    """Sub-plans (one per position along `d`; `members`: each one's files in order,
    indices into `ctx.invs`) stacked along `d` into one plan. `prefix`: their positions
    along the axes before `d`. Along a new axis, their axes the files have are made one
    first (`align`: one coordinate, one chunk grid)."""
    files = [[ctx.invs[f].path for f in fs] for fs in members]
    new = ctx.new[d]
    if new:
        subs = align(ctx, subs, members, d, positions, prefix)
    sources, maps = [], []
    index: dict[str, int] = {}
    for p in subs:
        m = np.zeros(len(p.sources), dtype=np.uint32)
        for j, s in enumerate(p.sources):
            if s.path not in index:
                index[s.path] = len(sources)
                sources.append(s)
            m[j] = index[s.path]
        maps.append(m)
    where = [ctx.labels[d][i] for i in positions]
    first = subs[0]
    arrays: dict[str, ArrayPlan] = {}
    names = list(dict.fromkeys(n for p in subs for n in p.arrays))
    if new:
        names = [n for n in names if n != d]
    for name in names:
        if name in ctx.refused:
            continue  # (refused where the cells were made one: said there)
        have = [p.arrays.get(name) for p in subs]
        lacking = [i for i, a in enumerate(have) if a is None]
        if lacking:
            i = lacking[0]
            if any(p.fatal and p.loc.variable == name for p in ctx.problems):
                continue  # (refused in that cell already: said there)
            ctx.problems.append(Problem(Location(files[i][0], name, d),
                                        "missing-variable",
                                        f"{name!r} is in other cells of the grid but not at "
                                        f"{d}={where[i]}"))
            continue
        a0 = have[0]
        varies = _varies(ctx, subs[0], name, a0, d)
        if not _alike(ctx, files, have, name, d, where, varies):
            continue
        if not varies and new and (name in ctx.scalars and not a0.shape or
                                   name in ctx.static):
            varies = _scalar_differs(ctx, members, have, name, d, where)
            if varies and name in ctx.static:
                have = _stand_in_parts(ctx, members, have, name, d, where)
                if have is None:
                    continue
        if not varies:
            if _shared(ctx, members, have, name, d, where):
                arrays[name] = _remapped(a0, maps[0], None, 0)
        else:
            arrays[name] = _joined(have, maps, d, new)
        if name in arrays:
            arrays[name].attrs = _combined(ctx, [a.attrs for a in have], name, files)
    if new:
        arrays = {d: coordinate_plan(d, [ctx.axis_values[d][i] for i in positions],
                                          ctx.coord_attrs.get(d)), **arrays}
    remedies: dict[str, Remedy] = {}
    for p in subs:
        for k, r in p.remedies.items():
            t = remedies.setdefault(k, Remedy(r.kind, 0, 0, r.enabled))
            t.blocks += r.blocks
            t.bytes += r.bytes
    groups = {g: _combined(ctx, [{k: v for k, v in p.groups.get(g, {}).items()
                                  if g or k not in ctx.leave} for p in subs],
                           g and f"group {g}", files)
              for g in first.groups}
    plan = Plan(sources=sources, groups=groups, arrays=arrays, concat_dim=d, remedies=remedies)
    plan.figures = {n: figure_of(a) for n, a in arrays.items()}
    return plan


def _combined(ctx: _Stack, dicts: list[dict], where: str, files: list[list[str]]) -> dict:
    """Attributes over the cells (plan/attrs.py `combine`, --combine-attrs), never the
    first cell's unseen; the meaning attributes were compared by `_alike`."""
    out, gone, problems = combine(dicts, ctx.how, where, [fs[0] if fs else None for fs in files])
    ctx.problems.extend(p for p in problems if p.kind != "attribute-drift" or not where
                        or where.startswith("group "))
    if gone:
        have = ctx.dropped.setdefault(where, [])
        have.extend(k for k in gone if k not in have)
    return out


def _varies(ctx: _Stack, sub: Plan, name: str, a: ArrayPlan, d: str) -> bool:
    """Whether `name` is stacked along `d`: along an axis the files have, when it has it;
    along a new one, data variables (not coordinates, their bounds, grid mappings,
    scalars: the scan's rule, conventions.stacks)."""
    if not ctx.new[d]:
        return d in a.dims
    if name in ctx.scalars or name in ctx.static:
        # (stacked along an inner new axis already: along this one too)
        return bool(a.dims) and a.dims[0] in ctx.dims
    return bool(a.dims) and name not in ctx.dims and name not in ctx.kept


def _scalar_differs(ctx: _Stack, members, have: list[ArrayPlan], name: str, d: str,
                    where) -> bool:
    """A scalar data variable (or one without an axis the files have, `_static`) that
    differs between the cells of the new axis `d`: stacked along it (`realization(member)`);
    the same in every cell, shared. Decided by the one comparison (`_shared`), its findings
    kept only to decide. `--compat override`: never stacked (the first cell's, `_shared`),
    unless a coordinate needs it (TLAT: never overridden)."""
    if ctx.compat == "override" and name not in ctx.coordinates:
        return False
    before = len(ctx.problems)
    same = _shared(ctx, members, have, name, d, where)
    found = ctx.problems[before:]
    del ctx.problems[before:]
    if same or not all(p.kind == "differs-between-files" for p in found):
        return False
    note = f"{name!r} differs between the cells: stacked along the new {d!r} axis"
    if note not in ctx.notes:
        ctx.notes.append(note)
    return True


def _stand_in_parts(ctx: _Stack, members, have: list[ArrayPlan], name: str, d: str,
                    where) -> list[ArrayPlan] | None:
    """A variable without an axis the files have (`_static`), stacked along `d` because it
    differs between the cells: a stand-in's part (`--join outer`, a row no file fills) is
    absent chunks, not the template's values; refused (None) when it declares no fill
    value or is stored in the cube."""
    out = list(have)
    for i, (fs, a) in enumerate(zip(members, have)):
        if not fs or any(f < ctx.real for f in fs):
            continue
        if a.refs is None or not declares_fill(a.fill_value, a.dtype, a.attrs):
            why = "is stored in the cube" if a.refs is None else "declares no fill value"
            ctx.problems.append(Problem(Location(ctx.invs[fs[0]].path, name), "no-fill-value",
                                        f"{name!r} differs between the cells, so it is stacked "
                                        f"along {d!r}, and {why}: at {d}={where[i]}, which no "
                                        "file fills, it cannot read as absent chunks "
                                        f"(--join outer; --drop {name})"))
            return None
        out[i] = replace(a, refs=np.zeros_like(a.refs), materialize={})
    return out


def _alike(ctx: _Stack, files, have: list[ArrayPlan], name: str, d: str, where, varies) -> bool:
    """Every cell's `name` like the first's: dims, data type, codecs, fill value, the
    attributes that give the values their meaning, and (stacked) the chunks on every
    other axis."""
    a0 = have[0]
    ok = True
    k = a0.dims.index(d) if d in a0.dims else None
    for i, a in list(enumerate(have))[1:]:
        f = files[i][0]
        at, at0 = f"at {d}={where[i]}", f"at {d}={where[0]}"
        if a.dims != a0.dims:
            msg = f"its dimensions {a.dims} {at} differ from {a0.dims} {at0}"
            kind = "dims-differ"
        elif a.dtype != a0.dtype:
            msg = f"its data type {a.dtype} {at} differs from {a0.dtype} {at0}"
            kind = "dtype-differs"
        elif codec_key(a.codecs) != codec_key(a0.codecs):
            msg, kind = f"its codecs {at} differ from those {at0}", "codecs-differ"
        elif not same_value(a.fill_value, a0.fill_value):
            msg = (f"its fill value {py(a.fill_value)!r} {at} differs from "
                   f"{py(a0.fill_value)!r} {at0}")
            kind = "fill-value-differs"
        elif (key := next((m for m in MEANING_ATTRS
                           if not same_meaning(m, a.attrs.get(m), a0.attrs.get(m))), None)):
            msg = (f"attribute {key!r} is {py(a.attrs.get(key))!r} {at}, where it is "
                   f"{py(a0.attrs.get(key))!r} {at0}: the values would mean different things")
            kind = "attribute-drift"
        elif (axis := next((j for j in range(len(a.dims)) if j != k and
                            a.shape[j] != a0.shape[j]), None)) is not None:
            msg = (f"length {a.shape[axis]} along {a.dims[axis]!r} {at} differs from the "
                   f"length {a0.shape[axis]} {at0}")
            kind = "shape-differs"
        elif varies:
            axis = next((j for j in range(len(a.dims)) if j != k and
                         a.chunk_lengths[j] != a0.chunk_lengths[j]), None)
            if axis is None:
                continue
            other = a.dims[axis]
            msg = (f"its chunks along {other!r} {at} differ from those {at0} "
                   f"({_lens(a.chunk_lengths[axis])} vs {_lens(a0.chunk_lengths[axis])}): "
                   f"stacked along {d!r}, every cell must be split alike along {other!r} "
                   f"(the files split {other!r} differently?)")
            kind = "blocks-differ"
        else:
            continue
        ctx.problems.append(Problem(Location(f, name, d), kind, msg))
        ok = False
    return ok


def _lens(lengths) -> str:
    lengths = list(lengths)
    return str(lengths) if len(lengths) <= 6 else f"{len(lengths)} chunks {lengths[:4]}..."


def _shared(ctx: _Stack, members: list[list[int]], have: list[ArrayPlan], name: str, d: str,
            where) -> bool:
    """What does not vary along `d` is the same in every cell: compared by its values
    (stored in the cube) or, file by file, by what the scan recorded (compare_shared).
    `members`: each cell's files, indices into `ctx.invs`."""
    files = [[ctx.invs[f].path for f in fs] for fs in members]
    a0 = have[0]
    why = f"is not stacked along {d!r}"
    before = len(ctx.problems)
    override = ctx.compat == "override" and name not in ctx.coordinates
    # the same file position of every cell (along the inner axis, its j-th file); by index,
    # not path: a --join outer stand-in has its template's path, not its variables
    rows = [[ctx.invs[f] for f in fs if name in ctx.invs[f].variables] for fs in members]
    values = None
    if a0.inline is not None:
        values = [None if a.inline is None else np.asarray(a.inline) for a in have]
    elif (t := next((t for t in ctx.dims if not ctx.new[t] and t in a0.dims), None)) and \
            len({tuple(inv.variables[name].shape for inv in r) for r in rows}) > 1:
        # (cells split into files otherwise along it: compared as joined, by value)
        k = a0.dims.index(t)
        values = [np.concatenate([np.asarray(inv.variables[name].values) for inv in r], axis=k)
                  if r and all(inv.variables[name].values is not None for inv in r) else None
                  for r in rows]
        if any(v is None for v in values):
            i = next(i for i, v in enumerate(values) if v is None)
            ctx.problems.append(Problem(
                Location(files[i][0], name, d), "not-comparable",
                f"{name!r} {why}, so it must be the same at every {d}, but the cells are "
                f"split into files otherwise along {t!r} and the scan recorded no values of "
                "it to compare them by", remedy=f"--drop {name}"))
            return False
    if values is not None:
        for i, a in list(enumerate(values))[1:]:
            if a is None or values[0] is None:
                continue
            index = first_difference(a, values[0])
            if index is None:
                continue
            at = (f"its values have shape {np.shape(a)} there and {np.shape(values[0])} "
                  "here" if np.shape(a) != np.shape(values[0])
                  else f"its values differ at index {index}")
            ctx.problems.append(Problem(
                Location(files[i][0], name, d), "differs-between-files",
                f"{name!r} {why}, so it must be the same at every {d}, but at {d}={where[i]} "
                f"{at} from {d}={where[0]} ({files[0][0]})"))
        if override and len(ctx.problems) > before:
            overridden(ctx.notes, name, ctx.problems[before], files[0][0])
            del ctx.problems[before:]
        return len(ctx.problems) == before
    for j in range(max(len(r) for r in rows)):
        col = [r[j] for r in rows if j < len(r)]
        if len(col) < 2:
            continue
        c = Context(col)
        compare_shared(c, name, [inv.variables[name] for inv in col], why, override=override)
        ctx.notes.extend(n for n in c.notes if n not in ctx.notes)
        ctx.problems.extend(replace(p, remedy=f"--drop {name}" + (
            f", or --coord {d}=var:{name} if it is the {d} value" if ctx.new[d] and
            not a0.shape else "")) if p.remedy is None else p for p in c.problems)
    return len(ctx.problems) == before


def _remapped(a: ArrayPlan, m: np.ndarray, k: int | None, offset: int) -> ArrayPlan:
    if a.refs is None:
        return replace(a, attrs=dict(a.attrs))
    refs = a.refs.copy()
    held = refs["path"] == MATERIALIZED
    refs["path"] = np.where(held, MATERIALIZED, m[np.where(held, 0, refs["path"])])
    cells = {key: Cell(int(m[c.source]), c.variable, c.region) for key, c in a.materialize.items()}
    return replace(a, refs=refs, materialize=cells, attrs=dict(a.attrs))


def _joined(have: list[ArrayPlan], maps: list[np.ndarray], d: str, new: bool) -> ArrayPlan:
    """The cells' arrays along `d`: a new leading axis, or joined along the axis they have."""
    a0 = have[0]
    parts = [_remapped(a, m, None, 0) for a, m in zip(have, maps)]
    if new:
        shape = (len(parts), *a0.shape)
        dims = (d, *a0.dims)
        lengths = ((1,) * len(parts), *a0.chunk_lengths)
        cells = {(i, *key): c for i, p in enumerate(parts) for key, c in p.materialize.items()}
        if a0.inline is not None:
            data = np.stack([p.inline for p in parts])
            return inline_plan(a0.name, data, dims, a0.attrs, a0.fill_value)
        refs = np.stack([p.refs for p in parts])
    else:
        k = a0.dims.index(d)
        shape = tuple(sum(p.shape[k] for p in parts) if j == k else n
                      for j, n in enumerate(a0.shape))
        dims = a0.dims
        lengths = tuple(tuple(x for p in parts for x in p.chunk_lengths[k]) if j == k else c
                        for j, c in enumerate(a0.chunk_lengths))
        cells, off = {}, 0
        for p in parts:
            for key, c in p.materialize.items():
                cells[tuple(x + off if j == k else x for j, x in enumerate(key))] = c
            off += len(p.chunk_lengths[k])
        if a0.inline is not None:
            data = np.concatenate([p.inline for p in parts], axis=k)
            return inline_plan(a0.name, data, dims, a0.attrs, a0.fill_value)
        refs = np.concatenate([p.refs for p in parts], axis=k)
    return replace(a0, shape=shape, dims=dims, chunk_lengths=lengths, refs=refs,
                   materialize=cells, attrs=dict(a0.attrs))
