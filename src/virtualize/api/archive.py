"""An archive's files: the trees under the roots given walked (a local directory, or an
object store / HTTP prefix through fsspec), each file with its size and modification
time (or ETag), which is what `catalog` compares with its record to find what changed
without scanning."""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .. import storage
from ..model import Location, Problem, VirtualizeError


@dataclass(frozen=True)
class Entry:
    """One file of the archive as listed: where, its size, its time (ns) or ETag."""

    path: str
    size: int
    mtime_ns: int
    etag: str | None = None

    def key(self) -> tuple:
        """What tells a changed file (the record's comparison)."""
        return (self.size, self.etag) if self.etag else (self.size, self.mtime_ns)


class Listing(Sequence[str]):
    """An archive's files as columns, not an object each (an archive of 10^5 files is
    listed in a few MB): each file's directory (an index into `dirs`, each directory's text
    held once), its name (one UTF-8 buffer of every name, with offsets), size, time (ns)
    and ETag (objects listed remotely). `listing[i]` is the i-th file's path. Files are in
    the walk's order: directory by directory, names sorted in each."""

    def __init__(self) -> None:
        self.dirs: list[str] = []  # each directory's path with its trailing "/"
        self._dir_index: dict[str, int] = {}
        self._dir = array("i")
        self._names = bytearray()
        self._ends = array("q")
        self.sizes = array("q")
        self.mtimes = array("q")
        self._etags: dict[int, str] = {}

    def add(self, directory: str, files: Iterable[tuple[str, int, int, str | None]]) -> None:
        """`files` (name, size, time ns, ETag or None) of `directory` (ending in "/")."""
        k = self._dir_index.get(directory)
        if k is None:
            k = self._dir_index[directory] = len(self.dirs)
            self.dirs.append(directory)
        for name, size, mtime, etag in sorted(files):
            if etag:
                self._etags[len(self._ends)] = etag
            self._dir.append(k)
            self._names += os.fsencode(name)
            self._ends.append(len(self._names))
            self.sizes.append(size)
            self.mtimes.append(mtime)

    def has_dir(self, directory: str) -> bool:
        return directory in self._dir_index

    def __len__(self) -> int:
        return len(self._ends)

    def name(self, i: int) -> str:
        start = self._ends[i - 1] if i else 0
        return os.fsdecode(bytes(self._names[start:self._ends[i]]))

    def __getitem__(self, i):  # the i-th path (a slice: a list of them)
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        return self.dirs[self._dir[i]] + self.name(i)

    def etag(self, i: int) -> str | None:
        return self._etags.get(i)

    def key(self, i: int) -> tuple:
        """What tells a changed file (`Entry.key`)."""
        etag = self._etags.get(i)
        return (self.sizes[i], etag) if etag else (self.sizes[i], self.mtimes[i])

    def __iter__(self) -> Iterator[str]:
        return (self[i] for i in range(len(self)))


class Listed:
    """Some files of a listing as the catalog's record holds them: (path, size, time,
    ETag) rows, made when the record is written (catalog_record.RecordedFiles)."""

    __slots__ = ("listing", "rows")

    def __init__(self, listing: Listing, rows: Sequence[int]) -> None:
        self.listing, self.rows = listing, rows

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[tuple[str, int, int, str | None]]:
        f = self.listing
        return ((f[i], f.sizes[i], f.mtimes[i], f.etag(i)) for i in self.rows)


def walk(roots: Iterable[str], suffixes: tuple[str, ...] | None, skip: Iterable[str] = ()
         ) -> tuple[Listing, list[Problem]]:
    """Every file under `roots` (not hidden, recursively), with a name ending in one of
    `suffixes` (None: every file), outside the directories `skip` (the catalog's own
    output); each once (a directory an earlier root listed is not listed again). A root
    that cannot be listed is a located problem."""
    skip = [os.path.abspath(s) for s in skip]
    found = Listing()
    problems: list[Problem] = []
    for root in roots:
        root = os.fspath(storage.local_path(root))
        try:
            listed = _walk_remote(root) if storage.is_url(root) else _walk_local(root, skip)
            done = set(found.dirs)  # (listed by an earlier root: a root inside another)
            for directory, files in listed:
                if directory in done:
                    continue
                files = [f for f in files if suffixes is None
                         or f[0].lower().endswith(suffixes)]
                if files:  # (a directory of no file is not held: a DRS has 7 a dataset)
                    found.add(directory, files)
        except VirtualizeError as e:
            problems += e.problems
            continue
    return found, problems


def _walk_local(root: str, skip: list[str]) -> Iterator[tuple[str, list]]:
    """(directory, [(name, size, time, None), ...]) for each directory under `root`."""
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        kind = "source-missing" if not os.path.exists(root) else "unreadable"
        raise VirtualizeError([Problem(Location(root), kind,
                                       "no such directory" if kind == "source-missing"
                                       else "not a directory: give the archive's root")],
                              f"{root}: not a directory")
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not x.startswith(".")
                         and os.path.join(d, x) not in skip)
        out = []
        for f in files:
            if f.startswith("."):
                continue
            try:
                st = os.stat(os.path.join(d, f))
            except OSError:
                continue  # (gone since listed: not in the archive now)
            out.append((f, st.st_size, st.st_mtime_ns, None))
        yield os.path.join(d, ""), out


def _walk_remote(root: str) -> list[tuple[str, list]]:
    """Objects under a URL prefix: fsspec's `find` (an object store lists them with sizes
    and ETags; HTTP by its index pages, then a HEAD per file for what they do not say)."""
    fs = storage.filesystem(root)
    proto = storage.protocol(root)
    base = storage.fs_path(fs, root.rstrip("/"))
    try:
        listed = storage.retrying(fs.find, base, detail=True)
    except Exception as e:
        raise storage.request_problem(root, e) from None
    out, unsized = [], []
    for name, info in sorted(listed.items()):
        if info.get("type") == "directory" or name.rsplit("/", 1)[-1].startswith("."):
            continue
        url = name if storage.protocol(name) else f"{proto}://{name}"
        if info.get("size") is None:
            unsized.append(url)
            continue
        out.append(Entry(url, int(info["size"]), storage.info_mtime_ns(info),
                         storage.info_etag(info)))

    def head(url):
        try:
            s = storage.stat(url)
        except VirtualizeError:
            return None
        return Entry(url, s.st_size, s.st_mtime_ns, s.etag)

    with ThreadPoolExecutor(8) as pool:
        out += [e for e in pool.map(head, unsized) if e is not None]
    by_dir: dict[str, list] = {}
    for e in out:
        d, _, name = e.path.rpartition("/")
        by_dir.setdefault(d + "/", []).append((name, e.size, e.mtime_ns, e.etag))
    return list(by_dir.items())


def relative_to(roots: Iterable[str]):
    """path -> the path relative to the root holding it (what a template is matched on)."""
    bases = sorted((os.fspath(storage.local_path(r)).rstrip("/") for r in roots),
                   key=len, reverse=True)
    bases = [b if storage.is_url(b) else os.path.abspath(b) for b in bases]

    def rel(path: str) -> str:
        for b in bases:
            if path.startswith(b + "/"):
                return path[len(b) + 1:]
        return path
    return rel
