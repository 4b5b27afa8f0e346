"""GRIB messages -> arrays, as cfgrib arranges them (docs/grib.md).

Each message's keys are read by ecCodes from its headers (`codes_grib_new_from_file` in
headers-only mode at the offset `messages.walk` found, or, for a remote file, from the
message's bytes): no value is decoded. Messages are grouped into one array per variable
(shortName, paramId), level type (typeOfLevel) and grid (the grid section's bytes); the
array's axes are those cfgrib gives: `number` (ensemble member), `time` (reference time),
`step`, the level (named after typeOfLevel), then the grid's (`latitude`, `longitude`
for regular grids, `y`, `x` for other Ni x Nj grids, `values` for reduced and other
grids). `time` is always an axis (length 1 for one reference time: a stack of forecast
files joins along it); `number`, `step` and the level are axes when the file holds more
than one value, else scalar coordinates. Every field is one chunk (decoded by the
`virtualize.grib` codec: a message of several fields gives each its own, `_fields_of`;
points along columns or in alternating rows are read into (y, x)); a cell no message
fills reads as NaN (cfgrib's fill); a field repeated byte for byte is held once
(`held_once`), two differing ones for one cell are refused.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace

import numpy as np

from ...codec_core import (
    GRIB,
    grib2_in_force,
    grib_codec_config,
    grib_field_message,
    grib_to_yx,
    load_eccodes,
)
from ...model import REF_DTYPE as REF
from ...model import (
    BlockTable,
    Dimension,
    FileInventory,
    Location,
    Problem,
    Variable,
    VirtualizeError,
)
from .._io import missing_library
from .._values import bytes_codec, plain
from . import projection
from .messages import Message

EXTRA = "pip install 'virtualize[grib]'"
EPOCH = dt.datetime(1970, 1, 1)
TIME_UNITS = "seconds since 1970-01-01T00:00:00"
DTYPE = np.dtype("<f8")  # what ecCodes' codes_get_values returns
KEYS = ("shortName", "paramId", "typeOfLevel", "gridType", "cfName", "name", "units",
        "stepType", "dataType", "centre")
# what follows from the parameter (ecCodes' costliest lookups): asked once per parameter
PARAMETER_KEYS = ("cfName", "name", "units", "centre", "cfVarName", "centreDescription")
# read in their own types (cfgrib's attributes, the grid's size and the earth's shape): each
# message's, None where ecCodes does not define them (`number` of a deterministic GRIB2 field)
MESSAGE_KEYS = ("number", "subCentre", "uvRelativeToGrid", "totalNumber", "numberOfDirections",
                "numberOfFrequencies", "NV", "gridDefinitionDescription", "Nx", "Ny",
                "shapeOfTheEarth", "radius", "earthIsOblate", "earthMajorAxis", "earthMinorAxis")
REGULAR = ("regular_ll", "regular_gg")
# attributes of the level axes cfgrib knows best
LEVELS = {"isobaricInhPa": {"units": "hPa", "positive": "down", "stored_direction": "decreasing",
                            "standard_name": "air_pressure", "long_name": "pressure"},
          "isobaricInPa": {"units": "Pa", "positive": "down", "stored_direction": "decreasing",
                           "standard_name": "air_pressure",
                           "long_name": "pressure"},
          "hybrid": {"units": "1", "positive": "down", "long_name": "hybrid level",
                     "standard_name": "atmosphere_hybrid_sigma_pressure_coordinate"},
          "heightAboveGround": {"units": "m", "positive": "up", "standard_name": "height",
                                "long_name": "height above the surface"}}


def eccodes():
    try:
        ec = load_eccodes()  # (after pyproj: codec_core.load_eccodes says why)
    except (ImportError, OSError, RuntimeError):  # (no wheel, or its library will not load)
        return None
    return ec


def missing(path: str) -> VirtualizeError:
    return missing_library(path, "reading GRIB needs ecCodes", EXTRA)


@dataclass
class Field:
    """One message's keys: what groups and places it."""

    message: Message
    keys: dict
    number: int
    time: int  # reference time, seconds since 1970
    step: int  # endStep in minutes
    level: float
    shape: tuple[int, ...]  # the grid's shape (Nj, Ni) or (numberOfPoints,)
    geo: dict = field(default_factory=dict)  # the grid's keys (ecCodes' geography namespace)
    problem: str | None = None  # why its values cannot be a chunk
    damage: str | None = None  # how its headers contradict each other or its bytes
    # the points' order, read into (y, x) by the codec: (jPointsAreConsecutive,
    # alternativeRowScanning) of a 2-D grid
    order: tuple[bool, bool] = (False, False)
    # ecCodes' `latitudes`, `longitudes` of a grid not regular_ll / regular_gg (None: none)
    points: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def codec(self) -> dict:
        """Its `virtualize.grib` codec (one per array: every chunk's must be the same)."""
        config = grib_codec_config(self.message.field, *self.order)
        return {"name": GRIB, **({"configuration": config} if config else {})}


def _get(ec, h, key, kind=None, default=None):
    try:
        if not ec.codes_is_defined(h, key):
            return default
        return ec.codes_get(h, key, kind) if kind else ec.codes_get(h, key)
    except Exception:  # (a key ecCodes defines but cannot compute for this message)
        return default


def _geography(ec, h) -> dict:
    out = {}
    it = ec.codes_keys_iterator_new(h, "geography")
    try:
        while ec.codes_keys_iterator_next(it):
            k = ec.codes_keys_iterator_get_name(it)
            try:
                if ec.codes_get_size(h, k) > 1:
                    out[k] = ec.codes_get_array(h, k)
                else:
                    out[k] = ec.codes_get(h, k)
            except Exception:  # (a key that needs the values: left out)
                continue
    finally:
        ec.codes_keys_iterator_delete(it)
    return out


def fields(ec, path: str, f, messages: list[Message], local: bool) -> list[Field]:
    """Every field's keys, read by ecCodes from its message's headers; each field of a
    message of several its own (`_fields_of`)."""
    out = []
    known: dict[tuple, dict] = {}
    grids: dict[tuple, tuple | None] = {}
    for m in messages:
        where = m.where
        if m.fields > 1:
            out += _fields_of(ec, path, f, m, known)
            continue
        try:
            if local:
                f.seek(m.offset)
                h = ec.codes_grib_new_from_file(f, headers_only=True)
            elif m.edition == 2:  # (its keys are all in sections 1-5: no data read)
                h = ec.codes_new_from_message(m.head + _section5(f, m), partial=True)
            else:
                f.seek(m.offset)
                h = ec.codes_new_from_message(f.read(m.length))
        except Exception as e:
            raise _unreadable(path, where, e) from None
        if h is None:
            raise VirtualizeError([Problem(Location(path), "corrupt",
                                           f"{where}: ecCodes finds no message there")])
        try:
            out.append(_field(ec, h, m, path, where, local, known))
            out[-1].points = _points(ec, h, out[-1], grids)
        finally:
            ec.codes_release(h)
    return out


def _section5(f, m: Message) -> bytes:
    """A GRIB2 message's first data representation section (what its head lacks)."""
    p, n = next(((p, n) for no, p, n, _ in m.sections if no == 5), (0, 0))
    f.seek(m.offset + p)
    return f.read(n) if n else b""


def _unreadable(path: str, where: str, e: Exception) -> VirtualizeError:
    return VirtualizeError([Problem(Location(path), "corrupt",
                                    f"{where}: ecCodes cannot read its headers ({e})")],
                           f"{path}: not a valid GRIB file")


def _fields_of(ec, path: str, f, m: Message, known: dict) -> list[Field]:
    """The fields of a GRIB2 message of several (NCEP packs u and v of a level in one),
    as ecCodes' multi-field support iterates them: field k's keys read from the headers
    of the message ecCodes would build of the sections in force for it (section 0 and
    sections 1-5: `codecs.grib2_in_force`, what `grib_field_message` builds and the codec
    decodes), not its data."""
    out = []
    f.seek(m.offset)
    s0 = f.read(16)
    number = {p: (no, indicator) for no, p, _, indicator in m.sections}
    for k, (sections, why) in enumerate(grib2_in_force(m.sections)):
        got, bitmap, bits, data = {}, 255, None, 0
        for p, n in sections:
            no, indicator = number[p]
            if no <= 5:
                f.seek(m.offset + p)
                got[no] = f.read(n)
            elif no == 6:
                bitmap, bits = indicator, (n - 6) * 8 if indicator == 0 else None
            else:
                data = n - 5
        fm = replace(m, field=k, grid=got.get(3, b""), bitmap=bitmap, bitmap_bits=bits,
                     data_bytes=data)
        head = [got[no] for no in sorted(got)]
        try:
            h = ec.codes_new_from_message(s0 + b"".join(head), partial=True)
        except Exception as e:
            raise _unreadable(path, fm.where, e) from None
        try:
            one = _field(ec, h, fm, path, fm.where, False, known)
        finally:
            ec.codes_release(h)
        if why:
            one.problem = why
        out.append(one)
    return out


def held_once(path: str, f, fs: list[Field]) -> tuple[list[Field], list[Problem]]:
    """`fs` without the fields that repeat an earlier one byte for byte (a message written
    twice): the cube holds each once, with a note naming them. Fields for one cell that
    differ stay, and are refused as duplicates (`duplicate-message`). Only fields for
    the same cell are compared, by reading their bytes from the open file `f`."""
    cells: dict[tuple, list[int]] = {}
    for i, x in enumerate(fs):
        cells.setdefault((tuple(sorted(x.keys.items(), key=lambda kv: kv[0])), x.message.grid,
                          x.shape, x.order, x.number, x.time, x.step, x.level), []).append(i)
    dropped: list[tuple[Field, Field]] = []
    for group in (g for g in cells.values() if len(g) > 1):
        seen: dict[bytes, Field] = {}
        for i in group:
            data = _field_bytes(f, fs[i].message)
            if data in seen:
                dropped.append((fs[i], seen[data]))
            else:
                seen[data] = fs[i]
    if not dropped:
        return fs, []
    gone = {id(x) for x, _ in dropped}
    note = Problem(Location(path), "duplicate-held-once", (
        f"{len(dropped)} field(s) repeat an earlier one byte for byte, held once: "
        + "; ".join(f"{x.message.where} is {y.message.where}" for x, y in dropped)),
        fatal=False)
    return [x for x in fs if id(x) not in gone], [note]


def _field_bytes(f, m: Message) -> bytes:
    f.seek(m.offset)
    data = f.read(m.length)
    return grib_field_message(data, m.field, strict=False) if m.fields > 1 else data


def refused(path: str, name: str, fs: list[Field]) -> Problem | None:
    """Why the array `name` of the fields `fs` cannot be referenced, naming every field
    that keeps it out (by message, field and byte offset), or None. A field whose
    values cannot be a chunk keeps it out, and so do fields decoded otherwise than the
    first (another field of their message, another scanning order): a chunk's codec is
    its array's."""
    bad = [(f, f.problem) for f in fs if f.problem]
    if not bad:
        first = fs[0]
        bad = [(f, f"decoded as {_decoding(f)}, the array's first field ({first.message.where}) "
                   f"as {_decoding(first)}: one codec reads all of an array's chunks")
               for f in fs if f.codec != first.codec]
    if not bad:
        return None
    reasons: dict[str, list[str]] = {}
    for f, why in bad:
        reasons.setdefault(why, []).append(f.message.where)
    return Problem(Location(path, name), "unsupported-grib", (
        f"{len(bad)} of its {len(fs)} field(s) cannot be chunks: "
        + "; ".join(f"{', '.join(where)}: {why}" for why, where in reasons.items())
        + f". Every one of the {len(fs)} field(s) of {name} is left out"))


def _decoding(f: Field) -> str:
    columns, alternate = f.order
    return ", ".join([f"field {f.message.field} of its message"]
                     + (["points along columns"] if columns else [])
                     + (["alternating rows"] if alternate else []))


def _field(ec, h, m: Message, path: str, where: str, local: bool, known: dict) -> Field:
    if local and (_get(ec, h, "offset", int) != m.offset or
                  _get(ec, h, "totalLength", int) != m.length):
        raise VirtualizeError([Problem(Location(path), "corrupt", (
            f"{where}: ecCodes reads a message of {_get(ec, h, 'totalLength', int)} bytes at "
            f"byte offset {_get(ec, h, 'offset', int)}, its length fields say {m.length} bytes "
            f"at {m.offset}"))])
    keys = {k: _get(ec, h, k, str) for k in KEYS if k not in PARAMETER_KEYS}
    keys["paramId"] = _get(ec, h, "paramId", int, 0)
    # (and the centre, whose local tables may name a parameter otherwise: GRIB2 section 1
    # octets 6-7, GRIB1 section 1 octet 5)
    param = (keys["paramId"], keys["shortName"], m.edition,
             m.head[21:23] if m.edition == 2 else m.head[12:13])
    if param not in known:
        known[param] = {k: _get(ec, h, k, str) for k in PARAMETER_KEYS}
    keys.update(known[param])
    keys.update((k, _get(ec, h, k)) for k in MESSAGE_KEYS)
    date, time = _get(ec, h, "dataDate", int, 0), _get(ec, h, "dataTime", int, 0)
    try:
        ref = dt.datetime(date // 10000, date // 100 % 100, date % 100, time // 100, time % 100)
    except ValueError:
        raise VirtualizeError([Problem(Location(path), "corrupt", (
            f"{where}: dataDate {date}, dataTime {time} is no date"))]) from None
    if ec.codes_is_defined(h, "stepUnits"):
        try:
            ec.codes_set(h, "stepUnits", "m")
            step = _get(ec, h, "endStep", int)
        except Exception:  # (a step ecCodes cannot give in minutes)
            step = None
    else:  # no forecast time in its template (a satellite image, 4.31): absent, step 0
        step = 0
    geo = _geography(ec, h)
    gt = keys["gridType"] or ""
    ni, nj = _get(ec, h, "Ni", int), _get(ec, h, "Nj", int)
    points = _get(ec, h, "numberOfPoints", int, 0)
    problem, order = None, (False, False)
    rows = gt not in ("reduced_gg", "reduced_ll", "sh") and not gt.startswith("reduced") and \
        ni and nj and 0 < ni < MISSING and 0 < nj < MISSING
    damage = _damage(ec, h, m, gt, points, (nj, ni) if rows else None)
    if rows and ni * nj == points:
        shape = (nj, ni)
        # (points along columns, or every second row the other way: the codec reads
        # them into (y, x), codecs.grib_to_yx)
        order = (bool(_get(ec, h, "jPointsAreConsecutive", int, 0)),
                 bool(_get(ec, h, "alternativeRowScanning", int, 0)))
        odd = [k for k in SCANNING_OTHER if _get(ec, h, k, int, 0)]
        if odd:  # (rows offset, or of other lengths: code table 3.4's bits 5-8)
            problem = (f"its scanning mode sets {', '.join(odd)} (rows offset or of other "
                       "lengths): no (y, x) reading of ecCodes' values is proven")
    else:
        shape = (points,)
    if gt == "sh" or not points:
        problem = f"a {gt or 'gridless'} field (no grid points)"
    if step is None:
        problem = "its step is not a whole number of minutes"
        step = 0
    if m.bitmap == 254:
        problem = "its bit-map is the previous message's (bit-map indicator 254)"
    return Field(m, keys, _get(ec, h, "number", int, 0) or 0,
                 int((ref - EPOCH).total_seconds()), int(step),
                 float(_get(ec, h, "level", float, 0.0)), shape, geo, problem, damage,
                 order)


SCANNING_OTHER = ("scanningMode4", "scanningMode5", "scanningMode6", "scanningMode7",
                  "scanningMode8")  # (GRIB1: reserved; GRIB2: offset rows, Nj x Ni rows)
MISSING = 0x7FFFFFFF  # (ecCodes' missing Ni / Nj of reduced grids read as ints past this)
SIMPLE_PACKINGS = ("grid_simple", "grid_simple_matrix")


def _damage(ec, h, m: Message, gt: str, points: int, rows: tuple[int, int] | None
            ) -> str | None:
    """How the message's size fields contradict each other or what its bytes can hold, or
    None: every header value that sizes its values is checked before a cube is written
    (an edited Ni gave an array whose every read failed; numberOfDataPoints = 2**32 - 1 one
    whose every read needed 32 GiB, where ecCodes decodes 51,200 values)."""
    if rows is not None and rows[0] * rows[1] != points:
        return (f"its grid is Ni x Nj = {rows[1]} x {rows[0]} = {rows[0] * rows[1]} points, but "
                f"it says it holds {points}")
    coded = _get(ec, h, "numberOfCodedValues", int)
    if coded is None or coded < 0:
        return None
    if m.bitmap == 255 and coded != points:  # no bit-map: a value per point
        return (f"it codes {coded} values for {points} points and has no bit-map (ecCodes "
                "cannot decode it)")
    if m.bitmap == 0 and m.bitmap_bits is not None and m.bitmap_bits < points:
        return f"its bit-map covers {m.bitmap_bits} points, not its {points}"
    if m.bitmap == 0 and coded > points:
        return f"it codes {coded} values for {points} points"
    bpv = _get(ec, h, "bitsPerValue", int)
    packing = _get(ec, h, "packingType", str)
    if packing in SIMPLE_PACKINGS and bpv is not None and 0 <= bpv <= 64 and \
            -(-coded * bpv // 8) > m.data_bytes:
        return (f"it codes {coded} values of {bpv} bits in {m.data_bytes} bytes of packed "
                "data (ecCodes cannot decode it)")
    return None


def _points(ec, h, f: Field, grids: dict) -> tuple[np.ndarray, np.ndarray] | None:
    """ecCodes' latitude and longitude of every point (its grid iterator: the `latitudes`,
    `longitudes` keys, as cfgrib takes them) of a grid whose coordinates are not its
    keys' arithmetic (regular_ll, regular_gg: `grid_coords`), once per grid."""
    if f.problem or f.keys["gridType"] in REGULAR + ("sh",):
        return None
    key = (f.message.grid, f.shape)
    if key not in grids:
        try:
            lat = np.asarray(ec.codes_get_array(h, "latitudes"), dtype=np.float64)
            lon = np.asarray(ec.codes_get_array(h, "longitudes"), dtype=np.float64)
        except Exception:  # (a grid ecCodes' iterator does not know, or finds inconsistent)
            grids[key] = None
        else:
            n = int(np.prod(f.shape))
            if lat.size != n or lon.size != n:
                grids[key] = None
            elif len(f.shape) == 2 and f.order[0]:  # (points along columns: as the values;
                # ecCodes' coordinates ignore alternating rows, so only the columns)
                grids[key] = (grib_to_yx(lat, f.shape, True), grib_to_yx(lon, f.shape, True))
            else:
                grids[key] = (lat.reshape(f.shape), lon.reshape(f.shape))
    return grids[key]


# -- arrays ---------------------------------------------------------------------------------

@dataclass
class Array:
    name: str
    fields: list[Field]
    axes: dict[str, np.ndarray]  # key -> sorted distinct values (number, time, step, level)
    level_name: str


def _array_name(f: Field) -> str:
    short = f.keys["shortName"]
    return short if short and short != "unknown" else f"p{f.keys['paramId']}"


def arrays(fs: list[Field]) -> list[Array]:
    """Messages grouped per variable, level type, step type (instant, accum, avg, ...: as
    cfgrib's datasets) and grid, named by shortName; a name several groups share gets
    `_<typeOfLevel>` where their level types differ, `_<stepType>` where their step types
    do, then `_<k>`."""
    groups: dict[tuple, list[Field]] = {}
    for f in fs:
        key = (f.keys["shortName"], f.keys["paramId"], f.keys["typeOfLevel"],
               f.keys["stepType"], f.message.grid, f.shape)
        groups.setdefault(key, []).append(f)
    names = [_array_name(g[0]) for g in groups.values()]
    shared: dict[str, list[tuple]] = {}
    for key, name in zip(groups, names):
        shared.setdefault(name, []).append(key)
    out, taken = [], set()
    for (key, group), name in zip(groups.items(), names):
        others = shared[name]
        if len(others) > 1:
            for i in (2, 3):  # (typeOfLevel, stepType)
                if len({k[i] for k in others}) > 1:
                    name = f"{name}_{key[i]}"
        base, k = name, 1
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        taken.add(name)
        axes = {a: np.unique(np.array([getattr(f, a) for f in group]))
                for a in ("number", "time", "step", "level")}
        level = group[0].keys["typeOfLevel"] or "level"
        if LEVELS.get(level, {}).get("stored_direction") == "decreasing":
            axes["level"] = axes["level"][::-1]  # (cfgrib's order: 1000 hPa first)
        out.append(Array(name, group, axes, level))
    return out


def _shown(key: str, value) -> str:
    if key == "time":
        return (EPOCH + dt.timedelta(seconds=int(value))).isoformat()
    return f"{value} min" if key == "step" else str(value)


def step_values(minutes: np.ndarray) -> tuple[np.ndarray, str]:
    if (minutes % 60 == 0).all():
        return (minutes // 60).astype(np.int64), "hours"
    return minutes.astype(np.int64), "minutes"


def grid_coords(f: Field, path: str, name: str, notes: list[Problem]
                 ) -> tuple[tuple[str, ...], list[tuple[str, tuple[str, ...], np.ndarray, dict]]]:
    """The grid's dimension names and coordinate variables (name, dims, values, attrs)."""
    g, gt = f.geo, f.keys["gridType"]
    lat_attrs = {"units": "degrees_north", "standard_name": "latitude", "long_name": "latitude"}
    lon_attrs = {"units": "degrees_east", "standard_name": "longitude", "long_name": "longitude"}
    if gt in REGULAR and len(f.shape) == 2:
        nj, ni = f.shape
        la1, la2 = g.get("latitudeOfFirstGridPointInDegrees"), g.get("latitudeOfLastGridPointInDegrees")
        if gt == "regular_ll":
            dj = g.get("jDirectionIncrementInDegrees")
            lats = None if dj is None or la1 is None or la2 is None or dj <= 0 else \
                _stepped(la1, dj if g.get("jScansPositively") else -dj, nj, la2)
        else:
            lats = _gaussian(f, g)
            if lats is not None and la1 is not None:
                lats = lats[::-1] if g.get("jScansPositively") else lats
                k = int(np.argmin(np.abs(lats - la1)))
                lats = lats[k:k + nj] if abs(lats[k] - la1) < 1e-3 else lats[:0]
                lats = lats if len(lats) == nj else None
            else:
                lats = None
        di, lo1 = g.get("iDirectionIncrementInDegrees"), g.get("longitudeOfFirstGridPointInDegrees")
        lo2 = g.get("longitudeOfLastGridPointInDegrees")
        lons = None if di is None or lo1 is None or lo2 is None or di <= 0 else \
            _longitudes(lo1, lo2, di, ni, bool(g.get("iScansNegatively")))
        # the increments must lead from the first point to the last, to the keys' precision
        # (GRIB1: millidegrees); else ecCodes computes other coordinates than the keys
        # say: none are given
        # (ecCodes sets the last latitude to la2 whatever its steps reach; its longitude
        # step is the span over Ni - 1, which must be the coded one to its precision)
        if lats is not None and (la2 is None or abs(
                (la1 + (nj - 1) * (lats[1] - lats[0]) if gt == "regular_ll" and nj > 1
                 else lats[-1]) - la2) > 1.5e-3):
            lats = None
        if lons is not None and ni > 1 and abs(abs(lons[1] - lons[0]) - di) > 1e-3:
            lons = None
        if lats is not None and lons is not None:
            return ("latitude", "longitude"), [("latitude", ("latitude",), lats, lat_attrs),
                                               ("longitude", ("longitude",), lons, lon_attrs)]
        notes.append(Problem(Location(path, name), "grib-grid",
                             f"a {gt} grid whose increments do not lead from its first point to its "
                             "last: no latitude / longitude (its definition is in the array's "
                             "attributes)", fatal=False))
        return ("y", "x"), []
    if f.points is not None:  # (ecCodes' grid iterator: every other grid cfgrib reads)
        lat, lon = f.points
        dims = ("y", "x") if len(f.shape) == 2 else ("values",)
        out = [("latitude", dims, lat, lat_attrs), ("longitude", dims, lon, lon_attrs)]
        if len(f.shape) == 2:  # (x / y and the grid mapping, where the projection is known)
            out += projection.coordinates(f, f.shape, lambda ni, nj: _rotated_axes(g, ni, nj)) \
                or []
        return dims, out
    if len(f.shape) == 2:
        notes.append(Problem(Location(path, name), "grib-grid", (
            f"a {gt} grid ecCodes gives no latitudes / longitudes of: none (its definition is "
            "in the array's attributes)"), fatal=False))
        return ("y", "x"), []
    if gt not in ("unstructured_grid",):
        notes.append(Problem(Location(path, name), "grib-grid", (
            f"a {gt} grid: no latitude / longitude coordinates (its definition is in the "
            "array's attributes)"), fatal=False))
    return ("values",), []


def _rotated_axes(g: dict, ni: int, nj: int):
    """A rotated lat/lon grid's rotated longitudes and latitudes, as ecCodes steps them
    (regular_ll's arithmetic in the rotated frame); None where its keys lack them."""
    la1, la2 = g.get("latitudeOfFirstGridPointInDegrees"), g.get("latitudeOfLastGridPointInDegrees")
    lo1, lo2 = g.get("longitudeOfFirstGridPointInDegrees"), g.get("longitudeOfLastGridPointInDegrees")
    di, dj = g.get("iDirectionIncrementInDegrees"), g.get("jDirectionIncrementInDegrees")
    if None in (la1, la2, lo1, lo2, di, dj) or di <= 0 or dj <= 0:
        return None, None
    return (_longitudes(lo1, lo2, di, ni, bool(g.get("iScansNegatively"))),
            _stepped(la1, dj if g.get("jScansPositively") else -dj, nj, la2))


def grid_mapping(coords: list[tuple]) -> str | None:
    """The name of the grid mapping variable among a grid's coordinates (None: none)."""
    return next((c[0] for c in coords if "grid_mapping_name" in c[3]), None)


def _stepped(first: float, step: float, n: int, last: float) -> np.ndarray:
    """ecCodes' regular coordinates (geo_iterator Regular / Latlon): `step` added point after
    point (its rounding, not `first + k * step`'s), the last point set to `last`."""
    out = np.add.accumulate(np.concatenate([[first], np.full(n - 1, step)]))
    out[-1] = last
    return out


def _longitudes(lo1: float, lo2: float, di: float, ni: int, negative: bool) -> np.ndarray:
    """ecCodes' longitudes of a regular row: the step from the first and last longitude
    (not the coded increment; across 0/360 when the last is "before" the first), a first
    longitude past 360 at the end taken 360 lower (GRIB2 codes -10 as 350), the last point
    the last longitude normalised to 0..360 (ecCodes' Regular::init)."""
    step = di
    if ni > 1:
        span = (lo1 - lo2 if lo1 > lo2 else lo1 + 360.0 - lo2) if negative else \
            (lo2 - lo1 if lo2 > lo1 else lo2 + 360.0 - lo1)
        step = span / (ni - 1)
    if negative:
        step = -step
    elif lo1 + (ni - 2) * step > 360:
        lo1 -= 360.0
    if lo2 > 0:
        while lo2 > 360:
            lo2 -= 360.0
    return _stepped(lo1, step, ni, lo2)


def _gaussian(f: Field, g: dict):
    n = g.get("N")
    ec = eccodes()
    if not n or ec is None:
        return None
    return np.array(list(ec.codes_get_gaussian_latitudes(int(n))), dtype=np.float64)


def _grid_attrs(f: Field) -> dict:
    return {f"GRIB_{k}": plain_attr(v) for k, v in f.geo.items() if k != "pl"}


class Coords:
    """Coordinate variables by name; a name asked with other values is `<name>_<k>`."""

    def __init__(self) -> None:
        self.vars: dict[str, Variable] = {}

    def add(self, name: str, dims: tuple[str, ...], values: np.ndarray, attrs: dict,
            rename: dict[str, str]) -> str:
        values = np.asarray(values)
        dims = tuple(rename.get(d, d) for d in dims)
        base, k = name, 1
        while name in self.vars:
            v = self.vars[name]
            if v.dims == dims and v.values.shape == values.shape and \
                    v.values.dtype == values.dtype and np.array_equal(v.values, values) \
                    and v.attrs == attrs:
                return name
            name, k = f"{base}_{k}", k + 1
        self.vars[name] = Variable(name=name, dtype=values.dtype, shape=values.shape,
                                   dims=dims, attrs=attrs, fill_value=None,
                                   codecs=[bytes_codec(values.dtype)], blocks=None,
                                   values=values, is_coordinate=dims == (name,))
        return name


def inventory(path: str, st, fs: list[Field], notes: list[Problem],
              promote: frozenset[str] = frozenset()) -> FileInventory:
    """The file's arrays in virtualize's layout (`--grib-layout virtualize`: layout.py
    holds cfgrib's, the default); `promote`: the axes (`number`, `step`, a level's name)
    kept as axes of length 1 where the file holds one value (a stack joins along them),
    not scalar coordinates."""
    problems = list(notes)
    coords = Coords()
    variables: dict[str, Variable] = {}
    dimensions: dict[str, Dimension] = {}
    for a in arrays(fs):
        v = _variable(path, a, coords, problems, promote)
        if v is not None:
            variables[a.name] = v
    for c in coords.vars.values():
        variables.setdefault(c.name, c)
    for v in variables.values():
        for d, n in zip(v.dims, v.shape):
            dimensions[d] = Dimension(d, n)
    inv = FileInventory(path, "grib", st.st_size, st.st_mtime_ns, {"": {
        "GRIB_edition": sorted({f.message.edition for f in fs}),
        "GRIB_centre": fs[0].keys["centre"], "Conventions": "CF-1.7"}},
        dimensions, variables, problems)
    inv.etag = st.etag
    return inv


AXES = ("number", "time", "step", "level")


def place(path: str, a: Array, name: str, keys: list[str], problems: list[Problem]
          ) -> tuple[tuple[int, ...], np.ndarray] | None:
    """Array `a`'s messages into the cells of its axes `keys` (of AXES, in order): the
    axes' lengths and the references (a hole is a note; two messages for one cell are
    refused, None)."""
    f0 = a.fields[0]
    lead = [a.axes[k] for k in keys]
    where = {k: {x: i for i, x in enumerate(a.axes[k].tolist())} for k in keys}
    index = [[where[k][getattr(f, k)] for f in a.fields] for k in keys]
    grid = tuple(len(v) for v in lead)
    refs = np.zeros(grid + (1,) * len(f0.shape), dtype=REF)
    flat = refs.reshape(-1)
    cell = np.ravel_multi_index(index, grid) if grid else np.zeros(len(a.fields), dtype=np.int64)
    order = np.argsort(cell, kind="stable")
    dup = np.nonzero(np.diff(cell[order]) == 0)[0]
    if dup.size:
        f1, f2 = a.fields[order[dup[0]]], a.fields[order[dup[0] + 1]]
        block = np.unravel_index(cell[order[dup[0]]], grid) if grid else ()
        problems.append(Problem(Location(path, name, block=tuple(block) + (0,) * len(f0.shape)),
                                "duplicate-message", (
            f"messages {f1.message.index} and {f2.message.index} (at byte offsets "
            f"{f1.message.offset} and {f2.message.offset}) are both {name} at "
            + ", ".join(f"{k} {_shown(k, getattr(f1, k))}"
                        for k in AXES)
            + f" ({dup.size} such pair(s)): which one the cube holds cannot be chosen")))
        return None
    flat["offset"][cell] = [f.message.offset for f in a.fields]
    flat["length"][cell] = [f.message.length for f in a.fields]
    holes = int(np.prod(grid)) - len(a.fields) if grid else 0
    if holes:
        first = np.unravel_index(int(np.nonzero(flat["length"] == 0)[0][0]), grid)
        problems.append(Problem(Location(path, name, block=tuple(first) + (0,) * len(f0.shape)),
                                "grib-hole", (
            f"{holes} of the {int(np.prod(grid))} cells of {name}'s axes have no message: "
            "they read as NaN (as cfgrib fills them)"), fatal=False))
    return grid, refs


def _variable(path: str, a: Array, coords: Coords, problems: list[Problem],
              promote: frozenset[str] = frozenset()) -> Variable | None:
    f0 = a.fields[0]
    if rejected(path, a, a.name, problems):
        return None
    names: dict[str, str] = {}  # axis key -> its coordinate variable's name
    scalars: list[str] = []
    lead_dims: list[str] = []
    steps, step_units = step_values(a.axes["step"])
    level_attrs = dict(LEVELS.get(a.level_name, {"long_name": a.level_name}))
    specs = {
        "number": (a.axes["number"].astype(np.int64),
                   {"long_name": "ensemble member numerical id", "units": "1",
                    "standard_name": "realization"}),
        "time": (a.axes["time"].astype(np.int64),
                 {"long_name": "initial time of forecast", "standard_name": "forecast_reference_time",
                  "units": TIME_UNITS, "calendar": "proleptic_gregorian"}),
        "step": (steps, {"long_name": "time since forecast_reference_time",
                         "standard_name": "forecast_period", "units": step_units,
                         "dtype": "timedelta64[ns]"}),  # (xarray decodes a timedelta by it)
        "level": (a.axes["level"].astype(np.float64), level_attrs),
    }
    for key, (values, attrs) in specs.items():
        cname = a.level_name if key == "level" else key
        if key == "time" or len(values) > 1 or cname in promote:
            names[key] = coords.add(cname, (cname,), values, attrs, {cname: cname})
            if names[key] != cname:  # (its own dimension name: the coordinate's)
                del coords.vars[names[key]]
                names[key] = coords.add(names[key], (names[key],), values, attrs, {})
            lead_dims.append(names[key])
        else:
            scalars.append(coords.add(cname, (), values.reshape(()), attrs, {}))
    grid_dims, on_grid = grid_coords(f0, path, a.name, problems)
    mapping = grid_mapping(on_grid)
    rename: dict[str, str] = {}
    for cname, dims, values, attrs in on_grid:
        got = coords.add(cname, dims, values, attrs, rename)
        if got != cname and dims == (cname,):
            del coords.vars[got]
            rename[cname] = got
            got = coords.add(got, (got,), values, attrs, rename)
        elif got != cname:
            for d in dims:  # (the grid's own points: a dimension of its own)
                rename.setdefault(d, f"{d}_{a.name}")
            del coords.vars[got]
            got = coords.add(got, dims, values, attrs, rename)
        if dims != (cname,):
            scalars.append(got)
    grid_dims = tuple(rename.get(d, d) for d in grid_dims)
    placed = place(path, a, a.name, [k for k in AXES if k in names], problems)
    if placed is None:
        return None
    grid, refs = placed
    attrs = {"long_name": f0.keys["name"], "units": f0.keys["units"]}
    if f0.keys["cfName"] and f0.keys["cfName"] != "unknown":
        attrs["standard_name"] = f0.keys["cfName"]
    for k in KEYS:
        attrs[f"GRIB_{k}"] = f0.keys[k]
    attrs.update(_grid_attrs(f0))
    if scalars:
        attrs["coordinates"] = " ".join(scalars)
    if mapping is not None:
        attrs["grid_mapping"] = next(s for s in scalars if s.startswith(mapping))
    attrs = {k: v for k, v in attrs.items() if v is not None}
    return array(a.name, f0, grid, refs, tuple(lead_dims) + grid_dims, attrs)


def rejected(path: str, a: Array, name: str, problems: list[Problem]) -> bool:
    """Whether a field of `a` cannot be a chunk (`refused`: every one named), or its
    headers are damaged (the first one named), said in `problems`."""
    refusal = refused(path, name, a.fields)
    if refusal is not None:
        problems.append(refusal)
        return True
    hurt = [f for f in a.fields if f.damage]
    if hurt:
        f = hurt[0]
        problems.append(Problem(Location(path, name), "corrupt", (
            f"{f.message.where}: {f.damage}"
            + (f"; and {len(hurt) - 1} more message(s)" if len(hurt) > 1 else "")
            + f"; --drop {name} virtualizes the rest")))
    return bool(hurt)


def array(name: str, f0: Field, cells: tuple[int, ...], refs: np.ndarray,
          dims: tuple[str, ...], attrs: dict, grid: tuple[int, ...] | None = None) -> Variable:
    """An array of messages: one chunk each (the `virtualize.grib` codec), NaN where none;
    `grid`: the chunk's shape (the message's points: its grid's shape by default)."""
    grid = f0.shape if grid is None else grid
    return Variable(name=name, dtype=DTYPE, shape=cells + grid, dims=dims, attrs=attrs,
                    fill_value=np.float64(np.nan), codecs=[bytes_codec(DTYPE), f0.codec],
                    blocks=BlockTable((1,) * len(cells) + grid, padded=False, refs=refs))


def plain_attr(v):
    """An attribute value as plain Python (a list for an array), None when it has none."""
    try:
        return plain(v.tolist() if isinstance(v, np.ndarray) else v)
    except ValueError:
        return None

