"""A new axis' coordinate: `--coord DIM=attr:NAME|var:NAME|name:REGEX|v1,v2,...` parsed,
resolved to one value per file, and made into the axis' coordinate variable.

Pure: the values come from the inventories (global attributes, the values the scan records
of small scalar variables: formats/_planning.py) and the files' names.
"""

from __future__ import annotations

import datetime
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..conventions import py
from ..model import ArrayPlan, FileInventory, Location, Problem, UsageError
from ._common import inline_plan

FORMS = "attr:NAME, var:NAME, name:REGEX or v1,v2,..."
# a whole value that is a date (and time of day): 2015-01-01, 20150101, 2015-01-01T06:00,
# 2024010106 (a forecast run's YYYYMMDDHH)
_DATE = re.compile(r"((?:18|19|20|21)\d\d)-?(0[1-9]|1[0-2])-?(0[1-9]|[12]\d|3[01])"
                   r"(?:[T_ -]?([01]\d|2[0-3])(?::?([0-5]\d)(?::?([0-5]\d)(?:\.(\d{1,6}))?)?)?Z?)?")


@dataclass(frozen=True)
class CoordSpec:
    """Where a new axis' values come from: `kind` "attr" (a global attribute), "var" (a
    scalar variable's value), "name" (the first group of `arg`, a regex, on the file's base
    name) or "values" (`values`, one per file in file order)."""

    kind: str
    arg: str = ""
    values: tuple = ()

    def text(self) -> str:
        """The form it was given in (the recipe records it so)."""
        if self.kind == "values":
            return ",".join(str(v) for v in self.values)
        return f"{self.kind}:{self.arg}"


def parse_coord(text: str) -> CoordSpec:
    """A `--coord` value's right-hand side (`attr:variant_label`, `var:realization`,
    `name:_(r\\d+i\\d+p\\d+f\\d+)_`, `0,1,2`). Raises `UsageError` naming the bad form."""
    if not isinstance(text, str) or not text.strip():
        raise UsageError(f"--coord {text!r}: empty; give {FORMS}")
    kind, sep, arg = text.partition(":")
    if sep and kind in ("attr", "var"):
        if not arg:
            raise UsageError(f"--coord {text!r}: {kind}: needs a name")
        return CoordSpec(kind, arg)
    if sep and kind == "name":
        try:
            rx = re.compile(arg)
        except re.error as e:
            raise UsageError(f"--coord {text!r}: not a regular expression ({e})") from None
        if not arg:
            raise UsageError(f"--coord {text!r}: name: needs a regular expression")
        if rx.groups < 1:
            raise UsageError(f"--coord {text!r}: the regular expression has no group "
                             "(the value is its first group, e.g. name:_(r\\d+)i)")
        return CoordSpec("name", arg)
    if sep and re.fullmatch(r"[a-z]+", kind):
        raise UsageError(f"--coord {text!r}: unknown form {kind!r}; give {FORMS}")
    parts = [p.strip() for p in text.split(",")]
    if any(not p for p in parts):
        raise UsageError(f"--coord {text!r}: an empty value in the list")
    return CoordSpec("values", values=tuple(_typed(parts)))


def parse_coords(items: Sequence[str] | dict[str, Any] | None) -> dict[str, CoordSpec]:
    """`--coord DIM=FORM` items (or an API dict {dim: form or CoordSpec}) by dimension."""
    if not items:
        return {}
    if isinstance(items, dict):
        pairs = list(items.items())
    else:
        pairs = []
        for item in items:
            dim, sep, form = str(item).partition("=")
            if not sep or not dim.strip():
                raise UsageError(f"--coord {item!r}: give DIM=FORM ({FORMS})")
            pairs.append((dim.strip(), form))
    out: dict[str, CoordSpec] = {}
    for dim, form in pairs:
        if dim in out:
            raise UsageError(f"--coord {dim}: given twice")
        out[dim] = form if isinstance(form, CoordSpec) else \
            CoordSpec("values", values=tuple(_dates_or(list(form)))) \
            if isinstance(form, (list, tuple)) else parse_coord(form)
    return out


def _typed(parts: Sequence[str]) -> list:
    """Dates (`datetime.datetime`) when all are dates (`2024-01-01`, `20240101`,
    `2024-01-01T06:00:00`: `_DATE`), else numbers when all parse as numbers (ints when all
    are), else the strings."""
    dates = [_date(p) for p in parts]
    if parts and all(d is not None for d in dates):
        return dates
    try:
        return [int(p) for p in parts]
    except ValueError:
        pass
    try:
        return [float(p) for p in parts]
    except ValueError:
        return list(parts)


def _dates_or(values: list) -> list:
    """Texts that are all dates as dates (`_DATE`), anything else as it is: an attribute's
    or a listed value's text of one date and time is a date, as in a name; mixed, text."""
    dates = [_date(v) if isinstance(v, str) else None for v in values]
    return dates if values and all(d is not None for d in dates) else values


def _date(text: str) -> datetime.datetime | None:
    m = _DATE.fullmatch(text.strip())
    if m is None:
        return None
    y, mo, d, hh, mm, ss, frac = m.groups()
    try:
        return datetime.datetime(int(y), int(mo), int(d), int(hh or 0), int(mm or 0),
                                 int(ss or 0), int((frac or "").ljust(6, "0")))
    except ValueError:
        return None


def resolve(invs: Sequence[FileInventory], dim: str, spec: CoordSpec
            ) -> tuple[list | None, list[Problem]]:
    """One value per file (file order) for the new axis `dim`, or None with located
    problems (`coord-unresolved`: an attribute or variable a file lacks, a name the regex
    does not match, a count of values that is not the count of files). Values from names,
    attributes' text and listed values that are all dates (`_DATE`: 2024-01-01, 20240101,
    2024-01-01T06:00:00) are `datetime.datetime`s (mixed: the texts); names' values that
    are all numbers, numbers."""
    problems: list[Problem] = []
    out: list = []
    form = spec.text()

    def bad(path: str | None, msg: str, var: str | None = None) -> None:
        problems.append(Problem(Location(path, var, dim), "coord-unresolved",
                                f"--coord {dim}={form}: {msg}"))

    if spec.kind == "values":
        if len(spec.values) != len(invs):
            bad(None, f"{len(spec.values)} value(s) for {len(invs)} file(s) (one value per "
                      "file, in file order)")
            return None, problems
        return list(spec.values), problems
    for inv in invs:
        if spec.kind == "attr":
            attrs = inv.groups.get("", {})
            if spec.arg not in attrs:
                near = ", ".join(sorted(attrs)[:12])
                bad(inv.path, f"the file has no global attribute {spec.arg!r} "
                              f"(its attributes: {near or 'none'})")
                continue
            value = _scalar(attrs[spec.arg])
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                bad(inv.path, f"its attribute {spec.arg!r} is {value!r}, not one number or "
                              "text")
                continue
            out.append(value)
        elif spec.kind == "var":
            v = inv.variables.get(spec.arg)
            if v is None:
                bad(inv.path, f"the file has no variable {spec.arg!r}", spec.arg)
            elif v.shape and int(np.prod(v.shape)) != 1:
                bad(inv.path, f"{spec.arg!r} is not a scalar (shape {v.shape})", spec.arg)
            elif v.values is None:
                bad(inv.path, f"the scan recorded no value of {spec.arg!r}", spec.arg)
            else:
                value = _scalar(np.asarray(v.values).reshape(-1)[0])
                if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                    bad(inv.path, f"{spec.arg!r} holds {value!r}, not one number or text",
                        spec.arg)
                    continue
                out.append(value)
        else:
            base = os.path.basename(inv.path.rstrip("/"))
            m = re.search(spec.arg, base)
            if m is None or m.group(1) is None:
                bad(inv.path, f"the regular expression does not match the name {base!r}")
                continue
            out.append(m.group(1))
    if problems:
        return None, problems
    if spec.kind == "name":
        out = _typed(out)
    elif spec.kind == "attr":
        out = _dates_or(out)
    return out, problems


# a var: scalar's attributes its coordinate does not keep: how it was stored, not what it is
_STORAGE = {"_FillValue", "missing_value", "valid_min", "valid_max", "valid_range",
            "coordinates", "grid_mapping", "bounds", "_Unsigned", "_Netcdf4Dimid",
            "_Netcdf4Coordinates", "DIMENSION_LIST", "REFERENCE_LIST", "CLASS", "NAME"}
_PACKING = ("scale_factor", "add_offset")
_MEANING = ("units", "calendar")


def coordinate_attrs(invs: Sequence[FileInventory], dim: str, spec: CoordSpec
                     ) -> tuple[dict, list[Problem]]:
    """The attributes the new axis' coordinate keeps from where its values come: a `var:`
    scalar's (its `units` and `calendar`, which give its numbers their meaning, e.g. a CF
    time `hours since 2024-01-01` that xarray decodes to dates; `long_name`,
    `standard_name`, ...), taken from the first file; `units`/`calendar` must be the same
    in every file and the value not packed (`scale_factor`/`add_offset`), else located
    `coord-unresolved` problems. The other forms carry no attributes."""
    if spec.kind != "var" or not invs:
        return {}, []
    form = spec.text()
    problems: list[Problem] = []
    first = invs[0].variables.get(spec.arg)
    if first is None:
        return {}, []  # (resolve says so)
    for inv in invs:
        v = inv.variables.get(spec.arg)
        if v is None:
            continue
        packed = [k for k in _PACKING if k in v.attrs]
        if packed:
            problems.append(Problem(Location(inv.path, spec.arg, dim), "coord-unresolved",
                                    f"--coord {dim}={form}: {spec.arg!r} is packed "
                                    f"({', '.join(packed)}): its stored value is not the "
                                    "coordinate's value"))
            continue
        key = next((k for k in _MEANING if not _same(v.attrs.get(k), first.attrs.get(k))),
                   None)
        if key is not None:
            problems.append(Problem(Location(inv.path, spec.arg, dim), "coord-unresolved",
                                    f"--coord {dim}={form}: its {key!r} is "
                                    f"{_scalar(v.attrs.get(key))!r} here but "
                                    f"{_scalar(first.attrs.get(key))!r} in {invs[0].path}: "
                                    "the values would mean different things on one axis"))
    attrs = {k: _scalar(a) for k, a in first.attrs.items() if k not in _STORAGE}
    return attrs, problems


def _same(a: Any, b: Any) -> bool:
    return _scalar(a) == _scalar(b)


def _scalar(value: Any) -> Any:
    value = py(value)
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value


def label(value: Any) -> str:
    """How a coordinate value is named in reports and problems."""
    if isinstance(value, datetime.datetime):
        return value.strftime("%Y-%m-%d" if value.time() == datetime.time() else
                              "%Y-%m-%dT%H:%M:%S")
    return str(value)


def coordinate_plan(dim: str, values: Sequence[Any], attrs: dict | None = None) -> ArrayPlan:
    """The new axis' coordinate variable, stored in the cube: text, numbers, or dates
    CF-encoded (`days since` the first when all are whole days, `microseconds since` its
    whole second when one has a fraction of a second, else `seconds since`,
    proleptic Gregorian calendar), which xarray decodes and indexes. `attrs`: those it
    keeps from where its values come (`coordinate_attrs`: numbers keep their `units` and
    `calendar`; dates and text take their own)."""
    values = list(values)
    attrs = dict(attrs or {})
    numbers = bool(values) and all(isinstance(v, (int, float, np.integer, np.floating))
                                   and not isinstance(v, bool) for v in values)
    if not numbers:
        for k in _MEANING:
            attrs.pop(k, None)
    if values and all(isinstance(v, datetime.datetime) for v in values):
        # (a fraction of a second, FITS' DATE-OBS: microseconds since the whole second)
        start = min(values).replace(microsecond=0)
        whole = all(v.time() == datetime.time() for v in values)
        micro = any(v.microsecond for v in values)
        step, unit = (86400, "days") if whole else (1e-6, "microseconds") if micro else \
            (1, "seconds")
        fmt = "%Y-%m-%d" if whole else "%Y-%m-%dT%H:%M:%S"
        data = np.array([(v - start) // datetime.timedelta(seconds=step) for v in values],
                        "i8")
        attrs.update({"units": f"{unit} since {start.strftime(fmt)}",
                      "calendar": "proleptic_gregorian"})
        return inline_plan(dim, data, (dim,), attrs)
    if values and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                      for v in values):
        return inline_plan(dim, np.array(values, "i8"), (dim,), attrs)
    if numbers:
        return inline_plan(dim, np.array(values, "f8"), (dim,), attrs)
    text = np.array([label(v) for v in values], dtype=np.dtypes.StringDType())
    return inline_plan(dim, text, (dim,), attrs)
