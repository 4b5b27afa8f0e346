"""Reading a cube: a read-only zarr Store that serves chunks from the source files.

`CubeStore` answers zarr's requests for a cube directory: `zarr.json` documents come from
the cube (with the manifest extension field removed, since this store resolves it), chunk
keys of virtual arrays are looked up in their `manifest.npy` (memory-mapped: one record
per chunk, no parsing of the rest) and read as byte ranges from the sources; inline chunks
are files in the cube. Sources are checked against the size and modification time recorded
when the cube was written: a changed source would read as wrong data, so it is refused.
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
from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
)
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype
from zarr.storage import WrapperStore

from .emit.cube import SOURCES_NAME
from .emit.metadata import MANIFEST_FIELD
from .model import MATERIALIZED, Location, Problem, VirtualizeError


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

    def __init__(self, root: str | os.PathLike, *, check_sources: bool = True):
        super().__init__(read_only=True)
        self.root = Path(root)
        info_path = self.root / SOURCES_NAME
        if not info_path.is_file():
            raise VirtualizeError([Problem(Location(str(self.root)), "not-a-cube",
                                           f"no {SOURCES_NAME}: not a cube written by virtualize")],
                                  f"{self.root}: not a virtualize cube")
        info = json.loads(info_path.read_text())
        self.sources = [s["path"] for s in info["sources"]]
        self.virtual = sorted((n for n, kind in info["arrays"].items() if kind == "virtual"),
                              key=len, reverse=True)
        self._manifests: dict[str, np.ndarray] = {}
        self._fds: dict[int, int] = {}
        if check_sources:
            problems = list(changed_sources(info["sources"]))
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
            p = self.root / key
            if not p.is_file():
                return None
            doc = json.loads(p.read_bytes())
            doc.pop(MANIFEST_FIELD, None)
            return json.dumps(doc).encode()
        for name in self.virtual:
            prefix = f"{name}/c"
            if key == prefix or key.startswith(prefix + "/"):
                return self._chunk(name, key[len(prefix):].lstrip("/"))
        p = self.root / key
        return p.read_bytes() if p.is_file() else None

    def _manifest(self, name: str) -> np.ndarray:
        m = self._manifests.get(name)
        if m is None:
            m = np.load(self.root / name / "manifest.npy", mmap_mode="r", allow_pickle=False)
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
            p = self.root / name / ("c/" + rest if rest else "c")
            return p.read_bytes() if p.is_file() else None
        length = int(rec["length"])
        if length == 0:
            return None
        fd = self._fd(int(rec["path"]))
        data = os.pread(fd, length, int(rec["offset"]))
        if len(data) != length:
            raise OSError(f"{self.sources[int(rec['path'])]}: chunk {name}/c/{rest} wants "
                          f"{length} bytes at {int(rec['offset'])}, file ended after {len(data)}")
        return data

    def _fd(self, i: int) -> int:
        fd = self._fds.get(i)
        if fd is None:
            fd = os.open(self.sources[i], os.O_RDONLY)
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


def changed_sources(sources: list[dict[str, Any]]):
    for s in sources:
        try:
            st = os.stat(s["path"])
        except OSError as e:
            yield Problem(Location(s["path"]), "source-missing", f"cannot be opened: {e.strerror}")
            continue
        if st.st_size != s["size"] or st.st_mtime_ns != s["mtime_ns"]:
            yield Problem(Location(s["path"]), "source-changed",
                          f"size {st.st_size} / mtime {st.st_mtime_ns} differ from the "
                          f"recorded {s['size']} / {s['mtime_ns']}")


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


def open_cube(path: str | os.PathLike, *, check_sources: bool = True) -> zarr.Group:
    """Open a cube directory, a kerchunk reference JSON or an Icechunk repository written
    by virtualize as a read-only zarr group."""
    path = Path(path)
    with rectilinear_enabled():
        if path.is_file() and path.suffix == ".json":
            return zarr.open_group(kerchunk_store(path), mode="r", zarr_format=3)
        from .emit.icechunk import is_icechunk_repo, open_icechunk
        if is_icechunk_repo(path):
            return zarr.open_group(ConsolidatedView(open_icechunk(path)), mode="r", zarr_format=3)
        return zarr.open_group(ConsolidatedView(CubeStore(path, check_sources=check_sources)),
                               mode="r", zarr_format=3)


def kerchunk_store(path: str | os.PathLike):
    """A zarr store over a kerchunk reference JSON (fsspec `reference://`)."""
    import fsspec
    from zarr.storage import FsspecStore

    fs = fsspec.filesystem("reference", fo=str(path), asynchronous=True)
    return FsspecStore(fs, read_only=True, path="")
