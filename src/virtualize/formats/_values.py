"""Conventions every scanner shares: the bytes codec of a dtype, attributes as plain
Python, and how large a coordinate may be before its values are not read."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..conventions import bytes_codec, py  # noqa: F401 (the scanners' shared helpers)

COORD_VALUES_LIMIT = 10_000_000  # elements: coordinate variables larger than this are not read


class Unrepresentable(ValueError):
    """An attribute value with no JSON form (the attribute is left out, with a problem)."""


def plain(v: Any) -> Any:
    """An attribute value as plain, JSON-representable Python, as netCDF4-python and
    xarray present it: numpy scalars as Python scalars, length-1 arrays as scalars, bytes
    as str (UTF-8), arrays of strings as lists of str, compound values as dicts (arrays
    of them as lists of dicts), an empty (null-dataspace) attribute as None. Floats stay
    floats, NaN and infinities included (the metadata writer spells those "NaN",
    "Infinity", "-Infinity", as zarr spells fill values). Raises `Unrepresentable` for
    anything else (h5py references are resolved by the HDF5 scanner before this)."""
    if isinstance(v, np.void) and v.dtype.names is not None:
        return {str(k): plain(v[k]) for k in v.dtype.names}
    if isinstance(v, np.generic):  # (np.float64 and np.str_ are also float and str)
        if v.dtype.kind not in "biufcSU":
            raise Unrepresentable(f"a value of type {v.dtype}")
        return plain(v.item())
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, bytes):
        return v.decode("utf-8", errors="replace")
    if isinstance(v, complex):
        return [v.real, v.imag]
    if isinstance(v, np.ndarray):
        if v.dtype.names is not None:  # compound
            items = [plain(x) for x in v.reshape(-1)]
            return items[0] if len(items) == 1 else items
        if v.dtype.kind in "SUO":  # (a vlen sequence's items are arrays: lists, kept whole)
            items = [[plain(y) for y in x.reshape(-1).tolist()] if isinstance(x, np.ndarray)
                     else plain(x) for x in v.reshape(-1).tolist()]
            return items[0] if len(items) == 1 else items
        if v.dtype.kind not in "biufc":
            raise Unrepresentable(f"an array of type {v.dtype}")
        if v.size == 1:
            return plain(v.reshape(-1)[0])
        if v.dtype.kind == "c":
            return [plain(x) for x in v.reshape(-1)]
        return v.tolist()
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    raise Unrepresentable(f"a value of type {type(v).__name__}")


# Strings are read when scanned and stored in the cube: at most this many bytes per variable.
TEXT_LIMIT = 1 << 20


def chars_to_text(raw: np.ndarray, encoding: str, chars: bool) -> np.ndarray:
    """Strings as text (numpy StringDType, zarr's `string`), as xarray decodes them: a
    netCDF `char` array (`chars`, 1-byte strings) joined along its last axis into one
    string per row, trailing NULs dropped; bytes decoded with `encoding` (raises
    UnicodeDecodeError when they are not)."""
    raw = np.asarray(raw)
    if chars and raw.ndim:
        n = raw.shape[-1]
        raw = np.ascontiguousarray(raw).view(f"S{n}")[..., 0] if n else \
            np.zeros(raw.shape[:-1], "S1")
    flat = [x if isinstance(x, bytes) else str(x).encode("utf-8")
            for x in np.asarray(raw, dtype=object).reshape(-1)]
    text = [x.rstrip(b"\x00").decode(encoding) for x in flat]
    return np.array(text, dtype=np.dtypes.StringDType()).reshape(raw.shape)
