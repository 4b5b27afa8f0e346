"""The decode check: a cube is never written that its readers then fail to decode.

Before a plan is published (and in `check`, which runs the same code), a few stored
chunks of every virtual array are decoded through the cube's own codec chain -- zarr
itself, reading an in-memory store that holds the array's `zarr.json` (as the writers emit
it) and that chunk's bytes from the source -- and compared bit for bit (NaN payloads
included) with the source library's read of the same region (h5py, tifffile, our netCDF
classic reader: `scan.SourceReader`). A failure or a difference is a `decode-mismatch`
problem located at the source file, variable and block: fatal, so nothing is written.
A chain of only the codecs in `DIRECT` (bytes, zlib, gzip, virtualize's own) is decoded
by the same functions zarr's codecs call, as zarr calls them (`decode_direct`), without
importing zarr (tests/test_decode_direct.py reads each through zarr too).

Which chunks: `select="groups"` (the default) groups an array's stored chunks by shape
(per axis the chunk's length and whether it reaches past the array's end: edge and short
chunks are where reshape bugs live) and takes each group's first chunk -- and its last
one too for image codecs (JPEG, WebP, LERC), whose failures depend on a chunk's content
(a WebP tile whose all-opaque alpha was dropped) -- plus the array's last chunk when
another file holds it: a handful per stack, whatever its number of files, since one
array has one codec chain. `select="sources"` takes the first and last chunk per shape
and source file, `select="all"` every stored chunk (for `virtualize verify --decode`).
Materialized chunks are not taken: they are decoded, re-encoded and checked when written
(outputs/materialize.py).

Locating a chunk in its source needs that file's block table: the chunk's reference
(source, offset) is looked up among the blocks of the file's variable (an offset inside a
block is a row range of an uncompressed block, the split remedy). So the check verifies
how a chunk decodes, not where the planner placed it in the grid.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..model import MATERIALIZED, ArrayPlan, FileInventory, Location, Plan, Problem

# A chunk decoding to more than this is not decoded whole: an uncompressed one is checked
# on its leading rows (as many as fit), a compressed one is left out (and said so).
DECODE_LIMIT = 64 * 2**20
# At most this many distinct chunk shapes of one array are checked ("groups", "sources").
MAX_GROUPS = 32
# Chunks decoded together (one call into zarr), at most this many or this many bytes.
BATCH_CHUNKS = 512
BATCH_BYTES = 256 * 2**20
# Codecs whose decoding can fail on one chunk and not on another of the same shape.
CONTENT_DEPENDENT = frozenset({"imagecodecs_jpeg", "imagecodecs_webp", "imagecodecs_lerc"})
# An array of at most this many stored chunks, decoding to at most this many bytes in all,
# has every stored chunk decoded ("groups"): a small file's damaged block (an LZW tile
# decoding to 1,025 bytes for 1,024) is found before anything is written, whatever its place.
EVERY_CHUNKS = 64
EVERY_BYTES = 8 * 2**20
# ... and whose stored chunks are at most this many bytes in all: a check reads what it
# decodes, and a scan of a remote stack fetches a small part of its files, never all of them
EVERY_STORED = 2**20
# Codecs whose decoded size follows from the chunk's by construction (they lay out or
# transform values one for one): a chain of only these needs no proof that it decodes to
# the chunk's shape. Every other codec (compressors, GRIB messages, FITS scaling, image
# codecs) is proven on at least one chunk of each array: its smallest, if the chunks the
# groups take are too large to decode.
FIXED_SIZE = frozenset({"bytes", "transpose", "numcodecs.shuffle", "numcodecs.delta",
                        "numcodecs.astype", "numcodecs.fixedscaleoffset", "imagecodecs_delta",
                        "imagecodecs_floatpred", "crc32c"})
# The most a codec's output can be over its input (its compression ratio's bound): a chunk of
# more decoded bytes than its stored bytes times these cannot be what they hold (a damaged
# header's tile geometry, ZNAXISn, chunk lengths). Codecs not named have no such bound.
MAX_RATIO = {"numcodecs.zlib": 1032, "numcodecs.gzip": 1032, "gzip": 1032,
             "imagecodecs_lzw": 4096, "imagecodecs_packbits": 64, "virtualize.lzf": 90,
             "imagecodecs_rcomp": 256, "numcodecs.fixedscaleoffset": 8,
             "virtualize.fitsscale": 8,
             "virtualize.fitsgzip": 1032 * 8}  # (gunzip; 1-byte values widened to 8)


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
    skipped = set(skip)
    converted: dict[int, np.ndarray] = {}

    def chosen(name: str, a: ArrayPlan) -> tuple[list[np.ndarray], list[_Sample]]:
        lengths = [converted.get(id(lens)) if id(lens) in converted else
                   converted.setdefault(id(lens), np.fromiter(lens, np.int64, len(lens)))
                   for lens in a.chunk_lengths]  # arrays of a stack share their time axis
        samples = _choose(a, lengths, select, out)
        return lengths, [s for s in samples
                         if (plan.sources[s.source].path, None) not in skipped
                         and (plan.sources[s.source].path, name) not in skipped]

    todo = [(name, a) for name, a in plan.arrays.items()
            if (arrays is None or name in arrays)
            and a.refs is not None and a.inline is None and a.refs.size]
    # "groups" takes a handful of chunks per array, whatever the number of files: chosen
    # first, so that only the inventories of the files they are in are looked up
    first = {name: chosen(name, a) for name, a in todo} if select == "groups" else None
    wanted = None if first is None else \
        {plan.sources[s.source].path for _, samples in first.values() for s in samples}
    # which inventories' block tables hold a source's bytes, and under which local path
    # index: a file's own (0), or a reference set's data file (k)
    invs: dict[str, list[tuple[FileInventory, int]]] = defaultdict(list)
    for inv in inventories:
        if not inv.data_files:  # (no Source objects made for a plain file)
            if wanted is None or inv.path in wanted:
                invs[inv.path].append((inv, 0))
            continue
        for k, src in enumerate(inv.sources()):
            if wanted is None or src.path in wanted:
                invs[src.path].append((inv, k))
    jobs: list[_Job] = []
    held = 0
    for name, a in todo:
        lengths, samples = first.pop(name) if first is not None else chosen(name, a)
        if samples:
            check = _ArrayCheck(plan, a, lengths, invs, out)
            for job in map(check.prepare, samples):
                if job is None:
                    continue
                jobs.append(job)
                held += len(job.data)
                if len(jobs) >= BATCH_CHUNKS or held >= BATCH_BYTES:  # ("all": bounded memory)
                    _decode(jobs)
                    _compare(jobs)
                    jobs, held = [], 0
    _decode(jobs)
    _compare(jobs)
    out.problems = _first_per_array(out.problems)
    refused = {p.loc.variable for p in out.problems}
    for name in refused & set(plan.figures):
        plan.figures[name].refused = True  # the report counts the array refused
    out.seconds = time.perf_counter() - t0
    return out


def _first_per_array(problems: list[Problem]) -> list[Problem]:
    """One problem per array and source file (its first chunk's), saying how many more of
    its chunks failed: a damaged store's every chunk is one reason, not dozens."""
    from dataclasses import replace

    first: dict[tuple, int] = {}
    more: dict[tuple, int] = defaultdict(int)
    for i, p in enumerate(problems):
        key = (p.loc.file, p.loc.variable)
        if key in first:
            more[key] += 1
        else:
            first[key] = i
    return [replace(problems[i], message=problems[i].message + (
        f" ({more[key]} more chunk(s) of {key[1]!r} in this file fail too)" if more[key] else ""))
        for key, i in first.items()]


# -- which chunks --------------------------------------------------------------------

def _choose(a: ArrayPlan, lengths: list[np.ndarray], select: str, out: DecodeCheck
            ) -> list[_Sample]:
    refs = a.refs
    stored = (refs["length"] > 0) & (refs["path"] != MATERIALIZED)
    flat = np.flatnonzero(stored.reshape(-1))
    if not flat.size:
        return []
    if refs.ndim == 0:  # a scalar: one chunk
        rec = refs[()]
        return [_Sample((), int(rec["path"]), int(rec["offset"]), int(rec["length"]))]
    classes = [_axis_classes(lens, n) for lens, n in zip(lengths, a.shape)]
    if select == "all":
        chosen = flat
    elif select == "groups" and flat.size <= EVERY_CHUNKS and \
            flat.size * math.prod(a.chunk_shape(tuple(int(i) for i in np.unravel_index(
                int(flat[0]), refs.shape)))) * a.dtype.itemsize <= EVERY_BYTES and \
            int(refs["length"].reshape(-1)[flat].sum()) <= EVERY_STORED:
        chosen = flat  # a small array: every stored chunk
    elif select == "groups":
        # image codecs fail by content (an all-opaque WebP tile loses its alpha): each
        # group's last chunk too; the array's last chunk when another file holds it
        both = any(c["name"] in CONTENT_DEPENDENT for c in a.codecs)
        chosen = _group_ends(a, classes, stored, out, both)
        if chosen is None:  # a group's end chunk is missing: look at every stored chunk
            chosen = _by_key(a, classes, flat, None, out, both)
        paths = refs["path"].reshape(-1)
        ends = flat[[0, -1]] if both or paths[flat[0]] != paths[flat[-1]] else flat[:1]
        chosen = np.unique(np.concatenate([chosen, ends]))
        chosen = _with_proof(a, lengths, flat, chosen)
    else:
        chosen = np.unique(np.concatenate([_by_key(a, classes, flat, refs["path"], out),
                                           flat[[0, -1]]]))
    view = refs.reshape(-1)
    return [_Sample(tuple(int(i) for i in np.unravel_index(int(f), refs.shape)),
                    int(view["path"][f]), int(view["offset"][f]), int(view["length"][f]))
            for f in chosen]


def needs_proof(codecs) -> bool:
    """Whether a codec chain's decoded size is not fixed by construction (`FIXED_SIZE`)."""
    return any(c["name"] not in FIXED_SIZE for c in codecs)


def _decoded_bytes(a: ArrayPlan, lengths: list[np.ndarray], flat: np.ndarray) -> np.ndarray:
    """Per flat chunk index, the bytes its chunk decodes to."""
    idx = np.unravel_index(flat, a.refs.shape)
    size = np.full(flat.size, a.dtype.itemsize, dtype=np.float64)  # (no overflow)
    for axis, lens in enumerate(lengths):
        size *= lens[idx[axis]]
    return size


def _with_proof(a: ArrayPlan, lengths, flat: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """`chosen`, and the array's smallest stored chunk when its codecs need a proof that they
    decode to the chunk's shape and every chosen chunk is too large to be decoded."""
    if not needs_proof(a.codecs) or (_decoded_bytes(a, lengths, chosen) <= DECODE_LIMIT).any():
        return chosen
    smallest = flat[int(np.argmin(_decoded_bytes(a, lengths, flat)))]
    return np.unique(np.concatenate([chosen, [smallest]]))


def _ratio(codecs) -> float | None:
    """The most a codec chain's output can be over its input, or None (no bound known)."""
    out = 1.0
    for c in codecs:
        if c["name"] in FIXED_SIZE and c["name"] not in MAX_RATIO:
            continue
        r = MAX_RATIO.get(c["name"])
        if r is None:
            return None
        out *= r
    return out


def _axis_classes(lens: np.ndarray, n: int) -> np.ndarray:
    """Per chunk position along one axis, a class: its (length, reaches past the end)."""
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


def _group_ends(a: ArrayPlan, classes, stored: np.ndarray, out: DecodeCheck, both: bool):
    """Flat indices of each shape group's first and last chunk, from the axes alone (no
    pass over the chunks), or None when one of them holds no stored block."""
    firsts, lasts = [], []
    for cls in classes:
        k = int(cls.max()) + 1 if cls.size else 1
        first = np.full(k, -1, dtype=np.int64)
        last = np.full(k, -1, dtype=np.int64)
        first[cls[::-1]] = np.arange(cls.size - 1, -1, -1)  # the earliest write wins
        last[cls] = np.arange(cls.size)
        firsts.append(first[first >= 0])  # the classes that occur
        lasts.append(last[last >= 0])
    combos = list(itertools.islice(itertools.product(*(range(len(f)) for f in firsts)),
                                   MAX_GROUPS + 1))
    if len(combos) > MAX_GROUPS:
        _too_many(a, math.prod(len(f) for f in firsts), out)
        combos = combos[:MAX_GROUPS]
    chosen = []
    for combo in combos:
        for ends in (firsts, lasts) if both else (firsts,):
            index = tuple(int(e[c]) for e, c in zip(ends, combo))
            if not stored[index]:
                return None
            chosen.append(int(np.ravel_multi_index(index, stored.shape)))
    return np.asarray(chosen, dtype=np.int64)


def _by_key(a: ArrayPlan, classes, flat: np.ndarray, paths, out: DecodeCheck,
            both: bool = True) -> np.ndarray:
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
    return np.concatenate([flat[first], flat[last]] if both else [flat[first]])


# -- one array -----------------------------------------------------------------------

@dataclass
class _Job:
    """One sample on its way: where it is in its file, and what zarr decoded."""

    check: _ArrayCheck
    sample: _Sample
    path: str
    reader: str | None = None  # the file whose library reads the region (default: path)
    fallback: str | None = None  # ... when that library cannot: a reference set's reader
    retry: bool = False
    block: tuple[int, ...] | None = None
    region: tuple[tuple[int, int], ...] = ()  # in the file, as far as the cube chunk holds
    origin: tuple[int, ...] = ()  # a reference set's data file: where its part starts
    new_axis: int = 0  # the cube's leading axes the file has not (a hypercube's new axes)
    extents: list[int] = field(default_factory=list)  # values compared, per cube axis
    shape: tuple[int, ...] = ()  # the chunk's (the decoded array's, before its extents)
    data: bytes = b""
    doc: dict | None = None  # a one-chunk array of its own (leading rows of a large chunk)
    got: Any = None  # decoded values, or the exception zarr raised


class _ArrayCheck:
    def __init__(self, plan: Plan, a: ArrayPlan, lengths: list[np.ndarray],
                 invs: dict[str, list[tuple[FileInventory, int]]], out: DecodeCheck):
        self.plan, self.a, self.invs, self.out = plan, a, invs, out
        self.lengths = lengths
        self.origins: dict[tuple[int, int], tuple[int, ...]] = {}  # (id(variable), k)
        self.starts = [np.concatenate([[0], np.cumsum(lens)]) for lens in lengths]
        self.names = "[" + ", ".join(c["name"] for c in a.codecs) + "]"

    # -- locate the chunk in its file and read its bytes ---------------------------------

    def prepare(self, s: _Sample) -> _Job | None:
        from ..formats.registry import of_inventory
        from ..outputs.metadata import array_doc
        from ..plan import is_uncompressed

        path = self.plan.sources[s.source].path
        a, job = self.a, _Job(self, s, path)
        held = [(inv.variables.get(a.name), k, inv) for inv, k in self.invs.get(path, ())]
        held = [(v, k, inv) for v, k, inv in held if v is not None and v.blocks is not None]
        if not held:
            return self._problem(job, f"{a.name!r} has no block table in this source to "
                                 "compare the chunk with")
        v, k, inv = next((h for h in held if self._holds(h[0], h[1], s.offset)), held[0])
        if k:  # a reference set's data file: read by its own library where it has one (an
            # independent check: stale references decode to other values), else by zarr
            # over the reference set
            job.fallback = inv.path
            fmt = of_inventory(inv.format)
            if fmt is not None and fmt.reads_linked_data:  # an HDF5 external link's target:
                job.reader = inv.path  # h5py reads the variable through the linking file
        job.new_axis = max(len(a.shape) - len(v.shape), 0)
        starts = [int(self.starts[axis][i]) for axis, i in enumerate(s.index)]
        job.extents = [min(lo + int(self.lengths[axis][i]), int(a.shape[axis])) - lo
                       for axis, (lo, i) in enumerate(zip(starts, s.index))]
        hit = self._hits(v, k, s.offset)
        if not hit.size:
            return self._problem(job, "its bytes are not inside any block of this variable in "
                                 "this file")
        frefs = v.blocks.refs.reshape(-1)
        off = frefs["offset"]
        file_extents = job.extents[job.new_axis:]
        bs = v.blocks.block_shape
        # a block starting where the chunk does first (blocks that overlap, a damaged
        # offset's, hold other values): then blocks sharing bytes decode alike, prefer
        # one that fits
        hit = hit[np.argsort(off[hit] != s.offset, kind="stable")]
        for h in hit.tolist():
            block = tuple(int(b) for b in np.unravel_index(h, v.blocks.refs.shape))
            start = [b * n for b, n in zip(block, bs)]
            skip = s.offset - int(off[h])
            if skip:  # rows of an uncompressed block (the split remedy)
                start[0] += skip // (math.prod(bs[1:]) * v.dtype.itemsize)
            region = tuple((lo, lo + e) for lo, e in zip(start, file_extents))
            if job.block is None or all(hi <= n for (_, hi), n in zip(region, v.shape)):
                job.block, job.region = block, region
            if all(hi <= n for (_, hi), n in zip(region, v.shape)):
                break
        if k and job.reader is None:  # the data file read on its own library: its region
            # starts where its part of the reference set does (several files concatenated)
            key = (id(v), k)
            if key not in self.origins:  # (a scan of the block table: once per data file)
                self.origins[key] = tuple(self._origin(v, k))
            job.origin = self.origins[key]
        if any(hi > n for (_, hi), n in zip(job.region, v.shape)):
            return self._problem(job, f"the chunk covers {tuple(job.extents)} values of the "
                                 f"cube, more than its block holds in the file ({job.region})")
        shape = a.chunk_shape(s.index)
        length = s.length
        if math.prod(shape) * a.dtype.itemsize > DECODE_LIMIT:
            if not is_uncompressed(a.codecs) or not shape:
                ratio = _ratio(a.codecs)
                want = math.prod(shape) * a.dtype.itemsize
                if ratio is not None and want > ratio * s.length + 4096:
                    # (a damaged header's sizes: tile geometry, ZNAXISn, chunk lengths)
                    return self._problem(job, (
                        f"its {s.length} stored bytes cannot decode to the {want} bytes of its "
                        f"chunk {tuple(shape)}: its codecs {self.names} decode to at most "
                        f"{ratio:g} times their input"))
                self.out.notes.append(f"{a.name}: chunk {s.index} decodes to more than "
                                      f"{DECODE_LIMIT} bytes: not decode-checked")
                return None
            # an uncompressed chunk's leading bytes are its leading rows along its first
            # axis longer than 1: checked as a one-chunk array of their own
            j = next((i for i, n in enumerate(shape) if n > 1), len(shape) - 1)
            row_bytes = math.prod(shape[j + 1:]) * a.dtype.itemsize
            rows = max(1, min(DECODE_LIMIT // max(row_bytes, 1), job.extents[j]))
            shape = (*shape[:j], rows, *shape[j + 1:])
            job.extents[j] = rows
            length = min(length, rows * row_bytes)
            job.doc = dict(array_doc(a), shape=list(shape), chunk_grid={
                "name": "regular", "configuration": {"chunk_shape": list(shape)}})
            fe = job.extents[job.new_axis:]
            job.region = tuple((lo, lo + e) for (lo, _), e in zip(job.region, fe))
        job.shape = tuple(shape)
        from ..storage import read_range
        job.data = read_range(path, s.offset, length)
        self.out.bytes_read += len(job.data)
        self.out.chunks += 1
        if len(job.data) != length:
            return self._problem(job, f"the file ends after {len(job.data)} of the chunk's "
                                 f"{length} bytes")
        return job

    @staticmethod
    def _hits(v, k: int, offset: int) -> np.ndarray:
        """Flat indices of `v`'s blocks in local path `k` whose bytes hold `offset`."""
        frefs = v.blocks.refs.reshape(-1)
        off, ln = frefs["offset"], frefs["length"]
        return np.flatnonzero((ln > 0) & (frefs["path"] == k) & (off <= offset) &
                              (offset < off + ln))

    @staticmethod
    def _origin(v, k: int) -> list[int]:
        """Where local path `k`'s part of `v` starts, in `v`'s coordinates: 0 when `v` is in
        one data file; else the first block of `k` along each axis, moved back over blocks
        held by no data file (chunks kerchunk inlined at the start of `k`'s part)."""
        refs = v.blocks.refs
        stored = (refs["length"] > 0) & (refs["path"] != MATERIALIZED)
        if len(np.unique(refs["path"][stored])) <= 1:
            return [0] * refs.ndim
        mine = stored & (refs["path"] == k)
        if not mine.any():
            return [0] * refs.ndim
        others = stored & ~mine
        origin = []
        for axis, ix in enumerate(np.nonzero(mine)):
            lo = int(ix.min())
            while lo > 0 and not np.take(others, lo - 1, axis=axis).any():
                lo -= 1
            origin.append(lo * v.blocks.block_shape[axis])
        return origin

    def _holds(self, v, k: int, offset: int) -> bool:
        return bool(self._hits(v, k, offset).size)

    # -- compare with the source library ------------------------------------------------

    def compare(self, job: _Job, reader) -> None:
        if isinstance(job.got, BaseException):
            e = job.got
            self._problem(job, f"decoding it through the cube's codecs {self.names} fails: "
                          f"{type(e).__name__}: {e}{_explain(e, self.a, job)}")
            return
        region = job.region
        if job.origin and (job.reader or job.path) != job.fallback:
            region = tuple((lo - o, hi - o) for (lo, hi), o in zip(region, job.origin))
        try:
            want = np.asarray(reader.read(self.a.name, region))
        except Exception as e:
            if job.fallback and (job.reader or job.path) != job.fallback:
                job.reader, job.retry = job.fallback, True  # compared again by it
                return
            self._problem(job, f"the source library cannot read this block ({type(e).__name__}: "
                          f"{e}), so the cube's chunk cannot be checked")
            return
        if job.new_axis:
            want = want[(None,) * job.new_axis]
        why = _differs(np.asarray(job.got), want)
        if why:
            self._problem(job, f"decoded through the cube's codecs {self.names} it {why} the "
                          f"source library's read of the same region {region}")

    def _problem(self, job: _Job, why: str) -> None:
        s = job.sample
        self.out.problems.append(Problem(
            Location(job.path, self.a.name, None, job.block), "decode-mismatch",
            f"chunk {s.index} of {self.a.name!r} (bytes {s.offset}..{s.offset + s.length - 1} "
            f"of this file): {why}; a cube that reads differently from its sources is not "
            f"written (--drop {self.a.name} virtualizes the rest)"))
        return None


def _decode(jobs: list[_Job]) -> None:
    """Every job's chunk decoded through its array's codecs: by `decode_direct` when every
    codec of the chain is one it runs (`DIRECT`), else by zarr (`_decode_by_zarr`)."""
    rest = []
    for job in jobs:
        if direct(job.check.a.codecs, job.check.a.dtype):
            try:
                job.got = decode_direct(job.data, job.check.a.codecs, job.check.a.dtype,
                                        job.shape, job.extents)
            except Exception as e:  # noqa: BLE001 - as zarr's read raises it: a problem
                job.got = e
        else:
            rest.append(job)
    if rest:
        _decode_by_zarr(rest)


def direct(codecs, dtype) -> bool:
    """Whether `decode_direct` decodes this chain: every codec in `DIRECT`, one `bytes`
    codec after the array-to-array ones, and a numeric data type."""
    names = [c["name"] for c in codecs]
    if np.dtype(dtype).kind not in "biufc" or names.count("bytes") != 1 or \
            not set(names) <= DIRECT:
        return False
    at = names.index("bytes")
    return set(names[:at]) <= _ARRAY_ARRAY and not set(names[at + 1:]) & _ARRAY_ARRAY


def decode_direct(data: bytes, codecs, dtype, shape: tuple[int, ...],
                  extents: Sequence[int]) -> np.ndarray:
    """One chunk's stored bytes decoded through a `direct` codec chain as zarr-python
    decodes them (the same functions its codecs call: codec_core.py for virtualize's own,
    the standard library's zlib and gzip for numcodecs'), to the chunk's `shape`, and its
    first `extents` values per axis in the array's data type (native order): what zarr's
    read of the chunk's region returns, or the error it raises."""
    from .. import codec_core as cc

    dtype = np.dtype(dtype)
    at = [c["name"] for c in codecs].index("bytes")
    outer, inner = codecs[:at], codecs[at + 1:]
    # the data type each array-to-array codec decodes from (zarr's resolve_metadata)
    types = [dtype]
    for c in outer:
        types.append(np.dtype(_config(c, ("scale", "zero", "blank", "dtype", "astype"))["astype"]))
    stored = types[-1].newbyteorder("=")
    nbytes = math.prod(shape) * stored.itemsize
    raw = bytes(data)
    for c in reversed(inner):
        name = c["name"]
        if name == "numcodecs.zlib":
            _config(c, ("level",))
            import zlib
            raw = zlib.decompress(raw)
        elif name == "gzip":
            _config(c, ("level",))
            import gzip
            import io
            with gzip.GzipFile(fileobj=io.BytesIO(raw), mode="rb") as f:  # (numcodecs' GZip)
                raw = f.read()
        elif name == cc.GRIB:
            k = _config(c, ("field", "jPointsAreConsecutive", "alternativeRowScanning"))
            raw = cc.grib_decode(raw, math.prod(shape), k.get("field", 0),
                                 k.get("jPointsAreConsecutive", False),
                                 k.get("alternativeRowScanning", False),
                                 shape[-2:] if len(shape) >= 2 else None
                                 ).astype("<f8").tobytes()
        elif name == cc.FITSGZIP:
            k = _config(c, ("bitpix", "shuffle"))
            raw = cc.fits_gzip_decode(raw, math.prod(shape), k["bitpix"], k.get("shuffle", False))
        elif name == cc.LZF:
            _config(c, ())
            raw = cc.lzf_decode(raw, nbytes)
        elif name == cc.BITSHUFFLE:
            k = _config(c, ("elementsize", "blocksize", "compression"))
            raw = cc.bitshuffle_decode(raw, nbytes, k["elementsize"], k.get("blocksize", 0),
                                       k.get("compression", "none"))
        else:  # (direct() admits no other)
            raise ValueError(f"codec {name!r} is not decoded here")
    endian = _config(codecs[at], ("endian",)).get("endian")
    if endian not in (None, "little", "big"):
        raise ValueError(f"bytes: endian must be 'little' or 'big', not {endian!r}")
    if endian is None and stored.itemsize > 1:
        raise ValueError("bytes: the `endian` configuration needs to be specified for "
                         "multi-byte data types")  # (as zarr's)
    view = stored if stored.itemsize == 1 else \
        stored.newbyteorder("<" if endian == "little" else ">")
    values = np.frombuffer(raw, np.uint8).view(view)
    if view != stored:
        values = values.astype(stored)
    values = values.reshape(shape)
    for c in reversed(outer):  # (FITS scaling: fits_scale)
        k = _config(c, ("scale", "zero", "blank", "dtype", "astype"))
        values = cc.fits_scale(values, k.get("scale", 1.0), k.get("zero", 0.0),
                               k.get("blank"), np.dtype(k["dtype"]))
    out = np.empty(tuple(extents), dtype=dtype.newbyteorder("="))
    out[...] = values[tuple(slice(0, e) for e in extents)]  # (zarr's copy into its output)
    return out


# Codecs `decode_direct` runs itself, as zarr-python runs them: a chain of only these
# decodes without importing zarr (half a second of CPU: a one-file `check` of a GRIB, FITS
# or HDF4 file pays none). tests/test_decode_direct.py decodes each through zarr too.
DIRECT = frozenset({"bytes", "numcodecs.zlib", "gzip", "virtualize.grib", "virtualize.fitsscale",
                    "virtualize.fitsgzip", "virtualize.lzf", "virtualize.bitshuffle"})
_ARRAY_ARRAY = frozenset({"virtualize.fitsscale"})


def _config(codec: dict, known: Sequence[str]) -> dict:
    """A codec's configuration, refused as zarr's codec refuses it when it names a key the
    codec does not take."""
    config = codec.get("configuration") or {}
    if not isinstance(config, dict) or set(config) - set(known):
        raise ValueError(f"{codec['name']}: unknown configuration {config!r}")
    return config


def _decode_by_zarr(jobs: list[_Job]) -> None:
    """Every job's chunk read by zarr from an in-memory store holding the chunk, through an
    array made from its array's own `zarr.json` (parsed once for every array that decodes
    alike: same document but for attributes and dimension names): all arrays and chunks
    concurrently, in one call into zarr's event loop."""
    import asyncio

    from zarr.core.array import AsyncArray
    from zarr.core.buffer import cpu
    from zarr.core.metadata.v3 import ArrayV3Metadata
    from zarr.core.sync import sync
    from zarr.storage import MemoryStore, StorePath

    from ..outputs.base import rectilinear_enabled
    from ..outputs.materialize import chunk_key
    from ..outputs.metadata import array_doc

    # one array per checked array (its chunks side by side), one per large chunk's rows
    groups: dict[int, tuple[dict, dict, list]] = {}
    for job in jobs:
        if job.doc is None:
            key = id(job.check)
            if key not in groups:
                groups[key] = (array_doc(job.check.a), {}, [])
            start = [int(job.check.starts[axis][i]) for axis, i in enumerate(job.sample.index)]
        else:
            key = id(job)
            groups[key] = (job.doc, {}, [])
            start = [0] * len(job.extents)
        index = job.sample.index if job.doc is None else (0,) * len(job.shape)
        groups[key][1][chunk_key(index)] = job.data
        groups[key][2].append((job, tuple(slice(lo, lo + e) for lo, e in zip(start, job.extents))))
    if not groups:
        return
    parsed: dict[str, Any] = {}

    def metadata(doc: dict):
        plain = dict(doc, attributes={}, dimension_names=None)
        sig = json.dumps(plain, sort_keys=True)
        if sig not in parsed:  # from a copy: codecs' from_dict may change what they get
            parsed[sig] = ArrayV3Metadata.from_dict(json.loads(sig))
        return parsed[sig]

    async def one(doc, chunks, items):
        try:
            meta = metadata(doc)
            store = MemoryStore({k: cpu.Buffer.from_bytes(v) for k, v in chunks.items()},
                                read_only=True)
            arr = AsyncArray(meta, StorePath(store, ""))
        except Exception as e:
            return [e] * len(items)
        return await asyncio.gather(*(arr.getitem(sel) for _, sel in items),
                                    return_exceptions=True)

    async def every():
        return await asyncio.gather(*(one(*g) for g in groups.values()))

    with rectilinear_enabled():
        results = sync(every())
    for (_, _, items), got in zip(groups.values(), results):
        for (job, _), value in zip(items, got):
            job.got = value


def _compare(jobs: list[_Job]) -> None:
    """Each decoded chunk against the source library's read, one open per source."""
    from ..formats import SourceReader

    by_source: dict[str, list[_Job]] = defaultdict(list)
    for job in jobs:
        if job.fallback and (job.reader or job.path) != job.fallback:
            from ..formats import detect_format
            try:
                known = detect_format(job.path) is not None
            except OSError:
                known = False
            if not known:  # zarr chunk files and the like: only the references describe them
                job.reader = job.fallback
        by_source[job.reader or job.path].append(job)
    for path, group in by_source.items():
        try:
            reader = SourceReader(path).__enter__()
        except Exception as e:
            for job in group:
                job.check._problem(job, f"the source cannot be opened to compare "
                                   f"({type(e).__name__}: {e})")
            continue
        try:
            for job in group:
                job.check.compare(job, reader)
        finally:
            reader.__exit__(None, None, None)
    again = [job for job in jobs if job.retry]
    for job in again:
        job.retry = False
    if again:
        _compare(again)


def _explain(e: BaseException, a: ArrayPlan, job: _Job) -> str:
    """What a reshape failure means: the stored block holds another number of values than
    the cube's chunk (a last strip stored at full height, a WebP tile without its alpha)."""
    m = re.search(r"cannot reshape array of size (\d+) into shape", str(e))
    if not m:
        return ""
    n = int(m.group(1))
    want = math.prod(a.chunk_shape(job.sample.index))
    return (f" (the stored block decodes to {n} values, the chunk holds {want}: it was "
            "written at another size than its place in the grid, which zarr cannot read)")


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
