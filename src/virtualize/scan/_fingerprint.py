"""A source's fingerprint: one digest over what the cube takes from it (its block
tables and recorded digests), so that a file whose modification time alone changed can
be re-scanned and found unchanged (docs/reading.md, Staleness).

For each variable (by name): its name, dtype, shape, block shape and padding, the
positions and (offset, length) of the blocks held in that source, and, for the
inventory's own file, its recorded digest and values. Data files named by a kerchunk
reference set get none: their rows come from the reference set, and re-reading it says
nothing of their bytes. Versioned ("v1:"): a later virtualize whose scanner records
other tables finds old fingerprints different (stale, never wrongly unchanged)."""

from __future__ import annotations

import hashlib

import numpy as np

from ..model import MATERIALIZED, REF_DTYPE, FileInventory

VERSION = "v1"


def fingerprints(inv: FileInventory) -> list[str | None]:
    """One fingerprint per entry of `inv.sources()` (the file, then its data files)."""
    n = 1 + len(inv.data_files)
    hashes = [hashlib.sha256() for _ in range(n)]
    for name in sorted(inv.variables):
        v = inv.variables[name]
        b = v.blocks  # (None: held by value, no blocks)
        head = repr((name, v.dtype.str, tuple(v.shape), b and tuple(b.block_shape),
                     b and bool(b.padded))).encode()
        refs = np.ascontiguousarray(b.refs).reshape(-1) if b is not None \
            else np.zeros(0, REF_DTYPE)
        paths = refs["path"]
        for k, h in enumerate(hashes):
            # (a block held by the file itself, MATERIALIZED, is the file's own)
            mine = np.flatnonzero((paths == k) | ((paths == MATERIALIZED) if not k else False))
            h.update(head)
            h.update(mine.astype("<i8").tobytes())
            h.update(np.ascontiguousarray(refs["offset"][mine]).astype("<u8").tobytes())
            h.update(np.ascontiguousarray(refs["length"][mine]).astype("<u8").tobytes())
        own = hashes[0]
        own.update(repr(v.digest).encode())
        if v.values is not None:
            vals = np.asarray(v.values)
            own.update(repr(vals.tolist()).encode() if vals.dtype.kind == "O"
                       else np.ascontiguousarray(vals).tobytes())
    out: list[str | None] = [f"{VERSION}:{h.hexdigest()}" for h in hashes]
    if inv.format.startswith("kerchunk"):
        out[1:] = [None] * (n - 1)
    return out


def add_fingerprints(inv: FileInventory) -> FileInventory:
    """The inventory with its own and its data files' fingerprints set."""
    fps = fingerprints(inv)
    inv.fingerprint = fps[0]
    for s, fp in zip(inv.data_files, fps[1:]):
        s.fingerprint = fp
    return inv
