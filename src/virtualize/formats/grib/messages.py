"""GRIB messages found by their own length fields (docs/grib.md), with no library.

A GRIB file is a sequence of messages, each starting with "GRIB" and ending with "7777":

- GRIB1 (WMO FM 92, edition 1): the total length is octets 5-7 of section 0 (3 bytes,
  big-endian). ECMWF's large-message convention (messages over 8 MiB, what ecCodes
  writes and reads): when that length's top bit is set, the length is
  (L & 0x7fffff) * 120 and, when the binary data section's own 3-byte length L4 is under
  120, the true length is that minus L4 plus 4 (ecCodes' `read_GRIB`).
- GRIB2 (edition 2): octets 9-16 of section 0 hold the total length (8 bytes).

Only headers are read: section 0, GRIB1's sections 1-3 and 4's first bytes, GRIB2's
sections 1-4 whole and 5-7's first bytes; never the packed data. Bytes between or after
messages that hold no "GRIB" are skipped with a note; a message whose end marker is not
where its length says, or that runs past the end of the file, is refused, naming the file,
the message's number and its byte offset.

An inventory sidecar (`<file>.idx`, wgrib2's inventory as NOAA publishes next to GFS and
HRRR files: `n[.k]:offset:d=...:VAR:level:forecast:`) gives every message's offset at once:
`walk_index` reads all their headers in one batch of exact ranges (no chain of reads, each
waiting for the last message's length) and checks each message as `walk` does — "GRIB" at
the offset, its length fields and sections adding up to a 7777 where they say, ending where
the next entry begins, the last at the file's end. Any disagreement and the sidecar is not
used (a note; the messages are then walked).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from ...model import Location, Problem, VirtualizeError

MAGIC = b"GRIB"
END = b"7777"
SEARCH = 1 << 16  # bytes read at a time while looking for the next "GRIB"
LARGE = 0x800000  # GRIB1's large-message flag in the 3-byte total length


@dataclass(slots=True)
class Message:
    """Where one message is, and the header bytes its keys are read from."""

    index: int  # 0-based message number in the file
    offset: int
    length: int
    edition: int
    head: bytes  # sections 0 to 4 (GRIB2) or 0 to 3 plus 4's first 11 bytes (GRIB1)
    grid: bytes  # the grid section's bytes (GRIB2 section 3, GRIB1's GDS; b"" without one)
    bitmap: int  # GRIB2 section 6's indicator (0 present, 254 the previous one's, 255 none);
    #             GRIB1: 0 when a BMS is present, else 255
    fields: int = 1  # GRIB2: data sections (7) in the message (> 1: a multi-field message)
    bitmap_bits: int | None = None  # the points its own bit-map covers (None: no bit-map
    #                                 of its own, or a predefined one)
    data_bytes: int = 0  # the packed values' bytes (GRIB1 section 4 past its 11-byte
    #                      header, GRIB2 section 7 past its 5)
    field: int = 0  # which of them (scan.fields gives each field of a message its own copy)
    # GRIB2: its sections (number, offset in the message, length, section 6's bit-map
    # indicator else None), as `codecs.grib2_sections` gives them
    sections: tuple = ()

    @property
    def where(self) -> str:
        """How a problem names it: "message 6 (at byte offset 36181)", with ", field 1"
        after the number for a message of several fields."""
        return (f"message {self.index}" + (f", field {self.field}" if self.fields > 1 else "")
                + f" (at byte offset {self.offset})")


def corrupt(path: str, message: str, kind: str = "corrupt") -> VirtualizeError:
    return VirtualizeError([Problem(Location(path), kind, message)],
                           f"{path}: not a valid GRIB file")


def _u(b: bytes, at: int, n: int) -> int:
    return int.from_bytes(b[at:at + n], "big")


def walk(f, path: str, size: int) -> tuple[list[Message], list[Problem]]:
    """Every message of the open file `f` (`size` bytes) and notes on skipped bytes."""
    messages: list[Message] = []
    skipped: list[tuple[int, int]] = []  # (offset, length) of bytes holding no message
    at = 0
    while at < size:
        f.seek(at)
        if f.read(4) != MAGIC:
            start, at = at, _find(f, at, size)
            while not messages and at < size and not _edition(f, at):
                at = _find(f, at + 1, size)  # (a header's text naming GRIB: "GRIB data")
            skipped.append((start, min(at, size) - start))
            if at >= size:
                break
        m = _message(f, path, size, at, len(messages))
        messages.append(m)
        at = m.offset + m.length
    if not messages:
        raise corrupt(path, "no GRIB message in the file")
    notes = []
    if skipped:  # (one note: writers pad every message, ECMWF's GRIB1 to 120 bytes)
        after = skipped[-1][0] + skipped[-1][1] >= size
        notes.append(Problem(Location(path), "trailing-bytes", (
            f"{sum(n for _, n in skipped)} byte(s) in {len(skipped)} run(s) before, between or after "
            f"the messages (the first at byte offset {skipped[0][0]}"
            + (f", the last after the last message at byte offset {skipped[-1][0]}" if after
               else "") + ") hold no GRIB message: ignored"), fatal=False))
    return messages, notes


def _edition(f, at: int) -> bool:
    """Whether the "GRIB" at `at` is followed by an edition number GRIB has (1 or 2)."""
    f.seek(at)
    b = f.read(8)
    return len(b) == 8 and b[7] in (1, 2)


def is_message(f, at: int, size: int) -> bool:
    """Whether a whole GRIB message starts at byte `at` of the open file `f` (`size`
    bytes): its length fields and sections add up, its end marker where they say."""
    try:
        _message(f, "", size, at, 0)
    except VirtualizeError:
        return False
    return True


def _find(f, at: int, size: int) -> int:
    """The offset of the next "GRIB" at or after `at` (`size` when none)."""
    while at < size:
        f.seek(at)
        block = f.read(SEARCH + 3)
        k = block.find(MAGIC)
        if k >= 0:
            return at + k
        if len(block) <= 3:
            break
        at += len(block) - 3
    return size


def _message(f, path: str, size: int, at: int, index: int) -> Message:
    where = f"message {index} (at byte offset {at})"
    f.seek(at)
    s0 = f.read(16)
    if len(s0) < 8:
        raise corrupt(path, f"{where}: the file ends inside its section 0", "truncated")
    edition = s0[7]
    if edition == 1:
        m = _grib1(f, path, size, at, index, s0[:8], where)
    elif edition == 2:
        if len(s0) < 16:
            raise corrupt(path, f"{where}: the file ends inside its section 0", "truncated")
        m = _grib2(f, path, size, at, index, s0, where)
    else:
        raise corrupt(path, f"{where}: edition {edition} (GRIB 1 and 2 are read)")
    f.seek(m.offset + m.length - 4)
    if f.read(4) != END:
        raise corrupt(path, f"{where}: no end marker 7777 where its length ({m.length} bytes) "
                            "says it ends")
    return m


def _read(f, path: str, size: int, at: int, n: int, where: str, what: str) -> bytes:
    if at + n > size:
        raise corrupt(path, f"{where}: the file ends inside its {what} (a truncated file?)",
                      "truncated")
    f.seek(at)
    b = f.read(n)
    if len(b) < n:
        raise corrupt(path, f"{where}: the file ends inside its {what}", "truncated")
    return b


def _grib1(f, path, size, at, index, s0, where) -> Message:
    total = _u(s0, 4, 3)
    s1 = _read(f, path, size, at + 8, 3, where, "section 1")
    l1 = _u(s1, 0, 3)
    if l1 < 28:
        raise corrupt(path, f"{where}: section 1 is {l1} bytes long (at least 28)")
    s1 = _read(f, path, size, at + 8, l1, where, "section 1")
    flags = s1[7]
    pos, grid, bitmap = at + 8 + l1, b"", 255
    if flags & 0x80:  # a grid description section
        n = _u(_read(f, path, size, pos, 3, where, "grid description section"), 0, 3)
        if n < 32:
            raise corrupt(path, f"{where}: its grid description section is {n} bytes long")
        grid = _read(f, path, size, pos, n, where, "grid description section")
        pos += n
    bits = None
    if flags & 0x40:  # a bit-map section
        bms = _read(f, path, size, pos, 6, where, "bit-map section")
        n = _u(bms, 0, 3)
        if n < 6:
            raise corrupt(path, f"{where}: its bit-map section is {n} bytes long")
        if _u(bms, 4, 2) == 0:  # (else a predefined bit-map of the centre's)
            bits = (n - 6) * 8 - bms[3]
        bitmap, pos = 0, pos + n
    s4 = _read(f, path, size, pos, 11, where, "binary data section")
    l4 = _u(s4, 0, 3)
    if total & LARGE and l4 < 120:  # ECMWF's convention past 16 MiB (ecCodes' read_GRIB)
        total = (total & 0x7FFFFF) * 120 - l4 + 4
    elif pos + l4 + 4 - at != total:
        raise corrupt(path, f"{where}: its sections ({pos + l4 + 4 - at} bytes) do not add up "
                            f"to its length ({total} bytes)")
    if total < pos + 11 + 4 - at:
        raise corrupt(path, f"{where}: a length of {total} bytes is shorter than its headers")
    if at + total > size:
        raise corrupt(path, f"{where}: {total} bytes long but the file ends {size - at} bytes "
                            "after its start (a truncated file?)", "truncated")
    head = _read(f, path, size, at, pos + 11 - at, where, "headers")
    return Message(index, at, total, 1, head, grid, bitmap, bitmap_bits=bits,
                   data_bytes=max(at + total - 4 - pos - 11, 0))  # (l4 - 11 but large)


def _grib2(f, path, size, at, index, s0, where) -> Message:
    total = _u(s0, 8, 8)
    if total < 16 + 21 + 4:
        raise corrupt(path, f"{where}: a length of {total} bytes is shorter than its headers")
    if at + total > size:
        raise corrupt(path, f"{where}: {total} bytes long but the file ends {size - at} bytes "
                            "after its start (a truncated file?)", "truncated")
    end = at + total - 4
    pos, last, grid, bitmap, fields, head_end = at + 16, 0, b"", 255, 0, 0
    sections = []
    bits, data = None, 0
    while pos < end:
        h = _read(f, path, size, pos, 5, where, "sections")
        n, number = _u(h, 0, 4), h[4]
        sections.append([number, pos - at, n, None])
        if n < 5 or pos + n > end or number not in range(1, 8) or \
                (number <= last and not (number in (2, 3, 4) and last == 7)):
            raise corrupt(path, f"{where}: a damaged section header at byte offset {pos} "
                                f"(section {number}, {n} bytes, after section {last})")
        if number == 3:
            grid = _read(f, path, size, pos, n, where, "grid definition section")
        elif number == 6:
            bitmap = _read(f, path, size, pos, 6, where, "bit-map section")[5]
            bits = (n - 6) * 8 if bitmap == 0 else None
            sections[-1][3] = bitmap
        elif number == 7:
            fields += 1
            data = n - 5
        if number == 4 and not head_end:
            head_end = pos + n
        last, pos = number, pos + n
    if pos != end or last != 7:
        raise corrupt(path, f"{where}: its sections do not end at its end marker (byte offset "
                            f"{end})")
    head = _read(f, path, size, at, head_end - at, where, "headers")
    return Message(index, at, total, 2, head, grid, bitmap, max(fields, 1), bits, data,
                   sections=tuple(map(tuple, sections)))


HEAD = 2048  # bytes read at each offset a sidecar gives (GRIB2 sections 0-5 fit, mostly)


def read_index(text: str) -> list[int] | None:
    """The distinct message offsets of a wgrib2 inventory (`n[.k]:offset:...` per line;
    the fields of one message share its offset), ascending; None when a line is not one."""
    offsets = set()
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split(":")
        number = parts[0].split(".")
        if len(parts) < 3 or not all(x.isdigit() for x in number) or not parts[1].isdigit():
            return None
        offsets.add(int(parts[1]))
    return sorted(offsets) or None


def index_reader(f, size: int) -> "_Ranges":
    return _Ranges(f, size)


class _Ranges:
    """The open file `f` read through exact ranges: those fetched in one batch first
    (`fetch_many`, a remote file's concurrent requests), any other read one exact range
    of at least `HEAD` bytes."""

    def __init__(self, f, size: int):
        self.f, self.size, self.pos = f, size, 0
        self.got: dict[int, bytes] = {}
        self.starts: list[int] = []  # (the keys of `got`, sorted)

    def _keep(self, at: int, data: bytes) -> None:
        if at not in self.got:
            bisect.insort(self.starts, at)
        self.got[at] = data

    def _fetch(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        if hasattr(self.f, "fetch_many"):
            return self.f.fetch_many(ranges)
        out = []
        for a, b in ranges:
            self.f.seek(a)
            out.append(self.f.read(b - a))
        return out

    def prefetch(self, ranges: list[tuple[int, int]]) -> None:
        """`ranges` read at once, those that touch or overlap merged (a message's last 4
        bytes and the next one's headers are one range)."""
        merged: list[list[int]] = []
        for a, b in sorted((a, min(b, self.size)) for a, b in ranges if a < min(b, self.size)):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        for (a, _), data in zip(merged, self._fetch([(a, b) for a, b in merged])):
            self._keep(a, data)

    def seek(self, at: int, whence: int = 0) -> int:
        self.pos = at
        return at

    def read(self, n: int) -> bytes:
        at, end = self.pos, min(self.pos + n, self.size)
        self.pos = end
        k = bisect.bisect_right(self.starts, at) - 1
        if k >= 0:
            a = self.starts[k]
            data = self.got[a]
            if end <= a + len(data):
                return data[at - a:end - a]
        [data] = self._fetch([(at, min(max(end, at + HEAD), self.size))])
        self._keep(at, data)
        return data[:end - at]


SMALL = 16 << 10  # a message this short is read whole (one range, not two)


def walk_index(f, path: str, size: int, offsets: list[int], reader=None
               ) -> tuple[list[Message] | None, str]:
    """The messages at a sidecar's `offsets`, each checked as `walk` checks a message and
    each ending where the next begins (the last at the file's end), or None and how the
    sidecar disagrees with the file. `reader` (an `index_reader(f, size)`) keeps the
    ranges read, for reading the messages' keys after."""
    if offsets[0] != 0 or offsets[-1] >= size:
        return None, (f"its offsets run from {offsets[0]} to {offsets[-1]}, the file holds "
                      f"{size} bytes from 0")
    ends = offsets[1:] + [size]
    r = reader if reader is not None else _Ranges(f, size)
    # each message's headers and its last 4 bytes (the 7777 the length must lead to); a
    # short message whole
    r.prefetch([(a, b if b - a <= SMALL else a + HEAD) for a, b in zip(offsets, ends)]
               + [(b - 4, b) for a, b in zip(offsets, ends) if b - a > SMALL])
    out: list[Message] = []
    for i, (a, b) in enumerate(zip(offsets, ends)):
        r.seek(a)
        if r.read(4) != MAGIC:
            return None, f"entry {i} (byte offset {a}) is no GRIB message"
        try:
            m = _message(r, path, size, a, i)
        except VirtualizeError as e:
            return None, f"entry {i} (byte offset {a}): {e.problems[0].message}"
        if m.offset + m.length != b:
            return None, (f"message {i} (at byte offset {a}) ends at byte offset "
                          f"{m.offset + m.length}, the next entry says {b}")
        out.append(m)
    return out, ""
