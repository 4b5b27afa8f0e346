"""An archive's files: the trees under the roots given walked (a local directory, or an
object store / HTTP prefix through fsspec), each file with its size and modification
time (or ETag), which is what `catalog` compares with its record to find what changed
without scanning."""

from __future__ import annotations

import os
from collections.abc import Iterable
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

    def to_list(self) -> list:
        return [self.path, self.size, self.mtime_ns, self.etag]

    @classmethod
    def from_list(cls, row) -> Entry:
        return cls(str(row[0]), int(row[1]), int(row[2]), row[3] if len(row) > 3 else None)


def walk(roots: Iterable[str], suffixes: tuple[str, ...] | None, skip: Iterable[str] = ()
         ) -> tuple[list[Entry], list[Problem]]:
    """Every file under `roots` (not hidden, recursively), with a name ending in one of
    `suffixes` (None: every file), outside the directories `skip` (the catalog's own
    output); sorted by path, each once. A root that cannot be listed is a located problem."""
    skip = [os.path.abspath(s) for s in skip]
    found: dict[str, Entry] = {}
    problems: list[Problem] = []
    for root in roots:
        root = os.fspath(storage.local_path(root))
        try:
            entries = _walk_remote(root) if storage.is_url(root) else _walk_local(root, skip)
        except VirtualizeError as e:
            problems += e.problems
            continue
        for e in entries:
            name = e.path.rsplit("/", 1)[-1]
            if suffixes is None or name.lower().endswith(suffixes):
                found.setdefault(e.path, e)
    return sorted(found.values(), key=lambda e: e.path), problems


def _walk_local(root: str, skip: list[str]) -> list[Entry]:
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        kind = "source-missing" if not os.path.exists(root) else "unreadable"
        raise VirtualizeError([Problem(Location(root), kind,
                                       "no such directory" if kind == "source-missing"
                                       else "not a directory: give the archive's root")],
                              f"{root}: not a directory")
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not x.startswith(".")
                         and os.path.join(d, x) not in skip)
        for f in files:
            if f.startswith("."):
                continue
            p = os.path.join(d, f)
            try:
                st = os.stat(p)
            except OSError:
                continue  # (gone since listed: not in the archive now)
            out.append(Entry(p, st.st_size, st.st_mtime_ns))
    return out


def _walk_remote(root: str) -> list[Entry]:
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
    return out


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
