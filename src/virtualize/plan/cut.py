"""Large uncompressed blocks cut into chunks of at most `chunk_size` bytes. Pure: block
table arithmetic, no source bytes read.

A contiguous HDF5 dataset, a netCDF classic fixed variable or a single-strip TIFF is one
stored block, however large: referenced as it is, a reader of one value would fetch (and
allocate) all of it. An uncompressed block (codecs: `bytes` only) is plain C-ordered bytes,
so any run of whole rows of it is an exact byte range: the block is cut at whole rows of
its outer axes, (k, full, full, ...) when one row along axis 0 fits the limit, else
(1, k, full, ...), and so on inwards; at least one element per chunk along the last axis
(an element larger than the limit is a chunk of its own). The last chunk along the cut
axis may be short; it is stored at its true length (an unpadded table), which the
rectilinear grid lists. Uncompressed HDF5 chunks (padded) are cut alike, in a row count
that divides the chunk's, so that the last sub-chunk is padded as its chunk was. Blocks
that are compressed cannot be cut (their bytes decode only whole): they stay as stored,
with a note.

Every file of a stack is cut alike (`cut_stack`): a variable's cut axis and row count
are chosen over every file that needs a cut, so that the chunks of files that differ only
along the concatenation axis line up on every other axis.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from ..model import MATERIALIZED, REF_DTYPE, BlockTable, FileInventory, Location, Problem, Variable
from ._common import is_uncompressed

DEFAULT_CHUNK_SIZE = 16 << 20
# chunks one variable of one file may be cut into (a manifest of 20 bytes each: 320 MiB)
MAX_CUT_CHUNKS = 1 << 24

_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def chunk_bytes(value: int | str | None) -> int | None:
    """`chunk_size` as bytes: an int, or a size like "16M", "16MiB", "16MB", "1048576"
    (K, M, G, T are powers of 1024). None or 0: no cut."""
    if value is None:
        return None
    if isinstance(value, str):
        t = value.strip().upper()
        t = t[:-1] if t.endswith("B") else t
        t = t[:-1] if t.endswith("I") else t
        unit = t[-1] if t and t[-1] in _UNITS else ""
        try:
            number = float(t[: len(t) - len(unit)])
        except ValueError:
            raise ValueError(f"chunk_size: not a size: {value!r}") from None
        if not math.isfinite(number):
            raise ValueError(f"chunk_size: not a size: {value!r}")
        value = int(number * _UNITS[unit])
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"chunk_size must be a number of bytes >= 0 or a size like '16M', "
                         f"not {value!r}")
    return int(value) or None


def size_text(n: int) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} bytes"


def _cuttable(v: Variable) -> bool:
    """Blocks that are plain C-ordered bytes of their (true) shape, referenced by range."""
    b = v.blocks
    if b is None or not v.shape or 0 in v.shape or v.dtype.itemsize == 0 or \
            v.dtype.kind in "OT" or not is_uncompressed(v.codecs):
        return False
    return not bool((b.refs["path"] == MATERIALIZED).any())


def _needs_cut(v: Variable, limit: int) -> bool:
    return v.blocks is not None and bool(v.blocks.refs.size) and \
        int(v.blocks.refs["length"].max()) > limit


def cut_axis(block_shape: Sequence[int], itemsize: int, limit: int) -> tuple[int, int]:
    """(axis, rows): the first axis one of whose rows (the block's extent along every
    later axis) fits `limit` bytes, and how many such rows do (at least 1; the last axis
    when not even one element fits)."""
    nd = len(block_shape)
    for a in range(nd):
        if math.prod(block_shape[a + 1:]) * itemsize <= limit:
            return a, _rows_at(block_shape, itemsize, limit, a)
    return nd - 1, 1


def _rows_at(block_shape: Sequence[int], itemsize: int, limit: int, a: int) -> int:
    """How many rows along axis `a` fit `limit` bytes (at least 1, at most the block's)."""
    row = math.prod(block_shape[a + 1:]) * itemsize
    return max(1, min(limit // row, block_shape[a]))


def cut_table(v: Variable, axis: int, rows: int) -> BlockTable | None:
    """`v`'s block table with every block cut into sub-blocks of `rows` along `axis`, one
    element along the axes before it, whole along those after it; None when the blocks
    cannot be cut so (the table holds several blocks along `axis` and `rows` does not
    divide their length, or a block's stored length is not its raw size)."""
    t = v.blocks
    assert t is not None
    shape, B, G = v.shape, t.block_shape, t.grid_shape
    nd, item = len(shape), v.dtype.itemsize
    if G[axis] > 1 or t.padded:
        # sub-blocks tile each block exactly (a padded block's last one inside its padding)
        rows = next(d for d in range(min(rows, B[axis]), 0, -1) if B[axis] % d == 0)
    else:
        rows = min(rows, shape[axis])
    # each block's stored length along each axis: its true one (a short last block is
    # stored at it), or the full block's when padded
    lens = [np.full(G[i], B[i], np.uint64) if t.padded else
            np.minimum(B[i], shape[i] - np.arange(G[i], dtype=np.int64) * B[i]).astype(np.uint64)
            for i in range(nd)]
    stored = t.refs["length"] > 0
    raw = np.uint64(item)
    for i in range(nd):
        raw = raw * lens[i].reshape((1,) * i + (-1,) + (1,) * (nd - i - 1))
    if (stored & (t.refs["length"] != raw)).any():
        return None
    grid = tuple(shape[i] if i < axis else -(-shape[axis] // rows) if i == axis else G[i]
                 for i in range(nd))
    if math.prod(grid) > MAX_CUT_CHUNKS:
        raise _TooMany(grid)
    g_idx, local, sub = [], [], []  # per axis: old block, element offset in it, sub-length
    for i in range(nd):
        c = np.arange(grid[i], dtype=np.int64)
        if i < axis:
            g, lo = c // B[i], c % B[i]
            n = np.ones(len(c), np.uint64)
        elif i == axis:
            g, lo = (c * rows) // B[i], (c * rows) % B[i]
            n = np.minimum(rows, lens[i][g].astype(np.int64) - lo).astype(np.uint64)
        else:
            g, lo, n = c, np.zeros(len(c), np.int64), lens[i]
        g_idx.append(g)
        local.append(lo.astype(np.uint64))
        sub.append(n)

    def along(i: int, a: np.ndarray) -> np.ndarray:
        return a.reshape((1,) * i + (-1,) + (1,) * (nd - i - 1))

    old = t.refs[np.ix_(*g_idx)]
    # byte strides of each old block, innermost first: the true lengths of the later axes
    offset = np.zeros((1,) * nd, np.uint64)
    stride = np.full((1,) * nd, item, np.uint64)
    for i in range(nd - 1, -1, -1):
        if i <= axis:
            offset = offset + along(i, local[i]) * stride
        stride = stride * along(i, lens[i][g_idx[i]])
    length = np.full((1,) * nd, item, np.uint64)
    for i in range(nd):
        length = length * along(i, sub[i])
    refs = np.zeros(grid, REF_DTYPE)
    has = old["length"] > 0
    refs["path"] = old["path"]
    refs["offset"] = np.where(has, old["offset"] + offset, 0)
    refs["length"] = np.where(has, length, 0)
    block = tuple(1 if i < axis else rows if i == axis else B[i] for i in range(nd))
    # (padded: the last sub-block along an axis holds padding, stored at full size, as
    # the block it is cut from; along the axes before `axis` padding elements are dropped)
    return BlockTable(block, padded=t.padded, refs=refs)


class _TooMany(Exception):
    def __init__(self, grid: tuple[int, ...]):
        self.grid = grid


def cut_stack(invs: Sequence[FileInventory], chunk_size: int | None,
              like: FileInventory | None = None
              ) -> tuple[list[FileInventory], list[str], list[Problem]]:
    """`invs` with every uncompressed block larger than `chunk_size` bytes cut (new
    inventories where something was cut: the caller's are not edited), notes saying what
    was cut and what could not be (compressed blocks), and problems (a cut into more
    chunks than a manifest may hold). `like`: the last file of a cube the files are
    appended to, as it was cut: its variables' cuts are kept, so that the new files' chunks
    line up with the cube's (even where a new file's alone would be cut otherwise)."""
    if not chunk_size:
        return list(invs), [], []
    limit = int(chunk_size)
    # the stack's cut per variable: the deepest axis any file needs, the fewest rows
    needed: dict[str, list[Variable]] = {}
    compressed: dict[str, int] = {}
    for inv in invs:
        for name, v in inv.variables.items():
            if not _needs_cut(v, limit):
                continue
            if _cuttable(v):
                needed.setdefault(name, []).append(v)
            elif v.blocks is not None and not is_uncompressed(v.codecs):
                compressed[name] = compressed.get(name, 0) + 1
    spec: dict[str, tuple[int, int]] = {}
    for name, vs in needed.items():
        a = max(cut_axis(v.blocks.block_shape, v.dtype.itemsize, limit)[0] for v in vs)
        spec[name] = (a, min(_rows_at(v.blocks.block_shape, v.dtype.itemsize, limit, a)
                             for v in vs))
    for name, v in (like.variables.items() if like is not None else ()):
        t = v.blocks  # (a cut table: one element along the axes before the cut, k at it)
        if t is not None and _cuttable(v) and any(g > 1 for g in t.grid_shape) and \
                any(name in inv.variables for inv in invs):
            a = next((i for i, b in enumerate(t.block_shape) if b != 1), len(t.block_shape) - 1)
            spec[name] = (a, t.block_shape[a])
    out: list[FileInventory] = []
    problems: list[Problem] = []
    shown: dict[str, tuple[int, ...]] = {}
    odd: dict[str, int] = {}  # blocks whose stored length is not their raw size
    for inv in invs:
        changed: dict[str, Variable] = {}
        for name, (a, k) in spec.items():
            v = inv.variables.get(name)  # (every file cut alike, those that fit too)
            if v is None or not _cuttable(v) or a >= len(v.shape):
                continue
            try:
                t = cut_table(v, a, k)
            except _TooMany as e:
                problems.append(Problem(
                    Location(inv.path, name), "too-many-blocks",
                    f"cut into chunks of at most {size_text(limit)} (--chunk-size) its "
                    f"{size_text(int(v.blocks.refs['length'].max()))} block(s) would be "
                    f"{math.prod(e.grid)} chunks, more than {MAX_CUT_CHUNKS}",
                    remedy="a larger --chunk-size"))
                continue
            if t is None:
                if _needs_cut(v, limit):
                    odd[name] = odd.get(name, 0) + 1
                continue
            if t.block_shape == v.blocks.block_shape and t.grid_shape == v.blocks.grid_shape:
                continue
            changed[name] = replace(v, blocks=t)
            shown.setdefault(name, t.block_shape)
        out.append(replace(inv, variables={**inv.variables, **changed}) if changed else inv)
    notes = []
    if shown:
        notes.append(f"blocks larger than {size_text(limit)} (--chunk-size) cut into chunks at "
                     "whole rows: " + ", ".join(f"{n} ({'x'.join(map(str, s))})"
                                                for n, s in shown.items()))
    if compressed:
        notes.append(f"compressed blocks larger than {size_text(limit)} cannot be cut (they "
                     "decode only whole) and are referenced as stored: "
                     + ", ".join(compressed))
    if odd:
        notes.append(f"uncompressed blocks larger than {size_text(limit)} whose stored length "
                     "is not the size of their values were not cut (referenced as stored): "
                     + ", ".join(odd))
    return out, notes, problems
