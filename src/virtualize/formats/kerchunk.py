"""Kerchunk reference sets as sources: one reference set (JSON version 0 or 1, or a kerchunk
parquet directory) becomes a `FileInventory` like a scanned file, whose block tables point
into the *data files* the references name (`FileInventory.data_files`).

Read: zarr v2 keys (`.zgroup`, `.zarray`, `.zattrs`, `_ARRAY_DIMENSIONS`) and zarr v3 keys
(`zarr.json`, `dimension_names`, regular grids); `templates` (plain `{{name}}`
substitution); `[url]`, `[url, offset, length]`, `base64:` and raw inline chunks. Data
files are local paths or `file://` URLs (relative paths are taken from the working
directory, as fsspec does); each is stat'ed now, so the cube's staleness check covers it.

What the references cannot prove is a located problem, never an assumption: a missing
data file, a chunk past the end of its data file, an uncompressed chunk whose length is
not its size, a codec or layout with no exact zarr v3 equivalent, chunks of one variable
partly inline (no byte range to reference; `--inline` stores the whole variable). A
variable whose chunks are all inline (kerchunk inlines small coordinates) is kept inline
(its values, decoded by zarr over the reference set, go into the cube).

Values (coordinates, `--inline`, materialize) are decoded by zarr itself over the
reference set (fsspec `reference://`), which is what any reader of the set gets.
"""

from __future__ import annotations

import base64
import functools
import itertools
import json
import math
import os
from typing import Any

import numpy as np

from .. import storage
from ..model import (
    MATERIALIZED,
    BlockTable,
    Dimension,
    FileInventory,
    Location,
    Problem,
    Source,
    Variable,
    VirtualizeError,
    empty_refs,
)
from ._io import inside, system_location
from ._planning import finish
from ._values import COORD_VALUES_LIMIT, bytes_codec, plain
from .base import Format

# numcodecs ids (zarr v2 `compressor` / `filters`) whose zarr v3 codec decodes the same
# bytes exactly: all bytes -> bytes, so they follow the `bytes` codec in encode order.
V2_BYTES_CODECS = {"zlib", "gzip", "bz2", "lzma", "zstd", "lz4", "blosc", "shuffle",
                   "fletcher32"}
# ... and array -> array ones (before `bytes`; `astype` / `encode_dtype` is what they store)
V2_ARRAY_CODECS = {"delta", "fixedscaleoffset", "astype"}
ZARR_KEYS = (".zarray", ".zgroup", ".zattrs", "zarr.json", ".zmetadata")
ROOT_ARRAY = "image"  # the name of an array at the root of a reference set


def is_parquet_references(path: str) -> bool:
    """A kerchunk parquet reference set: a directory with a `.zmetadata` holding
    `record_size`."""
    meta = os.path.join(path, ".zmetadata")
    if not (os.path.isdir(path) and os.path.isfile(meta)):
        return False
    try:
        with open(meta, "rb") as f:
            return "record_size" in json.loads(f.read())
    except (OSError, ValueError):
        return False


def looks_like_json(head: bytes) -> bool:
    return head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{")


# -- the reference mapping -------------------------------------------------------------

class _Refs:
    """key -> reference, for a JSON set (version 0 / 1, templates applied) or a parquet
    set (fsspec's LazyReferenceMapper). `get` gives None (no chunk), bytes (inline) or
    (url, offset, length) with length None for a whole file."""

    def __init__(self, path: str):
        self.path = path
        self.kind = "parquet" if not storage.is_url(path) and os.path.isdir(path) else "json"
        self.templates: dict[str, str] = {}
        self.bytes_read = 0
        if self.kind == "parquet":
            self.map = parquet_mapper(path)
            self.meta = {k: (v if isinstance(v, str) else json.dumps(v))
                         for k, v in self.map.zmetadata.items()}
            return
        with storage.open_source(path) as f:
            raw = f.read()
        self.bytes_read = len(raw)
        try:
            doc = json.loads(raw)
        except ValueError as e:
            raise _not_refs(path, f"not valid JSON ({e})") from None
        if not isinstance(doc, dict):
            raise _not_refs(path, "a JSON file but not a kerchunk reference set")
        version = doc.get("version")
        if version == 1:
            refs = doc.get("refs")
            if not isinstance(refs, dict):
                raise _not_refs(path, "version 1 without a 'refs' object")
            self.templates = {k: str(v) for k, v in (doc.get("templates") or {}).items()}
            self.templates.update(moved_templates(doc, path))
            self.gen = doc.get("gen") or []
        elif version is None:
            refs = doc
            self.gen = []
        else:
            raise _not_refs(path, f"kerchunk reference version {version!r} is not known")
        if not any(k.rpartition("/")[2] in ZARR_KEYS for k in refs):
            raise _not_refs(path, "a JSON file but not a kerchunk reference set (no "
                                  ".zgroup / .zarray / zarr.json key)")
        self.map = refs
        self.meta = {k: (v if isinstance(v, str) else json.dumps(v))
                     for k, v in refs.items() if k.rpartition("/")[2] in ZARR_KEYS}

    def get(self, key: str):
        try:
            v = self.map[key]
        except KeyError:
            return None
        if isinstance(v, dict):
            v = json.dumps(v)
        if isinstance(v, str):
            if v.startswith("base64:"):
                return base64.b64decode(v[7:])
            return v.encode()
        if isinstance(v, bytes):
            return v
        if isinstance(v, (list, tuple)) and v:
            url = v[0]
            if isinstance(url, bytes):
                url = url.decode()
            if not url:  # parquet sets list missing chunks with no url
                return None
            if "{{" in url:
                for name, value in self.templates.items():
                    url = url.replace("{{" + name + "}}", value).replace("{{ " + name + " }}",
                                                                          value)
            if len(v) >= 3:
                return (url, int(v[1]), int(v[2]))
            return (url, 0, None)
        return None


def moved_templates(doc, path: str) -> dict[str, str]:
    """The templates of a relocatable set virtualize wrote (`virtualize.templates`, relative
    to the JSON's directory), resolved against where it is now."""
    section = doc.get("virtualize") if isinstance(doc, dict) else None
    moved = section.get("templates") if isinstance(section, dict) else None
    if not isinstance(moved, dict):
        return {}
    base = storage.dirname(path if storage.is_url(path) else os.path.abspath(path))
    return {k: storage.resolve(v, base).rstrip("/") or "/" for k, v in moved.items()
            if isinstance(v, str)}


def parquet_mapper(path: str):
    """fsspec's reader of kerchunk parquet references, with whichever parquet engine is
    installed (fsspec's default is fastparquet only)."""
    from importlib.util import find_spec

    from fsspec.implementations.reference import LazyReferenceMapper

    engine = "pyarrow" if find_spec("pyarrow") else "fastparquet"
    if find_spec(engine) is None:
        raise VirtualizeError([Problem(Location(path), "unreadable",
                                       "kerchunk parquet references need pyarrow or "
                                       "fastparquet installed")], f"{path}: cannot be read")
    class Mapper(LazyReferenceMapper):
        """fsspec's mapper with the records' null paths as None, whatever pandas makes of
        them (pandas ≥ 3 gives NaN for a null string, which fsspec takes for a URL: an
        absent chunk would fail to read instead of reading as the fill value)."""

        def setup(self):
            super().setup()
            load = getattr(self.open_refs, "__wrapped__", self.open_refs)

            @functools.lru_cache(maxsize=self.cache_size)
            def open_refs(field, record):
                refs = load(field, record)
                if refs is not None and "path" in refs:
                    path = np.asarray(refs["path"], dtype=object)
                    path[[not isinstance(u, str) for u in path]] = None
                    refs["path"] = path
                return refs

            self.open_refs = open_refs

    return Mapper(path, engine=engine)


def _not_refs(path: str, what: str) -> VirtualizeError:
    return VirtualizeError([Problem(Location(path), "unknown-format", what)], f"{path}: {what}")


# -- scanning --------------------------------------------------------------------------

def scan_kerchunk(path: str) -> FileInventory:
    """One reference set's inventory. Raises `VirtualizeError` when it is not one."""
    st = storage.stat(path)
    refs = _Refs(path)
    s = _Scanner(path, refs)
    s.run()
    fmt = f"kerchunk-{refs.kind}"
    inv = FileInventory(path, fmt, st.st_size, st.st_mtime_ns, s.groups, s.dims, s.variables,
                        s.problems, bytes_read=refs.bytes_read, data_files=s.data_files,
                        reference_set=True)
    inv.etag = st.etag
    return inv


class _Scanner:
    root_array = ROOT_ARRAY  # what an array at the root is named

    def __init__(self, path: str, refs: _Refs):
        self.path = path
        self.refs = refs
        self.groups: dict[str, dict[str, Any]] = {}
        self.dims: dict[str, Dimension] = {}
        self.variables: dict[str, Variable] = {}
        self.problems: list[Problem] = []
        self.data_files: list[Source] = []
        self._file_index: dict[str, int] = {}  # data file path -> refs path (1-based)
        self._missing: dict[str, str] = {}  # data file -> why it cannot be used
        self._refused: set[str] = set()  # ... because it lies where nothing is read
        self._zgroup = None

    def problem(self, var: str | None, kind: str, msg: str, fatal: bool = True,
                block: tuple[int, ...] | None = None, remedy: str | None = None) -> None:
        self.problems.append(Problem(Location(self.path, var, None, block), kind, msg, fatal,
                                     remedy))

    def run(self) -> None:
        if getattr(self.refs, "gen", None):
            self.problem(None, "unsupported-reference",
                         "the reference set uses 'gen' (generated keys): not supported; "
                         "expand it with kerchunk first")
        meta = self.refs.meta
        arrays: list[tuple[str, dict, dict, int]] = []
        for key, text in meta.items():
            node, _, leaf = key.rpartition("/")
            try:
                doc = json.loads(text)
            except ValueError:
                self.problem(node or None, "corrupt", f"{key} is not valid JSON")
                continue
            if leaf == ".zgroup":
                self.groups.setdefault(node, {}).update(self._attrs_v2(node))
            elif leaf == ".zarray":
                arrays.append((node, doc, self._attrs_v2(node), 2))
            elif leaf == "zarr.json":
                attrs = {k: plain(v) for k, v in (doc.get("attributes") or {}).items()}
                if doc.get("node_type") == "group":
                    self.groups.setdefault(node, {}).update(attrs)
                elif doc.get("node_type") == "array":
                    arrays.append((node, doc, attrs, 3))
        self.groups.setdefault("", {})
        for node, doc, attrs, zf in sorted(arrays):
            # one array at the root (tifffile's / kerchunk.tiff's references of a TIFF) is
            # named as the TIFF scanner names a TIFF's image
            name = node or self.root_array
            if name in self.groups:
                self.problem(None, "unsupported-object", f"an array at the root of the reference "
                             f"set and a group {name!r}: the array is skipped", fatal=False)
                continue
            try:
                var = self._variable(name, node, doc, attrs, zf)
            except (KeyError, TypeError, ValueError) as e:
                self.problem(name, "corrupt", f"array metadata cannot be read: {type(e).__name__}: "
                             f"{e}")
                continue
            if var is not None:
                self.variables[name] = var
                for d, n in zip(var.dims, var.shape):
                    self.dims.setdefault(d, Dimension(d, n))

    def read_values(self, node: str) -> np.ndarray:
        """An array's values (inline chunks, small coordinates), decoded by zarr."""
        return read_kerchunk_values(self.path, node)

    def _attrs_v2(self, node: str) -> dict[str, Any]:
        raw = self.refs.meta.get(f"{node}/.zattrs" if node else ".zattrs")
        try:
            attrs = json.loads(raw) if raw else {}
        except ValueError:
            attrs = {}
        return {k: plain(v) for k, v in attrs.items()}

    # -- one array ---------------------------------------------------------------------

    def _variable(self, name: str, node: str, doc: dict, attrs: dict, zf: int) -> Variable | None:
        base = name.rpartition("/")[2]
        shape = tuple(int(n) for n in doc["shape"])
        if zf == 2:
            parsed = self._v2(name, node, doc, attrs)
        else:
            parsed = self._v3(name, node, doc)
        if parsed is None:
            return None
        dtype, chunks, codecs, fill, key_of, dims = parsed
        fv = attrs.get("_FillValue")
        if zf == 3 and dtype.kind == "f" and isinstance(fv, str):
            # xarray's zarr v3 convention (virtualize writes it too): base64 of a <f8
            try:
                attrs["_FillValue"] = float(np.frombuffer(base64.b64decode(fv), "<f8")[0])
            except (ValueError, IndexError):
                pass
        if dims is None:
            dims = attrs.pop("_ARRAY_DIMENSIONS", None)
        attrs.pop("_ARRAY_DIMENSIONS", None)
        if not isinstance(dims, list) or len(dims) != len(shape) or \
                not all(isinstance(d, str) for d in dims):
            dims = ["y", "x"] if not node and len(shape) == 2 else \
                [f"{base}_dim{a}" for a in range(len(shape))]
        dims = tuple(dims)
        blocks = self._blocks(name, shape, chunks, dtype, codecs, key_of)
        is_coord = len(shape) == 1 and dims[0] == base
        values = None
        if blocks == "inline":
            blocks = None
            values = self.read_values(node)
        elif blocks is not None and fill is None and _missing(blocks.refs).any():
            i = int(np.flatnonzero(_missing(blocks.refs).reshape(-1))[0])
            self.problem(name, "unknown-fill",
                         "the reference set declares no fill value (null) and this chunk has "
                         "no reference: what it reads as is undefined",
                         block=tuple(int(b) for b in np.unravel_index(i, blocks.grid_shape)),
                         remedy=f"leave the variable out (--drop {name}), or virtualize the "
                                "data file itself")
            blocks = None
        elif blocks is not None and is_coord and shape[0] <= COORD_VALUES_LIMIT:
            values = self.read_values(node)
        if blocks is None and values is None:
            return None
        return Variable(name=name, dtype=dtype, shape=shape, dims=dims, attrs=attrs,
                        fill_value=fill, codecs=codecs, blocks=blocks, values=values,
                        is_coordinate=is_coord)

    def _v2(self, name: str, node: str, doc: dict, attrs: dict):
        try:
            dtype = np.dtype(doc["dtype"])
        except TypeError:
            dtype = None
        if dtype is None or dtype.kind not in "biufc" or dtype.fields is not None or \
                dtype.subdtype is not None:
            self.problem(name, "unsupported-type", f"data type {doc['dtype']!r} is not "
                         "supported: variable skipped", fatal=False)
            return None
        codecs: list[dict] = []
        order = doc.get("order", "C")
        if order == "F" and len(doc["shape"]) > 1:
            codecs.append({"name": "transpose",
                           "configuration": {"order": list(range(len(doc["shape"])))[::-1]}})
        elif order not in ("C", "F"):
            self.problem(name, "unsupported-layout", f"order {order!r} is not C or F")
            return None
        stored = dtype  # the dtype the array codecs hand to `bytes`
        after: list[dict] = []
        for c in [*(doc.get("filters") or []), doc.get("compressor")]:
            if c is None:
                continue
            cid = c.get("id") if isinstance(c, dict) else None
            codec = {"name": f"numcodecs.{cid}",
                     "configuration": {k: v for k, v in c.items() if k != "id"}}
            if cid in V2_ARRAY_CODECS and not after and order == "C":
                # array -> array: before `bytes`, which then writes the type they give
                codecs.append(codec)
                out = c.get("astype") or c.get("encode_dtype")
                stored = np.dtype(out) if out else stored
            elif cid in V2_BYTES_CODECS:
                after.append(codec)
            else:
                where = ("after a bytes codec" if cid in V2_ARRAY_CODECS and after else
                         "with order F" if cid in V2_ARRAY_CODECS else "here")
                self.problem(name, "unsupported-filter",
                             f"codec {cid!r} has no zarr v3 codec that decodes it exactly {where} "
                             f"(supported: {', '.join(sorted(V2_BYTES_CODECS | V2_ARRAY_CODECS))})")
                return None
        codecs += [bytes_codec(stored), *after]
        fill = _fill_v2(doc.get("fill_value"), dtype)
        if fill is not None and "_FillValue" not in attrs and not _default_fill(fill, dtype):
            # kerchunk moves netCDF's _FillValue attribute into fill_value (and xarray reads a
            # zarr v2 fill_value as _FillValue); a fill value that is the HDF5 / netCDF
            # default (0, netCDF's default fill) is the dataset's own, not an attribute
            attrs["_FillValue"] = fill.item()
        sep = doc.get("dimension_separator") or "."
        ndim = len(doc["shape"])

        def key_of(idx: tuple[int, ...]) -> str:
            tail = sep.join(map(str, idx)) if ndim else "0"
            return f"{node}/{tail}" if node else tail

        return dtype, tuple(int(c) for c in doc["chunks"]), codecs, fill, key_of, None

    def _v3(self, name: str, node: str, doc: dict):
        grid = doc.get("chunk_grid") or {}
        if grid.get("name") != "regular":
            self.problem(name, "unsupported-layout",
                         f"chunk grid {grid.get('name')!r}: only regular grids are read")
            return None
        chunks = tuple(int(c) for c in grid["configuration"]["chunk_shape"])
        codecs = list(doc.get("codecs") or [])
        names = [c.get("name") for c in codecs]
        if "bytes" not in names or any(n in ("sharding_indexed", None) for n in names) or \
                not all(_known_v3_codec(n) for n in names):
            self.problem(name, "unsupported-filter",
                         f"codecs {names}: not a pipeline the cube can reference exactly")
            return None
        b = codecs[names.index("bytes")]
        endian = (b.get("configuration") or {}).get("endian", "little")
        try:
            dtype = np.dtype(doc["data_type"]).newbyteorder("<" if endian == "little" else ">")
        except TypeError:
            dtype = None
        if dtype is None or dtype.kind not in "biufc":
            self.problem(name, "unsupported-type", f"data type {doc['data_type']!r} is not "
                         "supported: variable skipped", fatal=False)
            return None
        fill = _fill_v3(doc.get("fill_value"), dtype)
        enc = doc.get("chunk_key_encoding") or {"name": "default"}
        sep = (enc.get("configuration") or {}).get("separator")
        v2keys = enc.get("name") == "v2"
        sep = sep or ("." if v2keys else "/")
        ndim = len(doc["shape"])

        prefix = f"{node}/" if node else ""

        def key_of(idx: tuple[int, ...]) -> str:
            if v2keys:
                return prefix + (sep.join(map(str, idx)) if ndim else "0")
            return prefix + "c" + "".join(f"{sep}{i}" for i in idx)

        dims = doc.get("dimension_names")
        if dims is not None and any(d is None for d in dims):
            dims = None
        return dtype, chunks, codecs, fill, key_of, dims

    def _blocks(self, name: str, shape, chunks, dtype: np.dtype, codecs, key_of):
        grid = tuple(-(-n // c) if c else 0 for n, c in zip(shape, chunks))
        refs = empty_refs(grid)
        inline: list[tuple[int, ...]] = []
        referenced = 0
        flat = refs.reshape(-1)
        for i, idx in enumerate(itertools.product(*(range(g) for g in grid))):
            ref = self.refs.get(key_of(idx))
            if ref is None:
                continue
            if isinstance(ref, bytes):
                inline.append(idx)
                flat[i] = (MATERIALIZED, 0, 0)
                continue
            url, off, length = ref
            k = self._data_file(url)
            if k is None:
                self.problem(name, "reference-not-allowed" if url in self._refused
                             else "missing-data-file",
                             f"chunk {key_of(idx)!r} refers to {url}: {self._missing[url]}",
                             block=idx)
                return None
            if length is None:
                length = self.data_files[k - 1].size - off
            flat[i] = (k, off, length)
            referenced += 1
        if inline and not referenced:
            return "inline"
        if not self._check_extent(name, refs, chunks, dtype, codecs):
            return None
        # a short edge chunk is stored (and referenced) at the full chunk size in zarr
        return BlockTable(tuple(max(c, 1) for c in chunks), padded=True, refs=refs)

    def _check_extent(self, name: str, refs: np.ndarray, chunks, dtype, codecs) -> bool:
        flat = refs.reshape(-1)
        present = flat["length"] > 0
        end = flat["offset"] + flat["length"]
        sizes = np.asarray([0] + [s.size for s in self.data_files], dtype=np.uint64)
        bad = present & (end > sizes[np.where(present, flat["path"], 0)])
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            f = self.data_files[int(flat["path"][i]) - 1]
            self.problem(name, "truncated",
                         f"{int(bad.sum())} chunk(s) end past the end of their data file, the "
                         f"first in {f.path} ({f.size} bytes) at byte {int(end[i])}: the file "
                         "changed since the references were made",
                         block=tuple(int(b) for b in np.unravel_index(i, refs.shape)))
            return False
        plain_bytes = [c["name"] for c in codecs if c["name"] != "transpose"] == ["bytes"]
        want = math.prod(chunks) * dtype.itemsize
        wrong = present & (flat["length"] != want)
        if plain_bytes and wrong.any():
            i = int(np.flatnonzero(wrong)[0])
            self.problem(name, "chunk-length",
                         f"{int(wrong.sum())} uncompressed chunk(s) are not {want} bytes long "
                         f"(the first: {int(flat['length'][i])}): they cannot decode to "
                         "a whole chunk", block=tuple(int(b) for b in np.unravel_index(i, refs.shape)))
            return False
        return True

    def _data_file(self, url: str) -> int | None:
        k = self._file_index.get(url)
        if k is not None or url in self._missing:
            return k
        if storage.is_url(url):  # an object: its size and ETag, as for a scanned URL
            try:
                storage.normalize(url)
                st = storage.stat(url)
            except VirtualizeError as e:
                self._missing[url] = e.problems[0].message
                return None
            self.data_files.append(Source(url, st.st_size, st.st_mtime_ns,
                                          referenced_by=self.path, etag=st.etag))
            k = self._file_index[url] = len(self.data_files)
            return k
        path = url[len("file://"):] if url.startswith("file://") else url
        if path.startswith(("s3:", "gs:", "gcs:", "az:", "abfs:", "http")):
            self._missing[url] = "not a supported URL"
            return None
        path = os.path.abspath(path)
        where = system_location(path)
        if where is not None:  # a reference set must not make us copy /etc/passwd into a cube
            self._missing[url] = (f"it lies in a system location ({where}), which a reference "
                                  "set may not point into")
            self._refused.add(url)
            return None
        outside = _leads_out(path)
        if outside is not None:  # ... nor a file it does not name, through a link
            self._missing[url] = (f"it is a link leading outside {os.path.dirname(path)}, the "
                                  f"directory the reference set names it in, to {outside}")
            self._refused.add(url)
            return None
        try:
            st = os.stat(path)
        except OSError as e:
            why = f"cannot be opened ({e.strerror})"
            if not os.path.isabs(url[len("file://"):] if url.startswith("file://") else url):
                # fsspec takes a relative path from the current directory, as we do
                why += (f"; a relative path, resolved against the current directory "
                        f"{os.getcwd()} as {path} (not against the reference set's directory)")
            self._missing[url] = why
            return None
        self.data_files.append(Source(path, st.st_size, st.st_mtime_ns, referenced_by=self.path))
        k = self._file_index[url] = len(self.data_files)
        return k


def _leads_out(path: str) -> str | None:
    """Where a data file named by a reference set really is, when links (the file itself,
    a chain of them, a directory one passes through) lead it out of the directory the set
    names it in (that directory is taken as named, itself through links or not); None when
    it stays inside. The cube records that directory as a root (docs/reading.md,
    Confinement): a data file must be where its set says."""
    real = os.path.realpath(path)
    return None if inside(real, os.path.realpath(os.path.dirname(path))) else real


# netCDF-C's default fill values (what an HDF5 dataset of a netCDF-4 file without
# _FillValue is created with), by dtype kind and size
NC_DEFAULT_FILLS = {("i", 1): -127, ("u", 1): 255, ("i", 2): -32767, ("u", 2): 65535,
                    ("i", 4): -2147483647, ("u", 4): 4294967295, ("i", 8): -9223372036854775806,
                    ("u", 8): 18446744073709551614, ("f", 4): 9.969209968386869e36,
                    ("f", 8): 9.969209968386869e36}


def _default_fill(fill, dtype: np.dtype) -> bool:
    """0 (h5py's and zarr's default) or netCDF-C's default fill for the type."""
    default = NC_DEFAULT_FILLS.get((dtype.kind, dtype.itemsize))
    values = [0] if default is None else [0, np.asarray(default).astype(dtype.newbyteorder("="))]
    return any(bool(np.asarray(fill) == v) for v in values)


def _missing(refs: np.ndarray) -> np.ndarray:
    """Chunks with no reference and not held inline: they read as the fill value."""
    return (refs["length"] == 0) & (refs["path"] != MATERIALIZED)


def _known_v3_codec(name: str) -> bool:
    from zarr.registry import get_codec_class

    try:
        get_codec_class(name)
    except Exception:
        return False
    return True


def _fill_v2(v, dtype: np.dtype):
    if v is None:
        return None
    if isinstance(v, list) and len(v) == 2 and dtype.kind == "c":  # [real, imag] (zarr v2)
        part = np.dtype(f"f{dtype.itemsize // 2}")
        return np.asarray(complex(_fill_v2(v[0], part), _fill_v2(v[1], part)),
                          dtype=dtype.newbyteorder("="))[()]
    if isinstance(v, str) and dtype.kind in "fc":
        v = {"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}.get(v, v)
    return np.asarray(v).astype(dtype.newbyteorder("="))[()]


def _fill_v3(v, dtype: np.dtype):
    if v is None:
        return None
    dt = dtype.newbyteorder("=")
    if isinstance(v, str) and v.startswith("0x") and dtype.kind == "f":
        return np.asarray(int(v, 16), dtype=f"u{dt.itemsize}").view(dt)[()]
    if isinstance(v, list) and dtype.kind == "c":
        return np.asarray(complex(_fill_v2(v[0], np.dtype("f8")), _fill_v2(v[1], np.dtype("f8"))),
                          dtype=dt)[()]
    return _fill_v2(v, dtype)


# -- reading values ----------------------------------------------------------------------

def open_references(path: str):
    """The reference set as a read-only zarr group (or array, when its only array is at
    the root), through fsspec `reference://` + zarr."""
    import fsspec
    import zarr
    from zarr.storage import FsspecStore

    remote = storage.is_url(path)
    fo = parquet_mapper(str(path)) if not remote and os.path.isdir(path) else str(path)
    extra: dict = {}
    proto, overrides = _data_protocol(fo) if isinstance(fo, str) else (None, {})
    if overrides:
        extra["template_overrides"] = overrides
    if proto is not None:  # remote data files: their file system, asynchronous, with options
        extra |= {"remote_protocol": proto,
                  "remote_options": {**storage.options_for(proto), "asynchronous": True}}
    if remote:
        extra["target_options"] = storage.options_for(storage.protocol(path))
    fs = fsspec.filesystem("reference", fo=fo, asynchronous=True, skip_instance_cache=True,
                           **extra)
    return zarr.open(FsspecStore(fs, read_only=True, path=""), mode="r")


def _data_protocol(path: str) -> tuple[str | None, dict[str, str]]:
    """The protocol of a JSON reference set's first remote data file (None: local), and
    the templates of a relocated set (`moved_templates`)."""
    with storage.open_source(path) as f:
        try:
            doc = json.loads(f.read())
        except ValueError:
            return None, {}
    refs = doc.get("refs", doc) if isinstance(doc, dict) else {}
    moved = moved_templates(doc, path)
    templates = (doc.get("templates") or {}) | moved if isinstance(doc, dict) else {}
    for v in refs.values() if isinstance(refs, dict) else ():
        if isinstance(v, list) and v and isinstance(v[0], str):
            url = v[0]
            for k, t in templates.items():
                url = url.replace("{{" + k + "}}", str(t))
            return (storage.protocol(url) if storage.is_url(url) else None), moved
    return None, moved


def read_kerchunk_values(path: str, variable: str, region=None) -> np.ndarray:
    """A variable's values (or a region of them) decoded by zarr over the reference set."""
    import zarr

    group = open_references(path)
    if variable in ("", ROOT_ARRAY) and isinstance(group, zarr.Array):
        a = group
    else:
        a = group[variable]
    if region is None:
        return np.asarray(a[...])
    return np.asarray(a[tuple(slice(lo, hi) for lo, hi in region)])


class Kerchunk(Format):
    name = "kerchunk"
    title = "kerchunk reference sets (JSON, parquet)"
    suffixes = (".json",)
    inventory_formats = ("kerchunk-json", "kerchunk-parquet")
    reference_set = True
    modules = (__name__,)

    def sniff(self, head: bytes, f=None) -> bool:
        # JSON (a file starting with '{'): asked last, after every format's own signature
        return f is not None and looks_like_json(head)

    def sniff_directory(self, path: str) -> bool:
        return is_parquet_references(path)

    def scan(self, path: str, hint=None) -> FileInventory:
        # its blocks are in other files: it checks their extents
        return finish(scan_kerchunk(path), hint, extent=False)

    def read_region(self, path: str, name: str, region=None):
        # zarr over the references, reading the data files
        return read_kerchunk_values(path, name, region)


FORMAT = Kerchunk()
