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
from .vrt import KIND as VRT

KINDS = (CUBE, VRT, KERCHUNK, PARQUET, ICECHUNK)
BY_NAME = {k.kind: k for k in KINDS}

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


def foreign_suffixes() -> frozenset[str]:
    """FOREIGN_SUFFIXES, every input format's suffixes, less every suffix a kind writes."""
    from ..formats.registry import formats

    read = {s.lower() for f in formats() for s in f.suffixes}
    written = {s.lower() for k in KINDS for s in k.suffixes}
    return (FOREIGN_SUFFIXES | read) - written


def written_names() -> str:
    """What virtualize writes, by the names choosing each kind (the usage errors say it)."""
    def one(k) -> str:
        names = [f"OUT{s}" for s in k.suffixes if s] + (["no suffix"] if "" in k.suffixes else [])
        return f"{getattr(k, 'title', f'a {k.kind} output')} ({' or '.join(names)})"
    kinds = [one(k) for k in KINDS]
    return ", ".join(kinds[:-1]) + f" or {kinds[-1]}" if len(kinds) > 1 else kinds[0]


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
        raise UsageError(f"unknown output format {kind!r} (cube, kerchunk, parquet, icechunk or vrt)")
    if kind != PARQUET.kind and suffix.lower() in PARQUET.suffixes:
        # (kerchunk's readers take a .parq / .parquet name for its parquet form)
        raise UsageError(f"{out}: virtualize does not write {suffix} files as {kind}: the "
                         f"name promises kerchunk's parquet form (--format parquet), or name "
                         "it otherwise")
    if kind != VRT.kind and suffix.lower() in VRT.suffixes:  # GDAL would take it for a VRT
        raise UsageError(f"{out}: a {suffix} name is a GDAL VRT's; the {kind} output is not one "
                         f"(name it otherwise, or --format vrt)")
    owner = next((k for k in KINDS if suffix and suffix.lower() in k.suffixes), None)
    if owner is not None and owner.kind != kind:  # (readers go by the name: -o x.json a cube)
        raise UsageError(f"{out}: a {suffix} name is {owner.title}'s; the {kind} output is not "
                         f"one (name it otherwise, or --format {owner.kind})")
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
    if suffix.lower() in foreign_suffixes():  # a name that promises a format not written
        raise UsageError(f"{out}: virtualize does not write {suffix} files; it writes "
                         f"{written_names()}")


def kind_at(path: str | os.PathLike, *, by_name: bool = True) -> str:
    """How to open the local output at `path`: "vrt" (a `.vrt` file), "kerchunk" (any
    other file: a reference JSON; `by_name`: a missing `.json` too), "parquet" (a directory
    holding `.zmetadata`; `by_name`: a missing `.parq` / `.parquet` too), "icechunk" (a
    repository) or "cube" (anything else: checked as it is read)."""
    p = Path(path)
    for k in (VRT, KERCHUNK, PARQUET, ICECHUNK):
        if k.detect(p, by_name=by_name):
            return k.kind
    return CUBE.kind


def written_kind(path: str | os.PathLike) -> str | None:
    """"cube", "vrt", "kerchunk", "parquet" or "icechunk" when `path` (following a symlink) is an output
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
            return next((k.kind for k in (VRT, KERCHUNK) if k.ours_remote(fs, base)), "other")
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
        os.path.isfile(path) and (KERCHUNK.looks_like(path) or VRT.looks_like(path)))
