"""Reading a cube: a read-only zarr Store that serves chunks from the source files.

`CubeStore` answers zarr's requests for a cube directory: `zarr.json` documents come from
the cube (with the manifest extension field removed, since this store resolves it), chunk
keys of virtual arrays are looked up in their `manifest.npy` (memory-mapped: one record
per chunk, no parsing of the rest) and read as byte ranges from the sources; inline chunks
are files in the cube. Sources are checked against the size and modification time recorded
when the cube was written: a changed source would read as wrong data, so it is refused.
The same holds for the kerchunk JSON (its `virtualize` section) and Icechunk repositories.

Opening is confined (access.py, docs/reading.md): only sources in the cube's table, inside
the allowed roots; the cube's own files only inside the cube; every manifest is checked
against the recorded source sizes before a chunk of its array is read.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.abc.buffer import Buffer, BufferPrototype
from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
)
from zarr.buffer import default_buffer_prototype
from zarr.storage import WrapperStore

from .access import (
    Access,
    check_refs,
    grid_shape,
    inside,
    invalid,
    read_inside,
    stored_chunk_bytes,
)
from .emit.cube import SOURCES_NAME, read_manifest
from .emit.metadata import MANIFEST_FIELD
from .model import MATERIALIZED, Location, Problem, VirtualizeError
from .storage import is_url, read_range
from .storage import stat as source_stat


@functools.cache
def register_codecs() -> None:
    """Make imagecodecs' zarr 3 codecs (imagecodecs_lzw, _jpeg, _delta, ...) known to zarr:
    TIFF cubes name them. They register by a call, not by entry points."""
    try:
        import imagecodecs.zarr
    except ImportError:
        return
    imagecodecs.zarr.register_codecs(verbose=False)


@contextlib.contextmanager
def rectilinear_enabled():
    """zarr-python reads rectilinear grids only with `array.rectilinear_chunks` on; turn it
    on for the duration of an open, then restore the caller's setting."""
    register_codecs()
    with zarr.config.set({"array.rectilinear_chunks": True}):
        yield


class CubeStore(Store):
    """Read-only zarr Store over a cube directory written by `virtualize`."""

    supports_writes = False
    supports_deletes = False
    supports_partial_writes = False
    supports_listing = True

    def __init__(self, root: str | os.PathLike, *, check_sources: bool = True, allow=None,
                 base: str | None = None):
        super().__init__(read_only=True)
        self.root = Path(root)
        # relative sources and roots (a relocatable cube) resolve against the cube's own
        # location: its directory, or the URL it was read from (`base`)
        self.base = base or os.path.abspath(self.root)
        self._manifests: dict[str, np.ndarray] = {}
        self._fds: dict[int, int] = {}
        info_path = self.root / SOURCES_NAME
        if not info_path.is_file():
            raise VirtualizeError([Problem(Location(str(self.root)), "not-a-cube",
                                           f"no {SOURCES_NAME}: not a cube written by virtualize")],
                                  f"{self.root}: not a virtualize cube")
        info = _load_json(self.root, read_inside(self.root, info_path), SOURCES_NAME)
        from .storage import resolve
        sources = [dict(s, path=resolve(s["path"], self.base))
                   for s in _source_table(self.root, info)]
        if isinstance(info.get("roots"), list):
            info["roots"] = [resolve(r, self.base) if isinstance(r, str) else r
                             for r in info["roots"]]
        arrays = info.get("arrays")
        if not isinstance(arrays, dict):
            raise invalid(self.root, f"{SOURCES_NAME} has no 'arrays' table")
        self.sources = [s["path"] for s in sources]
        self.sizes = [s["size"] for s in sources]
        self.virtual = sorted((n for n, kind in arrays.items() if kind == "virtual"),
                              key=len, reverse=True)
        self.inline = [n for n, kind in arrays.items() if kind == "inline"]
        self.access = Access(self.root, _roots(self.root, info), allow)
        for s in self.sources:  # before anything is opened
            self.access.check(s)
        if check_sources:
            problems = list(changed_sources(sources))
            if problems:
                raise VirtualizeError(problems, f"{self.root}: its source files changed since "
                                      "the cube was written; re-run virtualize")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CubeStore) and other.root == self.root

    def __repr__(self) -> str:
        return f"CubeStore({str(self.root)!r})"

    def __del__(self) -> None:
        for fd in getattr(self, "_fds", {}).values():
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- reads -----------------------------------------------------------------------

    async def get(self, key: str, prototype: BufferPrototype | None = None,
                  byte_range: ByteRequest | None = None) -> Buffer | None:
        prototype = prototype or default_buffer_prototype()
        data = self._get_bytes(key)
        if data is None:
            return None
        return prototype.buffer.from_bytes(_slice(data, byte_range))

    def _get_bytes(self, key: str) -> bytes | None:
        if key == "zarr.json" or key.endswith("/zarr.json"):
            data = read_inside(self.root, self.root / key)
            if data is None:
                return None
            doc = _load_json(self.root, data, key)
            doc.pop(MANIFEST_FIELD, None)
            return json.dumps(doc).encode()
        for name in self.virtual:
            prefix = f"{name}/c"
            if key == prefix or key.startswith(prefix + "/"):
                return self._chunk(name, key[len(prefix):].lstrip("/"))
        data = read_inside(self.root, self.root / key)
        if data is None:
            for name in self.inline:  # an inline array's one chunk: never missing
                if key == f"{name}/c" or key.startswith(f"{name}/c/"):
                    raise invalid(self.root, f"{key}: the values of the inline array {name!r} "
                                  "are missing from the cube", name)
        return data

    def _manifest(self, name: str) -> np.ndarray:
        """The array's manifest, memory-mapped, checked once against the chunk grid and
        the recorded source sizes (vectorized) before any of its chunks is read."""
        m = self._manifests.get(name)
        if m is None:
            doc_bytes = read_inside(self.root, self.root / name / "zarr.json")
            doc = _load_json(self.root, doc_bytes, f"{name}/zarr.json") \
                if doc_bytes is not None else None
            field = doc.get(MANIFEST_FIELD) if isinstance(doc, dict) else None
            try:  # (several segments when the cube was appended to: emit/cube.py)
                m = read_manifest(self.root / name, field if isinstance(field, dict) else {},
                                  lambda p: np.load(inside(self.root, p), mmap_mode="r",
                                                    allow_pickle=False))
            except (OSError, ValueError, EOFError) as e:
                raise invalid(self.root, f"{name}/manifest.npy cannot be read: {e}", name) from None
            grid = grid_shape(doc) if doc is not None else None
            check_refs(self.root, name, m, self.sources, self.sizes, grid,
                       stored_chunk_bytes(doc) if doc is not None else None)
            self._manifests[name] = m
        return m

    def _chunk(self, name: str, rest: str) -> bytes | None:
        m = self._manifest(name)
        try:
            idx = tuple(int(i) for i in rest.split("/")) if rest else ()
        except ValueError:
            return None
        if len(idx) != m.ndim or any(i < 0 or i >= n for i, n in zip(idx, m.shape)):
            return None
        rec = m[idx]
        if int(rec["path"]) == MATERIALIZED:  # copied into the cube: a native chunk file
            data = read_inside(self.root, self.root / name / ("c/" + rest if rest else "c"))
            if data is None:  # would read as fill: the cube is damaged
                raise invalid(self.root, f"chunk {name}/c/{rest} is stored in the cube (its "
                              "manifest says so) but its file is missing", name, idx)
            return data
        length = int(rec["length"])
        if length == 0:
            return None
        src = int(rec["path"])
        if is_url(self.sources[src]):
            self.access.check(self.sources[src])
            data = read_range(self.sources[src], int(rec["offset"]), length)
        else:
            data = os.pread(self._fd(src), length, int(rec["offset"]))
        if len(data) != length:
            raise VirtualizeError([Problem(
                Location(self.sources[src], name, None, idx), "source-changed",
                f"chunk {name}/c/{rest} wants {length} bytes at {int(rec['offset'])}, the file "
                f"ended after {len(data)}: it changed since {self.root} was written")])
        return data

    def _fd(self, i: int) -> int:
        fd = self._fds.get(i)
        if fd is None:
            self.access.check(self.sources[i])
            try:
                fd = os.open(self.sources[i], os.O_RDONLY)
            except OSError as e:
                raise VirtualizeError([Problem(Location(self.sources[i]), "source-missing",
                                               f"cannot be opened: {e.strerror}")]) from None
            self._fds[i] = fd
        return fd

    async def get_partial_values(self, prototype: BufferPrototype,
                                 key_ranges: Iterable[tuple[str, ByteRequest | None]]
                                 ) -> list[Buffer | None]:
        return [await self.get(k, prototype, r) for k, r in key_ranges]

    async def exists(self, key: str) -> bool:
        return self._get_bytes(key) is not None

    # -- listing (of the cube's own files: groups and arrays) --------------------------

    async def list(self) -> AsyncIterator[str]:
        for dirpath, _dirs, files in os.walk(self.root):
            rel = Path(dirpath).relative_to(self.root).as_posix()
            for f in files:
                yield f if rel == "." else f"{rel}/{f}"

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        async for key in self.list():
            if key.startswith(prefix):
                yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        d = self.root / prefix.rstrip("/")
        if d.is_dir():
            for entry in sorted(os.listdir(d)):
                # child nodes and this node's own document; not the cube's bookkeeping files
                if entry == "zarr.json" or (d / entry / "zarr.json").is_file():
                    yield entry

    # -- writes are refused ------------------------------------------------------------

    async def set(self, key: str, value: Buffer) -> None:
        self._check_writable()

    async def delete(self, key: str) -> None:
        self._check_writable()


def _slice(data: bytes, r: ByteRequest | None) -> bytes:
    if r is None:
        return data
    if isinstance(r, RangeByteRequest):
        return data[r.start:r.end]
    if isinstance(r, OffsetByteRequest):
        return data[r.offset:]
    if isinstance(r, SuffixByteRequest):
        return data[max(0, len(data) - r.suffix):]
    raise ValueError(f"unexpected byte range {r!r}")


def _load_json(what: Path, data: bytes | None, name: str) -> dict:
    if data is None:
        raise invalid(what, f"{name} is missing")
    try:
        doc = json.loads(data)
    except ValueError as e:
        raise invalid(what, f"{name} is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise invalid(what, f"{name} is not a JSON object")
    return doc


def _source_table(what, info: dict) -> list[dict[str, Any]]:
    """The recorded sources, each {path: absolute str, size: int >= 0, mtime_ns: int}."""
    sources = info.get("sources")
    if not isinstance(sources, list):
        raise invalid(what, "no source table")
    for i, s in enumerate(sources):
        if not (isinstance(s, dict) and isinstance(s.get("path"), str)
                and isinstance(s.get("size"), int) and not isinstance(s.get("size"), bool)
                and s["size"] >= 0 and isinstance(s.get("mtime_ns"), int)):
            raise invalid(what, f"source #{i} is not {{path, size, mtime_ns}}: {s!r:.200}")
        if "\x00" in s["path"]:
            raise invalid(what, f"source #{i}'s path holds a NUL byte: {s['path']!r:.200}")
    return sources


def _roots(what: Path, info: dict) -> list[str]:
    """The recorded roots; an output without them (older, or edited) has its own
    directory only, as a kerchunk JSON virtualize did not write."""
    roots = info.get("roots")
    if roots is None:
        return [os.path.dirname(os.path.realpath(what))]
    if not isinstance(roots, list):
        raise invalid(what, "'roots' is not a list")
    return roots


def changed_sources(sources: list[dict[str, Any]]):
    from .storage import forget

    forget()  # nothing remembered from a scan: ask the servers now
    for s in sources:
        if is_url(s["path"]):
            try:
                st = source_stat(s["path"])
            except VirtualizeError as e:
                yield from e.problems
                continue
            if st.st_size != s["size"] or (s.get("etag") is not None and st.etag != s["etag"]):
                yield Problem(Location(s["path"]), "source-changed",
                              f"changed since it was recorded: size {st.st_size:,} bytes "
                              f"(recorded {s['size']:,}), ETag {st.etag} (recorded "
                              f"{s.get('etag')})")
            continue
        try:
            st = os.stat(s["path"])
        except OSError as e:
            yield Problem(Location(s["path"]), "source-missing", f"cannot be opened: {e.strerror}")
            continue
        if st.st_size != s["size"] or st.st_mtime_ns != s["mtime_ns"]:
            yield Problem(Location(s["path"]), "source-changed",
                          f"changed since it was recorded: size {st.st_size:,} bytes (recorded "
                          f"{s['size']:,}), modified {_when(st.st_mtime_ns)} (recorded "
                          f"{_when(s['mtime_ns'])})")


def _when(ns: int) -> str:
    """A modification time in ns as UTC, to the nanosecond (a rewrite may keep the second)."""
    import datetime

    try:
        t = datetime.datetime.fromtimestamp(ns // 10**9, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return f"{ns} ns"
    return f"{t:%Y-%m-%d %H:%M:%S}.{ns % 10**9:09d} UTC"


class ConsolidatedView(WrapperStore):
    """A read-only view of a store whose root `zarr.json` is served with the whole
    hierarchy consolidated into it, so every array's metadata is parsed when the group is
    opened (inside `rectilinear_enabled`) rather than at first access, when the caller's
    zarr config may refuse rectilinear grids. Used over cube directories and Icechunk
    repositories (which keep no consolidated metadata)."""

    async def get(self, key: str, prototype: BufferPrototype | None = None,
                  byte_range: ByteRequest | None = None) -> Buffer | None:
        prototype = prototype or default_buffer_prototype()
        if key != "zarr.json" or byte_range is not None:
            return await self._store.get(key, prototype, byte_range)
        root = await self._store.get(key, prototype)
        if root is None:
            return None
        doc = json.loads(root.to_bytes())
        meta = {}
        async for k in self._store.list():
            if k.endswith("/zarr.json"):
                buf = await self._store.get(k, prototype)
                if buf is not None:
                    meta[k[: -len("/zarr.json")]] = json.loads(buf.to_bytes())
        doc["consolidated_metadata"] = {"kind": "inline", "must_understand": False,
                                        "metadata": meta}
        return prototype.buffer.from_bytes(json.dumps(doc).encode())


def open_cube(path: str | os.PathLike, *, check_sources: bool = True, allow=None) -> zarr.Group:
    """Open a cube directory, a kerchunk reference JSON or an Icechunk repository written
    by virtualize as a read-only zarr group. `allow`: more roots (paths, or URL prefixes)
    the reader may open files in (docs/reading.md, Confinement)."""
    with rectilinear_enabled():
        store = open_store(path, check_sources=check_sources, allow=allow)
        try:
            return zarr.open_group(store, mode="r", zarr_format=3)
        except VirtualizeError:
            raise
        except (ValueError, TypeError, KeyError) as e:  # metadata zarr cannot take (edited)
            raise invalid(path, f"its metadata cannot be opened by zarr: {type(e).__name__}: "
                                f"{e}") from None


def open_store(path: str | os.PathLike, *, check_sources: bool = True, allow=None,
               base: str | None = None) -> Store:
    """The read-only zarr store of a cube of any of the three kinds (checked and confined).
    `base`: where it really is (the URL of a downloaded copy), for relative sources."""
    from .storage import is_url, normalize
    if is_url(path):  # an output on object storage: its documents and manifests copied here
        import tempfile

        from .emit.remote import download
        tmp = tempfile.mkdtemp(prefix="virtualize-open-")
        import shutil
        import weakref

        try:
            local = download(normalize(path), tmp)
            # relative sources (a relocatable output) resolve against its URL
            store = open_store(local, check_sources=check_sources, allow=allow,
                               base=normalize(path))
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        weakref.finalize(store, shutil.rmtree, tmp, True)  # the copy goes with the store
        return store
    path = Path(path)
    if path.is_file() or (path.suffix == ".json" and not path.is_dir()):
        # a file is a kerchunk reference JSON, whatever its name (`--format kerchunk -o refs`)
        from .storage import dirname
        return kerchunk_store(path, check_sources=check_sources, allow=allow,
                              base=dirname(base) if base else None)
    from .emit.icechunk import is_icechunk_repo, open_icechunk
    if is_icechunk_repo(path):
        store = open_icechunk(path, allow=allow, base=base)
        if check_sources:  # as for cube directories: refused at open, not at a chunk's read
            from .emit.icechunk import recorded
            info = recorded(path, base) or {}
            problems = list(changed_sources(info.get("sources") or []))
            if problems:
                raise VirtualizeError(problems, f"{path}: its source files changed since "
                                      "the repository was written; re-run virtualize")
        return ConsolidatedView(store)
    return ConsolidatedView(CubeStore(path, check_sources=check_sources, allow=allow, base=base))


def kerchunk_store(path: str | os.PathLike, *, check_sources: bool = True, allow=None,
                   base: str | None = None):
    """A zarr store over a kerchunk reference JSON (fsspec `reference://`). Written by
    virtualize, it records its sources (checked for changes, like a cube directory's) and
    its allowed roots; any other reference set may only reach files under its own
    directory or `allow`. Every reference is checked before the store is returned.
    A relocatable one (sources, roots and template `u` recorded relative) resolves them
    against its directory (`base`: the URL prefix it was read from)."""
    from .storage import resolve
    path = Path(path)
    base = base or os.path.dirname(os.path.abspath(path))
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise VirtualizeError([Problem(Location(str(path)), "not-a-cube",
                                       f"cannot be read: {e.strerror}")]) from None
    doc = _load_json(path, raw, path.name)
    section = doc.get("virtualize")
    templates = None
    if section is not None:
        if not isinstance(section, dict):
            raise invalid(path, "its 'virtualize' section is not an object")
        sources = [dict(s, path=resolve(s["path"], base)) for s in _source_table(path, section)]
        roots = [resolve(r, base) if isinstance(r, str) else r for r in _roots(path, section)]
        access = Access(path, roots, allow)
        moved = section.get("templates")
        if isinstance(moved, dict) and all(isinstance(v, str) for v in moved.values()):
            templates = {k: resolve(v, base).rstrip("/") or "/" for k, v in moved.items()}
    else:  # not written by virtualize: nothing recorded, its own directory only
        sources = []
        access = Access(path, [os.path.dirname(os.path.realpath(path))], allow)
    for s in sources:
        access.check(s["path"])
    if section is not None and check_sources:
        problems = list(changed_sources(sources))
        if problems:
            raise VirtualizeError(problems, f"{path}: its source files changed since it was "
                                  "written; re-run virtualize")
    return reference_store(doc, path, access, sources if section else None, templates)


def reference_store(doc: dict, path: Path, access: Access, sources, templates=None):
    """A read-only zarr store over a kerchunk reference dict, every reference checked
    against `access` (and, when `sources` is given, against that source table);
    `templates` override the set's own (a relocated set's resolved `u`)."""
    from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper
    from fsspec.implementations.local import LocalFileSystem
    from fsspec.implementations.reference import ReferenceFileSystem
    from zarr.storage import FsspecStore

    local = AsyncFileSystemWrapper(LocalFileSystem(), asynchronous=True)
    try:
        # given only the local file system, building it opens nothing and imports no
        # remote file system a reference names; templates and `gen` are expanded
        fs = ReferenceFileSystem(doc, fs={None: local, "file": local}, asynchronous=True,
                                 skip_instance_cache=True, template_overrides=templates)
    except Exception as e:  # noqa: BLE001 - any malformed reference set
        raise invalid(path, f"not a kerchunk reference set: {e}") from None
    remote = _check_references(path, fs.references, access, sources)
    if remote:  # allowed: the file systems of their protocols too, each with its options
        from . import storage
        fss = {None: local, "file": local, **storage.async_filesystems(remote)}
        fs = ReferenceFileSystem(doc, fs=fss, asynchronous=True, skip_instance_cache=True,
                                 template_overrides=templates)
    return FsspecStore(fs, read_only=True, path="")


def plan_store(plan, allow=None):
    """A read-only in-memory zarr store of a plan (nothing written): its metadata and
    inline values in memory, its chunks read from the sources by byte range, as the
    kerchunk export would serve them; confined to the sources' directories and `allow`."""
    from .emit.cube import source_roots
    from .emit.kerchunk import kerchunk_refs

    doc = kerchunk_refs(plan)
    sources = [s.to_dict() for s in plan.sources]
    access = Access("(in-memory plan)", source_roots([s["path"] for s in sources]), allow)
    return reference_store(doc, Path("(in-memory plan)"), access, sources)


def _check_references(path: Path, refs, access: Access, sources) -> bool:
    """Every reference of a kerchunk set is allowed and, for a set written by virtualize,
    names a recorded source and lies inside it. The protocols of the remote URLs."""
    from .storage import protocol
    sizes = {s["path"]: s["size"] for s in sources} if sources is not None else None
    remote: set[str] = set()
    for key, ref in refs.items():
        if not isinstance(ref, list):
            continue  # inline data
        if len(ref) not in (1, 3):
            raise invalid(path, f"reference {key}: {ref!r:.200} is not [url] or [url, offset, "
                                "length]")
        url = ref[0]
        why = access.refusal(url)
        if why is not None:
            raise VirtualizeError([Problem(Location(str(path), key.rpartition("/c")[0] or None),
                                           "reference-not-allowed", f"{key}: {why}")],
                                  f"{path}: refused to follow a reference (docs/reading.md, "
                                  "Confinement)")
        if isinstance(url, str) and protocol(url) not in (None, "file"):
            remote.add(protocol(url))
        if sizes is None:
            continue
        size = sizes.get(url)
        if size is None:
            raise VirtualizeError([Problem(Location(str(path), key.rpartition("/c")[0] or None),
                                           "reference-not-allowed",
                                           f"{key}: {url} is not in its source table")])
        if len(ref) == 3:
            off, n = ref[1], ref[2]
            if not (isinstance(off, int) and isinstance(n, int) and 0 <= off
                    and 0 <= n <= size - off):
                raise VirtualizeError([Problem(
                    Location(str(path), key.rpartition("/c")[0] or None), "invalid-reference",
                    f"{key} wants {n!r} bytes at {off!r} of {url}, which has {size} bytes")],
                    f"{path}: a reference lies outside its source: edited or damaged")
    return remote
