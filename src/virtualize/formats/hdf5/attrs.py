"""HDF5 objects opened cheaply, their links listed in one iteration, their attributes read
once each (`_Attrs`) as plain Python.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import h5py
import numpy as np

from .._values import (
    Unrepresentable,
    plain,
)
from .header import (
    ASK_H5PY,
)

# Attributes that HDF5 dimension scales and the netCDF-4 library keep for themselves.
HIDDEN_ATTRS = frozenset({
    "DIMENSION_LIST", "REFERENCE_LIST", "CLASS", "NAME", "_Netcdf4Dimid",
    "_Netcdf4Coordinates", "_NCProperties", "_nc3_strict", "_SuperblockVersion",
    "_IsNetcdf4",
})


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


def _stored_values(rec, st, dt: np.dtype, shape: tuple[int, ...], file_size: int):
    """The values of a contiguous dataset stored as they read (plain numbers in a standard
    type, allocated, no filters, no external storage: `st`, its `header.Storage`) from its
    bytes through `rec` (the scan's `_Recorder`: they are kept for the dataset's digest), as
    `_read_all` reads them (h5py's type `dt` being the stored one); None for any other, or
    without a recorder (h5py reads it)."""
    if rec is None or st.layout != h5py.h5d.CONTIGUOUS or st.external or st.filters \
            or not st.standard_type or st.contiguous is None or dt.kind not in "iuf" \
            or dt.metadata is not None or dt.names is not None:
        return None
    addr, size = st.contiguous
    n = math.prod(shape) * dt.itemsize
    if addr is None or not n or size != n or addr + n > file_size:
        return None
    raw = rec.read(n, addr)
    if len(raw) != n:
        return None
    return np.frombuffer(raw, dtype=dt).reshape(shape).copy()


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
