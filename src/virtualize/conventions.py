"""The conventions the scanners and the planner share (docs/planning.md, "What the scan
records for planning"): what a scan is told of the plan to come (`ScanHint`), which
dimension a stack is concatenated along by default, which variables must agree across
files, the size limits of digests and inlined values, the problems inlining resolves, and
the little data-type arithmetic both sides need. Below both: the planner imports these from
here, never from a format's scanner."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .model import FileInventory, Variable

# decoded bytes of a variable with chunks held by value read to digest it (its values are
# decoded in memory); variables with byte ranges are digested whatever their size
DIGEST_LIMIT = 64 * 2**20
INLINE_VALUES_LIMIT = 64 * 1024  # decoded bytes: the default --inline-threshold
# Problems a scanner raises when a variable's blocks cannot be referenced; inlining
# (reading the values with the format's own library) resolves them.
REFERENCE_KINDS = frozenset({"compact-layout", "external-storage", "virtual-dataset",
                             "unsupported-filter", "filter-mask", "partial-records",
                             "chunk-coordinates",
                             # FITS images without an exact codec (formats/fits.py)
                             "unsupported-compression", "unsupported-scaling",
                             # HDF4 data in several linked blocks, other layouts (formats/hdf4)
                             "linked-blocks", "hdf4-layout"})
INLINABLE_KINDS = REFERENCE_KINDS | {"unsupported-type"}


@dataclass(frozen=True)
class ScanHint:
    """What the caller will plan, so that the scan records what that planner compares:
    `planner` "concat" along `concat_dim` (None: as the planner chooses it), "append"
    (the same, after a cube's recorded last file), or "mosaic" (which takes from the
    first tile only scalars and grid mappings). `alone`: the file is planned by itself
    (one file, no cube to join): nothing is compared, nothing digested. `inline`: the
    variables the caller will inline (`--inline`): digested whatever the plan, so that the
    file's fingerprint covers the copy the cube holds (docs/reading.md, Staleness).
    `dims`: a hypercube's axes, outermost first. `layout`: how a format that can arrange
    a file's arrays in several ways does (GRIB: "virtualize", `--grib-layout`); None: its
    default (GRIB: cfgrib's)."""

    planner: str = "concat"
    concat_dim: str | None = None
    alone: bool = False
    inline: frozenset[str] = frozenset()
    # a hypercube's concatenation axes (plan/hypercube.py): what must agree along any of
    # them is digested; empty: `concat_dim` alone
    dims: tuple[str, ...] = ()
    layout: str | None = None


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


def stacks(v: Variable, mappings: set[str], bounds: set[str] = frozenset()) -> bool:
    """In a stack along a new axis, whether `v` gets the axis: data do; coordinates,
    their `bounds` (`coordinate_bounds`), scalars and grid mappings do not (they must be
    the same in every file)."""
    return not (v.is_coordinate or not v.shape or v.basename in mappings
                or "grid_mapping_name" in v.attrs or v.name in bounds)


def scalar_data(v: Variable, mappings: set[str], bounds: set[str] = frozenset(),
                named: set[str] = frozenset()) -> bool:
    """Along a new axis, whether `v` is a scalar data variable (0-d; not a grid mapping,
    not a bounds variable, not named as a coordinate by a `coordinates` attribute: `named`,
    `named_coordinates`): shared when it is the same in every file, stacked along the axis
    (`realization(member)`) when it differs, as xarray's `combine_nested` does with data
    variables. Coordinates, bounds and grid mappings that differ stay refused."""
    return not v.shape and not v.is_coordinate and v.basename not in mappings \
        and "grid_mapping_name" not in v.attrs and v.name not in bounds \
        and v.basename not in named and v.name not in named


def named_coordinates(inv: FileInventory) -> set[str]:
    """The names the file's variables list in their CF `coordinates` attribute."""
    out: set[str] = set()
    for v in inv.variables.values():
        c = v.attrs.get("coordinates")
        if isinstance(c, str):
            out.update(c.split())
    return out


def coordinate_bounds(inv: FileInventory) -> set[str]:
    """The variables a coordinate names as its CF `bounds` / `climatology` (full names)."""
    out = set()
    for v in inv.variables.values():
        if v.is_coordinate:
            for key in ("bounds", "climatology"):
                b = v.attrs.get(key)
                if isinstance(b, str):
                    out.add(f"{v.group}/{b}" if v.group else b)
    return out


def must_agree(v: Variable, dim: str | None, new_axis: bool, mappings: set[str],
               bounds: set[str] = frozenset()) -> bool:
    """Whether `v` must be the same in every file of a stack concatenated along `dim`
    (`new_axis`: stacked along a new leading `dim` axis): the one rule by which the scan
    digests and the planner compares (`plan._common.compare_shared`)."""
    if new_axis or dim is None:
        return not stacks(v, mappings, bounds)
    return dim not in v.dims


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


def bytes_codec(dtype: np.dtype) -> dict[str, Any]:
    if dtype.itemsize == 1:
        return {"name": "bytes", "configuration": {}}
    endian = "big" if dtype.byteorder == ">" or (dtype.byteorder == "=" and
                                                 np.little_endian is False) else "little"
    return {"name": "bytes", "configuration": {"endian": endian}}


def py(v: Any) -> Any:
    """A value for a message: numpy scalars and 0-d arrays as Python numbers, so messages
    print `2`, not `np.int32(2)`."""
    if isinstance(v, np.ndarray) and v.ndim == 0:
        v = v[()]
    if isinstance(v, np.generic):
        return v.item()
    return v


def struct_dtype(dt: np.dtype) -> tuple[np.dtype | None, str | None]:
    """The zarr `struct` data type of an h5py compound dtype: its members in order, packed,
    little-endian (zarr-python 3.4 stores structs packed), or None and why not: zarr 3.4
    converts only members that are numbers or structs of numbers (no subarray members; a
    string member would be a data type zarr-python marks unstable)."""
    import h5py  # (its dtype metadata: vlen, string, reference types)

    if dt.names is None:
        if dt.kind in "biufc" and dt.subdtype is None and h5py.check_vlen_dtype(dt) is None \
                and h5py.check_string_dtype(dt) is None:
            return (dt.newbyteorder("<") if dt.itemsize > 1 else dt), None
        what = ("an array member" if dt.subdtype is not None else
                "a string member" if h5py.check_string_dtype(dt) is not None else
                "a sequence (vlen) member" if h5py.check_vlen_dtype(dt) is not None else
                "a reference member" if h5py.check_ref_dtype(dt) is not None else
                f"a {dt} member")
        return None, what
    fields = []
    for key in dt.names:
        sub, why = struct_dtype(dt.fields[key][0])
        if sub is None:
            return None, f"{why} ({key!r})"
        fields.append((key, sub))
    if not fields:
        return None, "no members"
    return np.dtype(fields), None
