"""The output kinds (KINDS: the only list) and the one place that tells them apart: by
the name or `format` a caller gives (`kind_of`), by what is at a local path (`kind_at`,
lenient: how to open it), by whether virtualize wrote it (`written_kind`, strict: what
--overwrite may replace; `remote_written_kind` on object storage), and xarray's guess
(`guess_can_open`). Names that promise a format virtualize does not write are refused
here too (`refuse_foreign`). Each is a loop over the kinds, asking each its own rule
(`base.OutputKind`): no kind is named here but in `KINDS`.

The kinds are the built-ins (`KINDS`, imported with this module: staging.py learns what
each writes from here) and, after them, those other packages add by the entry-point group
`virtualize.outputs` (plugins.py), loaded on first use; a broken one is reported and left
out.
"""

from __future__ import annotations

import functools
import importlib
import os
from pathlib import Path

from .. import plugins
from ..model import UsageError
from . import staging
from .base import OutputKind

# the packages defining each kind's `KIND`, in the order they are listed to users
KINDS = (
    "cube",      # the cube directory (zarr.json + manifests): any name no other kind claims
    "vrt",       # a GDAL VRT of a mosaic or TIFF stack
    "kerchunk",  # kerchunk reference JSON
    "parquet",   # kerchunk parquet references (pyarrow: the optional extra [parquet])
    "icechunk",  # an Icechunk repository (the optional extra [icechunk])
)
BUILTIN = tuple(importlib.import_module(f"{__package__}.{m}").KIND for m in KINDS)
for _kind in BUILTIN:  # what each writes, for the output guards and the leftovers' cleanup
    staging.recognise(_kind.is_ours)
del _kind

# output names whose suffix says a format virtualize does not write (whatever `format`
# says): writing a cube directory or JSON under such a name would mislead every reader.
# Every input format's suffixes are refused too (`foreign_suffixes`), so a new format's
# are without a change here; a suffix an output kind writes is never refused.
FOREIGN_SUFFIXES = frozenset({
    # netCDF, HDF4/HDF5/HDF-EOS and HDF5-based formats, GRIB, BUFR, FITS
    ".nc", ".nc3", ".nc4", ".cdf", ".netcdf", ".ncml", ".cdl", ".h5", ".hdf5", ".he5",
    ".hdf", ".h4", ".hdf4", ".he2", ".he4", ".nxs", ".nwb", ".h5ad", ".mnc", ".ims",
    ".grib", ".grib1", ".grib2", ".grb", ".grb1", ".grb2", ".gb1", ".gb2", ".bufr",
    ".fits", ".fit", ".fts",
    # TIFF and TIFF-based, raster and vector GIS formats
    ".tif", ".tiff", ".gtiff", ".cog", ".btf", ".tf2", ".tf8", ".lsm", ".stk", ".ndpi",
    ".svs", ".scn", ".qptiff", ".img", ".asc", ".bil", ".bip", ".bsq", ".envi", ".ers",
    ".ecw", ".sid", ".dem", ".dt0", ".dt1", ".dt2", ".rst", ".sdat", ".grd", ".ntf",
    ".nitf", ".jp2", ".j2k", ".jpx", ".mbtiles", ".pmtiles", ".gpkg", ".shp", ".geojson",
    ".kml", ".kmz", ".gml", ".las", ".laz",
    # other array, image and table formats
    ".zip", ".n5", ".npy", ".npz", ".mat", ".nii", ".nrrd", ".mrc", ".dcm", ".czi", ".nd2",
    ".lif", ".png", ".jpg", ".jpeg", ".gif", ".bmp", ".webp", ".exr", ".pdf", ".svg",
    ".csv", ".tsv", ".xlsx", ".xls", ".feather", ".arrow", ".orc", ".avro", ".pkl",
    ".pickle", ".sqlite", ".duckdb",
    # archives and compression, text
    ".gz", ".tgz", ".bz2", ".xz", ".zst", ".lz4", ".7z", ".rar", ".tar", ".yaml", ".yml",
    ".toml", ".html", ".txt", ".xml", ".md", ".jsonl", ".ndjson",
    # GDAL sidecars (overviews, masks, world files, projections)
    ".ovr", ".msk", ".aux", ".tfw", ".tifw", ".wld", ".prj"})


@functools.cache
def kinds() -> tuple[OutputKind, ...]:
    """Every output kind, in registry order: the built-ins, then those of the entry
    points (staging.py told what each of those writes too)."""
    found = tuple(plugins.load(plugins.OUTPUTS, OutputKind, [k.name for k in BUILTIN]))
    for kind in found:
        staging.recognise(kind.is_ours)
    return BUILTIN + found


def names() -> list[str]:
    """The kinds' names: what `format` (`--format`) takes."""
    return [k.name for k in kinds()]


def by_name(kind: str) -> OutputKind:
    """The plug-in of a kind's name ("cube", "kerchunk", ...; KeyError for none)."""
    found = next((k for k in kinds() if k.name == kind), None)
    if found is None:
        raise KeyError(kind)
    return found


def default() -> OutputKind:
    """The kind of a name no kind claims (the one claiming names without a suffix), and
    of a local path no other kind detects."""
    return next(k for k in kinds() if "" in k.suffixes)


def owner(suffix: str) -> OutputKind | None:
    """The kind whose output names end in `suffix` (any case), or None."""
    suffix = suffix.lower()
    return next((k for k in kinds() if suffix in k.suffixes), None)


def foreign_suffixes() -> frozenset[str]:
    """FOREIGN_SUFFIXES, every input format's suffixes, less every suffix a kind writes."""
    from ..formats.registry import formats

    read = {s.lower() for f in formats() for s in f.suffixes}
    written = {s.lower() for k in kinds() for s in k.suffixes}
    return (FOREIGN_SUFFIXES | read) - written


def written_names() -> str:
    """What virtualize writes, by the names choosing each kind (the usage errors say it)."""
    def one(k) -> str:
        names = [f"OUT{s}" for s in k.suffixes if s] + (["no suffix"] if "" in k.suffixes else [])
        return f"{k.title or f'a {k.name} output'} ({' or '.join(names)})"
    listed = [one(k) for k in kinds()]
    return ", ".join(listed[:-1]) + f" or {listed[-1]}" if len(listed) > 1 else listed[0]


def suffix_of(out) -> str:
    return os.path.splitext(str(out).rstrip("/"))[1]


def kind_of(out, format: str | None = None) -> str:
    """The kind of an output to write at `out`: `format`, else by its suffix (the default
    kind, a cube directory, for any other name). Refuses an unknown format, a kind under
    a name another kind's suffix claims, and a kind whose package is missing."""
    suffix = suffix_of(out)
    claimed = owner(suffix) if suffix else None
    if format is None:
        kind = claimed or default()
    elif format in names():
        kind = by_name(format)
    else:
        listed = names()
        raise UsageError(f"unknown output format {format!r} ({', '.join(listed[:-1])} or "
                         f"{listed[-1]})")
    if claimed is not None and claimed is not kind:
        raise UsageError(claimed.refuse_name(out, suffix, kind.name))
    why = kind.missing()
    if why is not None:
        raise UsageError(why)
    return kind.name


def refuse_relative(kind: str) -> None:
    """Refuse `--relative` for a kind that cannot record its sources relative to itself."""
    why = by_name(kind).not_relocatable
    if why:
        raise UsageError(why)


def refuse_foreign(out) -> None:
    """Refuse an output named with a suffix of a format virtualize does not write."""
    suffix = suffix_of(out)
    if suffix.lower() in foreign_suffixes():  # a name that promises a format not written
        raise UsageError(f"{out}: virtualize does not write {suffix} files; it writes "
                         f"{written_names()}")


def kind_at(path: str | os.PathLike, *, by_name: bool = True) -> str:
    """How to open the local output at `path`: the first kind whose `detect` claims it
    (those taking whatever the others leave, `fallback`, asked last: kerchunk any file),
    else the default kind (a cube directory: checked as it is read)."""
    p = Path(path)
    last = default()
    asked = [k for k in kinds() if not k.fallback and k is not last] + \
        [k for k in kinds() if k.fallback and k is not last]
    return next((k.name for k in asked if k.detect(p, by_name=by_name)), last.name)


def written_kind(path: str | os.PathLike) -> str | None:
    """The name of the kind whose output virtualize wrote is at `path` (following a
    symlink), else None."""
    p = Path(path)
    try:
        return next((k.name for k in kinds() if k.is_ours(p)), None)
    except OSError:
        return None


def remote_written_kind(fs, base: str) -> str | None:
    """As `written_kind` on object storage (`fs`, the output's path `base`): asked of each
    kind whose `remote_marker` is there (a file kind's: `base` is one object); "other"
    when something else is there; None when nothing is."""
    try:
        file = fs.isfile(base)
        marked = False
        for k in kinds():
            marker = k.remote_marker
            if file if marker is None else not file and fs.exists(f"{base}/{marker}"):
                if k.is_ours_remote(fs, base):
                    return k.name
                marked = True
        return "other" if file or marked or fs.find(base, maxdepth=1) else None
    except (FileNotFoundError, ValueError):
        return None


def guess_can_open(path: str) -> bool:
    """A local output of any kind, by a cheap look (xarray's `guess_can_open`)."""
    return any(k.guess_can_open(path) for k in kinds())
