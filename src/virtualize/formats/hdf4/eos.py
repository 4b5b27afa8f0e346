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
  dimensions are among its own (dimension maps with offsets / increments are not
  applied: such geolocation fields are not named).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

GRID_KEYS = ("XDim", "YDim", "UpperLeftPointMtrs", "LowerRightMtrs", "Projection",
             "ProjParams", "ZoneCode", "SphereCode", "GridOrigin", "PixelRegistration")


@dataclass
class Field:
    name: str
    dims: tuple[str, ...]
    geo: bool = False


@dataclass
class Structure:
    kind: str  # "grid" | "swath"
    name: str
    attrs: dict = field(default_factory=dict)
    fields: list[Field] = field(default_factory=list)


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
    return matched


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
