"""The walk of an HDF5 / netCDF-4 file: groups, links, variables and their dimension
scales, each dataset's layout, filters, fill value and stored type, into a `FileInventory`
(the chunk tables themselves: `index.py`).
"""

from __future__ import annotations

import math
import os
from typing import Any

import h5py
import numpy as np

try:  # hdf5plugin registers its filters with HDF5: h5py (the decode check's reference,
    # `--inline`) can then read data that plugin filters wrote
    import hdf5plugin  # noqa: F401
except ImportError:  # pragma: no cover
    pass

from ... import storage
from ...conventions import struct_dtype
from ...model import (
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
from .._values import (
    COORD_VALUES_LIMIT,
    TEXT_LIMIT,
    bytes_codec,
    chars_to_text,
)
from .attrs import (
    _address,
    _attr_text,
    _Attrs,
    _Dataset,
    _hard_links,
    _identity,
    _open,
    _read_all,
    _stop,
    _stored_values,
    _unknown_kind,
    read_attrs,
)
from .codecs import (
    NO_EXACT_CODEC,
    _fill_value,
    _numeric_dtype,
    _type_words,
    hdf5_filter_codec,
    stored_type_differs,
)
from .drivers import _open_file, _Recorder
from .header import (
    AttrReader,
    DimensionList,
    Storage,
    dataset_extent,
    dataset_storage,
    standard_dtype,
    superblock_sizes,
)
from .header import Unexpected as _Unexpected
from .header import layout_message as _layout_message
from .index import (
    MAX_BLOCKS,
    _check_listed,
    _chunk_iter_renumbered,
    _chunk_iter_swizzles,
    _Corrupt,
    _few_blocks,
    _masked_chunks,
    _native_chunk_index,
    _unlimited_axis,
    _walk_chunk_index,
)
from .vds import VirtualFiles, virtual_variable
from .vds import by_path as vds_by_path
from .vds import shape as vds_shape

NC_DIM_ONLY = "This is a netCDF dimension but not a netCDF variable"
# Chunk grids from which the chunk index is read directly (`_native_chunk_index`): below,
# chunk_iter's few calls cost less than finding and parsing the index.
DIRECT_MIN_CHUNKS = 256


def scan_hdf5(path: str, finish=None) -> FileInventory:
    """Scan one HDF5 / netCDF-4 file. Never raises for content problems: they are returned.
    `finish(inv, read, pread)`, if given, is applied to the inventory before the file is
    closed, `read(name)` reading a variable's values through it, `pread(n, offset)` its
    bytes (a local file: what HDF5 has read served from memory; else None) (`scan` adds the
    planning data)."""
    st = storage.stat(path)
    with storage.open_source(path, st.st_size) as fobj:
        f, recorder = _open_file(path, fobj, st.st_size)
        with f:
            scanner = _Scanner(path, f, recorder, st.st_size)
            scanner.source = fobj
            try:
                inv = scanner.run(st.st_size, st.st_mtime_ns)
                scanner.link_targets(inv)
                if finish is not None:
                    inv = finish(inv, scanner.values,
                                 recorder.pread if recorder is not None else None)
            finally:
                scanner.close_targets()
        inv.bytes_read, inv.requests, inv.etag = fobj.bytes_read, fobj.requests, st.etag
    return inv


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
        self._header_storage: dict[str, Storage | None] = {}  # (`header_storage`)
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
        """An object's attributes read from the file's bytes (`header.AttrReader`), or None
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
            extent = dataset_extent(messages) if isinstance(obj, _Dataset) else None
            if extent is not None:  # what h5py's shape and maxshape say
                obj._cache_props["shape"], obj.__dict__["maxshape"] = extent
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
            # (this local file's: from its bytes, as HDF5 would read them)
            values = _stored_values(self.recorder, st, ds.dtype, shape, self.size) \
                if name not in self._origin else None
            if values is None:
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
        if len(refs) <= 16:  # (a few blocks: in Python)
            if all(n or p == MATERIALIZED for p, n in zip(refs["path"].tolist(),
                                                          refs["length"].tolist())):
                return False
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

    def header_storage(self, name: str, ds: h5py.Dataset) -> Storage | None:
        """The dataset's `Storage` as its header messages read by the attribute reader
        say it (`header.dataset_storage`: never a virtual dataset), or None (h5py is asked)."""
        if name not in self._header_storage:
            messages = self._messages.get(name)
            self._header_storage[name] = None if messages is None else \
                dataset_storage(messages, ds.dtype.itemsize)
        return self._header_storage[name]

    def _storage(self, name: str, ds: h5py.Dataset) -> Storage:
        """The dataset's layout, chunk shape, filters and fill value: from the header
        messages the attribute reader read (`header.dataset_storage`), else from h5py's
        creation property list."""
        st = self.header_storage(name, ds)
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
            if len(offsets) <= 16 and not (pipeline and self._edge_chunks_unfiltered(name, ds)):
                done = _few_blocks(dtype, chunks, grid, pipeline, refs, got)  # (small files)
                if done is not None:
                    return BlockTable(chunks, padded=True, refs=refs), codecs + done
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
        mask, kinds = 0, [0]  # (kinds: the filter masks the chunks have)
        if masks.any():
            values, counts = np.unique(masks, return_counts=True)
            mask, kinds = int(values[np.argmax(counts)]), values.tolist()
        elif not len(masks):
            kinds = []
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
        for m in kinds:
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
                _masked_chunks(self.problem, name, view, flat[other], idx[other], masks[other],
                               mask, full, None if edges is None else edges[other])
        if mask:
            skipped = ", ".join(str(pipeline[i][0]) for i in range(len(pipeline)) if mask >> i & 1)
            self.problem(name, "filter-skipped",
                         f"every stored chunk skips HDF5 filter(s) {skipped} (filter mask "
                         f"{mask:#x}): the cube decodes them without it", fatal=False)
        return BlockTable(chunks, padded=True, refs=refs), codecs

    def _chunk_index(self, name: str, ds: h5py.Dataset, chunks: tuple[int, ...]):
        """A chunked dataset's index: read directly where it is a v1 B-tree, a fixed
        array, an extensible array, a v2 B-tree or an implicit index in a local file
        (`_native_chunk_index`, from the bytes HDF5 has just read counting the index, or
        the same bytes of the file: `_Native`),
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

    def _filters(self, filters, dtype: np.dtype) -> list[tuple[int, str, dict | None, str | None]]:
        """The filter pipeline: per filter its id, name, codec (None: no exact codec) and
        why there is none."""
        out = []
        for code, _flags, values, fname in filters:
            label = fname.decode(errors="replace") if isinstance(fname, bytes) else fname
            out.append((code, label, hdf5_filter_codec(code, tuple(values), dtype),
                        NO_EXACT_CODEC.get(code)))
        return out
