"""What the planners share: the planning context, scanner problems carried over, and the
checks that variables agree across files."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import numpy as np

from ..conventions import (
    DIGEST_LIMIT,
    INLINE_VALUES_LIMIT,
    REFERENCE_KINDS,
    bytes_codec,
    coordinate_bounds,
    grid_mappings,
    named_coordinates,
    py,
)
from ..model import (
    MATERIALIZED,
    OK,
    OVERHANG,
    REFUSED,
    SHORT,
    ArrayPlan,
    AxisFigure,
    FileInventory,
    Location,
    Problem,
    Remedy,
    Source,
    Variable,
    VariableFigure,
)

# Attributes whose drift between files changes what the numbers mean.
MEANING_ATTRS = ("scale_factor", "add_offset", "units", "calendar", "_FillValue", "missing_value",
                 "flag_values", "flag_masks", "flag_meanings")


@dataclass
class Context:
    """One planning run: the files, what was found, and the user's variable choices."""

    invs: list[FileInventory]
    inline: frozenset[str] = frozenset()
    drop: frozenset[str] = frozenset()
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # (file, variable) pairs whose scanner already reported why they cannot be used
    reported: set[tuple[str, str]] = field(default_factory=set)
    figures: dict[str, VariableFigure] = field(default_factory=dict)
    remedies: dict[str, Remedy] = field(default_factory=dict)
    # copy on write: ids of the inventories in `invs` that are the planner's own copies
    # (None: all of them are). The caller's inventories, and the variables they share
    # with each other, are never changed; a 10,000-file stack is not copied to be planned.
    owned: set[int] | None = None

    def own(self, i: int) -> FileInventory:
        """The i-th inventory as the planner's own (its `variables` may be edited)."""
        inv = self.invs[i]
        if self.owned is not None and id(inv) not in self.owned:
            inv = replace(inv, variables=dict(inv.variables))
            self.invs[i] = inv
            self.owned.add(id(inv))
        return inv

    def problem(self, file: str | None, var: str | None, kind: str, msg: str,
                axis: str | None = None, block: tuple[int, ...] | None = None,
                remedy: str | None = None) -> None:
        self.problems.append(Problem(Location(file, var, axis, block), kind, msg, remedy=remedy))

    def use_remedy(self, kind: str, blocks: int, nbytes: int, enabled: bool = True) -> None:
        """Count a remedy's cost: used (enabled) or only possible (not enabled)."""
        key = kind if enabled else f"{kind} (not enabled)"
        r = self.remedies.setdefault(key, Remedy(kind, 0, 0, enabled))
        r.blocks += blocks
        r.bytes += nbytes


# decoded bytes per file inlined automatically: the scanners record the values of
# variables up to this size that cannot be referenced (formats/_planning.py)
DEFAULT_INLINE_THRESHOLD = INLINE_VALUES_LIMIT


def _inlinable(inv: FileInventory, p: Problem) -> bool:
    """A fatal scanner problem that inlining resolves: the variable is in the inventory
    without blocks (or with chunks held for copying) and h5py / the format's library
    decodes it (a stored type zarr has no data type for is read as the library reads it)."""
    var = p.loc.variable
    if not p.fatal or var is None or var not in inv.variables:
        return False
    return p.kind in REFERENCE_KINDS or p.kind == "unsupported-type"


def auto_inline(ctx: Context, threshold: int) -> None:
    """Variables that cannot be referenced, but whose decoded values are small, are
    inlined (read by the source library, stored in the cube) without being asked: at most
    `threshold` decoded bytes per file, smallest first; each gets a note. Larger ones keep
    their refusal, which names the ways through (--inline, --drop)."""
    wanted: dict[str, set[str]] = {}  # variable -> problem kinds
    blocked: set[str] = set()  # variables with a problem inlining does not resolve
    for inv in ctx.invs:
        for p in inv.problems:
            var = p.loc.variable
            if var is None or not p.fatal or var in ctx.drop or var in ctx.inline:
                continue
            if _inlinable(inv, p):
                wanted.setdefault(var, set()).add(p.kind)
            else:
                blocked.add(var)
    if threshold <= 0 or not wanted:
        return
    used = [0] * len(ctx.invs)
    chosen = []

    def size(v: Variable | None) -> int:
        return math.prod(v.shape) * v.dtype.itemsize if v is not None else 0

    for var in sorted(set(wanted) - blocked,
                      key=lambda n: max(size(inv.variables.get(n)) for inv in ctx.invs)):
        sizes = [size(inv.variables.get(var)) for inv in ctx.invs]
        if all(u + n <= threshold for u, n in zip(used, sizes)):
            used = [u + n for u, n in zip(used, sizes)]
            chosen.append(var)
            ctx.notes.append(f"{var}: cannot be referenced ({', '.join(sorted(wanted[var]))}) "
                             f"but is small ({max(sizes)} bytes per file at most): inlined "
                             "(decoded by the source library, stored in the cube; "
                             "--inline-threshold 0 refuses it instead)")
    ctx.inline = ctx.inline | frozenset(chosen)


def _way_through(inv: FileInventory, p: Problem) -> Problem:
    """A refusal that inlining would resolve, with the ways through named."""
    if p.remedy or not _inlinable(inv, p):
        return p
    v = inv.variables[p.loc.variable]
    nbytes = math.prod(v.shape) * v.dtype.itemsize
    return replace(p, remedy=f"--inline {v.name} (decoded by the source library and stored in the "
                             f"cube: {nbytes} bytes from this file) or --drop {v.name}")


def _native(dtype: np.dtype) -> np.dtype:
    return dtype if dtype.kind == "T" else dtype.newbyteorder("=")


def carry_scan_problems(ctx: Context, materialize: bool = False) -> None:
    """The scanners' problems, less those the user's choices resolve: dropped variables,
    inlined ones, and with `materialize` chunks the scanner held for copying (HDF5 chunks
    with a different filter mask: their block tables mark them MATERIALIZED)."""
    for inv in ctx.invs:
        held: dict[str, int] = {}
        for p in inv.problems:
            var = p.loc.variable
            if var is not None and var in ctx.drop:
                continue
            if var is not None and var in ctx.inline and _inlinable(inv, p):
                continue
            if p.kind == "filter-mask" and p.remedy and var in inv.variables:
                v = inv.variables[var]
                if v.blocks is not None and var not in held:
                    held[var] = int((v.blocks.refs["path"] == MATERIALIZED).sum())
                    nbytes = held[var] * math.prod(v.blocks.block_shape) * v.dtype.itemsize
                    ctx.use_remedy("materialize", held[var], nbytes, enabled=materialize)
                if materialize:
                    continue
            ctx.problems.append(_way_through(inv, p))
            if var is not None and p.fatal:
                ctx.reported.add((inv.path, var))


class SourceMaps:
    """Per inventory, the map from its refs' `path` (0 = itself, k = data_files[k - 1]) to
    the plan's source index: `maps[i]` (a read-only view). Held as one array for the whole
    stack, not one small array per file."""

    def __init__(self, flat: np.ndarray, starts: np.ndarray) -> None:
        self.flat, self.starts = flat, starts
        self.flat.flags.writeable = False

    def __len__(self) -> int:
        return len(self.starts) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i %= len(self)
        return self.flat[self.starts[i]:self.starts[i + 1]]


def source_table(invs: list[FileInventory]) -> tuple[list[Source], SourceMaps]:
    """The plan's sources: every inventory's own file, then the data files its references
    point into (a kerchunk reference set's), each path once. Returns them and, per
    inventory, the map from its refs' `path` (0 = itself, k = data_files[k - 1]) to the
    plan's source index."""
    sources: list[Source] = []
    index: dict[str, int] = {}
    flat: list[int] = []
    starts = np.zeros(len(invs) + 1, dtype=np.int64)
    for n, inv in enumerate(invs):
        own = [Source(inv.path, inv.size, inv.mtime_ns, etag=inv.etag,
                      fingerprint=inv.fingerprint)] \
            if not inv.data_files else inv.sources()
        for k, s in enumerate(own):
            i = index.get(s.path)
            if i is None:
                i = index[s.path] = len(sources)
                sources.append(s if not inv.data_files else
                               Source(s.path, s.size, s.mtime_ns, s.referenced_by, s.etag,
                                      s.fingerprint))
            elif k == 0:
                sources[i].referenced_by = None  # given as an input, not only referenced
            flat.append(i)
        starts[n + 1] = len(flat)
    return sources, SourceMaps(np.asarray(flat, dtype=np.uint32), starts)


def settle_unknown_fills(ctx: Context) -> None:
    """A reference set may declare no fill value (zarr v2 `null`; the scanner keeps it only
    when every chunk is present, so it is never read): it takes the fill value the other
    files of the stack give the variable, so that the stack agrees."""
    known: dict[str, Variable] = {}
    for inv in ctx.invs:
        for name, v in inv.variables.items():
            if v.fill_value is not None and name not in known:
                known[name] = v
    for i, inv in enumerate(ctx.invs):
        if not inv.reference_set:
            continue
        for name, v in list(inv.variables.items()):
            k = known.get(name)
            if v.fill_value is None and k is not None and \
                    v.dtype.newbyteorder("=") == k.dtype.newbyteorder("="):
                ctx.own(i).variables[name] = replace(v, fill_value=k.fill_value)


def variable_names(invs: Iterable[FileInventory]) -> list[str]:
    seen: dict[str, None] = {}
    for inv in invs:
        for name in inv.variables:
            seen.setdefault(name, None)
    return list(seen)


def groups_for(first: FileInventory, arrays: dict[str, ArrayPlan]) -> dict[str, dict]:
    groups = {g: dict(a) for g, a in first.groups.items()}
    for name in arrays:
        parts = name.split("/")[:-1]
        for i in range(len(parts) + 1):
            groups.setdefault("/".join(parts[:i]), {})
    return groups


def consistent(ctx: Context, name: str, vs: list[Variable], free: frozenset[str] = frozenset(),
               axis_role: str = "the concatenated one") -> bool:
    """Every file's `name` agrees with the first file's, except in length and blocks along
    the `free` dimensions; each disagreement is a located problem."""
    first, path0 = vs[0], ctx.invs[0].path
    before = len(ctx.problems)
    for inv, v in zip(ctx.invs[1:], vs[1:]):
        f = inv.path
        if v.dims != first.dims:
            ctx.problem(f, name, "dims-differ",
                        f"dimensions {v.dims} differ from {first.dims} in {path0}")
            continue
        if _native(v.dtype) != _native(first.dtype):
            ctx.problem(f, name, "dtype-differs", f"data type {v.dtype} differs from "
                        f"{first.dtype} in {path0}")
        for axis, (d, a, b) in enumerate(zip(v.dims, v.shape, first.shape)):
            if d in free:
                continue
            if a != b:
                ctx.problem(f, name, "shape-differs", f"length {a} along {d!r} differs from "
                            f"{b} in {path0}", axis=d)
            elif v.blocks is not None and first.blocks is not None and \
                    v.blocks.block_shape[axis] != first.blocks.block_shape[axis] and \
                    name not in ctx.inline and not first.is_coordinate:
                ctx.problem(f, name, "blocks-differ",
                            f"block length {v.blocks.block_shape[axis]} along {d!r} differs "
                            f"from {first.blocks.block_shape[axis]} in {path0}; chunks across "
                            f"files must line up on every axis but {axis_role} (re-chunk this "
                            "file like it, e.g. nccopy -c / h5repack -l, or leave the variable "
                            "out)", axis=d)
        # (a variable held by value, e.g. a reference set's inline chunks, has no codecs
        # that matter: it is stored in the cube)
        if name not in ctx.inline and not first.is_coordinate and \
                v.blocks is not None and first.blocks is not None and \
                codec_key(v.codecs) != codec_key(first.codecs):
            ctx.problem(f, name, "codecs-differ",
                        f"codecs {codec_difference(v.codecs, first.codecs)} in {path0}; one "
                        "array has one codec pipeline")
        if not same_value(v.fill_value, first.fill_value):
            ctx.problem(f, name, "fill-value-differs",
                        f"fill value {py(v.fill_value)!r} differs from {py(first.fill_value)!r} "
                        f"in {path0}")
        for key in MEANING_ATTRS:
            a, b = v.attrs.get(key), first.attrs.get(key)
            if not same_meaning(key, a, b):
                ctx.problem(f, name, "attribute-drift",
                            f"attribute {key!r} is {py(a)!r} here but {py(b)!r} in {path0}: the values "
                            "would mean different things in one array")
    return len(ctx.problems) == before


def compare_shared(ctx: Context, name: str, vs: list[Variable], why: str,
                   values: list[np.ndarray | None] | None = None, attrs: bool = False,
                   override: bool = False) -> bool:
    """The one place that decides whether a variable that must be the same in every file
    (`conventions.must_agree`) is: every planner calls it for each such variable
    (concat and append: off the concatenation axis, or not stacked along a new one, the
    cube's recorded last file first; mosaic: what it takes from the first tile), whatever
    the scan recorded of it. Each file is compared with the first by the values both hold
    (`values` given, else those the scan recorded: the first differing index is named),
    else by their per-block digests (the first differing block); a file with neither is
    refused (`not-comparable`): nothing is taken from the first file unseen. `attrs`: every
    attribute must agree too (a grid mapping's are what it means). Files whose scanner
    already refused the variable are left out. Each difference is a located problem
    (`differs-between-files`); True when every file agrees. `why`: why it must agree.
    `override` (`--compat override`, for a variable no coordinate needs: `coordinate_like`):
    a difference, or files that cannot be compared, is a note instead, and the first
    file's is taken (True), as xarray's `compat="override"` takes the first dataset's."""
    picked = [i for i, inv in enumerate(ctx.invs) if (inv.path, name) not in ctx.reported]
    if len(picked) < 2:
        return True
    held = values if values is not None else [v.values for v in vs]
    i0 = picked[0]
    path0, v0, a0 = ctx.invs[i0].path, vs[i0], held[i0]
    before = len(ctx.problems)
    for i in picked[1:]:
        inv, v, a = ctx.invs[i], vs[i], held[i]
        here = f"{name!r} {why}, so it must be the same in every file"
        if attrs:
            key = next((k for k in sorted(set(v.attrs) | set(v0.attrs))
                        if not same_meaning(k, v.attrs.get(k), v0.attrs.get(k))), None)
            if key is not None:
                ctx.problem(inv.path, name, "differs-between-files",
                            f"{here}, but its attribute {key!r} is {py(v.attrs.get(key))!r} "
                            f"here and {py(v0.attrs.get(key))!r} in {path0}")
                continue
        if a is v.values and a0 is v0.values and v.digest is not None and \
                v.digest == v0.digest and _native(v.dtype) == _native(v0.dtype) and \
                codec_key(v.codecs) == codec_key(v0.codecs):
            continue  # the recorded values of the same stored bytes, decoded alike
        if a is not None and a0 is not None:
            index = first_difference(np.asarray(a), np.asarray(a0))
            if index is None:
                continue
            block = None
            if index and v.blocks is not None and len(v.blocks.block_shape) == len(index):
                block = tuple(j // max(b, 1) for j, b in zip(index, v.blocks.block_shape))
            if np.shape(a) != np.shape(a0):
                at = f"its values have shape {np.shape(a)} here and {np.shape(a0)} in {path0}"
            elif index == ():
                at = f"its value is {py(np.asarray(a)[()])!r} here and " \
                     f"{py(np.asarray(a0)[()])!r} in {path0}"
            else:
                at = (f"its values differ from {path0}, first at index {index} "
                      f"({py(np.asarray(a)[index])!r} here, {py(np.asarray(a0)[index])!r} there)")
            ctx.problem(inv.path, name, "differs-between-files", f"{here}, but {at}", block=block)
        elif v.digest is not None and v0.digest is not None and \
                v.block_digests is not None and v0.block_digests is not None and \
                v.digest.startswith("values:") == v0.digest.startswith("values:") and \
                v.block_digests.shape == v0.block_digests.shape:
            if v.digest == v0.digest:
                continue
            diff = np.argwhere(v.block_digests != v0.block_digests)
            block = tuple(int(j) for j in diff[0]) if diff.size else None
            of = "decoded values" if v.digest.startswith("values:") else "stored bytes"
            extent = ""
            if block and v.blocks is not None and v.blocks.refs.shape == v.block_digests.shape:
                extent = " (" + ", ".join(
                    f"{d} {j * b}..{min((j + 1) * b, n) - 1}"
                    for d, j, b, n in zip(v.dims, block, v.blocks.block_shape, v.shape)) + ")"
            elif block:  # digested as stored, then cut (plan/cut.py): not a chunk of the cube
                extent, block = " as stored in the file", None
            at = f", first in block {tuple(int(j) for j in diff[0])}{extent}" if diff.size else ""
            ctx.problem(inv.path, name, "differs-between-files",
                        f"{here}, but its {of} differ from {path0}{at}"
                        + (f" ({int(len(diff))} blocks differ)" if len(diff) > 1 else ""),
                        block=block)
        else:
            # located at the file lacking a record (the first: every file would say so)
            j = i0 if v0.digest is None and a0 is None else i
            lacking, w = ctx.invs[j], vs[j]
            if w.digest is not None or held[j] is not None:
                reason = ("the files' records of it are of different kinds: values in one, "
                          "digests in the other, or digests of stored bytes and of decoded "
                          "values, or of other block grids")
            elif w.blocks is not None and bool((w.blocks.refs["path"] == MATERIALIZED).any()):
                reason = (f"it has chunks held by value and more than {DIGEST_LIMIT} decoded "
                          "bytes to digest")
            else:
                reason = ("the file was scanned for another concatenation dimension: scan it "
                          "with the one planned, as check and create do")
            other = inv.path if j == i0 else path0
            ctx.problem(lacking.path, name, "not-comparable",
                        f"{here}, but the scan recorded neither its values nor digests both "
                        f"files share ({reason}): it cannot be checked against {other}",
                        remedy=f"--drop {name}")
            if j == i0:
                break
    if override and len(ctx.problems) > before:
        overridden(ctx.notes, name, ctx.problems[before], path0)
        del ctx.problems[before:]
    return len(ctx.problems) == before


def overridden(notes: list[str], name: str, p: Problem, first: str) -> None:
    """The note `--compat override` leaves for a variable taken from the first file (or
    cell) although it differs: what differs, where, and whose is taken."""
    why = p.message.split(", but ", 1)[-1]
    notes.append(f"{name!r} differs between the files ({p.loc.file}: {why}): the first's, "
                 f"{first}, is taken (--compat override)")


def scalar_clashes(plan) -> list[Problem]:
    """A scalar named like a dimension of another array of its group (a char label `type`
    beside a `type` axis): xarray cannot open such a cube ("dimension 'type' already
    exists as a scalar variable"), nor merge such files. Refused before anything is
    written, the remedy dropping the scalar."""
    out = []
    for group in plan.groups:
        def base(name: str) -> str:
            return name[len(group) + 1:] if group and name.startswith(group + "/") else name
        mine = {n: a for n, a in plan.arrays.items() if n.rpartition("/")[0] == group}
        users: dict[str, str] = {}
        for n, a in mine.items():
            for d in a.dims:
                users.setdefault(d, n)
        for n, a in mine.items():
            if not a.dims and base(n) in users:
                out.append(Problem(Location(None, n), "dimension-clash",
                                   f"{n!r} is a scalar, and {users[base(n)]!r} has a dimension "
                                   f"{base(n)!r}: xarray cannot open a dataset holding both "
                                   f"(\"dimension {base(n)!r} already exists as a scalar "
                                   "variable\"), nor merge such files", remedy=f"--drop {n}"))
    return out


def coordinate_like(inv: FileInventory) -> set[str]:
    """What `--compat override` never overrides, as xarray's `compat` does not override
    indexes: dimension coordinates, the variables a `coordinates` attribute names, bounds
    of coordinates and grid mappings (by name and basename). A variable that must agree
    and is none of these is data (ANGLE, TAREA, a constant)."""
    out = {n for n, v in inv.variables.items() if v.is_coordinate} | \
        named_coordinates(inv) | coordinate_bounds(inv) | grid_mappings(inv)
    out |= {n for n, v in inv.variables.items() if v.basename in out or
            "grid_mapping_name" in v.attrs}
    return out


def first_difference(a: np.ndarray, b: np.ndarray) -> tuple[int, ...] | None:
    """The first index (C order) where two arrays differ (of one numeric dtype bit for
    bit, else by value, NaN equal to NaN; a struct's members compared one by one), () for
    differing scalars or shapes; None when equal."""
    if a.shape != b.shape:
        return () if a.ndim == 0 or b.ndim == 0 else tuple(0 for _ in a.shape)
    if a.dtype.names is not None and b.dtype.names is not None:
        if a.dtype.names != b.dtype.names:
            return tuple(0 for _ in a.shape)
        eq = np.ones(a.shape, dtype=bool)
        for k in a.dtype.names:
            eq &= _equal(a[k], b[k])
    else:
        eq = _equal(a, b)
    if eq.all():
        return None
    if a.ndim == 0:
        return ()
    return tuple(int(j) for j in np.unravel_index(int(np.argmin(eq.reshape(-1))), a.shape))


def _equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise equality (a sub-array member: all of its items): of the same numeric
    dtype, bit for bit (the cube serves the first file's bits: 0.0 is not -0.0, a NaN
    equals only a NaN of the same bits), as the digests compare stored bytes; else by
    value, NaN equal to NaN."""
    n = a.dtype.itemsize
    # (long doubles, whose padding bytes are noise: by value)
    if a.dtype == b.dtype and a.dtype.kind in "biufcmM" and a.dtype.subdtype is None \
            and n <= (16 if a.dtype.kind == "c" else 8):
        x = np.ascontiguousarray(a.reshape(-1)).view(np.uint8).reshape(a.shape + (n,))
        y = np.ascontiguousarray(b.reshape(-1)).view(np.uint8).reshape(b.shape + (n,))
        return (x == y).all(axis=-1)
    try:
        eq = np.asarray(a == b)
    except (TypeError, ValueError):
        eq = np.asarray(np.frompyfunc(lambda x, y: bool(np.array_equal(x, y)), 2, 1)(a, b),
                        dtype=bool)
    if a.dtype.kind in "fc" and b.dtype.kind in "fc":
        with np.errstate(invalid="ignore"):
            eq = eq | (np.isnan(a) & np.isnan(b))
    if eq.shape != a.shape:  # a member with its own shape: all of it
        eq = eq.reshape(a.shape + (-1,)).all(axis=-1)
    return eq


def figure(name: str, dims, shape, chunk_lengths, refused: dict[int, set[int]] | None = None,
           refused_variable: bool = False,
           padding: dict[int, dict[int, int]] | None = None) -> VariableFigure:
    """The bands of one variable: per axis every chunk's length, marked short (shorter than
    the axis' usual chunk), overhang (reaching past the end) or refused. `padding`: per
    axis, the steps of padding of chunks stored padded inside the axis (a padded block
    that is not the last); what the chunks reach past the end is the last one's padding."""
    axes = []
    for a, (dim, n, lens) in enumerate(zip(dims, shape, chunk_lengths)):
        lens = np.asarray(lens, dtype=np.int64)
        marks = np.empty(len(lens), dtype=object)
        marks.fill(OK)  # (one string: np.full would make one per chunk)
        pads = None
        inside = (padding or {}).get(a)
        if inside:
            pads = np.zeros(len(lens), np.int64)
            pads[list(inside)] = list(inside.values())
        if len(lens):
            values, counts = np.unique(lens, return_counts=True)
            marks[lens < values[counts.argmax()]] = SHORT
            over = int(lens.sum()) - (int(pads.sum()) if pads is not None else 0) - int(n)
            if over > 0:
                marks[-1] = OVERHANG
                pads = np.zeros(len(lens), np.int64) if pads is None else pads
                pads[-1] += over
        for i in (refused or {}).get(a, ()):
            marks[i] = REFUSED
        axes.append(AxisFigure(dim, int(n), lens, marks, pads))
    return VariableFigure(name, axes, refused_variable or bool(refused and any(refused.values())))


def figure_of(a: ArrayPlan) -> VariableFigure:
    return figure(a.name, a.dims, a.shape, a.chunk_lengths)


# Codecs that do not give back exactly what they were given: a block decoded and encoded
# again with them would change, so such blocks cannot be materialized.
LOSSY_CODECS = frozenset({"imagecodecs_jpeg", "imagecodecs_webp", "imagecodecs_lerc"})


def is_uncompressed(codecs: list[dict]) -> bool:
    """Only the `bytes` codec: a block's rows are plain byte ranges (it can be split)."""
    return len(codecs) == 1 and codecs[0]["name"] == "bytes"


def can_materialize(codecs: list[dict]) -> bool:
    return not any(c["name"] in LOSSY_CODECS for c in codecs)


def inline_plan(name: str, values: np.ndarray, dims, attrs: dict, fill_value=None) -> ArrayPlan:
    """An array stored in the cube itself: one chunk, little-endian, C order."""
    if values.dtype.kind == "T":  # text: zarr's `string` data type, vlen-utf8 codec
        data = np.asarray(values).copy(order="C")
        return ArrayPlan(name=name, dtype=data.dtype, shape=tuple(data.shape), dims=tuple(dims),
                         chunk_lengths=tuple((max(n, 1),) for n in data.shape),
                         codecs=[{"name": "vlen-utf8", "configuration": {}}],
                         fill_value=None, attrs=dict(attrs), refs=None, inline=data)
    dtype = values.dtype.newbyteorder("<") if values.dtype.itemsize > 1 else values.dtype
    if dtype.names is not None:  # a struct: packed, as zarr stores it (members in order)
        from ..conventions import struct_dtype
        dtype = struct_dtype(values.dtype)[0]
    data = np.asarray(values, dtype=dtype).copy(order="C")  # (ascontiguousarray makes 0-d 1-d)
    return ArrayPlan(name=name, dtype=dtype, shape=tuple(data.shape), dims=tuple(dims),
                     chunk_lengths=tuple((max(n, 1),) for n in data.shape),
                     codecs=[bytes_codec(dtype)], fill_value=fill_value, attrs=dict(attrs),
                     refs=None, inline=data)


def codec_key(codecs: list[dict]) -> list:
    """Codecs compared by what decodes them: a zlib/zstd level does not change decoding."""
    out = []
    for c in codecs:
        conf = {k: v for k, v in (c.get("configuration") or {}).items() if k != "level"}
        out.append((c["name"], sorted(conf.items())))
    return out


def codec_names(codecs: list[dict]) -> str:
    return "[" + ", ".join(c["name"] for c in codecs) + "]"


def codec_difference(codecs: list[dict], first: list[dict]) -> str:
    """How two pipelines differ: their names, or (the same names) the first codec whose
    configuration differs, e.g. a shuffle's elementsize after a data type change."""
    if [c["name"] for c in codecs] != [c["name"] for c in first]:
        return f"{codec_names(codecs)} differ from {codec_names(first)}"
    for a, b in zip(codecs, first):
        if codec_key([a]) != codec_key([b]):
            conf_a, conf_b = a.get("configuration") or {}, b.get("configuration") or {}
            keys = [k for k in sorted(set(conf_a) | set(conf_b))
                    if k != "level" and conf_a.get(k) != conf_b.get(k)]
            here = ", ".join(f"{k}={conf_a.get(k)!r}" for k in keys)
            there = ", ".join(f"{k}={conf_b.get(k)!r}" for k in keys)
            return f"{codec_names(codecs)}: {a['name']} has {here}, not {there} as"
    return f"{codec_names(codecs)} differ from {codec_names(first)}"


# calendar names that mean one calendar (CF: "gregorian" is a deprecated alias of
# "standard"; names are case-insensitive); `calendar_of` gives each its canonical name
_CALENDAR_ALIASES = {"gregorian": "standard", "365_day": "noleap", "366_day": "all_leap"}


def calendar_of(attrs: dict) -> str:
    """The canonical name of the calendar `attrs` declare ("standard" when none)."""
    cal = attrs.get("calendar", "standard")
    if not isinstance(cal, str):
        return str(cal)
    cal = cal.strip().lower()
    return _CALENDAR_ALIASES.get(cal, cal)


def same_meaning(key: str, a, b) -> bool:
    """Whether attribute `key`'s values `a` and `b` mean the same (calendar aliases alike)."""
    if key == "calendar" and all(x is None or isinstance(x, str) for x in (a, b)):
        # (none declared: the standard calendar, CF's default)
        return calendar_of({} if a is None else {"calendar": a}) == \
            calendar_of({} if b is None else {"calendar": b})
    return same_value(a, b)


def same_value(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    try:
        x, y = np.asarray(a), np.asarray(b)
        if x.shape != y.shape:
            return False
        if x.dtype.kind in "fc" and y.dtype.kind in "fc":
            return bool(np.array_equal(x, y, equal_nan=True))
        return bool(np.array_equal(x, y))
    except Exception:
        return a == b


def declares_fill(fill_value, dtype, attrs: dict) -> bool:
    """Whether chunks left absent (`--join outer`) read as a value readers take as missing:
    the variable declares `_FillValue`, or a `missing_value` that is the fill value they
    read as. (A netCDF variable declaring neither, or only another `missing_value`, reads
    as the library's default fill there, which xarray takes as data.)"""
    if fill_value is None:
        return False
    if "_FillValue" in attrs:
        return True
    if "missing_value" not in attrs:
        return False
    try:
        fill = np.asarray(fill_value, dtype=dtype)
        values = np.asarray(attrs["missing_value"]).reshape(-1).astype(dtype)
    except (TypeError, ValueError):
        return False
    same = values == fill
    if fill.dtype.kind in "fc":
        same |= np.isnan(values) & np.isnan(fill)
    return bool(same.any())
