"""Zarr v2 stores as sources: a local store (a directory with `.zgroup` or `.zarray`, or
a consolidated `.zmetadata`), or a remote one (a URL ending in `.zarr`, or naming a
store's metadata object: `remote_store`), becomes a `FileInventory` whose block tables
reference the chunk files where they are: each chunk file is one block (path = that file,
one of `FileInventory.data_files`; offset 0; length = its size), an absent chunk file is
an absent chunk (it reads as the fill value, as zarr reads it).

The v2 metadata is mapped to v3 by the kerchunk source's scanner (formats/kerchunk.py,
whose reference sets hold the same zarr v2 keys): dtype with its byte order, order C and F
(a `transpose` codec), `fill_value` (NaN / Infinity strings; `null` with absent chunks is
refused, `unknown-fill`), `dimension_separator` "." or "/", the compressor and filters as
`numcodecs.*` v3 codecs (the ones with an exact v3 equivalent; others `unsupported-filter`),
`.zattrs` with xarray's `_ARRAY_DIMENSIONS` as dimension names; the fill value is also
the `_FillValue` attribute, as xarray reads a v2 store. Object, string, datetime
and structured dtypes are skipped (`unsupported-type`, not fatal).

The metadata comes from the consolidated `.zmetadata` when the store has one (what zarr
and xarray read), else from a walk of the `.zgroup` groups (on object storage, over one
listing of the store; over http(s), which cannot list, a group needs `.zmetadata`).
Scanning reads only metadata files and stats the chunk files (coordinates and shared
variables are read as for any source). Values (coordinates, `--inline`, materialize, the
decode check) are read by zarr-python itself with `zarr_format=2`.
"""

from __future__ import annotations

import functools
import json
import math
import os
import stat
from typing import Any

import numpy as np

from .. import storage
from ..model import MATERIALIZED, FileInventory, Location, Problem, Source, VirtualizeError
from ._io import MAX_BLOCKS, _system_cache, inside
from ._planning import finish
from .base import Format
from .kerchunk import _Scanner, is_parquet_references

ROOT_ARRAY = "data"  # the name of an array stored at the root of a store
V2_KEYS = (".zgroup", ".zarray", ".zattrs")


def is_zarr2_store(path: str) -> bool:
    """A local directory holding a zarr v2 group or array (not a kerchunk parquet set,
    which has a `.zmetadata` too, nor a zarr v3 store or a cube)."""
    if storage.is_url(path) or not os.path.isdir(path):
        return False
    has = {n for n in (*V2_KEYS, ".zmetadata", "zarr.json") if os.path.isfile(os.path.join(path, n))}
    if "zarr.json" in has or not has & {".zgroup", ".zarray", ".zmetadata"}:
        return False
    if has & {".zgroup", ".zarray"}:
        return True
    return not is_parquet_references(path) and _consolidated(path) is not None


def _consolidated(path: str) -> dict | None:
    try:
        with open(os.path.join(path, ".zmetadata"), "rb") as f:
            doc = json.loads(f.read())
    except (OSError, ValueError):
        return None
    if isinstance(doc, dict) and isinstance(doc.get("metadata"), dict) and \
            "zarr_consolidated_format" in doc:
        return doc
    return None


def _text(raw: bytes) -> str:
    """A metadata document's text; "" (no JSON: refused as corrupt, located) when it is no
    UTF-8, which zarr-python refuses to read."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return ""


class _StoreRefs:
    """The reference mapping of `kerchunk._Scanner` over a directory store: `meta` (zarr
    key -> JSON text) and `get(key)`: None for an absent chunk file, else (path, 0, size),
    size None when the path is there but cannot be referenced (`why[path]` says why: no
    regular file, in a system location, or a link leading out of the store).

    Confinement: every file read or referenced (metadata and chunks) must lie inside the
    store once its links are followed (realpath: a chunk that is a link, a chunk directory
    that is one, a chain of them); one leading out is refused (`reference-not-allowed`),
    never read nor referenced: a store must not make the cube serve another file's bytes.
    The store itself may be reached through a link (it is what the caller named)."""

    kind = "directory"
    gen: list = []

    def __init__(self, path: str):
        self.path = path
        self.real = os.path.realpath(path)
        self.bytes_read = 0
        self.meta: dict[str, str] = {}
        self.why: dict[str, str] = {}
        self.stats: dict[str, os.stat_result] = {}
        self.refused: set[str] = set()  # chunk paths in a system location or out of the store
        self._real_dirs: dict[str, tuple[str, str | None]] = {}
        zmeta = os.path.join(path, ".zmetadata")
        doc = _consolidated(path) if os.path.isfile(zmeta) and self._confined(zmeta) else None
        if doc is not None:
            self.bytes_read += os.path.getsize(os.path.join(path, ".zmetadata"))
            self.meta = {k: (v if isinstance(v, str) else json.dumps(v))
                         for k, v in doc["metadata"].items() if k.rpartition("/")[2] in V2_KEYS}
        else:
            self._walk("")

    def _walk(self, node: str) -> None:
        """The metadata of the group or array at `node`, and of its member groups/arrays."""
        d = os.path.join(self.path, *node.split("/")) if node else self.path
        for leaf in V2_KEYS:
            f = os.path.join(d, leaf)
            if os.path.isfile(f) and self._confined(f, node):
                with open(f, "rb") as fh:
                    raw = fh.read()
                self.bytes_read += len(raw)
                self.meta[f"{node}/{leaf}" if node else leaf] = _text(raw)
        here = {k.rpartition("/")[2] for k in self.meta if k.rpartition("/")[0] == node}
        if ".zarray" in here or ".zgroup" not in here:
            return  # an array's directory holds its chunks; no group, no members
        with os.scandir(d) as it:
            subdirs = sorted(e.name for e in it if e.is_dir() and not e.name.startswith("."))
        for name in subdirs:
            self._walk(f"{node}/{name}" if node else name)

    def get(self, key: str):
        p = os.path.join(self.path, *key.split("/"))
        try:
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                real = os.path.realpath(p)
                where = _system_location(real)
                st = os.stat(p)
            else:  # in its directory: where that is (a file itself a system location: named)
                real_dir, where = self._real_dir(os.path.dirname(p))
                real = os.path.join(real_dir, os.path.basename(p))
                where = where or (real if real in _system_set() else None)
        except (FileNotFoundError, NotADirectoryError):
            return None  # never written (or a dangling link): zarr reads the fill value
        except OSError as e:
            self.why[p] = f"cannot be read ({e.strerror})"
            return (p, 0, None)
        if where is not None:  # a symlink in a store must not make us reference /etc/passwd
            self.why[p] = f"it lies in a system location ({where}), which a source may not " \
                          "point into"
            self.refused.add(p)
            return (p, 0, None)
        if not inside(real, self.real):  # ... nor any file outside the store
            self.why[p] = (f"it is a link leading outside the store ({self.path}), to "
                           f"{real}: a chunk is referenced only inside its store")
            self.refused.add(p)
            return (p, 0, None)
        if not stat.S_ISREG(st.st_mode):
            self.why[p] = "is not a regular file"
            return (p, 0, None)
        self.stats[p] = st
        return (p, 0, st.st_size)

    def _confined(self, f: str, node: str = "") -> bool:
        """Raise a located `reference-not-allowed` when the metadata file `f` (of the group
        or array at `node`) is a link leading out of the store (its content would become
        the cube's metadata and attributes); True when it is inside."""
        real = os.path.realpath(f)
        if inside(real, self.real):
            return True
        rel = os.path.relpath(f, self.path)
        raise VirtualizeError([Problem(Location(self.path, node or None), "reference-not-allowed",
                                       f"{rel} is a link leading outside the store, to {real}: "
                                       "a store's metadata is read only inside it")],
                              f"{self.path}: a link leads outside the store")

    def _real_dir(self, d: str) -> tuple[str, str | None]:
        """A chunk directory with symlinks resolved, and the system location it lies in
        (once per directory: a store's chunks are many, its directories few)."""
        got = self._real_dirs.get(d)
        if got is None:
            real = os.path.realpath(d)
            got = self._real_dirs[d] = (real, _system_location(real))
        return got

class _RemoteStoreRefs:
    """`_StoreRefs` of a store on object storage or a web server (`storage`): its metadata
    from `.zmetadata`, else (object storage) a walk of a listing of the store; chunk
    objects found in that listing (one paginated list, not a request per chunk) or, over
    http(s), asked for one by one (404: never written)."""

    kind = "remote"
    gen: list = []

    def __init__(self, root: str):
        self.path = root
        self.bytes_read = 0
        self.requests = 0
        self.meta: dict[str, str] = {}
        self.why: dict[str, str] = {}
        self.stats: dict[str, storage.Stat] = {}
        self.refused: set[str] = set()
        self.http = storage.protocol(root) in ("http", "https")
        self.listing: dict[str, storage.Stat] | None = None
        if not self.http:
            self.listing = self._list()
        doc = self._json(".zmetadata")
        if isinstance(doc, dict) and isinstance(doc.get("metadata"), dict) and \
                "zarr_consolidated_format" in doc:
            self.meta = {k: (v if isinstance(v, str) else json.dumps(v))
                         for k, v in doc["metadata"].items() if k.rpartition("/")[2] in V2_KEYS}
        elif self.http:  # no listing over http: the root's own metadata only
            for leaf in V2_KEYS:
                raw = self._read(leaf)
                if raw is not None:
                    self.meta[leaf] = _text(raw)
            if ".zgroup" in self.meta:
                raise VirtualizeError([Problem(Location(root), "unreadable",
                                               "a zarr v2 group over http(s) without consolidated "
                                               "metadata (.zmetadata): its arrays cannot be listed")],
                                      f"{root}: cannot be scanned")
        else:
            self._walk("")

    def _list(self) -> dict[str, storage.Stat]:
        fs = storage.filesystem(self.path)
        base = storage.fs_path(fs, self.path).rstrip("/")
        try:
            found = storage.retrying(fs.find, base, detail=True)
        except Exception as e:
            raise storage.request_problem(self.path, e) from None
        finally:  # the listing must not answer a later stat (a staleness check) from cache
            _forget_listing(fs, base)
        self.requests += 1
        out = {}
        for name, info in found.items():
            if info.get("type") == "directory" or not name.startswith(base + "/"):
                continue
            out[name[len(base) + 1:]] = storage.Stat(int(info.get("size") or 0),
                                                     storage.info_mtime_ns(info), storage.info_etag(info))
        return out

    def _read(self, key: str) -> bytes | None:
        if self.listing is not None and key not in self.listing:
            return None
        url = f"{self.path}/{key}"
        try:
            with storage.open_source(url) as f:
                raw = f.read()
        except VirtualizeError as e:
            if e.problems[0].kind == "source-missing":
                return None
            raise
        self.bytes_read += len(raw)
        self.requests += 1
        return raw

    def _json(self, key: str):
        raw = self._read(key)
        try:
            return json.loads(raw) if raw is not None else None
        except ValueError:
            return None

    def _walk(self, node: str) -> None:
        prefix = f"{node}/" if node else ""
        for leaf in V2_KEYS:
            raw = self._read(prefix + leaf)
            if raw is not None:
                self.meta[prefix + leaf] = _text(raw)
        if prefix + ".zarray" in self.meta or prefix + ".zgroup" not in self.meta:
            return
        subdirs = sorted({k[len(prefix):].split("/", 1)[0] for k in self.listing
                          if k.startswith(prefix) and "/" in k[len(prefix):]})
        for name in subdirs:
            if not name.startswith("."):
                self._walk(prefix + name)

    def get(self, key: str):
        url = f"{self.path}/{key}"
        if self.listing is not None:
            st = self.listing.get(key)
            if st is None:
                return None  # not in the store's listing: never written
        else:
            try:
                st = storage.stat(url)
            except VirtualizeError as e:
                if e.problems[0].kind == "source-missing":
                    return None
                self.why[url] = e.problems[0].message
                return (url, 0, None)
            self.requests += 1
        self.stats[url] = st
        return (url, 0, st.st_size)


def _forget_listing(fs, base: str) -> None:
    """Drop what a listing of `base` left in the file system's directory cache (s3fs keeps
    every directory `find` saw, and answers `info` from it)."""
    cache = getattr(fs, "dircache", None)
    if cache is not None:
        for k in [k for k in list(cache) if k == base or k.startswith(base + "/")]:
            cache.pop(k, None)
    fs.invalidate_cache(base)


def _system_location(real: str) -> str | None:
    """The system location a resolved path lies in (`_io.system_location` without its
    `realpath`), or None."""
    return next((s for s in _system_cache() if inside(real, s)), None)


@functools.cache
def _system_set() -> frozenset[str]:
    return frozenset(_system_cache())


def invalid_zarray(doc) -> str | None:
    """Why zarr-python refuses (or reads only as it repairs) an array's `.zarray`, or None:
    its own parse (`ArrayV2Metadata.from_dict`: the separator, the data type, the codecs,
    the fill value), whose shape and chunks must be the stored ones (zarr reads a chunk
    length of 0 as 1, and the chunk files, written otherwise, then do not decode); and the
    chunk grid must fit a block table (`MAX_BLOCKS`), checked before it is allocated."""
    import warnings

    from zarr.core.metadata.v2 import ArrayV2Metadata

    if not isinstance(doc, dict):
        return "it is no JSON object"
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        try:
            meta = ArrayV2Metadata.from_dict(dict(doc))
        except Exception as e:  # noqa: BLE001 - whatever zarr-python raises on it
            return f"zarr-python refuses it ({type(e).__name__}: {e})"
    shape, chunks = doc.get("shape"), doc.get("chunks")
    if list(meta.shape) != shape or list(meta.chunks) != chunks:
        why = str(said[0].message).split(". ")[0] if said else "read otherwise"
        return (f"zarr-python reads shape {shape}, chunks {chunks} as {list(meta.shape)}, "
                f"{list(meta.chunks)} ({why}): no reading of the stored chunks")
    cells = math.prod(-(-n // c) for n, c in zip(meta.shape, meta.chunks))
    if cells > MAX_BLOCKS:
        return (f"shape {shape} in chunks of {chunks} is {cells} chunks, more than a block "
                f"table holds ({MAX_BLOCKS})")
    return None


class _StoreScanner(_Scanner):
    root_array = ROOT_ARRAY

    def read_values(self, node: str) -> np.ndarray:
        return read_zarr2_values(self.path, node or ROOT_ARRAY)

    def _variable(self, name, node, doc, attrs, zf):
        why = invalid_zarray(doc) if zf == 2 else None
        if why is not None:  # (refused where zarr-python refuses: never read as zeros)
            self.problem(name, "corrupt", f"its .zarray: {why}; --drop {name} virtualizes "
                         "the rest")
            return None
        var = super()._variable(name, node, doc, attrs, zf)
        refs = var.blocks.refs if var is not None and var.blocks is not None else None
        empty = None if refs is None else \
            (refs["path"] > 0) & (refs["path"] != MATERIALIZED) & (refs["length"] == 0)
        if empty is not None and empty.any():  # (a chunk file, not an absent chunk)
            block = tuple(int(i) for i in np.unravel_index(int(np.flatnonzero(empty)[0]),
                                                           refs.shape))
            self.problem(name, "corrupt", f"{int(empty.sum())} chunk file(s) are empty (0 "
                         f"bytes), the first chunk {block}: zarr-python cannot decode them "
                         f"(an absent chunk reads as the fill value, an empty one fails); "
                         f"--drop {name} virtualizes the rest", block=block)
            return None
        if var is not None and var.fill_value is not None and "_FillValue" not in var.attrs:
            # xarray reads a zarr v2 fill_value as _FillValue, whatever it is (0 too: the
            # reference-set scanner leaves netCDF's defaults out, a store's are its own)
            var.attrs["_FillValue"] = var.fill_value.item()
        return var

    def _data_file(self, url: str) -> int | None:
        """A chunk file: one data file (stat'ed by `_StoreRefs.get`)."""
        k = self._file_index.get(url)
        if k is not None or url in self._missing:
            return k
        st = self.refs.stats.get(url)
        if url in self.refs.refused:
            self._refused.add(url)
        if st is None:
            self._missing[url] = self.refs.why.get(url, "cannot be read")
            return None
        self.data_files.append(Source(url, st.st_size, st.st_mtime_ns, referenced_by=self.path,
                                      etag=getattr(st, "etag", None)))
        k = self._file_index[url] = len(self.data_files)
        return k


def scan_zarr2(path: str) -> FileInventory:
    """One store's inventory: a local directory, or a store URL (`remote_store`), recorded
    by its metadata object (an object store has no directory to stat for staleness)."""
    if storage.is_url(path):
        found = remote_store(path)
        if found is None:
            raise VirtualizeError([Problem(Location(path), "unknown-format",
                                           "not a zarr v2 store")], f"{path}: not a zarr v2 store")
        root, path = found
        st = storage.stat(path)
        refs = _RemoteStoreRefs(root)
    else:
        path = os.path.abspath(path)
        st = os.stat(path)
        refs = _StoreRefs(path)
    s = _StoreScanner(path, refs)
    s.run()
    missing = [p for p in s.problems if p.kind == "missing-data-file"]
    for p in missing:  # (a chunk file of the store itself, not a reference set's data file)
        s.problems[s.problems.index(p)] = Problem(p.loc, "unreadable", p.message, p.fatal,
                                                  p.remedy)
    inv = FileInventory(path, "zarr2", st.st_size, st.st_mtime_ns, s.groups, s.dims,
                        s.variables, s.problems, bytes_read=refs.bytes_read,
                        requests=getattr(refs, "requests", 0), data_files=s.data_files)
    inv.etag = getattr(st, "etag", None)
    return inv


META_LEAVES = (".zmetadata", ".zgroup", ".zarray")


def remote_store(url: str) -> tuple[str, str] | None:
    """(the store's URL, its metadata object's URL) for a URL naming a zarr v2 store: one
    whose name ends in `.zarr` (only such URLs are asked: a request or two each), or the
    `.zmetadata` / `.zgroup` / `.zarray` object of a store; else None."""
    url = url.rstrip("/")
    root, _, leaf = url.rpartition("/")
    if leaf in META_LEAVES:
        leaves = (leaf,)
    elif leaf.lower().endswith(".zarr"):
        root, leaves = url, META_LEAVES
    else:
        return None
    for leaf in leaves:
        meta = f"{root}/{leaf}"
        try:
            storage.stat(meta)
        except VirtualizeError:
            continue
        if leaf == ".zmetadata":
            try:
                with storage.open_source(meta) as f:
                    doc = json.loads(f.read())
            except (VirtualizeError, ValueError):
                continue
            if not (isinstance(doc, dict) and "zarr_consolidated_format" in doc):
                continue
        return root, meta
    return None


def store_root(path: str) -> str:
    """The store of an inventory's path (a remote store's is its metadata object)."""
    if storage.is_url(path):
        root, _, leaf = path.rstrip("/").rpartition("/")
        return root if leaf in META_LEAVES else path.rstrip("/")
    return path


def open_zarr2(path: str):
    """The store, read-only, as zarr-python opens it with `zarr_format=2` (its consolidated
    metadata when it has some)."""
    import zarr
    from zarr.storage import FsspecStore, LocalStore

    path = store_root(str(path))
    if storage.is_url(path):
        opts = storage.options_for(storage.protocol(path))
        store = FsspecStore.from_url(path, storage_options=opts, read_only=True)
    else:
        store = LocalStore(path, read_only=True)
    return zarr.open(store, mode="r", zarr_format=2)


def read_zarr2_values(path: str, variable: str, region=None) -> np.ndarray:
    """A variable's values (or a region [a, b) per axis of them), decoded by zarr-python."""
    import zarr

    node = open_zarr2(path)
    if isinstance(node, zarr.Array):
        if variable not in ("", ROOT_ARRAY):
            raise KeyError(f"{path}: no array {variable!r} (the store is one array, "
                           f"{ROOT_ARRAY!r})")
        a = node
    else:
        a = node[variable]
    if region is None:
        return np.asarray(a[...])
    return np.asarray(a[tuple(slice(lo, hi) for lo, hi in region)])


class Zarr2(Format):
    name = "zarr2"
    title = "Zarr v2 stores"
    suffixes = ()  # a store is a directory: given by name (a directory is not expanded to it)
    inventory_formats = ("zarr2",)
    modules = (__name__,)

    def sniff(self, head: bytes, f=None) -> bool:
        return False  # a store is a directory, never a file

    def sniff_directory(self, path: str) -> bool:
        if storage.is_url(path):
            return remote_store(path) is not None
        return is_zarr2_store(path)

    def scan(self, path: str, hint=None) -> FileInventory:
        # its blocks are its chunk files: their extents are their sizes
        return finish(scan_zarr2(path), hint, extent=False)

    def read_region(self, path: str, name: str, region=None) -> Any:
        return read_zarr2_values(path, name, region)

    def reader(self, path: str) -> "_Reader":
        return _Reader(self, path)


class _Reader:
    """Regions of one store's arrays, the store opened once."""

    def __init__(self, fmt: Format, path: str):
        self.format, self.path, self._node = fmt, os.fspath(path), None

    def __enter__(self) -> "_Reader":
        return self

    def __exit__(self, *_exc) -> None:
        self._node = None

    def read(self, name: str, region):
        import zarr

        if self._node is None:
            self._node = open_zarr2(self.path)
        a = self._node if isinstance(self._node, zarr.Array) else self._node[name]
        return np.asarray(a[tuple(slice(lo, hi) for lo, hi in region)])


FORMAT = Zarr2()

__all__ = ["FORMAT", "is_zarr2_store", "read_zarr2_values", "scan_zarr2"]
