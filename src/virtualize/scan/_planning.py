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
  (at most `INLINE_VALUES_LIMIT` decoded bytes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..model import MATERIALIZED, FileInventory, Variable
from ._values import COORD_VALUES_LIMIT

# decoded bytes of a variable with chunks held by value read to digest it (its values are
# decoded in memory); variables with byte ranges are digested whatever their size
DIGEST_LIMIT = 64 * 2**20
INLINE_VALUES_LIMIT = 64 * 1024  # decoded bytes: the default --inline-threshold
# Problems a scanner raises when a variable's blocks cannot be referenced; inlining
# (reading the values with the format's own library) resolves them.
REFERENCE_KINDS = frozenset({"compact-layout", "external-storage", "virtual-dataset",
                             "unsupported-filter", "filter-mask", "partial-records",
                             "chunk-coordinates"})
INLINABLE_KINDS = REFERENCE_KINDS | {"unsupported-type"}


@dataclass(frozen=True)
class ScanHint:
    """What the caller will plan, so that the scan records what that planner compares:
    `planner` "concat" along `concat_dim` (None: as the planner chooses it), "append"
    (the same, after a cube's recorded last file), or "mosaic" (which takes from the
    first tile only scalars and grid mappings). `alone`: the file is planned by itself
    (one file, no cube to join): nothing is compared, nothing digested."""

    planner: str = "concat"
    concat_dim: str | None = None
    alone: bool = False


def unlimited_dims(inv: FileInventory) -> list[str]:
    """The file's unlimited dimensions of the root group, in order."""
    return [d.name for d in inv.dimensions.values() if d.unlimited and "/" not in d.name]


def default_concat_dim(inv: FileInventory) -> str | None:
    """The dimension a stack whose first file is `inv` is concatenated along when none is
    named: its unlimited one (`time` if it is one of several, else the first), else `time`
    if a variable has it, else None."""
    unlimited = unlimited_dims(inv)
    if unlimited:
        return "time" if "time" in unlimited else unlimited[0]
    if any("time" in v.dims for v in inv.variables.values()):
        return "time"
    return None


def grid_mappings(inv: FileInventory) -> set[str]:
    """Names the file's variables give as their `grid_mapping` (basenames)."""
    return {x.attrs.get("grid_mapping") for x in inv.variables.values()} - {None}


def stacks(v: Variable, mappings: set[str]) -> bool:
    """In a stack along a new axis, whether `v` gets the axis: data do; coordinates,
    scalars and grid mappings do not (they must be the same in every file)."""
    return not (v.is_coordinate or not v.shape or v.basename in mappings
                or "grid_mapping_name" in v.attrs)


def must_agree(v: Variable, dim: str | None, new_axis: bool, mappings: set[str]) -> bool:
    """Whether `v` must be the same in every file of a stack concatenated along `dim`
    (`new_axis`: stacked along a new leading `dim` axis): the one rule by which the scan
    digests and the planner compares (`plan._common.compare_shared`)."""
    if new_axis or dim is None:
        return not stacks(v, mappings)
    return dim not in v.dims


def agreeing(inv: FileInventory, hint: ScanHint | None) -> set[str]:
    """The file's variables a stack planned as `hint` says compares across files."""
    hint = hint or ScanHint()
    if hint.alone:
        return set()
    mappings = grid_mappings(inv)
    if hint.planner == "mosaic":
        return {n for n, v in inv.variables.items()
                if not v.shape or v.basename in mappings or "grid_mapping_name" in v.attrs}
    dim = hint.concat_dim if hint.concat_dim is not None else default_concat_dim(inv)
    new_axis = dim is None or not any(dim in v.dims for v in inv.variables.values())
    return {n for n, v in inv.variables.items() if must_agree(v, dim, new_axis, mappings)}


def add_planning_data(inv: FileInventory, read=None, hint: ScanHint | None = None
                      ) -> FileInventory:
    """`hint`: what the caller will plan (which variables to digest). `read(name)`: a
    variable's values with the format's own library through the scanner's open file (the
    HDF5 scanner passes one: opening the file again costs more than reading a bounds
    variable); by default `read_values(inv.path, name)`."""
    if read is None:
        from . import read_values

        def read(name):
            return read_values(inv.path, name)

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
            (name in inlinable and size * v.dtype.itemsize <= INLINE_VALUES_LIMIT))
        if wants_values:
            try:
                v.values = at_shape(read(name), v)
            except Exception:  # reported by the planner, if it needs them
                pass
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
        v.digest, v.block_digests = digest_blocks([s.path for s in inv.sources()], refs)
    return inv


def digest_blocks(paths: list[str], refs):
    from ._io import digest_blocks as digest

    return digest(paths, refs)


def digest_values(values, block_shape):
    from ._io import digest_values as digest

    return digest(values, block_shape)


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
