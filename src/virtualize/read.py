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

import bisect
import collections
import contextlib
import functools
import json
import os
import threading
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
    check_rows,
    check_shape,
    chunk_lengths,
    grid_shape,
    inside,
    invalid,
    not_allowed,
    read_inside,
    stored_bytes_of_rows,
)
from .emit.cube import SOURCES_NAME, manifest_segments
from .emit.metadata import MANIFEST_FIELD
from .model import MATERIALIZED, REF_DTYPE, Location, Problem, VirtualizeError
from .storage import is_url, read_range


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
def rectilinear_enabled(codecs: bool = True):
    """zarr-python reads rectilinear grids only with `array.rectilinear_chunks` on; turn it
    on for the duration of an open, then restore the caller's setting. `codecs`: register
    imagecodecs' codecs first (0.5 s of imports, once); `open_cube` leaves that to the
    store, which registers them only for a cube that names one."""
    if codecs:
        register_codecs()
    with zarr.config.set({"array.rectilinear_chunks": True}):
        yield


class _LocalFiles:
    """The files of a cube directory on this machine, read only inside it."""

    remote = False

    def __init__(self, root: Path):
        self.root = root

    def read(self, rel: str) -> bytes | None:
        return read_inside(self.root, self.root / rel)

    def manifest(self, rel: str) -> np.ndarray:
        """The manifest memory-mapped: only the rows a reader touches are paged in."""
        return np.load(inside(self.root, self.root / rel), mmap_mode="r", allow_pickle=False)


class _RemoteFiles:
    """The objects of a cube directory on object storage or HTTP (`url` its prefix), each
    read with exact ranged requests; `requests` and `bytes_read` count them."""

    remote = True

    def __init__(self, url: str):
        from . import storage

        self.url = url.rstrip("/")
        self.fs = storage.filesystem(self.url)
        self.requests = 0
        self.bytes_read = 0
        self.cached: dict[str, bytes] = {}  # read once already (virtualize.json, by the probe)

    def _path(self, rel: str) -> str:
        from .storage import _fs_path

        return _fs_path(self.fs, f"{self.url}/{rel}")

    def read(self, rel: str, start: int | None = None, end: int | None = None) -> bytes | None:
        """The object's bytes (those in [start, end)); None when it does not exist."""
        from .storage import _problem, retrying

        if start is None and end is None and rel in self.cached:
            return self.cached.pop(rel)
        # a whole object as the range from 0: one GET (s3fs asks for the size first else)
        start = start or 0
        try:
            data = retrying(self.fs.cat_file, self._path(rel), start=start, end=end)
        except FileNotFoundError:
            return None
        except Exception as e:  # noqa: BLE001 - forbidden, unreachable, ...: located
            raise _problem(f"{self.url}/{rel}", e) from None
        finally:
            self.requests += 1
        self.bytes_read += len(data)
        return data


MANIFEST_BLOCK_ROWS = 4096  # rows fetched (remotely) and checked together: 80 KiB
MANIFEST_CACHE_BLOCKS = 16  # blocks of rows kept per remote manifest


# Source files a cube directory's store keeps open at once (a stack of 10,000 files read
# whole would otherwise hold 10,000 descriptors).
MAX_OPEN_SOURCES = 128


class Manifest:
    """One array's manifest: its segments (`manifest.npy`, then one `manifest.N.npy` per
    `virtualize append`, each holding the chunks from its first index along the
    concatenation axis: emit/cube.py `manifest_segments`), each read block by block."""

    def __init__(self, store: CubeStore, name: str):
        doc = store._doc(f"{name}/zarr.json")
        grid = grid_shape(doc) if doc is not None else None
        lengths = chunk_lengths(doc) if doc is not None else None
        field = doc.get(MANIFEST_FIELD) if isinstance(doc, dict) else None
        try:
            self.axis, segments = manifest_segments(field if isinstance(field, dict) else {})
        except ValueError as e:
            raise invalid(store.root, f"{name}/zarr.json: {e}", name) from None
        if len(segments) > 1 and (grid is None or self.axis >= len(grid) or
                                  segments[-1][0] >= grid[self.axis]):
            raise invalid(store.root, f"{name}/zarr.json: its manifest segments do not fit "
                          f"its chunk grid {grid}", name)
        self.starts = [start for start, _ in segments]
        ends = self.starts[1:] + [grid[self.axis] if grid is not None and len(segments) > 1
                                  else None]
        self.parts = []
        for (start, fname), end in zip(segments, ends):
            part_grid, origin = grid, None
            if len(segments) > 1:
                part_grid = tuple(end - start if ax == self.axis else n
                                  for ax, n in enumerate(grid))
                origin = tuple(start if ax == self.axis else 0 for ax in range(len(grid)))
            self.parts.append(_Segment(store, name, f"{name}/{fname}", part_grid, lengths,
                                       origin))
        self.shape = grid if len(segments) > 1 else self.parts[0].shape

    def record(self, idx: tuple[int, ...]) -> tuple[int, int, int]:
        """(path, offset, length) of chunk `idx` (in the grid: the caller checks)."""
        if len(self.parts) == 1:
            return self.parts[0].record(idx)
        k = bisect.bisect_right(self.starts, idx[self.axis]) - 1
        local = tuple(i - self.starts[k] if ax == self.axis else i for ax, i in enumerate(idx))
        return self.parts[k].record(local)


class _Segment:
    """One manifest file, read and checked block by block (`MANIFEST_BLOCK_ROWS`
    rows): locally a memory map of the `.npy` file; remotely its header read with one
    small ranged request, then one ranged request per block of rows a reader needs (a few
    blocks cached). Each block's rows are checked (`access.check_rows`) when first used, so
    opening and reading cost in proportion to what is read, not to the chunk count.
    `origin`: where the segment's first chunk is in the array (None: at 0)."""

    def __init__(self, store: CubeStore, name: str, rel: str, grid, lengths, origin=None):
        self.store, self.name, self.rel = store, name, rel
        self.grid, self.lengths, self.origin = grid, lengths, origin
        self._lock = threading.Lock()
        self._checked: set[int] = set()
        self._blocks: collections.OrderedDict[int, np.ndarray] = collections.OrderedDict()
        files = store.files
        if files.remote:
            self._mm = None
            self.shape, self._data_offset = self._header(files)
        else:
            try:
                self._mm = files.manifest(self.rel)
            except (OSError, ValueError, EOFError) as e:
                raise invalid(store.root, f"{self.rel} cannot be read: {e}", name) from None
            check_shape(store.root, name, self._mm.dtype, tuple(self._mm.shape), self.grid)
            self.shape = tuple(self._mm.shape)
        self.size = int(np.prod(self.shape, dtype=np.int64))

    def _header(self, files: _RemoteFiles) -> tuple[tuple[int, ...], int]:
        """The `.npy` header (shape, dtype, order) from one ranged read of its first bytes."""
        import io

        from numpy.lib import format as npy

        head = files.read(self.rel, 0, 4096)
        if head is None:
            raise invalid(self.store.root, f"{self.rel} is missing", self.name)
        try:
            if head[:6] != b"\x93NUMPY" or len(head) < 12:
                raise ValueError("not a .npy file")
            major = head[6]
            need = (10 + int.from_bytes(head[8:10], "little")) if major == 1 else \
                (12 + int.from_bytes(head[8:12], "little"))
            if major not in (1, 2, 3) or need > 1 << 16:
                raise ValueError(f"unsupported .npy version {major} or header of {need} bytes")
            if need > len(head):
                head = files.read(self.rel, 0, need) or b""
            f = io.BytesIO(head[:need])
            npy.read_magic(f)
            read = npy.read_array_header_1_0 if major == 1 else npy.read_array_header_2_0
            shape, fortran, dtype = read(f)
        except (ValueError, EOFError, SyntaxError) as e:
            raise invalid(self.store.root, f"{self.rel} cannot be read: {e}", self.name) from None
        check_shape(self.store.root, self.name, dtype, tuple(shape), self.grid)
        if fortran and len(shape) > 1:
            raise invalid(self.store.root, f"{self.rel} is in Fortran order, not C order",
                          self.name)
        return tuple(int(n) for n in shape), need

    def _rows(self, block: int) -> np.ndarray:
        """Block `block`'s rows, checked."""
        start = block * MANIFEST_BLOCK_ROWS
        stop = min(start + MANIFEST_BLOCK_ROWS, self.size)
        with self._lock:
            if self._mm is not None:
                rows = self._mm.reshape(-1)[start:stop]
                if block in self._checked:
                    return rows
            else:
                rows = self._blocks.get(block)
                if rows is not None:
                    self._blocks.move_to_end(block)
                    return rows
                nbytes = (stop - start) * REF_DTYPE.itemsize
                at = self._data_offset + start * REF_DTYPE.itemsize
                data = self.store.files.read(self.rel, at, at + nbytes)
                if data is None or len(data) != nbytes:
                    raise invalid(self.store.root, f"{self.rel} is truncated: rows {start}.."
                                  f"{stop - 1} of {self.size} are not all there", self.name)
                rows = np.frombuffer(data, dtype=REF_DTYPE)
            check_rows(self.store.root, self.name, rows, start, self.shape, self.store.sources,
                       self.store.sizes, stored_bytes_of_rows(self.lengths, self.shape, start, stop,
                                                              self.origin), self.origin)
            if self._mm is not None:
                self._checked.add(block)
            else:
                self._blocks[block] = rows
                while len(self._blocks) > MANIFEST_CACHE_BLOCKS:
                    self._blocks.popitem(last=False)
            return rows

    def record(self, idx: tuple[int, ...]) -> tuple[int, int, int]:
        """(path, offset, length) of chunk `idx` (in the grid: the caller checks)."""
        flat = int(np.ravel_multi_index(idx, self.shape)) if self.shape else 0
        rec = self._rows(flat // MANIFEST_BLOCK_ROWS)[flat % MANIFEST_BLOCK_ROWS]
        return int(rec["path"]), int(rec["offset"]), int(rec["length"])


class CubeStore(Store):
    """Read-only zarr Store over a cube directory written by `virtualize`: a local
    directory, or a URL prefix on object storage / HTTP (nothing is downloaded whole)."""

    supports_writes = False
    supports_deletes = False
    supports_partial_writes = False
    supports_listing = True

    def __init__(self, root: str | os.PathLike, *, check_sources: bool = True, allow=None,
                 base: str | None = None, _files: _RemoteFiles | None = None,
                 strict: bool = False):
        super().__init__(read_only=True)
        from .storage import is_url as _is_url
        from .storage import resolve

        if isinstance(root, str) and _is_url(root):
            self.root: Path | str = root.rstrip("/")
            self.files: _LocalFiles | _RemoteFiles = _files or _RemoteFiles(root)
            self.base = base or self.root
        else:
            self.root = Path(root)
            self.files = _LocalFiles(self.root)
            # relative sources and roots (a relocatable cube) resolve against the cube's own
            # location: its directory, or the URL it was read from (`base`)
            self.base = base or os.path.abspath(self.root)
        self._manifests: dict[str, Manifest] = {}
        self._docs: dict[str, dict | None] = {}
        self._nodes: list[str] | None = None
        self._fds: dict[int, int] = {}
        self._fd_lock = threading.Lock()
        raw = self.files.read(SOURCES_NAME)
        if raw is None:
            raise VirtualizeError([Problem(Location(str(self.root)), "not-a-cube",
                                           f"no {SOURCES_NAME}: not a cube written by virtualize")],
                                  f"{self.root}: not a virtualize cube")
        info = _load_json(self.root, raw, SOURCES_NAME)
        sources = [dict(s, path=resolve(s["path"], self.base))
                   for s in _source_table(self.root, info)]
        if isinstance(info.get("roots"), list):
            info["roots"] = [resolve(r, self.base) if isinstance(r, str) else r
                             for r in info["roots"]]
        arrays = info.get("arrays")
        if not isinstance(arrays, dict):
            raise invalid(self.root, f"{SOURCES_NAME} has no 'arrays' table")
        for n in arrays:
            _check_node_name(self.root, n)
        groups = info.get("groups")
        if not (isinstance(groups, list) and all(isinstance(g, str) for g in groups)):
            groups = []
        for g in groups:
            _check_node_name(self.root, g)
        self.arrays = dict(arrays)
        self.groups = groups
        self.sources = [s["path"] for s in sources]
        self.sizes = [s["size"] for s in sources]
        self.virtual = sorted((n for n, kind in arrays.items() if kind == "virtual"),
                              key=len, reverse=True)
        self.inline = [n for n, kind in arrays.items() if kind == "inline"]
        roots = _roots(self.root, info) if not self.files.remote or "roots" in info \
            else [self.base.rsplit("/", 1)[0] + "/"]
        self.access = Access(self.root, roots, allow)
        for s in self.sources:  # before anything is opened
            self.access.check(s)
        if check_sources:
            from .staleness import refuse_stale
            refuse_stale(sources, self.root, strict=strict)
        for n in self.virtual:  # each manifest's segments and header, checked at open (an
            # invalid cube is one error here, not one per chunk task of a later read)
            self._manifest(n)

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

    def _doc(self, key: str) -> dict | None:
        """A `zarr.json` of the cube, parsed (read once)."""
        if key not in self._docs:
            _check_key(self.root, key)
            data = self.files.read(key)
            self._docs[key] = _load_json(self.root, data, key) if data is not None else None
        return self._docs[key]

    def _get_bytes(self, key: str) -> bytes | None:
        if key == "zarr.json" or key.endswith("/zarr.json"):
            doc = self._doc(key)
            if doc is None:
                return None
            doc = dict(doc)
            doc.pop(MANIFEST_FIELD, None)
            return json.dumps(doc).encode()
        _check_key(self.root, key)
        for name in self.virtual:
            prefix = f"{name}/c"
            if key == prefix or key.startswith(prefix + "/"):
                return self._chunk(name, key[len(prefix):].lstrip("/"))
        data = self.files.read(key)
        if data is None:
            for name in self.inline:  # an inline array's one chunk: never missing
                if key == f"{name}/c" or key.startswith(f"{name}/c/"):
                    raise invalid(self.root, f"{key}: the values of the inline array {name!r} "
                                  "are missing from the cube", name)
        return data

    def _manifest(self, name: str) -> Manifest:
        """The array's manifest: its header read (and checked against the chunk grid)
        once; its rows checked against the recorded source sizes block by block."""
        m = self._manifests.get(name)
        if m is None:
            m = self._manifests[name] = Manifest(self, name)
        return m

    def _chunk(self, name: str, rest: str) -> bytes | None:
        m = self._manifest(name)
        try:
            idx = tuple(int(i) for i in rest.split("/")) if rest else ()
        except ValueError:
            return None
        if len(idx) != len(m.shape) or any(i < 0 or i >= n for i, n in zip(idx, m.shape)):
            return None
        src, offset, length = m.record(idx)
        if src == MATERIALIZED:  # copied into the cube: a native chunk file
            data = self.files.read(f"{name}/" + ("c/" + rest if rest else "c"))
            if data is None:  # would read as fill: the cube is damaged
                raise invalid(self.root, f"chunk {name}/c/{rest} is stored in the cube (its "
                              "manifest says so) but its file is missing", name, idx)
            return data
        if length == 0:
            return None
        if is_url(self.sources[src]):
            self.access.check(self.sources[src])
            data = read_range(self.sources[src], offset, length)
        else:
            with self._fd_lock:  # (an fd is closed only under the lock: never read reused)
                data = os.pread(self._fd(src), length, offset)
        if len(data) != length:
            raise VirtualizeError([Problem(
                Location(self.sources[src], name, None, idx), "source-changed",
                f"chunk {name}/c/{rest} wants {length} bytes at {offset}, the file "
                f"ended after {len(data)}: it changed since {self.root} was written")])
        return data

    def _fd(self, i: int) -> int:
        """An open descriptor of source `i` (called holding `_fd_lock`): at most
        `MAX_OPEN_SOURCES` kept open, the least recently used closed first."""
        fd = self._fds.pop(i, None)
        if fd is not None:
            self._fds[i] = fd  # (most recently used last)
        else:
            while len(self._fds) >= MAX_OPEN_SOURCES:
                old = self._fds.pop(next(iter(self._fds)))
                with contextlib.suppress(OSError):
                    os.close(old)
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

    # -- the hierarchy: from virtualize.json, never by listing chunks --------------------

    def nodes(self) -> list[str]:
        """Every group and array of the cube ("" the root): the arrays and groups
        `virtualize.json` names, the groups holding them and, in a local cube, any other
        group directory (a cube written before groups were recorded). An array named there
        whose directory or document is missing, or leads outside the cube, is an invalid
        cube (never silently left out)."""
        if self._nodes is None:
            self._nodes = self._find_nodes()
        return self._nodes

    def _find_nodes(self) -> list[str]:
        found = {""}
        for name in list(self.arrays) + self.groups:
            parts = name.split("/")
            found.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
        if not self.files.remote:  # groups of older cubes (no 'groups' recorded)
            stack = [""]
            while stack:
                d = stack.pop()
                here = self.root / d if d else self.root
                if d in self.arrays or not here.is_dir() or here.is_symlink():
                    continue
                for entry in sorted(os.listdir(here)):
                    child = f"{d}/{entry}" if d else entry
                    if (here / entry).is_dir() and not (here / entry).is_symlink() \
                            and (here / entry / "zarr.json").is_file():
                        found.add(child)
                        stack.append(child)
        for name in self.arrays:
            if not self.files.remote:
                d = self.root / name
                real = os.path.realpath(d)
                if os.path.lexists(d) and not real.startswith(
                        os.path.realpath(self.root).rstrip("/") + "/"):
                    raise invalid(self.root, f"the directory of array {name!r} (listed in "
                                  f"{SOURCES_NAME}) leads outside the cube ({real})", name)
            if self._doc(f"{name}/zarr.json") is None:
                raise invalid(self.root, f"array {name!r} is listed in {SOURCES_NAME} but its "
                              "zarr.json is missing", name)
        return sorted(found)

    # -- listing (of the cube's own documents: groups and arrays) ----------------------

    async def list(self) -> AsyncIterator[str]:
        for node in self.nodes():
            yield f"{node}/zarr.json" if node else "zarr.json"
        for name in self.inline:
            for key, _ in _native_keys(self, name):
                yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        async for key in self.list():
            if key.startswith(prefix):
                yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        prefix = prefix.rstrip("/")
        nodes = self.nodes()
        if prefix not in nodes:
            return
        yield "zarr.json"
        if prefix in self.arrays:
            yield "c"
            return
        depth = prefix.count("/") + 1 if prefix else 0
        for n in nodes:
            if n and n.count("/") == depth and (not prefix or n.startswith(prefix + "/")):
                yield n.rsplit("/", 1)[-1]

    # -- writes are refused ------------------------------------------------------------

    async def set(self, key: str, value: Buffer) -> None:
        self._check_writable()

    async def delete(self, key: str) -> None:
        self._check_writable()


def _native_keys(store: CubeStore, name: str):
    """The key of an inline array's one chunk (from its document's shape)."""
    shape = (store._doc(f"{name}/zarr.json") or {}).get("shape")
    if isinstance(shape, list):
        yield (f"{name}/c" + "".join("/0" for _ in shape)), None


def _check_node_name(root, name: object) -> None:
    """A group or array name of virtualize.json: '/'-separated, no '.', '..' or empty
    segment (it names objects under the cube, locally or on object storage)."""
    if not isinstance(name, str) or not name or name.startswith("/") or any(
            seg in ("", ".", "..") or "\x00" in seg or "\\" in seg for seg in name.split("/")):
        raise invalid(root, f"{SOURCES_NAME} names a node {name!r:.200}: not a plain "
                            "'/'-separated name inside the cube")


def _check_key(root, key: str) -> None:
    """A key zarr asks for stays inside the cube (no '..' or absolute path)."""
    if key.startswith("/") or any(seg in (".", "..") for seg in key.split("/")):
        raise not_allowed(root, f"the key {key!r:.200} leads outside the cube")


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
    """The stale sources' problems (kept for callers of 0.x: staleness.check_sources)."""
    from .staleness import check_sources
    yield from check_sources(sources).stale


class ConsolidatedView(WrapperStore):
    """A read-only view of a store whose root `zarr.json` is served with the whole
    hierarchy consolidated into it, so every array's metadata is parsed when the group is
    opened (inside `rectilinear_enabled`) rather than at first access, when the caller's
    zarr config may refuse rectilinear grids. Used over cube directories and Icechunk
    repositories (which keep no consolidated metadata).

    The hierarchy is found without listing chunk keys: a cube directory names its nodes
    (`CubeStore.nodes`, from virtualize.json); any other store (Icechunk) is walked with
    `list_dir` from the root, one call per group (Icechunk answers it from its snapshot's
    node list, never from the chunk manifests), reading each child's `zarr.json`."""

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
        async for node, child in self._nodes(prototype):
            meta[node] = child
        doc["consolidated_metadata"] = {"kind": "inline", "must_understand": False,
                                        "metadata": meta}
        text = json.dumps(doc)
        if '"imagecodecs_' in text:  # before zarr parses the documents
            register_codecs()
        return prototype.buffer.from_bytes(text.encode())

    async def _doc(self, node: str, prototype: BufferPrototype) -> dict | None:
        buf = await self._store.get(f"{node}/zarr.json", prototype)
        return None if buf is None else json.loads(buf.to_bytes())

    async def _nodes(self, prototype: BufferPrototype):
        """(path, metadata document) of every node below the root."""
        nodes = getattr(self._store, "nodes", None)
        if callable(nodes):
            for node in nodes():
                if node:
                    doc = await self._doc(node, prototype)
                    if doc is not None:
                        yield node, doc
            return
        groups = [""]
        while groups:
            group = groups.pop()
            async for entry in self._store.list_dir(group):
                if entry == "zarr.json" or entry.endswith("/"):
                    continue
                node = f"{group}/{entry}" if group else entry
                doc = await self._doc(node, prototype)
                if doc is None:
                    continue
                yield node, doc
                if doc.get("node_type") == "group":
                    groups.append(node)


def open_cube(path: str | os.PathLike, *, check_sources: bool = True, allow=None,
              strict: bool = False) -> zarr.Group:
    """Open a cube directory, a kerchunk reference JSON or an Icechunk repository written
    by virtualize as a read-only zarr group. `allow`: more roots (paths, or URL prefixes)
    the reader may open files in (docs/reading.md, Confinement). `strict`: a touched
    source (blocks unchanged: docs/reading.md, Staleness) is refused, not a warning."""
    with rectilinear_enabled(codecs=False):  # the store registers them when needed
        store = open_store(path, check_sources=check_sources, allow=allow, strict=strict)
        try:
            return zarr.open_group(store, mode="r", zarr_format=3)
        except VirtualizeError:
            raise
        except (ValueError, TypeError, KeyError) as e:  # metadata zarr cannot take (edited)
            raise invalid(path, f"its metadata cannot be opened by zarr: {type(e).__name__}: "
                                f"{e}") from None


def open_store(path: str | os.PathLike, *, check_sources: bool = True, allow=None,
               base: str | None = None, strict: bool = False) -> Store:
    """The read-only zarr store of a cube of any of the three kinds (checked and confined).
    `base`: where it really is (the URL of a downloaded copy), for relative sources."""
    from .storage import is_url, normalize
    if is_url(path):
        url = normalize(path).rstrip("/")
        files = _RemoteFiles(url)
        try:
            info = files.read(SOURCES_NAME)
        except VirtualizeError:
            info = None
        if info is not None:  # a cube directory: read in place, nothing downloaded
            files.cached[SOURCES_NAME] = info
            return ConsolidatedView(CubeStore(url, check_sources=check_sources, allow=allow,
                                              _files=files, strict=strict))
        # a kerchunk JSON or an Icechunk repository: copied here first
        import tempfile

        from .emit.remote import download
        tmp = tempfile.mkdtemp(prefix="virtualize-open-")
        import shutil
        import weakref

        try:
            local = download(normalize(path), tmp)
            # relative sources (a relocatable output) resolve against its URL
            store = open_store(local, check_sources=check_sources, allow=allow,
                               base=normalize(path), strict=strict)
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
                              base=dirname(base) if base else None, strict=strict)
    from .emit.icechunk import is_icechunk_repo, open_icechunk
    if is_icechunk_repo(path):
        store = open_icechunk(path, allow=allow, base=base)
        if check_sources:  # as for cube directories: refused at open, not at a chunk's read
            from .emit.icechunk import recorded
            from .staleness import refuse_stale
            info = recorded(path, base) or {}
            # Icechunk compares each reference's recorded time itself: a touched source's
            # chunks are refused at read until the new times are recorded
            refuse_stale(info.get("sources") or [], path, strict=strict,
                         touched_fatal="Icechunk refuses its chunks until `virtualize verify "
                         "--refresh` records the new time")
        return ConsolidatedView(store)
    return ConsolidatedView(CubeStore(path, check_sources=check_sources, allow=allow, base=base,
                                      strict=strict))


def kerchunk_store(path: str | os.PathLike, *, check_sources: bool = True, allow=None,
                   base: str | None = None, strict: bool = False):
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
        from .staleness import refuse_stale
        refuse_stale(sources, path, strict=strict)
    return reference_store(doc, path, access, sources if section else None, templates)


def reference_store(doc: dict, path: Path, access: Access, sources, templates=None):
    """A read-only zarr store over a kerchunk reference dict, every reference checked
    against `access` (and, when `sources` is given, against that source table);
    `templates` override the set's own (a relocated set's resolved `u`)."""
    from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper
    from fsspec.implementations.local import LocalFileSystem
    from fsspec.implementations.reference import ReferenceFileSystem
    from zarr.storage import FsspecStore

    register_codecs()  # its arrays' documents are parsed as they are reached
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
                                  f"{path}: refused to follow a reference (see "
                                  "Confinement in `virtualize docs reading`)")
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
