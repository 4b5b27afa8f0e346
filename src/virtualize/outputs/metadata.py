"""Zarr v3 `zarr.json` documents for a plan's groups and arrays. Pure."""

from __future__ import annotations

import base64
import math
import struct
from typing import Any

import numpy as np

from ..model import ArrayPlan
from ..plan.grid import axis_spec, is_regular

# The extension field that marks an array whose chunks live in a virtualize manifest.
# It has no "must_understand": false, so a zarr reader that does not know it refuses the
# array (zarr v3 core spec) instead of reading every chunk as the fill value.
MANIFEST_FIELD = "virtualize_manifest"
CHUNK_KEY_ENCODING = {"name": "default", "configuration": {"separator": "/"}}


def group_doc(attrs: dict[str, Any]) -> dict[str, Any]:
    return {"zarr_format": 3, "node_type": "group", "attributes": json_attrs(attrs, None)}


def array_doc(a: ArrayPlan, manifest: dict[str, Any] | None = None) -> dict[str, Any]:
    """The array's zarr.json; with `manifest`, the extension field pointing at it."""
    doc: dict[str, Any] = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [int(n) for n in a.shape],
        "data_type": data_type(a.dtype),
        "chunk_grid": chunk_grid(a),
        "chunk_key_encoding": CHUNK_KEY_ENCODING,
        "fill_value": fill_json(a.fill_value, a.dtype),
        "codecs": a.codecs,
        "attributes": json_attrs(a.attrs, a.dtype),
        "dimension_names": list(a.dims),
    }
    if manifest is not None:
        doc[MANIFEST_FIELD] = manifest
    return doc


def chunk_grid(a: ArrayPlan) -> dict[str, Any]:
    """Regular when every axis has one chunk length, else rectilinear with runs."""
    if all(is_regular(lens) for lens in a.chunk_lengths):
        shape = [int(lens[0]) if lens else max(int(n), 1)
                 for lens, n in zip(a.chunk_lengths, a.shape)]
        return {"name": "regular", "configuration": {"chunk_shape": shape}}
    return {"name": "rectilinear", "configuration": {
        "kind": "inline",
        "chunk_shapes": [axis_spec(lens, n) for lens, n in zip(a.chunk_lengths, a.shape)],
    }}


def data_type(dtype: np.dtype) -> str | dict[str, Any]:
    if np.dtype(dtype).kind == "T":  # numpy's StringDType: text, zarr's `string`
        return "string"
    if np.dtype(dtype).names is not None:  # zarr-python's `struct` (packed fields)
        return _struct(dtype).to_json(zarr_format=3)
    name = np.dtype(dtype).newbyteorder("=").name
    if name not in {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                    "uint64", "float16", "float32", "float64", "complex64", "complex128"}:
        raise ValueError(f"data type {dtype} has no zarr v3 core data type")
    return name


def _struct(dtype: np.dtype):
    from zarr.core.dtype import parse_dtype

    return parse_dtype(np.dtype(dtype), zarr_format=3)


def _float_json(x: float) -> float | str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def fill_json(value: Any, dtype: np.dtype) -> Any:
    """A fill value as the zarr v3 spec spells it for the data type."""
    dtype = np.dtype(dtype)
    if dtype.kind == "T":
        return "" if value is None else str(value)
    if dtype.names is not None:  # {member: value}, as zarr-python spells a struct's
        v = np.zeros((), dtype=dtype) if value is None else np.asarray(value).astype(dtype)
        return _struct(dtype).to_json_scalar(v[()], zarr_format=3)
    v = np.asarray(value if value is not None else 0).astype(dtype)[()]
    if dtype.kind == "b":
        return bool(v)
    if dtype.kind in "iu":
        return int(v)
    if dtype.kind == "f":
        x = float(v)
        if math.isnan(x):
            # keep NaN payloads exact: a non-default NaN is written as its bits
            bits = np.asarray(v).view(f"u{dtype.itemsize}")[()]
            canonical = np.asarray(np.nan, dtype=dtype).view(f"u{dtype.itemsize}")[()]
            if bits != canonical:
                return "0x" + format(int(bits), f"0{dtype.itemsize * 2}x")
        return _float_json(x)
    if dtype.kind == "c":
        return [_float_json(float(v.real)), _float_json(float(v.imag))]
    raise ValueError(f"no fill value encoding for {dtype}")


def json_attrs(attrs: dict[str, Any], dtype: np.dtype | None) -> dict[str, Any]:
    """Attributes as JSON. `_FillValue` follows xarray's zarr v3 convention (floats as
    base64 of a little-endian float64) so xarray masks exactly; other non-finite floats
    become "NaN" / "Infinity" / "-Infinity" strings, as zarr spells fill values."""
    out = {}
    left_out = dict(omitted_attrs(attrs, dtype))
    for k, v in attrs.items():
        if k in left_out:
            continue
        if k == "_FillValue" and dtype is not None:
            out[k] = _xarray_fill(v, np.dtype(dtype))
        else:
            out[k] = _json_value(v)
    return out


def omitted_attrs(attrs: dict[str, Any], dtype: np.dtype | None) -> list[tuple[str, str]]:
    """Attributes `json_attrs` leaves out, and why.

    A `_FillValue` that is not one number of the array's kind (text, empty, several
    values; for an integer array NaN, 1.5 or out of range) and an integer array's
    `missing_value` that it cannot hold: netCDF4-python shows them as they are, xarray
    reading the source ignores such a `_FillValue` (a NaN one on integers: no integer
    equals it, the values stay unmasked integers), but from zarr.json xarray cannot decode
    it (it refuses to open the whole dataset) and turns the integers into floats for such
    a `missing_value`. Left out, xarray reads the cube as it reads the source."""
    if dtype is None or np.dtype(dtype).kind not in "biufc":
        return []
    dtype = np.dtype(dtype)
    out = []
    fill = attrs.get("_FillValue", 0)
    if isinstance(fill, list) and not _fits(fill, dtype):
        out.append(("_FillValue", f"{_json_value(fill)!r} are several values: xarray masks "
                                  "them reading the source, but cannot decode several from "
                                  "zarr.json (it would refuse to open the cube), so reading the "
                                  "cube they are not masked"))
    elif not _fits(fill, dtype):
        out.append(("_FillValue", f"{_json_value(fill)!r} is not a value of {dtype} (xarray "
                                  "ignores it reading the source, and could not read the cube)"))
    if dtype.kind in "iu":
        v = attrs.get("missing_value")
        values = v if isinstance(v, list) else [v]
        numbers = [x for x in values if isinstance(x, (int, float)) and not isinstance(x, bool)]
        bad = [x for x in numbers if not _holds(x, dtype)]
        if v is not None and bad:
            out.append(("missing_value", f"{_json_value(bad[0])} is not a value of {dtype} "
                                         "(xarray would read the integers as floats)"))
    return out


def _fits(v: Any, dtype: np.dtype) -> bool:
    """Is `v` one `_FillValue` xarray's zarr backend can decode for `dtype`?"""
    if isinstance(v, bool) or dtype.kind == "b":
        return isinstance(v, (bool, int))
    if dtype.kind == "c":
        return isinstance(v, (int, float, complex)) or (
            isinstance(v, list) and len(v) == 2 and all(isinstance(x, (int, float)) for x in v))
    if not isinstance(v, (int, float)):
        return False
    return dtype.kind == "f" or _holds(v, dtype)


def _xarray_fill(v: Any, dtype: np.dtype) -> Any:
    """`_FillValue` as xarray's zarr backend decodes it."""
    if isinstance(v, (list, str)) or v is None:
        return _json_value(v)
    if dtype.kind == "f" and isinstance(v, (int, float)):
        return base64.standard_b64encode(struct.pack("<d", float(v))).decode()
    if dtype.kind == "c" and isinstance(v, (int, float, complex)):
        c = complex(v)
        return [base64.standard_b64encode(struct.pack("<d", c.real)).decode(),
                base64.standard_b64encode(struct.pack("<d", c.imag)).decode()]
    if dtype.kind == "b" and isinstance(v, (bool, int)):
        return bool(v)
    if dtype.kind in "iu" and isinstance(v, (int, float)) and _holds(v, dtype):
        return int(v)
    return _json_value(v)


def _holds(v: int | float, dtype: np.dtype) -> bool:
    """True when integer type `dtype` holds `v` exactly."""
    if isinstance(v, float) and not (math.isfinite(v) and v.is_integer()):
        return False
    info = np.iinfo(dtype)
    return info.min <= int(v) <= info.max


def _json_value(v: Any) -> Any:
    if isinstance(v, float):
        return _float_json(v)
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _json_value(x) for k, x in v.items()}
    if isinstance(v, np.ndarray):
        return _json_value(v.tolist())
    if isinstance(v, np.generic):
        return _json_value(v.item())
    if isinstance(v, bytes):
        return v.decode("utf-8", errors="replace")
    if isinstance(v, complex):
        return [_float_json(v.real), _float_json(v.imag)]
    return v
