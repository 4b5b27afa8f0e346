"""The provenance record every output kind keeps (a cube's virtualize.json, a kerchunk
JSON's `virtualize` section, an Icechunk commit's metadata): its sources (path, size,
mtime), the roots a reader may open files in, the recipe, the append state, the files
left out; written, read back (relative paths resolved against the output's location) and
checked for staleness (staleness.py) from here."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..model import Plan
from ..storage import relative
from .access import invalid


def source_table(what, info: dict) -> list[dict[str, Any]]:
    """The recorded sources, each {path: absolute str, size: int >= 0, mtime_ns: int}."""
    sources = info.get("sources")
    if not isinstance(sources, list):
        raise invalid(what, "no source table")
    for i, s in enumerate(sources):
        if not (isinstance(s, dict) and isinstance(s.get("path"), str)
                and isinstance(s.get("size"), int) and not isinstance(s.get("size"), bool)
                and s["size"] >= 0 and isinstance(s.get("mtime_ns"), int)):
            raise invalid(what, f"source #{i} is not {{path, size, mtime_ns}}: {s!r:.200}")
        if "\x00" in s["path"]:
            raise invalid(what, f"source #{i}'s path holds a NUL byte: {s['path']!r:.200}")
    return sources


def recorded_roots(what: Path, info: dict) -> list[str]:
    """The recorded roots; an output without them (older, or edited) has its own
    directory only, as a kerchunk JSON virtualize did not write."""
    roots = info.get("roots")
    if roots is None:
        return [os.path.dirname(os.path.realpath(what))]
    if not isinstance(roots, list):
        raise invalid(what, "'roots' is not a list")
    return roots


def changed_sources(sources: list[dict[str, Any]]):
    """The stale sources' problems (kept for callers of 0.x: staleness.check_sources)."""
    from .staleness import check_sources
    yield from check_sources(sources).stale


def left_out_record(plan: Plan) -> dict:
    """The record's `left_out` field: files left out because they cannot be scanned
    (skip_unreadable), each {path, kind, message}; none when no file was left out."""
    return {"left_out": list(plan.left_out)} if plan.left_out else {}


def relative_state(state: dict | None, base: str | None) -> dict | None:
    """The append state (plan/_state.py) to record: its paths relative to `base` (a
    relocatable output's location) like the sources, or as they are without one."""
    if not base:
        return state
    from ..plan._state import relocate_state
    return relocate_state(state, lambda p: relative(p, base))


def relative_sources(plan: Plan, base: str | None) -> list[dict]:
    def one(s) -> dict:
        d = s.to_dict()
        if base:
            d["path"] = relative(s.path, base)
        return d
    return _Lazy(plan.sources, one)


class _Lazy(list):
    """A list for `json`'s encoder whose items are made as they are written (`_write_json`
    streams): a source table of 10,000 files is not held as 10,000 dicts at once."""

    def __init__(self, items, make) -> None:
        super().__init__()
        self.items, self.make = items, make

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self):
        return map(self.make, self.items)


def source_roots(paths: list[str]) -> list[str]:
    """The directories a reader of this output may open files in: each source's
    directory (as named and with symlinks resolved), nested ones folded into their
    parent. Recorded with the output; see docs/reading.md (confinement)."""
    from ..storage import dirname, is_url

    dirs = set()
    urls = sorted({dirname(p) for p in paths if is_url(p)})
    for p in paths:
        if is_url(p):
            continue
        dirs.add(os.path.dirname(os.path.abspath(p)))
        dirs.add(os.path.dirname(os.path.realpath(p)))
    roots: list[str] = []
    for d in sorted(dirs):
        if not any(d == r or d.startswith(r.rstrip("/") + "/") for r in roots):
            roots.append(d)
    for u in urls:  # URL prefixes ('s3://bucket/tas/'), nested ones folded
        if not any(u.startswith(r) for r in roots):
            roots.append(u)
    return roots


def grow_roots(roots: list[str], paths: list[str]) -> list[str]:
    """`roots` (recorded) and those of `paths` (new sources), nested ones folded: the
    roots of all the sources, without resolving the old ones again."""
    out = list(roots)
    for r in source_roots(paths):
        if not any(r == o or r.startswith(o.rstrip("/") + "/") for o in out):
            out = [o for o in out if not o.startswith(r.rstrip("/") + "/")] + [r]
    return out


def set_times(sources: list[dict], times: dict[int, int]) -> None:
    """A recorded source table with the new times of `times` (index -> mtime_ns)."""
    for i, mtime in times.items():
        sources[i]["mtime_ns"] = int(mtime)
