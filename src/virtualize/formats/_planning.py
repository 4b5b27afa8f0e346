"""What the planner needs from a file's bytes, computed where the file is scanned.

Planning reads no source bytes (docs/planning.md, "What the scan records for planning"):
everything it compares or stores that comes from a file's data travels in the inventory.
After a format's scanner has read the file's metadata, `add_planning_data` adds

- `Variable.block_digests` (and their summary, `Variable.digest`) for every variable that
  must be the same in every file of a stack: `must_agree` decides which, for the planner
  too, from the concatenation dimension the caller will plan along (`ScanHint`, sent with
  the scan: api.check / append know it before they scan) or, without one, the one the
  planner would choose for this file (`default_concat_dim`). Whatever their size: their
  bytes are read once, here. A variable with chunks held by value (no byte range) is
  digested from its decoded values, up to `DIGEST_LIMIT` decoded bytes; past that it has
  none, and the planner refuses it (`not-comparable`), as any shared variable without
  values or digests: it is never taken from the first file unseen.
- `Variable.values` for what the plan may store in the cube: the CF bounds of a
  coordinate (re-expressed with it when files count time from different origins), and
  variables that cannot be referenced but are small enough to be inlined automatically
  (at most `INLINE_VALUES_LIMIT` decoded bytes), and every small scalar (a number, or
  text of at most `SCALAR_VALUE_LIMIT` bytes): a new axis' coordinate may be a scalar
  variable's value in each file (`--coord member=var:realization`, plan/coords.py).
"""

from __future__ import annotations

import math

import numpy as np

from ..conventions import (  # noqa: F401 (the planning conventions, read here by tests)
    DIGEST_LIMIT,
    INLINABLE_KINDS,
    INLINE_VALUES_LIMIT,
    REFERENCE_KINDS,
    ScanHint,
    at_shape,
    coordinate_bounds,
    default_concat_dim,
    grid_mappings,
    must_agree,
    stacks,
    unlimited_dims,
)
from ..model import MATERIALIZED, FileInventory, Location, Problem
from ._decode import checked_values
from ._values import COORD_VALUES_LIMIT

SCALAR_VALUE_LIMIT = 256  # bytes: scalars up to this size have their value recorded


def agreeing(inv: FileInventory, hint: ScanHint | None) -> set[str]:
    """The file's variables a stack planned as `hint` says compares across files, and
    those it will inline (their digests put the cube's copy in the file's fingerprint)."""
    hint = hint or ScanHint()
    inline = {n for n, v in inv.variables.items() if n in hint.inline or v.basename in hint.inline}
    if hint.alone:
        return inline
    mappings = grid_mappings(inv)
    if hint.planner == "mosaic":
        return inline | {n for n, v in inv.variables.items()
                         if not v.shape or v.basename in mappings or "grid_mapping_name" in v.attrs}
    out = set(inline)
    bounds = coordinate_bounds(inv)
    dims = hint.dims or (hint.concat_dim if hint.concat_dim is not None
                         else default_concat_dim(inv),)
    for dim in dims:  # (a hypercube's: what must agree along any of its axes)
        new_axis = dim is None or not any(dim in v.dims for v in inv.variables.values())
        out |= {n for n, v in inv.variables.items()
                if must_agree(v, dim, new_axis, mappings, bounds)}
    return out


def add_planning_data(inv: FileInventory, read=None, hint: ScanHint | None = None,
                      pread=None) -> FileInventory:
    """`hint`: what the caller will plan (which variables to digest). `read(name)`: a
    variable's values with the format's own library through the scanner's open file (the
    HDF5 scanner passes one: opening the file again costs more than reading a bounds
    variable); by default its format's `read_values(inv.path, name)`. `pread(n, offset)`:
    the file's bytes through the scanner's open file (the HDF5 scanner passes its record
    of what HDF5 read: a digest of a coordinate read is made from those bytes), else
    digests open the file again."""
    if read is None:
        from .registry import of_inventory

        def read(name):
            return of_inventory(inv.format).read_values(inv.path, name)

    refused = {p.loc.variable for p in inv.problems if p.fatal and p.loc.variable}
    inlinable = {p.loc.variable for p in inv.problems
                 if p.fatal and p.loc.variable and p.kind in INLINABLE_KINDS}
    bounds = set()
    for v in inv.variables.values():
        if v.is_coordinate:
            for key in ("bounds", "climatology"):
                b = v.attrs.get(key)
                if isinstance(b, str):
                    bounds.add(b)
                    if v.group:
                        bounds.add(f"{v.group}/{b}")
    agree = agreeing(inv, hint)
    for name, v in list(inv.variables.items()):
        size = math.prod(v.shape)
        wants_values = v.values is None and (
            (name in bounds and size <= COORD_VALUES_LIMIT) or
            # a mosaic over time: a tile's date may be a scalar `concat_dim` variable
            (hint is not None and hint.planner == "mosaic" and name == hint.concat_dim
             and size == 1) or
            # a small scalar's value: a new axis' coordinate may be it (--coord DIM=var:NAME)
            (not v.shape and v.blocks is not None and v.dtype.kind in "biufSU"
             and v.dtype.itemsize <= SCALAR_VALUE_LIMIT and name not in refused) or
            (name in inlinable and size * v.dtype.itemsize <= INLINE_VALUES_LIMIT))
        if wants_values:
            try:
                values = at_shape(read(name), v)
            except Exception:  # reported by the planner, if it needs them
                values = None
            # values that stand in for references: the blocks the codecs decode must read
            # as the library's values (a damaged chunk the library fills with memory that
            # changes from run to run is refused, not inlined)
            bad = checked_values(inv, v, values) if values is not None and \
                name in inlinable else None
            if bad is not None:  # (what inlining would have resolved is moot: replaced)
                inv.problems[:] = [p for p in inv.problems if not (
                    p.fatal and p.loc.variable == name and p.kind in INLINABLE_KINDS)]
                inv.problems.append(bad)
            elif values is not None:
                v.values = values
        if name in refused and name in agree and v.digest is None and v.values is None \
                and (hint and (name in hint.inline or v.basename in hint.inline)) \
                and size * v.dtype.itemsize <= DIGEST_LIMIT:
            # inlined although unreferenceable: the values the planner will read, digested
            try:
                data = at_shape(read(name), v)
                v.digest, _ = digest_values(data, v.blocks.block_shape if v.blocks
                                            is not None else data.shape)
            except Exception:  # the planner reports it when it reads them
                pass
            continue
        if v.blocks is None or name in refused or v.digest is not None or name not in agree:
            continue
        refs = v.blocks.refs
        if (refs["path"] == MATERIALIZED).any():  # chunks held by value: their values
            if size * v.dtype.itemsize > DIGEST_LIMIT:
                continue
            try:
                data = v.values if v.values is not None else at_shape(read(name), v)
            except Exception:
                continue
            v.digest, v.block_digests = digest_values(data, v.blocks.block_shape)
            continue
        v.digest, v.block_digests = digest_blocks([s.path for s in inv.sources()], refs, pread)
    return inv


def digest_blocks(paths: list[str], refs, pread=None):
    from ._io import digest_blocks as digest

    return digest(paths, refs) if pread is None else digest(paths, refs, pread=pread)


def digest_values(values, block_shape):
    from ._io import digest_values as digest

    return digest(values, block_shape)


def _check_extent(inv: FileInventory) -> FileInventory:
    """Every referenced block must lie inside the file: a block past its end (a truncated
    file) is a located problem here, not an error at read time."""
    told = {p.loc.variable for p in inv.problems if p.kind == "truncated"}
    # blocks in the inventory's data files (an HDF5 external link's target) against theirs
    sizes = np.array([s.size for s in inv.sources()] + [0], dtype=np.uint64)
    for name, v in inv.variables.items():
        if v.blocks is None or name in told:
            continue
        refs = v.blocks.refs.reshape(-1)
        i = _past_end(refs, sizes)
        if i is not None:
            block = tuple(int(b) for b in np.unravel_index(i, v.blocks.refs.shape))
            end = refs["offset"] + refs["length"]
            size = sizes[np.minimum(refs["path"], len(sizes) - 1)]
            bad = (refs["length"] > 0) & (refs["path"] < len(sizes) - 1) & (end > size)
            inv.problems.append(Problem(
                Location(inv.path, name, None, block), "truncated",
                f"{int(bad.sum())} block(s) end past the end of the file ({inv.size} bytes), "
                f"the first at byte {int(end[i])}"))
    return inv


def _past_end(refs, sizes) -> int | None:
    """The first block (flat index) of `refs` that ends past the end of its file (`sizes`:
    per source, then 0 for blocks held by value), or None. A few blocks (most variables of
    small files) in Python, the same sums as numpy's (64-bit, wrapping)."""
    if len(refs) > 16:
        end = refs["offset"] + refs["length"]
        size = sizes[np.minimum(refs["path"], len(sizes) - 1)]
        bad = np.flatnonzero((refs["length"] > 0) & (refs["path"] < len(sizes) - 1) & (end > size))
        return int(bad[0]) if bad.size else None
    limit = sizes.tolist()
    last = len(limit) - 1
    for i, (path, offset, length) in enumerate(zip(refs["path"].tolist(), refs["offset"].tolist(),
                                                   refs["length"].tolist())):
        if length > 0 and path < last and (offset + length) & 0xFFFFFFFFFFFFFFFF > limit[path]:
            return i
    return None


def finish(inv: FileInventory, hint: ScanHint | None = None, read=None,
           extent: bool = True, pread=None) -> FileInventory:
    """What every scan adds after its format's scanner: the extent check (`extent`: a format
    whose blocks lie in other files checks them itself) and the planning data (`read`,
    `pread`: the scanner's open file, `add_planning_data`)."""
    return add_planning_data(_check_extent(inv) if extent else inv, read, hint, pread)
