"""Mosaics over time: a tile grid re-observed on many dates, `(time, y, x)`.

Each file is one tile on one date. Its date comes from `--coord DIM=...` (plan/coords.py),
else from its own `DIM` coordinate of length 1 or scalar `DIM` variable, else from the
date in its name (as concat's new axes). The tiles are placed in one pixel grid (one CRS,
pixel size and phase over every date: plan/tiles.py `place_tiles`), and every date is cut
into ONE spatial grid: the union of every date's tile edges and block boundaries, less the
cuts that fall inside one block of one tile (or between gaps) on every date. Each date is
then a mosaic of its own tiles on that grid (a tile missing on a date leaves a gap that
reads as the fill value); the dates, sorted, are stacked along `DIM`, one chunk each, and
`DIM` gets a coordinate variable (CF-encoded dates). Two tiles of one date in the same
place are refused (`repeated-date`), as are overlaps within a date (`overlap`).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from ..model import ArrayPlan, FileInventory, Layout, LayoutAxis, LayoutCell, Plan, Problem
from ._common import (
    consistent,
    figure_of,
    groups_for,
    inline_plan,
)
from .coords import coordinate_attrs, coordinate_plan, parse_coords, resolve
from .tiles import (
    MosaicOptions,
    Tile,
    TileContext,
    axis_cells,
    block_index,
    combined_attrs,
    cut_by,
    last_stored,
    mosaic_coordinates,
    mosaic_variable,
    other_variables,
    paint,
    place_tiles,
    report_overlaps,
    tile_context,
    tile_cuts,
    windows_note,
)


def plan_mosaic_over_time(inventories: Sequence[FileInventory], opts: MosaicOptions
                          ) -> tuple[Plan, list[Problem]]:
    """Plan one `(DIM, y, x)` mosaic: each date's tiles placed, the dates stacked."""
    dim = opts.concat_dim
    # (the dates' own coordinate is replaced by the stacked one)
    ctx, sources = tile_context(inventories, opts, opts.drop | {dim})
    invs = ctx.invs
    empty = Plan(sources, groups_for(invs[0], {}), {})
    dates, coord = _dates(ctx, dim)
    placed = place_tiles(ctx)
    if placed is None or dates is None:
        return empty, ctx.problems
    ydim, xdim, names = placed.ydim, placed.xdim, placed.names
    height, width = placed.height, placed.width
    keys = sorted(set(dates))
    subs = [_date_ctx(ctx, [i for i, d in enumerate(dates) if d == key], ydim, xdim)
            for key in keys]
    for key, sub in zip(keys, subs):
        _repeated(ctx, sub, coord.show(key))
    arrays: dict[str, ArrayPlan] = {}
    for name in names:
        array = _stacked_variable(ctx, subs, name, dim, ydim, xdim, height, width)
        if array is not None:
            arrays[name] = array
    windows_note(ctx, arrays)
    arrays.update(other_variables(ctx, names, ydim, xdim))
    if placed.georef is not None:
        coords = mosaic_coordinates(ctx, placed.georef, placed.r0, placed.c0, height, width)
        arrays.update(coords)
        ctx.figures.update({n: figure_of(a) for n, a in coords.items()})
    time = coord.plan(dim, keys)
    arrays[dim] = time
    ctx.figures[dim] = figure_of(time)
    ctx.mosaic = subs[0].mosaic  # the first date's map; the dates are listed in a note
    if ctx.mosaic is not None:
        ctx.mosaic = replace(ctx.mosaic, dated=[(t.inv.path, t.row0, t.col0, t.height, t.width)
                                                for t in ctx.tiles])
    shown = [coord.show(k) for k in keys]
    ctx.notes.append(f"a mosaic over {dim!r}: {len(keys)} date(s), each placed on one spatial "
                     f"grid ({coord.source}): " + ", ".join(shown[:10])
                     + (", ..." if len(shown) > 10 else ""))
    _missing_tiles(ctx, subs, shown, height, width)
    made = {dim} | (set(coords) if placed.georef is not None else set())
    spec = parse_coords({k: v for k, v in (opts.coords or {}).items() if k == dim}).get(dim)
    leave = frozenset({spec.arg} if spec is not None and spec.kind == "attr" else ())
    groups = combined_attrs(ctx, arrays, made, leave)
    plan = Plan(sources=sources, groups=groups, arrays=arrays,
                notes=ctx.notes, figures=ctx.figures, mosaic=ctx.mosaic, remedies=ctx.remedies,
                layout=_layout(subs, shown, dim, not any(dim in inv.dimensions for inv in invs),
                               tuple(n for n in names if n in arrays)))
    return plan, ctx.problems


# -- each date's mosaic on the shared grid ---------------------------------------------

def _date_ctx(ctx: TileContext, members: list[int], ydim: str, xdim: str) -> TileContext:
    """One date's tiles as a mosaic of their own (problems, remedies shared with `ctx`)."""
    sub = TileContext([ctx.invs[i] for i in members], drop=ctx.drop, opts=ctx.opts,
                      problems=ctx.problems, reported=ctx.reported, remedies=ctx.remedies)
    sub.tiles = [Tile(k, t.inv, t.row0, t.col0, t.height, t.width)
                 for k, t in enumerate(ctx.tiles[i] for i in members)]
    sub.source_maps = [ctx.source_maps[i] for i in members]

    def who_cuts(name: str, p: int, axis: int, victim: Tile) -> str:
        # the cut may come from a tile of another date: every date's are asked
        tiles = [t for t in ctx.tiles if t.inv is not victim.inv]
        v0 = victim.inv.variables[name]
        a = v0.dims.index(ydim if axis == 0 else xdim)
        block = np.array([t.inv.variables[name].blocks.block_shape[a] for t in tiles])
        return cut_by([replace(t, index=k) for k, t in enumerate(tiles)], block, p, axis, None)
    sub.who_cuts = who_cuts
    if ctx.opts.overlap is None:
        report_overlaps(sub)
    return sub


def _repeated(ctx: TileContext, sub: TileContext, when: str) -> None:
    """Two files of one date in one place: the same tile given twice (or a date twice)."""
    seen: dict[tuple[int, int, int, int], Tile] = {}
    for t in sub.tiles:
        key = (t.row0, t.col0, t.height, t.width)
        if key in seen:
            ctx.problem(t.inv.path, None, "repeated-date",
                        f"has the same date ({when}) and place (mosaic rows {t.row0}.."
                        f"{t.row0 + t.height - 1}, columns {t.col0}..{t.col0 + t.width - 1}) as "
                        f"{seen[key].inv.path}: each date may hold each tile once (the same "
                        "file given twice, or a wrong date?)")
        else:
            seen[key] = t


def _stacked_variable(ctx: TileContext, subs: list[TileContext], name: str, dim: str,
                      ydim: str, xdim: str, height: int, width: int) -> ArrayPlan | None:
    vs = [inv.variables[name] for inv in ctx.invs]
    if any(v.blocks is None for v in vs):
        return None  # the scanner reported why
    several = [(inv, v) for inv, v in zip(ctx.invs, vs)
               if dim in v.dims and v.shape[v.dims.index(dim)] != 1]
    for inv, v in several:
        ctx.problem(inv.path, name, "no-date",
                    f"holds {v.shape[v.dims.index(dim)]} steps along {dim!r}: a mosaic over "
                    f"{dim!r} takes one date per tile file", axis=dim)
    if several:
        return None
    if not consistent(ctx, name, vs, frozenset({ydim, xdim}), "the tiles' x and y"):
        return None
    grid = _shared_grid(subs, name, ydim, xdim, height, width)
    before = len(ctx.problems)
    planned = [mosaic_variable(sub, name, ydim, xdim, height, width, grid) for sub in subs]
    ctx.figures[name] = subs[0].figures[name]
    if len(ctx.problems) > before or any(a is None for a in planned):
        return None
    a = planned[0]
    if dim in a.dims:  # each tile holds its date along a `dim` axis of length 1
        axis = a.dims.index(dim)
        dims = a.dims
        refs = np.concatenate([p.refs for p in planned], axis=axis)
    else:  # a new leading axis
        axis, dims = 0, (dim, *a.dims)
        refs = np.stack([p.refs for p in planned], axis=0)
    # each date's windows of its tiles (an output reading whole tiles), at its date's chunk
    # (a tile without the `dim` axis: its region has one axis fewer than the chunk)
    cells = {(*index[:axis], d, *index[axis + (dim in a.dims):]): cell
             for d, p in enumerate(planned) for index, cell in p.materialize.items()}
    shape = list(a.shape)
    lengths = list(a.chunk_lengths)
    if dim in a.dims:
        shape[axis] = len(planned)
        lengths[axis] = (1,) * len(planned)
    else:
        shape.insert(0, len(planned))
        lengths.insert(0, (1,) * len(planned))
    out = replace(a, shape=tuple(shape), dims=tuple(dims), chunk_lengths=tuple(lengths),
                  refs=refs, materialize=cells)
    ctx.figures[name] = figure_of(out)
    return out


def _shared_grid(subs: list[TileContext], name: str, ydim: str, xdim: str, height: int, width: int):
    """The cuts every date is cut at: every date's tile edges and block boundaries, less
    those that on every date separate two parts of one block of one tile (or two gaps);
    and per axis the stored lengths of the whole last blocks over every date."""
    per = []
    for sub in subs:
        vs = [inv.variables[name] for inv in sub.invs]
        iy, ix = vs[0].dims.index(ydim), vs[0].dims.index(xdim)
        per.append((sub, np.array([v.blocks.block_shape[iy] for v in vs]),
                    np.array([v.blocks.block_shape[ix] for v in vs]),
                    np.array([v.blocks.padded for v in vs])))
    ycuts = tile_cuts(height, [(t.row0, t.height, int(b)) for sub, bh, _, _ in per
                               for t, b in zip(sub.tiles, bh)])
    xcuts = tile_cuts(width, [(t.col0, t.width, int(b)) for sub, _, bw, _ in per
                              for t, b in zip(sub.tiles, bw)])
    ykeep = np.zeros(len(ycuts) - 2, bool)
    xkeep = np.zeros(len(xcuts) - 2, bool)
    for sub, bh, bw, _ in per:
        owner = paint(sub, ycuts, xcuts)
        for axis, cuts, block, start, keep in ((0, ycuts, bh, "row0", ykeep),
                                               (1, xcuts, bw, "col0", xkeep)):
            idx = block_index(cuts, owner, sub.tiles, block, axis, start)
            o, b = np.moveaxis(owner, axis, 0), np.moveaxis(idx, axis, 0)
            keep |= ~((o[:-1] == o[1:]) & (b[:-1] == b[1:])).all(axis=1)
    ycuts = ycuts[np.concatenate([[True], ykeep, [True]])]
    xcuts = xcuts[np.concatenate([[True], xkeep, [True]])]
    ylast: set[int] = set()
    xlast: set[int] = set()
    for sub, bh, bw, padded in per:
        owner = paint(sub, ycuts, xcuts)
        ylast |= last_stored(axis_cells(ycuts, owner, sub.tiles, bh, padded, axis=0), owner, 0)
        xlast |= last_stored(axis_cells(xcuts, owner, sub.tiles, bw, padded, axis=1), owner, 1)
    return ycuts, xcuts, ylast, xlast


def _layout(subs: list[TileContext], shown: list[str], dim: str, new: bool, names: tuple[str, ...]
            ) -> Layout:
    """The file grid for the report: dates x tile places (a tile's upper-left pixel), the
    places a date has no tile at as missing cells."""
    places: dict[tuple[int, int], int] = {}
    for sub in subs:
        for t in sorted(sub.tiles, key=lambda t: (t.row0, t.col0)):
            places.setdefault((t.row0, t.col0), len(places))
    cells = []
    for d, sub in enumerate(subs):
        at = {(t.row0, t.col0): t.inv.path for t in sub.tiles}
        cells += [LayoutCell((d, k), at.get(p), names) for p, k in places.items()]
    labels = [f"row {r}, column {c}" for r, c in places]
    return Layout([LayoutAxis(dim, shown, new), LayoutAxis("tile", labels, True)], cells)


def _missing_tiles(ctx: TileContext, subs: list[TileContext], shown: list[str], height: int,
                   width: int) -> None:
    """A note per date whose tiles leave uncovered a place a tile of another date covers
    (there the date reads as the fill value), and one naming the other dates with gaps."""
    places: dict[tuple[int, int, int, int], str] = {}
    for sub in subs:
        for t in sub.tiles:
            places.setdefault((t.row0, t.col0, t.height, t.width), os.path.basename(t.inv.path))
    gaps = []
    for when, sub in zip(shown, subs):
        lacking = [(k, n) for k, n in places.items() if not _covered(k, sub.tiles)]
        if not lacking and not _covered((0, 0, height, width), sub.tiles):
            gaps.append(when)
        if lacking:
            ctx.notes.append(
                f"{when} has no tile at " + "; ".join(
                    f"mosaic rows {r}..{r + h - 1}, columns {c}..{c + w - 1} (where {n} lies)"
                    for (r, c, h, w), n in lacking[:5]) + (" ..." if len(lacking) > 5 else "")
                + ": there it reads as the fill value, like a gap")
    if gaps and ctx.opts.overlap is None:
        ctx.notes.append(f"the tiles leave gaps on {len(gaps)} date(s) ({', '.join(gaps[:5])}"
                         f"{', ...' if len(gaps) > 5 else ''}): pixels no tile covers read as "
                         "the fill value")


def _covered(place: tuple[int, int, int, int], tiles: list[Tile]) -> bool:
    """Whether one date's tiles (not overlapping each other) cover the whole rectangle."""
    r, c, h, w = place
    area = 0
    for t in tiles:
        dy = min(r + h, t.row0 + t.height) - max(r, t.row0)
        dx = min(c + w, t.col0 + t.width) - max(c, t.col0)
        area += max(dy, 0) * max(dx, 0)
    return area >= h * w


# -- the dates -------------------------------------------------------------------------

class _Coord:
    """How the dates were found, shown and stored: `dates` (datetimes, CF-encoded), or
    `numbers` (a time variable's values, stored as they are with its attributes)."""

    def __init__(self, source: str, attrs: dict | None = None, dtype=None, given=False):
        self.source, self.attrs, self.dtype = source, attrs, dtype
        self.given = given  # from --coord: stored as a hypercube's new axis (coords.py)

    def show(self, key) -> str:
        if isinstance(key, datetime.datetime):
            return key.strftime("%Y-%m-%d" if key.time() == datetime.time() else
                                "%Y-%m-%dT%H:%M:%S")
        if self.attrs is not None and " since " in str(self.attrs.get("units", "")):
            try:
                import cftime

                d = cftime.num2date(key, self.attrs["units"],
                                    self.attrs.get("calendar", "standard"))
                return d.isoformat().replace("T00:00:00", "")
            except (ImportError, ValueError, TypeError, OverflowError):
                pass
        return str(key)

    def plan(self, dim: str, keys: list) -> ArrayPlan:
        if keys and isinstance(keys[0], datetime.datetime):
            return _date_plan(dim, keys)
        if self.given:
            return coordinate_plan(dim, keys, self.attrs)
        if self.attrs is not None:
            return inline_plan(dim, np.asarray(keys, dtype=self.dtype), (dim,), self.attrs)
        if keys and isinstance(keys[0], str):
            return inline_plan(dim, np.asarray(keys, dtype=np.dtypes.StringDType()), (dim,), {})
        return inline_plan(dim, np.asarray(keys), (dim,), {})


def _date_plan(dim: str, dates: list[datetime.datetime]) -> ArrayPlan:
    """Dates as CF time: whole days since the first, else seconds (as concat's new axes)."""
    start = min(dates)
    whole = all(d.time() == datetime.time() for d in dates)
    step, unit = (86400, "days") if whole else (1, "seconds")
    fmt = "%Y-%m-%d" if whole else "%Y-%m-%dT%H:%M:%S"
    values = np.array([int((d - start).total_seconds()) // step for d in dates], dtype="i8")
    attrs = {"units": f"{unit} since {start.strftime(fmt)}", "calendar": "proleptic_gregorian",
             "standard_name": "time"}
    return inline_plan(dim, values, (dim,), attrs)


def _dates(ctx: TileContext, dim: str) -> tuple[list | None, _Coord]:
    """Each file's date (a sortable key) and how they were found; None after problems."""
    invs = ctx.invs
    given = parse_coords({k: v for k, v in (ctx.opts.coords or {}).items() if k == dim})
    spec = given.get(dim)
    if spec is not None:  # the --coord forms (plan/coords.py), as a hypercube's new axes
        values, problems = resolve(invs, dim, spec)
        attrs, more = coordinate_attrs(invs, dim, spec)
        ctx.problems.extend(problems + more)
        source = f"--coord {dim}={spec.text()}"
        if values is None or more:
            return None, _Coord(source)
        return _checked(ctx, dim, list(values)), _Coord(source, attrs, given=True)
    held = [inv.variables.get(dim) for inv in invs]
    if any(v is not None for v in held):
        return _from_variables(ctx, dim, held)
    from .concat import dates_in_names

    dates = dates_in_names([inv.path for inv in invs])
    if dates is None:
        bad = next((inv.path for inv in invs
                    if dates_in_names([inv.path]) is None), invs[0].path)
        ctx.problem(bad, None, "no-date",
                    f"a mosaic over {dim!r} needs each tile's date: this file has no {dim!r} "
                    "variable and no date in its name (one YYYY-MM-DD or YYYYMMDD); give one "
                    f"with --coord {dim}=name:REGEX or --coord {dim}=attr:NAME")
        return None, _Coord("")
    return dates, _Coord("the dates in the file names")


def _checked(ctx: TileContext, dim: str, values: list) -> list | None:
    kinds = {type(v) for v in values}
    if len(kinds) > 1 and not kinds <= {int, float}:
        what = ", ".join(sorted(k.__name__ for k in kinds))
        ctx.problem(None, dim, "mixed-coordinate",
                    f"the tiles' {dim!r} values are of different kinds ({what}): they cannot "
                    "be sorted into one axis")
        return None
    return values


def _from_variables(ctx: TileContext, dim: str, held: list) -> tuple[list | None, _Coord]:
    """From each tile's own `dim` coordinate (length 1) or scalar: its value, re-expressed
    in the first tile's units when tiles count time from different origins."""
    invs, out, ok, converted = ctx.invs, [], True, False
    first = next(v for v in held if v is not None)
    units, cal = first.attrs.get("units"), first.attrs.get("calendar", "standard")
    for inv, v in zip(invs, held):
        if v is None or v.values is None or np.asarray(v.values).size != 1:
            n = None if v is None or v.values is None else np.asarray(v.values).size
            ctx.problem(inv.path, dim, "no-date",
                        f"a mosaic over {dim!r} takes one date per tile file: " + (
                            f"this file has no {dim!r} variable (others do)" if v is None else
                            f"its {dim!r} holds {n} values" if n is not None else
                            f"the values of its {dim!r} were not recorded"))
            ok = False
            continue
        value = np.asarray(v.values).reshape(-1)[0]
        if v.attrs.get("units") != units or v.attrs.get("calendar", "standard") != cal:
            try:
                import cftime

                d = cftime.num2date(value, v.attrs["units"], v.attrs.get("calendar", "standard"))
                value = cftime.date2num(d, units, cal)
                converted = True
            except (ImportError, KeyError, ValueError, TypeError):
                ctx.problem(inv.path, dim, "units-differ",
                            f"{dim!r} is in {v.attrs.get('units')!r} "
                            f"({v.attrs.get('calendar', 'standard')}), {invs[0].path} in "
                            f"{units!r} ({cal}): not convertible")
                ok = False
                continue
        out.append(value.item() if hasattr(value, "item") else value)
    # the tiles' own values as stored; re-expressed ones in float64 (or wider)
    dtype = first.dtype.newbyteorder("=")
    if converted:
        dtype = np.result_type(dtype, np.float64)
    attrs = {k: a for k, a in first.attrs.items() if k not in ("_FillValue", "missing_value")}
    return (out if ok else None), _Coord(f"the tiles' {dim!r} values", attrs, dtype)


def check_coord(dim: str, spec) -> None:
    """Raise `UsageError` naming a `--coord DIM=SPEC` form that is not one (plan/coords.py:
    the forms of a hypercube's new axes), before anything is scanned."""
    parse_coords({dim: spec})


__all__ = ["check_coord", "plan_mosaic_over_time"]
