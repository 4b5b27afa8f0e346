"""Attributes of many files made one: the one place that combines them (global attributes
and each variable's, for concatenation and merge).

`how` is xarray's vocabulary: `drop_conflicts` (the default: an attribute whose value
differs between files is left out, and named), `override` (the first file's), `identical`
(a differing attribute is a located problem). Whatever `how`, attributes that change what
the numbers mean (`MEANING_ATTRS`: units, scale_factor, add_offset, calendar, _FillValue,
missing_value, flag_*) must agree: differing, they are refused (`attribute-drift`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..conventions import py
from ..model import Location, Problem
from ._common import MEANING_ATTRS, same_meaning

COMBINE_ATTRS = ("drop_conflicts", "override", "identical")


def combine(attr_dicts: list[dict], how: str, where: str,
            files: Sequence[str | None] | None = None
            ) -> tuple[dict, list[str], list[Problem]]:
    """The combined attributes of `attr_dicts` (one per file, file order), the names
    dropped (`drop_conflicts`) and the problems (`where`: the variable, or None / "" for
    a group's attributes; `files`: the file of each dict, to locate the problems)."""
    if how not in COMBINE_ATTRS:
        raise ValueError(f"combine_attrs must be one of {', '.join(COMBINE_ATTRS)}, not {how!r}")
    files = list(files) if files is not None else [None] * len(attr_dicts)
    problems: list[Problem] = []
    if not attr_dicts:
        return {}, [], problems
    first = attr_dicts[0]
    var = where or None
    what = f"{where!r}" if where else "the global attributes"
    out: dict = {}
    dropped: list[str] = []
    keys = list(dict.fromkeys(k for d in attr_dicts for k in d))
    for key in keys:
        # the first file holding it, and the first one whose value differs from it
        held = [(i, d[key]) for i, d in enumerate(attr_dicts) if key in d]
        i0, value = held[0]
        other = next(((i, d.get(key)) for i, d in enumerate(attr_dicts)
                      if not same_meaning(key, d.get(key), value)), None)
        if key in MEANING_ATTRS and other is not None:  # (missing from a file: drift too)
            j, b = other
            problems.append(Problem(
                Location(files[j], var), "attribute-drift",
                f"attribute {key!r} of {what} is {py(b)!r} here but {py(value)!r} in "
                f"{files[i0]}: the values would mean different things in one array"))
            out[key] = first.get(key, value)
            continue
        other = next(((i, d[key]) for i, d in enumerate(attr_dicts)
                      if key in d and not same_meaning(key, d[key], value)), None)
        if other is None:
            # (missing from some files: kept, as xarray's drop_conflicts and override do)
            if how == "override" and key not in first:
                continue
            out[key] = value
            continue
        j, b = other
        if how == "override":
            if key in first:
                out[key] = first[key]
        elif how == "identical":
            problems.append(Problem(
                Location(files[j], var), "attribute-conflict",
                f"attribute {key!r} of {what} is {_short(b)} here but {_short(value)} in "
                f"{files[i0]} (--combine-attrs identical; drop_conflicts leaves it out, "
                "override takes the first file's)"))
            out[key] = value
        else:
            dropped.append(key)
    if how == "identical":  # a key some files lack differs too
        for key in keys:
            lacking = next((i for i, d in enumerate(attr_dicts) if key not in d), None)
            if lacking is not None and key not in MEANING_ATTRS:
                holder = next(i for i, d in enumerate(attr_dicts) if key in d)
                problems.append(Problem(
                    Location(files[lacking], var), "attribute-conflict",
                    f"attribute {key!r} of {what} is missing here but is "
                    f"{_short(attr_dicts[holder][key])} in {files[holder]} "
                    "(--combine-attrs identical)"))
    return out, dropped, problems


def dropped_note(dropped: dict[str, list[str]]) -> str | None:
    """One note naming the attributes `drop_conflicts` left out, by where (group or
    variable), or None when none was."""
    parts = [f"{where or 'global'}: {', '.join(names)}" for where, names in dropped.items()
             if names]
    if not parts:
        return None
    return ("attributes that differ between files were left out (--combine-attrs "
            "drop_conflicts; override keeps the first file's): " + "; ".join(parts))


def _short(value) -> str:
    text = repr(py(value))
    return text if len(text) <= 60 else text[:57] + "...'"
