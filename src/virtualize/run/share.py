"""The caller's copy of many inventories: what files have in common held once."""

from __future__ import annotations

import numpy as np

from ..model import BlockTable, FileInventory


class Sharer:
    """Makes inventories received from workers share what is equal across files (attribute
    dicts, codecs, names, dims and shapes, dtypes, fill values, dimensions): a stack of
    10,000 files holds one copy of what they repeat, so the caller's memory grows by the
    little that differs per file (paths, block tables, coordinate values). The shared
    objects must not be changed in place (the planner copies what it edits)."""

    MAX_ARRAYS = 1024  # distinct small arrays remembered

    def __init__(self) -> None:
        self.memo: dict = {}
        self.held: set[int] = set()  # ids of the objects in memo (alive as long as it is)
        self.arrays = 0

    def _one(self, value, key=None):
        try:
            k = (type(value), key if key is not None else value)
            hash(k)
        except TypeError:  # unhashable (dicts, lists, arrays): by their pickle
            k = (type(value), _pickled(value))
            if k[1] is None:
                return value
        return self._held(value, k)

    def _array(self, a: np.ndarray) -> np.ndarray:
        """One read-only copy of equal small arrays (block tables of files laid out alike,
        coordinate values they repeat); a large one keeps its own data but takes the
        shared dtype (an unpickled array has its own dtype object, a structured one of
        about a kilobyte)."""
        if not isinstance(a, np.ndarray) or a.dtype.hasobject:
            return a
        dtype = self._dtype(a.dtype)
        if a.nbytes <= 256:
            k = (np.ndarray, dtype, a.shape, a.tobytes())
            have = self.memo.get(k)
            if have is None and self.arrays >= self.MAX_ARRAYS:  # (values unique per file)
                # a copy with the shared dtype: half the size of a view (two array objects)
                return np.array(a, dtype=dtype) if a.dtype is not dtype else a
            if have is None:
                self.arrays += 1
                have = a.view(dtype) if a.dtype is not dtype else a
                have.flags.writeable = False
                self.memo[k] = have
                self.held.add(id(have))
            return have
        return a.view(dtype) if a.dtype is not dtype else a

    def _dtype(self, d: np.dtype) -> np.dtype:
        return self._held(d, (np.dtype, d, d.str, d.isalignedstruct))

    def __call__(self, inv: FileInventory) -> FileInventory:
        one = self._one
        inv.format = one(inv.format)
        inv.groups = {one(g): one(a) for g, a in inv.groups.items()}
        inv.dimensions = {one(n): one(d, (d.name, d.size, d.unlimited))
                          for n, d in inv.dimensions.items()}
        inv.dimensions = one(inv.dimensions, tuple((n, id(d)) for n, d in inv.dimensions.items()))
        inv.groups = one(inv.groups, tuple((g, id(a)) for g, a in inv.groups.items()))
        for v in inv.variables.values():
            v.name = one(v.name)
            v.dtype = self._dtype(v.dtype)
            v.shape = one(v.shape)
            v.dims = one(v.dims)
            v.attrs = one(v.attrs)
            v.codecs = one(v.codecs)
            fill = _pickled(v.fill_value) if v.fill_value is not None else None
            if fill is not None:  # (by its bytes: -0.0 is not 0.0, NaN payloads)
                v.fill_value = one(v.fill_value, ("fill", fill))
            if v.blocks is not None:
                b = v.blocks
                b.block_shape = one(b.block_shape)
                b.refs = self._array(b.refs)
                if id(b.refs) in self.held:  # files laid out alike: one table
                    v.blocks = self._held(b, (BlockTable, b.block_shape, b.padded, id(b.refs)))
            if v.values is not None:
                v.values = self._array(v.values)
            if v.block_digests is not None and v.digest is not None:
                # (one copy of equal variables' digests: their summary names them)
                v.block_digests = self._held(v.block_digests, ("digests", v.digest))
        inv.variables = {one(n): self._variable(v) for n, v in inv.variables.items()}
        # (no empty list per file: an immutable empty tuple, shared)
        if not inv.problems:
            inv.problems = ()
        if not inv.data_files:
            inv.data_files = ()
        return inv

    def _variable(self, v):
        """The variable itself when every part of it is held (equal in an earlier file)
        and every other field (fill value, digest, ...: all of them, by their pickled
        bytes) is equal too."""
        from dataclasses import fields

        parts = (v.dtype, v.shape, v.dims, v.attrs, v.codecs, v.blocks)
        if v.values is not None:
            parts += (v.values,)
        if v.block_digests is not None:
            parts += (v.block_digests,)
        if v.blocks is None or not all(id(x) in self.held for x in parts):
            return v
        held = {id(x) for x in parts}
        key: list = [type(v)]
        for f in fields(v):
            x = getattr(v, f.name)
            if id(x) in held:
                key.append((f.name, id(x)))
            else:
                raw = _pickled(x)
                if raw is None:
                    return v
                key.append((f.name, type(x), raw))
        return self._held(v, tuple(key))

    def _held(self, value, key):
        have = self.memo.setdefault(key, value)
        self.held.add(id(have))
        return have


def _pickled(value) -> bytes | None:
    import pickle
    try:
        return pickle.dumps(value, 5)
    except Exception:
        return None
