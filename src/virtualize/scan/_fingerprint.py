"""A source's fingerprint: one digest over what the cube takes from it (its block
tables and recorded digests), so that a file whose modification time alone changed can
be re-scanned and found unchanged (docs/reading.md, Staleness).

For each variable (by name): its name, dtype, shape, block shape and padding; for the
inventory's own file every block row (path, offset, length, in grid order) and its
recorded digest and values; for a data file whose index the file's scan read (an HDF5
external link's target) the positions and rows of the blocks held in it. Data files named by a kerchunk
reference set get none: their rows come from the reference set, and re-reading it says
nothing of their bytes. Versioned ("v1:"): a later virtualize whose scanner records
other tables finds old fingerprints different (stale, never wrongly unchanged)."""

from __future__ import annotations

import hashlib

import numpy as np

from ..model import REF_DTYPE, FileInventory

VERSION = "v1"


def fingerprints(inv: FileInventory) -> list[str | None]:
    """One fingerprint per entry of `inv.sources()` (the file, then its data files)."""
    n = 1 + len(inv.data_files)
    own = hashlib.sha256()
    # the data files of a scanned file (an HDF5 external link's target), whose index the
    # file's scan read: the rows into each; none for a reference set's (see above)
    linked = [hashlib.sha256() for _ in range(n - 1)] \
        if not inv.format.startswith("kerchunk") else []
    for name in sorted(inv.variables):
        v = inv.variables[name]
        b = v.blocks  # (None: held by value, no blocks)
        head = repr((name, v.dtype.str, tuple(v.shape), b and tuple(b.block_shape),
                     b and bool(b.padded))).encode()
        refs = np.ascontiguousarray(b.refs).reshape(-1) if b is not None \
            else np.zeros(0, REF_DTYPE)
        # the file's own: every row (a reference set's rows are its own content)
        own.update(head)
        own.update(refs.astype(REF_DTYPE).tobytes())
        own.update(repr(v.digest).encode())
        if v.values is not None:
            vals = np.asarray(v.values)
            own.update(repr(vals.tolist()).encode() if vals.dtype.kind == "O"
                       else np.ascontiguousarray(vals).tobytes())
        if linked:
            paths = refs["path"]
            order = np.argsort(paths, kind="stable")  # one pass, whatever the file count
            bounds = np.searchsorted(paths[order], np.arange(1, n + 1))
            for k, h in enumerate(linked, start=1):
                mine = order[bounds[k - 1]:bounds[k]]
                h.update(head)
                h.update(mine.astype("<i8").tobytes())
                h.update(refs[mine].astype(REF_DTYPE).tobytes())
    out: list[str | None] = [f"{VERSION}:{own.hexdigest()}"]
    out += [f"{VERSION}:{h.hexdigest()}" for h in linked] if linked else [None] * (n - 1)
    return out


def add_fingerprints(inv: FileInventory) -> FileInventory:
    """The inventory with its own and its data files' fingerprints set."""
    fps = fingerprints(inv)
    inv.fingerprint = fps[0]
    for s, fp in zip(inv.data_files, fps[1:]):
        s.fingerprint = fp
    return inv
