"""Conventions every scanner shares: the bytes codec of a dtype, attributes as plain
Python, and how large a coordinate may be before its values are not read."""

from __future__ import annotations

from typing import Any

import numpy as np

COORD_VALUES_LIMIT = 10_000_000  # elements: coordinate variables larger than this are not read


def bytes_codec(dtype: np.dtype) -> dict[str, Any]:
    if dtype.itemsize == 1:
        return {"name": "bytes", "configuration": {}}
    endian = "big" if dtype.byteorder == ">" or (dtype.byteorder == "=" and
                                                 np.little_endian is False) else "little"
    return {"name": "bytes", "configuration": {"endian": endian}}


def plain(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.decode("utf-8", errors="replace")
    if isinstance(v, np.ndarray):
        if v.dtype.kind in "SUO":
            items = [plain(x) for x in v.reshape(-1).tolist()]
            return items[0] if len(items) == 1 else items
        if v.size == 1:
            return v.reshape(-1)[0].item()
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    return v
