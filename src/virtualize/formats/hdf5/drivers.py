"""How HDF5 reads a scanned file, and how the direct readers of attributes and chunk
indexes (`header.py`, `index.py`) read the same bytes: a small local file's image
(`_Image`), a larger one opened by its path (`_Native`), else the scan's file object with
what HDF5 reads kept (`_Recorder`); `_open_file` picks.
"""

from __future__ import annotations

import bisect
import functools
import io
import itertools
import os

import h5py

from ... import storage


class _Recorder:
    """What HDF5 reads from a local source while `on` (the whole scan), kept by offset,
    so the direct readers of attributes and chunk indexes (`header.py`,
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
        # the file's own read (a LocalFile's counting is done here: one Python call less
        # for each of HDF5's reads, thousands on a large chunk index)
        raw, tell = functools.partial(io.FileIO.readinto, fobj), fobj.tell

        def readinto(b):  # h5py's file-object driver: seek, then readinto
            pos = tell()
            m = memoryview(b).cast("B")
            n = raw(m) or 0
            if n < len(m):  # a short read: read on, the rest zeroed (`_read_filled`)
                n += _read_filled(raw, m[n:]) if n else _read_filled(raw, m)
            fobj.bytes_read += n
            fobj.requests += 1
            if not self.on:
                return n
            had = self.reads.get(pos)
            if n and n <= self.LIMIT and self.kept + n <= self.BUDGET and \
                    (had is None or len(had) < n):
                self.reads[pos] = bytes(m[:n])
                self.kept += n - (len(had) if had is not None else 0)
                self._starts = None
            return n
        fobj.readinto = readinto

    def pread(self, n: int, offset: int) -> bytes:
        data = self.reads.get(offset)  # (HDF5 read most structures where they start)
        if data is not None and n <= len(data):
            return memoryview(data)[:n]  # no copy
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

    def read(self, n: int, offset: int) -> bytes:
        """`pread`, what it read from the file then kept as HDF5's reads are (a dataset's
        values read by the scanner: the digests of its blocks are made from them)."""
        data = self.pread(n, offset)
        if isinstance(data, bytes) and 0 < len(data) <= self.LIMIT and \
                self.kept + len(data) <= self.BUDGET and offset not in self.reads:
            self.reads[offset] = data
            self.kept += len(data)
            self._starts = None
        return data

    def forget(self, keep: int) -> None:
        """Forget the reads recorded after the first `keep` (in order of recording)."""
        new = len(self.reads) - keep
        if new <= 0:
            return
        if keep < new:  # (a large index's nodes after a few header reads) rebuilt
            self.reads = dict(itertools.islice(self.reads.items(), keep))
            self.kept = sum(len(v) for v in self.reads.values())
        else:
            for k in list(itertools.islice(reversed(self.reads), new)):
                self.kept -= len(self.reads.pop(k))
        self._starts = None


class _Native(_Recorder):
    """A larger local file, which HDF5 opens by its path (`open`: its own C driver, no
    Python call per read of HDF5's: on a large chunk index, thousands), the scan's file
    object only for the direct readers (`pread`: `os.pread`, counted in the source's
    bytes_read and requests; nothing of HDF5's reads is recorded, so what they read HDF5
    has read too: a v1 B-tree's nodes twice, once in HDF5's counting walk). HDF5 must
    open the very file the scan opened (device and inode compared) and have it open
    nowhere else in this process (where HDF5 would share that handle: its view of a file
    being written, not the file's bytes), else `open` is None and the file-object driver
    reads it."""

    MIN = 1 << 18  # bytes from which a file is opened so (smaller ones: `_Image`)

    def __init__(self, fobj):  # (HDF5 reads with its own descriptor: nothing to hook)
        self.fobj, self.fd = fobj, fobj.fileno()
        self.reads, self.kept, self._starts = {}, 0, None
        self.on = False

    def open(self) -> h5py.File | None:
        try:  # (no lock: the file-object driver takes none either)
            f = h5py.File(self.fobj.name, "r", locking=False)
        except Exception:
            return None
        try:
            mine, hdf5 = os.fstat(self.fd), os.fstat(f.id.get_vfd_handle())
            if (mine.st_dev, mine.st_ino) == (hdf5.st_dev, hdf5.st_ino) and \
                    h5py.h5f.get_obj_count(f.id, h5py.h5f.OBJ_FILE) == 1:
                return f
        except Exception:
            pass
        f.close()
        return None


class _Image(_Recorder):
    """A small local file (at most `LIMIT` bytes) read whole with one read, which HDF5
    opens from memory (`open`: its core driver, on a copy of these bytes, read-only), so
    that none of HDF5's reads is a Python call of h5py's file-object driver; the direct
    readers read the same bytes (`pread`: fewer at the end of the file, as `os.pread`)."""

    LIMIT = 1 << 18
    _opened = itertools.count()  # (HDF5 tells open files apart by name: each its own)

    def __init__(self, fobj, data: bytes):
        super().__init__(fobj)
        self.data = data
        self.reads, self.kept, self._starts = {0: data}, len(data), [0]

    @classmethod
    def of(cls, fobj, size: int) -> "_Image | None":
        """The file's image, or None when it is larger than `LIMIT` (or changed size)."""
        if not 0 < size <= cls.LIMIT:
            return None
        data = os.pread(fobj.fileno(), size + 1, 0)
        fobj.bytes_read += len(data)
        fobj.requests += 1
        return cls(fobj, data) if len(data) == size else None

    def open(self) -> h5py.File:
        fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
        fapl.set_fapl_core(1 << 16, False)  # no backing store: nothing is written
        fapl.set_file_image(self.data)  # (HDF5 takes a copy)
        name = f"{self.fobj.name}#{next(self._opened)}".encode("utf-8", "surrogateescape")
        return h5py.File(h5py.h5f.open(name, h5py.h5f.ACC_RDONLY, fapl=fapl))

    def pread(self, n: int, offset: int):
        if offset < 0 or n < 0:
            raise ValueError(f"a read of {n} bytes at {offset}")
        return memoryview(self.data)[offset:offset + n]  # no copy

    def read(self, n: int, offset: int):
        return self.pread(n, offset)

    def forget(self, keep: int) -> None:
        return None  # (the whole file is the image)


def _open_file(path: str, fobj, size: int):
    """(the h5py.File the scan reads, the recorder its direct readers read through, None
    for a remote file). A small local file is read whole, once, and HDF5 opens that image
    (`_Image`: its core driver, no Python call per read of HDF5's); a larger one HDF5 opens
    by its path (`_Native`: its own driver; thousands of reads on a large chunk index),
    else through the scan's file object, what it reads kept (`_Recorder`: the direct
    readers of attributes and chunk indexes read the superblock, object headers... from
    memory). OSError naming the file if HDF5 cannot open it."""
    local = isinstance(fobj, storage.LocalFile)
    recorder = _Image.of(fobj, size) if local else None
    f = None
    if recorder is None and local and size >= _Native.MIN:
        recorder = _Native(fobj)
        f = recorder.open()
        if f is None:  # (HDF5 cannot open it so: its file-object driver decides)
            recorder = None
    if recorder is None and local:
        recorder = _Recorder(fobj)
        recorder.on = True
    try:
        if f is None:
            f = recorder.open() if isinstance(recorder, _Image) else h5py.File(fobj, "r")
    except Exception as e:  # h5py raises OSError / RuntimeError with HDF5's text
        raise OSError(f"{path}: not a readable HDF5 file ({e})") from e
    return f, recorder


def _read_filled(read, b) -> int:
    """Read into `b` with `read` (a `readinto`) until it is full or the file ends, the
    rest zeroed, as HDF5's own (sec2) driver reads: h5py's file-object driver makes one
    `readinto` call and leaves what a short read (past the end of the file) did not fill
    as it was, memory that changes from run to run (a damaged superblock's driver block
    past the end made the verdict change between runs). Returns the bytes read."""
    m = memoryview(b).cast("B")
    n = k = read(m) or 0  # (one read, nearly always)
    while k and n < len(m):
        k = read(m[n:]) or 0
        n += k
    if n < len(m):
        m[n:] = bytes(len(m) - n)
    return n
