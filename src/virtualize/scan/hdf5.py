"""HDF5 and netCDF-4 files: block tables from each dataset's chunk index, via h5py.

A chunked dataset's index is read in one pass: a v1 B-tree (netCDF-C's default, and any
file written for every library version), a fixed array, an extensible array, a v2 B-tree
or an implicit index in a local file directly from the file's bytes, one `np.frombuffer`
per B-tree node or array block or page (`_native_chunk_index`), checked against HDF5's own
count of the index (whose walk also checks the arrays' checksums, and whose reads the
direct reader reuses: the index is read from the file once); every other index, a remote
file, and anything the direct reader does not expect, with one `chunk_iter` pass (never
`get_chunk_info(i)` in a loop, which is O(N) per call), whose chunks of an extensible
array with its unlimited axis not the first HDF5 misplaces (`_chunk_iter_swizzles`): the
scan puts them at their places. Groups are walked with `keys()`; data is read only for
small 1-D coordinate variables, whose values the planner checks and inlines.

Per object: attributes, and a dataset's layout, filters, fill value and stored type, are
read from the object header's bytes HDF5 has just read and checked (`_h5meta`; h5py's
calls cost ~20-50 us each, which made a small netCDF-4 file's scan mostly attribute
reads), h5py being asked for whatever that reader leaves (`ASK_H5PY`, `Unexpected`);
every attribute is read at most once (`_Attrs`); a group's links are listed in one HDF5
iteration and objects behind hard links opened with `h5o.open` (h5py's `Group.get`
builds a `File` per dataset); a variable's dimension scales are found by object
identity (header addresses), from one read of its `DIMENSION_LIST`, never by naming the
referenced object (which searches the file).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import os
from array import array
from typing import Any

import h5py
import numpy as np

try:  # hdf5plugin registers its filters with HDF5: h5py (the decode check's reference,
    # `--inline`) can then read data that plugin filters wrote
    import hdf5plugin  # noqa: F401
except ImportError:  # pragma: no cover
    pass

from .. import storage
from ..model import (
    MATERIALIZED,
    REF_DTYPE,
    BlockTable,
    Dimension,
    FileInventory,
    Location,
    Problem,
    Source,
    Variable,
    empty_refs,
)
from ._h5meta import (
    ASK_H5PY,
    AttrReader,
    DimensionList,
    Storage,
    dataset_storage,
    standard_dtype,
    superblock_sizes,
    v2_records,
)
from ._h5meta import UNDEFINED as UNDEFINED_ADDRESS
from ._h5meta import Unexpected as _Unexpected
from ._h5meta import layout_message as _layout_message
from ._h5vds import VirtualFiles, virtual_variable
from ._h5vds import by_path as vds_by_path
from ._h5vds import shape as vds_shape
from ._values import (
    COORD_VALUES_LIMIT,
    TEXT_LIMIT,
    Unrepresentable,
    bytes_codec,
    chars_to_text,
    plain,
)

# Attributes that HDF5 dimension scales and the netCDF-4 library keep for themselves.
HIDDEN_ATTRS = frozenset({
    "DIMENSION_LIST", "REFERENCE_LIST", "CLASS", "NAME", "_Netcdf4Dimid",
    "_Netcdf4Coordinates", "_NCProperties", "_nc3_strict", "_SuperblockVersion",
    "_IsNetcdf4",
})
NC_DIM_ONLY = "This is a netCDF dimension but not a netCDF variable"
# Chunks per dataset beyond which no block table is built (dense references, 20 bytes each:
# 2**27 chunks are 2.5 GiB); a corrupt dataspace would otherwise ask for petabytes.
MAX_BLOCKS = 1 << 27
# Chunk grids from which the chunk index is read directly (`_native_chunk_index`): below,
# chunk_iter's few calls cost less than finding and parsing the index.
DIRECT_MIN_CHUNKS = 256


def scan_hdf5(path: str, finish=None) -> FileInventory:
    """Scan one HDF5 / netCDF-4 file. Never raises for content problems: they are returned.
    `finish(inv, read)`, if given, is applied to the inventory before the file is closed,
    `read(name)` reading a variable's values through it (`scan` adds the planning data)."""
    st = storage.stat(path)
    with storage.open_source(path, st.st_size) as fobj:
        # what HDF5 reads of a local file is kept (its superblock, object headers...): the
        # direct readers of attributes and chunk indexes read them from memory
        recorder = _Recorder(fobj) if isinstance(fobj, storage.LocalFile) else None
        if recorder is not None:
            recorder.on = True
        try:
            f = h5py.File(fobj, "r")
        except Exception as e:  # h5py raises OSError / RuntimeError with HDF5's text
            raise OSError(f"{path}: not a readable HDF5 file ({e})") from e
        with f:
            scanner = _Scanner(path, f, recorder, st.st_size)
            scanner.source = fobj
            try:
                inv = scanner.run(st.st_size, st.st_mtime_ns)
                scanner.link_targets(inv)
                if finish is not None:
                    inv = finish(inv, scanner.values)
            finally:
                scanner.close_targets()
        inv.bytes_read, inv.requests, inv.etag = fobj.bytes_read, fobj.requests, st.etag
    return inv


class _Recorder:
    """What HDF5 reads from a local source while `on` (the whole scan), kept by offset,
    so the direct readers of attributes and chunk indexes (`_h5meta`,
    `_native_chunk_index`) read the superblock, object headers and index structures HDF5
    has just read from memory: the scan reads them from the file once. Anything else they
    read with `os.pread`, counted in the source's bytes_read and requests."""

    LIMIT = 1 << 20  # larger reads are not kept (data, not metadata)
    BUDGET = 32 << 20  # nor any beyond this many bytes kept (the direct reader reads them)

    def __init__(self, fobj):
        self.fobj, self.fd = fobj, fobj.fileno()
        self.reads: dict[int, bytes] = {}
        self.kept = 0
        self._starts: list[int] | None = None
        self.on = False
        read = fobj.readinto

        def readinto(b):  # h5py's file-object driver: seek, then readinto
            if not self.on:
                return _read_filled(read, b)
            pos = fobj.tell()
            n = _read_filled(read, b)
            had = self.reads.get(pos)
            if n and n <= self.LIMIT and self.kept + n <= self.BUDGET and \
                    (had is None or len(had) < n):
                self.reads[pos] = bytes(memoryview(b)[:n])
                self.kept += n - (len(had) if had is not None else 0)
                self._starts = None
            return n
        fobj.readinto = readinto

    def pread(self, n: int, offset: int) -> bytes:
        if self._starts is None:
            self._starts = sorted(self.reads)
        i = bisect.bisect_right(self._starts, offset) - 1
        if i >= 0:
            start = self._starts[i]
            data = self.reads[start]
            if offset + n <= start + len(data):
                return memoryview(data)[offset - start:offset - start + n]  # no copy
        data = os.pread(self.fd, n, offset)
        self.fobj.bytes_read += len(data)
        self.fobj.requests += 1
        return data

    def forget(self, keep: int) -> None:
        """Forget the reads recorded after the first `keep` (in order of recording)."""
        new = len(self.reads) - keep
        if new > 0:
            for k in list(itertools.islice(reversed(self.reads), new)):
                self.kept -= len(self.reads.pop(k))
            self._starts = None


def _read_filled(read, b) -> int:
    """Read into `b` with `read` (a `readinto`) until it is full or the file ends, the
    rest zeroed, as HDF5's own (sec2) driver reads: h5py's file-object driver makes one
    `readinto` call and leaves what a short read (past the end of the file) did not fill
    as it was, memory that changes from run to run (a damaged superblock's driver block
    past the end made the verdict change between runs). Returns the bytes read."""
    m = memoryview(b).cast("B")
    n = 0
    while n < len(m):
        k = read(m[n:])
        if not k:
            break
        n += k
    if n < len(m):
        m[n:] = bytes(len(m) - n)
    return n


class _Scanner:
    source = None  # the scanned file object (scan_hdf5 sets it): its `pread` reads its bytes

    def __init__(self, path: str, f: h5py.File, recorder: _Recorder | None = None,
                 size: int = 0):
        self.path = path
        self.f = f
        # what HDF5 reads, when a chunk index may be read directly (a local file), and
        # the file's size
        self.recorder: _Recorder | None = recorder
        self.size = size
        # attributes read from the file's bytes (a local file with 8-byte addresses and
        # lengths, no user block), else through h5py
        self.attr_reader: AttrReader | None = None
        self._fileno = None
        self._addr: dict[str, int] = {}  # object header address of main-file objects walked
        self._messages: dict[str, dict] = {}  # their dataset messages (`_storage`)
        self._by_name: dict[str, h5py.Dataset] | None = None
        if recorder is not None:
            if superblock_sizes(recorder.pread) == (8, 8):  # and no user block before it
                self.attr_reader = AttrReader(recorder.pread, size)
                self._fileno = f.id.fileno  # as h5g.get_objinfo(...).fileno gives it
        self.groups: dict[str, dict[str, Any]] = {}
        self.dims: dict[str, Dimension] = {}
        self.variables: dict[str, Variable] = {}
        self.problems: list[Problem] = []
        self._attr_cache: dict[str, _Attrs] = {}
        self.netcdf4 = "_NCProperties" in self._attrs("", f)
        self._datasets: list[tuple[str, h5py.Dataset]] = []
        self._scales: set[str] = set()
        self._nc_shapes: dict[str, tuple[int, ...]] = {}
        # external links followed: target file -> (its h5py.File, its Source); datasets
        # reached through one -> the target's index in `data_files` (refs path k + 1)
        self._targets: dict[str, tuple[h5py.File, Source]] = {}
        self._origin: dict[str, int] = {}
        self._dim_lists: dict[str, tuple] = {}  # per dataset: DIMENSION_LIST targets per axis
        self._names_by_id: dict | None = None  # walked datasets by object identity (`_key`)
        self._vds = VirtualFiles(path)  # virtual datasets, read through the file by path
        self._walked: dict = {}  # groups walked: identity (`_identity`) -> name
        self._walking: list = []  # the identities of the groups being walked (ancestors)

    def _attrs(self, name: str, obj) -> _Attrs:
        """The attributes of the object walked as `name`, each read at most once."""
        a = self._attr_cache.get(name)
        if a is None:
            a = self._attr_cache[name] = _Attrs(obj, self._direct_attrs(name, obj))
        return a

    def values(self, name: str):
        """A dataset's values as h5py reads them (planning data: bounds, inlined values)."""
        if self._by_name is None:
            self._by_name = dict(self._datasets)
        ds = self._vds.datasets.get(name)  # a VDS: as h5py reads it by the file's path
        ds = self._by_name.get(name) if ds is None else ds
        return _read_all(ds) if ds is not None else self.f[name][()]

    def _direct_attrs(self, name: str, obj) -> list | None:
        """An object's attributes read from the file's bytes (`_h5meta.AttrReader`), or None
        (h5py reads them): objects of this file only, after HDF5 has loaded (and checked)
        what is read, and only if as many are read as HDF5 counts."""
        if self.attr_reader is None:
            return None
        try:
            addr = _address(obj.id, self._fileno)
            if addr is None:
                return None
            self._addr[name] = addr
            # HDF5 decodes every attribute message of the object first (iterating by
            # name builds a table of them all: an attribute it cannot decode fails here,
            # as h5py's reading would), loading and checking dense storage
            h5py.h5a.iterate(obj.id, _stop)
            pairs, _dense, messages = self.attr_reader.read_object(addr)
            if len(pairs) != h5py.h5a.get_num_attrs(obj.id):
                return None
        except Exception:  # Unexpected, or HDF5 failing: h5py decides
            return None
        if isinstance(obj, h5py.Dataset):
            self._messages[name] = messages
            dtype = standard_dtype(messages.get(0x03))
            if dtype is not None and isinstance(obj, _Dataset):
                obj.__dict__["dtype"] = dtype  # what h5py maps the stored type to
        return pairs

    def _key(self, oid):
        """An object's identity: its header address in the scanned file, else its
        ObjectID (an object of a linked file)."""
        try:
            addr = _address(oid, self._fileno) if self._fileno is not None else None
        except Exception:
            return oid
        return addr if addr is not None else oid

    def _key_of(self, name: str, ds: h5py.Dataset):
        addr = self._addr.get(name)
        return addr if addr is not None else self._key(ds.id)

    def _is_scale(self, name: str, ds: h5py.Dataset) -> bool:
        a = self._attrs(name, ds)
        return "CLASS" in a and _attr_text(a.text("CLASS")) == "DIMENSION_SCALE"

    def problem(self, var: str | None, kind: str, msg: str, fatal: bool = True,
                block: tuple[int, ...] | None = None, remedy: str | None = None) -> None:
        self.problems.append(Problem(Location(self.path, var, None, block), kind, msg, fatal,
                                     remedy))

    def _omitted(self, var: str | None, owner: str):
        def omitted(key: str, why: str) -> None:
            self.problem(var, "attribute-omitted", f"attribute {key!r} of {owner} is left out: "
                         f"{why}", fatal=False)
        return omitted

    def run(self, size: int, mtime_ns: int) -> FileInventory:
        self._walk(self.f, "")
        # Dimension scales first, so variables can name their dimensions (each dataset's
        # CLASS attribute is looked at once).
        self._scales = {name for name, ds in self._datasets if self._is_scale(name, ds)}
        for name, ds in self._datasets:
            if name in self._scales:
                self.netcdf4 = self.netcdf4 or "_Netcdf4Dimid" in self._attrs(name, ds)
                shape = vds_shape(self, name, ds)  # a VDS: its extent as HDF5 resolves it
                self.dims[name] = Dimension(name, int(shape[0]) if ds.ndim else 1,
                                            ds.maxshape[0] is None if ds.ndim else False)
        if self.netcdf4:
            self._netcdf_lengths()
        for name, ds in self._datasets:
            if name in self._scales and \
                    _attr_text(self._attrs(name, ds).text("NAME")).startswith(NC_DIM_ONLY):
                continue  # a netCDF dimension without a variable
            try:
                var = self._variable(name, ds)
            except Exception as e:  # HDF5 cannot describe it (e.g. "Insufficient precision")
                self.problem(name, "corrupt", f"h5py cannot read this dataset's description "
                             f"({type(e).__name__}: {e}); --drop {name} virtualizes the rest")
                continue
            if var is not None:
                self.variables[name] = var
        return FileInventory(self.path, "netcdf4" if self.netcdf4 else "hdf5", size, mtime_ns,
                             self.groups, self.dims, self.variables, self.problems)

    def _walk(self, g: h5py.Group, prefix: str) -> None:
        """Walk group `g` (named `prefix`): each group once, by its identity (file and
        header address), so a hard link back to an ancestor (a cycle) or a group's second
        name is a located note, not a walk without end."""
        ident = _identity(g)
        if ident is not None:
            if ident in self._walked:
                first = self._walked[ident]
                why = (f"a link back to group /{first}, which contains it (a cycle)"
                       if ident in self._walking else f"another name of group /{first}")
                self.problem(prefix, "hard-link", f"{why}: skipped", fatal=False)
                return
            self._walked[ident] = prefix
        self._walking.append(ident)
        try:
            self._walk_links(g, prefix)
        finally:
            self._walking.pop()

    def _walk_links(self, g: h5py.Group, prefix: str) -> None:
        self.groups[prefix] = self._attrs(prefix, g).plain(self._omitted(prefix or None,
                                                                        "group /" + prefix))
        links = _hard_links(g)
        for key in (g.keys() if links is None else links):
            if isinstance(key, bytes):  # h5py's name for a link that is not UTF-8
                shown = key.decode("utf-8", "backslashreplace")
                self.problem(f"{prefix}/{shown}" if prefix else shown, "unsupported-object",
                             "its name is not UTF-8 text (zarr names are): skipped",
                             fatal=False)
                continue
            name = f"{prefix}/{key}" if prefix else key
            if links is not None and links[key]:  # a hard link (its target's address)
                link = None
            else:
                try:
                    link = g.get(key, getlink=True)
                except Exception as e:  # e.g. "Unknown link type": this object only
                    self.problem(name, "unsupported-object", f"h5py cannot open this link "
                                 f"({type(e).__name__}: {e}): skipped", fatal=False)
                    continue
            if isinstance(link, h5py.ExternalLink):
                self._external(g, name, link)
                continue
            if isinstance(link, h5py.SoftLink):
                # a soft link to a dataset is a second name for it (h5py and xarray show
                # both): virtualized under both; to a group or nothing: skipped
                try:
                    target = g.get(key)
                except Exception:
                    target = None
                if isinstance(target, h5py.Dataset) and not self._is_scale(name, target):
                    self._datasets.append((name, _Dataset(target.id, readonly=True)))
                else:
                    self.problem(name, "soft-link", f"soft link to {link.path}: skipped "
                                 "(a group, a dimension scale or nothing; a target is "
                                 "virtualized under its own name)", fatal=False)
                continue
            try:  # a hard link: opened directly (h5py's `get` also builds a File object)
                obj = _open(g, key)
            except Exception as e:
                # a hard link HDF5 listed whose object it cannot open is damaged (a header
                # failing its checksum, ...): its arrays would be missing from the cube;
                # HDF5 saying the object is of a kind it does not know is a note
                text = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
                if _unknown_kind(text):
                    self.problem(name, "unsupported-object", f"h5py cannot open this object "
                                 f"({type(e).__name__}: {text}): skipped", fatal=False)
                else:
                    self.problem(name, "corrupt", f"HDF5 cannot open this object, which is "
                                 f"damaged ({text}); --drop {name} virtualizes the rest")
                continue
            if isinstance(obj, h5py.Group):
                self._walk(obj, name)
            elif isinstance(obj, h5py.Dataset):
                self._datasets.append((name, obj))
            else:
                self.problem(name, "unsupported-object", "named datatype or unknown object: skipped",
                             fatal=False)

    # -- external links ------------------------------------------------------------------

    def _external(self, g: h5py.Group, name: str, link: h5py.ExternalLink) -> None:
        """An external link is followed when its target file lies in the linking file's
        directory or below it (resolved as HDF5 resolves a relative name: against that
        directory): the cube then references the target's bytes, the target recorded as a
        data file of this one, inside the roots the cube records for its sources. A
        dataset is virtualized under the link's name, a group walked under it. Links in
        remote files, to files elsewhere, missing or unreadable, to this file itself, and
        links inside a linked file are refused (`external-link`, located; --drop NAME
        virtualizes the rest)."""
        import os

        where = f"external link to {link.filename}:{link.path}"

        def refuse(why: str) -> None:
            self.problem(name, "external-link", f"{where}: {why}; --drop {name} "
                         "virtualizes the rest")

        if g.file.id != self.f.id:
            return refuse("a link inside a linked file is not followed")
        if storage.is_url(self.path):
            return refuse("links are followed only from local files")
        base = os.path.dirname(os.path.realpath(self.path))
        target = os.path.realpath(os.path.join(base, link.filename))
        if not target.startswith(base + os.sep):
            return refuse(f"the target file ({target}) is not in {base} or below it, where "
                          "the cube's sources are")
        if target == os.path.realpath(self.path):
            return refuse("it points into this file")
        if target not in self._targets:
            try:
                st = os.stat(target)
                tf = h5py.File(target, "r")
            except Exception as e:
                return refuse(f"the target file cannot be opened as HDF5 "
                              f"({type(e).__name__}: {e})")
            self._targets[target] = (tf, Source(target, st.st_size, st.st_mtime_ns,
                                                referenced_by=self.path))
        tf, _src = self._targets[target]
        k = list(self._targets).index(target)
        try:
            obj = tf.get(link.path)
        except Exception as e:
            obj, why = None, f"{type(e).__name__}: {e}"
        else:
            why = "nothing there"
        if isinstance(obj, h5py.Dataset):
            self._datasets.append((name, _Dataset(obj.id, readonly=True)))
            self._origin[name] = k
        elif isinstance(obj, h5py.Group):
            before = len(self._datasets)
            self._walk(obj, name)
            for dname, _ds in self._datasets[before:]:
                self._origin[dname] = k
        else:
            refuse(f"the target object cannot be opened ({why})")

    def link_targets(self, inv: FileInventory) -> None:
        """The followed links' targets become the inventory's data files, and the blocks
        of datasets reached through them point there (refs path k + 1)."""
        inv.data_files = [src for _tf, src in self._targets.values()]
        for name, k in self._origin.items():
            v = inv.variables.get(name)
            if v is None or v.blocks is None:
                continue
            refs = v.blocks.refs
            mine = (refs["path"] != MATERIALIZED) & (refs["length"] > 0)
            refs["path"][mine] = k + 1

    def close_targets(self) -> None:
        self._vds.close()
        for tf, _src in self._targets.values():
            try:
                tf.close()
            except Exception:
                pass

    # -- one dataset -------------------------------------------------------------------

    def _variable(self, name: str, ds: h5py.Dataset) -> Variable | None:
        if h5py.check_string_dtype(ds.dtype) is not None and ds.shape is not None:
            ds = vds_by_path(self, name, ds)  # read at scan time: a VDS by the file's path
            return self._text(name, ds) if ds is not None else None
        dtype, enum = _numeric_dtype(ds.dtype)
        if dtype is None and ds.dtype.names is not None:
            ds = vds_by_path(self, name, ds)
            return self._compound(name, ds) if ds is not None else None
        if dtype is None:
            self.problem(name, "unsupported-type",
                         f"data type {_type_words(ds.dtype)} has no zarr data type: variable "
                         "skipped", fatal=False)
            return None
        shape = tuple(int(n) for n in ds.shape) if ds.shape is not None else None
        if shape is None:
            self.problem(name, "unsupported-type", "null dataspace: skipped", fatal=False)
            return None
        st = self._storage(name, ds)
        if st.layout == h5py.h5d.VIRTUAL:  # its extent and sources as HDF5 resolves them
            return virtual_variable(self, name, ds, dtype, enum)
        odd = None if st.standard_type else stored_type_differs(ds.id.get_type(), dtype)
        if odd:  # numbers whose bytes would read wrong: refused unless inlined (as h5py reads
            # them: bfloat16 as float32, n-bit integers as their h5py type) or dropped
            self.problem(name, "unsupported-type", f"{odd}; inlined it reads as h5py reads it")
            return Variable(name=name, dtype=dtype, shape=shape, dims=self._dims(name, ds),
                            attrs=self._attrs(name, ds).plain(self._omitted(name, name)),
                            fill_value=_fill_value(ds, dtype, st.fill), codecs=[bytes_codec(dtype)],
                            blocks=None)
        attrs = self._attrs(name, ds).plain(self._omitted(name, name))
        if enum is not None:
            attrs["_enum"] = {k: int(v) for k, v in enum.items()}
        dims = self._dims(name, ds)
        blocks, codecs = self._blocks(name, ds, dtype, st)
        fill = _fill_value(ds, dtype, st.fill)
        if blocks is not None and self._unwritten_undefined(name, ds, blocks, fill, dtype):
            blocks = None
        is_coord = len(shape) == 1 and dims[0] == name.rpartition("/")[2]
        values = None
        if is_coord and shape[0] <= COORD_VALUES_LIMIT:
            values = _read_all(ds)
        if name in self._nc_shapes and self._nc_shapes[name] != shape:
            shape, blocks, values = self._netcdf_shape(name, shape, blocks, values, fill)
        return Variable(name=name, dtype=dtype, shape=shape, dims=dims, attrs=attrs,
                        fill_value=fill, codecs=codecs, blocks=blocks, values=values,
                        is_coordinate=is_coord)

    def _unwritten_undefined(self, name: str, ds: h5py.Dataset, blocks: BlockTable, fill,
                             dtype: np.dtype) -> bool:
        """Whether blocks never written would read other than h5py reads them (refused):
        where HDF5 never writes the fill value (fill time "never", or an undefined fill
        value), it leaves their part of the reader's buffer as it was, which h5py zeroes
        (netCDF-C and others: whatever the buffer held); the cube would read the dataset's
        fill value there, so one other than 0 has no library reading to match."""
        refs = blocks.refs.reshape(-1)
        missing = (refs["length"] == 0) & (refs["path"] != MATERIALIZED)
        if not missing.any():
            return False
        try:
            if fill is None or np.asarray(fill, dtype=dtype).tobytes() == bytes(dtype.itemsize):
                return False
            dcpl = ds.id.get_create_plist()
            when = dcpl.get_fill_time()
            if when != h5py.h5d.FILL_TIME_NEVER and not (
                    when == h5py.h5d.FILL_TIME_IFSET
                    and dcpl.fill_value_defined() == h5py.h5d.FILL_VALUE_UNDEFINED):
                return False
        except Exception:  # HDF5 cannot tell: as before
            return False
        i = int(np.flatnonzero(missing)[0])
        why = "fill time never" if when == h5py.h5d.FILL_TIME_NEVER else "fill value undefined"
        self.problem(name, "fill-never", f"{int(missing.sum())} block(s) were never written and "
                     f"HDF5 writes no fill value for this dataset ({why}): a reader "
                     f"gets what its buffer held there (h5py 0, not the fill value {fill}); "
                     f"--drop {name} virtualizes the rest",
                     block=tuple(int(b) for b in np.unravel_index(i, blocks.refs.shape)))
        return True

    def _compound(self, name: str, ds: h5py.Dataset) -> Variable | None:
        """A compound dataset whose members are all numbers (or compounds of numbers) is
        zarr's `struct` data type (zarr-python 3.4: packed fields, little-endian): it is
        inlined as h5py reads it (automatically when small), never referenced. Others
        (strings, sequences, references, array members) are skipped, not fatal."""
        dtype, why = struct_dtype(ds.dtype)
        shape = tuple(int(n) for n in ds.shape) if ds.shape is not None else None
        if dtype is None or shape is None:
            self.problem(name, "unsupported-type",
                         f"compound type {ds.dtype} has {why or 'a null dataspace'}: zarr has no "
                         "data type for it; variable skipped", fatal=False)
            return None
        self.problem(name, "unsupported-type",
                     f"compound type {ds.dtype}: zarr reads it as a struct data type only stored "
                     "in the cube; inlined it reads as h5py reads it")
        return Variable(name=name, dtype=dtype, shape=shape, dims=self._dims(name, ds),
                        attrs=read_attrs(ds.attrs, self._omitted(name, name)),
                        fill_value=_fill_value(ds, dtype), codecs=[bytes_codec(dtype)],
                        blocks=None)

    def _text(self, name: str, ds: h5py.Dataset) -> Variable | None:
        """Strings (HDF5 variable- or fixed-length, netCDF-4 `string`, netCDF-4 `char`
        arrays) are read at scan time and stored in the cube as zarr `string` (text), as
        netCDF4-python / xarray decode them: a `char` array (1-byte strings) along its
        last dimension joined into one string per row, as xarray does; the text decoded
        with the variable's `_Encoding` (netCDF) or its HDF5 character set. Large ones
        are skipped (not fatal)."""
        info = h5py.check_string_dtype(ds.dtype)
        dims = self._dims(name, ds)
        attrs = self._attrs(name, ds).plain(self._omitted(name, name))
        nbytes = ds.size * (info.length or 64)
        if nbytes > TEXT_LIMIT:
            self.problem(name, "unsupported-type", f"{ds.size} strings (about {nbytes} bytes) are "
                         f"more than the {TEXT_LIMIT} bytes of text inlined: variable skipped",
                         fatal=False)
            return None
        encoding = attrs.pop("_Encoding", None) or info.encoding
        chars = info.length == 1 and ds.ndim >= 1 and self.netcdf4
        try:
            values = chars_to_text(ds[()], encoding, chars)
        except Exception as e:  # undecodable bytes, a damaged heap
            self.problem(name, "unsupported-type", f"its strings cannot be read as {encoding} "
                         f"text ({type(e).__name__}: {e}): variable skipped", fatal=False)
            return None
        if chars:  # the string length axis is gone
            dims = dims[:-1]
        return Variable(name=name, dtype=values.dtype, shape=values.shape, dims=dims, attrs=attrs,
                        fill_value=None, codecs=[], blocks=None, values=values)

    # -- netCDF-4: a variable's shape is its dimensions' lengths ---------------------------

    def _netcdf_lengths(self) -> None:
        """netCDF-C extends a dataset along an unlimited dimension only when it is written:
        a variable with fewer records than its dimension (or none: an HDF5 extent of
        (0, 0) for a netCDF (2, 0) variable) is shorter in HDF5 than netCDF4-python shows
        it, the missing records reading as the fill value. An unlimited dimension is as
        long as the longest dataset along it (netCDF-C's rule); `_nc_shapes` holds every
        variable's netCDF shape."""
        axes: dict[str, list[tuple[str | None, int]]] = {}  # (scale, HDF5 extent) per axis
        longest: dict[str, int] = {}
        # scales by object identity: a reference is looked up, not named (naming an object
        # searches the file for it: quadratic in the number of objects)
        scale_ids = {self._key_of(name, ds): name for name, ds in self._datasets
                     if name in self.dims}
        for name, ds in self._datasets:
            if not ds.ndim or ds.shape is None:
                continue
            scales = self._scale_paths(name, ds, scale_ids)
            axes[name] = list(zip(scales, (int(n) for n in ds.shape)))
            for scale, n in axes[name]:
                if scale is not None:
                    longest[scale] = max(longest.get(scale, 0), n)
        self._nc_shapes = {
            name: tuple(longest[sc] if sc is not None and self.dims[sc].unlimited else n
                        for sc, n in pairs)
            for name, pairs in axes.items()}
        for sc, n in longest.items():
            d = self.dims[sc]
            if d.unlimited and n > d.size:
                self.dims[sc] = Dimension(d.name, n, True)

    def _scale_paths(self, name: str, ds: h5py.Dataset, scale_ids: dict
                     ) -> tuple[str | None, ...]:
        """The dimension scale (its path) of each axis, where there is one."""
        if name in self._scales and ds.ndim == 1:
            return (name,)
        return tuple(None if t is None else scale_ids.get(t)
                     for t in self._dimension_list(name, ds))

    def _dimension_list(self, name: str, ds: h5py.Dataset) -> tuple:
        """The object each axis's first DIMENSION_LIST reference points to (its `_key`:
        compared by object identity), or None; read and dereferenced once per dataset."""
        out = self._dim_lists.get(name)
        if out is not None:
            return out
        ndim = ds.ndim
        a = self._attrs(name, ds)
        targets: list = [None] * ndim
        if "DIMENSION_LIST" in a:
            try:
                dl = a.get("DIMENSION_LIST")
            except Exception:
                dl = ()
            if isinstance(dl, DimensionList):  # read from the file: header addresses
                for axis in range(min(ndim, len(dl))):
                    if dl[axis]:
                        targets[axis] = dl[axis][0]
            else:
                for axis in range(min(ndim, len(dl))):
                    if len(dl[axis]):
                        try:
                            targets[axis] = self._key(
                                h5py.h5r.dereference(dl[axis][0], self.f.id))
                        except Exception:
                            pass
        out = self._dim_lists[name] = tuple(targets)
        return out

    def _netcdf_shape(self, name: str, shape: tuple[int, ...], blocks, values, fill):
        """The variable at its netCDF shape: chunks past the HDF5 extent are missing (read
        as the fill value, as netCDF-C reads them). A chunk that holds both the last
        written record and unwritten ones cannot be referenced: its unwritten part holds
        whatever HDF5 put there, where netCDF4-python shows the fill value."""
        nc = self._nc_shapes[name]
        if values is not None:
            grown = np.full(nc, fill, dtype=values.dtype)
            grown[tuple(slice(0, n) for n in values.shape)] = values
            values = grown
        if blocks is None:
            return nc, blocks, values
        bs = blocks.block_shape
        for axis, (n, m, b) in enumerate(zip(shape, nc, bs)):
            if m > n and n % b:
                self.problem(name, "partial-records",
                             f"the variable holds {n} of the {m} records of its unlimited "
                             f"dimension and its last block ({b} long) holds both written and "
                             "unwritten records: netCDF reads the unwritten ones as the fill "
                             "value, the block may hold anything there; inline it with "
                             "--inline")
                return nc, None, values
        grid = tuple(-(-m // b) for m, b in zip(nc, bs))
        refs = empty_refs(grid)
        refs[tuple(slice(0, g) for g in blocks.refs.shape)] = blocks.refs
        return nc, BlockTable(bs, blocks.padded, refs), values

    def _dims(self, name: str, ds: h5py.Dataset) -> tuple[str, ...]:
        if ds.ndim == 0:
            return ()
        base = name.rpartition("/")[2]
        if name in self._scales and ds.ndim == 1:
            return (base,)
        if self._names_by_id is None:
            # walked datasets by object identity; an object walked under two names (hard
            # links, a soft link to it) is named by HDF5 instead (`_target_name`)
            self._names_by_id = {}
            for n, d in self._datasets:
                key = self._key_of(n, d)
                self._names_by_id[key] = None if key in self._names_by_id else n
        dims: list[str] = []
        for axis, target in enumerate(self._dimension_list(name, ds)):
            dim = None
            if target is not None:
                try:
                    path = self._names_by_id.get(target) or self._target_name(ds, axis, target)
                    dim = path.rpartition("/")[2]
                except Exception:
                    dim = None
            dims.append(dim or self._phony_dim(name, axis))
        return tuple(dims)

    def _target_name(self, ds: h5py.Dataset, axis: int, target) -> str:
        """HDF5's name for the object an axis's dimension scale reference points to, as
        h5py's `.name` gives it (HDF5 may search the file for it): an object walked under
        two names, or not walked."""
        if isinstance(target, int):  # an address (read from the file): dereferenced by h5py
            target = h5py.h5r.dereference(ds.attrs["DIMENSION_LIST"][axis][0], self.f.id)
        name = h5py.h5i.get_name(target)
        return name.decode("utf8") if isinstance(name, bytes) else name

    @staticmethod
    def _phony_dim(name: str, axis: int) -> str:
        # An axis without a dimension scale gets a name of its own variable and position:
        # stable across the files of a stack (netCDF-C's per-length phony_dim_N names change
        # when a file's length changes, and give two same-length axes one name).
        return f"{name.rpartition('/')[2]}_dim{axis}"

    def _storage(self, name: str, ds: h5py.Dataset) -> Storage:
        """The dataset's layout, chunk shape, filters and fill value: from the header
        messages the attribute reader read (`_h5meta.dataset_storage`), else from h5py's
        creation property list."""
        messages = self._messages.get(name)
        if messages is not None:
            st = dataset_storage(messages, ds.dtype.itemsize)
            if st is not None:
                return st
        dcpl = ds._dcpl
        layout = dcpl.get_layout()
        contiguous = (ds.id.get_offset(), ds.id.get_storage_size()) \
            if layout == h5py.h5d.CONTIGUOUS else None
        chunks = tuple(int(c) for c in ds.chunks) if layout == h5py.h5d.CHUNKED else None
        filters = [dcpl.get_filter(i) for i in range(dcpl.get_nfilters())] \
            if layout == h5py.h5d.CHUNKED else []
        return Storage(layout, dcpl.get_external_count() > 0, chunks, contiguous, filters,
                       None, False)

    def _blocks(self, name: str, ds: h5py.Dataset, dtype: np.dtype, st: Storage):
        layout = st.layout
        shape = tuple(int(n) for n in ds.shape)
        codecs = [bytes_codec(dtype)]
        if st.external:
            self.problem(name, "external-storage",
                         "cannot be referenced: data is stored in external raw files")
            return None, codecs
        if layout == h5py.h5d.COMPACT:
            self.problem(name, "compact-layout",
                         "cannot be referenced: compact layout (data lives in the object "
                         "header); inline it with --inline or drop it with --drop")
            return None, codecs
        if layout == h5py.h5d.VIRTUAL:
            self.problem(name, "virtual-dataset",
                         "cannot be referenced: HDF5 virtual dataset (VDS); virtualize its "
                         "source files instead")
            return None, codecs
        if layout == h5py.h5d.CONTIGUOUS:
            block_shape = tuple(max(n, 1) for n in shape)
            refs = empty_refs(tuple(1 for _ in shape))
            offset, nbytes = st.contiguous
            expected = math.prod(shape) * dtype.itemsize
            if offset is not None and nbytes != expected and expected:
                # libhdf5 reads the dataset's size from the address whatever the layout
                # message says (uninitialised memory where it says 0): refused
                self.problem(name, "corrupt", f"contiguous data at byte offset {offset} is "
                             f"stored as {nbytes} bytes, {expected} expected for shape {shape}")
                return None, codecs
            if offset is not None and nbytes:
                refs[(0,) * len(shape)] = (0, offset, nbytes)
            return BlockTable(block_shape, padded=False, refs=refs), codecs
        # chunked
        chunks = st.chunks
        pipeline = self._filters(st.filters, dtype)
        grid = tuple(-(-n // c) for n, c in zip(shape, chunks))
        cells = math.prod(grid)
        if cells > MAX_BLOCKS:  # checked before allocating (a corrupt dataspace, or just huge)
            self.problem(name, "too-many-blocks",
                         f"shape {shape} in chunks of {chunks} is {cells} chunks: its block table "
                         f"would take {cells * REF_DTYPE.itemsize} bytes (the limit is "
                         f"{MAX_BLOCKS} chunks)")
            return None, codecs
        refs = empty_refs(grid)
        if all(grid):
            try:
                got = self._chunk_index(name, ds, chunks)
            except _Corrupt as e:
                self.problem(name, "corrupt", f"the chunk index is damaged: {e}; --drop {name} "
                             "virtualizes the rest", block=e.block)
                return None, codecs
            if got is None:
                self.problem(name, "chunk-coordinates",
                             "cannot be referenced: HDF5's chunk_iter lists the chunks of an "
                             "extensible array index whose unlimited axis is not the first at "
                             "other coordinates, and whether this dataset's index is one (its "
                             "layout message unreadable), or where this HDF5 lists them, could "
                             "not be told; --inline or --drop it")
                return None, codecs
            idx, offsets, sizes, masks = got
        else:
            idx, offsets = np.zeros((0, len(shape)), np.int64), np.zeros(0, np.uint64)
            sizes, masks = offsets, np.zeros(0, np.uint32)
        idx = idx // np.asarray(chunks, dtype=np.int64)
        inside = (idx < np.asarray(grid, dtype=np.int64)).all(axis=1)
        if not inside.all():  # chunks left allocated past a shrunken extent hold no data of it
            idx, offsets, sizes, masks = idx[inside], offsets[inside], sizes[inside], masks[inside]
        # A layout that leaves partial edge chunks unfiltered (H5Pset_chunk_opts): those
        # chunks skip every filter, though their filter mask says none
        edges = None
        if pipeline and len(idx) and self._edge_chunks_unfiltered(name, ds):
            edges = ((idx + 1) * np.asarray(chunks, dtype=np.int64)
                     > np.asarray(shape, dtype=np.int64)).any(axis=1)
            masks = np.where(edges, np.uint32((1 << len(pipeline)) - 1), masks)
        # The filter mask: bit i set says filter i was skipped for that chunk (an optional
        # filter that could not shrink it). The pipeline is the one most chunks were
        # stored with; chunks stored otherwise are odd (copied by --materialize).
        mask = 0
        if masks.any():
            values, counts = np.unique(masks, return_counts=True)
            mask = int(values[np.argmax(counts)])
        used = [(i, f) for i, f in enumerate(pipeline) if not mask >> i & 1]
        missing = [(code, label, why) for _i, (code, label, codec, why) in used if codec is None]
        for code, label, why in missing:
            self.problem(name, "unsupported-filter",
                         f"HDF5 filter {code} ({label}) has no zarr codec that decodes it "
                         "exactly" + (f" ({why})" if why else ""))
        if missing:
            return None, codecs
        filters = [codec for _i, (_code, _label, codec, _why) in used]
        codecs += filters
        # a chunk with an address holds bytes: unfiltered exactly one chunk's, filtered at
        # least one (libhdf5 reads a 0-byte chunk as uninitialised memory)
        full = math.prod(chunks) * dtype.itemsize
        # ... and a chunk whose filter mask skips every filter that changes its size holds
        # exactly one chunk's bytes (plus fletcher32's checksum): HDF5 reads a chunk of
        # another size into a chunk's buffer and leaves the rest uninitialised (a mask
        # 0x7fffffff on a deflated chunk: its compressed bytes, then memory that changes
        # from run to run), so h5py's read is no reading to inline or copy either
        odd, raw = sizes == 0, np.zeros(len(sizes), bool)
        for m in np.unique(masks).tolist():
            left = [code for i, (code, *_rest) in enumerate(pipeline) if not m >> i & 1]
            if set(left) <= {2, 3}:  # shuffle keeps the size, fletcher32 adds 4 bytes
                wrong = (masks == m) & (sizes != full + 4 * left.count(3))
                odd |= wrong
                raw |= wrong
        if odd.any():
            i = int(np.flatnonzero(odd)[0])
            how = ""
            if raw[i] and int(masks[i]) != mask:
                how = (f" with filter mask {int(masks[i]):#x} (its filters skipped), where HDF5 "
                       "reads it into one chunk's buffer, leaving the rest uninitialised")
            self.problem(name, "corrupt", f"the chunk index lists {int(sizes[i])} stored bytes at "
                         f"byte offset {int(offsets[i])}{how}"
                         + (f", {full} expected (no filters)" if raw[i] and not how else "")
                         + f"; --drop {name} virtualizes the rest",
                         block=tuple(int(b) for b in idx[i]))
            return None, codecs
        if len(offsets):
            flat = np.ravel_multi_index(tuple(idx.T), grid)
            view = refs.reshape(-1)
            view["offset"][flat] = offsets
            view["length"][flat] = sizes
            other = masks != mask
            if other.any():
                self._masked_chunks(name, view, flat[other], idx[other], masks[other], mask,
                                    full, None if edges is None else edges[other])
        if mask:
            skipped = ", ".join(str(pipeline[i][0]) for i in range(len(pipeline)) if mask >> i & 1)
            self.problem(name, "filter-skipped",
                         f"every stored chunk skips HDF5 filter(s) {skipped} (filter mask "
                         f"{mask:#x}): the cube decodes them without it", fatal=False)
        return BlockTable(chunks, padded=True, refs=refs), codecs

    def _chunk_index(self, name: str, ds: h5py.Dataset, chunks: tuple[int, ...]):
        """A chunked dataset's index: read directly where it is a v1 B-tree, a fixed
        array, an extensible array, a v2 B-tree or an implicit index in a local file
        (`_native_chunk_index`, from the bytes HDF5 has just read counting the index),
        else, or on anything unexpected, by `chunk_iter` (`_chunk_iter_index`). A dataset
        in another file, reached by an external link (the recorder reads this file's bytes
        only): `chunk_iter`. None: the chunks' coordinates cannot be told."""
        rec = self.recorder
        cells = math.prod(-(-int(n) // c) for n, c in zip(ds.shape, chunks))
        # a v1 B-tree's keys are read whatever its size: only they show a key HDF5's
        # lookups miss (a datatype offset not 0) that chunk_iter lists all the same
        body = (self._messages.get(name) or {}).get(0x08)
        v1 = body is not None and len(body) > 1 and body[0] == 3 and body[1] == 2
        if name not in self._origin and rec is not None and (cells >= DIRECT_MIN_CHUNKS or v1):
            keep = len(rec.reads)
            try:
                on, rec.on = rec.on, True  # HDF5's own walk of the index: its count, and its reads
                try:
                    count = ds.id.get_num_chunks()
                finally:
                    rec.on = on
                got = _native_chunk_index(rec.pread, self.size, ds.id, chunks, lambda: count,
                                          body)
            except _Corrupt:  # HDF5 would misread it: refused (`_blocks`)
                raise
            except Exception:  # _Unexpected, or HDF5 failing to count: chunk_iter decides
                got = None
            finally:
                rec.forget(keep)
            if got is not None:
                return got
        return self._chunk_iter_index(name, ds, chunks)

    def _chunk_iter_index(self, name: str, ds: h5py.Dataset, chunks: tuple[int, ...]):
        """One `chunk_iter` pass over a dataset's index (`_walk_chunk_index`). Where HDF5
        misplaces what it lists (`_chunk_iter_swizzles`: an extensible array whose unlimited
        axis is not the first and follows an axis of more than one chunk), the chunks are
        put at their places from their order (`_chunk_iter_renumbered`) once the dataset's
        layout message says its index is an extensible array; None if that cannot be told."""
        got = _walk_chunk_index(ds.id, len(chunks))
        # HDF5 lists chunks in the order of their coordinates (by key in a B-tree, by
        # position in the other indexes), except an extensible array's whose unlimited axis
        # is not the first where this HDF5 does not misplace them (they come in its order)
        k = ds.maxshape.index(None) if ds.maxshape is not None and \
            ds.maxshape.count(None) == 1 else 0
        _check_listed(got[0], chunks, ordered=k == 0 or _chunk_iter_swizzles() is True)
        if ds.maxshape is None or ds.maxshape.count(None) != 1:
            return got  # no extensible array: not one unlimited axis
        try:
            k, grid = _unlimited_axis(ds.id, chunks)
        except _Unexpected:
            return got  # no extensible array: not one unlimited axis
        if k == 0 or math.prod(grid[:k]) == 1 or not len(got[0]) \
                or _chunk_iter_swizzles() is False:
            return got  # HDF5's numbering and chunk_iter's agree
        try:
            body = self._layout_body(name, ds)
            if body[0] == 3:
                return got  # a v1 B-tree: chunk_iter lists its keys
            pos = 5 + body[4] * body[3]
            if body[0] not in (4, 5) or body[1] != 2 or len(body) <= pos:
                raise _Unexpected("layout message not understood")
            if body[pos] != 4:
                return got  # not an extensible array
            if not _chunk_iter_swizzles():
                return None  # this HDF5 lists them otherwise
            offsets = _chunk_iter_renumbered(got[0], chunks, k, grid)
        except Exception:  # _Unexpected, or the header unreadable
            return None
        return (offsets,) + tuple(got[1:])

    def _edge_chunks_unfiltered(self, name: str, ds: h5py.Dataset) -> bool:
        """Whether the dataset's layout message (version 4 or 5, chunked) says partial
        edge chunks are stored without the filter pipeline (H5D_CHUNK_DONT_FILTER_PARTIAL_
        CHUNKS: h5py cannot tell, HDF5 reads them so)."""
        try:
            body = self._layout_body(name, ds)
        except Exception:  # unreadable here: as HDF5's property list tells (nothing)
            return False
        return len(body) > 2 and body[0] in (4, 5) and body[1] == 2 and bool(body[2] & 0x01)

    def _layout_body(self, name: str, ds: h5py.Dataset) -> bytes:
        """The body of a dataset's data layout message: the one the header reader found
        (`_direct_attrs`), else read from the file holding it (this file, or the target of
        the external link it was reached by)."""
        body = (self._messages.get(name) or {}).get(0x08)
        if body is not None:
            if len(body) < 5:
                raise _Unexpected("no layout message")
            return body
        fcpl = h5py.h5i.get_file_id(ds.id).get_create_plist()
        if fcpl.get_sizes() != (8, 8):
            raise _Unexpected("a file with other than 8-byte addresses and lengths")
        base = fcpl.get_userblock()  # addresses are relative to the superblock
        objno = h5py.h5g.get_objinfo(ds.id, b".").objno
        if objno[1] != 0:
            raise _Unexpected("an object header address past 2**64")
        k = self._origin.get(name)
        if k is None:
            pread = self.recorder.pread if self.recorder is not None else self.source.pread
            body = _layout_message(lambda n, off: pread(n, off + base), int(objno[0]),
                                   self.size - base)
        else:
            target = list(self._targets)[k]
            with open(target, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                body = _layout_message(lambda n, off: os.pread(fh.fileno(), n, off + base),
                                       int(objno[0]), size - base)
        if body is None or len(body) < 5:
            raise _Unexpected("no layout message")
        return body

    def _masked_chunks(self, name: str, view, flat, idx, masks, mask: int, full: int,
                       edges=None) -> None:
        """Chunks stored with a filter mask other than the dataset's usual one decode
        differently: they cannot be referenced. They are marked held (MATERIALIZED: no
        byte range; h5py, which honours the mask, reads their values) and refused as
        `filter-mask` problems whose remedy is to copy them (`--materialize`). `edges`:
        which of them are partial edge chunks a layout leaves unfiltered."""
        view["path"][flat] = MATERIALIZED
        view["offset"][flat] = 0
        view["length"][flat] = 0
        remedy = (f"materialize {len(flat)} block(s), {len(flat) * full} bytes decoded "
                  "(--materialize)")
        for k, (b, m) in enumerate(list(zip(idx, masks))[:20]):
            how = ("this partial edge chunk is stored unfiltered (the dataset's layout leaves "
                   "partial edge chunks unfiltered)" if edges is not None and edges[k] else
                   f"this chunk was stored with filter mask {int(m):#x}")
            self.problem(name, "filter-mask",
                         f"{how} where the others have filter mask {mask:#x} (part of the "
                         "filter pipeline skipped), so it decodes differently from them",
                         block=tuple(int(i) for i in b), remedy=remedy)
        if len(flat) > 20:
            self.problem(name, "filter-mask", f"... and {len(flat) - 20} more chunks with a "
                         "different filter mask", remedy=remedy)

    def _filters(self, filters, dtype: np.dtype) -> list[tuple[int, str, dict | None, str | None]]:
        """The filter pipeline: per filter its id, name, codec (None: no exact codec) and
        why there is none."""
        out = []
        for code, _flags, values, fname in filters:
            label = fname.decode(errors="replace") if isinstance(fname, bytes) else fname
            out.append((code, label, hdf5_filter_codec(code, tuple(values), dtype),
                        NO_EXACT_CODEC.get(code)))
        return out


def _check_listed(offsets, chunks: tuple[int, ...], ordered: bool) -> None:
    """The chunks `chunk_iter` lists must be at whole chunks, each listed once, and
    (`ordered`) in increasing order of their coordinates: else keys of the index are
    damaged (two keys for one chunk, a key out of order) and HDF5's lookups, which search
    the index by key, read other chunks for them than the ones listed (`_Corrupt`)."""
    if not len(offsets):
        return
    c = np.asarray(chunks, dtype=np.int64)
    off = (offsets < 0).any(axis=1) | (offsets % c).any(axis=1)
    if off.any():
        i = int(np.flatnonzero(off)[0])
        raise _Corrupt(f"HDF5 lists a chunk at element offsets {tuple(int(x) for x in offsets[i])}, "
                       f"not at a whole chunk of {tuple(chunks)}")
    scaled = offsets // c
    if not ordered:
        scaled = scaled[np.lexsort(scaled.T[::-1])]
    bad = _first_not_increasing(scaled)
    if bad >= 0:
        a, b = (tuple(int(x) for x in scaled[j] * c) for j in (bad, bad + 1))
        block = tuple(int(x) for x in scaled[bad + 1])
        if a == b:
            raise _Corrupt(f"HDF5's index lists chunk {a} (element offsets) twice: two keys "
                           "for one chunk, HDF5 reads one of the chunks they point to for both",
                           block)
        raise _Corrupt(f"HDF5's index lists chunk {b} after {a}: its keys are out of order, so "
                       "HDF5's lookups look for chunks in the wrong place", block)


def _walk_chunk_index(dsid, ndim: int):
    """One `chunk_iter` pass over a dataset's chunk index, into flat typed buffers (no
    per-chunk Python objects kept): chunk element offsets (n, ndim), byte offsets, stored
    sizes, filter masks."""
    co, fm, bo, sz = array("q"), array("I"), array("Q"), array("Q")
    co_ext, fm_app, bo_app, sz_app = co.extend, fm.append, bo.append, sz.append

    def visit(info) -> None:
        c, m, o, s = info
        co_ext(c)
        fm_app(m)
        bo_app(o)
        sz_app(s)

    dsid.chunk_iter(visit)
    n = len(bo)
    return (np.frombuffer(co, dtype=np.int64).reshape(n, ndim), np.frombuffer(bo, dtype=np.uint64),
            np.frombuffer(sz, dtype=np.uint64), np.frombuffer(fm, dtype=np.uint32))


@functools.cache
def _chunk_iter_swizzles() -> bool | None:
    """Whether this HDF5's `chunk_iter` (and `get_chunk_info`, `get_chunk_info_by_coord`)
    misplace the chunks of an extensible array index whose unlimited axis is not the
    first. HDF5 numbers such a chunk with the unlimited axis moved first (`_earray_scaled`)
    but lists the array's elements giving the i-th the coordinates of the i-th grid cell
    counted row-major in the dataset's own axis order (H5D__earray_idx_iterate_cb, HDF5
    2.0.0 and before); reading data is right. Found once, on a file in memory: chunk (1, 0)
    of a (2, 1) dataset unlimited along axis 1 is element 1, listed at (0, 1) (True) or at
    (1, 0) (False); None: listed otherwise."""
    import threading

    name = f"virtualize-probe-{os.getpid()}-{threading.get_ident()}.h5"
    try:
        with h5py.File(name, "w", driver="core", backing_store=False, libver="latest") as f:
            d = f.create_dataset("p", shape=(2, 1), maxshape=(2, None), chunks=(1, 1), dtype="u1")
            d[1, 0] = 1
            got: list = []
            d.id.chunk_iter(lambda info: got.append(tuple(info.chunk_offset)))
    except Exception:
        return None
    return {((0, 1),): True, ((1, 0),): False}.get(tuple(got))


def _chunk_iter_renumbered(offsets, chunks: tuple[int, ...], k: int, grid: tuple[int, ...]):
    """The true offsets of the chunks `chunk_iter` lists for an extensible array whose
    unlimited axis `k` is not the first, where HDF5 misplaces them (`_chunk_iter_swizzles`):
    the elements are listed in their order, element i at the i-th grid cell counted
    row-major with axis k unbounded (the axes before it 0), so i is read back from those
    coordinates and placed as HDF5 numbers it (`_earray_scaled`)."""
    c = np.asarray(chunks, dtype=np.int64)
    scaled = offsets // c
    later = grid[k + 1:]
    if (offsets % c).any() or (scaled < 0).any() or (scaled[:, :k] != 0).any() \
            or (scaled[:, k + 1:] >= np.asarray(later, dtype=np.int64)).any():
        raise _Unexpected("chunk_iter's coordinates are not an extensible array's elements")
    index = scaled[:, k] * math.prod(later)
    if later:
        index = index + np.ravel_multi_index(tuple(scaled[:, k + 1:].T), later)
    if (np.diff(index) <= 0).any():
        raise _Unexpected("chunk_iter's chunks are not in an extensible array's order")
    return _earray_scaled(index, k, grid) * c


# -- helpers, pure ---------------------------------------------------------------------

# Why known filters without an exact codec are refused (the problem message says it).
NO_EXACT_CODEC = {
    4: "szip without its four parameters",
    5: "nbit packs values in fewer bits: no zarr codec unpacks HDF5's layout",
    6: "scaleoffset: no zarr codec undoes HDF5's scale-offset packing",
    32000: "imagecodecs_lzf cannot be told a chunk's decoded size and fails on chunks that "
           "compress more than about 2:1",
    32008: "imagecodecs_bitshuffle unshuffles the chunk as 1-byte items (wrong for wider "
           "types), and with LZ4 or zstd the filter frames its blocks in a way no zarr codec "
           "reads exactly",
    32026: "hdf5-blosc2 stores each chunk as a Blosc2 NDim frame: imagecodecs_blosc2 does not "
           "read frames and imagecodecs_b2nd decodes them to void items zarr cannot use",
    32013: "H5Z-ZFP keeps the zfp header in the filter's parameters, which imagecodecs_zfp "
           "cannot be given",
}


def hdf5_filter_codec(code: int, values: tuple[int, ...], dtype: np.dtype) -> dict | None:
    """The zarr v3 codec that decodes HDF5 filter `code` exactly, or None. Codecs named
    `imagecodecs_*` are imagecodecs' zarr 3 codecs: a reader registers them with
    `imagecodecs.zarr.register_codecs()` (`virtualize.open` does)."""
    if code == h5py.h5z.FILTER_DEFLATE:  # HDF5 stores zlib streams (not gzip)
        return {"name": "numcodecs.zlib", "configuration": {"level": int(values[0]) if values else 1}}
    if code == h5py.h5z.FILTER_SHUFFLE:
        return {"name": "numcodecs.shuffle", "configuration": {"elementsize": int(dtype.itemsize)}}
    if code == h5py.h5z.FILTER_FLETCHER32:
        return {"name": "numcodecs.fletcher32", "configuration": {}}
    if code == 32015:  # zstd: plain zstd frames; the level (a C int, stored as unsigned) only
        # matters for encoding, but is written as the signed number it is
        level = int(np.array(values[0] if values else 0, dtype=np.uint32).view(np.int32))
        return {"name": "numcodecs.zstd", "configuration": {"level": level}}
    if code == 32001:  # blosc: standard blosc1 frames; parameters live in each frame
        return {"name": "numcodecs.blosc", "configuration": {}}
    if code == h5py.h5z.FILTER_SZIP and len(values) >= 4:
        # HDF5's szip framing: a 4-byte little-endian decoded size, then the AEC stream;
        # the parameters are the ones HDF5 stored after `set_local` (options mask with the
        # byte order flags, pixels per block, bits per pixel, pixels per scanline)
        return {"name": "imagecodecs_szip", "configuration": {
            "options_mask": int(values[0]), "pixels_per_block": int(values[1]),
            "bits_per_pixel": int(values[2]), "pixels_per_scanline": int(values[3]),
            "header": True}}
    if code == 32004:  # HDF5's LZ4 filter framing (sizes, then blocks): imagecodecs' lz4h5
        return {"name": "imagecodecs_lz4h5"}
    # nbit (5), scaleoffset (6), lzf (32000), bitshuffle (32008), zfp (32013),
    # blosc2 (32026) and unknown filters have no exact zarr codec (NO_EXACT_CODEC says why).
    return None


def _numeric_dtype(dt: np.dtype) -> tuple[np.dtype | None, dict | None]:
    enum = h5py.check_enum_dtype(dt)
    if enum is not None:
        base = dt.base if dt.kind in "iub" else np.dtype(dt.str)
        if dt.kind == "b":
            return np.dtype(bool), None
        return np.dtype(base.str), dict(enum)
    if dt.kind in "biufc" and dt.fields is None and h5py.check_vlen_dtype(dt) is None:
        return np.dtype(dt.str if dt.kind != "b" else bool), None
    return None, None


def struct_dtype(dt: np.dtype) -> tuple[np.dtype | None, str | None]:
    """The zarr `struct` data type of an h5py compound dtype: its members in order, packed,
    little-endian (zarr-python 3.4 stores structs packed), or None and why not: zarr 3.4
    converts only members that are numbers or structs of numbers (no subarray members; a
    string member would be a data type zarr-python marks unstable)."""
    if dt.names is None:
        if dt.kind in "biufc" and dt.subdtype is None and h5py.check_vlen_dtype(dt) is None \
                and h5py.check_string_dtype(dt) is None:
            return (dt.newbyteorder("<") if dt.itemsize > 1 else dt), None
        what = ("an array member" if dt.subdtype is not None else
                "a string member" if h5py.check_string_dtype(dt) is not None else
                "a sequence (vlen) member" if h5py.check_vlen_dtype(dt) is not None else
                "a reference member" if h5py.check_ref_dtype(dt) is not None else
                f"a {dt} member")
        return None, what
    fields = []
    for key in dt.names:
        sub, why = struct_dtype(dt.fields[key][0])
        if sub is None:
            return None, f"{why} ({key!r})"
        fields.append((key, sub))
    if not fields:
        return None, "no members"
    return np.dtype(fields), None


def _type_words(dt: np.dtype) -> str:
    """An HDF5 type h5py reads as numpy `dt`, in words: 'vlen sequence of int32',
    'object reference', 'region reference', 'opaque (2 bytes)'."""
    vlen = h5py.check_vlen_dtype(dt)
    if vlen is not None:
        return f"vlen sequence of {vlen}"
    ref = h5py.check_ref_dtype(dt)
    if ref is not None:
        return "region reference" if ref is h5py.RegionReference else "object reference"
    if dt.kind == "V" and dt.names is None and dt.subdtype is None:
        return f"opaque ({dt.itemsize} bytes)"
    return str(dt)


def stored_type_differs(tid, dtype: np.dtype) -> str | None:
    """Why the bytes HDF5 stores for type `tid` are not the bytes of numpy `dtype` (so a
    zarr `bytes` codec would misread them), or None when they are. h5py maps types by
    class and size and lets HDF5 convert on read: a bfloat16 (2 bytes, 8-bit exponent)
    reads as float32, a 12-bit integer in 2 bytes as int16; neither is what its stored
    bytes decode to as a zarr data type."""
    dtype = np.dtype(dtype)
    cls = tid.get_class()
    if cls == h5py.h5t.ENUM:
        tid = tid.get_super()
        cls = tid.get_class()
    if cls == h5py.h5t.COMPOUND and dtype.kind == "c":  # h5py's complex: {r, i}
        half = dtype.itemsize // 2
        if tid.get_size() != dtype.itemsize or tid.get_nmembers() != 2:
            return f"complex stored as a {tid.get_size()}-byte compound, not {dtype.itemsize} bytes"
        for i in range(2):
            why = stored_type_differs(tid.get_member_type(i), np.dtype(f"{dtype.byteorder}f{half}"))
            if why or tid.get_member_offset(i) != i * half:
                return f"complex parts are not two adjacent IEEE floats ({why or 'offsets'})"
        return None
    if cls == h5py.h5t.BITFIELD:  # h5py reads a bitfield as the unsigned integer of its size
        if tid.get_size() != dtype.itemsize:
            return f"a {tid.get_size()}-byte bitfield read as {dtype}"
        return None
    if cls not in (h5py.h5t.INTEGER, h5py.h5t.FLOAT):
        return None
    size, precision, offset = tid.get_size(), tid.get_precision(), tid.get_offset()
    if cls == h5py.h5t.FLOAT:
        std = {2: h5py.h5t.IEEE_F16LE, 4: h5py.h5t.IEEE_F32LE, 8: h5py.h5t.IEEE_F64LE}.get(size)
        layout = (tid.get_fields(), tid.get_ebias(), tid.get_norm(), precision, offset)
        if std is None or layout != (std.get_fields(), std.get_ebias(), std.get_norm(),
                                     std.get_precision(), std.get_offset()):
            _spos, _epos, esize, _mpos, msize = tid.get_fields()
            what = " (bfloat16)" if (size, esize, msize) == (2, 8, 7) else ""
            return (f"a {8 * size}-bit float with {esize} exponent and {msize} mantissa bits"
                    f"{what} is not an IEEE float zarr has a data type for (h5py "
                    f"reads it as {dtype}, HDF5 converting each value)")
    if size != dtype.itemsize:
        return (f"HDF5 stores {size} byte(s) per value, but h5py reads it as {dtype} "
                f"({dtype.itemsize} bytes; HDF5 converts each value on read): zarr has no data "
                "type for the stored values")
    if precision != 8 * size or offset != 0:
        return (f"a {precision}-bit number at bit offset {offset} in {size} byte(s) (h5py reads "
                f"it as {dtype}, HDF5 converting each value): zarr has no such data type")
    if tid.get_order() not in (h5py.h5t.ORDER_LE, h5py.h5t.ORDER_BE, h5py.h5t.ORDER_NONE):
        return "byte order is neither little- nor big-endian"
    return None


def _fill_value(ds: h5py.Dataset, dtype: np.dtype, stored: bytes | None = None):
    """The dataset's fill value as h5py reads it (`ds.fillvalue`), as `dtype`; `stored`:
    its bytes from the header (b"": none defined, zeros), None to ask h5py."""
    if stored is not None and len(stored) in (0, ds.dtype.itemsize) and ds.dtype.kind in "iuf" \
            and ds.dtype.metadata is None:
        fv = np.frombuffer(stored, ds.dtype)[0] if stored else None
    else:
        try:
            fv = ds.fillvalue
        except Exception:
            fv = None
    if fv is None:
        return np.zeros((), dtype=dtype)[()]
    return np.asarray(fv).astype(dtype)[()]


def _attr_text(v: Any) -> str:
    if isinstance(v, bytes):
        return v.decode("utf-8", errors="replace")
    if isinstance(v, np.ndarray) and v.size == 1:
        return _attr_text(v.reshape(-1)[0])
    return v if isinstance(v, str) else ""


def _read_all(ds: h5py.Dataset):
    """`ds[()]`: for an array of plain numbers (no enum, no conversion), read with one
    low-level call (h5py's `__getitem__` builds a selection and a reader per call)."""
    dt = ds.dtype
    shape = ds.shape
    if dt.kind in "iuf" and dt.metadata is None and dt.names is None and shape \
            and all(shape):
        out = np.zeros(shape, dtype=dt)  # initialised: what HDF5 leaves unset is 0
        ds.id.read(h5py.h5s.ALL, h5py.h5s.ALL, out)
        return out
    return ds[()]


class _Dataset(h5py.Dataset):
    """A dataset of a file open read-only: what the scan asks of it many times (rank,
    type, maximum shape, chunk shape) asked of HDF5 once (h5py asks each time, making an
    object per answer)."""

    def __init__(self, bind, *, readonly: bool = True):
        # h5py's own __init__ also makes a transfer property list, needed only to read
        # (`_dxpl`, made when first asked for)
        if not isinstance(bind, h5py.h5d.DatasetID):
            raise ValueError(f"{bind} is not a DatasetID")
        self._id = bind
        self._readonly = readonly
        self._cache_props = {}

    _dxpl = functools.cached_property(lambda self: h5py.h5p.create(h5py.h5p.DATASET_XFER))
    ndim = functools.cached_property(lambda self: len(self.shape) if self.shape is not None else 0)
    dtype = functools.cached_property(h5py.Dataset.dtype.fget)
    maxshape = functools.cached_property(h5py.Dataset.maxshape.fget)
    chunks = functools.cached_property(h5py.Dataset.chunks.fget)


def _hard_links(g: h5py.Group) -> dict | None:
    """A group's link names in the order h5py's `keys()` lists them (creation order where
    the group tracks it, else by name), each with True for a hard link, from one HDF5
    iteration (h5py's `keys()` then `get(key, getlink=True)` make objects per link); None
    when HDF5 cannot list them so (h5py's `keys()` decides)."""
    try:
        gid = g.id
        if isinstance(gid, h5py.h5f.FileID):  # its create_plist is the file's
            gid = h5py.h5g.open(gid, b"/")
        tracked = gid.get_create_plist().get_link_creation_order() & h5py.h5p.CRT_ORDER_TRACKED
        found: list = []
        gid.links.iterate(lambda n, info: found.append((n, info.type)), info=True,
                           idx_type=h5py.h5.INDEX_CRT_ORDER if tracked else h5py.h5.INDEX_NAME)
        if len(found) != gid.get_num_objs():
            return None
        return {g._d(n): t == h5py.h5l.TYPE_HARD for n, t in found}
    except Exception:
        return None


# What HDF5 says of an object it cannot open because it is of a kind it does not know
# (an object header message it must understand, from a newer library), not damaged.
_UNKNOWN_KIND = ("unknown message", "unsupported", "not supported", "unknown object",
                 "unknown link")


def _unknown_kind(text: str) -> bool:
    text = text.lower()
    return any(w in text for w in _UNKNOWN_KIND)


def _identity(g: h5py.Group):
    """A group's identity: its file's number and header address (None if HDF5 cannot
    tell)."""
    try:
        info = h5py.h5g.get_objinfo(g.id, b".")
        return info.fileno, tuple(info.objno)
    except Exception:
        return None


def _open(g: h5py.Group, key: str):
    """The object behind hard link `key` of `g` (a Group, Dataset or Datatype), or None
    when there is none; what `g.get(key)` returns, without the `File` object h5py's
    `Group.get` builds for every dataset it opens."""
    try:
        encode = g._e  # h5py's own name encoding (private: else its `get`)
    except AttributeError:  # pragma: no cover
        return g.get(key)
    # h5o.open raises KeyError when the object cannot be opened (a damaged header too): the
    # caller tells what it is from HDF5's message
    oid = h5py.h5o.open(g.id, encode(key))
    if isinstance(oid, h5py.h5d.DatasetID):
        return _Dataset(oid, readonly=True)
    if isinstance(oid, h5py.h5g.GroupID):
        return h5py.Group(oid)
    return h5py.Datatype(oid) if isinstance(oid, h5py.h5t.TypeID) else None


class _Attrs:
    """An object's attributes, each read at most once: its names are listed once, a value
    is read when first asked for (a hidden attribute nobody asks for, such as a scale's
    REFERENCE_LIST, is never read); what h5py raised reading it is raised again."""

    __slots__ = ("obj", "_manager", "names", "_values")

    def __init__(self, obj, direct: list | None = None):
        self.obj = obj
        self._manager = None
        self._values: dict[str, Any] = {}
        if direct is not None:  # (name, value) pairs read from the file (ASK_H5PY: h5py reads it)
            self.names = [k for k, _v in direct]
            self._values = {k: v for k, v in direct if v is not ASK_H5PY}
            return
        try:
            self.names = _attr_names(obj.id, obj)
        except Exception:
            self.names = list(self.manager.keys())

    @property
    def manager(self) -> h5py.AttributeManager:
        """h5py's attributes of the object (made when first needed: a File's looks its
        root group up by name)."""
        if self._manager is None:
            self._manager = self.obj.attrs
        return self._manager

    def __contains__(self, key: str) -> bool:
        return key in self.names

    def get(self, key: str, default=None):
        if key not in self._values:
            if key not in self.names:
                return default
            try:
                self._values[key] = self.manager[key]
            except Exception as e:
                self._values[key] = _Failed(e)
        v = self._values[key]
        if isinstance(v, _Failed):
            raise v.error
        return v

    def text(self, key: str):
        """A scalar fixed-length string attribute (CLASS, NAME) as bytes, read directly:
        HDF5 converts a null-terminated string to h5py's (null-padded) type by keeping
        the bytes before the first NUL, a null-padded one as it is (numpy then drops
        trailing NULs), which is what this keeps; any other type (and a space-padded
        string, which that conversion trims) is read as `get` reads it."""
        if key in self._values or key not in self.names:
            return self.get(key)
        try:
            attr = h5py.h5a.open(self.obj.id, key.encode("utf8"))
            tid = attr.get_type()
            if tid.get_class() == h5py.h5t.STRING and not tid.is_variable_str() and \
                    tid.get_strpad() in (h5py.h5t.STR_NULLTERM, h5py.h5t.STR_NULLPAD) and \
                    attr.get_space().get_simple_extent_type() == h5py.h5s.SCALAR:
                buf = np.zeros((), dtype=f"S{tid.get_size()}")
                attr.read(buf, mtype=tid)
                raw = bytes(buf[()]) if tid.get_strpad() == h5py.h5t.STR_NULLPAD \
                    else bytes(buf[()]).partition(b"\0")[0]
                v = self._values[key] = np.bytes_(raw.rstrip(b"\0"))
                return v
        except Exception:
            pass
        return self.get(key)

    def plain(self, omitted=None) -> dict[str, Any]:
        # read_attrs reads through this cache; of h5py's manager it needs the object's id
        # only (to name what references point to)
        return read_attrs(self._manager or _Ids(self.obj.id), omitted, self)


def _attr_names(oid, obj) -> list:
    """An object's attribute names in the order h5py's `attrs.keys()` lists them
    (creation order where it is tracked, else by name), without the property list
    objects `keys()` makes each time (a dataset's is at hand). A dataset whose creation
    property list HDF5 cannot make (a variable-length fill value in a damaged global
    heap: h5py's `keys()` fails) is listed in the order its object header's flags say
    (what that list would say), so that it fails where its data is read, located."""
    if isinstance(oid, h5py.h5f.FileID):  # its create_plist is the file's, not the root's
        oid = h5py.h5g.open(oid, b"/")
    try:
        cpl = getattr(obj, "_dcpl", None) if isinstance(obj, h5py.Dataset) else None
        if cpl is None:
            cpl = oid.get_create_plist()
        tracked = cpl.get_attr_creation_order() & h5py.h5p.CRT_ORDER_TRACKED
    except Exception:
        if not isinstance(obj, h5py.Dataset):
            raise
        hdr = h5py.h5o.get_info(oid).hdr
        tracked = hdr.version == 2 and hdr.flags & 0x04  # H5O_HDR_ATTR_CRT_ORDER_TRACKED
    order = h5py.h5.INDEX_CRT_ORDER if tracked else h5py.h5.INDEX_NAME
    names: list = []

    def add(name, *_):
        try:
            names.append(name.decode("utf8"))
        except UnicodeDecodeError:  # as h5py names it
            names.append(name)

    h5py.h5a.iterate(oid, add, index_type=order)
    return names


def _address(oid, fileno) -> int | None:
    """The header address of an object of the file numbered `fileno` (None: of another
    file). `h5g.get_objinfo`, not `h5o.get_info`: that one also sizes the object's whole
    chunk index (milliseconds on 100,000 chunks)."""
    info = h5py.h5g.get_objinfo(oid, b".")
    if info.fileno != fileno or info.objno[1] != 0:
        return None
    return int(info.objno[0])


class _Ids:
    """What `read_attrs` asks of an attribute manager when it reads through a cache."""

    __slots__ = ("_id",)

    def __init__(self, oid):
        self._id = oid


def _stop(*_args) -> int:
    return 1  # an h5a.iterate callback that ends the iteration


class _Failed:
    __slots__ = ("error",)

    def __init__(self, error: Exception):
        self.error = error


def read_attrs(attrs: h5py.AttributeManager, omitted=None, cache: _Attrs | None = None
               ) -> dict[str, Any]:
    """Attributes as plain, JSON-representable Python (`_values.plain`), length-1 arrays
    as scalars, as netCDF4-python and xarray present them. An empty (null dataspace)
    attribute is None; an object or region reference is the path of the object it points
    to. An attribute h5py cannot read, or whose value has no JSON form, is left out:
    `omitted(key, why)` is told (the scanner makes it a non-fatal located problem).
    `cache`: the same attributes already listed (and partly read) by the scanner."""
    out: dict[str, Any] = {}
    for key in (cache.names if cache is not None else attrs.keys()):
        if key in HIDDEN_ATTRS:
            continue
        if not isinstance(key, str):  # h5py's name for one that is not UTF-8
            if omitted is not None:
                omitted(key.decode("utf-8", "backslashreplace"),
                        "its name is not UTF-8 text (zarr attribute names are)")
            continue
        try:
            v = cache.get(key) if cache is not None else attrs[key]
        except Exception as e:  # attribute of a type h5py cannot read
            if omitted is not None:
                omitted(key, f"h5py cannot read it ({e})")
            continue
        try:
            out[key] = plain(_resolve_refs(v, attrs))
        except Unrepresentable as e:
            if omitted is not None:
                omitted(key, f"its value has no JSON form ({e})")
        except Exception as e:  # e.g. a reference to an object that is gone
            if omitted is not None:
                omitted(key, f"its value cannot be read as JSON ({type(e).__name__}: {e})")
    return out


def _resolve_refs(v: Any, attrs: h5py.AttributeManager) -> Any:
    """h5py.Empty as None, object and region references as their target's path."""
    if isinstance(v, h5py.Empty):
        return None
    if isinstance(v, (h5py.Reference, h5py.RegionReference)):
        if not v:
            return None  # a null reference
        return _ref_name(v, attrs)
    if isinstance(v, np.ndarray) and v.dtype.kind == "O":
        items = [_resolve_refs(x, attrs) for x in v.reshape(-1)]
        out = np.empty(len(items), dtype=object)
        out[:] = items
        return out.reshape(v.shape)
    return v


def _ref_name(ref, attrs: h5py.AttributeManager) -> str:
    name = h5py.h5r.get_name(ref, attrs._id)
    if name is None:
        raise Unrepresentable("a reference to an object that is not in the file")
    return name.decode("utf-8", errors="replace") if isinstance(name, bytes) else str(name)


# -- the v1 B-tree chunk index, read directly ----------------------------------------------

def _native_chunk_index(pread, file_size: int, dsid, chunks: tuple[int, ...], num_chunks,
                        body: bytes | None = None):
    """The chunk index of a dataset whose chunks HDF5 indexes with a version 1 B-tree
    (layout message version 3: every file written for any library version, netCDF-C's
    default), a fixed array, an extensible array, a v2 B-tree or an implicit index (layout
    version 4 or 5, libver "latest": a fixed extent, one unlimited axis, two or more, no
    filters and space allocated early), read from the file's bytes with one `np.frombuffer`
    per B-tree node or array block or page instead of one Python call per chunk: the same
    four arrays as `_walk_chunk_index`, in the same order (an extensible array's chunks at
    their places where chunk_iter misplaces them: `_chunk_iter_swizzles`). None for any
    other index (and layout); `_Unexpected` for anything this reader
    does not expect (signatures, node types, levels, entry counts, sizes, addresses); the
    caller then uses `chunk_iter`. `num_chunks()`, HDF5's own count of the index's chunks
    (the caller has HDF5 walk the index first: that loads, and checks the checksums of,
    every structure read here), must equal what was read.

    `pread(n, offset)`: n bytes at offset (fewer at the end of the file). `body`: the
    layout message's body when the caller has it (the header reader read it: a file of
    8-byte addresses without a user block), else read here."""
    ndim = len(chunks)
    if body is None:
        fcpl = h5py.h5i.get_file_id(dsid).get_create_plist()
        if fcpl.get_sizes() != (8, 8) or fcpl.get_userblock() != 0:
            return None
        # the object header's address (`h5o.get_info` would also size the whole index)
        objno = h5py.h5g.get_objinfo(dsid, b".").objno
        if objno[1] != 0:
            return None
        body = _layout_message(pread, int(objno[0]), file_size)
    if body is None or len(body) < 2 or body[1] != 2:
        return None  # not chunked (as HDF5 stores it)
    if body[0] == 3:
        got = _v1_btree(pread, file_size, body, ndim)
    elif body[0] in (4, 5):  # HDF5 2.0 writes version 5, laid out as 4 for these fields
        got = _fixed_array(pread, file_size, body, dsid, chunks)
    else:
        return None
    if got is None:
        return None
    offsets, addrs, sizes, masks = got[:4]
    if len(got) == 5 and got[4]:  # unfiltered v2 B-tree records: every chunk's bytes are one chunk
        sizes = np.full(len(addrs), math.prod(chunks) * dsid.get_type().get_size(), np.uint64)
    if (addrs == UNDEFINED_ADDRESS).any() or (addrs >= file_size).any() or (offsets < 0).any() \
            or (offsets % np.asarray(chunks, dtype=np.int64)).any():
        raise _Unexpected("a chunk's offset or address out of place")
    counted = num_chunks()
    if len(addrs) != counted:
        raise _Unexpected(f"{len(addrs)} chunks read, HDF5 counts {counted}")
    return offsets, addrs, sizes, masks


def _no_chunks(ndim: int):
    return (np.zeros((0, ndim), np.int64), np.zeros(0, np.uint64), np.zeros(0, np.uint64),
            np.zeros(0, np.uint32))


def _v1_btree(pread, file_size: int, body: bytes, ndim: int):
    """Layout message version 3: the chunks' v1 B-tree, walked a level at a time. Its keys
    are checked as HDF5's lookups use them (H5B_find, H5D__btree_cmp3): each node's keys
    strictly increasing, a child's within its parent's keys around it, and every chunk's
    key ending in a datatype offset of 0; HDF5 reads a chunk whose key breaks these at
    another place or not at all (the fill value) while its walk of the tree, `chunk_iter`,
    lists it: `_Corrupt`, the dataset is refused."""
    dimensionality = body[2]
    if dimensionality != ndim + 1 or len(body) < 11 + 4 * dimensionality:
        raise _Unexpected(f"layout message of {dimensionality} dimensions for rank {ndim}")
    root = int.from_bytes(body[3:11], "little")
    if root == UNDEFINED_ADDRESS:
        return _no_chunks(ndim)
    entry = np.dtype([("size", "<u4"), ("mask", "<u4"), ("offset", "<u8", (dimensionality,)),
                      ("child", "<u8")])
    key_size = 8 + 8 * dimensionality
    # per node of a level: its address and the parent's keys on its left and right
    level_nodes: list = [(root, None, None)]
    level, leaves = None, []
    seen = 0
    while level_nodes:
        children = []
        for node, lo, hi in level_nodes:
            seen += 1
            if seen > MAX_BLOCKS or not 0 < node < file_size:
                raise _Unexpected(f"B-tree node address {node}")
            head = pread(24 + 65 * key_size + 64 * 8, node)
            if len(head) < 24 or head[:4] != b"TREE" or head[4] != 1:
                raise _Unexpected(f"no chunk B-tree node at {node}")
            node_level, used = head[5], int.from_bytes(head[6:8], "little")
            if level is None:
                level = node_level
            if node_level != level:
                raise _Unexpected(f"B-tree node at {node} is at level {node_level}, {level} expected")
            need = 24 + (used + 1) * key_size + used * 8
            if len(head) < need:
                head = pread(need, node)
                if len(head) < need:
                    raise _Unexpected(f"B-tree node at {node} ends past the end of the file")
            entries = np.frombuffer(head, entry, count=used, offset=24)
            keys = np.empty((used + 1, dimensionality), np.uint64)
            keys[:used] = entries["offset"]
            keys[used] = np.frombuffer(head, "<u8", count=dimensionality,
                                       offset=24 + used * (key_size + 8) + 8)
            bad = _first_not_increasing(keys)
            if bad >= 0:
                raise _Corrupt(f"B-tree node at byte offset {node}: {_key_order(keys, bad, ndim)}",
                               _scaled_key(keys[min(bad + 1, used - 1)], body, ndim))
            if lo is not None and not tuple(lo) <= tuple(keys[0]) or \
                    hi is not None and not tuple(keys[used]) <= tuple(hi):
                raise _Corrupt(f"B-tree node at byte offset {node} holds keys "
                               f"{_shown_key(keys[0], ndim)} to {_shown_key(keys[used], ndim)}, "
                               f"outside its parent's {_shown_key(lo, ndim)} to "
                               f"{_shown_key(hi, ndim)}: HDF5 looks for its chunks elsewhere",
                               _scaled_key(keys[0], body, ndim) if used else None)
            if level:
                children.extend(zip(entries["child"].tolist(), keys[:-1], keys[1:]))
            else:
                leaves.append(entries)
        if level:
            level_nodes = children
            level -= 1
        else:
            level_nodes = []
    e = np.concatenate(leaves) if leaves else np.zeros(0, entry)
    keys = e["offset"]
    typed = np.flatnonzero(keys[:, ndim] != 0)
    if typed.size:
        i = int(typed[0])
        raise _Corrupt(f"the key of chunk {_shown_key(keys[i], ndim)} has a datatype offset of "
                       f"{int(keys[i, ndim])}, not 0: HDF5 finds no chunk there (it reads the "
                       "fill value) while its index lists one", _scaled_key(keys[i], body, ndim))
    bad = _first_not_increasing(keys)
    if bad >= 0:
        raise _Corrupt(_key_order(keys, bad, ndim), _scaled_key(keys[bad + 1], body, ndim))
    return (keys[:, :ndim].astype(np.int64), e["child"].astype(np.uint64),
            e["size"].astype(np.uint64), e["mask"].astype(np.uint32))


class _Corrupt(Exception):
    """A chunk index whose entries HDF5's reads would misplace (two keys for one chunk,
    keys out of order, ...): the dataset is refused (`corrupt`), not read by `chunk_iter`,
    which lists such chunks all the same. `block`: the chunk named (scaled coordinates)."""

    def __init__(self, message: str, block: tuple[int, ...] | None = None):
        super().__init__(message)
        self.block = block


def _first_not_increasing(rows) -> int:
    """The first i at which rows[i + 1] is not lexicographically greater than rows[i]
    (as HDF5 compares chunk coordinates), or -1."""
    if len(rows) < 2:
        return -1
    if len(rows) <= 64:  # a small index (most datasets): numpy's per-call cost is more
        t = rows.tolist()
        return next((i for i in range(len(t) - 1) if not t[i] < t[i + 1]), -1)
    a, b = rows[:-1], rows[1:]
    ne = a != b
    first = ne.argmax(axis=1)
    r = np.arange(len(a))
    bad = np.flatnonzero(~(ne.any(axis=1) & (b[r, first] > a[r, first])))
    return int(bad[0]) if bad.size else -1


def _shown_key(key, ndim: int) -> str:
    return "(none)" if key is None else "(" + ", ".join(str(int(x)) for x in key[:ndim]) + ")"


def _key_order(keys, i: int, ndim: int) -> str:
    """What is wrong where keys[i + 1] does not follow keys[i]."""
    a, b = keys[i], keys[i + 1]
    if (a == b).all() or (a[:ndim] == b[:ndim]).all():
        return (f"two keys for chunk {_shown_key(a, ndim)} (element offsets): HDF5 reads one "
                "of the chunks they point to for both")
    return (f"chunk key {_shown_key(b, ndim)} follows {_shown_key(a, ndim)}: the keys are out "
            "of order, so HDF5 looks for chunks in the wrong place")


def _scaled_key(key, body: bytes, ndim: int) -> tuple[int, ...] | None:
    """A v1 B-tree key's chunk (scaled coordinates), from the layout message's chunk
    dimensions (after the root address: 4 bytes each)."""
    dims = [int.from_bytes(body[11 + 4 * a:15 + 4 * a], "little") for a in range(ndim)]
    if not all(dims):
        return None
    return tuple(int(x) // d for x, d in zip(key[:ndim], dims))


def _implicit(addr: int, dsid, chunks: tuple[int, ...]):
    """Layout message version 4/5 with an implicit index (type 2: no filters, space
    allocated at creation): the chunks of the current extent, each at its row-major
    position in the grid of the maximum extent times one chunk's bytes from `addr`."""
    ndim = len(chunks)
    if addr == UNDEFINED_ADDRESS:
        return _no_chunks(ndim)
    space = dsid.get_space()
    shape = space.get_simple_extent_dims()
    maxshape = space.get_simple_extent_dims(maxdims=True)
    if any(m is None or m < 0 or m == h5py.h5s.UNLIMITED for m in maxshape):
        raise _Unexpected("implicit index with an unlimited axis")
    grid = tuple(-(-int(n) // c) for n, c in zip(shape, chunks))
    max_grid = tuple(-(-int(m) // c) for m, c in zip(maxshape, chunks))
    scaled = np.indices(grid, dtype=np.int64).reshape(ndim, -1)
    nbytes = math.prod(chunks) * dsid.get_type().get_size()
    index = np.ravel_multi_index(tuple(scaled), max_grid).astype(np.uint64)
    n = index.size
    return (scaled.T * np.asarray(chunks, dtype=np.int64), np.uint64(addr) + index * np.uint64(nbytes),
            np.full(n, nbytes, np.uint64), np.zeros(n, np.uint32))


def _v2_btree(pread, file_size: int, header: int, chunks: tuple[int, ...]):
    """Layout message version 4/5 with a v2 B-tree index (type 5): its header, then its
    nodes a level at a time; records (address, [size, filter mask,] scaled offsets) in the
    tree's order, by chunk coordinates."""
    ndim = len(chunks)
    widths = {}

    def record_of(tree_type, rec_size):
        filtered = tree_type == 11
        width = rec_size - 8 - 4 - 8 * ndim if filtered else 0
        if rec_size != (8 + width + 4 if filtered else 8) + 8 * ndim or \
                (filtered and not 1 <= width <= 8):
            raise _Unexpected("v2 B-tree header does not match the dataset")
        widths["w"] = width
        return np.dtype([("addr", "<u8"), ("filt", "u1", (width + 4,)), ("scaled", "<u8", (ndim,))]
                        if filtered else [("addr", "<u8"), ("scaled", "<u8", (ndim,))])

    tree_type, found = v2_records(pread, file_size, header, (10, 11), record_of, MAX_BLOCKS)
    if not found:
        return _no_chunks(ndim)
    filtered, width = tree_type == 11, widths["w"]
    e = np.concatenate(_in_order(found))
    if ndim:  # HDF5 searches the tree by key: they must increase in its order
        bad = _first_not_increasing(e["scaled"])
        if bad >= 0:
            a, b = (tuple(int(x) for x in e["scaled"][j]) for j in (bad, bad + 1))
            raise _Corrupt(f"the v2 B-tree holds two records for chunk {a} (scaled "
                           "coordinates): HDF5 reads one of the chunks they point to for both"
                           if a == b else f"the v2 B-tree's record for chunk {b} (scaled "
                           f"coordinates) follows the one for {a}: its records are out of "
                           "order, so HDF5 looks for chunks in the wrong place", b)
    if filtered:
        raw8 = np.zeros((len(e), 8), np.uint8)
        raw8[:, :width] = e["filt"][:, :width]
        sizes = raw8.view("<u8").reshape(-1).astype(np.uint64)
        masks = e["filt"][:, width:].copy().view("<u4").reshape(-1)
    else:
        sizes = np.zeros(len(e), np.uint64)  # filled in by the caller: one chunk's bytes
        masks = np.zeros(len(e), np.uint32)
    offsets = e["scaled"].astype(np.int64) * np.asarray(chunks, dtype=np.int64)
    return offsets, e["addr"].astype(np.uint64), sizes, masks.astype(np.uint32), not filtered


def _in_order(found: list) -> list:
    """The records of a v2 B-tree's nodes `found` a level at a time (`v2_records`: the
    root, then each level's nodes left to right, node i of a level having len(records) + 1
    children), in the tree's order: each child's records before its parent's record that
    follows it."""
    levels, i, width = [], 0, 1
    while i < len(found):
        levels.append(found[i:i + width])
        i += width
        width = sum(len(n) + 1 for n in levels[-1])
    if i != len(found):
        raise _Unexpected("v2 B-tree nodes do not form a tree")
    firsts = [np.concatenate([[0], np.cumsum([len(n) + 1 for n in level])]).tolist()
              for level in levels]
    out: list = []

    def visit(d: int, k: int) -> None:
        node = levels[d][k]
        if d == len(levels) - 1:
            out.append(node)
            return
        for j in range(len(node) + 1):
            visit(d + 1, firsts[d][k] + j)
            if j < len(node):
                out.append(node[j:j + 1])

    visit(0, 0)
    return out


def _fixed_array(pread, file_size: int, body: bytes, dsid, chunks: tuple[int, ...]):
    """Layout message version 4 with a fixed array index (type 3): its header, data
    block and pages. Element i is the chunk at row-major position i of the grid of the
    dataset's maximum extent; an undefined address is a chunk never written."""
    ndim = len(chunks)
    flags, dimensionality, width = body[2], body[3], body[4]
    pos = 5 + width * dimensionality
    if len(body) > pos and body[pos] == 5 and len(body) >= pos + 15:
        return _v2_btree(pread, file_size, int.from_bytes(body[pos + 7:pos + 15], "little"),
                         chunks)
    if len(body) > pos and body[pos] == 2 and len(body) >= pos + 9:
        return _implicit(int.from_bytes(body[pos + 1:pos + 9], "little"), dsid, chunks)
    if len(body) > pos and body[pos] == 4:
        return _extensible_array(pread, file_size, body, dsid, chunks)
    if len(body) > pos and body[pos] != 3:
        return None  # a single chunk: chunk_iter
    if dimensionality != ndim + 1 or not 1 <= width <= 8 or len(body) < pos + 10 or flags & ~3:
        raise _Unexpected("layout message (version 4) not understood")
    header = int.from_bytes(body[pos + 2:pos + 10], "little")
    h = pread(28, header)
    if len(h) < 28 or h[:4] != b"FAHD" or h[4] != 0 or h[5] not in (0, 1):
        raise _Unexpected(f"no fixed array header at {header}")
    filtered, entry_size, page_bits = h[5] == 1, h[6], h[7]
    n = int.from_bytes(h[8:16], "little")
    block = int.from_bytes(h[16:24], "little")
    maxshape = dsid.get_space().get_simple_extent_dims(maxdims=True)
    grid = tuple(-(-int(m) // c) for m, c in zip(maxshape, chunks))
    if n != math.prod(grid) or entry_size != (8 + (entry_size - 12) + 4 if filtered else 8) \
            or (filtered and not 1 <= entry_size - 12 <= 8) or page_bits > 32:
        raise _Unexpected("fixed array header does not match the dataset")
    if block == UNDEFINED_ADDRESS:
        return _no_chunks(ndim)
    page = 1 << page_bits
    npages = -(-n // page) if n > page else 0
    bitmap = (npages + 7) // 8
    prefix = 4 + 1 + 1 + 8 + bitmap
    if npages:
        head = pread(prefix, block)
        pages = [i for i in range(npages) if head[14 + i // 8] & (0x80 >> (i % 8))]
        start = block + prefix + 4  # then the prefix's checksum
        parts, where = [], []
        for i in pages:
            count = min(page, n - i * page)
            raw = pread(count * entry_size, start + i * (page * entry_size + 4))
            if len(raw) < count * entry_size:
                raise _Unexpected("fixed array page past the end of the file")
            parts.append(raw)
            where.append(np.arange(i * page, i * page + count, dtype=np.int64))
        raw = b"".join(parts)
        index = np.concatenate(where) if where else np.zeros(0, np.int64)
    else:
        head = pread(prefix + n * entry_size, block)
        raw = head[prefix:]
        if len(raw) < n * entry_size:
            raise _Unexpected("fixed array data block past the end of the file")
        index = np.arange(n, dtype=np.int64)
    if head[:4] != b"FADB" or head[4] != 0 or head[5] != h[5] \
            or int.from_bytes(head[6:14], "little") != header:
        raise _Unexpected(f"no fixed array data block at {block}")
    addrs, sizes, masks = _array_elements(raw, entry_size, filtered,
                                          math.prod(chunks) * dsid.get_type().get_size())
    used = addrs != UNDEFINED_ADDRESS
    index, addrs, sizes, masks = index[used], addrs[used], sizes[used], masks[used]
    offsets = np.stack(np.unravel_index(index, grid), axis=1).astype(np.int64) \
        * np.asarray(chunks, dtype=np.int64) if len(index) else np.zeros((0, ndim), np.int64)
    return offsets, addrs.astype(np.uint64), sizes, masks.astype(np.uint32)


def _array_elements(raw, entry_size: int, filtered: bool, nbytes: int):
    """The chunk addresses, stored sizes and filter masks of a fixed or extensible array's
    elements `raw`: an address, then (filtered) the stored size in `entry_size - 12` bytes
    and the filter mask; unfiltered chunks hold `nbytes`."""
    e = np.frombuffer(raw, np.uint8).reshape(-1, entry_size)
    addrs = e[:, :8].copy().view("<u8").reshape(-1)
    if filtered:
        sizes = np.zeros(len(e), np.uint64)
        for k in range(entry_size - 12):
            sizes |= e[:, 8 + k].astype(np.uint64) << np.uint64(8 * k)
        masks = e[:, entry_size - 4:].copy().view("<u4").reshape(-1)
    else:
        sizes = np.full(len(e), nbytes, np.uint64)
        masks = np.zeros(len(e), np.uint32)
    return addrs, sizes, masks


def _unlimited_axis(dsid, chunks: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
    """The one unlimited axis of a dataset whose chunks an extensible array indexes, and the
    chunk grid of its maximum extent (0 on the unlimited axis)."""
    maxshape = dsid.get_space().get_simple_extent_dims(maxdims=True)
    unlimited = [a for a, m in enumerate(maxshape) if m == h5py.h5s.UNLIMITED]
    if len(unlimited) != 1 or len(maxshape) != len(chunks):
        raise _Unexpected(f"an extensible array index for {len(unlimited)} unlimited axes")
    k = unlimited[0]
    grid = tuple(0 if a == k else -(-int(m) // c) for a, (m, c) in enumerate(zip(maxshape, chunks)))
    return k, grid


def _earray_scaled(index, k: int, grid: tuple[int, ...]):
    """The scaled chunk coordinates (n, ndim) of the chunks an extensible array numbers
    `index`: HDF5 numbers a chunk row-major over the grid of the maximum extent with the
    unlimited axis `k` moved first, the others in their order (H5VM_swizzle_coords)."""
    index = np.asarray(index, dtype=np.int64)
    other = [a for a in range(len(grid)) if a != k]
    sizes = [grid[a] for a in other]
    per = math.prod(sizes)
    if per <= 0:
        raise _Unexpected("an extensible array over an empty maximum extent")
    out = np.empty((len(index), len(grid)), np.int64)
    out[:, k] = index // per
    for a, col in zip(other, np.unravel_index(index % per, sizes) if other else ()):
        out[:, a] = col
    return out


_EA_HEADER = 72  # bytes of an extensible array header (8-byte addresses and lengths)


def _extensible_array(pread, file_size: int, body: bytes, dsid, chunks: tuple[int, ...]):
    """Layout message version 4/5 with an extensible array index (type 4: one unlimited
    axis): its header, index block (the first elements, the first data blocks' addresses,
    the super blocks' addresses), super blocks (data block addresses, a bitmap of each
    paged data block's pages written), data blocks and their pages. Element i below the
    header's "max index set" (HDF5 reads no further) is the chunk numbered i
    (`_earray_scaled`); an undefined address, or a block or page never written, is a chunk
    never written. Every signature, version, array type, owning header, block offset and
    size is checked, and the header's counts and sizes of the blocks created must be those
    found."""
    ndim = len(chunks)
    flags, dimensionality, width = body[2], body[3], body[4]
    pos = 5 + width * dimensionality
    if dimensionality != ndim + 1 or not 1 <= width <= 8 or flags & ~3 or len(body) < pos + 14:
        raise _Unexpected("layout message (version 4) not understood")
    dims = tuple(int.from_bytes(body[5 + width * i:5 + width * (i + 1)], "little")
                 for i in range(dimensionality))
    itemsize = dsid.get_type().get_size()
    if dims != tuple(chunks) + (itemsize,):
        raise _Unexpected(f"layout message chunk dimensions {dims} for chunks {chunks}")
    # max elements bits, index block elements, min data block pointers of a super block,
    # min elements of a data block, page bits (the header stores the middle two swapped)
    max_bits, iblock_elmts, min_ptrs, min_elmts, page_bits = body[pos + 1:pos + 6]
    header = int.from_bytes(body[pos + 6:pos + 14], "little")
    k, grid = _unlimited_axis(dsid, chunks)
    if header == UNDEFINED_ADDRESS:
        return _no_chunks(ndim)
    if not 0 < header < file_size:
        raise _Unexpected(f"extensible array header address {header}")
    h = pread(_EA_HEADER, header)
    if len(h) < _EA_HEADER or h[:4] != b"EAHD" or h[4] != 0 or h[5] not in (0, 1) \
            or tuple(h[7:12]) != (max_bits, iblock_elmts, min_elmts, min_ptrs, page_bits):
        raise _Unexpected(f"no extensible array header at {header}")
    cls, entry_size = h[5], h[6]
    filtered = cls == 1
    if (not 13 <= entry_size <= 20 if filtered else entry_size != 8) \
            or not 0 < max_bits <= 64 or page_bits > max_bits \
            or min_elmts < 1 or min_elmts & (min_elmts - 1) \
            or min_ptrs < 2 or min_ptrs & (min_ptrs - 1):
        raise _Unexpected("extensible array header not understood")
    # the blocks created (super blocks, their bytes, data blocks, their bytes), one more
    # than the last element set, the elements of the blocks created, the index block
    (n_super, super_bytes, n_data, data_bytes, max_set, realized,
     iblock) = (int.from_bytes(h[12 + 8 * i:20 + 8 * i], "little") for i in range(7))
    if max_set == 0 and iblock == UNDEFINED_ADDRESS:
        return _no_chunks(ndim)
    if max_set > MAX_BLOCKS or not 0 < iblock < file_size:
        raise _Unexpected("extensible array header's element count or index block address")
    # what HDF5 derives from the header (H5EA__hdr_init, H5EA__iblock_alloc): the super
    # blocks (s: 2**(s//2) data blocks of min_elmts * 2**((s+1)//2) elements each), the
    # first ones' data block addresses held by the index block, the rest's super blocks
    n_sblocks = 1 + max_bits - (min_elmts.bit_length() - 1)
    ib_sblocks = 2 * (min_ptrs.bit_length() - 1)
    ib_dblocks = 2 * (min_ptrs - 1)
    if n_sblocks < ib_sblocks:
        raise _Unexpected("extensible array header not understood")
    off_size = (max_bits + 7) // 8  # bytes of a block's offset in the array
    page = 1 << page_bits  # elements of a data block page
    prefix = 14 + off_size  # signature, version, type, header address, block offset

    def block(addr: int, size: int, sig: bytes, what: str, offset: int | None):
        if not 0 < addr or addr + size > file_size:
            raise _Unexpected(f"extensible array {what} address {addr}")
        raw = pread(size, addr)
        if len(raw) < size or raw[:4] != sig or raw[4] != 0 or raw[5] != cls \
                or int.from_bytes(raw[6:14], "little") != header \
                or (offset is not None and int.from_bytes(raw[14:prefix], "little") != offset):
            raise _Unexpected(f"no extensible array {what} at {addr}")
        return raw

    elements = 14 + iblock_elmts * entry_size
    ib = block(iblock, elements + 8 * (ib_dblocks + n_sblocks - ib_sblocks) + 4, b"EAIB",
               "index block", None)
    parts = [(0, ib[14:elements])] if iblock_elmts else []
    ib_addrs = [int.from_bytes(ib[i:i + 8], "little")
                for i in range(elements, elements + 8 * (ib_dblocks + n_sblocks - ib_sblocks), 8)]
    found_super = found_data = super_size = data_size = 0
    held = iblock_elmts  # elements of the blocks found
    start = iblock_elmts  # the super block's first element
    before = 0  # data blocks before it
    for s in range(n_sblocks):
        nblocks, nelmts = 1 << (s // 2), min_elmts << ((s + 1) // 2)
        npages = nelmts // page if nelmts > page else 0
        if s < ib_sblocks:
            addrs, bitmap = ib_addrs[before:before + nblocks], b""
            if npages:
                raise _Unexpected("a paged data block in an extensible array's index block")
        else:
            addr = ib_addrs[ib_dblocks + s - ib_sblocks]
            if addr == UNDEFINED_ADDRESS:
                start += nblocks * nelmts
                before += nblocks
                continue
            if start >= max_set:
                raise _Unexpected(f"extensible array super block at {addr} past the last element")
            if npages and nelmts % page:
                raise _Unexpected("extensible array data blocks of a part of a page")
            bits = (npages + 7) // 8 * nblocks
            size = prefix + bits + 8 * nblocks + 4
            sb = block(addr, size, b"EASB", "super block", start - iblock_elmts)
            bitmap = sb[prefix:prefix + bits]
            addrs = [int.from_bytes(sb[i:i + 8], "little")
                     for i in range(prefix + bits, prefix + bits + 8 * nblocks, 8)]
            found_super += 1
            super_size += size
        for j, addr in enumerate(addrs):
            if addr == UNDEFINED_ADDRESS:
                continue
            first = start + j * nelmts
            if first >= max_set:
                raise _Unexpected(f"extensible array data block at {addr} past the last element")
            # the block's offset as HDF5 writes it: in a super block, of its first element
            # (after the index block's); in the index block, HDF5 counts its data blocks
            # from the index block's first (H5EA__lookup_elmt)
            offset = first - iblock_elmts if s >= ib_sblocks else \
                start - iblock_elmts + (before + j) * nelmts
            found_data += 1
            held += nelmts
            if not npages:
                size = prefix + nelmts * entry_size + 4
                raw = block(addr, size, b"EADB", "data block", offset)
                parts.append((first, raw[prefix:prefix + nelmts * entry_size]))
                data_size += size
                continue
            block(addr, prefix + 4, b"EADB", "data block", offset)
            step = page * entry_size + 4  # each page's elements, then its checksum
            data_size += prefix + 4 + npages * step
            for p in range(npages):
                bit = j * npages + p
                if not bitmap[bit // 8] & (0x80 >> (bit % 8)):
                    continue  # a page never written
                if first + p * page >= max_set:
                    raise _Unexpected(f"extensible array page at {addr} past the last element")
                raw = pread(page * entry_size, addr + prefix + 4 + p * step)
                if len(raw) < page * entry_size:
                    raise _Unexpected("extensible array page past the end of the file")
                parts.append((first + p * page, raw))
        start += nblocks * nelmts
        before += nblocks
    if (found_super, found_data, super_size, data_size, held) != (n_super, n_data, super_bytes,
                                                                 data_bytes, realized):
        raise _Unexpected("extensible array blocks found are not those its header counts")
    if not parts:
        return _no_chunks(ndim)
    index = np.concatenate([np.arange(first, first + len(raw) // entry_size, dtype=np.int64)
                            for first, raw in parts])
    addrs, sizes, masks = _array_elements(b"".join(raw for _first, raw in parts), entry_size,
                                          filtered, math.prod(chunks) * itemsize)
    used = (addrs != UNDEFINED_ADDRESS) & (index < max_set)
    index, addrs, sizes, masks = index[used], addrs[used], sizes[used], masks[used]
    offsets = _earray_scaled(index, k, grid) * np.asarray(chunks, dtype=np.int64)
    return offsets, addrs.astype(np.uint64), sizes, masks.astype(np.uint32)
