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
           unmatched: list[str] | None = None,
           refused: list[Problem] | None = None) -> list[str]:
    """Files as given; a pattern with * ? [ that names no file is expanded (sorted, as a
    shell would; one that matches nothing is added to `unmatched`); a directory stands for
    the files in it (sorted, not hidden, not recursive) of formats virtualize reads
    (others, such as .aux.xml side-cars and checksums, are added to `skipped` by
    directory), unless it is a kerchunk parquet reference set (one input); directories
    that hold none are added to `empty`. A directory's entry that is a link leading out of
    it (itself, a chain of links, or through a directory link) is not taken: a located
    `reference-not-allowed` in `refused` (a file named itself is taken wherever it is)."""
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
                out += _paths(matched, empty, skipped, refused=refused)
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
            out += _inside_directory(p, taken, refused)
        else:
            out.append(p)
    return out


def _inside_directory(d: str, files: list[str], refused: list[Problem] | None) -> list[str]:
    """The entries of directory `d` that lie inside it once their links are followed (a
    directory given is a place: a link in it must not make the cube reference a file
    elsewhere, which its reader would then serve); the others as problems in `refused`."""
    real_dir = os.path.realpath(d)
    out = []
    for f in files:
        real = os.path.realpath(f) if os.path.islink(f) else None
        if real is None or real.startswith(real_dir.rstrip("/") + "/"):
            out.append(f)
        elif refused is not None:
            refused.append(Problem(Location(os.path.abspath(f)), "reference-not-allowed",
                                   f"{f} is a link leading outside the directory {d} given as "
                                   f"input, to {real}: not taken (name the file itself to "
                                   "take it)"))
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
