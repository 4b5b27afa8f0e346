"""Where an HDF4 file's SD datasets lie: our own parse of its data descriptors (DD blocks,
HDF4 specification 4.2r2, chapter 2) and of the special elements that hold SD data.

- `descriptors(f, size)`: every (tag, ref) -> (special, offset, length), the DD blocks
  followed from byte 4 through their `next` links (counts checked against the file
  size, a loop in the links refused).
- `element_bytes`: the bytes of a small element (a chunk table's vdata), plain or
  SPECIAL_LINKED (its link tables walked, blocks concatenated up to its length).
- `sds_layout`: one SDS's data element (DFTAG_SD of its NDG) as a `Layout`: contiguous,
  SPECIAL_COMP (deflate: zlib streams), SPECIAL_CHUNKED (its chunk table vdata: one ref
  per chunk, plain or deflated), SPECIAL_LINKED (one block, or blocks of equal whole
  records but the last: chunks along the record axis); anything else `held` with the
  reason (RLE, N-bit, skipping Huffman, szip, other linked blocks).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

import numpy as np

from .._io import MAX_BLOCKS

MAGIC = b"\x0e\x03\x13\x01"
SPECIAL = 0x4000
NULL, LINKED, COMPRESSED, CHUNK, NT, SDG, SDD, SD, NDG, VH, VS, VG = (
    1, 20, 40, 61, 106, 700, 701, 702, 720, 1962, 1963, 1965)
SP_LINKED, SP_COMP, SP_CHUNKED = 1, 3, 5
COMP_NAMES = {0: "none", 1: "RLE", 2: "N-bit", 3: "skipping Huffman", 4: "deflate",
              5: "szip", 7: "JPEG"}
COMP_DEFLATE = 4
MAX_LINK_TABLES = 1 << 20
UNWRITTEN = 0xFFFFFFFF  # offset and length of an element created but never written


class Corrupt(ValueError):
    """The file's structure cannot be read (the message says where)."""


@dataclass
class Layout:
    """An SDS's stored blocks: `block_shape`, `offsets`/`lengths` over the block grid
    (length 0: never written), `codecs` after the bytes codec, `padded`; or `held`
    (kind, reason) when no exact reference exists."""

    block_shape: tuple[int, ...] = ()
    offsets: np.ndarray | None = None
    lengths: np.ndarray | None = None
    codecs: list = field(default_factory=list)
    padded: bool = False
    fill: bytes | None = None  # the chunk header's fill value (stored bytes)
    held: tuple[str, str] | None = None


class Descriptors(dict):
    """(tag, ref) -> (special, offset, length); `tables`: per tag, its refs as a sorted
    numpy table (for lookups of many chunks at once)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[int, np.ndarray] = {}


def descriptors(f, size: int) -> Descriptors:
    """Every data descriptor of the file: (tag, ref) -> (special, offset, length)."""
    if size < 10 or f.pread(4, 0) != MAGIC:
        raise Corrupt("no HDF4 signature (0e 03 13 01) at byte offset 0")
    out = Descriptors()
    at, seen = 4, set()
    while at:
        if at in seen:
            raise Corrupt(f"the DD blocks' links loop (back to byte offset {at})")
        seen.add(at)
        head = f.pread(6, at)
        if len(head) < 6:
            raise Corrupt(f"a DD block at byte offset {at} lies past the end of the file "
                          f"({size} bytes)")
        ndd, nxt = struct.unpack(">HI", head)
        raw = f.pread(12 * ndd, at + 6)
        if len(raw) < 12 * ndd:
            raise Corrupt(f"the DD block at byte offset {at} ({ndd} descriptors) runs past "
                          f"the end of the file ({size} bytes)")
        dds = np.frombuffer(raw, dtype=[("tag", ">u2"), ("ref", ">u2"), ("off", ">u4"),
                                        ("len", ">u4")])
        for tag, ref, off, ln in dds.tolist():
            if tag == NULL or (tag, ref) == (0, 0):
                continue
            base = tag & ~SPECIAL if tag & SPECIAL else tag
            out[(base, ref)] = (bool(tag & SPECIAL), off, ln)
        if nxt and nxt >= size:
            raise Corrupt(f"the DD block at byte offset {at} links to byte offset {nxt}, past "
                          f"the end of the file ({size} bytes)")
        at = nxt
    return out


def _read(f, n: int, at: int, size: int, what: str) -> bytes:
    if at < 0 or n < 0 or at + n > size:
        raise Corrupt(f"{what} (byte offset {at}, {n} bytes) lies past the end of the file "
                      f"({size} bytes)")
    return f.pread(n, at)


def linked_blocks(f, dds, off: int, size: int, what: str) -> tuple[int, list[tuple[int, int]]]:
    """A SPECIAL_LINKED element's (total length, [(offset, length) of its data blocks])."""
    length, block_len, nblocks, link_ref = struct.unpack(
        ">IIIH", _read(f, 14, off + 2, size, f"the linked-block header of {what}"))
    blocks: list[tuple[int, int]] = []
    seen = set()
    got = 0
    while link_ref and got < length:
        if link_ref in seen or len(seen) > MAX_LINK_TABLES:
            raise Corrupt(f"the link tables of {what} loop")
        seen.add(link_ref)
        table = dds.get((LINKED, link_ref))
        if table is None or nblocks == 0:
            raise Corrupt(f"the link table {link_ref} of {what} is missing")
        raw = _read(f, 2 + 2 * nblocks, table[1], size, f"the link table of {what}")
        refs = struct.unpack(f">H{nblocks}H", raw)
        link_ref = refs[0]
        for r in refs[1:]:
            if not r or got >= length:
                break
            b = dds.get((LINKED, r))
            if b is None:
                raise Corrupt(f"data block {r} of {what} is missing")
            n = min(b[2], length - got)
            blocks.append((b[1], n))
            got += n
    if got < length:
        raise Corrupt(f"the linked blocks of {what} hold {got} of its {length} bytes")
    return length, blocks


def element_bytes(f, dds, key, size: int, what: str) -> bytes:
    """The bytes of a (small) element: plain or linked blocks."""
    dd = dds.get(key)
    if dd is None:
        raise Corrupt(f"{what} (tag {key[0]}, ref {key[1]}) has no data descriptor")
    special, off, ln = dd
    if (off, ln) == (UNWRITTEN, UNWRITTEN) or ln == 0:  # (an element never written)
        return b""
    if not special:
        return _read(f, ln, off, size, what)
    (code,) = struct.unpack(">H", _read(f, 2, off, size, what))
    if code != SP_LINKED:
        raise Corrupt(f"{what} is a special element of kind {code}, not linked blocks")
    _, blocks = linked_blocks(f, dds, off, size, what)
    return b"".join(_read(f, n, o, size, what) for o, n in blocks)


def ndg(f, dds, ref: int, size: int) -> dict[int, int]:
    """The tags of an SDS's numeric data group (NDG or SDG): tag -> ref."""
    for tag in (NDG, SDG):
        if (tag, ref) in dds:
            raw = element_bytes(f, dds, (tag, ref), size, f"the NDG of ref {ref}")
            pairs = np.frombuffer(raw[:len(raw) // 4 * 4], dtype=">u2").reshape(-1, 2)
            return {int(t): int(r) for t, r in pairs.tolist()}
    raise Corrupt(f"the SDS of ref {ref} has no NDG")


def variable_groups(f, dds, size: int) -> dict[int, dict[int, int]]:
    """The SD interface's own record of each SDS: the vgroups of class `Var0.0`, by the ref
    of the NDG (or SDG) they hold -> their members (tag -> ref). The HDF4 library reads an
    SDS's data element (DFTAG_SD) and number type from this vgroup (mfhdf's
    `hdf_read_vars`); the NDG is written beside it for the older DFSD interface."""
    out: dict[int, dict[int, int]] = {}
    for (tag, ref), (special, off, ln) in dds.items():
        if tag != VG or special or ln < 2 or (off, ln) == (UNWRITTEN, UNWRITTEN):
            continue
        raw = _read(f, ln, off, size, f"vgroup {ref}")
        (n,) = struct.unpack(">H", raw[:2])
        at = 2 + 4 * n
        if at + 2 > len(raw):
            raise Corrupt(f"vgroup {ref} (byte offset {off}) lists {n} members in {ln} bytes")
        tags = struct.unpack(f">{n}H", raw[2:2 + 2 * n])
        refs = struct.unpack(f">{n}H", raw[2 + 2 * n:at])
        (k,) = struct.unpack(">H", raw[at:at + 2])
        at += 2 + k
        if at + 2 > len(raw):
            raise Corrupt(f"vgroup {ref} (byte offset {off}): its name runs past its {ln} bytes")
        (k,) = struct.unpack(">H", raw[at:at + 2])
        if raw[at + 2:at + 2 + k] != b"Var0.0":
            continue
        members = dict(zip(tags, refs))  # (the last of a tag, as the library takes it)
        group = members.get(NDG, members.get(SDG))
        if group is not None:
            out.setdefault(group, members)
    return out


def number_type(f, dds, ref: int, size: int) -> tuple[int, int, int]:
    """The NT record (type, width in bits, class) of an NDG's DFTAG_NT."""
    raw = element_bytes(f, dds, (NT, ref), size, f"the number type of ref {ref}")
    if len(raw) < 4:
        raise Corrupt(f"the number type {ref} is {len(raw)} bytes long")
    _, typ, width, cls = raw[:4]
    return typ, width, cls


def _comp(f, dds, off: int, size: int, what: str):
    """A SPECIAL_COMP header: (uncompressed length, comp_type, level, data (offset, length))."""
    raw = _read(f, 12, off, size, f"the compression header of {what}")
    _, ulen, comp_ref, _, ctype = struct.unpack(">HIHHH", raw)
    level = 0
    if ctype == COMP_DEFLATE:
        (level,) = struct.unpack(">H", _read(f, 2, off + 12, size, what))
    data = dds.get((COMPRESSED, comp_ref))
    if data is None:
        raise Corrupt(f"the compressed data of {what} (ref {comp_ref}) have no descriptor")
    return ulen, ctype, level, data


def _zlib(level: int) -> list:
    # HDF4's "deflate" stores zlib streams (header, adler32), as HDF5 does
    return [{"name": "numcodecs.zlib", "configuration": {"level": int(level) or 1}}]


def sds_layout(f, dds, sd_ref: int | None, shape: tuple[int, ...], itemsize: int,
               size: int, what: str) -> Layout:
    """The stored blocks of one SDS (its DFTAG_SD ref; None: never written)."""
    nbytes = math.prod(shape) * itemsize
    one = np.zeros((1,) * len(shape), np.int64)
    whole = tuple(max(n, 1) for n in shape)
    if sd_ref is not None and (SD, sd_ref) not in dds and nbytes:
        # named as the SDS's data but not in the file: the HDF4 library cannot read it
        # (SDreaddata fails); never read as never written
        raise Corrupt(f"the data element of {what} (tag {SD}, ref {sd_ref}) has no data "
                      "descriptor: the HDF4 library cannot read it")
    if sd_ref is None or dds[(SD, sd_ref)][1:] == (UNWRITTEN, UNWRITTEN) or nbytes == 0:
        return Layout(whole, one, one.copy())
    special, off, ln = dds[(SD, sd_ref)]
    if not special:
        if ln < nbytes:
            return Layout(held=("hdf4-layout", f"its data element holds {ln} of its {nbytes} "
                                              "bytes"))
        return Layout(whole, one + off, one + nbytes)
    (code,) = struct.unpack(">H", _read(f, 2, off, size, what))
    if code == SP_LINKED:
        length, blocks = linked_blocks(f, dds, off, size, what)
        if length < nbytes:
            return Layout(held=("hdf4-layout", f"its linked blocks hold {length} of its "
                                              f"{nbytes} bytes"))
        if len(blocks) == 1:
            return Layout(whole, one + blocks[0][0], one + nbytes)
        # blocks of whole records, all of the first one's length but the last (shorter,
        # at its true length): chunks along the record axis
        record = math.prod(shape[1:]) * itemsize
        first = blocks[0][1]
        if record and first % record == 0 and all(n == first for _, n in blocks[:-1]) and \
                blocks[-1][1] <= first and len(blocks) == -(-nbytes // first):
            grid = (len(blocks),) + (1,) * (len(shape) - 1)
            offs = np.array([o for o, _ in blocks], np.int64).reshape(grid)
            lens = np.array([min(first, nbytes - k * first) for k in range(len(blocks))],
                            np.int64).reshape(grid)
            return Layout((first // record, *whole[1:]), offs, lens, padded=False)
        return Layout(held=("linked-blocks", f"its data lie in {len(blocks)} linked "
                            "blocks (an appended record variable): no one regular chunk "
                            "grid addresses them"))
    if code == SP_COMP:
        ulen, ctype, level, (dspecial, doff, dlen) = _comp(f, dds, off + 2, size, what)
        if ulen == 0 and (doff, dlen) == (UNWRITTEN, UNWRITTEN):  # (compression set, no
            return Layout(whole, one, one.copy())  # data written: reads as fill)
        if ctype != COMP_DEFLATE:
            return Layout(held=("unsupported-compression",
                                f"{COMP_NAMES.get(ctype, ctype)} compression: no zarr codec "
                                "is proven to decode it as the HDF4 library does"))
        if dspecial or ulen != nbytes:
            return Layout(held=("hdf4-layout", "its compressed data are in linked "
                                "blocks or of another length than the array"))
        return Layout(whole, one + doff, one + dlen, _zlib(level))
    if code == SP_CHUNKED:
        return _chunked(f, dds, off, shape, itemsize, size, what)
    return Layout(held=("hdf4-layout", f"a special element of kind {code}"))


def _chunked(f, dds, off: int, shape, itemsize: int, size: int, what: str) -> Layout:
    head = _read(f, 33, off + 2, size, f"the chunk header of {what}")
    (_, _, flag, _, _, nt_size, tbl_tag, tbl_ref, _, _, ndims) = struct.unpack(
        ">IBIIIIHHHHI", head)
    if ndims != len(shape) or ndims > 32:
        raise Corrupt(f"the chunk header of {what} has {ndims} dimensions, the array "
                      f"{len(shape)}")
    dims = np.frombuffer(_read(f, 12 * ndims, off + 35, size, what), ">u4").reshape(ndims, 3)
    chunk = tuple(int(c) for c in dims[:, 2])
    at = off + 35 + 12 * ndims
    (flen,) = struct.unpack(">I", _read(f, 4, at, size, what))
    fill = _read(f, flen, at + 4, size, what) if flen == itemsize else None
    if flag & 0xFF not in (0, 3) or not all(chunk) or nt_size != itemsize:
        return Layout(held=("hdf4-layout", f"chunk flags {flag} (N-bit or another "
                            "chunk coding)"))
    grid = tuple(-(-n // c) for n, c in zip(shape, chunk))
    if math.prod(grid) > MAX_BLOCKS:  # (before allocating: a damaged header's sizes)
        raise Corrupt(f"{what} of shape {shape} in chunks of {chunk} is {math.prod(grid)} "
                      f"chunks, more than a block table holds ({MAX_BLOCKS})")
    vh = element_bytes(f, dds, (VH, tbl_ref), size, f"the chunk table header of {what}")
    nvert, ivsize, fields = _vh(vh, what)
    table = element_bytes(f, dds, (VS, tbl_ref), size, f"the chunk table of {what}")
    if tbl_tag != VH or len(table) < nvert * ivsize:
        raise Corrupt(f"the chunk table of {what} holds {len(table)} bytes, not "
                      f"{nvert} rows of {ivsize}")
    rows = np.frombuffer(table[:nvert * ivsize], np.uint8).reshape(nvert, ivsize)
    origin = _field(rows, fields, "origin", ">u4", ndims).astype(np.int64)
    ctag = _field(rows, fields, "chk_tag", ">u2", 1)[:, 0]
    cref = _field(rows, fields, "chk_ref", ">u2", 1)[:, 0]
    full = math.prod(chunk) * itemsize
    offsets = np.zeros(grid, np.int64)
    lengths = np.zeros(grid, np.int64)
    if not nvert:  # (no chunk written: every chunk reads as fill)
        return Layout(chunk, offsets, lengths, _zlib(1) if flag & 0xFF == 3 else [],
                      padded=True, fill=fill)
    bad = (ctag != CHUNK) | (origin >= np.array(grid)).any(axis=1)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise Corrupt(f"row {k} of the chunk table of {what} names chunk "
                      f"{tuple(origin[k].tolist())} (tag {ctag[k]}) outside its grid {grid}")
    flat = np.ravel_multi_index(tuple(origin.T), grid)
    if len(np.unique(flat)) != len(flat):
        raise Corrupt(f"the chunk table of {what} names a chunk twice")
    sp, coff, clen = _lookup(dds, CHUNK, cref, f"a chunk of {what}")
    if sp.all():  # every chunk compressed: their SPECIAL_COMP headers (16 bytes each)
        heads = [_read(f, 16, int(o), size, f"a chunk header of {what}") for o in coff]
        h = np.frombuffer(b"".join(heads), dtype=[
            ("code", ">u2"), ("version", ">u2"), ("ulen", ">u4"), ("ref", ">u2"),
            ("model", ">u2"), ("ctype", ">u2"), ("level", ">u2")])
        if (h["code"] != SP_COMP).any():
            return Layout(held=("hdf4-layout", "chunks stored as special elements other "
                                "than compressed"))
        ctype = int(h["ctype"][0])
        if (h["ctype"] != ctype).any() or ctype != COMP_DEFLATE:
            return Layout(held=("unsupported-compression",
                                f"chunks compressed by {COMP_NAMES.get(ctype, ctype)}: no "
                                "zarr codec is proven to decode them as the HDF4 library "
                                "does"))
        dsp, doff, dlen = _lookup(dds, COMPRESSED, h["ref"], f"compressed chunk of {what}")
        if dsp.any() or (h["ulen"] != full).any():
            return Layout(held=("hdf4-layout", "chunks whose compressed data lie in linked "
                                "blocks or of another length than a chunk"))
        offsets.reshape(-1)[flat], lengths.reshape(-1)[flat] = doff, dlen
        return Layout(chunk, offsets, lengths, _zlib(int(h["level"][0])), padded=True,
                      fill=fill)
    if sp.any():
        return Layout(held=("hdf4-layout", "chunks both compressed and not"))
    if (clen != full).any():
        return Layout(held=("hdf4-layout", f"chunks of another length than {full} bytes"))
    offsets.reshape(-1)[flat], lengths.reshape(-1)[flat] = coff, clen
    return Layout(chunk, offsets, lengths, [], padded=True, fill=fill)


def _lookup(dds, tag: int, refs: np.ndarray, what: str):
    """(special, offset, length) arrays of the elements (tag, refs[k])."""
    table = dds.tables.get(tag)
    if table is None:  # (built once per tag: the refs sorted)
        items = sorted((r, sp, o, n) for (t, r), (sp, o, n) in dds.items() if t == tag)
        table = dds.tables[tag] = np.array(items, dtype=np.int64).reshape(-1, 4)
    refs = np.asarray(refs, np.int64)
    at = np.searchsorted(table[:, 0], refs) if len(table) else np.zeros(len(refs), np.int64)
    found = (at < len(table)) & (table[np.minimum(at, len(table) - 1), 0] == refs) \
        if len(table) else np.zeros(len(refs), bool)
    if not found.all():
        missing = int(refs[np.flatnonzero(~found)[0]])
        raise Corrupt(f"{what} (tag {tag}, ref {missing}) has no data descriptor")
    rows = table[at]
    return rows[:, 1].astype(bool), rows[:, 2], rows[:, 3]


def _vh(raw: bytes, what: str):
    """A vdata header's (rows, row size, {field: (offset, order)})."""
    try:
        _, nvert, ivsize, nfields = struct.unpack(">HIHH", raw[:10])
        at = 10 + 4 * nfields  # (past the fields' types and sizes)
        offs = struct.unpack(f">{nfields}H", raw[at:at + 2 * nfields])
        at += 2 * nfields
        order = struct.unpack(f">{nfields}H", raw[at:at + 2 * nfields])
        at += 2 * nfields
        names = []
        for _ in range(nfields):
            (n,) = struct.unpack(">H", raw[at:at + 2])
            names.append(raw[at + 2:at + 2 + n].decode("ascii"))
            at += 2 + n
    except (struct.error, UnicodeDecodeError) as e:
        raise Corrupt(f"the vdata header of {what} cannot be parsed ({e})") from None
    return nvert, ivsize, {n: (o, k) for n, o, k in zip(names, offs, order)}


def vdata_name(f, dds, ref: int, size: int) -> tuple[str, str]:
    """A vdata's (name, class), from its header."""
    raw = element_bytes(f, dds, (VH, ref), size, f"the vdata header {ref}")
    try:
        (nfields,) = struct.unpack(">H", raw[8:10])
        at = 10 + 8 * nfields
        for _ in range(nfields):
            (n,) = struct.unpack(">H", raw[at:at + 2])
            at += 2 + n
        (n,) = struct.unpack(">H", raw[at:at + 2])
        name = raw[at + 2:at + 2 + n].decode("latin-1")
        at += 2 + n
        (n,) = struct.unpack(">H", raw[at:at + 2])
        return name, raw[at + 2:at + 2 + n].decode("latin-1")
    except struct.error as e:
        raise Corrupt(f"the vdata header {ref} cannot be parsed ({e})") from None


def _field(rows: np.ndarray, fields, name: str, dtype: str, order: int) -> np.ndarray:
    if name not in fields or fields[name][1] != order:
        raise Corrupt(f"a chunk table without the field {name!r} of {order} values")
    o = fields[name][0]
    width = np.dtype(dtype).itemsize * order
    if o + width > rows.shape[1]:
        raise Corrupt(f"the field {name!r} lies past the chunk table's rows")
    return np.ascontiguousarray(rows[:, o:o + width]).view(dtype).reshape(len(rows), order)
