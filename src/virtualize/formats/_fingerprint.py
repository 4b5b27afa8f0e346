"""A source's fingerprint: one digest over what the cube takes from it (its block
tables and recorded digests), so that a file whose modification time alone changed can
be re-scanned and found unchanged (docs/reading.md, Staleness).

For each variable (by name): its name, dtype, shape, block shape and padding, and all
else the cube takes from the file about it (attributes, fill value, codecs, dimension
names); for the
inventory's own file every block row (path, offset, length, in grid order) and its
recorded digest and values (an `--inline`d variable is digested for this: `ScanHint.inline`);
the groups' attributes and the dimensions; for a data file whose index the file's scan read (an HDF5
external link's target) the positions and rows of the blocks held in it. Data files named by a kerchunk
reference set get none: their rows come from the reference set, and re-reading it says
nothing of their bytes. Versioned ("v1:"): a later virtualize whose scanner records
other tables finds old fingerprints different (stale, never wrongly unchanged).

Which variables carry digests depends on how the file was scanned (its `ScanHint`:
concatenated along which dimension, alone, as a mosaic tile), so a fingerprint names its
hint ("v1:concat=time:<hex>"): a re-scan to prove a file unchanged scans it as it was
scanned for the cube (`hint_of`)."""

from __future__ import annotations

import hashlib
import struct

import numpy as np

from ..model import REF_DTYPE, FileInventory
from ._planning import ScanHint

VERSION = "v1"  # (its content grew since: older fingerprints differ, stale, never wrongly unchanged)


def hint_tag(hint: ScanHint | None) -> str:
    """The hint as a fingerprint names it: planner, "!" when alone, "@" and the layout
    when not the format's default, "=dim" when named, "+" and a hypercube's axes (hex,
    comma-separated) when any, then "~" and the inlined variables' names (hex,
    comma-separated) when any."""
    hint = hint or ScanHint()
    inline = ("~" + ",".join(n.encode().hex() for n in sorted(hint.inline))) \
        if hint.inline else ""
    dims = ("+" + ",".join(d.encode().hex() for d in hint.dims)) if hint.dims else ""
    return hint.planner + ("!" if hint.alone else "") + \
        (f"@{hint.layout}" if hint.layout else "") + \
        (f"={hint.concat_dim}" if hint.concat_dim is not None else "") + dims + inline


def hint_of(fingerprint: str) -> ScanHint | None:
    """The hint a fingerprint was made under (None: not a fingerprint of this form)."""
    parts = fingerprint.split(":", 1)
    if len(parts) != 2 or parts[0] != VERSION or ":" not in parts[1]:
        return None
    tag = parts[1].rsplit(":", 1)[0]
    tag, tilde, names = tag.rpartition("~") if "~" in tag else (tag, "", "")
    inline = frozenset(bytes.fromhex(n).decode() for n in names.split(",") if n)
    tag, _, axes = tag.partition("+")
    dims = tuple(bytes.fromhex(d).decode() for d in axes.split(",") if d)
    planner, _, dim = tag.partition("=")
    planner, _, layout = planner.partition("@")
    alone = planner.endswith("!")
    return ScanHint(planner.rstrip("!"), dim if "=" in tag else None, alone, inline, dims,
                    layout or None)


# the plain types of most values, by exact type: their bytes as the last rule below makes them
_PLAIN = {str: b"Rstr", int: b"Rint", bool: b"Rbool", type(None): b"RNoneType"}
_DOUBLE = struct.Struct("=d")  # a float's bytes as np.float64(x).tobytes() gives them


def _canon(x) -> bytes:
    """A value (attribute, fill value, codec configuration) as bytes that differ whenever
    it does, bit for bit (-0.0 from 0.0, NaN payloads; no numpy summarizing of arrays).
    (The plain values inside a dict or list are made by `_leaf` without a further call:
    they are most of a file's.)"""
    t = type(x)
    if t is dict:
        return b"D{" + b",".join([b"Rstr" + repr(str(k)).encode() + b":" + _leaf(x[k])
                                  for k in sorted(x, key=str)]) + b"}"
    if t is list or t is tuple:
        return b"L[" + b",".join([_leaf(e) for e in x]) + b"]"
    return _leaf(x)


def _leaf(x) -> bytes:
    """`_canon(x)`: a plain value here, a dict or list by `_canon`, the rest `_other`."""
    t = type(x)
    plain = _PLAIN.get(t)
    if plain is not None:
        return plain + repr(x).encode()
    if t is float:
        return b"F" + _DOUBLE.pack(x)
    if t is dict or t is list or t is tuple:
        return _canon(x)
    return _other(x)


def _other(x) -> bytes:
    if isinstance(x, np.ndarray):
        if x.dtype.kind == "O":
            return b"O" + repr(x.shape).encode() + b"[" + \
                b",".join(_canon(e) for e in x.reshape(-1).tolist()) + b"]"
        return b"A" + x.dtype.str.encode() + repr(x.shape).encode() + \
            np.ascontiguousarray(x).tobytes()
    if isinstance(x, np.generic):
        return b"S" + x.dtype.str.encode() + np.asarray(x).tobytes()
    if isinstance(x, float):
        return b"F" + np.float64(x).tobytes()
    if isinstance(x, dict):
        return b"D{" + b",".join(_canon(str(k)) + b":" + _canon(x[k])
                                 for k in sorted(x, key=str)) + b"}"
    if isinstance(x, (list, tuple)):
        return b"L[" + b",".join(_canon(e) for e in x) + b"]"
    if isinstance(x, np.dtype):
        return b"T" + x.str.encode()
    return b"R" + type(x).__name__.encode() + repr(x).encode()


def fingerprints(inv: FileInventory, hint: ScanHint | None = None) -> list[str | None]:
    """One fingerprint per entry of `inv.sources()` (the file, then its data files), for a
    file scanned under `hint`."""
    n = 1 + len(inv.data_files)
    own = hashlib.sha256()
    # the data files of a scanned file (an HDF5 external link's target), whose index the
    # file's scan read: the rows into each; none for a reference set's (see above)
    linked = [hashlib.sha256() for _ in range(n - 1)] \
        if not inv.format.startswith(("kerchunk", "zarr2")) else []
    for name in sorted(inv.variables):
        v = inv.variables[name]
        b = v.blocks  # (None: held by value, no blocks)
        head = repr((name, v.dtype.str, tuple(v.shape), b and tuple(b.block_shape),
                     b and bool(b.padded))).encode()
        # all else the cube takes from the file about it: attributes (GeoTIFF keys too),
        # fill value, codecs, dimension names (a meaning attribute rewritten in place)
        head += _canon([v.attrs, v.fill_value, v.codecs, list(v.dims), v.is_coordinate])
        refs = np.ascontiguousarray(b.refs, dtype=REF_DTYPE).reshape(-1) if b is not None \
            else np.zeros(0, REF_DTYPE)
        # the file's own: every row (a reference set's rows are its own content), hashed
        # where they are (no copy)
        own.update(head)
        own.update(refs)
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
    # the groups' attributes and the dimensions (sizes, unlimited) the cube records
    own.update(_canon(inv.groups))
    own.update(_canon({k: [d.size, d.unlimited] for k, d in inv.dimensions.items()}))
    tag = f"{VERSION}:{hint_tag(hint)}"
    out: list[str | None] = [f"{tag}:{own.hexdigest()}"]
    out += [f"{tag}:{h.hexdigest()}" for h in linked] if linked else [None] * (n - 1)
    return out


def add_fingerprints(inv: FileInventory, hint: ScanHint | None = None) -> FileInventory:
    """The inventory (scanned under `hint`) with its own and its data files' fingerprints."""
    fps = fingerprints(inv, hint)
    inv.fingerprint = fps[0]
    for s, fp in zip(inv.data_files, fps[1:]):
        s.fingerprint = fp
    return inv
