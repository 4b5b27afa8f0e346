"""netCDF classic files (CDF-1, CDF-2 and CDF-5): block tables from our own header parser.

What this module promises:

- `scan_netcdf3(path)` reads only the header (plus the values of small 1-D coordinate
  variables; a record coordinate whose records are at most READ_THROUGH_STRIDE bytes
  apart is read through, other variables' bytes included, in a few large reads) and
  returns a `FileInventory` whose block references are byte ranges that hold exactly the
  big-endian values netCDF-C would return: one block per fixed-size variable, one block
  per record for record variables (records of all record variables are interleaved), or
  one block for all records when the file has exactly one record variable (its records
  are then contiguous).
- A header that is truncated or breaks the Unidata "netCDF file format specification"
  raises `VirtualizeError` with one "corrupt" problem naming the file and the byte offset.
  Data shorter than the header promises is a fatal "truncated" problem per variable.
- `read_netcdf3_values(path, name)` decodes one variable fully (for inlining).

No scipy, no kerchunk, no netCDF library: the grammar is small and parsing it ourselves lets
us count every byte read and report exact offsets.
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import storage
from ..model import (
    BlockTable,
    Dimension,
    FileInventory,
    Location,
    Problem,
    Variable,
    VirtualizeError,
    empty_refs,
)
from ._planning import finish
from ._values import COORD_VALUES_LIMIT, TEXT_LIMIT, bytes_codec, chars_to_text, plain
from .base import Format

MAGIC = b"CDF"
FORMATS = {1: "netcdf3-cdf1", 2: "netcdf3-cdf2", 5: "netcdf3-cdf5"}

# List tags (always 32-bit, also in CDF-5).
ABSENT, NC_DIMENSION, NC_VARIABLE, NC_ATTRIBUTE = 0, 10, 11, 12

NC_CHAR = 2
# nc_type -> (name, big-endian numpy dtype). Types 7..11 exist only in CDF-5.
NC_TYPES: dict[int, tuple[str, np.dtype]] = {
    1: ("NC_BYTE", np.dtype("i1")),
    2: ("NC_CHAR", np.dtype("S1")),
    3: ("NC_SHORT", np.dtype(">i2")),
    4: ("NC_INT", np.dtype(">i4")),
    5: ("NC_FLOAT", np.dtype(">f4")),
    6: ("NC_DOUBLE", np.dtype(">f8")),
    7: ("NC_UBYTE", np.dtype("u1")),
    8: ("NC_USHORT", np.dtype(">u2")),
    9: ("NC_UINT", np.dtype(">u4")),
    10: ("NC_INT64", np.dtype(">i8")),
    11: ("NC_UINT64", np.dtype(">u8")),
}
CDF5_ONLY_TYPES = frozenset({7, 8, 9, 10, 11})

# What netCDF-C writes into never-written data (netcdf.h NC_FILL_*).
DEFAULT_FILL: dict[int, Any] = {
    1: -127,
    3: -32767,
    4: -2147483647,
    5: 9.9692099683868690e36,
    6: 9.9692099683868690e36,
    7: 255,
    8: 65535,
    9: 4294967295,
    10: -9223372036854775806,
    11: 18446744073709551614,
}

FIRST_READ = 8192  # most headers fit; longer ones grow the read (doubling)
# Gathering a record variable's values (record coordinates): records at most this far apart
# are read through, WINDOW bytes per read, instead of one seek + read per record.
READ_THROUGH_STRIDE = 4096
WINDOW = 1 << 20


# -- the parsed header ---------------------------------------------------------------------

@dataclass
class NcVar:
    """One `var` entry of the header, plus its layout once the header is complete."""

    name: str
    dimids: tuple[int, ...]
    attrs: dict[str, Any]
    raw_attrs: dict[str, np.ndarray | str]  # as stored (for _FillValue's exact bits)
    nc_type: int
    begin: int
    header_offset: int  # where the var entry starts (for messages)
    # filled in by _layout:
    shape: tuple[int, ...] = ()
    is_record: bool = False
    nbytes: int = 0  # fixed variable: all its bytes; record variable: one record's bytes

    @property
    def dtype(self) -> np.dtype:
        return NC_TYPES[self.nc_type][1]


@dataclass
class NcHeader:
    version: int
    numrecs: int  # resolved (a STREAMING file's count is computed from its size)
    streaming: bool
    dims: list[tuple[str, int]]  # (name, stored length; 0 = the record dimension)
    gatts: dict[str, Any]
    variables: list[NcVar]
    header_len: int
    recsize: int = 0  # bytes from one record to the next (0 without record variables)
    partial_bytes: int = 0  # STREAMING: bytes after the last whole record (a record cut short)
    lone_record_var: bool = False  # exactly one record variable: its records are contiguous


# -- reading the header --------------------------------------------------------------------

def corrupt(path: str, message: str) -> VirtualizeError:
    return VirtualizeError([Problem(Location(path), "corrupt", message)],
                           f"{path}: not a valid netCDF classic file")


class _Cursor:
    """Sequential big-endian reads over the header, growing the buffered read on demand.

    Every read names what it is reading so that a short or broken header is reported as
    "<what> at byte offset N" rather than as a struct error.
    """

    def __init__(self, f, path: str, size: int):
        self.f, self.path, self.size = f, path, size
        self.buf = bytearray()
        self.pos = 0
        self.version = 1

    def _ensure(self, end: int, what: str) -> None:
        if end <= len(self.buf):
            return
        if end > self.size:
            raise corrupt(self.path, f"header ends at byte {self.size} (end of file) while "
                                     f"reading {what} at byte offset {self.pos}")
        want = min(self.size, max(end, 2 * len(self.buf), FIRST_READ))
        self.f.seek(len(self.buf))
        chunk = self.f.read(want - len(self.buf))
        self.buf += chunk
        if end > len(self.buf):  # the file shrank under us
            raise corrupt(self.path, f"header ends at byte {len(self.buf)} while reading "
                                     f"{what} at byte offset {self.pos}")

    def take(self, n: int, what: str) -> bytes:
        self._ensure(self.pos + n, what)
        out = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return out

    def skip_padding(self, n: int, what: str) -> None:
        # Names and attribute values are padded with zeros to a 4-byte boundary.
        pad = -n % 4
        if pad:
            self.take(pad, f"the padding after {what}")

    def int32(self, what: str) -> int:
        return struct.unpack(">i", self.take(4, what))[0]

    def uint32(self, what: str) -> int:
        return struct.unpack(">I", self.take(4, what))[0]

    def non_neg(self, what: str) -> int:
        """NON_NEG: 32-bit in CDF-1/2, 64-bit in CDF-5."""
        at = self.pos
        if self.version == 5:
            v = struct.unpack(">q", self.take(8, what))[0]
            if v < 0:
                raise corrupt(self.path, f"{what} is negative ({v}) at byte offset {at}")
            return v
        # Read unsigned: netCDF-C writes CDF-2 dimension lengths up to 2**32 - 4, beyond
        # the spec's "non-negative INT".
        return self.uint32(what)

    def offset(self, what: str) -> int:
        """OFFSET: 32-bit in CDF-1, 64-bit in CDF-2/5 (signed, must be non-negative)."""
        at = self.pos
        fmt, n = (">i", 4) if self.version == 1 else (">q", 8)
        v = struct.unpack(fmt, self.take(n, what))[0]
        if v < 0:
            raise corrupt(self.path, f"{what} is negative ({v}) at byte offset {at}")
        return v

    def name(self, what: str) -> str:
        n = self.non_neg(f"the name length of {what}")
        at = self.pos
        raw = self.take(n, f"the name of {what}")
        self.skip_padding(n, f"the name of {what}")
        try:  # the spec: names are UTF-8 (netCDF-C and netCDF4-python refuse others)
            name = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise corrupt(self.path, f"the name of {what} at byte offset {at} is not valid "
                                     f"UTF-8 (byte {at + e.start})") from None
        if not name:
            raise corrupt(self.path, f"the name of {what} at byte offset {at} is empty")
        return name

    def nc_type(self, what: str) -> int:
        at = self.pos
        t = self.int32(f"the type of {what}")
        if t not in NC_TYPES:
            raise corrupt(self.path, f"unknown nc_type {t} for {what} at byte offset {at}")
        if t in CDF5_ONLY_TYPES and self.version != 5:
            raise corrupt(self.path, f"nc_type {t} ({NC_TYPES[t][0]}) for {what} at byte "
                                     f"offset {at} exists only in CDF-5 files")
        return t

    def list_header(self, tag: int, what: str) -> int:
        """ABSENT (tag 0, count 0) or `tag nelems`: the number of entries that follow."""
        at = self.pos
        got = self.uint32(f"the {what} tag")
        count = self.non_neg(f"the number of {what}")
        if got == ABSENT and count == 0:
            return 0
        if got != tag:
            raise corrupt(self.path, f"expected the {what} tag {tag} (or an absent list) at "
                                     f"byte offset {at}, found {got} with count {count}")
        return self.fits(count, f"{what}", at)

    def fits(self, count: int, what: str, at: int) -> int:
        """`count`, if that many entries (each at least one NON_NEG wide) fit in the file.

        Stops a corrupt count from looping over millions of entries before the header
        runs out.
        """
        width = 8 if self.version == 5 else 4
        if count * width > self.size - self.pos:
            raise corrupt(self.path, f"header ends at byte {self.size} (end of file), too "
                                     f"soon for the {count} {what} counted at byte offset {at}")
        return count


def _read_attrs(cur: _Cursor, owner: str) -> tuple[dict[str, Any], dict[str, Any]]:
    attrs: dict[str, Any] = {}
    raw: dict[str, Any] = {}
    for i in range(cur.list_header(NC_ATTRIBUTE, f"attributes of {owner}")):
        what = f"attribute {i} of {owner}"
        name = cur.name(what)
        what = f"attribute {name!r} of {owner}"
        t = cur.nc_type(what)
        n = cur.non_neg(f"the length of {what}")
        dtype = NC_TYPES[t][1]
        nbytes = n * dtype.itemsize
        data = cur.take(nbytes, f"the values of {what}")
        cur.skip_padding(nbytes, f"the values of {what}")
        if t == NC_CHAR:
            # netCDF4-python shows text attributes as str without trailing NULs.
            raw[name] = attrs[name] = data.rstrip(b"\x00").decode("utf-8", errors="replace")
        else:
            values = np.frombuffer(data, dtype=dtype)
            raw[name] = values
            attrs[name] = plain(values)
    return attrs, raw


def escape_name(name: str) -> str:
    """A variable or dimension name as a cube path can hold it: '%', '/' and control
    characters (NUL included; the netCDF spec forbids them, netCDF-C reads them) are
    percent-encoded, reversibly (`urllib.parse.unquote` gives the name back); the
    original is kept in the variable's `ORIGINAL_NAME_ATTR` attribute."""
    if not any(c in "%/" or ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        return name
    return "".join(f"%{ord(c):02X}" if c in "%/" or ord(c) < 0x20 or ord(c) == 0x7F else c
                   for c in name)


ORIGINAL_NAME_ATTR = "_virtualize_original_name"


def parse_header(f, path: str, size: int) -> NcHeader:
    """Parse the header from the open file `f` (`size` bytes long) and lay out the data."""
    cur = _Cursor(f, path, size)
    magic = cur.take(4, "the magic number")
    if magic[:3] != MAGIC or magic[3] not in FORMATS:
        raise corrupt(path, f"bad magic number {magic!r} at byte offset 0 (expected "
                            "b'CDF\\x01', b'CDF\\x02' or b'CDF\\x05')")
    cur.version = magic[3]
    at = cur.pos
    numrecs = cur.take(8 if cur.version == 5 else 4, "numrecs")
    streaming = numrecs == b"\xff" * len(numrecs)
    nrecs = int.from_bytes(numrecs, "big", signed=cur.version == 5)
    if nrecs < 0 and not streaming:
        raise corrupt(path, f"numrecs is negative ({nrecs}) at byte offset {at}")

    dims: list[tuple[str, int]] = []
    for i in range(cur.list_header(NC_DIMENSION, "dimensions")):
        name = escape_name(cur.name(f"dimension {i}"))
        dims.append((name, cur.non_neg(f"the length of dimension {i} ({name!r})")))
    _check_unique(path, [d[0] for d in dims], "dimension")
    if sum(1 for _, n in dims if n == 0) > 1:
        raise corrupt(path, "more than one record (length 0) dimension: "
                            + ", ".join(d for d, n in dims if n == 0))

    gatts, _ = _read_attrs(cur, "the file (global)")

    variables: list[NcVar] = []
    for i in range(cur.list_header(NC_VARIABLE, "variables")):
        start = cur.pos
        original = cur.name(f"variable {i}")
        name = escape_name(original)
        what = f"variable {name!r}"
        at = cur.pos
        ndims = cur.fits(cur.non_neg(f"the number of dimensions of {what}"),
                         f"dimensions of {what}", at)
        dimids = []
        for k in range(ndims):
            at = cur.pos
            d = cur.non_neg(f"dimension id {k} of {what}")
            if d >= len(dims):
                raise corrupt(path, f"{what} names dimension id {d} at byte offset {at}, "
                                    f"but the file defines {len(dims)} dimensions")
            dimids.append(d)
        attrs, raw = _read_attrs(cur, what)
        if name != original:
            attrs[ORIGINAL_NAME_ATTR] = original
        t = cur.nc_type(what)
        cur.non_neg(f"the vsize of {what}")  # redundant (and capped in CDF-2): recomputed
        begin = cur.offset(f"the begin offset of {what}")
        variables.append(NcVar(name, tuple(dimids), attrs, raw, t, begin, start))
    _check_unique(path, [v.name for v in variables], "variable")

    header = NcHeader(cur.version, nrecs, streaming, dims, gatts, variables, cur.pos)
    _layout(header, path, size)
    return header


def _check_unique(path: str, names: list[str], kind: str) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise corrupt(path, f"{kind} name {n!r} is defined twice")
        seen.add(n)


def _layout(h: NcHeader, path: str, size: int) -> None:
    """Shapes, byte sizes and the record size, as the spec (and netCDF-C) compute them."""
    record_dims = {i for i, (_, n) in enumerate(h.dims) if n == 0}
    records: list[NcVar] = []
    for v in h.variables:
        if any(d in record_dims for d in v.dimids[1:]):
            raise corrupt(path, f"variable {v.name!r} (header entry at byte offset "
                                f"{v.header_offset}) uses the record dimension other than "
                                "as its first dimension")
        v.is_record = bool(v.dimids) and v.dimids[0] in record_dims
        fixed = [h.dims[d][1] for d in v.dimids[v.is_record:]]
        v.nbytes = math.prod(fixed) * v.dtype.itemsize
        if v.begin < h.header_len and v.nbytes:
            raise corrupt(path, f"variable {v.name!r} begins at byte {v.begin}, inside the "
                                f"header (which ends at byte {h.header_len})")
        if v.is_record:
            records.append(v)
    # vsize is rounded up to 4 bytes, except that a lone record variable's records are
    # packed back to back (the spec's special case; netCDF-C NC_computeshapes).
    h.lone_record_var = len(records) == 1
    if h.lone_record_var:
        h.recsize = records[0].nbytes
    else:
        h.recsize = sum(v.nbytes + (-v.nbytes % 4) for v in records)
    _check_offsets(h, path)
    if h.streaming:
        first = min((v.begin for v in records), default=size)
        h.numrecs = max(size - first, 0) // h.recsize if h.recsize else 0
        h.partial_bytes = max(size - first, 0) - h.numrecs * h.recsize if h.recsize else 0
    for v in h.variables:
        sizes = [h.dims[d][1] for d in v.dimids]
        if v.is_record:
            sizes[0] = h.numrecs
        v.shape = tuple(sizes)


def _check_offsets(h: NcHeader, path: str) -> None:
    """The begin offsets netCDF-C accepts (NC_computeshapes, NC_check_voffs): fixed-size
    variables in header order, each after the previous one's data, then the record
    variables, likewise. netCDF-C refuses other files ("Unknown file format")."""
    def end(v: NcVar) -> int:  # netCDF-C's len: the data rounded up to 4 bytes
        return v.begin + v.nbytes + (-v.nbytes % 4)

    fixed = [v for v in h.variables if not v.is_record]
    records = [v for v in h.variables if v.is_record]
    prev, prev_name = h.header_len, "the header"
    for group in (fixed, records):
        for v in group:
            if v.begin < prev:
                raise corrupt(path, f"variable {v.name!r} (header entry at byte offset "
                                    f"{v.header_offset}) begins at byte {v.begin}, before the end "
                                    f"of {prev_name} (byte {prev})")
            prev, prev_name = end(v), f"variable {v.name!r}'s data"


def data_end(h: NcHeader, v: NcVar) -> int:
    """One past the last byte of `v`'s data: the file size it needs (0 when it has none).

    Record variables need their last record; padding after the data is not required.
    """
    if not v.is_record:
        return v.begin + v.nbytes if v.nbytes else 0
    if h.numrecs == 0 or v.nbytes == 0:
        return 0
    return v.begin + (h.numrecs - 1) * h.recsize + v.nbytes


# -- block tables --------------------------------------------------------------------------

def block_table(h: NcHeader, v: NcVar) -> BlockTable:
    """`v`'s stored blocks: see the module docstring for the three layouts."""
    shape = v.shape
    if not v.is_record:
        refs = empty_refs((1,) * len(shape))
        if v.nbytes:
            refs[(0,) * len(shape)] = (0, v.begin, v.nbytes)
        return BlockTable(tuple(max(n, 1) for n in shape), padded=False, refs=refs)
    rest = tuple(max(n, 1) for n in shape[1:])
    ones = (1,) * len(rest)
    n = h.numrecs
    if h.lone_record_var:  # its records are contiguous: one block holds them all
        refs = empty_refs((1 if n else 0, *ones))
        if n and v.nbytes:
            refs[(0,) * len(shape)] = (0, v.begin, n * v.nbytes)
        return BlockTable((max(n, 1), *rest), padded=False, refs=refs)
    refs = empty_refs((n, *ones))
    flat = refs.reshape(n)
    flat["offset"] = v.begin + np.arange(n, dtype=np.uint64) * np.uint64(h.recsize)
    flat["length"] = v.nbytes
    return BlockTable((1, *rest), padded=False, refs=refs)


def fill_value(v: NcVar) -> Any:
    """The `_FillValue` attribute (exact, as stored), else netCDF-C's default fill."""
    fv = v.raw_attrs.get("_FillValue")
    if isinstance(fv, np.ndarray) and fv.size:
        return fv[:1].astype(v.dtype)[0]
    return np.array(DEFAULT_FILL[v.nc_type]).astype(v.dtype)[()]


# -- reading data ----------------------------------------------------------------------------

def _read_strided(f, begin: int, count: int, stride: int, nbytes: int) -> bytes:
    """`count` runs of `nbytes` bytes, `stride` apart from `begin`, concatenated."""
    if count == 0 or nbytes == 0:
        return b""
    span = (count - 1) * stride + nbytes
    if span <= 2 * count * nbytes or stride <= READ_THROUGH_STRIDE:
        # Dense enough (at most half of it other variables' bytes), or records close
        # together (a few KiB, so that 80,000 records are not 80,000 reads): read the span
        # through, a window of whole records at a time.
        per = max(1, WINDOW // stride)
        parts = []
        for r0 in range(0, count, per):
            k = min(per, count - r0)
            f.seek(begin + r0 * stride)
            buf = f.read((k - 1) * stride + nbytes)
            if stride == nbytes:
                parts.append(buf)
                continue
            runs = np.ndarray((k, nbytes), dtype=np.uint8, buffer=buf, strides=(stride, 1))
            parts.append(runs.tobytes())
        return b"".join(parts)
    parts = []
    for r in range(count):
        f.seek(begin + r * stride)
        parts.append(f.read(nbytes))
    return b"".join(parts)


def read_data(f, h: NcHeader, v: NcVar) -> np.ndarray:
    """All of `v`'s values (big-endian dtype, its shape), read from the open file `f`."""
    if v.is_record:
        data = _read_strided(f, v.begin, h.numrecs, h.recsize, v.nbytes)
    else:
        f.seek(v.begin)
        data = f.read(v.nbytes) if v.nbytes else b""
    # A copy: arrays over `bytes` are read-only, and callers may want to modify values.
    return np.frombuffer(data, dtype=v.dtype).reshape(v.shape).copy()


# -- the public entry points -----------------------------------------------------------------

def scan_netcdf3(path: str) -> FileInventory:
    """Scan one netCDF classic file. Content problems are returned; a broken header raises."""
    st = storage.stat(path)
    with storage.open_source(path, st.st_size) as f:
        h = parse_header(f, path, st.st_size)
        problems: list[Problem] = []
        if h.partial_bytes:
            problems.append(Problem(Location(path), "partial-record",
                                    f"a streaming file: {h.partial_bytes} byte(s) after record "
                                    f"{h.numrecs - 1} are less than a whole record "
                                    f"({h.recsize} bytes) and are left out", fatal=False))
        variables: dict[str, Variable] = {}
        dim_names = [name for name, _ in h.dims]
        for v in h.variables:
            end = data_end(h, v)
            truncated = end > st.st_size
            if v.nc_type == NC_CHAR:
                var = _text_variable(f, h, v, dim_names, truncated, problems, path)
                if var is not None:
                    variables[v.name] = var
                continue
            if truncated:
                problems.append(Problem(Location(path, v.name), "truncated",
                                        _truncated_message(h, v, end, st.st_size)))
            dims = tuple(dim_names[d] for d in v.dimids)
            is_coord = len(dims) == 1 and dims[0] == v.name
            values = None
            if is_coord and not truncated and v.shape[0] <= COORD_VALUES_LIMIT:
                values = read_data(f, h, v)
            variables[v.name] = Variable(
                name=v.name, dtype=v.dtype, shape=v.shape, dims=dims, attrs=v.attrs,
                fill_value=fill_value(v), codecs=[bytes_codec(v.dtype)],
                # a variable cut short has no block table: numrecs or a dimension length
                # may be corrupt (2**62 records would be a 2**62-row table, a 2**64-byte
                # block does not fit a reference), and the problem is fatal
                blocks=None if truncated else block_table(h, v),
                values=values, is_coordinate=is_coord)
        bytes_read, requests = f.bytes_read, f.requests
    dimensions = {name: Dimension(name, h.numrecs if n == 0 else n, n == 0)
                  for name, n in h.dims}
    inv = FileInventory(path, FORMATS[h.version], st.st_size, st.st_mtime_ns, {"": h.gatts},
                        dimensions, variables, problems, bytes_read)
    inv.requests, inv.etag = requests, st.etag
    return inv


def _text_variable(f, h: NcHeader, v: NcVar, dim_names, truncated: bool, problems,
                   path: str) -> Variable | None:
    """An NC_CHAR variable as text (zarr `string`), as xarray decodes it: one string per
    row of its last dimension, decoded with its `_Encoding` (UTF-8 when it has none),
    trailing NULs dropped; read when scanned, stored in the cube. Skipped (not fatal)
    when larger than TEXT_LIMIT bytes or not decodable; refused when truncated."""
    if truncated:
        problems.append(Problem(Location(path, v.name), "truncated",
                                "NC_CHAR variable: its data lies past the end of the file"))
        return None
    nbytes = math.prod(v.shape)
    if nbytes > TEXT_LIMIT:
        problems.append(Problem(Location(path, v.name), "unsupported-type",
                                f"NC_CHAR variable of {nbytes} bytes: more text than the "
                                f"{TEXT_LIMIT} bytes inlined; variable skipped", fatal=False))
        return None
    attrs = dict(v.attrs)
    encoding = str(attrs.pop("_Encoding", None) or "utf-8")
    try:
        values = chars_to_text(read_data(f, h, v), encoding, chars=True)
    except Exception as e:  # undecodable bytes, an unknown encoding
        problems.append(Problem(Location(path, v.name), "unsupported-type",
                                f"NC_CHAR data cannot be read as {encoding} text "
                                f"({type(e).__name__}: {e}): variable skipped", fatal=False))
        return None
    dims = tuple(dim_names[d] for d in v.dimids)[:-1] if v.shape else ()
    return Variable(name=v.name, dtype=values.dtype, shape=values.shape, dims=dims, attrs=attrs,
                    fill_value=None, codecs=[], blocks=None, values=values)


def _truncated_message(h: NcHeader, v: NcVar, end: int, size: int) -> str:
    msg = f"the header places this variable's data up to byte {end}, but the file has only {size} bytes"
    if not v.is_record:
        return msg
    room = max(size - v.begin, 0) // h.recsize if h.recsize else 0
    where = "numrecs (byte offset 4)" if not h.streaming else "the file size"
    return (f"{msg}: {where} gives {h.numrecs} records of {h.recsize} bytes, the file has room "
            f"for {room} (a corrupt numrecs, or a truncated file)")


def read_netcdf3_values(path: str, variable: str,
                        region: tuple[tuple[int, int], ...] | None = None) -> np.ndarray:
    """Decode one variable (or the `region` [start, stop) per axis of it): a big-endian
    array (NC_CHAR gives 'S1'). Only the region's bytes are copied out of the mapped file
    (of a remote file: only the rows of its first axis are fetched)."""
    if storage.is_url(path):
        return _read_remote_values(path, variable, region)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        h = parse_header(f, path, size)
        for v in h.variables:
            if v.name == variable:
                _refuse_truncated(h, v, path, size)
                cut = tuple(slice(a, b) for a, b in region) if region is not None else ()
                if not v.nbytes or not all(v.shape):
                    return np.zeros(v.shape, dtype=v.dtype)[cut] if cut else np.zeros(v.shape, v.dtype)
                # A strided view of the mapped file: C order, except that records sit
                # `recsize` apart.
                strides = [v.dtype.itemsize * math.prod(v.shape[k + 1:])
                           for k in range(len(v.shape))]
                if v.is_record:
                    strides[0] = h.recsize
                mm = np.memmap(f, dtype=np.uint8, mode="r")
                view = np.ndarray(v.shape, dtype=v.dtype, buffer=mm, offset=v.begin,
                                  strides=tuple(strides))
                return np.array(view[cut] if cut else view)  # (a 0-d [()] gives a native scalar)
    raise KeyError(f"{path}: no variable {variable!r}")


def _refuse_truncated(h: NcHeader, v: NcVar, path: str, size: int) -> None:
    end = data_end(h, v)
    if end > size:
        raise VirtualizeError([Problem(
            Location(path, v.name), "truncated",
            f"the header places this variable's data up to byte {end}, but the "
            f"file has only {size} bytes")])


def _read_remote_values(path: str, variable: str,
                        region: tuple[tuple[int, int], ...] | None) -> np.ndarray:
    """`read_netcdf3_values` of a URL: the header, then the region's rows along the first
    axis (one range per record of a record variable, one range otherwise)."""
    with storage.open_source(path) as f:
        size = f.size
        h = parse_header(f, path, size)
        v = next((v for v in h.variables if v.name == variable), None)
        if v is None:
            raise KeyError(f"{path}: no variable {variable!r}")
        _refuse_truncated(h, v, path, size)
        cut = tuple(slice(a, b) for a, b in region) if region is not None else ()
        if not v.nbytes or not all(v.shape):
            return np.zeros(v.shape, dtype=v.dtype)[cut] if cut else np.zeros(v.shape, v.dtype)
        if not v.shape:
            return np.frombuffer(f.pread(v.dtype.itemsize, v.begin), dtype=v.dtype).reshape(())
        a0, b0 = region[0] if region is not None else (0, v.shape[0])
        row = v.dtype.itemsize * math.prod(v.shape[1:])
        if v.is_record:
            raw = b"".join(f.pread(row, v.begin + r * h.recsize) for r in range(a0, b0))
        else:
            raw = f.pread((b0 - a0) * row, v.begin + a0 * row)
        out = np.frombuffer(raw, dtype=v.dtype).reshape((b0 - a0, *v.shape[1:]))
        rest = cut[1:] if cut else ()
        return np.array(out[(slice(None), *rest)])


class NetCDF3(Format):
    name = "netcdf3"
    title = "netCDF classic"
    suffixes = (".nc", ".nc3", ".cdf", ".netcdf")  # (a .nc may be netCDF-4: HDF5 sniffs it)
    inventory_formats = tuple(FORMATS.values())
    modules = (__name__,)

    def sniff(self, head: bytes, f=None) -> bool:
        return head[:3] == MAGIC and len(head) > 3 and head[3] in FORMATS

    def scan(self, path: str, hint=None) -> FileInventory:
        return finish(scan_netcdf3(path), hint)

    def read_region(self, path: str, name: str, region=None):
        # a strided view of the mapped file, cut before copying
        return read_netcdf3_values(path, name, region)


FORMAT = NetCDF3()
