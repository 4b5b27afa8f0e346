"""Reading a cube: a read-only zarr Store that serves chunks from the source files.

`CubeStore` answers zarr's requests for a cube directory: `zarr.json` documents come from
the cube (with the manifest extension field removed, since this store resolves it), chunk
keys of virtual arrays are looked up in their `manifest.npy` (memory-mapped: one record
per chunk, no parsing of the rest) and read as byte ranges from the sources; inline chunks
are files in the cube. Sources are checked against the size and modification time recorded
when the cube was written: a changed source would read as wrong data, so it is refused.
The same holds for the kerchunk JSON (its `virtualize` section) and Icechunk repositories.

Opening is confined (outputs/access.py, docs/reading.md): only sources in the cube's table, inside
the allowed roots; the cube's own files only inside the cube; every manifest is checked
against the recorded source sizes before a chunk of its array is read.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import json
import os
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np

from ...model import MATERIALIZED, REF_DTYPE, Location, Problem, VirtualizeError
from ...storage import is_url, read_range
from ..access import (
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
from ..base import load_json
from ..metadata import MANIFEST_FIELD
from ..readonly import ReadOnlyStore
from ..record import recorded_roots, resolve_roots, resolve_sources, source_table
from .writer import SOURCES_NAME, manifest_segments


class LocalFiles:
    """The files of a cube directory on this machine, read only inside it."""

    remote = False

    def __init__(self, root: Path):
        self.root = root

    def read(self, rel: str) -> bytes | None:
        return read_inside(self.root, self.root / rel)

    def manifest(self, rel: str) -> np.ndarray:
        """The manifest memory-mapped: only the rows a reader touches are paged in."""
        return np.load(inside(self.root, self.root / rel), mmap_mode="r", allow_pickle=False)


class RemoteFiles:
    """The objects of a cube directory on object storage or HTTP (`url` its prefix), each
    read with exact ranged requests; `requests` and `bytes_read` count them."""

    remote = True

    def __init__(self, url: str):
        from ... import storage

        self.url = url.rstrip("/")
        self.fs = storage.filesystem(self.url)
        self.requests = 0
        self.bytes_read = 0
        self.cached: dict[str, bytes] = {}  # read once already (virtualize.json, by the probe)

    def _path(self, rel: str) -> str:
        from ...storage import fs_path

        return fs_path(self.fs, f"{self.url}/{rel}")

    def read(self, rel: str, start: int | None = None, end: int | None = None) -> bytes | None:
        """The object's bytes (those in [start, end)); None when it does not exist."""
        from ...storage import request_problem, retrying

        if start is None and end is None and rel in self.cached:
            return self.cached.pop(rel)
        # a whole object as the range from 0: one GET (s3fs asks for the size first else)
        start = start or 0
        try:
            data = retrying(self.fs.cat_file, self._path(rel), start=start, end=end)
        except FileNotFoundError:
            return None
        except Exception as e:  # noqa: BLE001 - forbidden, unreachable, ...: located
            raise request_problem(f"{self.url}/{rel}", e) from None
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
    concatenation axis: cube/writer.py `manifest_segments`), each read block by block."""

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

    def present(self, axes: list[np.ndarray]) -> np.ndarray:
        """Which chunks of the outer product of `axes` (ascending chunk indices per axis,
        inside the grid) exist: `CubeStore.chunks_present`."""
        if len(self.parts) == 1:
            return self.parts[0].present(axes)
        out = np.zeros(tuple(len(a) for a in axes), dtype=bool)
        along = axes[self.axis]
        k = np.searchsorted(self.starts, along, side="right") - 1
        for part in np.unique(k).tolist():
            sel = k == part
            local = list(axes)
            local[self.axis] = along[sel] - self.starts[part]
            where = [slice(None)] * len(axes)
            where[self.axis] = sel
            out[tuple(where)] = self.parts[part].present(local)
        return out


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

    def _header(self, files: RemoteFiles) -> tuple[tuple[int, ...], int]:
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
        flat = 0
        for i, n in zip(idx, self.shape):
            flat = flat * n + i
        rec = self._rows(flat // MANIFEST_BLOCK_ROWS)[flat % MANIFEST_BLOCK_ROWS]
        return int(rec["path"]), int(rec["offset"]), int(rec["length"])

    def present(self, axes: list[np.ndarray]) -> np.ndarray:
        """Which chunks of the outer product of `axes` exist (a row of length 0 is none; a
        materialized chunk is one): every block of rows they fall in fetched and checked,
        as reading them would; chunks beyond the manifest's shape (an empty axis) do not."""
        from ..sparse import blocks, present_in_table

        def rows_present(flat):
            found = np.empty(len(flat), dtype=bool)
            for s, e, b in blocks(flat, MANIFEST_BLOCK_ROWS):
                rows = self._rows(b)[flat[s:e] - b * MANIFEST_BLOCK_ROWS]
                found[s:e] = (rows["length"] != 0) | (rows["path"] == MATERIALIZED)
            return found

        return present_in_table(axes, self.shape, rows_present)


class CubeStore(ReadOnlyStore):
    """Read-only zarr Store over a cube directory written by `virtualize`: a local
    directory, or a URL prefix on object storage / HTTP (nothing is downloaded whole)."""

    def __init__(self, root: str | os.PathLike, *, check_sources: bool = True, allow=None,
                 base: str | None = None, _files: RemoteFiles | None = None,
                 strict: bool = False):
        super().__init__()
        from ...storage import is_url as _is_url

        if isinstance(root, str) and _is_url(root):
            self.root: Path | str = root.rstrip("/")
            self.files: LocalFiles | RemoteFiles = _files or RemoteFiles(root)
            self.base = base or self.root
        else:
            self.root = Path(root)
            self.files = LocalFiles(self.root)
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
        info = load_json(self.root, raw, SOURCES_NAME)
        sources = resolve_sources(source_table(self.root, info), self.base)
        if isinstance(info.get("roots"), list):
            info["roots"] = resolve_roots(info["roots"], self.base)
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
        roots = recorded_roots(self.root, info) if not self.files.remote or "roots" in info \
            else [self.base.rsplit("/", 1)[0] + "/"]
        self.access = Access(self.root, roots, allow)
        for s in sources:  # before anything is opened
            self.access.check_source(s)
        if check_sources:
            from ..staleness import refuse_stale
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

    def _doc(self, key: str) -> dict | None:
        """A `zarr.json` of the cube, parsed (read once)."""
        if key not in self._docs:
            _check_key(self.root, key)
            data = self.files.read(key)
            self._docs[key] = load_json(self.root, data, key) if data is not None else None
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

    async def chunks_present(self, array: str, axes: list[np.ndarray],
                             metadata=None) -> np.ndarray | None:
        """Which chunks of `array` exist, over the outer product of `axes` (outputs/
        sparse.py): from its manifest, never by asking for each chunk."""
        if self.arrays.get(array) != "virtual":
            return None
        return self._manifest(array).present(axes)

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
        # in the order the arrays are recorded (the sources' order: a DataTree's groups
        # come as netCDF4 lists them), then the groups holding none
        found = {"": None}
        for name in list(self.arrays) + self.groups:
            parts = name.split("/")
            found.update(dict.fromkeys("/".join(parts[:i]) for i in range(1, len(parts) + 1)))
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
                        found.setdefault(child)
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
        return list(found)

    # -- listing (of the cube's own documents: groups and arrays) ----------------------

    async def list(self) -> AsyncIterator[str]:
        for node in self.nodes():
            yield f"{node}/zarr.json" if node else "zarr.json"
        for name in self.inline:
            for key, _ in _native_keys(self, name):
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
