"""The one walk of a plan every output kind writes by: groups -> arrays -> their chunks,
each chunk inline (an inline array's one chunk), referenced (the array's byte-range
table, handed over whole: each kind stores it its own vectorized way) or materialized
(copied from the sources, encoded with the array's codecs). A kind supplies a `Sink`;
`walk` (a new output) and `walk_append` (what an append adds) call it in plan order."""

from __future__ import annotations

from typing import Protocol

from ..model import ArrayPlan, Plan
from .materialize import materialized_chunks


class Sink(Protocol):
    def group(self, path: str, attrs: dict) -> None:
        """A group's document (path "" is the root)."""

    def array(self, name: str, a: ArrayPlan) -> None:
        """An array's document (a new output) or its grown document (an append: `a` is
        then the grown ArrayPlan, `grown` its plan/_state.py Grown)."""

    def chunk(self, name: str, key: str, data: bytes) -> None:
        """One stored chunk at `key` under the array (inline or materialized)."""

    def references(self, name: str, a: ArrayPlan, grown=None) -> None:
        """The array's byte-range references (`a.refs`); `grown`: an append's Grown (its
        new chunks start at `grown.start` along `grown.axis`)."""


def inline_chunks(a: ArrayPlan):
    """(chunk key, encoded bytes) of an inline array: one chunk holding all values,
    encoded with its `bytes` codec (little-endian, C order)."""
    import struct

    data = a.inline
    if data is None or data.size == 0:
        return
    key = "c" if data.ndim == 0 else "c/" + "/".join("0" for _ in range(data.ndim))
    if data.dtype.kind == "T":  # zarr's vlen-utf8: item count, then each length and bytes
        items = [str(x).encode("utf-8") for x in data.reshape(-1)]
        yield key, b"".join([struct.pack("<I", len(items)),
                             *(struct.pack("<I", len(b)) + b for b in items)])
        return
    yield key, data.tobytes(order="C")


def walk(plan: Plan, sink) -> None:
    """Every node and chunk of `plan`, in plan order, into `sink`."""
    for group, attrs in plan.groups.items():
        sink.group(group, attrs)
    for name, a in plan.arrays.items():
        _array(plan, name, a, sink, None)


def walk_append(merged, sink) -> None:
    """What an append adds (plan/_state.py `Merged`): each grown array's document, its
    inline chunk or its new chunks' references and materialized chunks."""
    for name, g in merged.grown.items():
        _array(merged.plan, name, g.array, sink, g)


def _array(plan: Plan, name: str, a: ArrayPlan, sink, grown) -> None:
    if grown is None:
        sink.array(name, a)
    else:
        sink.array(name, a, grown)
    if a.inline is not None:
        for key, data in inline_chunks(a):
            sink.chunk(name, key, data)
        return
    if grown is None:
        sink.references(name, a)
    else:
        sink.references(name, a, grown)
    for key, data in materialized_chunks(plan, a):  # native chunks at their keys
        sink.chunk(name, key, data)
