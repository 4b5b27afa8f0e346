"""Shared by the robustness tests: run virtualize on one (mutated) file and judge the outcome
against the format's own library."""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import unquote

import h5py
import netCDF4
import numpy as np
import tifffile
import zarr

import virtualize
from virtualize.model import VirtualizeError

# A mutated file's scan runs in a worker and is stopped after this many seconds (every
# scan here takes well under a second; a stuck one is reported as scan-timeout). Generous:
# on a loaded machine (2 cores at load 25) a sound scan must not be taken for a stuck one,
# which would turn an "accepted" verdict into "refused" (issue 28).
SCAN_TIMEOUT = 120.0


def library_read(path: Path, name: str) -> np.ndarray:
    """`name` as the format's own library reads it from `path` (raises when it cannot)."""
    with open(path, "rb") as f:
        head = f.read(4)
    if head[:3] == b"CDF":
        with netCDF4.Dataset(path) as nc:
            # names a path cannot hold are percent-encoded in the cube; netCDF-C ends a
            # name at a NUL
            original = unquote(name)
            v = nc[original if original in nc.variables else original.split("\x00")[0]]
            v.set_auto_maskandscale(False)
            if v.dtype == np.dtype("S1"):  # text, as xarray joins and decodes it
                v.set_auto_chartostring(False)
                enc = v.__dict__.get("_Encoding", "utf-8")
                raw = np.asarray(v[...])
                if not raw.ndim:
                    return np.asarray(raw.tobytes().rstrip(b"\x00").decode(enc))
                return np.asarray(netCDF4.chartostring(raw, encoding=enc))
            return np.asarray(v[...])
    if head[:2] in (b"II", b"MM"):
        with tifffile.TiffFile(path, is_shaped=False, is_ome=False, is_imagej=False) as tif:
            main = [p for p in tif.pages if isinstance(p, tifffile.TiffPage)
                    and not (p.subfiletype & 0b101)]
            if name == "image":
                from virtualize.formats.tiff.scan import _signature
                shaped = _metadata_series(path, main)
                if shaped is not None:
                    return shaped
                stack = [p.asarray() for p in main if _signature(p) == _signature(main[0])]
                return stack[0] if len(stack) == 1 else np.stack(stack)
            k = int(name.split("/")[1])
            if name.startswith("series/"):  # tifffile's series k, as tifffile.imread reads it
                with tifffile.TiffFile(path) as shaped:
                    return shaped.series[k].asarray()
            return tif.series[0].levels[k].keyframe.asarray()
    if head == b"SIMP":
        return _fits_read(path, name)
    if head == b"GRIB":
        return _grib_read(path, name)
    with h5py.File(path, "r") as h:
        return h[name][()]


def _fits_read(path: Path, name: str) -> np.ndarray:
    """A FITS image as astropy reads it: `hdu.data` (scaled, NaN at BLANK)."""
    from astropy.io import fits

    with fits.open(path) as hdul:
        named = [k for k, h in enumerate(hdul) if h.name == name]
        k = int(name[3:]) if name.startswith("hdu") and name[3:].isdigit() else named[0]
    return fits.getdata(path, k)


def _grib_read(path: Path, name: str) -> np.ndarray:
    """Array `name` of a GRIB file from ecCodes' own walk of its messages, by docs/grib.md's
    rules for virtualize's layout (`grib_layout="virtualize"`, the cubes' here): messages
    grouped by shortName, paramId, typeOfLevel, stepType and grid (ecCodes'
    `md5GridSection`), named shortName (+ `_<typeOfLevel>`, `_<stepType>` where groups of
    one name differ in them, then `_<k>`);
    their values (bit-map points NaN) placed along the distinct member, reference time,
    step and level values (time always an axis, the others when there are several;
    pressure decreasing), NaN where no message is."""
    import datetime as dt

    from virtualize.codecs import load_eccodes

    ec = load_eccodes()  # (after pyproj: docs/grib.md, "Known issue")

    groups: dict[tuple, list] = {}
    with open(path, "rb") as f:
        while (h := ec.codes_grib_new_from_file(f)) is not None:
            try:
                short, tol = ec.codes_get(h, "shortName"), ec.codes_get(h, "typeOfLevel")
                values = ec.codes_get_values(h).astype(np.float64)
                if ec.codes_get(h, "bitmapPresent"):
                    values[ec.codes_get_array(h, "bitmap") == 0] = np.nan
                date, time = ec.codes_get(h, "dataDate"), ec.codes_get(h, "dataTime")
                ec.codes_set(h, "stepUnits", "m")
                key = (ec.codes_get(h, "number") if ec.codes_is_defined(h, "number") else 0,
                       dt.datetime(date // 10000, date // 100 % 100, date % 100, time // 100,
                                   time % 100), ec.codes_get(h, "endStep"),
                       ec.codes_get(h, "level", float))
                ni = ec.codes_get(h, "Ni") if ec.codes_is_defined(h, "Ni") else 0
                nj = ec.codes_get(h, "Nj") if ec.codes_is_defined(h, "Nj") else 0
                grid = (nj, ni) if ni > 0 and nj > 0 and ni * nj == values.size else (values.size,)
                group = (short, ec.codes_get(h, "paramId"), tol, ec.codes_get(h, "stepType"),
                         ec.codes_get(h, "md5GridSection"), grid)
                groups.setdefault(group, []).append((key, values.reshape(grid), tol))
            finally:
                ec.codes_release(h)
    shorts = [g[0] if g[0] != "unknown" else f"p{g[1]}" for g in groups]
    taken: set[str] = set()
    found = None
    for g, short in zip(groups, shorts):
        others = [k for k, s in zip(groups, shorts) if s == short]
        n = short
        for i in (2, 3):  # (typeOfLevel, stepType: where the groups of that name differ)
            if len(others) > 1 and len({k[i] for k in others}) > 1:
                n = f"{n}_{g[i]}"
        base, k = n, 1
        while n in taken:
            n, k = f"{base}_{k}", k + 1
        taken.add(n)
        if n == name:
            found = groups[g]
    if not found:
        raise KeyError(name)
    axes = [sorted({k[i] for k, _, _ in found}) for i in range(4)]
    if found[0][2] in ("isobaricInhPa", "isobaricInPa"):
        axes[3] = axes[3][::-1]
    keep = [i for i in range(4) if i == 1 or len(axes[i]) > 1]
    shape = tuple(len(axes[i]) for i in keep) + found[0][1].shape
    out = np.full(shape, np.nan)
    for k, v, _ in found:
        out[tuple(axes[i].index(k[i]) for i in keep)] = v
    return out


def _metadata_series(path: Path, main: list) -> np.ndarray | None:
    """tifffile's series 0 as `tifffile.imread` reads it, when the file's ImageJ, OME or
    tifffile "shaped" metadata makes it (the cube's `image` is that series, leading shape included,
    when its frames are IFDs of the file: docs/tiff.md), else None (a generic file: its
    image is the pages that agree with the first)."""
    with tifffile.TiffFile(path) as tif:
        if not (tif.is_shaped or tif.is_imagej or tif.is_ome):
            return None
        s = tif.series[0]
        offsets = {p.offset for p in main}
        if s.kind not in ("shaped", "imagej", "ome") or \
                not all(getattr(p, "offset", None) in offsets for p in s.pages):
            return None
        return s.asarray()


def same(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "T" or b.dtype.kind == "T":  # text: the cube holds str
        def text(x):
            return [y.decode("utf-8") if isinstance(y, bytes) else str(y)
                    for y in np.asarray(x, dtype=object).reshape(-1)]
        return a.shape == b.shape and text(a) == text(b)
    if a.shape != b.shape or a.dtype.newbyteorder("=") != b.dtype.newbyteorder("="):
        return False
    if a.dtype.kind in "fc":  # bit-exact, NaN payloads included
        n = a.dtype.itemsize
        return np.array_equal(np.ascontiguousarray(a).view(f"u{n}"),
                              np.ascontiguousarray(b.astype(a.dtype)).view(f"u{n}"))
    return np.array_equal(a, b)


def cube_arrays(group: zarr.Group, prefix: str = ""):
    for name, obj in group.members():
        full = f"{prefix}{name}"
        if isinstance(obj, zarr.Group):
            yield from cube_arrays(obj, full + "/")
        else:
            yield full, obj


# TIFF variables computed from tags (pixel-centre coordinates, the CRS variable), not read
# from blocks: the library has no array to compare them with.
DERIVED = {"x", "y", "spatial_ref"}


def judge(path: Path, out: Path) -> str:
    """Virtualize `path` alone into `out` and judge the outcome. Returns

    - "refused": a `VirtualizeError` naming the file (always acceptable: refusing is safe);
    - "accepted": a cube whose every referenced array reads back equal to the library's
      read of the same file;
    - "unreadable-consistent": accepted, but an array's stored bytes are damaged so that
      the library cannot decode it, and reading it through the cube fails as well (the
      scan reads no data, so it cannot know; what matters is that no values are invented).

    Raises AssertionError for anything else: another exception type, a refusal that does
    not name the file, an accepted array that differs from the library's read, or an
    accepted array the library cannot read but the cube can (the cube would be inventing
    values).
    """
    shutil.rmtree(out, ignore_errors=True)
    with open(path, "rb") as f:  # (GRIB: in virtualize's layout, whose rules _grib_read has)
        layout = {"grib_layout": "virtualize"} if f.read(4) == b"GRIB" else {}
    try:
        virtualize.virtualize([path], out, scan_timeout=SCAN_TIMEOUT, **layout)
    except VirtualizeError as e:
        files = {p.loc.file for p in e.problems}
        assert files and files <= {str(path), None, ""} and str(path) in files, \
            f"{path}: refusal does not name the file: {e}"
        return "refused"
    cube = virtualize.open(out)
    outcome = "accepted"
    with open(path, "rb") as f:
        head = f.read(4)
    tiff, grib = head[:2] in (b"II", b"MM"), head == b"GRIB"
    for name, arr in cube_arrays(cube):
        if tiff and name.rpartition("/")[2] in DERIVED:
            continue
        if grib and "GRIB_shortName" not in arr.attrs:  # (coordinates from the keys)
            continue
        try:
            expected = library_read(path, name)
        except Exception as e:  # noqa: BLE001 - any library error
            # the library cannot decode it (a block's bytes are damaged): the cube must not
            # produce values either
            try:
                arr[...]
            except Exception:  # noqa: BLE001
                outcome = "unreadable-consistent"
                continue
            raise AssertionError(f"{path}: {name} reads through the cube, but the library "
                                 f"cannot read it ({type(e).__name__}: {e})") from None
        got = arr[...]
        assert same(got, expected), f"{path}: {name} reads differently through the cube"
    return outcome
