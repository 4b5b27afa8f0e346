"""`virtualize://PATH`: an output virtualize wrote (a cube directory, kerchunk JSON or
parquet, Icechunk repository) as an fsspec filesystem of its zarr keys, served by the
confined, checked store `virtualize.open` reads (docs/reading.md: Confinement, Staleness).

fsspec finds it by its entry point (`fsspec.specs`), so any zarr-based reader opens
`virtualize:///abs/path/cube.zarr` wherever virtualize is installed, without importing
it: zarr (`zarr.open_group("virtualize:///...")`), xarray's `engine="zarr"`, and
intake-esm, whose catalog rows of `format: zarr` are opened so (`virtualize catalog`
writes cube directories' rows as such URLs: docs/catalog.md). Opening one turns zarr's
`array.rectilinear_chunks` on for the process (what virtualize wrote may need it; zarr
reads it when it parses each array's metadata, after this filesystem is made).
"""

from __future__ import annotations

import os
from pathlib import Path

from fsspec.asyn import AsyncFileSystem

PROTOCOL = "virtualize"


class VirtualizeFileSystem(AsyncFileSystem):
    """Read-only: paths are `/abs/OUT/KEY` (or `virtualize:///abs/OUT/KEY`), OUT an
    output virtualize wrote (the first such ancestor of the path), KEY a zarr key in it.
    `check_sources` (default True), `allow`, `strict`: as for `virtualize.open`."""

    protocol = PROTOCOL
    root_marker = "/"
    async_impl = True
    cachable = True

    def __init__(self, *, check_sources: bool = True, allow=None, strict: bool = False,
                 asynchronous: bool = True, loop=None, **kwargs):
        import zarr

        from .outputs.base import register_codecs

        super().__init__(asynchronous=asynchronous, loop=loop, **kwargs)
        self.options = dict(check_sources=check_sources, allow=allow, strict=strict)
        self.stores: dict[str, object] = {}
        register_codecs()
        zarr.config.set({"array.rectilinear_chunks": True})

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        if path.startswith(f"{PROTOCOL}://"):
            path = path[len(PROTOCOL) + 3:]
        return "/" + path.strip("/") if path.strip("/") else "/"

    def _split(self, path: str) -> tuple[object, str]:
        """(the store of the output holding `path`, the key in it)."""
        path = self._strip_protocol(path)
        for root, store in self.stores.items():
            if path == root or path.startswith(root + "/"):
                return store, path[len(root):].strip("/")
        from .open import open_store
        from .outputs.registry import written_kind

        p = Path(path)
        for candidate in (p, *p.parents):
            if os.path.exists(candidate) and written_kind(candidate) is not None:
                root = str(candidate)
                store = self.stores[root] = open_store(candidate, **self.options)
                return store, path[len(root):].strip("/")
        raise FileNotFoundError(f"{path}: in no output virtualize wrote")

    async def _cat_file(self, path, start=None, end=None, **kwargs):
        from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
        from zarr.core.buffer import default_buffer_prototype

        store, key = self._split(path)
        if start is None and end is None:
            request = None
        elif start is not None and start < 0 and end is None:
            request = SuffixByteRequest(-start)
        elif end is None:
            request = OffsetByteRequest(start)
        else:
            request = RangeByteRequest(start or 0, end)
        buf = await store.get(key, default_buffer_prototype(), request)
        if buf is None:
            raise FileNotFoundError(path)
        return buf.to_bytes()

    async def _ls(self, path, detail=True, **kwargs):
        store, key = self._split(path)
        base = self._strip_protocol(path).rstrip("/")
        out = []
        async for entry in store.list_dir(key):
            name = f"{base}/{entry.rstrip('/')}"
            is_dir = entry.endswith("/") or not await _exists(store, f"{key}/{entry}"
                                                              if key else entry)
            out.append({"name": name, "size": 0, "type": "directory" if is_dir else "file"})
        return out if detail else [e["name"] for e in out]

    async def _info(self, path, **kwargs):
        store, key = self._split(path)
        name = self._strip_protocol(path)
        if key and await _exists(store, key):
            data = await self._cat_file(path)
            return {"name": name, "size": len(data), "type": "file"}
        if not key or [e async for e in store.list_dir(key)]:
            return {"name": name, "size": 0, "type": "directory"}
        raise FileNotFoundError(path)

    async def _pipe_file(self, path, value, **kwargs):
        raise PermissionError(f"{path}: virtualize:// is read-only")

    async def _rm_file(self, path, **kwargs):
        raise PermissionError(f"{path}: virtualize:// is read-only")


async def _exists(store, key: str) -> bool:
    """Whether `key` is a key of the store (a directory of a cube's is none)."""
    try:
        return await store.exists(key)
    except (IsADirectoryError, NotADirectoryError):
        return False

