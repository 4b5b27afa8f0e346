"""What the planner needs from a file's bytes, computed where the file is scanned.

Planning reads no source bytes (docs/planning.md, "What the scan records for planning"):
everything it compares or stores that comes from a file's data travels in the inventory.
After a format's scanner has read the file's metadata, `add_planning_data` adds

- `Variable.digest` for the variables that must be the same in every file of a stack: a
  file's variables that are not along a record dimension (an unlimited one, or `time`),
  at most `DIGEST_LIMIT` stored bytes each. A file without a record dimension (a TIFF, a
  netCDF file stacked along a new axis) stacks its data variables, so only those that
  do not stack get one: scalars, grid mappings, coordinates whose values were not read,
  and any variable of at most `SMALL_DIGEST` stored bytes.
  The concat dimension is not known when a file is scanned; a variable the planner must
  compare but which has no digest (a `--concat-dim` other than the record dimension) is
  taken from the first file with a note, as one over the limit always was.
- `Variable.values` for what the plan may store in the cube: the CF bounds of a
  coordinate (re-expressed with it when files count time from different origins), and
  variables that cannot be referenced but are small enough to be inlined automatically
  (at most `INLINE_VALUES_LIMIT` decoded bytes).
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

from ..model import MATERIALIZED, FileInventory, Variable
from ._values import COORD_VALUES_LIMIT

DIGEST_LIMIT = 64 * 2**20  # stored bytes of one variable digested at scan time
# in a file without a record dimension, variables up to this size are digested anyway (a
# --concat-dim along another axis compares them; the read is small)
SMALL_DIGEST = 64 * 1024
INLINE_VALUES_LIMIT = 64 * 1024  # decoded bytes: the default --inline-threshold
# Problems a scanner raises when a variable's blocks cannot be referenced; inlining
# (reading the values with the format's own library) resolves them.
REFERENCE_KINDS = frozenset({"compact-layout", "external-storage", "virtual-dataset",
                             "unsupported-filter", "filter-mask", "partial-records",
                             "chunk-coordinates"})
INLINABLE_KINDS = REFERENCE_KINDS | {"unsupported-type"}


def record_dims(inv: FileInventory) -> set[str]:
    """The dimensions a stack of such files is likely concatenated along."""
    dims = {d.name for d in inv.dimensions.values() if d.unlimited}
    used = {d for v in inv.variables.values() for d in v.dims}
    return dims | ({"time"} & used)


def add_planning_data(inv: FileInventory, read=None) -> FileInventory:
    """`read(name)`: a variable's values with the format's own library through the
    scanner's open file (the HDF5 scanner passes one: opening the file again costs more
    than reading a bounds variable); by default `read_values(inv.path, name)`."""
    if read is None:
        from . import read_values

        def read(name):
            return read_values(inv.path, name)

    record = record_dims(inv)
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
    for name, v in list(inv.variables.items()):
        size = math.prod(v.shape)
        wants_values = v.values is None and (
            (name in bounds and size <= COORD_VALUES_LIMIT) or
            (name in inlinable and size * v.dtype.itemsize <= INLINE_VALUES_LIMIT))
        if wants_values:
            try:
                v.values = at_shape(read(name), v)
            except Exception:  # reported by the planner, if it needs them
                pass
        if v.blocks is None or v.values is not None or name in refused or v.digest is not None:
            continue
        refs = v.blocks.refs
        stored = int(refs["length"].sum())
        if record:
            if any(d in record for d in v.dims):
                continue
        elif v.shape and "grid_mapping_name" not in v.attrs and not v.is_coordinate and \
                stored > SMALL_DIGEST:
            continue  # stacked along a new axis: need not agree across files
        if stored > DIGEST_LIMIT:
            continue
        if (refs["path"] == MATERIALIZED).any():  # chunks held by value: their values
            if size * v.dtype.itemsize > DIGEST_LIMIT:
                continue
            try:
                data = np.asarray(at_shape(read(name), v))
            except Exception:
                continue
            data = np.ascontiguousarray(data, dtype=data.dtype.newbyteorder("="))
            v.digest = "values:" + hashlib.sha256(data.tobytes()).hexdigest()
            continue
        v.digest = digest_blocks([s.path for s in inv.sources()], refs)
    return inv


def digest_blocks(paths: list[str], refs) -> str:
    from ._io import digest_blocks as digest

    return digest(paths, refs)


def at_shape(values: np.ndarray, v: Variable) -> np.ndarray:
    """Values read with h5py at the variable's netCDF shape: a netCDF-4 variable with fewer
    records than its unlimited dimension reads as the fill value past its HDF5 extent (as
    netCDF-C reads it)."""
    values = np.asarray(values)
    if values.shape == tuple(v.shape) or values.ndim != len(v.shape) or \
            any(a > b for a, b in zip(values.shape, v.shape)):
        return values
    fill = v.fill_value if v.fill_value is not None else 0
    out = np.full(v.shape, fill, dtype=values.dtype)
    out[tuple(slice(0, n) for n in values.shape)] = values
    return out
