"""GRIB 1 and 2 files as sources: every field one chunk (docs/grib.md).

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
from ...codec_core import grib_decode
from ...model import FileInventory, Location, Problem
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
        found, notes, reader = (None, [], None) if local else _indexed(f, path, st.st_size)
        if found is None:
            found, walked = _messages.walk(f, path, st.st_size)
            notes += walked
        if not local:  # (the keys from the blocks, or the sidecar's ranges, read so far)
            src = reader if reader is not None else f
            fields = _scan.fields(ec, path, src, found, False)
            fields, once = _scan.held_once(path, src, fields)
        bytes_read, requests = f.bytes_read, f.requests
    if local:  # (ecCodes reads the headers through a file of its own)
        with open(path, "rb", buffering=0) as raw:  # (its seeks move the fd ecCodes reads)
            fields = _scan.fields(ec, path, raw, found, True)
            fields, once = _scan.held_once(path, raw, fields)
    notes += once
    build = _layout.inventory if layout == "cfgrib" else _scan.inventory
    inv = build(path, st, fields, notes, promote)
    inv.bytes_read, inv.requests = bytes_read, requests
    return inv


def _indexed(f, path: str, size: int) -> tuple[list | None, list[Problem], object]:
    """The messages a remote file's inventory sidecar (`<path>.idx`, NOAA's) gives, each
    checked against the file (`messages.walk_index`), and the reader holding the ranges
    read; (None, [], None) without a sidecar, (None, [a note], None) when it disagrees:
    the messages are then walked."""
    idx = path + ".idx"
    try:
        n = storage.stat(idx).st_size
        if not 0 < n <= 64 << 20:
            return None, [], None
        text = storage.read_range(idx, 0, n).decode("ascii")
    except Exception:  # noqa: BLE001 - no sidecar (or none readable): walk the messages
        return None, [], None
    offsets = _messages.read_index(text)
    reader = _messages.index_reader(f, size)
    found, why = _messages.walk_index(f, path, size, offsets, reader) if offsets else \
        (None, "it is no wgrib2 inventory (`n:offset:...` lines)")
    if found is None:
        return None, [Problem(Location(path), "grib-index-ignored", (
            f"the inventory sidecar {idx} disagrees with the file ({why}): not used, the "
            "messages found by their length fields"), fatal=False)], None
    return found, [], reader


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
    config = v.codecs[-1].get("configuration", {})  # (the field, the scanning order)
    with storage.open_source(path, inv.size) as f:
        for cell in np.ndindex(*out.shape[:nlead]):
            at = tuple(c + r[0] for c, r in zip(cell, region))
            ref = refs[at]
            if ref["length"]:
                f.seek(int(ref["offset"]))
                values = grib_decode(f.read(int(ref["length"])), int(np.prod(grid)),
                                     config.get("field", 0),
                                     config.get("jPointsAreConsecutive", False),
                                     config.get("alternativeRowScanning", False),
                                     grid if len(grid) == 2 else None)
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


# bytes before the first "GRIB" a file may have: ecCodes skips any (a WMO bulletin header,
# a Fortran record marker, a producer's description); looked for within the first 64 KiB
LEAD = 1 << 16


class Grib(Format):
    name = "grib"
    title = "GRIB 1 and 2"
    suffixes = (".grib", ".grb", ".grib1", ".grib2", ".grb1", ".grb2")
    inventory_formats = ("grib",)
    # (pyproj before ecCodes, as codec_core.load_eccodes imports them: see there why)
    modules = (__name__, *((*(("pyproj",) if _installed("pyproj") else ()), "eccodes")
                           if _installed("eccodes") else ()))

    def sniff(self, head: bytes, f=None) -> bool:
        if head[:4] == _messages.MAGIC and len(head) >= 8 and head[7] in (1, 2):
            return True
        if f is None:
            return False
        # GRIB behind leading bytes (a WMO bulletin header as the GTS sends it, a record
        # marker, a description): ecCodes skips them, so does the message walk. Claimed
        # only where a whole message follows (its length fields lead to its 7777), so no
        # other format's bytes that happen to hold "GRIB" are taken for it, and not where
        # the leading bytes hold a 7777 (a first message whose "GRIB" is damaged: the file
        # would read as one without it)
        at = f.tell()
        try:
            size = storage.file_size(f)
            f.seek(0)
            lead = f.read(LEAD + 8)
            k = lead.find(_messages.MAGIC)
            while 0 < k <= LEAD:
                if _messages.END in lead[:k]:  # (the rest of a message whose start is
                    return False               # damaged: not bytes ecCodes may skip)
                if len(lead) >= k + 8 and lead[k + 7] in (1, 2) and \
                        _messages.is_message(f, k, size):
                    return True
                k = lead.find(_messages.MAGIC, k + 1)
            return False
        finally:
            f.seek(at)

    def scan(self, path: str, hint=None) -> FileInventory:
        return finish(scan_grib(path, promoted(hint), layout_of(hint)), hint)

    def read_region(self, path: str, name: str, region=None):
        return read_grib_region(path, name, region)


FORMAT = Grib()
