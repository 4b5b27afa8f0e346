"""The values that flow scan → plan → emit.

Everything here is plain data: no I/O, no imports of the rest of the package. A scanner
returns a `FileInventory` (one file's variables with their `BlockTable`s), the planner turns
many inventories into a `Plan` (one `ArrayPlan` per output array) plus `Problem`s, and the
emitters write a plan. Problems are values, collected and reported together.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

# One reference in a manifest: which source (index into a path table), where, how long.
# length == 0 means "no stored block": the chunk reads as the fill value.
REF_DTYPE = np.dtype([("path", "<u4"), ("offset", "<u8"), ("length", "<u8")], align=False)
# A manifest record whose path is this holds no reference: the chunk was decoded from its
# source and stored natively in the cube (the "materialize" remedy), at its chunk key.
MATERIALIZED = 0xFFFFFFFF


def empty_refs(grid_shape: tuple[int, ...]) -> np.ndarray:
    """A dense manifest with every chunk missing (reads as fill)."""
    return np.zeros(grid_shape, dtype=REF_DTYPE)


@dataclass(frozen=True)
class Location:
    """Where a problem is: as much of file / variable / axis / block as is known."""

    file: str | None = None
    variable: str | None = None
    axis: str | None = None
    block: tuple[int, ...] | None = None

    def __post_init__(self) -> None:  # numpy integers print as np.int64(3): plain ints
        if self.block is not None:
            object.__setattr__(self, "block", tuple(int(b) for b in self.block))

    def to_dict(self) -> dict[str, Any]:
        d = {"file": self.file, "variable": self.variable, "axis": self.axis}
        d["block"] = list(self.block) if self.block is not None else None
        return d

    def __str__(self) -> str:
        parts = []
        if self.file:
            parts.append(self.file)
        if self.variable:
            parts.append(self.variable)
        if self.axis:
            parts.append(f"axis {self.axis}")
        if self.block is not None:
            parts.append(f"block {tuple(self.block)}")
        return " / ".join(parts) or "(stack)"


@dataclass(frozen=True)
class Problem:
    """Something that keeps (part of) a stack from being referenced exactly.

    `kind` is a stable machine-readable word (documented in docs/problems.md);
    `message` says what is wrong in words; `fatal` problems stop the cube from being
    written, non-fatal ones (e.g. an unsupported variable that is skipped) are reported
    and the rest is virtualized.
    """

    loc: Location
    kind: str
    message: str
    fatal: bool = True
    remedy: str | None = None  # what would resolve it, and at what cost, when something can

    def to_dict(self) -> dict[str, Any]:
        return {"loc": self.loc.to_dict(), "kind": self.kind, "message": self.message,
                "fatal": self.fatal, "remedy": self.remedy}

    def __str__(self) -> str:
        return f"{self.loc}: {self.kind}: {self.message}"


class VirtualizeError(Exception):
    """Raised by API calls that cannot return problems; carries all of them."""

    def __init__(self, problems: list[Problem] | tuple[Problem, ...], headline: str | None = None,
                 report: Report | None = None):
        self.problems = tuple(problems)
        self.report = report  # the whole report, when the error comes from a stack check
        lines = [headline or f"{len(self.problems)} problem(s) prevent this"]
        lines += [f"  - {p}" for p in self.problems[:50]]
        if len(self.problems) > 50:
            lines.append(f"  ... and {len(self.problems) - 50} more")
        super().__init__("\n".join(lines))


class UsageError(VirtualizeError, ValueError):
    """An API call was given arguments it cannot use (an unknown output format, a missing
    optional package, a name no file has). A `ValueError` too, for callers that caught that."""

    def __init__(self, message: str, problems: list[Problem] | tuple[Problem, ...] = ()):
        super().__init__(list(problems) or [Problem(Location(), "usage", message)], message)
        self.args = (message,)

    def __str__(self) -> str:
        return self.args[0]


class SourceTouchedWarning(UserWarning):
    """A cube's source was touched (its modification time changed, its blocks did not):
    the cube is read, and `virtualize verify --refresh` records the new time."""


class OutputExistsError(VirtualizeError, FileExistsError):
    """The output exists and `overwrite` was not given (a `FileExistsError` too, for
    callers that caught that). Its message is one line: the located problem."""

    def __init__(self, problem: Problem):
        super().__init__([problem], str(problem))
        self.args = (str(problem),)

    def __str__(self) -> str:
        return self.args[0]


class UnsafeOutputError(VirtualizeError):
    """Writing the output would replace or sit in something virtualize did not write (a
    source, a directory holding sources, a foreign file): refused even with `overwrite`.
    Its message is one line: the located problem."""

    def __init__(self, problem: Problem):
        super().__init__([problem], str(problem))
        self.args = (str(problem),)

    def __str__(self) -> str:
        return self.args[0]


class _ByFields:
    """Pickled as its class and field values (no per-object dict of names): what a scan
    worker sends back is compact, and rebuilt objects are as small as constructed ones.
    Its subclasses have slots (no per-object dict): the caller holds one inventory of each
    of 10,000 files."""

    __slots__ = ()

    def __reduce__(self):
        return (type(self), tuple(getattr(self, f.name) for f in fields(self)))


@dataclass(slots=True)
class BlockTable(_ByFields):
    """A variable's stored blocks in one file, as a dense numpy manifest.

    `block_shape` is the file's (regular) block shape. Along each axis the file holds
    ceil(n / b) blocks; the last one is short when b does not divide n. `padded` says how
    a short last block is stored: True (HDF5 chunks, TIFF tiles) when it is stored at the
    full block size with padding, False (TIFF strips, netCDF classic) when it is stored at
    its true length. `refs` has one entry per block (C order over the block grid);
    `path` 0 is the inventory's own file, k > 0 its `data_files[k - 1]` (a reference set
    points into other files); `length == 0` marks a block never written, unless `path` is
    MATERIALIZED: a block held by the inventory's file itself (a reference set's inline
    chunk), with no byte range; the planner stores its values in the cube.
    """

    block_shape: tuple[int, ...]
    padded: bool
    refs: np.ndarray  # REF_DTYPE, shape == grid shape

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return tuple(self.refs.shape)


@dataclass(slots=True)
class Variable(_ByFields):
    """One array of one file, as a scanner found it."""

    name: str  # full path inside the file, groups separated by '/', no leading '/'
    dtype: np.dtype  # with its stored byte order
    shape: tuple[int, ...]
    dims: tuple[str, ...]
    attrs: dict[str, Any]
    fill_value: Any  # what a never-written block reads as (numpy scalar or None)
    codecs: list[dict[str, Any]]  # zarr v3 codecs after decoding order: bytes codec first
    blocks: BlockTable
    values: np.ndarray | None = None  # small coordinate variables: their data, for checks/inlining
    is_coordinate: bool = False  # 1-D and named after its dimension
    # what the planner compares across files, computed when the file is scanned (planning
    # reads no source bytes; docs/planning.md): per block of `blocks` (its grid's shape), a
    # 16-byte BLAKE2b of its stored bytes (of its decoded values when some chunks are held
    # by value), and `digest` the SHA-256 of them all ("values:" + it in that case); None
    # when not recorded
    digest: str | None = None
    block_digests: np.ndarray | None = None  # dtype V16, shape == blocks.refs.shape

    @property
    def group(self) -> str:
        return self.name.rpartition("/")[0]

    @property
    def basename(self) -> str:
        return self.name.rpartition("/")[2]


@dataclass(slots=True)
class Dimension(_ByFields):
    name: str  # full path like variables ('grp/time' for a dimension defined in grp)
    size: int
    unlimited: bool = False


@dataclass(slots=True)
class FileInventory(_ByFields):
    """What a scanner found in one file, without reading its data."""

    path: str
    format: str  # 'hdf5', 'netcdf4', 'netcdf3-cdf1', ...
    size: int
    mtime_ns: int
    groups: dict[str, dict[str, Any]]  # group path ('' = root) -> attributes
    dimensions: dict[str, Dimension]
    variables: dict[str, Variable]
    problems: list[Problem] = field(default_factory=list)
    bytes_read: int = 0
    requests: int = 0  # read requests the scan made (ranged GETs for a remote source)
    etag: str | None = None  # a remote source's ETag (or Last-Modified): its staleness key
    # files other than `path` whose bytes the block tables reference (refs path k -> k - 1):
    # the data files a kerchunk reference set names; empty for a scanned file
    data_files: list[Source] = field(default_factory=list)
    # a digest of this file's block tables and recorded digests (formats/_fingerprint.py): a
    # source whose modification time alone changed is unchanged when a re-scan gives it
    fingerprint: str | None = None
    # a reference set's inventory (its format's `Format.reference_set`): its blocks point into
    # its data files, and what it holds inline is in no file
    reference_set: bool = False

    def sources(self) -> list[Source]:
        """What refs' `path` indexes: the file itself, then its data files."""
        return [Source(self.path, self.size, self.mtime_ns, etag=self.etag,
                       fingerprint=self.fingerprint), *self.data_files]


@dataclass(slots=True)
class Source(_ByFields):
    """A file the cube references, with what it looked like when referenced.
    `referenced_by`: the reference set through which a data file was found (it was not
    given as an input itself)."""

    path: str
    size: int
    mtime_ns: int
    referenced_by: str | None = None
    etag: str | None = None  # a remote source's ETag (or Last-Modified)
    fingerprint: str | None = None  # its block tables' digest (FileInventory.fingerprint)
    copied: bool = False  # the cube holds chunks copied from it (--materialize)

    def to_dict(self) -> dict[str, Any]:
        d = {"path": self.path, "size": self.size, "mtime_ns": self.mtime_ns}
        if self.copied:
            d["copied"] = True
        if self.etag is not None:
            d["etag"] = self.etag
        if self.fingerprint is not None:
            d["fingerprint"] = self.fingerprint
        if self.referenced_by is not None:
            d["referenced_by"] = self.referenced_by
        return d


@dataclass
class ArrayPlan:
    """One output array: its metadata and where each chunk's bytes are."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    dims: tuple[str, ...]
    chunk_lengths: tuple[tuple[int, ...], ...]  # per axis, every chunk's length (last may overhang)
    codecs: list[dict[str, Any]]
    fill_value: Any
    attrs: dict[str, Any]
    refs: np.ndarray | None  # REF_DTYPE over the chunk grid, paths index Plan.sources
    inline: np.ndarray | None = None  # values stored in the cube itself instead of refs
    # chunks to copy (refs path == MATERIALIZED): chunk index -> where its values come from
    materialize: dict[tuple[int, ...], Cell] = field(default_factory=dict)

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return tuple(len(c) for c in self.chunk_lengths)

    def chunk_shape(self, index: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(int(lens[i]) for lens, i in zip(self.chunk_lengths, index))


@dataclass(frozen=True)
class Cell:
    """A chunk's values in a source: file (index into Plan.sources), variable, and the
    region [start, stop) per axis in that file's own coordinates."""

    source: int
    variable: str
    region: tuple[tuple[int, int], ...]


@dataclass
class Remedy:
    """A remedy used (or needed) by a plan, with its cost."""

    kind: str  # "split" (exact byte ranges, nothing copied) or "materialize" (copied)
    blocks: int
    bytes: int
    enabled: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "blocks": self.blocks, "bytes": self.bytes,
                "enabled": self.enabled}


# the command-line option that turns a remedy on (split is on unless --no-split)
REMEDY_OPTIONS = {"materialize": "--materialize", "split": None}


# Marks on a chunk in a figure: how it is stored and whether it can be referenced.
OK, SHORT, OVERHANG, REFUSED, GAP = "ok", "short", "overhang", "refused", "gap"


@dataclass
class AxisFigure:
    """The cuts along one axis of one variable, for pictures: every chunk's length and
    its mark (ok, short: shorter than the usual chunk, overhang: a padded last block that
    reaches past the end, refused: cannot be referenced there, gap: no tile), and the
    steps of padding each holds (a block stored padded: its length is the stored one, of
    which `length - padding` steps are data), so that `lengths.sum() - padding.sum()`
    is the extent."""

    dim: str
    extent: int
    lengths: np.ndarray  # int64, one per chunk (as listed: the last may overhang)
    marks: np.ndarray  # str (object), one per chunk
    padding: np.ndarray | None = None  # int64, one per chunk; None: no chunk is padded

    def pads(self) -> np.ndarray:
        """The steps of padding of every chunk (zeros when none is padded)."""
        return np.zeros(len(self.lengths), np.int64) if self.padding is None else self.padding

    def runs(self) -> list[tuple[int, str, int, int]]:
        """(length, mark, padding, count) runs, so a million regular chunks draw as one
        band."""
        out: list[tuple[int, str, int, int]] = []
        for length, mark, pad in zip(self.lengths.tolist(), self.marks.tolist(),
                                     self.pads().tolist()):
            if out and out[-1][:3] == (length, mark, pad):
                out[-1] = (length, mark, pad, out[-1][3] + 1)
            else:
                out.append((length, mark, pad, 1))
        return out


@dataclass
class VariableFigure:
    name: str
    axes: list[AxisFigure]
    refused: bool = False


@dataclass
class MosaicFigure:
    """A mosaic's map: tiles (name, row0, col0, height, width), the grid's cuts, and the
    pixel windows (row0, row1, col0, col1) that overlap or hold refused cuts."""

    height: int
    width: int
    tiles: list[tuple[str, int, int, int, int]]
    ycuts: list[int]
    xcuts: list[int]
    overlaps: list[tuple[int, int, int, int]] = field(default_factory=list)
    refused: list[tuple[int, int, int, int]] = field(default_factory=list)
    # a mosaic over time: every date's tiles (`tiles` is the first date's), in the order
    # its overlaps are settled in (the GDAL VRT places each so, not by the blocks it wins)
    dated: list[tuple[str, int, int, int, int]] = field(default_factory=list)


@dataclass
class LayoutAxis:
    """One concatenation axis of a hypercube's file grid: its positions in order.

    `labels[i]` is how position i is named in reports: a new axis' coordinate value
    (`r1i1p1f1`, `2001-01-01`), or for an axis the files have, the span of the files at
    that position (`2015-01-01 .. 2015-12-31`)."""

    dim: str
    labels: list[str]
    new: bool = False  # no file has this dimension: one position per file coordinate


@dataclass
class LayoutCell:
    """One cell of the file grid: its index along every `Layout.axes` (outermost first),
    the file that fills it (None: no file does, a missing cell) and the variables it holds
    (for a missing cell: the variables that lack it)."""

    index: tuple[int, ...]
    path: str | None
    variables: tuple[str, ...] = ()


@dataclass
class Layout:
    """A hypercube's file grid (several concatenation axes, or files holding different
    variables): made by the planner, shown by `check` (text, JSON, HTML), recorded with
    the cube so that `append` grows it along any axis."""

    axes: list[LayoutAxis]
    cells: list[LayoutCell]

    def to_dict(self) -> dict[str, Any]:
        return {
            "axes": [{"dim": a.dim, "labels": list(a.labels), "new": a.new} for a in self.axes],
            "cells": [{"index": list(c.index), "path": c.path, "variables": list(c.variables)}
                      for c in self.cells],
            "missing": [list(c.index) for c in self.cells if c.path is None],
        }


@dataclass
class Plan:
    """A whole cube: groups with attributes, arrays, and the sources they reference."""

    sources: list[Source]
    groups: dict[str, dict[str, Any]]
    arrays: dict[str, ArrayPlan]
    concat_dim: str | None = None
    notes: list[str] = field(default_factory=list)
    figures: dict[str, VariableFigure] = field(default_factory=dict)
    mosaic: MosaicFigure | None = None
    remedies: dict[str, Remedy] = field(default_factory=dict)  # by kind, totals
    # how the plan was asked for (planner and options), kept with the cube so that
    # `virtualize append` can plan the grown stack the same way
    recipe: dict[str, Any] = field(default_factory=dict)
    # what `virtualize append` needs of the stack's last file to plan new files after it
    # without the old ones (plan/_state.py); recorded with the cube
    append_state: dict[str, Any] | None = None
    # the files left out because they cannot be scanned (skip_unreadable), each
    # {"path", "kind", "message"}; recorded with the cube
    left_out: list[dict[str, str]] = field(default_factory=list)
    # a hypercube's file grid (several concat axes or a merge of variables); None for a
    # stack along one axis or a mosaic
    layout: Layout | None = None


@dataclass
class Report:
    """The answer to "can this stack be virtualized?"."""

    files: list[str]
    problems: list[Problem]
    plan: Plan | None
    notes: list[str] = field(default_factory=list)
    bytes_read: dict[str, int] = field(default_factory=dict)
    # after a write: {"path": ..., "kind": "cube" | "kerchunk" | "icechunk"}; None before
    output: dict[str, str] | None = None
    requests: dict[str, int] = field(default_factory=dict)  # read requests per scanned file
    # files left out because they cannot be scanned (skip_unreadable), each
    # {"path", "kind", "message"}; not in `files`
    left_out: list[dict[str, str]] = field(default_factory=list)
    # `append`: the files given that are already in the cube (skipped)
    already: list[str] = field(default_factory=list)
    # the stack's data variables (not coordinates, bounds, ...: plan/pile.py), so that no
    # way through drops them all
    data_variables: list[str] = field(default_factory=list)
    # one-line facts about the whole stack, shown under the verdict (text, HTML, JSON
    # `hints`): what a reader needs before the problems, such as "these are 2 datasets"
    hints: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.plan is not None and not any(p.fatal for p in self.problems)

    def to_dict(self) -> dict[str, Any]:
        plan = self.plan
        return {
            "ok": self.ok,
            "files": self.files,
            "problems": [p.to_dict() for p in self.problems],
            "notes": list(self.notes),
            "bytes_read": dict(self.bytes_read),
            "output": dict(self.output) if self.output else None,
            "requests": dict(self.requests),
            "left_out": [dict(d) for d in self.left_out],
            "already_in_cube": list(self.already),
            "hints": list(self.hints),
            "layout": plan.layout.to_dict() if plan is not None and plan.layout else None,
            "arrays": {
                name: {
                    "shape": list(a.shape),
                    "dims": list(a.dims),
                    "dtype": str(a.dtype),
                    "chunks": int(np.prod(a.grid_shape)) if a.grid_shape else 1,
                    "inline": a.inline is not None,
                    "status": "inline" if a.inline is not None else "virtual",
                }
                for name, a in (plan.arrays.items() if plan else ())
            },
        }
