"""What a reader may open when it opens a cube: confinement and reference checks.

A cube (directory, kerchunk JSON, Icechunk repository) is data written by someone else:
opening it must not let its author make the reader open arbitrary files. `Access` is the
policy (docs/reading.md, "Confinement"):

- a reference is followed only inside the allowed roots: those recorded when the output
  was written (the sources' directories) plus those the caller passes (`allow`);
- a recorded root of `/` or inside a system location (/etc, /proc, ~/.ssh, ...) is never
  honoured, and no file inside a system location is opened, unless the caller allows it;
- relative paths and `..` are normalised (symlinks resolved) before the check;
- a source found through another (a zarr v2 store's chunk file, a kerchunk reference
  set's data file, an HDF5 link's target: recorded with `referenced_by`) must, its links
  followed, lie where that source names it: inside the store, or in the directory the
  set names it in (`check_source`), whatever roots the cube records (a cube written
  before this was checked recorded a link's target directory as a root);
- URLs other than `file://` (http, s3, ...) are refused unless the caller allows a prefix
  of them (`allow=["s3://bucket/data/"]`).

`check_rows` validates manifest rows against the recorded source sizes, vectorized, block by
block as a reader fetches them: an edited manifest is refused with the cube, array, chunk
and source named, never read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ..formats import system_locations
from ..model import MATERIALIZED, REF_DTYPE, Location, Problem, VirtualizeError

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def not_allowed(what: str | os.PathLike, message: str, variable: str | None = None) -> VirtualizeError:
    return VirtualizeError([Problem(Location(str(what), variable), "reference-not-allowed",
                                    message)],
                           f"{what}: refused to follow a reference (see "
                           "Confinement in `virtualize docs reading`)")


def invalid(what: str | os.PathLike, message: str, variable: str | None = None,
            block: tuple[int, ...] | None = None, kind: str = "invalid-cube") -> VirtualizeError:
    return VirtualizeError([Problem(Location(str(what), variable, None, block), kind, message)],
                           f"{what}: {'not a valid cube' if kind == 'invalid-cube' else kind}")


def allow_list(allow) -> list[str]:
    if allow is None:
        return []
    if isinstance(allow, (str, os.PathLike)):
        allow = [allow]
    return [os.fspath(a) for a in allow]


class Access:
    """The roots a reader of `what` (a cube, for messages) may open files in."""

    def __init__(self, what: str | os.PathLike, recorded: Iterable[str], allow=None):
        self.what = str(what)
        self.system = system_locations()
        self.urls: list[str] = []  # allowed URL prefixes (non-file)
        self.url_roots: list[str] = []  # recorded URL prefixes honoured
        self.allowed: list[str] = []  # caller's local roots (resolved)
        for a in allow_list(allow):
            m = _URL.match(a)
            if m and m.group(1).lower() != "file":
                self.urls.append(a)
            else:
                self.allowed.append(os.path.realpath(_file_path(a)))
        self.roots: list[str] = list(self.allowed)
        self.ignored: list[str] = []  # recorded roots not honoured
        for r in recorded:
            if isinstance(r, str) and _URL.match(r) and not r.lower().startswith("file://"):
                if r.endswith("/") and _safe_url(r) is None and ".." not in r.split("/"):
                    self.url_roots.append(r)
                elif not any(r.startswith(u) for u in self.urls):
                    self.ignored.append(r)
                continue
            if not isinstance(r, str) or not os.path.isabs(r) or _URL.match(r):
                self.ignored.append(str(r))
                continue
            real = os.path.realpath(r)
            if real == "/" or any(_under(real, s) or _under(os.path.normpath(r), s)
                                  for s in self.system):
                if not any(_under(real, a) for a in self.allowed):
                    self.ignored.append(r)
                    continue
            self.roots.append(real)
        self._seen: dict[str, str | None] = {}

    def check(self, ref: object, variable: str | None = None) -> None:
        """Raise unless the reader may open `ref` (a path or URL)."""
        why = self.refusal(ref)
        if why is not None:
            raise not_allowed(self.what, why, variable)

    def check_source(self, source: dict) -> None:
        """Raise unless the reader may open the recorded source `source` ({path, ...,
        referenced_by}): `check` of its path, and `linked_out`."""
        self.check(source.get("path"))
        why = self.linked_out(source)
        if why is not None:
            raise not_allowed(self.what, why)

    def linked_out(self, source: dict) -> str | None:
        """Why a source found through another (`referenced_by`: a store, a reference set, a
        linking file) may not be opened: links lead it out of the place that names it (the
        store it lies in, else the directory it is named in), unless the caller allows
        where it leads. None when it may (or is not such a source)."""
        path, by = source.get("path"), source.get("referenced_by")
        if not (isinstance(path, str) and isinstance(by, str)) or _URL.match(path) or \
                not os.path.isabs(path):
            return None
        named = os.path.normpath(path)
        place = by if os.path.isabs(by) and _under(named, os.path.normpath(by)) \
            else os.path.dirname(named)
        real = os.path.realpath(named)
        if _under(real, os.path.realpath(place)) or any(_under(real, a) for a in self.allowed):
            return None
        return (f"source {path} (found through {by}) is a link leading outside {place}, to "
                f"{real}: not followed unless the caller allows it "
                f"(allow=[{os.path.dirname(real)!r}])")

    def refusal(self, ref: object) -> str | None:
        key = ref if isinstance(ref, str) else repr(ref)
        if key not in self._seen:
            self._seen[key] = self._refusal(ref)
        return self._seen[key]

    def _refusal(self, ref: object) -> str | None:
        if not isinstance(ref, str) or not ref:
            return f"reference {ref!r} is not a path or URL"
        m = _URL.match(ref)
        if m and m.group(1).lower() != "file":
            if any(ref.startswith(u) for u in self.urls):
                return None
            if any(seg in ("..", ".") for seg in ref[m.end():].split("/")):
                return f"reference {ref} has '.' or '..' segments: not followed"
            unsafe = _safe_url(ref)
            if unsafe is not None:
                return (f"reference {ref} {unsafe}: not followed unless the caller allows it "
                        f"(allow=[{_prefix(ref)!r}])")
            if any(ref.startswith(u) for u in self.url_roots):
                return None
            roots = ", ".join(self.url_roots) or "none"
            return (f"reference {ref} is a {m.group(1)} URL outside the recorded URL roots "
                    f"({roots}): not followed unless allowed (allow=[{_prefix(ref)!r}])")
        real = os.path.realpath(_file_path(ref))
        explicitly = any(_under(real, a) for a in self.allowed)
        if not explicitly and any(_under(real, s) for s in self.system):
            return (f"reference {ref} is in a system location ({real}): not followed unless "
                    f"the caller allows it (allow=[{os.path.dirname(real)!r}])")
        if explicitly or any(_under(real, r) for r in self.roots):
            return None
        roots = ", ".join(self.roots) or "none"
        extra = f"; recorded roots not honoured: {', '.join(self.ignored)}" if self.ignored else ""
        return (f"reference {ref} ({real}) is outside the allowed roots ({roots}{extra}): "
                f"pass allow=[{os.path.dirname(real)!r}] to read it")

    def container(self, prefix: str) -> str | None:
        """Why an Icechunk virtual chunk container may not be authorized (None: it may)."""
        m = _URL.match(prefix)
        if m and m.group(1).lower() != "file":
            if any(prefix.startswith(u) for u in self.urls):
                return None
            if _safe_url(prefix) is None and any(prefix.startswith(u) for u in self.url_roots):
                return None
            return f"virtual chunk container {prefix} is not allowed (allow=[{prefix!r}])"
        path = _file_path(prefix)
        if not os.path.isabs(path):
            return f"virtual chunk container {prefix} is not an absolute path"
        why = self._refusal(path.rstrip("/") or "/")
        return None if why is None else f"virtual chunk container {prefix}: {why}"


    def within(self, prefix: str) -> bool:
        """Does the `file://` container `prefix` hold an allowed root (is it wider)?"""
        if _URL.match(prefix) and not prefix.lower().startswith("file://"):
            return _safe_url(prefix) is None and any(r.startswith(prefix) for r in self.url_roots)
        real = os.path.realpath(_file_path(prefix))
        return any(_under(r, real) for r in self.roots)


_METADATA_HOSTS = ("metadata.google.internal", "metadata", "instance-data",
                   "metadata.azure.internal")


def _safe_url(url: str) -> str | None:
    """Why a URL taken from a cube is never followed on its say-so (None: it may be):
    link-local and cloud metadata addresses (169.254.0.0/16, fe80::/10, fd00:ec2::254,
    metadata.google.internal, ...), where a cube could make its reader fetch credentials."""
    import ipaddress
    from urllib.parse import urlsplit

    try:
        host = (urlsplit(url).hostname or "").lower().rstrip(".")
    except ValueError:
        return "is not a valid URL"
    if host in _METADATA_HOSTS or host.endswith(".internal") and "metadata" in host:
        return f"names a cloud metadata host ({host})"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_link_local or str(ip) in ("fd00:ec2::254", "100.100.100.200"):
        return f"names a link-local or cloud metadata address ({ip})"
    return None


def _file_path(ref: str) -> str:
    if ref.lower().startswith("file://"):
        rest = ref[len("file://"):]
        if rest.startswith("localhost/"):
            rest = rest[len("localhost"):]
        return rest
    return ref


def _prefix(url: str) -> str:
    m = _URL.match(url)
    head = m.group(0) if m else ""
    rest = url[len(head):]
    return head + (rest.rsplit("/", 1)[0] + "/" if "/" in rest else rest)


def inside(root: Path, path: Path) -> str:
    """`path` with symlinks resolved, if it lies inside the cube `root`; else refused."""
    real = os.path.realpath(path)
    if not _under(real, os.path.realpath(root)):
        rel = os.path.relpath(path, root)
        raise not_allowed(root, f"the cube's file {rel} leads outside the cube ({real})")
    return real


def read_inside(root: Path, path: Path) -> bytes | None:
    """The bytes of a cube's own file, only if it really lies inside the cube (no
    symlink out of it, no `..`); None when it does not exist."""
    if not os.path.lexists(path):
        return None
    real = inside(root, path)
    try:
        fd = os.open(real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        return None
    except OSError as e:
        raise invalid(root, f"cannot read {os.path.relpath(path, root)}: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        if not os.path.isfile(real):
            return None
        return f.read()


def check_shape(what: str | os.PathLike, name: str, dtype: np.dtype, shape: tuple[int, ...],
                grid: tuple[int, ...] | None) -> None:
    """A manifest's dtype and shape (from its `.npy` header) fit the array's chunk grid."""
    if dtype != REF_DTYPE:
        raise invalid(what, f"manifest has dtype {dtype}, not {REF_DTYPE}", name)
    if grid is not None and 0 in tuple(grid):  # an empty array: no chunk is ever read
        return
    if grid is not None and tuple(shape) != tuple(grid):
        if not (len(shape) == len(grid) and all(a == b or a == 0 for a, b in zip(shape, grid))):
            raise invalid(what, f"manifest has shape {tuple(shape)}, the chunk grid is "
                                f"{tuple(grid)}", name)


def check_rows(what: str | os.PathLike, name: str, rows: np.ndarray, start: int,
               shape: tuple[int, ...], sources: list[str], sizes: list[int],
               expected: np.ndarray | None = None, origin: tuple[int, ...] | None = None
               ) -> None:
    """Rows `start`, `start + 1`, ... (C order over the manifest's `shape`) of array `name`:
    every reference names a recorded source and lies inside it, and (with `expected`, the
    byte length of each of these rows' chunks, for uncompressed arrays) is as long as its
    chunk. Vectorized; a reader calls it on each block of rows it fetches. `origin`: where
    a manifest segment's first chunk is in the array (for the chunk names of problems)."""
    path = np.asarray(rows["path"], dtype=np.uint64)
    off = np.asarray(rows["offset"], dtype=np.uint64)
    length = np.asarray(rows["length"], dtype=np.uint64)
    virt = (length > 0) & (path != MATERIALIZED)
    bad_path = virt & (path >= len(sources))
    size = np.asarray(sizes, dtype=np.uint64)
    idx = np.where(virt & ~bad_path, path, 0).astype(np.intp)
    sz = size[idx] if len(size) else np.zeros(len(rows), dtype=np.uint64)
    bad_range = virt & ~bad_path & ((off > sz) | (length > sz - np.minimum(off, sz)))
    bad_length = np.zeros_like(virt)
    if expected is not None and expected.size == length.size:
        bad_length = virt & (length != expected)
    bad = np.flatnonzero(bad_path | bad_range | bad_length)
    if not bad.size:
        return
    problems = []
    for i in bad[:20].tolist():
        block = tuple(int(x) for x in np.unravel_index(start + i, shape)) if shape else ()
        if origin:
            block = tuple(b + o for b, o in zip(block, origin))
        key = "c" + "".join(f"/{b}" for b in block)
        p = int(path[i])
        if bad_path[i]:
            msg = f"chunk {name}/{key} names source #{p}; the cube has {len(sources)}"
        elif bad_range[i]:
            msg = (f"chunk {name}/{key} wants {int(length[i])} bytes at {int(off[i])} of "
                   f"{sources[p]}, which has {int(size[p])} bytes")
        else:
            msg = (f"chunk {name}/{key} is uncompressed and holds {int(expected[i])} "
                   f"bytes, but its reference is {int(length[i])} bytes long")
        problems.append(Problem(Location(str(what), name, None, block), "invalid-reference", msg))
    raise VirtualizeError(problems, f"{what}: {bad.size} reference(s) of {name} lie outside "
                                    "their sources: the manifest was edited or damaged")


def grid_shape(doc: dict) -> tuple[int, ...] | None:
    """The chunk grid's shape from an array's zarr.json (regular or rectilinear)."""
    try:
        shape = [int(n) for n in doc["shape"]]
        grid = doc["chunk_grid"]
        conf = grid["configuration"]
        if grid["name"] == "regular":
            return tuple(-(-n // int(c)) if int(c) > 0 else 0
                         for n, c in zip(shape, conf["chunk_shape"], strict=True))
        if grid["name"] == "rectilinear":
            out = []
            for n, spec in zip(shape, conf["chunk_shapes"], strict=True):
                if isinstance(spec, int):
                    out.append(-(-n // spec) if spec > 0 else 0)
                    continue
                count = 0
                for item in spec:
                    count += int(item[1]) if isinstance(item, list) else 1
                out.append(count)
            return tuple(out)
    except (KeyError, TypeError, ValueError, IndexError):
        return None
    return None


def stored_bytes_of_rows(spec, shape: tuple[int, ...], start: int, stop: int,
                         origin: tuple[int, ...] | None = None) -> np.ndarray | None:
    """For an array whose only codec is `bytes` (uncompressed), the byte length each of
    manifest rows start..stop (C order over `shape`) must have, from `chunk_lengths(doc)`
    (a manifest length that differs would make zarr fail to reshape, or read past the
    chunk), else None: what a reader checking one block of rows needs (its memory is
    the block's, not the grid's). `origin`: a manifest segment's first chunk in the grid."""
    if spec is None:
        return None
    itemsize, runs = spec
    origin = origin or (0,) * len(shape)
    grid = tuple(int(ends[-1]) if len(ends) else 0 for _, ends in runs)
    if len(grid) != len(shape) or any(o + n > g for o, n, g in zip(origin, shape, grid)) or \
            (not any(origin) and grid != tuple(shape)):
        return None
    out = np.full(stop - start, itemsize, dtype=np.uint64)
    if not shape:
        return out
    for axis, i in enumerate(np.unravel_index(np.arange(start, stop), shape)):
        i = i + origin[axis]
        values, ends = runs[axis]
        out *= values[np.searchsorted(ends, i, side="right")]
    return out


def chunk_lengths(doc: dict) -> tuple[int, list[tuple[np.ndarray, np.ndarray]]] | None:
    """For an uncompressed array (only the `bytes` codec): its item size and, per axis,
    the lengths of its chunks along it as runs: (length of each run, cumulative chunk count
    at each run's end), as small as the document's grid (a regular axis is one run).
    None for any other array."""
    try:
        codecs = doc.get("codecs") or []
        if len(codecs) != 1 or codecs[0].get("name") != "bytes":
            return None
        itemsize = np.dtype(doc["data_type"]).itemsize
        shape = [int(n) for n in doc["shape"]]
        grid = doc["chunk_grid"]
        conf = grid["configuration"]
        runs = []
        for axis, n in enumerate(shape):
            spec = (conf["chunk_shape"][axis] if grid["name"] == "regular"
                    else conf["chunk_shapes"][axis])
            if isinstance(spec, int):
                count = -(-n // spec) if spec > 0 else 0
                pairs = [(spec, count)] if count else []
            else:
                pairs = [(int(item[0]), int(item[1])) if isinstance(item, list) else (int(item), 1)
                         for item in spec]
            values = np.array([v for v, _ in pairs], dtype=np.uint64)
            ends = np.cumsum([c for _, c in pairs], dtype=np.int64)
            runs.append((values, ends))
        return itemsize, runs
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):
        return None
