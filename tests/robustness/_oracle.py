"""Shared by the robustness tests: run virtualize on one (mutated) file and judge the outcome
against the format's own library."""

from __future__ import annotations

import os
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


HDF4_MAGIC = b"\x0e\x03\x13\x01"


def _head(path: Path) -> bytes:
    if Path(path).is_dir():
        return b""
    with open(path, "rb") as f:
        return f.read(4)


def library_read(path: Path, name: str) -> np.ndarray:
    """`name` as the format's own library reads it from `path` (raises when it cannot)."""
    if Path(path).is_dir():  # a zarr v2 store: zarr-python
        node = zarr.open(str(path), mode="r", zarr_format=2)
        a = node if isinstance(node, zarr.Array) else node[name]
        return np.asarray(a[...])
    head = _head(path)
    if head == HDF4_MAGIC:
        return pyhdf_read(path, name)
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
    their values (the points ecCodes gives no value NaN) placed along the distinct member, reference time,
    step and level values (time always an axis, the others when there are several;
    pressure decreasing), NaN where no message is. Raises when ecCodes cannot decode one
    of its messages."""
    found = _grib_named(_grib_groups(path)).get(name)
    if not found:
        raise KeyError(name)
    bad = next((v for _, v, _ in found if isinstance(v, Exception)), None)
    if bad is not None:
        raise bad
    axes = [sorted({k[i] for k, _, _ in found}) for i in range(4)]
    if found[0][2] in ("isobaricInhPa", "isobaricInPa"):
        axes[3] = axes[3][::-1]
    keep = [i for i in range(4) if i == 1 or len(axes[i]) > 1]
    shape = tuple(len(axes[i]) for i in keep) + found[0][1].shape
    out = np.full(shape, np.nan)
    for k, v, _ in found:
        out[tuple(axes[i].index(k[i]) for i in keep)] = v
    return out


def _grib_groups(path: Path) -> dict[tuple, list]:
    """Every message ecCodes walks, grouped; its values, or the error decoding them."""
    import datetime as dt

    from virtualize.codecs import load_eccodes

    ec = load_eccodes()  # (after pyproj: docs/grib.md, "Known issue")

    groups: dict[tuple, list] = {}
    with open(path, "rb") as f:
        while (h := ec.codes_grib_new_from_file(f)) is not None:
            try:
                short, tol = ec.codes_get(h, "shortName"), ec.codes_get(h, "typeOfLevel")
                try:
                    # the points ecCodes gives no value (a bit-map's, or all of a field it
                    # cannot scale): those that follow its missingValue, NaN
                    values = ec.codes_get_values(h).astype(np.float64)
                    ec.codes_set(h, "missingValue", 1.25e300)
                    other = ec.codes_get_values(h).astype(np.float64)
                    values[(values != other) & ~(np.isnan(values) & np.isnan(other))] = np.nan
                    points = values.size
                except Exception as e:  # noqa: BLE001 - this message does not decode
                    values, points = e, ec.codes_get(h, "numberOfPoints")
                date, time = ec.codes_get(h, "dataDate"), ec.codes_get(h, "dataTime")
                ec.codes_set(h, "stepUnits", "m")
                key = (ec.codes_get(h, "number") if ec.codes_is_defined(h, "number") else 0,
                       dt.datetime(date // 10000, date // 100 % 100, date % 100, time // 100,
                                   time % 100), ec.codes_get(h, "endStep", int),
                       ec.codes_get(h, "level", float))
                ni = ec.codes_get(h, "Ni") if ec.codes_is_defined(h, "Ni") else 0
                nj = ec.codes_get(h, "Nj") if ec.codes_is_defined(h, "Nj") else 0
                grid = (nj, ni) if ni > 0 and nj > 0 and ni * nj == points else (points,)
                group = (short, ec.codes_get(h, "paramId"), tol, ec.codes_get(h, "stepType"),
                         ec.codes_get(h, "md5GridSection"), grid)
                if not isinstance(values, Exception):
                    values = _yx(ec, h, values, grid)
                groups.setdefault(group, []).append((key, values, tol))
            finally:
                ec.codes_release(h)
    return groups


def _yx(ec, h, values: np.ndarray, grid: tuple) -> np.ndarray:
    """ecCodes' values (in the message's scanning order) on the (y, x) grid: points along
    columns (jPointsAreConsecutive) fill (Ni, Nj), transposed; every second row of an
    alternating scan reversed (cfgrib's reading; docs/grib.md)."""
    if len(grid) != 2:
        return values.reshape(grid)
    flag = [ec.codes_is_defined(h, k) and ec.codes_get(h, k)
            for k in ("jPointsAreConsecutive", "alternativeRowScanning")]
    out = values.reshape(grid[::-1] if flag[0] else grid).copy()
    if flag[1]:
        out[1::2] = out[1::2, ::-1]
    return out.T if flag[0] else out


def _grib_named(groups: dict) -> dict:
    """The groups by the array name docs/grib.md gives them."""
    shorts = [g[0] if g[0] != "unknown" else f"p{g[1]}" for g in groups]
    taken: set[str] = set()
    named = {}
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
        named[n] = groups[g]
    return named


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
      read of the same file, and that holds every array the library reads (or says, in a
      note located at it, why it left it out);
    - "unreadable-consistent": accepted, but an array's stored bytes are damaged where the
      library cannot decode it, the cube cannot read that part either, and some of the
      array's stored chunks read through the cube (the scan reads no data and the decode
      check samples chunks, so a damaged block among many cannot be known; what matters
      is that no values are invented and that no array is published that nothing reads).

    Raises AssertionError for anything else:

    - another exception type, or a refusal that does not name the file;
    - "wrong": an accepted array that differs from the library's read;
    - "invented": an accepted array the library cannot read but the cube can;
    - "written-unreadable": an accepted array the library reads but the cube cannot, or
      one of which not a single stored chunk reads through the cube (exit 0, and nothing
      can read what was published);
    - "missing": an array the library reads that the cube lacks, with no located note.
    """
    global _JUDGED
    shutil.rmtree(out, ignore_errors=True)
    _JUDGED = Path(out)
    # (GRIB in virtualize's layout, whose rules _grib_read has; the option means nothing to
    # the other formats, and a GRIB file may start with other bytes or be a directory's)
    layout = {"grib_layout": "virtualize"}
    try:
        report = virtualize.virtualize([path], out, scan_timeout=SCAN_TIMEOUT, **layout)
    except VirtualizeError as e:
        # (a store's problems may name a chunk file in it)
        files = {p.loc.file for p in e.problems} - {None, ""}
        assert str(path) in files or any(f.startswith(f"{path}{os.sep}") for f in files), \
            f"{path}: refusal does not name the file: {e}"
        assert all(f == str(path) or f.startswith(f"{path}{os.sep}") for f in files), \
            f"{path}: refusal names other files: {e}"
        return "refused"
    cube = virtualize.open(out)
    outcome = "accepted"
    head = _head(path)
    tiff, grib = head[:2] in (b"II", b"MM"), head == b"GRIB"
    names = set()
    for name, arr in cube_arrays(cube):
        names.add(name)
        if "HDF4_NAME" in arr.attrs:  # (an SDS the cube names `sds<index>`)
            names.add(str(arr.attrs["HDF4_NAME"]))
        if "FITS_HDU" in arr.attrs:  # (an image by its HDU's index, as notes name it)
            names.add(f"hdu{arr.attrs['FITS_HDU']}")
        if tiff and name.rpartition("/")[2] in DERIVED:
            continue
        if grib and "GRIB_shortName" not in arr.attrs:  # (coordinates from the keys)
            continue
        if "HDFEOS_Projection" in arr.attrs and "HDFEOS_XDim" not in arr.attrs:
            continue  # (an HDF-EOS2 grid's XDim / YDim, computed from its StructMetadata)
        try:
            got = arr[...]
        except Exception as e:  # noqa: BLE001 - the cube cannot read it
            got = e
        try:
            expected = library_read(path, name)
        except Exception as e:  # noqa: BLE001 - any library error
            # the library cannot decode it (a block's bytes are damaged): the cube must not
            # produce values either, and must read some of the array
            if not isinstance(got, Exception):
                raise AssertionError(f"{path}: invented: {name} reads through the cube, but "
                                     f"the library cannot read it ({type(e).__name__}: {e})"
                                     ) from None
            assert _some_chunk_reads(arr), (
                f"{path}: written-unreadable: no stored chunk of {name} reads through the "
                f"cube ({type(got).__name__}: {got}), nor can the library read it "
                f"({type(e).__name__}: {e}), and it was written with exit 0")
            outcome = "unreadable-consistent"
            continue
        assert not isinstance(got, Exception), (
            f"{path}: written-unreadable: {name} reads through the library but not through "
            f"the cube ({type(got).__name__}: {got}), written with exit 0")
        assert same(got, expected), f"{path}: wrong: {name} reads differently through the cube"
    noted = {p.loc.variable for p in report.problems if p.loc.variable}
    missing = sorted(set(library_arrays(path)) - names - noted)
    assert not missing, (f"{path}: missing: the library reads {missing}, the cube lacks "
                         "them, and no note says why (exit 0)")
    return outcome


def _some_chunk_reads(arr) -> bool:
    """Whether any stored chunk of a cube's array reads (its chunks one at a time)."""
    import itertools

    keys = [k for k in _stored_keys(arr)] or None
    grid = [range(-(-n // c)) for n, c in zip(arr.shape, arr.chunks)]
    for index in itertools.product(*grid):
        key = "c/" + "/".join(map(str, index)) if index else "c"
        if keys is not None and key not in keys:
            continue
        try:
            arr[tuple(slice(i * c, (i + 1) * c) for i, c in zip(index, arr.chunks))]
            return True
        except Exception:  # noqa: BLE001
            continue
    return False


def _stored_keys(arr) -> list[str]:
    """The chunk keys of the cube's array that hold a reference (its store's listing)."""
    from zarr.core.sync import sync

    async def keys():
        return [k async for k in arr.store.list_prefix(arr.path + "/c")]

    try:
        return [k[len(arr.path) + 1:] for k in sync(keys())]
    except Exception:  # noqa: BLE001 - a store that cannot list: every chunk
        return []


def library_arrays(path: Path) -> list[str]:
    """The arrays of the new formats the library reads (the cube's names for them; a FITS
    image as `hdu<k>`, its HDU's index, the cube's `FITS_HDU`; an HDF4 SDS by its name):
    what a written cube must hold. The older formats (HDF5, netCDF, TIFF) are not listed."""
    if Path(path).is_dir():
        try:
            node = zarr.open(str(path), mode="r", zarr_format=2)
        except Exception:  # noqa: BLE001 - zarr-python cannot open the store
            return []
        arrays = [("data", node)] if isinstance(node, zarr.Array) else list(_all_arrays(node))
        return [n for n, a in arrays if _reads(lambda a=a: a[...])]
    head = _head(path)
    if head == HDF4_MAGIC:
        return [name for name, ok in _hdf4_listing(path) if ok]
    if head == b"SIMP":
        from astropy.io import fits

        try:
            with fits.open(path) as hdul:
                return [f"hdu{k}" for k, h in enumerate(hdul)
                        if isinstance(h, (fits.PrimaryHDU, fits.ImageHDU, fits.CompImageHDU))
                        and _reads(lambda h=h: h.data) and h.data is not None and h.data.size]
        except Exception:  # noqa: BLE001 - astropy cannot open it: nothing it reads
            return []
    if head == b"GRIB":
        try:
            named = _grib_named(_grib_groups(path))
        except Exception:  # noqa: BLE001 - ecCodes cannot walk it
            return []
        return [n for n, found in named.items()
                if not any(isinstance(v, Exception) for _, v, _ in found)]
    return []


def _all_arrays(group, prefix=""):
    """A zarr group's arrays, its groups' too; none of a group zarr-python cannot list."""
    try:
        members = list(group.members())
    except Exception:  # noqa: BLE001
        return
    for n, m in members:
        if isinstance(m, zarr.Group):
            yield from _all_arrays(m, f"{prefix}{n}/")
        else:
            yield f"{prefix}{n}", m


def _reads(read) -> bool:
    try:
        read()
        return True
    except Exception:  # noqa: BLE001
        return False


# -- HDF4: pyhdf in a child process ---------------------------------------------------------
# pyhdf (the HDF4 C library) can crash on a damaged file: its reads run in a child process;
# a read that crashes counts as one the library cannot do.

HDF4_READ = """
import json, sys
import numpy as np
from pyhdf.SD import SD
from virtualize.formats.hdf4 import read_hdf4_region
out, listing = {}, []
for name in sys.argv[3:]:
    try:
        out[name] = read_hdf4_region(sys.argv[1], name)
    except Exception:
        pass
if sys.argv[3:] == ["--list"]:
    sd = SD(sys.argv[1])
    seen = set()
    for i in range(sd.info()[0]):
        v = sd.select(i)
        info = v.info()
        key = (v.ref(), info[0], info[1], str(info[2]), info[3])
        try:
            v.get()
            ok = key not in seen
        except Exception:
            ok = False
        seen.add(key)
        listing.append([info[0], ok])
    out["--list"] = np.frombuffer(json.dumps(listing).encode(), np.uint8)
np.savez(sys.argv[2], **out)
"""
_hdf4_cache: dict = {}
_JUDGED: Path | None = None  # the cube `judge` writes now (its arrays: read in one child)


def _hdf4_child(path, names) -> dict | None:
    import os
    import subprocess
    import sys

    out = f"{path}.npz"
    proc = subprocess.run([sys.executable, "-c", HDF4_READ, str(path), out, *names],
                          capture_output=True, timeout=600)
    if proc.returncode:
        return None
    try:
        with np.load(out) as z:
            return {k: z[k] for k in z.files}
    finally:
        os.unlink(out)


def pyhdf_read(path, name: str) -> np.ndarray:
    """`name` (the cube's name) as pyhdf reads it, in a child process (raises when it
    cannot or crashes): every array of the cube judged now in one child (it lies next to
    the file), one child per array when that one crashes."""
    import os

    st = os.stat(path)
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _hdf4_cache:
        _hdf4_cache.clear()
        cube = _JUDGED
        names = [n for n, _ in cube_arrays(virtualize.open(cube))] if cube is not None and \
            cube.exists() else [name]
        _hdf4_cache[key] = _hdf4_child(path, names) or {}
    got = _hdf4_cache[key]
    if name not in got:
        one = _hdf4_child(path, [name]) or {}
        if name not in one:
            raise RuntimeError(f"pyhdf cannot read {name}")
        return one[name]
    return got[name]


def _hdf4_listing(path) -> list[tuple[str, bool]]:
    """Every SDS pyhdf lists, once (one listed again with the same ref, name, shape and
    type is one dataset), by its name, and whether pyhdf reads it; [] when pyhdf cannot
    list the file."""
    got = _hdf4_child(path, ["--list"])
    if not got or "--list" not in got:
        return []
    import json

    # (by its name: the cube's, or its HDF4_NAME where the cube names it `sds<index>`)
    return [(name, ok) for name, ok in json.loads(got["--list"].tobytes())]
