"""Gaps in a regular concatenation coordinate: a join between two files whose step is a
multiple of the stack's usual step (daily files with January missing). A note
(`coordinate-gap`), fatal with `no_gaps`; computed from the coordinate values the
inventories carry (docs/planning.md, Gaps)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..model import FileInventory, Location, Problem

# the usual step must be at least this share of all steps for the coordinate to count as
# regular (monthly steps of 28-31 days: 31 is most of them)
REGULAR_SHARE = 0.5
GAP_FACTOR = 1.5  # a join this many usual steps long or more is a gap
SPAN_END = ", before this file "  # what ends a gap's span in its message (the report's summary)


def coordinate_gaps(invs: Sequence[FileInventory], dim: str, *, fatal: bool = False
                    ) -> list[Problem]:
    """One problem per join between consecutive files (in stack order) that leaves steps
    out of a regular coordinate along `dim`, located at the file after the gap."""
    coords = [inv.variables.get(dim) for inv in invs]
    if len(invs) < 2 or any(c is None or c.values is None for c in coords):
        return []
    parts = [np.asarray(c.values).reshape(-1) for c in coords]
    if any(p.dtype.kind not in "iuf" for p in parts):
        return []
    values = np.concatenate(parts).astype("f8")
    diffs = np.diff(values)
    if diffs.size < 2 or not np.isfinite(diffs).all() or (diffs <= 0).any():
        return []  # too few steps to call one usual, or out of order (reported elsewhere)
    # (steps equal but for float rounding, as of hours in days, count as one)
    steps, counts = np.unique(np.round(diffs, 9), return_counts=True)
    step = float(steps[np.argmax(counts)])
    if counts.max() < REGULAR_SHARE * diffs.size:
        return []
    out = []
    for k in range(1, len(parts)):
        if not parts[k].size or not parts[k - 1].size:
            continue
        a, b = float(parts[k - 1][-1]), float(parts[k][0])
        if b - a < GAP_FACTOR * step:
            continue
        missing = int(round((b - a) / step)) - 1
        what = _missing(coords[k].attrs, dim, missing, step, a, b)
        out.append(Problem(Location(invs[k].path, dim, dim), "coordinate-gap",
                           f"{what}{SPAN_END}(after {invs[k - 1].path}; elsewhere "
                           f"{dim!r} steps by {step:g}): the missing files can later go in "
                           "only by a full rebuild, not by append", fatal=fatal))
    return out


def _missing(attrs: dict, dim: str, n: int, step: float, a: float, b: float) -> str:
    """'31 days missing between 2024-12-31 and 2025-02-01', or a count of steps."""
    units = attrs.get("units")
    if isinstance(units, str) and " since " in units:
        try:
            import cftime

            cal = attrs.get("calendar") if isinstance(attrs.get("calendar"), str) else "standard"
            da, db = cftime.num2date([a, b], units, cal, only_use_cftime_datetimes=True)
            word = units.split(" since ")[0].strip().lower()
            whole = all((d.hour, d.minute, d.second, d.microsecond) == (0, 0, 0, 0)
                        for d in (da, db))  # (both as dates, or both with their times)
            when = [_date(d) if whole else d.isoformat() for d in (da, db)]
            span = (f"{n} {word}" if step == 1 and word.endswith("s") else
                    f"{n} step(s) of {step:g} {word}")
            return f"{span} missing between {when[0]} and {when[1]}"
        except (ValueError, TypeError, OverflowError):
            pass
    return f"{n} step(s) of {step:g} missing between {a:g} and {b:g}"


def _date(d) -> str:
    return f"{d.year:04d}-{d.month:02d}-{d.day:02d}"
