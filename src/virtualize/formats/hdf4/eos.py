"""HDF-EOS2: the grids and swaths a file's `StructMetadata.0` (ODL text, continued in
`StructMetadata.1`, ...) describes, mapped onto its SDS (docs/hdf4.md).

HDF-EOS2 writes each grid or swath field as an SDS named after the field whose
dimensions are named `<DimName>:<GridOrSwathName>`. A field of the metadata is matched
to the SDS of its name whose dimensions are exactly those names; it then gets:

- its `DimList` names as dimensions (the `:<name>` suffix dropped, unless another
  structure of the file has a dimension of that name: two grids' `XDim` stay apart);
- `HDFEOS_GRID` / `HDFEOS_SWATH` naming its structure, a grid's definition (`XDim`,
  `YDim`, `UpperLeftPointMtrs`, `LowerRightMtrs`, `Projection`, `ProjParams`,
  `ZoneCode`, `SphereCode`, `GridOrigin`, `PixelRegistration`) as `HDFEOS_<key>`
  attributes;
- a swath data field: CF `coordinates` naming the swath's geolocation fields whose
  dimensions are among its own.

A swath's dimension maps (`SWdefdimmap`: its `DimensionMap` objects, GeoDimension /
DataDimension / Offset / Increment) are applied as the HDF-EOS2 library applies them
when it reads a field (`SWreadfield`: geolocation at its own resolution, never
interpolated) and as GDAL presents them (its GEOLOCATION metadata, PIXEL_OFFSET /
PIXEL_STEP / LINE_OFFSET / LINE_STEP from `SWinqmaps`): every geolocation field stays on
its own dimensions; `apply` records the maps on the fields they relate
(`HDFEOS_DIMENSION_MAP` "geo/data" as `SWinqmaps` lists them, `HDFEOS_DIMENSION_MAP_OFFSET`,
`HDFEOS_DIMENSION_MAP_INCREMENT`; a data field's `HDFEOS_GEOLOCATION` names the
geolocation fields that locate it through them), and `dimension_maps` gives each mapped
geolocation dimension a coordinate of the data indices its elements stand at, by the
map's definition (data index = Offset + Increment * geolocation index; exact integers).

`grid_coordinates` then adds a grid's 1-D `XDim` / `YDim` coordinates (GDij2ll's pixel
positions between its corners: degrees for GCTP_GEO, projection metres otherwise), or a
note saying why there are none (GCTP_SOM, unknown projection, missing corners).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ...model import Location, Problem, Variable
from .._values import bytes_codec

GRID_KEYS = ("XDim", "YDim", "UpperLeftPointMtrs", "LowerRightMtrs", "Projection",
             "ProjParams", "ZoneCode", "SphereCode", "GridOrigin", "PixelRegistration")


@dataclass
class Field:
    name: str
    dims: tuple[str, ...]
    geo: bool = False


@dataclass
class DimMap:
    """One `SWdefdimmap`: data index = offset + increment * geolocation index (a negative
    increment: the geolocation has the finer resolution)."""

    geo: str
    data: str
    offset: int
    increment: int


@dataclass
class Structure:
    kind: str  # "grid" | "swath"
    name: str
    attrs: dict = field(default_factory=dict)
    fields: list[Field] = field(default_factory=list)
    maps: list[DimMap] = field(default_factory=list)
    index_maps: list[tuple[str, str]] = field(default_factory=list)  # (geo, data)


def struct_metadata(gattrs: dict) -> str | None:
    """The concatenated `StructMetadata.N` text, or None."""
    parts = []
    for k in range(100):
        v = gattrs.get(f"StructMetadata.{k}")
        if not isinstance(v, str):
            break
        parts.append(v)
    return "".join(parts).replace("\x00", "") if parts else None


def _value(text: str):
    text = text.strip()
    if text.startswith("(") and text.endswith(")"):
        return [_value(x) for x in _split(text[1:-1])]
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def _split(text: str) -> list[str]:
    out, depth, cur, quoted = [], 0, "", False
    for c in text:
        if c == '"':
            quoted = not quoted
        elif not quoted and c == "(":
            depth += 1
        elif not quoted and c == ")":
            depth -= 1
        if c == "," and not depth and not quoted:
            out.append(cur)
            cur = ""
        else:
            cur += c
    if cur.strip():
        out.append(cur)
    return out


def parse(text: str) -> list[Structure]:
    """The grids and swaths of an ODL `StructMetadata` text (raises ValueError)."""
    structures: list[Structure] = []
    stack: list[str] = []
    cur: Structure | None = None
    obj: dict | None = None
    section = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or "=" not in line:
            continue
        key, _, value = (s.strip() for s in line.partition("="))
        if key == "GROUP":
            stack.append(value)
            if len(stack) == 2 and stack[0] in ("GridStructure", "SwathStructure"):
                cur = Structure("grid" if stack[0] == "GridStructure" else "swath", "")
                structures.append(cur)
            elif len(stack) == 3:
                section = value
        elif key == "END_GROUP":
            if stack:
                stack.pop()
            if len(stack) < 3:
                section = None
            if len(stack) < 2:
                cur = None
        elif key == "OBJECT":
            obj = {}
        elif key == "END_OBJECT":
            if cur is not None and obj is not None and section in ("DimensionMap",
                                                                   "IndexDimensionMap"):
                geo, data = obj.get("GeoDimension"), obj.get("DataDimension")
                offset, inc = obj.get("Offset"), obj.get("Increment")
                if isinstance(geo, str) and isinstance(data, str):
                    if section == "IndexDimensionMap":
                        cur.index_maps.append((geo, data))
                    elif isinstance(offset, int) and isinstance(inc, int):
                        cur.maps.append(DimMap(geo, data, offset, inc))
            if cur is not None and obj is not None and section in ("DataField", "GeoField"):
                name = obj.get("DataFieldName", obj.get("GeoFieldName"))
                dims = obj.get("DimList", [])
                if isinstance(name, str):
                    cur.fields.append(Field(name, tuple(str(d) for d in (
                        dims if isinstance(dims, list) else [dims])), section == "GeoField"))
            obj = None
        elif obj is not None:
            # (a value continued on the next lines: ODL lists may wrap)
            obj[key] = _value(value)
        elif cur is not None and len(stack) == 2:
            if key in ("GridName", "SwathName"):
                cur.name = str(_value(value))
            elif cur.kind == "grid" and key in GRID_KEYS:
                cur.attrs[f"HDFEOS_{key}"] = _value(value)
    return [s for s in structures if s.name]


def apply(structures: list[Structure], variables: dict, lengths: dict[str, set]) -> int:
    """Give the variables matched to fields their HDF-EOS2 dimensions and attributes;
    `lengths`: `stripped_lengths`. Returns how many matched."""
    by_name: dict[str, list] = {}
    for v in variables.values():
        by_name.setdefault(v.attrs.get("HDF4_NAME", v.name), []).append(v)
    matched = 0
    for s in structures:
        geo = {f.name: f for f in s.fields if f.geo}
        for f in s.fields:
            want = tuple(f"{d}:{s.name}" for d in f.dims)
            v = next((v for v in by_name.get(f.name, []) if v.dims == want), None)
            if v is None:
                continue
            matched += 1
            v.dims = tuple(d if len(lengths.get(d, ())) <= 1 else full
                           for d, full in zip(f.dims, want))
            v.attrs[f"HDFEOS_{s.kind.upper()}"] = s.name
            v.attrs.update(s.attrs)
            if s.kind == "swath" and not f.geo:
                coords = [g for g, gf in geo.items() if set(gf.dims) <= set(f.dims)
                          and g != f.name]
                if coords:
                    v.attrs["coordinates"] = " ".join(_cube_name(by_name, c) for c in coords)
            if s.kind == "swath":
                _map_attrs(s, f, v, geo, by_name)
    return matched


def _map_attrs(s: Structure, f: Field, v, geo: dict, by_name: dict) -> None:
    """A swath field's dimension maps as attributes: those whose geolocation (a geolocation
    field) or data dimension (a data field) it has; a data field's `HDFEOS_GEOLOCATION`:
    the geolocation fields whose every dimension is one of its own or mapped to one."""
    maps = [m for m in s.maps if (m.geo if f.geo else m.data) in f.dims]
    if not maps:
        return
    v.attrs["HDFEOS_DIMENSION_MAP"] = [f"{m.geo}/{m.data}" for m in maps]
    v.attrs["HDFEOS_DIMENSION_MAP_OFFSET"] = [m.offset for m in maps]
    v.attrs["HDFEOS_DIMENSION_MAP_INCREMENT"] = [m.increment for m in maps]
    if f.geo:
        return
    reach = set(f.dims) | {m.geo for m in maps}
    located = [g for g, gf in geo.items() if set(gf.dims) <= reach
               and not set(gf.dims) <= set(f.dims)]
    if located:
        v.attrs["HDFEOS_GEOLOCATION"] = " ".join(_cube_name(by_name, g) for g in located)


def dimension_maps(structures: list[Structure], variables: dict, path: str) -> list:
    """For each dimension map of a swath whose fields matched: a 1-D int32 coordinate on
    the geolocation dimension (named as the fields' dimension) holding, for each
    geolocation element, the data-dimension index it stands at (Offset + Increment * i:
    SWdefdimmap's definition, no interpolation). Notes where none is made: a negative
    increment (finer geolocation: several geolocation elements per data element), an SDS
    already named as the dimension, a dimension no matched field has; index maps
    (`SWdefidxmap`) are named in a note, not applied."""
    notes = []
    for s in structures:
        if s.kind != "swath" or not (s.maps or s.index_maps):
            continue
        lengths: dict[str, tuple[str, int]] = {}  # metadata dim -> (cube dim, length)
        for v in variables.values():
            if v.attrs.get("HDFEOS_SWATH") != s.name:
                continue
            for d, n in zip(v.dims, v.shape):
                lengths[re.sub(f":{re.escape(s.name)}$", "", d)] = (d, n)
        if not lengths:
            continue
        for geo, data in s.index_maps:
            notes.append(Problem(Location(path, axis=geo), "hdfeos-metadata",
                                 f"swath {s.name!r}: the index map {geo}/{data} "
                                 "(SWdefidxmap) is not applied", fatal=False))
        for m in s.maps:
            why = None
            if m.geo not in lengths or m.data not in lengths:
                why = "no field of the file has both dimensions"
            elif m.increment <= 0:
                why = f"increment {m.increment}: the geolocation is the finer (no index " \
                    "of the data for each geolocation element)"
            elif lengths[m.geo][0] in variables:
                why = f"an SDS is named {lengths[m.geo][0]!r}"
            elif not -2**31 <= m.offset + m.increment * (lengths[m.geo][1] - 1) < 2**31 or \
                    not -2**31 <= m.offset < 2**31:
                why = "indices past int32 (HDF-EOS2's own type for them): damaged metadata?"
            if why:
                notes.append(Problem(Location(path, axis=m.geo), "hdfeos-metadata",
                                     f"swath {s.name!r}: dimension map {m.geo}/{m.data} "
                                     f"(offset {m.offset}, increment {m.increment}): {why}: "
                                     "no index coordinate", fatal=False))
                continue
            name, n = lengths[m.geo]
            data_name, data_length = lengths[m.data]
            values = (m.offset + m.increment * np.arange(n, dtype="i8")).astype("i4")
            attrs = {"long_name": f"index along {data_name} of each {name} element "
                                  f"(HDF-EOS2 dimension map: offset {m.offset}, increment "
                                  f"{m.increment})",
                     "HDFEOS_SWATH": s.name, "HDFEOS_DATA_DIMENSION": data_name,
                     "HDFEOS_DATA_DIMENSION_LENGTH": data_length,
                     "HDFEOS_OFFSET": m.offset, "HDFEOS_INCREMENT": m.increment}
            variables[name] = Variable(name=name, dtype=values.dtype, shape=values.shape,
                                       dims=(name,), attrs=attrs, fill_value=None,
                                       codecs=[bytes_codec(values.dtype)], blocks=None,
                                       values=values, is_coordinate=True)
    return notes


def _cube_name(by_name: dict, field_name: str) -> str:
    vs = by_name.get(field_name, [])
    return vs[0].name if len(vs) == 1 else field_name


def stripped_lengths(variables: dict) -> dict[str, set]:
    """Each `<DimName>` (its `:<structure>` suffix dropped) -> the dimension names it
    stands for in the file (one: it can be dropped)."""
    out: dict[str, set] = {}
    for v in variables.values():
        for d in v.dims:
            out.setdefault(re.sub(r":[^:]*$", "", d), set()).add(d)
    return out


# GCTP projections whose grid is regular in projection x / y between corners in metres
# (HDF-EOS2's GDij2ll; not GCTP_SOM's blocks, whose x / y depend on the block, nor
# GCTP_BCEA, whose corners are packed degrees projected to metres); GCTP_GEO in degrees
PROJECTED = frozenset(f"GCTP_{p}" for p in (
    "UTM", "SPCS", "ALBERS", "LAMCC", "MERCAT", "PS", "POLYC", "EQUIDC", "TM", "STEREO",
    "LAMAZ", "AZMEQD", "GNOMON", "ORTHO", "GVNSP", "SNSOID", "EQRECT", "MILLER", "VGRINT",
    "HOM", "ROBIN", "GOOD", "MOLL", "IMOLL", "HAMMER", "WAGIV", "WAGVII", "OBLEQA", "CEA",
    "ISINUS"))
# HDF-EOS2 GDij2ll: a corner-registered pixel's point is the corner GridOrigin names
CORNER = {"HDFE_GD_UL": (0.0, 0.0), "HDFE_GD_UR": (1.0, 0.0), "HDFE_GD_LL": (0.0, 1.0),
          "HDFE_GD_LR": (1.0, 1.0)}


def dms_degrees(packed: float) -> float:
    """HDF-EOS2's packed DMS (DDDMMMSSS.SS: degrees * 1e6 + minutes * 1e3 + seconds) in
    degrees (EHconvAng, HDFE_DMS_DEG)."""
    a = abs(float(packed))
    d = int(a / 1e6)
    m = int((a - d * 1e6) / 1e3)
    s = a - d * 1e6 - m * 1e3
    if m >= 60 or s >= 60:  # (e.g. plain degrees, -180.0: not DMS, no guess)
        raise ValueError(f"{packed} is no packed DMS angle (DDDMMMSSS.SS)")
    return float(np.copysign(d + m / 60.0 + s / 3600.0, packed))


def grid_axes(s: Structure) -> tuple[np.ndarray, np.ndarray, str] | str:
    """A grid's x and y pixel coordinates (float64) and their units ("degrees" for
    GCTP_GEO, "m" otherwise), as HDF-EOS2's GDij2ll computes them; or why there are none."""
    a = s.attrs
    proj = a.get("HDFEOS_Projection")
    if proj != "GCTP_GEO" and proj not in PROJECTED:
        return f"projection {proj!r} is not one whose x and y are separable" \
            if proj else "no Projection"
    ul, lr = a.get("HDFEOS_UpperLeftPointMtrs"), a.get("HDFEOS_LowerRightMtrs")
    nx, ny = a.get("HDFEOS_XDim"), a.get("HDFEOS_YDim")
    corners = [ul, lr]
    if not all(isinstance(c, list) and len(c) == 2 and all(
            isinstance(x, (int, float)) and np.isfinite(x) for x in c) for c in corners):
        return "no UpperLeftPointMtrs / LowerRightMtrs (or not two numbers each)"
    if not (isinstance(nx, int) and isinstance(ny, int) and nx > 0 and ny > 0):
        return "no positive XDim / YDim"
    registration = a.get("HDFEOS_PixelRegistration", "HDFE_CENTER")
    origin = a.get("HDFEOS_GridOrigin", "HDFE_GD_UL")
    if registration == "HDFE_CENTER":
        adj = (0.5, 0.5)
    elif registration == "HDFE_CORNER" and origin in CORNER:
        adj = CORNER[origin]
    else:
        return f"PixelRegistration {registration!r} / GridOrigin {origin!r} unknown"
    if proj == "GCTP_GEO":
        try:
            ul, lr = [dms_degrees(v) for v in ul], [dms_degrees(v) for v in lr]
        except ValueError as e:
            return f"GCTP_GEO corner {e}"
        if not (abs(ul[0]) <= 360 and abs(lr[0]) <= 360 and abs(ul[1]) <= 90
                and abs(lr[1]) <= 90):
            return f"GCTP_GEO corners {ul}, {lr} (degrees) are off the globe"
    ul, lr = [float(v) for v in ul], [float(v) for v in lr]
    x = ul[0] + (np.arange(nx, dtype="f8") + adj[0]) * ((lr[0] - ul[0]) / nx)
    y = ul[1] + (np.arange(ny, dtype="f8") + adj[1]) * ((lr[1] - ul[1]) / ny)
    return x, y, "degrees" if proj == "GCTP_GEO" else "m"


def grid_coordinates(structures: list[Structure], variables: dict, path: str) -> list:
    """1-D `XDim` / `YDim` coordinate variables (named as `apply` named the grid fields'
    dimensions) for the grids whose fields matched; notes for the grids given none."""
    notes = []
    for s in structures:
        if s.kind != "grid":
            continue
        names = {}  # "XDim" / "YDim" -> the cube's dimension name
        lengths = {}  # ... -> the fields' lengths along it
        for v in variables.values():
            if v.attrs.get("HDFEOS_GRID") == s.name:
                for d, n in zip(v.dims, v.shape):
                    base = re.sub(f":{re.escape(s.name)}$", "", d)
                    if base in ("XDim", "YDim"):
                        names[base] = d
                        lengths.setdefault(base, set()).add(n)
        if not names:
            continue
        axes = grid_axes(s)
        if not isinstance(axes, str) and any(
                ns != {s.attrs[f"HDFEOS_{b}"]} for b, ns in lengths.items()):
            axes = "its fields' lengths " + ", ".join(
                f"{b} {sorted(ns)}" for b, ns in lengths.items()) + " are not the " \
                f"definition's (XDim {s.attrs['HDFEOS_XDim']}, YDim {s.attrs['HDFEOS_YDim']})"
        if isinstance(axes, str):
            notes.append(Problem(Location(path, axis=", ".join(names.values())),
                                 "hdfeos-metadata", f"grid {s.name!r}: {axes}: no XDim / "
                                 "YDim coordinates", fatal=False))
            continue
        x, y, units = axes
        proj = s.attrs["HDFEOS_Projection"]
        for base, values in (("XDim", x), ("YDim", y)):
            name = names.get(base)
            if name is None:
                continue
            if name in variables:
                notes.append(Problem(Location(path, name), "hdfeos-metadata", f"grid "
                                     f"{s.name!r}: an SDS is named {name!r}: no {base} "
                                     "coordinate computed", fatal=False))
                continue
            geo = proj == "GCTP_GEO"
            std = ("longitude" if base == "XDim" else "latitude") if geo else \
                f"projection_{base[0].lower()}_coordinate"
            if geo:
                units = "degrees_east" if base == "XDim" else "degrees_north"
            attrs = {"units": units, "standard_name": std,
                     "HDFEOS_GRID": s.name, "HDFEOS_Projection": proj}
            variables[name] = Variable(name=name, dtype=values.dtype, shape=values.shape,
                                       dims=(name,), attrs=attrs, fill_value=None,
                                       codecs=[bytes_codec(values.dtype)], blocks=None,
                                       values=values, is_coordinate=True)
    return notes
