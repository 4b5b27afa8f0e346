"""The output kinds (KINDS: the only list) and the one place that tells them apart: by
the name or `format` a caller gives (`kind_of`), by what is at a local path (`kind_at`,
lenient: how to open it), by whether virtualize wrote it (`written_kind`, strict: what
--overwrite may replace; `remote_written_kind` on object storage), and xarray's guess
(`guess_can_open`). Names that promise a format virtualize does not write are refused
here too (`refuse_foreign`)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from ..model import UsageError
from .cube import KIND as CUBE
from .icechunk import KIND as ICECHUNK
from .kerchunk import KIND as KERCHUNK
from .parquet import KIND as PARQUET

KINDS = (CUBE, KERCHUNK, PARQUET, ICECHUNK)
BY_NAME = {k.kind: k for k in KINDS}

# output names whose suffix says a format virtualize does not write (whatever `format`
# says): writing a cube directory or JSON under such a name would mislead every reader
FOREIGN_SUFFIXES = frozenset({
    ".vrt", ".nc", ".nc3", ".nc4", ".cdf", ".netcdf", ".h5", ".hdf5",
    ".he5", ".hdf", ".tif", ".tiff", ".gtiff", ".cog", ".grib", ".grib2", ".grb", ".grb2",
    ".fits", ".fit", ".fts", ".zip", ".n5", ".csv", ".npy", ".npz", ".mat", ".jp2", ".png",
    ".jpg", ".jpeg", ".gz", ".bz2", ".xz", ".zst", ".tar", ".yaml", ".yml", ".html",
    ".txt", ".xml"})


def by_name(kind: str):
    """The plug-in of a kind's name ("cube", "kerchunk", "parquet", "icechunk")."""
    return BY_NAME[kind]


def suffix_of(out) -> str:
    return os.path.splitext(str(out).rstrip("/"))[1]


def kind_of(out, format: str | None = None) -> str:
    """The kind of an output to write at `out`: `format`, else by its suffix (a cube
    directory for any other name). Refuses an unknown format, and Icechunk without its
    package."""
    suffix = suffix_of(out)
    kind = format or next((k.kind for k in KINDS if k is not CUBE and suffix.lower() in k.suffixes),
                          CUBE.kind)
    if kind not in BY_NAME:
        raise UsageError(f"unknown output format {kind!r} (cube, kerchunk, parquet or icechunk)")
    if kind != PARQUET.kind and suffix.lower() in PARQUET.suffixes:
        # (kerchunk's readers take a .parq / .parquet name for its parquet form)
        raise UsageError(f"{out}: virtualize does not write {suffix} files as {kind}: the "
                         f"name promises kerchunk's parquet form (--format parquet), or name "
                         "it otherwise")
    if kind == ICECHUNK.kind and importlib.util.find_spec("icechunk") is None:
        raise UsageError("the icechunk output needs the icechunk package: "
                         "pip install 'virtualize[icechunk]'")
    if kind == PARQUET.kind and importlib.util.find_spec("pyarrow") is None:
        raise UsageError("the parquet output needs pyarrow: pip install 'virtualize[parquet]'")
    return kind


def refuse_relative(kind: str) -> None:
    """Refuse `--relative` for a kind that cannot record its sources relative to itself."""
    why = getattr(BY_NAME[kind], "not_relocatable", None)
    if why:
        raise UsageError(why)


def refuse_foreign(out) -> None:
    """Refuse an output named with a suffix of a format virtualize does not write."""
    suffix = suffix_of(out)
    if suffix.lower() in FOREIGN_SUFFIXES:  # a name that promises a format not written
        raise UsageError(f"{out}: virtualize does not write {suffix} files; it writes a cube "
                         "directory (OUT.zarr or no suffix), a kerchunk reference file "
                         "(OUT.json), kerchunk parquet references (OUT.parq) or an Icechunk "
                         "repository (OUT.icechunk)")


def kind_at(path: str | os.PathLike, *, by_name: bool = True) -> str:
    """How to open the local output at `path`: "kerchunk" (a file: a reference JSON;
    `by_name`: a missing `.json` too), "parquet" (a directory holding `.zmetadata`;
    `by_name`: a missing `.parq` / `.parquet` too), "icechunk" (a repository) or "cube"
    (anything else: checked as it is read)."""
    p = Path(path)
    for k in (KERCHUNK, PARQUET, ICECHUNK):
        if k.detect(p, by_name=by_name):
            return k.kind
    return CUBE.kind


def written_kind(path: str | os.PathLike) -> str | None:
    """"cube", "kerchunk", "parquet" or "icechunk" when `path` (following a symlink) is an output
    virtualize wrote, else None."""
    p = Path(path)
    try:
        return next((k.kind for k in KINDS if k.ours(p)), None)
    except OSError:
        return None


def remote_written_kind(fs, base: str) -> str | None:
    """As `written_kind` on object storage: "other" when something else is there; None
    when nothing is."""
    try:
        if fs.isfile(base):
            return KERCHUNK.kind if KERCHUNK.ours_remote(fs, base) else "other"
        if fs.exists(base + "/virtualize.json"):
            return CUBE.kind if CUBE.ours_remote(fs, base) else "other"
        if fs.exists(base + "/.zmetadata"):
            return PARQUET.kind if PARQUET.ours_remote(fs, base) else "other"
        if ICECHUNK.ours_remote(fs, base):
            return ICECHUNK.kind
        return "other" if fs.find(base, maxdepth=1) else None
    except (FileNotFoundError, ValueError):
        return None


def guess_can_open(path: str) -> bool:
    """A local output of any kind, by a cheap look (xarray's `guess_can_open`): a cube
    directory (it holds virtualize.json), an Icechunk repository by its name, a file that
    begins as virtualize's kerchunk JSON does."""
    return CUBE.looks_like(path) or ICECHUNK.looks_like(path) or PARQUET.looks_like(path) or (
        os.path.isfile(path) and KERCHUNK.looks_like(path))
