"""HDF4 files (the SD interface: scientific datasets) as arrays (docs/hdf4.md).

What this package promises:

- Where the data lie comes from our own parse of the file's structure (`layout`): its DD
  blocks, each SDS's NDG, DFTAG_SD element and its special forms (SPECIAL_CHUNKED with
  its chunk-table vdata, SPECIAL_COMP, SPECIAL_LINKED). What each SDS is called, its
  dimension names, attributes and shape come from pyhdf (the HDF4 library's SD
  interface: the optional extra [hdf4]), which also reads values (`--inline`, checks).
- Exact references: contiguous SDS (one block), whole-array deflate (`numcodecs.zlib`:
  HDF4 deflate stores zlib streams), chunked SDS plain or deflated (one ref per chunk,
  edge chunks stored whole: `padded`), an unlimited SDS held in one linked block (at
  its real length). Values are big-endian as stored (the NT record's class says).
- Never written: an SDS without data and chunks absent from the chunk table have no
  ref and read as the fill value pyhdf reads: a chunked SDS's chunk header fill (which
  a `_FillValue` set after SDsetchunk does not change), else `_FillValue`, else the HDF4
  library's default (netCDF's fills; unsigned types their bit
  patterns: 129, 32769, 2147483649).
- Held (no blocks, a fatal problem inlining resolves: the planner inlines them when
  small, else `--inline NAME`): RLE, N-bit, skipping-Huffman, szip compression, data in
  several linked blocks, anything else the layout parse does not recognise.
- Character SDS, vdata tables, raster images: skipped with a note. HDF-EOS2 metadata
  (`StructMetadata.0`, ...) are kept as global attributes (text).
"""

from __future__ import annotations

import importlib.util
import os
import re
from typing import Any

import numpy as np

from ... import storage
from ...model import (
    BlockTable,
    Dimension,
    FileInventory,
    Location,
    Problem,
    Variable,
    VirtualizeError,
)
from .._io import missing_library, not_valid
from .._planning import finish
from .._values import Unrepresentable, bytes_codec, plain
from ..base import Format
from . import eos, layout

EXTRA = "pip install 'virtualize[hdf4]'"
# HDF4 number types (hntdefs.h) -> numpy type; byte order from the NT class
TYPES = {5: "f4", 6: "f8", 20: "i1", 21: "u1", 22: "i2", 23: "u2", 24: "i4", 25: "u4",
         26: "i8", 27: "u8"}
CHAR_TYPES = (3, 4)  # DFNT_UCHAR8, DFNT_CHAR8
LITTLE = 4  # NT class DFNTF_PC / DFNTI_IBO: little-endian
# what the HDF4 library reads where nothing was written and no fill value was set
DEFAULT_FILL = {"f4": 9.9692099683868690e+36, "f8": 9.9692099683868690e+36, "i1": -127,
                "u1": 129, "i2": -32767, "u2": 32769, "i4": -2147483647, "u4": 2147483649}


def _pyhdf():
    try:
        from pyhdf import SD
    except ImportError:
        return None
    return SD


def _missing(path: str) -> VirtualizeError:
    return missing_library(path, "reading HDF4 needs pyhdf", EXTRA)


def corrupt(path: str, message: str) -> VirtualizeError:
    return not_valid(path, message, "HDF4")


def _open(path: str):
    SD = _pyhdf()
    if SD is None:
        raise _missing(path)
    if storage.is_url(path):
        raise VirtualizeError([Problem(Location(path), "unsupported-object",
                                       "HDF4 files are read from local paths only (pyhdf)")],
                              f"{path}: HDF4 over a URL is not supported")
    real = os.path.realpath(path)
    alias = _alias(real)
    before = _fds_to(real)
    try:
        return SD.SD(alias)
    except Exception as e:  # pyhdf's HDF4Error: a file the library cannot open
        _close_leaked(real, before)
        raise corrupt(path, f"the HDF4 library cannot open it ({type(e).__name__}: {e})") \
            from None
    finally:
        os.unlink(alias)


# The HDF4 library keeps a record of every file it opens, by the path it was given, and
# hands that record to the next open of the same path while it is held. A failed open
# (SDstart on a damaged file) never lets go of its record (nor of its file descriptor), so
# the next open of that path, in the same process, read the damaged file's structure again
# (a scan worker reused across files: a file rewritten in place read as the one before,
# values made up). Each open is therefore by a path of its own (a symlink made for it, gone
# once the file is open), and the descriptor a failed open leaves is closed.
_ALIASES: dict[str, Any] = {}


def _alias(real: str) -> str:
    """A new path to `real` (a symlink in this process's own temporary directory)."""
    import itertools
    import tempfile

    if "dir" not in _ALIASES:
        _ALIASES["dir"] = tempfile.mkdtemp(prefix="virtualize-hdf4-")
        _ALIASES["count"] = itertools.count()
        import atexit
        import shutil

        atexit.register(shutil.rmtree, _ALIASES["dir"], True)
    alias = os.path.join(_ALIASES["dir"], f"{next(_ALIASES['count'])}.hdf")
    os.symlink(real, alias)
    return alias


def _fds_to(real: str) -> set[int]:
    """This process's file descriptors open on `real` (Linux; none known elsewhere)."""
    out = set()
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return out
    for fd in fds:
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == real:
                out.add(int(fd))
        except OSError:
            continue
    return out


def _close_leaked(real: str, before: set[int]) -> None:
    for fd in _fds_to(real) - before:  # (only descriptors on this very file, opened now)
        try:
            os.close(fd)
        except OSError:
            pass


def _names(sd, aliases: list | None = None) -> list[tuple[int, str, Any]]:
    """(index, cube name, SDS) of every SDS (each selected: the caller ends its access):
    its own name, `sds<index>` when it repeats (without case), is empty, is `sds<k>`, or
    is no zarr node name. An SDS the library lists a second time (the same ref, name,
    shape and type: an old DFSD file whose SDG and NDG the library no longer sees as one,
    its link damaged) is one dataset: listed once, the repeat in `aliases` as (index, name,
    index of the first)."""
    items, seen = [], {}
    try:
        for index in range(sd.info()[0]):
            v = sd.select(index)
            items.append((index, None, v))
            info = v.info()
            key = (v.ref(), info[0], info[1], str(info[2]), info[3])
            if key in seen:
                if aliases is not None:
                    aliases.append((index, info[0], seen[key]))
                items.pop()
                _end(v)
                continue
            seen[key] = index
            items[-1] = (index, info, v)
    except BaseException:
        _end_all(items)
        raise
    counts: dict[str, int] = {}
    for _, info, _ in items:
        counts[info[0].lower()] = counts.get(info[0].lower(), 0) + 1
    out = []
    for index, info, v in items:
        n = info[0]
        bad = not n or "/" in n or n in (".", "..") or n.startswith("__") or \
            counts[n.lower()] > 1 or re.fullmatch(r"sds\d+", n.lower()) is not None
        out.append((index, f"sds{index}" if bad else n, v))
    return out


def _end(v) -> None:
    """End an SDS's access (again, or after a failure: quietly). An SDS left selected keeps
    the HDF4 library from closing its file, and the library hands the next open of that path
    the file it still holds: a later scan of a file rewritten in place would read the old
    one's structure."""
    try:
        v.endaccess()
    except Exception:  # noqa: BLE001 - (ended already)
        pass


def _end_all(items) -> None:
    for _, _, v in items:
        _end(v)


def _attrs(d: dict, path: str, var: str | None, problems: list[Problem]) -> dict[str, Any]:
    out = {}
    for k, value in d.items():
        try:
            out[str(k)] = plain(value)
        except Unrepresentable as e:
            problems.append(Problem(Location(path, var), "attribute-omitted",
                                    f"attribute {k}: {e}", fatal=False))
    return out


class _Counted:
    """A source's `pread`, counting what the scan reads (`FileInventory.bytes_read`)."""

    def __init__(self, f) -> None:
        self.f, self.bytes_read, self.requests = f, 0, 0

    def pread(self, n: int, offset: int) -> bytes:
        data = self.f.pread(n, offset)
        self.bytes_read += len(data)
        self.requests += 1
        return data


def scan_hdf4(path: str) -> FileInventory:
    """Scan one HDF4 file. Content problems are returned; a broken structure raises."""
    st = storage.stat(path)
    with storage.open_source(path, st.st_size) as raw:
        f = _Counted(raw)
        try:
            dds = layout.descriptors(f, st.st_size)
            vgroups = layout.variable_groups(f, dds, st.st_size)
        except layout.Corrupt as e:
            raise corrupt(path, str(e)) from None
        sd = _open(path)
        try:
            inv = _inventory(path, st, f, dds, vgroups, sd)
        finally:
            sd.end()
        inv.bytes_read, inv.requests = f.bytes_read, f.requests
    return inv


def _inventory(path: str, st, f, dds, vgroups, sd) -> FileInventory:
    problems: list[Problem] = []
    variables: dict[str, Variable] = {}
    dimensions: dict[str, Dimension] = {}
    aliases: list = []
    selected = _names(sd, aliases)
    try:
        for index, name, v in selected:
            try:
                var = _variable(path, st.st_size, f, dds, vgroups, index, name, v, problems)
            except layout.Corrupt as e:
                problems.append(Problem(Location(path, name), "corrupt",
                                        f"{e}; --drop {name} virtualizes the rest"))
                var = None
            finally:
                _end(v)
            if var is not None:
                variables[name] = var
    finally:
        _end_all(selected)
    for index, sds_name, first in aliases:
        problems.append(Problem(Location(path, sds_name), "hdf4-layout", (
            f"SDS {index} is SDS {first} listed again by the HDF4 library (the same ref, name, "
            "shape and type: a file of the older DFSD interface whose SDG and NDG it no longer "
            "joins, their link damaged?): one array"), fatal=False))
    gattrs = _attrs(sd.attributes(), path, None, problems)
    _hdfeos(path, gattrs, variables, problems)
    _own_record_lengths(variables)
    for name, var in variables.items():
        for d, n in zip(var.dims, var.shape):
            if d in dimensions and dimensions[d].size != n:
                problems.append(Problem(Location(path, name, d), "dimension-mismatch",
                                        f"dimension {d} is {dimensions[d].size} long in one "
                                        f"SDS and {n} in {name}"))
            dimensions.setdefault(d, Dimension(d, n))
    problems += _skipped(path, f, dds, st.st_size)
    inv = FileInventory(path, "hdf4", st.st_size, st.st_mtime_ns, {"": gattrs}, dimensions,
                        variables, problems)
    inv.etag = st.etag
    return inv


def _own_record_lengths(variables: dict[str, Variable]) -> None:
    """SDS sharing an unlimited dimension hold their own number of records (pyhdf reads
    each at its own length, where netCDF would pad them to the longest): the SDS whose
    length differs from the longest's get a dimension of their own, `<dim>_<sds>`."""
    lengths: dict[str, set[int]] = {}
    for var in variables.values():
        for d, n in zip(var.dims, var.shape):
            lengths.setdefault(d, set()).add(n)
    for d, ns in lengths.items():
        if len(ns) < 2 or d in variables and variables[d].dims == (d,):
            continue  # (one length; or a dimension scale gives the length: mismatch stays)
        for name, var in variables.items():
            if d in var.dims and var.shape[var.dims.index(d)] != max(ns):
                var.dims = tuple(f"{d}_{name}" if x == d else x for x in var.dims)


def _hdfeos(path: str, gattrs: dict, variables: dict, problems: list[Problem]) -> None:
    """HDF-EOS2 grids and swaths (`eos`): their fields' dimensions and attributes."""
    text = eos.struct_metadata(gattrs)
    if text is None:
        return
    try:
        structures = eos.parse(text)
    except (ValueError, IndexError) as e:
        problems.append(Problem(Location(path), "hdfeos-metadata", "StructMetadata cannot be "
                                f"parsed ({e}): its grids and swaths are plain SDS",
                                fatal=False))
        return
    eos.apply(structures, variables, eos.stripped_lengths(variables))
    problems += eos.grid_coordinates(structures, variables, path)
    problems += eos.dimension_maps(structures, variables, path)


RASTER_TAGS = (202, 302, 306)  # DFTAG_RI8, DFTAG_RI, DFTAG_RIG
SD_CLASSES = ("Attr0.0", "DimVal0.0", "DimVal0.1", "UDim0.0", "Var0.0", "Dim0.0", "CDF0.0",
              "SDSVar", "CoordVar", "Data0.0")


def _skipped(path: str, f, dds, size: int) -> list[Problem]:
    """Notes for what is no SD dataset: raster images, vdata tables of the file's own."""
    notes = []
    rasters = sum(1 for t, _ in dds if t in RASTER_TAGS)
    if rasters:
        notes.append(Problem(Location(path), "unsupported-object", f"{rasters} raster "
                             "image element(s) (DFTAG_RI8 / RI / RIG): skipped", fatal=False))
    tables = []
    for (tag, ref) in dds:
        if tag != layout.VH:
            continue
        try:
            name, cls = layout.vdata_name(f, dds, ref, size)
        except layout.Corrupt:
            continue
        if cls not in SD_CLASSES and not cls.startswith("_HDF_CHK_TBL") and \
                not name.startswith("_HDF_CHK_TBL"):
            tables.append(name or f"ref {ref}")
    if tables:
        notes.append(Problem(Location(path), "unsupported-object", f"{len(tables)} vdata "
                             f"table(s) skipped: {', '.join(tables[:10])}", fatal=False))
    return notes


def _variable(path, size, f, dds, vgroups, index, name, v, problems) -> Variable | None:
    loc = Location(path, name)
    sds_name, rank, dims_, typ, _nattrs = v.info()
    shape = tuple(int(n) for n in (dims_ if isinstance(dims_, list) else [dims_]))
    if typ in CHAR_TYPES or typ not in TYPES:
        what = "characters" if typ in CHAR_TYPES else "little-endian, which pyhdf " \
            "cannot read" if typ & 0x4000 else "unknown"
        problems.append(Problem(loc, "unsupported-type", f"SDS {sds_name!r} (index "
                                f"{index}) has HDF4 number type {typ} ({what}): skipped",
                                fatal=False))
        return None
    # the SD library's own record of the SDS (its vgroup) names its data and number type;
    # files of the older DFSD interface have only the NDG
    group = vgroups.get(v.ref())
    try:
        group = layout.ndg(f, dds, v.ref(), size) if group is None else group
    except layout.Corrupt:
        if not (v.iscoordvar() and rank == 1):
            raise
        # a dimension's coordinate variable the SD library makes for a file written by the
        # older DFSD interface (fp2hdf, DFSDadddata): no NDG, its values are the DFSD's
        # scales, which pyhdf reads; held (inlined when small, pyhdf's values)
        dims = (v.dim(0).info()[0],)
        attrs = _attrs(v.attributes(), path, name, problems)
        if sds_name != name:
            attrs["HDF4_NAME"] = sds_name
        problems.append(Problem(loc, "hdf4-layout", f"SDS {sds_name!r} is a dimension of a "
                                "DFSD (older interface) dataset: no NDG; its values are the "
                                "DFSD's scales, read by pyhdf"))
        dtype = np.dtype(TYPES[typ])
        return Variable(name=name, dtype=dtype, shape=shape, dims=dims, attrs=attrs,
                        fill_value=np.array(DEFAULT_FILL.get(dtype.str[1:], 0)).astype(dtype)[()],
                        codecs=[], blocks=None, is_coordinate=dims[0] == name)
    dtype = np.dtype(TYPES[typ])
    if layout.NT in group:
        nt_type, _, cls = layout.number_type(f, dds, group[layout.NT], size)
        if nt_type != typ:
            raise layout.Corrupt(f"the number type of SDS {sds_name!r} is {nt_type} in its "
                                 f"NT record, {typ} for the library")
        dtype = dtype.newbyteorder("<" if cls == LITTLE else ">")
    else:
        dtype = dtype.newbyteorder(">")
    dims = tuple(v.dim(k).info()[0] for k in range(rank))
    attrs = _attrs(v.attributes(), path, name, problems)
    if sds_name != name:
        attrs["HDF4_NAME"] = sds_name
    if "calibrated_nt" in attrs and attrs.get("add_offset", 0) != 0:
        # (SDsetcal's calibration: value = scale_factor * (stored - add_offset), where CF
        # readers such as xarray compute stored * scale_factor + add_offset)
        problems.append(Problem(loc, "hdf4-calibration", (
            f"SDS {sds_name!r} has HDF4 calibration attributes (scale_factor "
            f"{attrs.get('scale_factor')}, add_offset {attrs.get('add_offset')}): HDF4 means "
            "scale_factor * (stored - add_offset), CF readers (xarray) decode stored * "
            "scale_factor + add_offset; the cube holds the stored values and the attributes "
            "as they are (open with mask_and_scale=False and apply HDF4's rule)"), fatal=False))
    lay = layout.sds_layout(f, dds, group.get(layout.SD), shape, dtype.itemsize, size,
                            f"SDS {sds_name!r}")
    fill = _fill(v, attrs, dtype, lay.fill)
    if lay.held is not None:
        kind, why = lay.held
        problems.append(Problem(loc, kind, f"SDS {sds_name!r}: {why}"))
        return Variable(name=name, dtype=dtype.newbyteorder("="), shape=shape, dims=dims,
                        attrs=attrs, fill_value=fill, codecs=[], blocks=None)
    grid = lay.offsets.shape
    refs = np.zeros(grid, dtype=[("path", "<u4"), ("offset", "<u8"), ("length", "<u8")])
    refs["offset"], refs["length"] = lay.offsets, lay.lengths
    block = lay.block_shape if shape else ()
    if not shape:
        refs = refs.reshape(())
    return Variable(name=name, dtype=dtype, shape=shape, dims=dims, attrs=attrs,
                    fill_value=fill, codecs=[bytes_codec(dtype), *lay.codecs],
                    blocks=BlockTable(block, padded=lay.padded, refs=refs),
                    is_coordinate=bool(v.iscoordvar()) and rank == 1 and dims[0] == name)


def _fill(v, attrs, dtype: np.dtype, stored: bytes | None):
    """What pyhdf reads where nothing was written: in a chunked SDS the chunk header's
    fill (a `_FillValue` set after SDsetchunk does not change it), else `_FillValue`,
    else the library's default."""
    native = dtype.newbyteorder("=")
    if stored is not None:
        return np.frombuffer(stored, dtype)[0].astype(native)
    if "_FillValue" in attrs:
        return np.array(v.getfillvalue()).astype(native)[()]
    return np.array(DEFAULT_FILL.get(native.str[1:], 0)).astype(native)[()]


# -- reading values with pyhdf -------------------------------------------------------------

def read_hdf4_region(path: str, name: str,
                     region: tuple[tuple[int, int], ...] | None = None) -> np.ndarray:
    """Values of SDS `name` (the cube's name) as pyhdf reads them."""
    sd = _open(path)
    try:
        selected = _names(sd)
        try:
            v = next((v for _, cube_name, v in selected if cube_name == name), None)
            if v is None:
                raise KeyError(f"{path}: no SDS {name!r}")
            if not region:
                return np.asarray(v.get())
            start = [a for a, _ in region]
            count = [b - a for a, b in region]
            if any(c == 0 for c in count):
                dtype = np.asarray(v.get(start=[0] * len(region), count=[1] * len(region))).dtype
                return np.zeros(count, dtype)
            return np.asarray(v.get(start=start, count=count)).reshape(count)
        finally:
            _end_all(selected)  # (every one: an SDS left selected keeps the file open)
    finally:
        sd.end()


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError, AttributeError):
        return False


class Hdf4(Format):
    name = "hdf4"
    title = "HDF4 / HDF-EOS2"
    suffixes = (".hdf", ".hdf4", ".h4", ".he2", ".he4")
    inventory_formats = ("hdf4",)
    modules = (__name__, *(("pyhdf.SD",) if _installed("pyhdf") else ()))

    def sniff(self, head: bytes, f=None) -> bool:
        return head[:4] == layout.MAGIC

    def scan(self, path: str, hint=None) -> FileInventory:
        return finish(scan_hdf4(path), hint)

    def read_region(self, path: str, name: str, region=None):
        return read_hdf4_region(path, name, region)


FORMAT = Hdf4()
