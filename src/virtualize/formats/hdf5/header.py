"""HDF5 metadata read from a file's bytes: object header messages, attributes (compact,
and dense in a fractal heap indexed by a v2 B-tree), global heap objects, v2 B-tree
records. Used by the HDF5 scanner where h5py's per-call cost dominates (a small netCDF-4
file's scan is mostly attribute reads: ~50 us each through h5py, a few here) and by the
direct chunk-index readers.

Everything here reads what HDF5 itself has checked or is about to be cross-checked: an
object's header is read after HDF5 opened the object (which loads it and checks its
checksums), dense attribute storage after HDF5 iterated it (the same), and the number of
attributes read must equal HDF5's count. Anything this reader does not expect raises
`Unexpected` and the scanner asks h5py instead; an attribute whose type it does not
decode (compound, enum, array, opaque, references other than `DIMENSION_LIST`'s, a
shared type, a space-padded or empty string) is `ASK_H5PY` and read by h5py. Values are
what h5py's `AttributeManager.__getitem__` returns for the same attribute (tests compare
the two on every fixture).

`pread(n, offset)`: n bytes at offset (fewer at the end of the file), bytes or a
memoryview. Offsets and lengths are 8 bytes (the caller checks the superblock's sizes).
"""

from __future__ import annotations

import math
import struct
from typing import NamedTuple

import numpy as np

UNDEFINED = 0xFFFFFFFFFFFFFFFF  # HDF5's undefined address
MAX_MESSAGES = 1 << 16  # per object header: beyond, something is wrong
MAX_HEAP_BYTES = 1 << 26  # a global heap collection or heap block read at most


class Unexpected(Exception):
    """Something a direct reader does not expect: the caller asks HDF5 / h5py instead."""


class _NoHeader(Unexpected):
    """No object header of a version this reader knows at the address."""


class _Ask:
    __slots__ = ()

    def __repr__(self) -> str:
        return "ASK_H5PY"


ASK_H5PY = _Ask()  # an attribute value this reader does not decode: h5py reads it


def _u(b, start: int, n: int) -> int:
    return int.from_bytes(b[start:start + n], "little")


SIGNATURE = b"\x89HDF\r\n\x1a\n"


def superblock_sizes(pread) -> tuple[int, int] | None:
    """(bytes of an offset, bytes of a length) of a file whose superblock is at its start
    (no user block: addresses are file offsets), else None."""
    head = pread(16, 0)
    if len(head) < 16 or head[:8] != SIGNATURE:
        return None
    if head[8] in (0, 1):
        return head[13], head[14]
    if head[8] in (2, 3):
        return head[9], head[10]
    return None


# -- object headers --------------------------------------------------------------------

_V1_MSG = struct.Struct("<HHB")
_V2_MSG = struct.Struct("<BHB")
_V2_MSG_CRT = struct.Struct("<BHBH")


def header_messages(pread, addr: int, file_size: int, stop: int | None = None,
                    want: frozenset | None = None, blocks_read: list | None = None):
    """(header version, header flags, [(type, message flags, creation order, body), ...])
    of the object header at `addr`, continuation blocks followed. `stop`: a message type
    after which reading ends (the messages up to it are returned); `want`: the message
    types returned (default: all); `blocks_read`, if given, is told the (address, length)
    of every continuation block read (signature and checksum included)."""
    if not 0 < addr < file_size:
        raise Unexpected(f"object header address {addr}")
    head = pread(512, addr)
    blocks: list[tuple[int, int]] = []  # (address, length) of message blocks
    if head[:4] == b"OHDR":
        if len(head) < 7 or head[4] != 2:
            raise _NoHeader("object header version")
        version, flags = 2, head[5]
        pos = 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
        width = 1 << (flags & 3)
        blocks.append((addr + pos + width, _u(head, pos, width)))  # then a checksum
    elif head[:1] == b"\x01":
        version, flags = 1, 0
        blocks.append((addr + 16, _u(head, 8, 4)))
    else:
        raise _NoHeader(f"no object header at {addr}")
    hdr = 4 + (2 if flags & 0x04 else 0) if version == 2 else 8
    out = []
    visited = 0
    while blocks:
        start, length = blocks.pop(0)
        visited += 1
        if visited > 1000 or length < 0 or start + length > file_size:
            raise Unexpected("object header blocks out of place")
        data = head[start - addr:start - addr + length] \
            if addr <= start and start + length <= addr + len(head) else pread(length, start)
        if len(data) < length:
            raise Unexpected("object header past the end of the file")
        pos = 0
        unpack = (_V1_MSG if version == 1 else _V2_MSG_CRT if flags & 0x04 else _V2_MSG
                  ).unpack_from
        while pos + hdr <= length:
            if version == 1:
                mtype, msize, mflags = unpack(data, pos)
                crt = 0
            elif flags & 0x04:
                mtype, msize, mflags, crt = unpack(data, pos)
            else:
                mtype, msize, mflags = unpack(data, pos)
                crt = 0
            pos += hdr
            if pos + msize > length:
                raise Unexpected("object header message past its block")
            if mtype == 0x10:  # continuation
                if msize < 16:
                    raise Unexpected("short continuation message")
                c_addr, c_len = struct.unpack_from("<QQ", data, pos)
                if blocks_read is not None:
                    blocks_read.append((c_addr, c_len))
                if version == 2:
                    if pread(4, c_addr) != b"OCHK":
                        raise Unexpected("continuation block without its signature")
                    blocks.append((c_addr + 4, c_len - 8))  # signature and checksum
                else:
                    blocks.append((c_addr, c_len))
            elif mtype and (want is None or mtype in want):
                out.append((mtype, mflags, crt, data[pos:pos + msize]))
                if len(out) > MAX_MESSAGES:
                    raise Unexpected("too many object header messages")
                if mtype == stop:
                    return version, flags, out
            pos += msize
    return version, flags, out


def layout_message(pread, addr: int, file_size: int) -> bytes | None:
    """The body of an object header's data layout message (type 8), or None."""
    try:
        _v, _f, msgs = header_messages(pread, addr, file_size, stop=8)
    except _NoHeader:
        return None
    for mtype, _fl, _c, body in msgs:
        if mtype == 8:
            return body
    return None


# -- v2 B-trees ------------------------------------------------------------------------

def enc_size(n: int) -> int:
    """Bytes HDF5 uses to encode numbers up to n (H5VM_limit_enc_size)."""
    return (max(n, 1).bit_length() - 1) // 8 + 1


def v2_records(pread, file_size: int, header: int, types: tuple[int, ...], record_of,
               max_nodes: int):
    """The records of the v2 B-tree whose header is at `header` (of one of `types`), in
    node order, a level at a time: (tree type, record size, [arrays of records]).
    `record_of(tree_type, record_size)`: the numpy dtype of a record."""
    h = pread(38, header)
    if len(h) < 38 or h[:4] != b"BTHD" or h[4] != 0 or h[5] not in types:
        raise Unexpected(f"no v2 B-tree header at {header}")
    node_size, rec_size, depth = _u(h, 6, 4), _u(h, 10, 2), _u(h, 12, 2)
    root, root_nrec, total = _u(h, 16, 8), _u(h, 24, 2), _u(h, 26, 8)
    record = record_of(h[5], rec_size)
    if record is None or record.itemsize != rec_size or not 0 < node_size <= 1 << 24 \
            or depth > 64 or rec_size == 0:
        raise Unexpected("v2 B-tree header not understood")
    if root == UNDEFINED or total == 0:
        return h[5], []
    # what HDF5 derives from the header (H5B2__hdr_init): per depth, the records a node
    # holds at most, and the bytes of a child pointer's record counts
    max_nrec = [(node_size - 10) // rec_size]
    cum = [max_nrec[0]]
    cum_size = [0]
    nrec_size = enc_size(max_nrec[0])
    for d in range(1, depth + 1):
        ptr = 8 + nrec_size + (cum_size[d - 1] if d > 1 else 0)
        max_nrec.append((node_size - (10 + ptr)) // (rec_size + ptr))
        cum.append((max_nrec[d] + 1) * cum[d - 1] + max_nrec[d])
        cum_size.append(enc_size(cum[d]))
    level = [(root, root_nrec)]
    found = []
    seen = 0
    for d in range(depth, -1, -1):
        nxt = []
        for node, nrec in level:
            seen += 1
            if seen > max_nodes or not 0 < node < file_size or nrec > max_nrec[d]:
                raise Unexpected(f"v2 B-tree node at {node}")
            raw = pread(node_size, node)
            sig = b"BTLF" if d == 0 else b"BTIN"
            if len(raw) < 6 + nrec * rec_size or raw[:4] != sig or raw[4] != 0 or raw[5] != h[5]:
                raise Unexpected(f"no v2 B-tree node at {node}")
            found.append(np.frombuffer(raw, record, count=nrec, offset=6))
            if d:
                ptr = 8 + nrec_size + (cum_size[d - 1] if d > 1 else 0)
                pos = 6 + nrec * rec_size
                if len(raw) < pos + (nrec + 1) * ptr:
                    raise Unexpected(f"v2 B-tree node at {node} ends early")
                for _ in range(nrec + 1):
                    nxt.append((_u(raw, pos, 8), _u(raw, pos + 8, nrec_size)))
                    pos += ptr
        level = nxt
    if sum(len(f) for f in found) != total:
        raise Unexpected("v2 B-tree records do not add up to its header's count")
    return h[5], found


# -- attributes ------------------------------------------------------------------------

class DimensionList(tuple):
    """A `DIMENSION_LIST` attribute read here: per axis, the object header addresses its
    references point to (h5py would give arrays of `h5py.Reference`)."""

    __slots__ = ()


_IEEE = {  # float size: (bit offset, precision, exponent location, size, mantissa location,
    # size, exponent bias): the layouts numpy's float16/32/64 are
    2: (0, 16, 10, 5, 0, 10, 15),
    4: (0, 32, 23, 8, 0, 23, 127),
    8: (0, 64, 52, 11, 0, 52, 1023),
}


# dataspace, datatype, old and new fill value, external files, layout, filter pipeline
_DATASET_MESSAGES = frozenset({0x01, 0x03, 0x04, 0x05, 0x07, 0x08, 0x0B})
_OBJECT_MESSAGES = _DATASET_MESSAGES | {0x0C, 0x15}
_ATTR_PREFIX = struct.Struct("<BBHHH")
# decoded attribute messages of fixed-size values, by their bytes (`AttrReader._attribute`)
_KEPT: dict[bytes, tuple] = {}
_KEPT_BODY = 512  # bytes of a message kept at most
_KEPT_MAX = 4096  # messages kept (then forgotten all at once)
# what `AttrReader.read_object` read of an object header of one block whose attributes are
# in its messages alone (no heap read, no dense storage), by the header's bytes: the files
# of a stack repeat their coordinates' and variables' headers byte for byte
_OBJECTS: dict[bytes, tuple] = {}
_OBJECT_BYTES = 4096  # bytes of a header kept at most (its first block, and the others)
_OBJECTS_MAX = 2048  # headers kept (then forgotten all at once)


class AttrReader:
    """Attributes of objects of one file, read from its bytes (`pread`); global heap
    collections (variable-length data) read once each."""

    def __init__(self, pread, file_size: int):
        self.pread, self.size = pread, file_size
        self._collections: dict[int, dict[int, bytes]] = {}
        self._heap_read = False  # (whether a global heap object was read: `read_object`)

    def attributes(self, addr: int):
        """[(name, value)] of the object whose header is at `addr`, in the order h5py's
        `attrs.keys()` lists them (creation order where the header tracks it, else by
        name), and whether they are stored densely (the scanner has HDF5 iterate them
        first: that decodes, and checks, every one)."""
        pairs, dense, _messages = self.read_object(addr)
        return pairs, dense

    def read_object(self, addr: int):
        """`attributes`, and the bodies of the header's dataset messages by type
        (dataspace, datatype, fill value, external files, layout, filter pipeline;
        `dataset_storage` reads them). A header whose bytes are those of one read before
        (`_header_key`) is what was read then."""
        key = self._header_key(addr)
        if key is not None:
            hit = _OBJECTS.get(key)
            # (the first block names the others: the same if their bytes are)
            if hit is not None and all(self.pread(n, at) == raw for at, n, raw in hit[2]):
                return list(hit[0]), False, dict(hit[1])
        self._heap_read = False
        blocks_read: list[tuple[int, int]] = []
        version, flags, msgs = header_messages(self.pread, addr, self.size,
                                               want=_OBJECT_MESSAGES, blocks_read=blocks_read)
        found = []  # (creation order, name bytes, value)
        dense = False
        messages: dict[int, object] = {}
        for mtype, mflags, crt, body in msgs:
            if mtype in _DATASET_MESSAGES:
                if mtype in messages or mflags & 0x02:  # twice, or shared: h5py decides
                    messages[mtype] = None
                else:
                    messages[mtype] = body
            elif mtype == 0x0C:
                if mflags & 0x02:
                    raise Unexpected("a shared attribute message")
                found.append((crt,) + self._attribute(body))
            elif mtype == 0x15:
                heap, names = self._attribute_info(body)
                if heap != UNDEFINED:
                    dense = True
                    found.extend(self._dense(heap, names))
        if version == 2 and flags & 0x04:
            found.sort(key=lambda t: t[0])
        else:
            found.sort(key=lambda t: t[1])
        out = []
        for _crt, raw, value in found:
            try:
                name = raw.decode("utf8")
            except UnicodeDecodeError:
                raise Unexpected("an attribute name that is not UTF-8") from None
            out.append((name, value))
        if key is not None and not dense and not self._heap_read and \
                len(key) + sum(n for _at, n in blocks_read) <= _OBJECT_BYTES:
            others = tuple((at, n, bytes(self.pread(n, at))) for at, n in blocks_read)
            if all(len(raw) == n for _at, n, raw in others):
                if len(_OBJECTS) >= _OBJECTS_MAX:
                    _OBJECTS.clear()
                _OBJECTS[key] = (tuple(out), {t: None if b is None else bytes(b)
                                              for t, b in messages.items()}, others)
        return out, dense, messages

    def _header_key(self, addr: int) -> bytes | None:
        """The bytes of the object header at `addr` up to the end of its first message
        block (a version 2 header: and its checksum), or None (too long, past the end of
        the file, not a header)."""
        if not 0 < addr < self.size:
            return None
        head = self.pread(32, addr)
        if head[:4] == b"OHDR" and len(head) >= 7 and head[4] == 2:
            flags = head[5]
            pos = 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
            width = 1 << (flags & 3)
            n = pos + width + _u(head, pos, width) + 4
        elif head[:1] == b"\x01" and len(head) >= 16:
            n = 16 + _u(head, 8, 4)
        else:
            return None
        if n > _OBJECT_BYTES:
            return None
        raw = self.pread(n, addr)
        return bytes(raw) if len(raw) == n else None

    @staticmethod
    def _attribute_info(body) -> tuple[int, int]:
        if len(body) < 2 or body[0] != 0:
            raise Unexpected("attribute info message version")
        pos = 2 + (2 if body[1] & 0x01 else 0)
        if len(body) < pos + 16:
            raise Unexpected("short attribute info message")
        return _u(body, pos, 8), _u(body, pos + 8, 8)

    def _attribute(self, body) -> tuple[bytes, object]:
        """(name, value) of an attribute message's body. Those of fixed-size values
        (numbers, fixed-length strings: the message holds the whole value) are kept by
        the message's bytes, across files: a stack's files repeat their attributes."""
        key = bytes(body) if len(body) <= _KEPT_BODY else None
        if key is not None:
            hit = _KEPT.get(key)
            if hit is not None:
                return hit
        got = self._decode_attribute(body)
        if key is not None and got[2]:
            if len(_KEPT) >= _KEPT_MAX:
                _KEPT.clear()
            _KEPT[key] = got[:2]
        return got[:2]

    def _decode_attribute(self, body) -> tuple[bytes, object, bool]:
        """(name, value, whether the value is in the message alone)."""
        if len(body) < 8:
            raise Unexpected("short attribute message")
        version, shared, nsize, tsize, ssize = _ATTR_PREFIX.unpack_from(body)
        if version == 1:  # each part padded to 8 bytes
            shared = 0
            n0, nsize8, tsize8 = 8, (nsize + 7) & ~7, (tsize + 7) & ~7
            pos = n0 + nsize8 + tsize8 + ((ssize + 7) & ~7)
        elif version in (2, 3):
            n0, nsize8, tsize8 = 6 + version, nsize, tsize
            pos = n0 + nsize + tsize + ssize
        else:
            raise Unexpected(f"attribute message version {version}")
        if pos > len(body):
            raise Unexpected("attribute message parts past its end")
        name = bytes(body[n0:n0 + nsize])
        if not nsize or name.find(b"\0") != nsize - 1:  # as HDF5 checks it
            raise Unexpected("attribute name has different length than stored length")
        name = name[:-1]
        t0 = n0 + nsize8
        s0 = t0 + tsize8
        dt, ds = body[t0:t0 + tsize], body[s0:s0 + ssize]
        if shared & 0x03:  # a shared (committed) type or space
            return name, ASK_H5PY, False
        shape = _dataspace(ds)
        data = body[pos:]
        whole = len(dt) > 0 and dt[0] & 0x0F in (0, 1, 3)  # numbers, fixed-length strings
        try:
            value = self._value(dt, shape, data, name == b"DIMENSION_LIST")
        except _Undecoded:
            return name, ASK_H5PY, whole
        if isinstance(value, np.ndarray):
            value.flags.writeable = False  # shared by every file whose message is the same
        return name, value, whole

    def _value(self, dt, shape, data, dimension_list: bool):
        if len(dt) < 8:
            raise Unexpected("short datatype message")
        cls, b0 = dt[0] & 0x0F, dt[1]
        size = _u(dt, 4, 4)
        if shape is None:  # null dataspace: h5py.Empty, which the scanner reads as None
            raise _Undecoded
        n = math.prod(shape)
        if cls == 9 and dimension_list:
            return self._dimension_list(dt, shape, data)
        if cls == 9 and b0 & 0x0F == 1:  # variable-length string
            if size != 16 or len(data) < 16 * n:
                raise _Undecoded
            items = []
            for i in range(n):
                length = _u(data, 16 * i, 4)
                coll, index = _u(data, 16 * i + 4, 8), _u(data, 16 * i + 12, 4)
                if length == 0 or coll in (0, UNDEFINED):
                    raise _Undecoded  # an empty or null string: h5py's reading decides
                obj = self._heap_object(coll, index)
                if len(obj) < length:
                    raise Unexpected("a string longer than its global heap object")
                text = bytes(obj[:length]).partition(b"\0")[0]
                items.append(text.decode("utf-8", "surrogateescape"))
            arr = np.array(items, dtype=object).reshape(shape)
            return arr[()] if arr.ndim == 0 else arr
        if len(data) < n * size:
            raise Unexpected("attribute data shorter than its type and shape")
        if cls == 3:  # fixed-length string, as HDF5 converts it to h5py's null-padded type:
            # a null-terminated one up to its first NUL, a null-padded one as it is (numpy
            # drops trailing NULs)
            pad = b0 & 0x0F
            if pad not in (0, 1) or size == 0:
                raise _Undecoded  # space-padded: HDF5's conversion trims it
            raw = bytes(data[:n * size])
            items = [raw[i * size:(i + 1) * size] for i in range(n)]
            if pad == 0:
                items = [item.partition(b"\0")[0] for item in items]
            if not shape:
                return np.bytes_(items[0].rstrip(b"\0"))
            return np.array(items, dtype=f"S{size}").reshape(shape)
        dtype = standard_dtype(dt)  # a plain integer or IEEE float, else h5py converts it
        if dtype is None:
            raise _Undecoded
        arr = np.frombuffer(bytes(data[:n * size]), dtype=dtype).reshape(shape).copy()
        return arr[()] if arr.ndim == 0 else arr

    def _dimension_list(self, dt, shape, data):
        """Per axis, the addresses of the objects the axis's references point to."""
        base = dt[8:]
        if _u(dt, 4, 4) != 16 or dt[1] & 0x0F != 0 or len(shape) != 1 or len(base) < 8 \
                or base[0] & 0x0F != 7 or base[0] >> 4 != 1 or base[1] & 0x0F != 0 \
                or _u(base, 4, 4) != 8:
            raise _Undecoded  # not a sequence of (old-style) object references
        n = shape[0]
        if len(data) < 16 * n:
            raise Unexpected("attribute data shorter than its type and shape")
        axes = []
        for i in range(n):
            length = _u(data, 16 * i, 4)
            coll, index = _u(data, 16 * i + 4, 8), _u(data, 16 * i + 12, 4)
            if length == 0:
                axes.append(())
                continue
            obj = self._heap_object(coll, index)
            if len(obj) < 8 * length:
                raise Unexpected("references longer than their global heap object")
            axes.append(tuple(_u(obj, 8 * k, 8) for k in range(length)))
        return DimensionList(axes)

    def _heap_object(self, coll: int, index: int):
        self._heap_read = True
        objects = self._collections.get(coll)
        if objects is None:
            objects = self._collections[coll] = self._collection(coll)
        obj = objects.get(index)
        if obj is None:
            raise Unexpected(f"no object {index} in the global heap collection at {coll}")
        return obj

    def _collection(self, coll: int) -> dict[int, bytes]:
        if not 0 < coll < self.size:
            raise Unexpected(f"global heap collection address {coll}")
        raw = self.pread(min(4096, self.size - coll), coll)  # a collection's least size
        size = _u(raw, 8, 8) if len(raw) >= 16 else 0
        if raw[:4] != b"GCOL" or raw[4] != 1 or not 16 < size <= MAX_HEAP_BYTES \
                or coll + size > self.size:
            raise Unexpected(f"no global heap collection at {coll}")
        if len(raw) < size:
            raw = self.pread(size, coll)
        if len(raw) < size:
            raise Unexpected("global heap collection past the end of the file")
        # the objects must tile the collection exactly: each after the last (8-byte
        # aligned), then the free space (index 0) to its end, or less than an object
        # header left (a damaged size would otherwise shift every object after it)
        objects, pos = {}, 16
        while pos + 16 <= size:
            index, length = _u(raw, pos, 2), _u(raw, pos + 8, 8)
            if index == 0:
                if pos + length != size:
                    raise Unexpected(f"global heap collection at {coll} does not add up")
                break
            start = pos + 16
            if start + length > size or index in objects:
                raise Unexpected(f"global heap collection at {coll} does not add up")
            objects[index] = raw[start:start + length]
            pos = start + ((length + 7) & ~7)
        else:
            if pos > size:
                raise Unexpected(f"global heap collection at {coll} does not add up")
        return objects

    # -- dense storage: a fractal heap of attribute messages, named by a v2 B-tree

    def _dense(self, heap: int, names: int):
        def record_of(_tree_type, rec_size):
            return np.dtype([("id", "V8"), ("flags", "u1"), ("crt", "<u4"), ("hash", "<u4")]) \
                if rec_size == 17 else None

        _type, parts = v2_records(self.pread, self.size, names, (8,), record_of, 1 << 16)
        fh = _FractalHeap(self.pread, self.size, heap)
        out = []
        for records in parts:
            for rec in records:
                if rec["flags"] & 0x02:
                    raise Unexpected("a shared attribute in dense storage")
                out.append((int(rec["crt"]),) + self._attribute(fh.get(bytes(rec["id"]))))
        return out


class _Undecoded(Exception):
    """An attribute value this reader leaves to h5py."""


def _dataspace(ds) -> tuple[int, ...] | None:
    """The shape of a dataspace message (None: a null dataspace)."""
    if len(ds) < 4:
        raise Unexpected("short dataspace message")
    version, rank = ds[0], ds[1]
    if version == 1:
        pos = 8
        kind = 1 if rank else 0
    elif version == 2:
        pos, kind = 4, ds[3]
    else:
        raise Unexpected(f"dataspace message version {version}")
    if kind == 2:
        return None
    if kind == 0:
        return ()
    if kind != 1 or rank > 32 or len(ds) < pos + 8 * rank:
        raise Unexpected("dataspace message not understood")
    shape = tuple(_u(ds, pos + 8 * i, 8) for i in range(rank))
    if math.prod(shape) > MAX_HEAP_BYTES:
        raise Unexpected("an attribute of more elements than its message holds")
    return shape


def dataset_extent(messages: dict) -> tuple[tuple[int, ...], tuple] | None:
    """(shape, maxshape) of a dataset, as h5py's `shape` and `maxshape` give them (None
    for an unlimited axis), from its header's dataspace message, where its layout message
    is one `dataset_storage` reads (compact, contiguous or chunked: not a virtual dataset,
    whose extent HDF5 resolves from its sources); None otherwise (a null dataspace, a
    message twice or shared: h5py is asked)."""
    ds, layout = messages.get(0x01), messages.get(0x08)
    if ds is None or layout is None or len(layout) < 2 or layout[0] not in (3, 4, 5) \
            or layout[1] not in (0, 1, 2) or len(ds) < 4:
        return None
    version, rank, flags = ds[0], ds[1], ds[2]
    if version == 1:
        pos, kind = 8, 1 if rank else 0
    elif version == 2:
        pos, kind = 4, ds[3]
    else:
        return None
    if kind == 0 and rank == 0:
        return (), ()
    if kind != 1 or not 0 < rank <= 32 or len(ds) < pos + 8 * rank * (2 if flags & 1 else 1):
        return None
    shape = struct.unpack_from(f"<{rank}Q", ds, pos)
    if not flags & 1:
        return shape, shape
    most = struct.unpack_from(f"<{rank}Q", ds, pos + 8 * rank)
    return shape, tuple(None if m == UNDEFINED else m for m in most)


class _FractalHeap:
    """Managed objects of a fractal heap (no I/O filters): the root direct block, or the
    direct blocks of a root indirect block."""

    def __init__(self, pread, file_size: int, addr: int):
        h = pread(146, addr)
        if len(h) < 146 or h[:4] != b"FRHP" or h[4] != 0:
            raise Unexpected(f"no fractal heap header at {addr}")
        if _u(h, 7, 2):
            raise Unexpected("a fractal heap with I/O filters")
        self.pread, self.size, self.addr = pread, file_size, addr
        self.id_len, self.flags = _u(h, 5, 2), h[9]
        self.width, self.start = _u(h, 110, 2), _u(h, 112, 8)
        self.max_direct, max_bits = _u(h, 120, 8), _u(h, 128, 2)
        self.root, self.rows = _u(h, 132, 8), _u(h, 140, 2)
        if not self.width or self.start <= 0 or self.start & (self.start - 1) \
                or self.max_direct & (self.max_direct - 1) or self.max_direct < self.start \
                or self.max_direct > MAX_HEAP_BYTES or not 0 < max_bits <= 64:
            raise Unexpected("fractal heap parameters")
        self.off_size = (max_bits + 7) // 8
        self.len_size = min((self.max_direct.bit_length() - 1 + 7) // 8,
                            self.id_len - 1 - self.off_size)
        self.max_direct_rows = (self.max_direct.bit_length() - self.start.bit_length()) + 2
        self._blocks: dict[int, bytes] = {}

    def _row_size(self, r: int) -> int:
        return self.start if r == 0 else self.start << (r - 1)

    def get(self, heap_id: bytes):
        if len(heap_id) < 1 + self.off_size + self.len_size or heap_id[0] & 0xF0:
            raise Unexpected("a fractal heap ID that is not of a managed object")
        off = int.from_bytes(heap_id[1:1 + self.off_size], "little")
        length = int.from_bytes(heap_id[1 + self.off_size:1 + self.off_size + self.len_size],
                                "little")
        if self.root == UNDEFINED:
            raise Unexpected("an empty fractal heap")
        if self.rows == 0:  # the root is a direct block of the starting size
            block, block_off, block_size = self.root, 0, self.start
        else:
            block, block_off, block_size = self._direct_block_of(off)
        if not block_off <= off < off + length <= block_off + block_size:
            raise Unexpected("a fractal heap object outside its block")
        raw = self._block(block, block_off, block_size)
        start = off - block_off
        return raw[start:start + length]

    def _direct_block_of(self, off: int) -> tuple[int, int, int]:
        rows = min(self.rows, self.max_direct_rows)
        head = 5 + 8 + self.off_size
        ib = self.pread(head + rows * self.width * 8, self.root)
        if ib[:4] != b"FHIB" or ib[4] != 0 or _u(ib, 5, 8) != self.addr:
            raise Unexpected("no fractal heap indirect block at its root")
        row_start = 0
        for r in range(rows):
            size = self._row_size(r)
            if off < row_start + self.width * size:
                c = (off - row_start) // size
                addr = _u(ib, head + 8 * (r * self.width + c), 8)
                if addr in (0, UNDEFINED):
                    raise Unexpected("a fractal heap object in a block never written")
                return addr, row_start + c * size, size
            row_start += self.width * size
        raise Unexpected("a fractal heap object in a child indirect block")

    def _block(self, addr: int, block_off: int, size: int):
        raw = self._blocks.get(addr)
        if raw is None:
            if not 0 < addr or addr + size > self.size:
                raise Unexpected(f"fractal heap block address {addr}")
            raw = self.pread(size, addr)
            if len(raw) < size or raw[:4] != b"FHDB" or raw[4] != 0 \
                    or _u(raw, 5, 8) != self.addr \
                    or _u(raw, 13, self.off_size) != block_off:
                raise Unexpected(f"no fractal heap direct block at {addr}")
            self._blocks[addr] = raw
        return raw


# -- a dataset's storage, from its header messages -------------------------------------

class Storage(NamedTuple):
    """A dataset's storage, read from its header: `layout` as HDF5's H5D layout codes (0
    compact, 1 contiguous, 2 chunked); `external` whether its data is in external raw
    files; `chunks` the chunk shape (chunked); `contiguous` (address or None, bytes)
    (contiguous); `filters` [(id, flags, values, name)] as `H5Pget_filter` gives them;
    `fill` the fill value's stored bytes, b"" for none defined (h5py reads zeros), None
    when unknown or stored in a type that is not standard (HDF5 converts it: an n-bit
    integer's bits shifted); `standard_type` whether the stored type is a plain integer
    or IEEE float (whose bytes are numpy's)."""

    layout: int
    external: bool
    chunks: tuple[int, ...] | None
    contiguous: tuple[int | None, int] | None
    filters: list
    fill: bytes | None
    standard_type: bool


_FILTER_NAMES = {1: "deflate", 2: "shuffle", 3: "fletcher32", 4: "szip", 5: "nbit",
                 6: "scaleoffset"}


def dataset_storage(messages: dict, itemsize: int) -> Storage | None:
    """A dataset's `Storage` from its header's messages (`AttrReader.read_object`), or None
    when they are not the common kinds read here (a layout message before version 3, a
    virtual dataset, chunks whose partial edge chunks are left unfiltered, an old fill
    value message alone, a filter not among HDF5's own, a message twice) and h5py is
    asked instead. `itemsize`: the stored type's size, as h5py reads it."""
    if any(messages.get(t, b"") is None for t in _DATASET_MESSAGES):
        return None
    layout = messages.get(0x08)
    dt = messages.get(0x03)
    if layout is None or dt is None or len(layout) < 2 or layout[0] not in (3, 4, 5):
        return None
    version, kind = layout[0], layout[1]
    chunks = contiguous = None
    if kind == 1:
        if len(layout) < 18:
            return None
        addr, size = _u(layout, 2, 8), _u(layout, 10, 8)
        contiguous = (None, 0) if addr == UNDEFINED else (addr, size)
    elif kind == 2 and version == 3:
        rank = layout[2] if len(layout) > 2 else 0
        if rank < 2 or len(layout) < 11 + 4 * rank:
            return None
        dims = struct.unpack_from(f"<{rank}I", layout, 11)
    elif kind == 2:  # version 4 (5: the same fields): flags, rank, bytes per dimension
        if len(layout) < 5 or layout[2] & 0x01:  # edge chunks left unfiltered: h5py decides
            return None
        rank, width = layout[3], layout[4]
        if rank < 2 or not 1 <= width <= 8 or len(layout) < 5 + width * rank:
            return None
        dims = tuple(_u(layout, 5 + width * i, width) for i in range(rank))
    elif kind != 0:
        return None
    if kind == 2:
        if dims[-1] != itemsize or not all(dims):
            return None
        chunks = tuple(int(d) for d in dims[:-1])
    filters = _pipeline(messages.get(0x0B))
    if filters is None:
        return None
    fill = _fill(messages.get(0x05), messages.get(0x04))
    standard = standard_dtype(dt) is not None
    if fill and not standard:  # stored in the dataset's type: HDF5 converts it, h5py decides
        fill = None
    return Storage(kind, 0x07 in messages, chunks, contiguous, filters, fill, standard)


def _pipeline(body) -> list | None:
    if body is None:
        return []
    if len(body) < 2 or body[0] not in (1, 2):
        return None
    version, n = body[0], body[1]
    pos = 8 if version == 1 else 2
    out = []
    for _ in range(n):
        if len(body) < pos + 2:
            return None
        code = _u(body, pos, 2)
        if code not in _FILTER_NAMES:
            return None  # a plugin's filter: its name as HDF5 registers it, from h5py
        if version == 1:
            if len(body) < pos + 8:
                return None
            nlen, flags, nvalues = struct.unpack_from("<HHH", body, pos + 2)
            pos += 8
            name = bytes(body[pos:pos + nlen]).partition(b"\0")[0]
            pos += (nlen + 7) & ~7
        else:
            if len(body) < pos + 6:
                return None
            flags, nvalues = struct.unpack_from("<HH", body, pos + 2)
            pos += 6
            name = b""
        if len(body) < pos + 4 * nvalues:
            return None
        values = struct.unpack_from(f"<{nvalues}I", body, pos)
        pos += 4 * nvalues
        if version == 1 and nvalues % 2:
            pos += 4
        out.append((code, flags, values, name or _FILTER_NAMES[code].encode()))
    return out


def _fill(body, old) -> bytes | None:
    """The fill value's bytes (b"": none defined), or None (h5py decides)."""
    if body is None:
        return None if old is not None else b""
    if len(body) < 2:
        return None
    version = body[0]
    if version in (1, 2):
        if len(body) < 4:
            return None
        defined = body[3]
        if version == 2 and not defined:
            return b""
        if len(body) < 8:
            return None
        size = _u(body, 4, 4)
        if len(body) < 8 + size or (version == 1 and not defined):
            return None
        return bytes(body[8:8 + size])
    if version == 3:
        flags = body[1]
        if flags & 0x10:  # undefined
            return b""
        if not flags & 0x20:
            return b""
        if len(body) < 6:
            return None
        size = _u(body, 2, 4)
        if len(body) < 6 + size:
            return None
        return bytes(body[6:6 + size])
    return None


def standard_dtype(dt) -> np.dtype | None:
    """The numpy type of a datatype message of a plain integer (all bits used) or an IEEE
    float of 2, 4 or 8 bytes, either byte order (what h5py maps it to), else None."""
    if dt is None or len(dt) < 8:
        return None
    key = bytes(dt[:20])
    got = _DTYPES.get(key, False)
    if got is False:
        got = _DTYPES[key] = _standard(dt)
    return got


_DTYPES: dict[bytes, np.dtype | None] = {}


def _standard(dt) -> np.dtype | None:
    cls, b0, b1 = dt[0] & 0x0F, dt[1], dt[2]
    size = _u(dt, 4, 4)
    order = ">" if b0 & 0x01 else "<"
    if cls == 0:
        if size in (1, 2, 4, 8) and len(dt) >= 12 and _u(dt, 8, 2) == 0 \
                and _u(dt, 10, 2) == 8 * size and not b0 & 0x06:
            return np.dtype(f"{order}{'i' if b0 & 0x08 else 'u'}{size}")
        return None
    if cls == 1:
        if size in _IEEE and len(dt) >= 20 and not b0 & 0x40 and (b0 >> 4) & 0x03 == 2 \
                and b1 == 8 * size - 1 and (_u(dt, 8, 2), _u(dt, 10, 2), dt[12], dt[13], dt[14],
                                            dt[15], _u(dt, 16, 4)) == _IEEE[size]:
            return np.dtype(f"{order}f{size}")
    return None
