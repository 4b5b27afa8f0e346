"""One axis made of many: an array's steps placed on the union of several coordinates, and
its chunks cut at the union of several chunkings. Pure chunk-grid arithmetic, no bytes.

`place` puts an array's steps where they are on a longer axis (a variable of a merge
holding fewer steps than the union, `--join outer`; a member covering fewer years than
another): chunks where it has steps, absent chunks (reading as its fill value) between.
`cut_at` cuts its chunks along the axis at given edges (another member's block edges: a
stacked array has one chunk grid, as a mosaic is cut at every tile edge); an uncompressed
chunk is cut at whole rows into exact byte ranges, a compressed one cannot be (its bytes
decode only whole). What cannot be done is a `Misfit`, which the caller locates.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..model import MATERIALIZED, ArrayPlan, Cell
from ._common import inline_plan, is_uncompressed


@dataclass(frozen=True)
class Misfit:
    """Why an array cannot be placed or cut: `kind` ("span-interleaved": other steps fall
    between two of one chunk's; "padded-block": a chunk stored padded is not the last;
    "blocks-differ": a compressed chunk would have to be cut), the chunk (its index along
    the axis) and the step (of the array) where it happens."""

    kind: str
    chunk: int
    step: int


def union_of(values: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """The sorted union of several increasing coordinates, and each one's positions in it."""
    union = values[0]
    for v in values[1:]:
        union = np.union1d(union, v)
    return union, [np.searchsorted(union, v) for v in values]


def runs(steps: np.ndarray) -> list[tuple[int, int]]:
    """Increasing indices as runs [(first, last), ...] of consecutive ones."""
    if not steps.size:
        return []
    breaks = np.flatnonzero(np.diff(steps) != 1)
    firsts = np.r_[steps[0], steps[breaks + 1]]
    lasts = np.r_[steps[breaks], steps[-1]]
    return [(int(a), int(b)) for a, b in zip(firsts, lasts)]


def place(a: ArrayPlan, k: int, pos: np.ndarray, n: int) -> ArrayPlan | Misfit:
    """`a` with its steps along axis `k` at positions `pos` (increasing) of an axis of `n`
    steps: its chunks where it has steps, absent chunks (length 0: read as the fill value)
    where it has none; inline values filled with the fill value. A chunk whose steps are
    not consecutive there (`span-interleaved`), or a padded chunk other steps follow
    (`padded-block`), cannot be placed."""
    m = a.shape[k]
    if m == n:
        return a
    if a.inline is not None:
        data = np.moveaxis(np.asarray(a.inline), k, 0)
        out = np.full((n, *data.shape[1:]), a.fill_value, dtype=data.dtype)
        out[pos] = data
        return inline_plan(a.name, np.moveaxis(out, 0, k), a.dims, a.attrs, a.fill_value)
    lens = list(a.chunk_lengths[k])
    starts = np.cumsum([0, *lens[:-1]]).tolist()
    new_lens: list[int] = []
    index: list[int] = []  # per new chunk: the old chunk (-1: absent)
    cursor = 0
    for j, (s, length) in enumerate(zip(starts, lens)):
        e = min(s + length, m)
        if e <= s:
            continue
        if pos[e - 1] - pos[s] != e - 1 - s:
            return Misfit("span-interleaved", j, s + int(np.flatnonzero(np.diff(pos[s:e]) != 1)[0]))
        if s + length > m and pos[e - 1] != n - 1:
            return Misfit("padded-block", j, m - 1)
        if pos[s] > cursor:
            new_lens.append(int(pos[s] - cursor))
            index.append(-1)
        new_lens.append(length)
        index.append(j)
        cursor = int(pos[s]) + length
    if cursor < n:
        new_lens.append(n - cursor)
        index.append(-1)
    idx = np.asarray(index)
    refs = np.take(a.refs, np.where(idx < 0, 0, idx), axis=k).copy()
    refs[(slice(None),) * k + (idx < 0,)] = np.zeros((), dtype=refs.dtype)
    old_to_new = {int(j): i for i, j in enumerate(index) if j >= 0}
    cells = {tuple(old_to_new[c] if ax == k else c for ax, c in enumerate(key)): cell
             for key, cell in a.materialize.items()}
    chunk_lengths = list(a.chunk_lengths)
    chunk_lengths[k] = tuple(new_lens)
    shape = list(a.shape)
    shape[k] = n
    return replace(a, shape=tuple(shape), chunk_lengths=tuple(chunk_lengths), refs=refs,
                   materialize=cells)


def as_first(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """`values` in `dtype` (the first's) when that keeps every value, else as they are
    (whole days in int32 and another's noon steps in float64 keep float64)."""
    cast = np.asarray(values).astype(dtype)
    with np.errstate(invalid="ignore"):
        same = np.array_equal(cast.astype(values.dtype), values,
                              equal_nan=values.dtype.kind in "fc")
    return cast if same else np.asarray(values)


def edges(lengths) -> set[int]:
    """The steps where chunks of these lengths end (the last one's end included)."""
    return {int(x) for x in np.cumsum(lengths)}


def cut_at(a: ArrayPlan, k: int, at: set[int]) -> ArrayPlan | Misfit:
    """`a` with every chunk along axis `k` that a step of `at` falls inside cut there. A
    chunk stored uncompressed (C order, its rows along `k` whole byte ranges: `k` is the
    first axis, or every axis before it is in chunks of one) is cut into exact byte ranges;
    a chunk held to be copied into exact regions; an absent chunk stays absent. A stored
    compressed chunk cannot be cut (`blocks-differ`). Inline arrays have no chunks to cut."""
    if a.refs is None:
        return a
    lens = [int(x) for x in a.chunk_lengths[k]]
    starts = np.cumsum([0, *lens[:-1]]).tolist()
    end = a.shape[k]
    pieces: list[tuple[int, int, int]] = []  # (old chunk, first row, last row + 1)
    for j, (s, length) in enumerate(zip(starts, lens)):
        cuts = [s, *sorted(x for x in at if s < x < min(s + length, end)), s + length]
        pieces.extend((j, r0 - s, r1 - s) for r0, r1 in zip(cuts[:-1], cuts[1:]))
    if len(pieces) == len(lens):
        return a
    cut = {j for j in range(len(lens)) if sum(p[0] == j for p in pieces) > 1}
    rows_ok = k == 0 or all(all(x == 1 for x in a.chunk_lengths[ax]) for ax in range(k))
    item = a.dtype.itemsize
    for j in sorted(cut):
        layer = np.take(a.refs, j, axis=k)
        stored = (layer["length"] > 0) & (layer["path"] != MATERIALIZED)
        if not stored.any():
            continue
        if not (is_uncompressed(a.codecs) and rows_ok):
            first = min(r0 for jj, r0, _ in pieces if jj == j and r0 > 0)
            return Misfit("blocks-differ", j, starts[j] + first)
        other = [np.asarray(c, dtype=np.uint64) for ax, c in enumerate(a.chunk_lengths) if ax != k]
        size = np.uint64(lens[j] * item)
        for c in other:
            size = np.multiply.outer(size, c)
        if (layer["length"][stored] != np.broadcast_to(size, layer.shape)[stored]).any():
            return Misfit("blocks-differ", j, starts[j])  # (stored at another size: padded?)
    which = np.asarray([p[0] for p in pieces])
    r0 = np.asarray([p[1] for p in pieces], dtype=np.uint64)
    r1 = np.asarray([p[2] for p in pieces], dtype=np.uint64)
    rows = np.asarray([lens[p[0]] for p in pieces], dtype=np.uint64)
    refs = np.take(a.refs, which, axis=k).copy()
    shape = [1] * refs.ndim
    shape[k] = len(pieces)
    r0, r1, rows = (x.reshape(shape) for x in (r0, r1, rows))
    moved = np.isin(which, sorted(cut)).reshape(shape) & (refs["length"] > 0) & \
        (refs["path"] != MATERIALIZED)
    row_bytes = refs["length"] // np.maximum(rows, 1)
    refs["offset"] = np.where(moved, refs["offset"] + r0 * row_bytes, refs["offset"])
    refs["length"] = np.where(moved, (r1 - r0) * row_bytes, refs["length"])
    first_piece: dict[int, int] = {}
    for i, (j, _, _) in enumerate(pieces):
        first_piece.setdefault(j, i)
    cells: dict[tuple[int, ...], Cell] = {}
    for key, c in a.materialize.items():
        j = key[k]
        for i in range(first_piece[j], len(pieces)):
            if pieces[i][0] != j:
                break
            lo, hi = c.region[k]
            region = list(c.region)
            region[k] = (lo + pieces[i][1], min(lo + pieces[i][2], hi))
            cells[tuple(i if ax == k else x for ax, x in enumerate(key))] = \
                Cell(c.source, c.variable, tuple(region))
    chunk_lengths = list(a.chunk_lengths)
    chunk_lengths[k] = tuple(p[2] - p[1] for p in pieces)
    return replace(a, chunk_lengths=tuple(chunk_lengths), refs=refs, materialize=cells)
