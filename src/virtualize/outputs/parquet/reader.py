"""Reading a kerchunk parquet reference set (virtualize's, or a Zarr v2 one kerchunk
wrote): a read-only zarr store that finds each chunk's row as fsspec's
`LazyReferenceMapper` does (flat C-order index over the grid, `record_size` rows per
`NAME/refs.K.parq`), reads only the records a reader touches (a few cached) and checks
each record when it is loaded: its paths named in the source table (or, for a set
virtualize did not write, inside its own directory or `allow`), its ranges inside the
recorded sizes, an uncompressed chunk's length. Opening reads `.zmetadata` only."""

from __future__ import annotations

import collections
import json
import os
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np

from ...model import REF_DTYPE, Location, Problem, VirtualizeError
from ...storage import is_url, read_range
from ..access import (
    Access,
    check_rows,
    chunk_lengths,
    grid_shape,
    invalid,
    not_allowed,
    read_inside,
    stored_bytes_of_rows,
)
from ..base import load_json
from ..readonly import ReadOnlyStore
from ..record import recorded_roots, resolve_roots, resolve_sources, source_table

ZMETADATA = ".zmetadata"
CACHED_RECORDS = 8  # records kept in memory (each at most record_size rows)


class _Record:
    """One loaded and checked parquet record: per row the index of its path in `urls`
    (-1: none), offset, size and inline bytes (`raw`, a pyarrow array or None); `present`:
    the rows that are a chunk (a reference or inline bytes)."""

    def __init__(self, urls, ui, offset, size, raw, present):
        self.urls, self.ui, self.offset, self.size, self.raw = urls, ui, offset, size, raw
        self.present = present


class ParquetStore(ReadOnlyStore):
    """Read-only zarr Store over a kerchunk parquet reference directory."""

    def __init__(self, root: str | os.PathLike, *, check_sources: bool = True, allow=None,
                 base: str | None = None, strict: bool = False):
        super().__init__()
        self.root = Path(root)
        doc = load_json(self.root, read_inside(self.root, self.root / ZMETADATA), ZMETADATA)
        meta, rs = doc.get("metadata"), doc.get("record_size")
        if not isinstance(meta, dict) or not all(isinstance(v, dict) for v in meta.values()):
            raise invalid(self.root, f"{ZMETADATA}: 'metadata' is not an object of documents")
        if not isinstance(rs, int) or isinstance(rs, bool) or rs <= 0:
            raise invalid(self.root, f"{ZMETADATA}: 'record_size' {rs!r:.50} is not a positive "
                                     "integer")
        for key in meta:
            _check_key(self.root, key)
        if "zarr.json" not in meta:  # kerchunk's own sets are Zarr v2
            raise VirtualizeError([Problem(Location(str(self.root)), "not-a-cube",
                                           "a Zarr v2 parquet reference set (no zarr.json): "
                                           "read it as a source (virtualize SET -o cube.parq)")],
                                  f"{self.root}: not a Zarr v3 reference set")
        self.meta, self.record_size = meta, rs
        base = base or os.path.dirname(os.path.abspath(self.root))
        section = doc.get("virtualize")
        if section is not None:
            if not isinstance(section, dict):
                raise invalid(self.root, "its 'virtualize' section is not an object")
            sources = resolve_sources(source_table(self.root, section), base)
            roots = resolve_roots(recorded_roots(self.root, section), base)
            self.sources: list[str] | None = [s["path"] for s in sources]
            self.sizes = [s["size"] for s in sources]
            self.index = {p: i for i, p in enumerate(self.sources)}
        else:  # not written by virtualize: nothing recorded, its own directory only
            sources = []
            roots = [os.path.dirname(os.path.realpath(self.root))]
            self.sources, self.sizes, self.index = None, [], {}
        self.access = Access(self.root, roots, allow)
        for s in sources:
            self.access.check_source(s)
        if section is not None and check_sources:
            from ..staleness import refuse_stale
            refuse_stale(sources, self.root, strict=strict)
        self.arrays = {name: self._array(name) for name in _array_names(meta)}
        self._lock = threading.Lock()
        self._records: collections.OrderedDict = collections.OrderedDict()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ParquetStore) and other.root == self.root

    def __repr__(self) -> str:
        return f"ParquetStore({str(self.root)!r})"

    def _array(self, name: str) -> tuple[tuple[int, ...], dict]:
        """The chunk counts of array `name` as fsspec finds its rows (from its `.zarray`),
        checked against its zarr.json's grid and chunk key encoding."""
        zarray = self.meta.get(f"{name}/.zarray")
        doc = self.meta.get(f"{name}/zarr.json")
        try:
            counts = tuple(-(-int(s) // int(c)) for s, c in
                           zip(zarray["shape"], zarray["chunks"], strict=True))
        except (TypeError, KeyError, ValueError, ZeroDivisionError):
            raise invalid(self.root, f"{name}/.zarray does not give the chunk counts fsspec "
                                     "finds the array's records by", name) from None
        if doc is None:  # a Zarr v2 array
            if zarray.get("dimension_separator", ".") != ".":
                raise invalid(self.root, f"{name}/.zarray: chunk keys separated by "
                              f"{zarray['dimension_separator']!r}, which fsspec's records do "
                              "not resolve", name)
            return counts, zarray
        grid = grid_shape(doc)
        enc = doc.get("chunk_key_encoding")
        if not (isinstance(enc, dict) and enc.get("name") == "v2" and
                (enc.get("configuration") or {}).get("separator", ".") == "."):
            raise invalid(self.root, f"{name}/zarr.json: chunk key encoding {enc!r:.100} is "
                          "not v2 with '.', which fsspec's records are found by", name)
        if grid is None or (counts or (1,)) != (grid or (1,)):
            raise invalid(self.root, f"{name}/.zarray gives {counts} chunks, its zarr.json's "
                          f"grid {grid}: fsspec would read other chunks", name)
        return grid, doc

    # -- reads -----------------------------------------------------------------------

    def _get_bytes(self, key: str) -> bytes | None:
        _check_key(self.root, key)
        if key in self.meta:
            node = key.rpartition("/")[0]
            if key.endswith(".zarray") and f"{node}/zarr.json" in self.meta:
                return None  # a stub for fsspec: zarr reads the zarr.json
            return json.dumps(self.meta[key]).encode()
        name, _, rest = key.rpartition("/")
        if name not in self.arrays:
            return None
        grid, doc = self.arrays[name]
        try:
            idx = tuple(int(i) for i in rest.split("."))
        except ValueError:
            return None
        if not grid:
            if idx != (0,):
                return None
            flat = 0
        else:
            if len(idx) != len(grid) or any(i < 0 or i >= n for i, n in zip(idx, grid)):
                return None
            flat = int(np.ravel_multi_index(idx, grid))
        rec = self._record(name, flat // self.record_size)
        row = flat % self.record_size
        if rec.raw is not None and rec.raw[row].is_valid:
            return rec.raw[row].as_py()
        u = int(rec.ui[row])
        if u < 0:
            return None  # absent: the fill value
        url, offset, size = rec.urls[u], int(rec.offset[row]), int(rec.size[row])
        if offset == 0 and size == 0:  # [url]: the whole file (fsspec's reading)
            size = self.sizes[self.index[url]] if self.sources is not None else None
        if is_url(url):
            self.access.check(url)
            data = read_range(url, offset, size) if size is not None else read_range(
                url, 0, 1 << 62)
        else:
            try:
                fd = os.open(url, os.O_RDONLY)
            except OSError as e:
                raise VirtualizeError([Problem(Location(url), "source-missing",
                                               f"cannot be opened: {e.strerror}")]) from None
            try:
                data = os.pread(fd, size, offset) if size is not None else os.read(
                    fd, os.fstat(fd).st_size)
            finally:
                os.close(fd)
        if size is not None and len(data) != size:
            raise VirtualizeError([Problem(
                Location(url, name, None, idx), "source-changed",
                f"chunk {key} wants {size} bytes at {offset}, the file ended after "
                f"{len(data)}: it changed since {self.root} was written")])
        return data

    def _record(self, name: str, k: int) -> _Record:
        with self._lock:
            rec = self._records.get((name, k))
            if rec is not None:
                self._records.move_to_end((name, k))
                return rec
            rec = self._load(name, k)
            self._records[(name, k)] = rec
            while len(self._records) > CACHED_RECORDS:
                self._records.popitem(last=False)
            return rec

    def _load(self, name: str, k: int) -> _Record:
        """Record `k` of array `name`, read and checked (vectorized)."""
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        grid, doc = self.arrays[name]
        rel = f"{name}/refs.{k}.parq"
        data = read_inside(self.root, self.root / rel)
        if data is None:
            raise invalid(self.root, f"{rel} is missing", name)
        try:
            table = pq.read_table(pa.BufferReader(data))
        except (pa.ArrowException, OSError, ValueError) as e:
            raise invalid(self.root, f"{rel} cannot be read: {e}", name) from None
        total = int(np.prod(grid, dtype=np.int64)) if grid else 1
        start = k * self.record_size
        need = min(self.record_size, total - start)
        cols = set(table.column_names)
        if not {"path", "offset", "size"} <= cols or table.num_rows < need:
            raise invalid(self.root, f"{rel}: not {need} rows of path, offset, size", name)
        try:
            path = pc.dictionary_encode(table.column("path").slice(0, need).cast(
                pa.large_string())).combine_chunks()
            offset = table.column("offset").slice(0, need).to_numpy().astype(np.int64)
            size = table.column("size").slice(0, need).to_numpy().astype(np.int64)
            raw = table.column("raw").slice(0, need).combine_chunks() if "raw" in cols else None
            if raw is not None and not (pa.types.is_binary(raw.type) or
                                        pa.types.is_large_binary(raw.type) or
                                        pa.types.is_null(raw.type)):
                raise TypeError(f"raw is {raw.type}")
        except (pa.ArrowException, TypeError, ValueError) as e:
            raise invalid(self.root, f"{rel}: unexpected columns ({e})", name) from None
        if raw is not None and pa.types.is_null(raw.type):
            raw = None
        urls = path.dictionary.to_pylist()
        ui = path.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        ui = np.where(path.is_null().to_numpy(zero_copy_only=False), -1, ui).astype(np.int64)
        present = ui >= 0
        if raw is not None:  # an inline row is not a reference
            inline = raw.is_valid().to_numpy(zero_copy_only=False)
            ui = np.where(inline, -1, ui)
            present = present | inline
        used = np.unique(ui[ui >= 0])
        for u in used.tolist():
            url = urls[u]
            why = self.access.refusal(url)
            if why is not None:
                raise not_allowed(self.root, f"{rel}: {why}", name)
            if self.sources is not None and url not in self.index:
                raise VirtualizeError([Problem(Location(str(self.root), name),
                                               "reference-not-allowed",
                                               f"{rel}: {url} is not in its source table")])
        if self.sources is not None:
            rows = np.zeros(need, dtype=REF_DTYPE)
            src = np.array([self.index[u] for u in urls] or [0], dtype=np.int64)
            virt = ui >= 0
            if (virt & ((offset < 0) | (size < 0))).any():
                raise invalid(self.root, f"{rel}: a negative offset or size", name,
                              kind="invalid-reference")
            rows["path"] = np.where(virt, src[np.where(virt, ui, 0)], 0)
            rows["offset"] = np.where(virt, offset, 0)
            rows["length"] = np.where(virt, size, 0)
            check_rows(self.root, name, rows, start, grid, self.sources, self.sizes,
                       stored_bytes_of_rows(chunk_lengths(doc), grid, start, start + need)
                       if "zarr_format" in doc and doc.get("node_type") == "array" else None)
        return _Record(urls, ui, offset, size, raw, present)

    async def chunks_present(self, array: str, axes: list[np.ndarray],
                             metadata=None) -> np.ndarray | None:
        """Which chunks of `array` exist, over the outer product of `axes` (outputs/
        sparse.py): from the records they fall in, each loaded and checked as reading its
        chunks would."""
        from ..sparse import blocks, present_in_table

        grid = self.arrays[array][0] if array in self.arrays else ()
        if not grid or len(axes) != len(grid):
            return None

        def rows_present(flat):
            found = np.empty(len(flat), dtype=bool)
            for s, e, k in blocks(flat, self.record_size):
                found[s:e] = self._record(array, k).present[flat[s:e] - k * self.record_size]
            return found

        return present_in_table(axes, grid, rows_present)

    # -- the hierarchy: from .zmetadata, never by listing records ----------------------

    def nodes(self) -> list[str]:
        """Every group and array ("" the root) with a zarr.json."""
        return sorted(k[:-len("zarr.json")].rstrip("/") for k in self.meta
                      if k == "zarr.json" or k.endswith("/zarr.json"))

    async def list(self) -> AsyncIterator[str]:
        for key in self.meta:
            if not key.endswith(".zarray") or key[:-len(".zarray")] + "zarr.json" \
                    not in self.meta:
                yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        prefix = prefix.rstrip("/")
        seen = set()
        async for key in self.list():
            rest = key[len(prefix) + 1:] if prefix else key
            if prefix and not key.startswith(prefix + "/"):
                continue
            head = rest.split("/", 1)[0]
            if head not in seen:
                seen.add(head)
                yield head



def _array_names(meta: dict) -> list[str]:
    names = {k[:-len("/zarr.json")] for k, d in meta.items()
             if k.endswith("/zarr.json") and d.get("node_type") == "array"}
    names |= {k[:-len("/.zarray")] for k in meta if k.endswith("/.zarray")}
    return sorted(names)


def _check_key(root, key: str) -> None:
    if key.startswith("/") or any(seg in (".", "..") for seg in key.split("/")) or \
            "\x00" in key or "\\" in key:
        raise not_allowed(root, f"the key {key!r:.200} leads outside the reference set")


def read_table(path: Path, name: str, doc: dict, record_size: int, index: dict[str, int]):
    """Array `name`'s whole reference table as written (REF_DTYPE over its grid; paths
    as indices of `index`) and its inline rows (flat index -> bytes): what an append
    rewrites. Read unchecked: the set was just opened and checked by `append`."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    grid = grid_shape(doc)
    total = int(np.prod(grid, dtype=np.int64)) if grid else 1
    refs = np.zeros(total, dtype=REF_DTYPE)
    raw: dict[int, bytes] = {}
    for k in range(-(-total // record_size)):
        start = k * record_size
        n = min(record_size, total - start)
        t = pq.read_table(Path(path) / name / f"refs.{k}.parq").slice(0, n)
        if "raw" in t.column_names:
            col = t.column("raw").combine_chunks()
            for i in np.flatnonzero(col.is_valid().to_numpy(zero_copy_only=False)).tolist():
                raw[start + i] = col[i].as_py()
        p = pc.dictionary_encode(t.column("path").cast("large_string")).combine_chunks()
        virt = ~p.is_null().to_numpy(zero_copy_only=False)
        for i in raw:
            if start <= i < start + n:
                virt[i - start] = False
        src = np.array([index[u] for u in p.dictionary.to_pylist()] or [0], dtype=np.int64)
        ui = p.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        rows = refs[start:start + n]
        rows["path"] = np.where(virt, src[np.where(virt, ui, 0)], 0)
        rows["offset"] = np.where(virt, t.column("offset").to_numpy(), 0)
        rows["length"] = np.where(virt, t.column("size").to_numpy(), 0)
    return refs.reshape(grid), raw
