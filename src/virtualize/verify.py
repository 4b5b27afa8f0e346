"""The decode check: a cube is never written that its readers then fail to decode.

Before a plan is published (and in `check`, which runs the same code), a few stored
chunks of every virtual array are decoded through the cube's own codec chain -- zarr
itself, reading an in-memory store that holds the array's `zarr.json` (as the writers emit
it) and that chunk's bytes from the source -- and compared bit for bit (NaN payloads
included) with the source library's read of the same region (h5py, tifffile, our netCDF
classic reader: `scan.SourceReader`). A failure or a difference is a `decode-mismatch`
problem located at the source file, variable and block: fatal, so nothing is written.

Which chunks: `select="groups"` (the default) groups an array's stored chunks by shape
(per axis the chunk's length and whether it reaches past the array's end: edge and short
chunks are where reshape bugs live) and takes each group's first and last chunk -- a
handful per stack, whatever its number of files, since one array has one codec chain.
`select="sources"` does so per shape and source file, `select="all"` takes every stored
chunk (for `virtualize verify --decode`). A sample cannot catch a failure that depends on
a chunk's content (a WebP tile whose all-opaque alpha was dropped); "all" can.
Materialized chunks are not taken: they are decoded, re-encoded and checked when written
(emit/materialize.py).

Locating a chunk in its source needs that file's block table: the chunk's reference
(source, offset) is looked up among the blocks of the file's variable (an offset inside a
block is a row range of an uncompressed block, the split remedy).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .model import MATERIALIZED, ArrayPlan, FileInventory, Location, Plan, Problem

# A chunk decoding to more than this is not decoded whole: an uncompressed one is checked
# on its leading rows (as many as fit), a compressed one is left out (and said so).
DECODE_LIMIT = 64 * 2**20
# At most this many distinct chunk shapes of one array are checked ("groups", "sources").
MAX_GROUPS = 32


@dataclass
class DecodeCheck:
    """What the check did: problems found, chunks decoded, bytes read, time taken."""

    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    chunks: int = 0
    bytes_read: int = 0
    seconds: float = 0.0


@dataclass
class _Sample:
    index: tuple[int, ...]  # chunk index in the cube
    source: int
    offset: int
    length: int


def decode_check(plan: Plan, inventories: Iterable[FileInventory], *, select: str = "groups",
                 skip: Iterable[tuple[str | None, str | None]] = (),
                 arrays: Sequence[str] | None = None) -> DecodeCheck:
    """Decode chunks of `plan`'s virtual arrays through their zarr codecs and compare them
    with the sources' own reads. `inventories`: the scanned sources (their block tables
    locate each chunk in its file). `skip`: (file, variable) pairs already refused, whose
    chunks are not read; (file, None) skips a file. `arrays`: only these arrays."""
    if select not in ("groups", "sources", "all"):
        raise ValueError(f"select must be 'groups', 'sources' or 'all', not {select!r}")
    t0 = time.perf_counter()
    out = DecodeCheck()
    invs = {inv.path: inv for inv in inventories}
    skipped = set(skip)
    for name, a in plan.arrays.items():
        if arrays is not None and name not in arrays:
            continue
        if a.refs is None or a.inline is not None or not a.refs.size:
            continue
        samples = _choose(a, select, out)
        samples = [s for s in samples
                   if (plan.sources[s.source].path, None) not in skipped
                   and (plan.sources[s.source].path, name) not in skipped]
        if samples:
            _ArrayCheck(plan, a, invs, out).run(samples)
    out.seconds = time.perf_counter() - t0
    return out


# -- which chunks --------------------------------------------------------------------

def _choose(a: ArrayPlan, select: str, out: DecodeCheck) -> list[_Sample]:
    refs = a.refs
    stored = (refs["length"] > 0) & (refs["path"] != MATERIALIZED)
    flat = np.flatnonzero(stored.reshape(-1))
    if not flat.size:
        return []
    if refs.ndim == 0:  # a scalar: one chunk
        rec = refs[()]
        return [_Sample((), int(rec["path"]), int(rec["offset"]), int(rec["length"]))]
    classes = [_axis_classes(lens, n) for lens, n in zip(a.chunk_lengths, a.shape)]
    if select == "all":
        chosen = flat
    elif select == "groups":
        chosen = _group_ends(a, classes, stored, out)
        if chosen is None:  # a group's end chunk is missing: look at every stored chunk
            chosen = _by_key(a, classes, flat, None, out)
        chosen = np.unique(np.concatenate([chosen, flat[[0, -1]]]))
    else:
        chosen = np.unique(np.concatenate([_by_key(a, classes, flat, refs["path"], out),
                                           flat[[0, -1]]]))
    view = refs.reshape(-1)
    return [_Sample(tuple(int(i) for i in np.unravel_index(int(f), refs.shape)),
                    int(view["path"][f]), int(view["offset"][f]), int(view["length"][f]))
            for f in chosen]


def _axis_classes(lens, n: int) -> np.ndarray:
    """Per chunk position along one axis, a class: its (length, reaches past the end)."""
    lens = np.asarray(lens, dtype=np.int64)
    if lens.size and (lens == lens[0]).all():  # regular: no sorting
        cls = np.zeros(lens.size, dtype=np.int64)
        if int(lens.sum()) > n:
            cls[-1] = 1
        return cls
    code = lens * 2 + (np.cumsum(lens) > n)
    return np.unique(code, return_inverse=True)[1].reshape(-1)


def _too_many(a: ArrayPlan, count: int, out: DecodeCheck) -> None:
    out.notes.append(f"{a.name}: {count} distinct chunk shapes; the decode check took the "
                     f"first {MAX_GROUPS}")


def _group_ends(a: ArrayPlan, classes, stored: np.ndarray, out: DecodeCheck):
    """Flat indices of each shape group's first and last chunk, from the axes alone (no
    pass over the chunks), or None when one of them holds no stored block."""
    firsts, lasts = [], []
    for cls in classes:
        k = int(cls.max()) + 1 if cls.size else 1
        first = np.full(k, -1, dtype=np.int64)
        last = np.full(k, -1, dtype=np.int64)
        first[cls[::-1]] = np.arange(cls.size - 1, -1, -1)  # the earliest write wins
        last[cls] = np.arange(cls.size)
        firsts.append(first)
        lasts.append(last)
    combos = list(itertools.islice(itertools.product(*(range(len(f)) for f in firsts)),
                                   MAX_GROUPS + 1))
    if len(combos) > MAX_GROUPS:
        _too_many(a, math.prod(len(f) for f in firsts), out)
        combos = combos[:MAX_GROUPS]
    chosen = []
    for combo in combos:
        for ends in (firsts, lasts):
            index = tuple(int(e[c]) for e, c in zip(ends, combo))
            if not stored[index]:
                return None
            chosen.append(int(np.ravel_multi_index(index, stored.shape)))
    return np.asarray(chosen, dtype=np.int64)


def _by_key(a: ArrayPlan, classes, flat: np.ndarray, paths, out: DecodeCheck) -> np.ndarray:
    """Flat indices of the first and last stored chunk of each shape group (and source,
    with `paths`): one pass over the stored chunks."""
    idx = np.unravel_index(flat, a.refs.shape)
    key = np.zeros(flat.size, dtype=np.int64)
    for axis, cls in enumerate(classes):
        key = key * (int(cls.max()) + 1 if cls.size else 1) + cls[idx[axis]]
    if paths is not None:
        p = paths.reshape(-1)[flat].astype(np.int64)
        key = key * (int(p.max()) + 1) + p
    _, first = np.unique(key, return_index=True)
    _, last = np.unique(key[::-1], return_index=True)
    order = np.argsort(first)
    first, last = first[order], (key.size - 1 - last)[order]
    if paths is None and first.size > MAX_GROUPS:
        _too_many(a, first.size, out)
        first, last = first[:MAX_GROUPS], last[:MAX_GROUPS]
    return np.concatenate([flat[first], flat[last]])


# -- one array -----------------------------------------------------------------------

class _ArrayCheck:
    def __init__(self, plan: Plan, a: ArrayPlan, invs: dict[str, FileInventory],
                 out: DecodeCheck):
        self.plan, self.a, self.invs, self.out = plan, a, invs, out
        self.starts = [np.concatenate([[0], np.cumsum(lens)]) for lens in a.chunk_lengths]
        self.names = "[" + ", ".join(c["name"] for c in a.codecs) + "]"
        self._arr = None  # (store, zarr array) over the array's zarr.json, opened once

    def run(self, samples: list[_Sample]) -> None:
        by_source: dict[int, list[_Sample]] = defaultdict(list)
        for s in samples:
            by_source[s.source].append(s)
        from .scan import SourceReader

        for source, group in by_source.items():
            path = self.plan.sources[source].path
            located = [(s, self._locate(s, path)) for s in group]
            try:
                reader = SourceReader(path).__enter__()
            except Exception as e:
                for s, _ in located:
                    self._problem(path, None, s, f"the source cannot be opened to compare "
                                  f"({type(e).__name__}: {e})")
                continue
            try:
                for s, where in located:
                    if isinstance(where, str):
                        self._problem(path, None, s, where)
                    else:
                        self._check(path, reader, s, *where)
            finally:
                reader.__exit__(None, None, None)

    def _locate(self, s: _Sample, path: str):
        """(file block index, file region, cube region, new axis) of a sample, or why not."""
        a = self.a
        inv = self.invs.get(path)
        v = inv.variables.get(a.name) if inv is not None else None
        if v is None or v.blocks is None:
            return f"{a.name!r} has no block table in this source to compare the chunk with"
        new_axis = len(a.shape) == len(v.shape) + 1
        cube = []
        for axis, i in enumerate(s.index):
            lo = int(self.starts[axis][i])
            hi = min(lo + int(a.chunk_lengths[axis][i]), int(a.shape[axis]))
            cube.append((lo, hi))
        frefs = v.blocks.refs.reshape(-1)
        off, ln = frefs["offset"], frefs["length"]
        hit = np.flatnonzero((ln > 0) & (off <= s.offset) & (s.offset < off + ln))
        if not hit.size:
            return (f"chunk {s.index} refers to bytes {s.offset}..{s.offset + s.length - 1}, "
                    "which are not inside any block of this variable in this file")
        extents = [hi - lo for lo, hi in cube][1 if new_axis else 0:]
        bs = v.blocks.block_shape
        best = None
        for h in hit.tolist():
            block = tuple(int(b) for b in np.unravel_index(h, v.blocks.refs.shape))
            start = [b * n for b, n in zip(block, bs)]
            skip = s.offset - int(off[h])
            if skip:  # rows of an uncompressed block (the split remedy)
                row_bytes = math.prod(bs[1:]) * v.dtype.itemsize
                start[0] += skip // row_bytes
            region = tuple((lo, lo + e) for lo, e in zip(start, extents))
            best = best or (block, region)
            if all(hi <= n for (_, hi), n in zip(region, v.shape)):
                best = (block, region)
                break
        block, region = best
        return block, region, tuple(cube), new_axis

    def _check(self, path, reader, s: _Sample, block, region, cube, new_axis) -> None:
        a = self.a
        extents = [hi - lo for lo, hi in cube]
        if any(hi > n for (_, hi), n in zip(region, self.invs[path].variables[a.name].shape)):
            self._problem(path, block, s, f"the chunk covers {tuple(extents)} values of the "
                          f"cube, more than its block holds in the file (region {region})")
            return
        try:
            decoded = self._decode(path, s, extents)
        except Exception as e:
            self._problem(path, block, s, f"decoding it through the cube's codecs {self.names} "
                          f"fails: {type(e).__name__}: {e}")
            return
        if decoded is None:
            return
        got, extents = decoded
        file_extents = extents[1:] if new_axis else extents
        src_region = tuple((lo, lo + e) for (lo, _), e in zip(region, file_extents))
        try:
            want = np.asarray(reader.read(a.name, src_region))
        except Exception as e:
            self._problem(path, block, s, f"the source library cannot read this block "
                          f"({type(e).__name__}: {e}), so the cube's chunk cannot be checked")
            return
        if new_axis:
            want = want[None]
        why = _differs(got, want)
        if why:
            self._problem(path, block, s, f"decoded through the cube's codecs {self.names} it "
                          f"{why} the source library's read of the same region {src_region}")

    def _decode(self, path: str, s: _Sample, extents: list[int]):
        """The chunk's values as zarr reads them from the cube's own `zarr.json` (its
        leading `extents` per axis), and the extents read; None when too large to check."""
        import zarr
        from zarr.core.buffer import cpu
        from zarr.storage import MemoryStore

        from .emit.materialize import chunk_key
        from .emit.metadata import array_doc
        from .plan._common import is_uncompressed
        from .read import rectilinear_enabled

        a = self.a
        shape = a.chunk_shape(s.index)
        doc = None
        key = chunk_key(s.index)
        start = [int(self.starts[axis][i]) for axis, i in enumerate(s.index)]
        length = s.length
        if math.prod(shape) * a.dtype.itemsize > DECODE_LIMIT:
            if not is_uncompressed(a.codecs) or not shape:
                self.out.notes.append(f"{a.name}: chunk {s.index} decodes to more than "
                                      f"{DECODE_LIMIT} bytes: not decode-checked")
                return None
            # an uncompressed chunk's leading bytes are its leading rows along the first
            # axis longer than 1: checked as a chunk of its own, in an array of its own
            j = next((i for i, n in enumerate(shape) if n > 1), len(shape) - 1)
            row_bytes = math.prod(shape[j + 1:]) * a.dtype.itemsize
            rows = max(1, min(DECODE_LIMIT // max(row_bytes, 1), extents[j]))
            shape = (*shape[:j], rows, *shape[j + 1:])
            extents = [*extents[:j], rows, *extents[j + 1:]]
            length = min(length, rows * row_bytes)
            doc = dict(array_doc(a), shape=list(shape), chunk_grid={
                "name": "regular", "configuration": {"chunk_shape": list(shape)}})
            key = chunk_key((0,) * len(shape))
            start = [0] * len(shape)
        sel = tuple(slice(lo, lo + e) for lo, e in zip(start, extents))
        with open(path, "rb") as f:
            data = os.pread(f.fileno(), length, s.offset)
        self.out.bytes_read += len(data)
        self.out.chunks += 1
        if len(data) != length:
            raise OSError(f"the file ends after {len(data)} of the chunk's {length} bytes")
        if doc is None and self._arr is not None:  # the array's own metadata: opened once
            store, arr = self._arr
        else:
            store = {"zarr.json": cpu.Buffer.from_bytes(json.dumps(doc or array_doc(a)).encode())}
            with rectilinear_enabled():
                arr = zarr.open_array(MemoryStore(store, read_only=True), mode="r",
                                      zarr_format=3)
            if doc is None:
                self._arr = (store, arr)
        store[key] = cpu.Buffer.from_bytes(data)
        try:
            with rectilinear_enabled():
                return np.asarray(arr[sel]), extents
        finally:
            del store[key]

    def _problem(self, path: str, block, s: _Sample, why: str) -> None:
        self.out.problems.append(Problem(
            Location(path, self.a.name, None, block), "decode-mismatch",
            f"chunk {s.index} of {self.a.name!r} (bytes {s.offset}..{s.offset + s.length - 1} "
            f"of this file): {why}; a cube that reads differently from its sources is not "
            "written"))


def _differs(got: np.ndarray, want: np.ndarray) -> str | None:
    """How two arrays differ, bit for bit (NaN payloads included), or None."""
    if got.shape != want.shape:
        return f"has shape {got.shape}, not {want.shape} as"
    native = want.dtype.newbyteorder("=") if want.dtype.itemsize > 1 else want.dtype
    if got.dtype != native:
        return f"has data type {got.dtype}, not {native} as"
    g = np.ascontiguousarray(got)
    w = np.ascontiguousarray(want.astype(native, copy=False))
    if g.tobytes() == w.tobytes():
        return None
    size = g.dtype.itemsize
    gv = g.view(f"u{size}") if size in (1, 2, 4, 8) else g.view("u1").reshape(*g.shape, size)
    wv = w.view(f"u{size}") if size in (1, 2, 4, 8) else w.view("u1").reshape(*w.shape, size)
    bad = gv != wv
    if bad.ndim > g.ndim:
        bad = bad.any(axis=-1)
    where = tuple(int(i) for i in np.argwhere(bad)[0])
    return (f"differs in {int(bad.sum())} of {bad.size} values (first at {where} of the "
            f"chunk: {g[where]!r}, the source: {w[where]!r}) from")
