"""A hypercube's cells made one along the axes the files have (time), before they are
stacked along a new axis (plan/hypercube.py `_stack`).

A cell along a new axis (a member) is the stack of its files along time, split into files
as its modelling centre split it; its time coordinate and chunks are its own. Stacked, the
cube has one time coordinate and, per array, one chunk grid:

- **One coordinate.** Every cell's steps the same (exact), or, with `--join outer`, the
  union of every cell's steps: a cell's arrays along time are placed on it (`union.place`:
  absent chunks where it has no steps, reading as the fill value), what the cells share
  along time (the coordinate, its bounds) is merged over it, compared where they overlap.
  Steps a cell lacks without `--join outer` are a `missing-cell` naming the cell and steps.
- **One chunk grid.** A stacked array's chunks along time are cut at the union of every
  cell's chunk edges (`union.cut_at`), as a mosaic is cut at every tile edge: a member in
  2006-2080 + 2081-2100 files and one in a single 2006-2100 file make one grid, cut at 2081
  in both. Refused (`blocks-differ`, naming the chunk, both cells and the step) only where
  an edge falls inside a block that cannot be cut (compressed).

`ctx` is the hypercube's stacking state (`hypercube._Stack`): its axes, labels, which
variables are shared (`kept`), `join`, and where problems and notes go.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from ..conventions import py
from ..model import MATERIALIZED, ArrayPlan, Location, Plan, Problem
from ._common import (
    codec_names,
    declares_fill,
    first_difference,
    inline_plan,
    is_uncompressed,
    same_meaning,
)
from .union import Misfit, as_first, cut_at, edges, place, runs, union_of


def align(ctx: Any, subs: list[Plan], members: list[list[int]], d: str,
          positions: list[int], prefix: tuple[int, ...]) -> list[Plan]:
    """The cells `subs` (at `positions` along the new axis `d`, after `prefix` along the
    axes before it) with one coordinate and one chunk grid along every axis the files
    have; what cannot be made one is refused (ctx.problems) and left out of every cell
    (ctx.refused)."""
    out = list(subs)
    names = [_cell(ctx, prefix, d, p) for p in positions]
    for t in ctx.dims:
        if ctx.new[t] or t == d:
            continue
        coords = [p.arrays.get(t) for p in out]
        if any(c is None or c.inline is None for c in coords) or \
                any(not same_meaning(m, c.attrs.get(m), coords[0].attrs.get(m))
                    for c in coords for m in ("units", "calendar")):
            continue  # (compared when stacked: attribute-drift, differs-between-files)
        values = [np.asarray(c.inline).reshape(-1) for c in coords]
        if any(v.shape != values[0].shape or first_difference(v, values[0]) is not None
               for v in values[1:]):
            if ctx.join == "outer":
                out = _onto_union(ctx, out, members, values, t, names)
            else:
                _lacking(ctx, values, t, names, coords[0].attrs)
                out = _refuse(ctx, out, {n for p in out for n, a in p.arrays.items()
                                         if t in a.dims})
        out = _one_grid(ctx, out, members, t, d, names)
    return out


def value_label(v, attrs: dict) -> str:
    """A coordinate value as a date when its units are CF time, else as it is."""
    units = attrs.get("units")
    if isinstance(units, str) and " since " in units and isinstance(v, (int, float)):
        try:
            import cftime
            text = cftime.num2date(v, units, attrs.get("calendar", "standard")).isoformat()
            return text[:10] if text.endswith("00:00:00") else text
        except Exception:
            pass
    return str(v)


def _cell(ctx, prefix: tuple[int, ...], d: str, position: int) -> str:
    parts = []
    for dim, i in zip(ctx.dims, (*prefix, position)):
        v, text = ctx.axis_values[dim][i], ctx.labels[dim][i]
        parts.append(f"{dim}={text!r}" if ctx.new[dim] and isinstance(v, str) else
                     f"{dim}={text}")
    return ", ".join(parts)


def _steps(union: np.ndarray, lacking: np.ndarray, attrs: dict, most: int = 3) -> str:
    """Runs of steps as "A .. B (n steps)", the first `most` of them."""
    rs = runs(lacking)
    text = ", ".join(
        (f"{value_label(py(union[a]), attrs)} .. {value_label(py(union[b]), attrs)}"
         if b > a else value_label(py(union[a]), attrs)) + f" ({b - a + 1} step(s))"
        for a, b in rs[:most])
    return text + (f" and {len(rs) - most} more run(s)" if len(rs) > most else "")


def _lacking(ctx, values: list[np.ndarray], t: str, names: list[str], attrs: dict) -> None:
    """Without `--join outer`: each cell lacking steps other cells have is a missing cell,
    named with the steps and a cell that has them."""
    union, pos = union_of(values)
    for i, p in enumerate(pos):
        lacking = np.setdiff1d(np.arange(len(union)), p)
        if not lacking.size:
            continue
        other = next(j for j, q in enumerate(pos) if np.isin(lacking[0], q))
        ctx.problems.append(Problem(
            Location(None, None, t), "missing-cell",
            f"no file for the cell {names[i]}, {t}={_steps(union, lacking, attrs)}, which "
            f"{names[other]} has: the cells must cover the same {t} steps (a member may be "
            f"split into files anywhere; --join outer: the union, the steps a cell lacks "
            "reading as the fill value)"))


def _refuse(ctx, out: list[Plan], names: set[str]) -> list[Plan]:
    ctx.refused |= names
    return [replace(p, arrays={n: a for n, a in p.arrays.items() if n not in names})
            for p in out]


def _file_of(ctx, p: Plan, a: ArrayPlan, k: int, j: int, fs: list[int]) -> str | None:
    """The file holding chunk j along axis k of `a` (a sub-plan's array), else the cell's
    first file."""
    if a.refs is not None and 0 <= j < a.refs.shape[k]:
        layer = np.take(a.refs, j, axis=k)
        stored = (layer["length"] > 0) & (layer["path"] != MATERIALIZED)
        if stored.any():
            return p.sources[int(layer["path"][stored][0])].path
    return ctx.invs[fs[0]].path if fs else None


def _onto_union(ctx, out: list[Plan], members, values: list[np.ndarray], t: str,
                names: list[str]) -> list[Plan]:
    """`--join outer`: every cell on the union of the cells' steps along `t`."""
    union, pos = union_of(values)
    union = as_first(union, values[0].dtype)
    n = len(union)
    attrs = out[0].arrays[t].attrs
    arrays = [dict(p.arrays) for p in out]
    refused: set[str] = set()
    along = list(dict.fromkeys(name for p in out for name, a in p.arrays.items()
                               if t in a.dims))
    for name in along:
        have = [p.arrays.get(name) for p in out]
        if any(a is None for a in have):
            continue  # (missing-variable, when stacked)
        k = have[0].dims.index(t)
        if name == t:
            a0 = have[0]
            coord = inline_plan(t, union, a0.dims, a0.attrs, a0.fill_value)
            for arr in arrays:
                arr[t] = coord
        elif name in ctx.kept:
            merged = _merged(ctx, have, members, name, k, pos, n, names)
            if merged is None:
                refused.add(name)
            for arr in arrays:
                arr[name] = merged
        else:
            for i, a in enumerate(have):
                placed = _placed(ctx, out[i], a, k, pos[i], n, members[i], names[i], t)
                if placed is None:
                    refused.add(name)
                    break
                arrays[i][name] = placed
    for i, p in enumerate(pos):
        lacking = np.setdiff1d(np.arange(n), p)
        if lacking.size:
            ctx.notes.append(f"--join outer: no file of the cell {names[i]} holds {t} "
                             f"{_steps(union, lacking, attrs)}: its variables read as their "
                             "fill value there")
    return _refuse(ctx, [replace(p, arrays=a) for p, a in zip(out, arrays)], refused)


def _placed(ctx, p: Plan, a: ArrayPlan, k: int, pos: np.ndarray, n: int, fs: list[int],
            cell: str, t: str) -> ArrayPlan | None:
    """One cell's array along `t` on the union (`place`), or None (refused, located)."""
    m = a.shape[k]
    if m == n:
        return a
    path = _file_of(ctx, p, a, k, 0, fs)
    if not declares_fill(a.fill_value, a.dtype, a.attrs):
        ctx.problems.append(Problem(
            Location(path, a.name, t), "no-fill-value",
            f"{a.name!r} declares no fill value (_FillValue, or a missing_value equal to the "
            f"fill it would read as), so the {n - m} {t} step(s) no file of the cell {cell} "
            "holds (--join outer) cannot read as missing: give the files a _FillValue, or "
            f"--drop {a.name}"))
        return None
    r = place(a, k, pos, n)
    if isinstance(r, ArrayPlan):
        return r
    path = _file_of(ctx, p, a, k, r.chunk, fs)
    what = ("other cells' steps fall inside it (between its steps "
            f"{r.step} and {r.step + 1}): an absent chunk cannot be cut there"
            if r.kind == "span-interleaved" else
            "it is stored padded and other cells' steps follow it")
    ctx.problems.append(Problem(Location(path, a.name, t, (r.chunk,)), r.kind,
                                f"chunk {r.chunk} of {a.name!r} along {t!r} at the cell {cell}: "
                                f"{what} (--join outer)"))
    return None


def _merged(ctx, have: list[ArrayPlan], members, name: str, k: int, pos, n: int,
            names: list[str]) -> ArrayPlan | None:
    """What the cells share along `t` (its bounds, an auxiliary coordinate) over the union:
    each step from a cell holding it, the same bit for bit where several do."""
    merged = None
    by = np.full(n, -1, dtype=np.int64)
    for i, a in enumerate(have):
        if a.inline is None:
            ctx.problems.append(Problem(
                Location(ctx.invs[members[i][0]].path if members[i] else None, name),
                "not-comparable", f"{name!r} is shared by the cells along their axis, which "
                f"differ in steps (--join outer), but its values are not stored in the cube to "
                "be merged", remedy=f"--drop {name}"))
            return None
        v = np.moveaxis(np.asarray(a.inline), k, 0)
        if merged is None:
            merged = np.zeros((n, *v.shape[1:]), dtype=np.result_type(
                *[np.asarray(b.inline).dtype for b in have]))
        here = np.flatnonzero(by[pos[i]] >= 0)
        if here.size:
            index = first_difference(v[here], merged[pos[i][here]])
            if index is not None:
                j = int(here[index[0] if index else 0])
                h = int(by[pos[i][j]])
                ctx.problems.append(Problem(
                    Location(ctx.invs[members[i][0]].path if members[i] else None, name),
                    "differs-between-files",
                    f"{name!r} is shared by the cells, so it must be the same where they share "
                    f"a step, but at the cell {names[i]} it differs from {names[h]} at its "
                    f"step {j} ({py(v[j].reshape(-1)[0])!r} here, "
                    f"{py(merged[pos[i][j]].reshape(-1)[0])!r} there)"))
                return None
        merged[pos[i]] = v
        by[pos[i]] = i
    a0 = have[0]
    return inline_plan(name, as_first(np.moveaxis(merged, 0, k), a0.dtype), a0.dims, a0.attrs,
                       a0.fill_value)


def _one_grid(ctx, out: list[Plan], members, t: str, d: str, names: list[str]) -> list[Plan]:
    """Each array stacked along `d` cut along `t` at every cell's chunk edges."""
    arrays = [dict(p.arrays) for p in out]
    refused: set[str] = set()
    for name in list(dict.fromkeys(n for p in out for n in p.arrays)):
        have = [p.arrays.get(name) for p in out]
        if name in ctx.kept or any(a is None or a.refs is None or t not in a.dims
                                   for a in have):
            continue
        k = have[0].dims.index(t)
        if all(a.chunk_lengths[k] == have[0].chunk_lengths[k] for a in have):
            continue
        at = set().union(*(edges(a.chunk_lengths[k]) for a in have))
        for i, a in enumerate(have):
            r = cut_at(a, k, at)
            if isinstance(r, Misfit):
                _uncut(ctx, out[i], a, k, r, have, members[i], names, i, t, d)
                refused.add(name)
                break
            arrays[i][name] = r
        else:
            ctx.notes.append(f"{name}: the cells' chunks along {t!r} differ (split into "
                             f"files otherwise): cut at every cell's chunk edges into one "
                             f"grid of {len(arrays[0][name].chunk_lengths[k])} chunks")
    return _refuse(ctx, [replace(p, arrays=a) for p, a in zip(out, arrays)], refused)


def _uncut(ctx, p: Plan, a: ArrayPlan, k: int, r: Misfit, have, fs, names, i, t, d) -> None:
    starts = np.cumsum([0, *a.chunk_lengths[k]]).tolist()
    other = next((h for h, b in enumerate(have) if r.step in edges(b.chunk_lengths[k])), i)
    coord = p.arrays.get(t)
    at = value_label(py(np.asarray(coord.inline).reshape(-1)[r.step]), coord.attrs) \
        if coord is not None and coord.inline is not None and r.step < coord.shape[0] \
        else str(r.step)
    why = (f"is compressed ({codec_names(a.codecs)}: its bytes decode only whole)"
           if not is_uncompressed(a.codecs) else "is not stored as its rows' bytes")
    ctx.problems.append(Problem(
        Location(_file_of(ctx, p, a, k, r.chunk, fs), a.name, t, (r.chunk,)), "blocks-differ",
        f"chunk {r.chunk} of {a.name!r} along {t!r} ({t} steps {starts[r.chunk]}.."
        f"{starts[r.chunk + 1] - 1}) at the cell {names[i]} {why} and would be cut at step "
        f"{r.step} ({t}={at}), where the chunks of {names[other]} end: stacked along {d!r}, "
        f"every cell is cut at every cell's chunk edges along {t!r} (one grid); rechunk the "
        f"files alike (nccopy -c {t}/1), or --drop {a.name}"))
