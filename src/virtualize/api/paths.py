"""Inputs as given: files, directories (their files of formats virtualize reads), glob
patterns and URLs expanded to the list of files to scan."""

from __future__ import annotations

import glob
import os

from .. import storage
from ..formats import registry as _formats
from ..model import Location, Problem

# names of files a directory argument takes without looking inside (a damaged one is then
# reported, not skipped); any other file is taken when its first bytes are of a format read
DATA_SUFFIXES = _formats.suffixes()  # (every format's: formats/registry.py)


def _paths(paths, empty: list[str] | None = None,
           skipped: dict[str, list[str]] | None = None,
           unmatched: list[str] | None = None) -> list[str]:
    """Files as given; a pattern with * ? [ that names no file is expanded (sorted, as a
    shell would; one that matches nothing is added to `unmatched`); a directory stands for
    the files in it (sorted, not hidden, not recursive) of formats virtualize reads
    (others, such as .aux.xml side-cars and checksums, are added to `skipped` by
    directory), unless it is a kerchunk parquet reference set (one input); directories
    that hold none are added to `empty`."""
    from ..formats import is_input_directory

    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[str] = []
    for p in map(os.fspath, paths):
        p = os.fspath(storage.local_path(p))  # file:///abs: a local path (a directory, a glob)
        if storage.is_url(p):
            storage.normalize(p)  # an unknown scheme is refused here
            if storage.has_magic(p):
                matched = storage.glob(p)
                if not matched and unmatched is not None:
                    unmatched.append(p)
                out += matched
            elif p.endswith("/") and storage.isdir(p):
                inside = storage.listdir(p)
                if not inside and empty is not None:
                    empty.append(p)
                out += inside
            else:
                out.append(p)
            continue
        if glob.has_magic(p) and not os.path.exists(p):
            matched = sorted(glob.glob(p))
            if matched:
                out += _paths(matched, empty, skipped)
                continue
            if unmatched is not None:  # not a file named with * either: nothing matches
                unmatched.append(p)
                continue
        if os.path.isdir(p) and not is_input_directory(p):
            inside = sorted(os.path.join(p, f) for f in os.listdir(p)
                            if not f.startswith(".") and os.path.isfile(os.path.join(p, f)))
            taken = [f for f in inside if _readable_format(f)]
            if len(taken) < len(inside) and skipped is not None:
                skipped[p] = [os.path.basename(f) for f in inside if f not in taken]
            if not taken and empty is not None:
                empty.append(p)
            out += taken
        else:
            out.append(p)
    return out


def _unmatched(patterns: list[str]) -> list[Problem]:
    """A pattern that matches nothing: fatal, as a missing file is (a stack without the
    files it names would be silently shorter)."""
    return [Problem(Location(p if storage.is_url(p) else os.path.abspath(p)), "no-files",
                    f"no file matches {p!r}") for p in patterns]


def _readable_format(path: str) -> bool:
    from ..formats import detect_format

    if path.lower().endswith(DATA_SUFFIXES):
        return True
    try:
        return detect_format(path) is not None
    except OSError:
        return True  # unreadable: reported by the scan
