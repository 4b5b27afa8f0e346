"""GRIB 1 and 2 files as sources: every message one chunk (docs/grib.md).

- `messages.py`: messages found by their own length fields (no library), headers only.
- `scan.py`: each message's keys by ecCodes (headers only; the [grib] extra), messages
  grouped into arrays in virtualize's layout (`--grib-layout virtualize`).
- `layout.py`: cfgrib's layout (the default): cfgrib's datasets, names, squeezed axes,
  `valid_time`, attributes; several datasets as groups.
- The values are ecCodes' (`virtualize.codecs.GribCodec`, the `virtualize.grib` zarr codec;
  `read_grib_region` here for the readers of the sources' own values).
"""

from __future__ import annotations

import importlib.util
import itertools

import numpy as np

from ... import storage
from ...codecs import grib_decode
from ...model import FileInventory
from .._planning import finish
from ..base import Format
from . import layout as _layout
from . import messages as _messages
from . import scan as _scan

LAYOUTS, DEFAULT_LAYOUT = _layout.LAYOUTS, _layout.DEFAULT


def scan_grib(path: str, promote: frozenset[str] = frozenset(),
              layout: str = DEFAULT_LAYOUT) -> FileInventory:
    """Scan one GRIB file. Content problems are returned; a damaged message raises.
    `promote`: the axes (`time`, `number`, `step`, a level's name) that stay axes of
    length 1 where the file holds one value (`promoted`). `layout`: "cfgrib" (cfgrib's
    names, squeezed axes and datasets as groups) or "virtualize" (shortName, `time`
    always an axis, one group)."""
    if layout not in LAYOUTS:
        raise ValueError(f"a GRIB layout is one of {', '.join(LAYOUTS)}, not {layout!r}")
    ec = _scan.eccodes()
    if ec is None:
        raise _scan.missing(path)
    st = storage.stat(path)
    local = not storage.is_url(path)
    with storage.open_source(path, st.st_size) as f:
        found, notes = _messages.walk(f, path, st.st_size)
        bytes_read, requests = f.bytes_read, f.requests
    if local:  # (ecCodes reads the headers through a file of its own)
        with open(path, "rb") as raw:
            fields = _scan.fields(ec, path, raw, found, True)
    else:
        with storage.open_source(path, st.st_size) as f:
            fields = _scan.fields(ec, path, f, found, False)
            bytes_read, requests = bytes_read + f.bytes_read, requests + f.requests
    build = _layout.inventory if layout == "cfgrib" else _scan.inventory
    inv = build(path, st, fields, notes, promote)
    inv.bytes_read, inv.requests = bytes_read, requests
    return inv


def read_grib_region(path: str, name: str,
                     region: tuple[tuple[int, int], ...] | None = None) -> np.ndarray:
    """Values of array `name` as ecCodes decodes its messages (NaN where no message is or
    the bit-map says missing); coordinates as the scan computed them. The reader knows no
    layout: the array is the first layout's of that name whose shape the region fits
    (two layouts' arrays of one name are the same messages: both group them by
    parameter, level type and step type)."""
    inv, v = _find(path, name, region)
    region = region if region is not None else tuple((0, n) for n in v.shape)
    sel = tuple(slice(a, b) for a, b in region)
    if v.values is not None:
        return np.asarray(v.values)[sel]
    nlead = len(v.shape) - grid_ndim(v)
    grid = v.shape[nlead:]
    out = np.full(tuple(b - a for a, b in region[:nlead]) + grid, np.nan, dtype=v.dtype)
    refs = v.blocks.refs.reshape(v.blocks.refs.shape[:nlead])
    with storage.open_source(path, inv.size) as f:
        for cell in np.ndindex(*out.shape[:nlead]):
            at = tuple(c + r[0] for c, r in zip(cell, region))
            ref = refs[at]
            if ref["length"]:
                f.seek(int(ref["offset"]))
                values = grib_decode(f.read(int(ref["length"])), int(np.prod(grid)))
                out[cell] = values.reshape(grid)
    return out[(slice(None),) * nlead + sel[nlead:]]


def _find(path: str, name: str, region) -> tuple[FileInventory, object]:
    for layout in LAYOUTS:
        inv = _scanned(path, frozenset(), layout)
        v = inv.variables.get(name)
        if v is None:
            continue
        if region is None or len(region) <= len(v.shape):
            if region is None or all(b <= n for (_, b), n in zip(region, v.shape)):
                return inv, v
            continue
        try:
            inv = _scanned(path, _promoted_for(inv, v, region, layout), layout)
        except ValueError:
            continue
        return inv, inv.variables[name]
    raise KeyError(f"{path}: no GRIB array {name!r}"
                   + (f" of {len(region)} axes" if region is not None else ""))


def promoted(hint) -> frozenset[str]:
    """The axes a scan under `hint` keeps as axes of length 1: those the caller concatenates
    along (`--concat-dim step`: one step per file becomes a step axis the planner joins),
    and `time` for a stack whose axis the planner chooses (cfgrib's layout squeezes it;
    the planner's default axis is `time`, GRIB's reference time, as it always was)."""
    if hint is None:
        return frozenset()
    named = frozenset(hint.dims) | ({hint.concat_dim} if hint.concat_dim else set())
    if not named and not hint.alone and hint.planner in ("concat", "append"):
        return frozenset({"time"})
    return named


def layout_of(hint) -> str:
    """The layout a scan under `hint` arranges the arrays in (ScanHint.layout; cfgrib's
    by default)."""
    return getattr(hint, "layout", None) or DEFAULT_LAYOUT


def _promoted_for(inv: FileInventory, v, region, layout: str) -> frozenset[str]:
    """Which of `v`'s scalar axes a region of more axes than `v` has were promoted in the
    scan it was taken from (the reader knows no hint). Promoted axes have length 1, so a
    region fits only where its entries there are (0, 1); any fitting choice reads the same
    values: a promoted axis holds one value, so whichever of them are axes the cells keep
    their order (number, time, step, level)."""
    group = v.name.rpartition("/")[0]
    scalars = [c for c in v.attrs.get("coordinates", "").split()
               if (w := inv.variables.get(f"{group}/{c}" if group else c)) is not None
               and w.shape == () and c != "valid_time"]
    for combo in itertools.combinations(scalars, len(region) - len(v.shape)):
        w = _scanned(inv.path, frozenset(combo), layout).variables.get(v.name)
        if w is not None and len(w.shape) == len(region) and \
                all(b <= n for (_, b), n in zip(region, w.shape)):
            return frozenset(combo)
    raise ValueError(f"{inv.path}: a region of {len(region)} axes does not fit {v.name} "
                     f"{v.shape}")


_LAST: dict = {}


def _scanned(path: str, promote: frozenset[str] = frozenset(),
             layout: str = DEFAULT_LAYOUT) -> FileInventory:
    """The file's inventory, kept for the next read of the same unchanged file (the decode
    check and inlining read many regions of one file)."""
    st = storage.stat(path)
    key = (str(path), st.st_size, st.st_mtime_ns, st.etag, promote, layout)
    if key not in _LAST:
        if len(_LAST) > 8:
            _LAST.clear()
        _LAST[key] = scan_grib(path, promote, layout)
    return _LAST[key]


def grid_ndim(v) -> int:
    """How many of an array's last axes are its grid's (what one message holds): one for
    `values` (reduced and other grids), else two."""
    return 1 if v.dims[-1].startswith("values") else 2


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError, AttributeError):  # (a module blocked in sys.modules)
        return False


LEAD = 512  # bytes before the first "GRIB" a file may have (a WMO bulletin header)
# what such a header is made of: printable ASCII, NUL, SOH, ETX, tab, LF, CR (not HDF4's
# magic \x0e\x03\x13\x01, nor other binary formats' bytes)
_BULLETIN = bytes([0, 1, 3, 9, 10, 13, *range(0x20, 0x7f)])


class Grib(Format):
    name = "grib"
    title = "GRIB 1 and 2"
    suffixes = (".grib", ".grb", ".grib1", ".grib2", ".grb1", ".grb2")
    inventory_formats = ("grib",)
    # (pyproj before ecCodes, as codecs.load_eccodes imports them: see there why)
    modules = (__name__, *((*(("pyproj",) if _installed("pyproj") else ()), "eccodes")
                           if _installed("eccodes") else ()))

    def sniff(self, head: bytes, f=None) -> bool:
        if head[:4] == _messages.MAGIC and len(head) >= 8 and head[7] in (1, 2):
            return True
        if f is None:
            return False
        # GRIB as the GTS sends it: behind a WMO bulletin header (ASCII, a few dozen
        # bytes), or NUL padding; ecCodes skips those bytes, so does the message walk
        at = f.tell()
        try:
            f.seek(0)
            lead = f.read(LEAD)
        finally:
            f.seek(at)
        k = lead.find(_messages.MAGIC)
        return k > 0 and len(lead) >= k + 8 and lead[k + 7] in (1, 2) and \
            not lead[:k].translate(None, _BULLETIN)

    def scan(self, path: str, hint=None) -> FileInventory:
        return finish(scan_grib(path, promoted(hint), layout_of(hint)), hint)

    def read_region(self, path: str, name: str, region=None):
        return read_grib_region(path, name, region)


FORMAT = Grib()
