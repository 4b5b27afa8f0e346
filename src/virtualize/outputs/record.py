"""The provenance record every output kind keeps (a cube's virtualize.json, a kerchunk
JSON's `virtualize` section, an Icechunk commit's metadata): its sources (path, size,
mtime), the roots a reader may open files in, the recipe, the append state, the files
left out; written, read back (relative paths resolved against the output's location) and
checked for staleness (staleness.py) from here."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .._version import __version__
from ..model import Plan
from ..storage import relative, resolve
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


def resolve_sources(sources: list, base: str) -> list:
    """Recorded sources with their paths resolved against `base` (the output's location:
    relative ones are a relocatable output's); entries that are not {path: str} as they
    are (the table's own check refuses them where it matters)."""
    return [dict(s, path=resolve(s["path"], base))
            if isinstance(s, dict) and isinstance(s.get("path"), str) else s for s in sources]


def resolve_roots(roots: list, base: str) -> list:
    """Recorded roots resolved against `base`, as `resolve_sources`."""
    return [resolve(r, base) if isinstance(r, str) else r for r in roots]


def recorded_in(doc_file: str | os.PathLike, base: str) -> Any:
    """The `virtualize` section of an output's JSON document (a kerchunk reference file, a
    parquet set's `.zmetadata`), its sources and append state resolved against `base`;
    None when the document cannot be read."""
    try:
        with open(doc_file, "rb") as f:
            info = json.loads(f.read()).get("virtualize")
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(info, dict) and isinstance(info.get("sources"), list):
        resolved(info, base, roots=False, append=True)
    return info


def resolved(info, base: str, *, roots: bool = True, append: bool = False):
    """A read record (a dict; anything else as it is) with its sources (and `roots`,
    and the append state's paths when `append`) resolved against `base`."""
    if not isinstance(info, dict):
        return info
    if isinstance(info.get("sources"), list):
        info["sources"] = resolve_sources(info["sources"], base)
    if roots and isinstance(info.get("roots"), list):
        info["roots"] = resolve_roots(info["roots"], base)
    if append and "append" in info:  # the recorded last step's paths: relative ones too
        from ..plan import relocate_state
        info["append"] = relocate_state(info["append"], lambda p: resolve(p, base))
    return info


def record(plan: Plan, layout: tuple[str, ...], relative_to: str | None = None, *,
           lazy: bool = False, **fields) -> dict:
    """A new output's record: the fields of `layout` in that order (its kind's: the
    order is part of the format), each from `fields` or else the plan's own (sources,
    roots, append state relative to `relative_to` when given), then `left_out`.
    `lazy`: the source table made as it is encoded (a streaming writer's)."""
    def sources():
        if lazy:
            return relative_sources(plan, relative_to)
        return [s.to_dict() for s in plan.sources]

    standard = {
        "created_by": lambda: f"virtualize {__version__}",
        "concat_dim": lambda: plan.concat_dim,
        "recipe": lambda: plan.recipe,
        "sources": sources,
        "roots": lambda: [relative(r, relative_to) if relative_to else r
                          for r in source_roots([s.path for s in plan.sources])],
        "append": lambda: relative_state(plan.append_state, relative_to),
    }
    out = {k: fields[k] if k in fields else standard[k]() for k in layout}
    out.update(left_out_record(plan))
    return out


def grow_record(info: dict, merged, new_paths: list[str], *, rel: str | None,
                old_base: str | None) -> dict:
    """`info` (a read record) grown by an append (plan/_state.py `Merged`): the new
    sources (relative to `rel` when given), the roots of old and new (`old_base`: what
    the recorded roots resolve against), the new append state and left-out files."""
    info["sources"] = list(info["sources"]) + [
        dict(s.to_dict(), path=relative(s.path, rel) if rel else s.path)
        for s in merged.sources[len(merged.old_sources):]]
    old_roots = [resolve(r, old_base) if old_base else r for r in info.get("roots") or []]
    info["roots"] = [relative(r, rel) if rel else r for r in grow_roots(old_roots, new_paths)]
    return info


def finish_growth(info: dict, plan: Plan, rel: str | None) -> dict:
    """The last fields an append records: its append state, its left-out files."""
    info["append"] = relative_state(plan.append_state, rel)
    info.update(left_out_record(plan))
    return info


def changed_sources(sources: list[dict[str, Any]]):
    """The stale sources' problems (kept for callers of 0.x: staleness.check_sources)."""
    from .staleness import check_sources
    yield from check_sources(sources).stale


def left_out_record(plan: Plan) -> dict:
    """The record's `left_out` field: files left out because they cannot be scanned
    (skip_unreadable), each {path, kind, message}, each file once (its latest reason:
    appends that leave it out again add it once), none that is now a source; none when no
    file was left out."""
    sources = {s.path for s in plan.sources}
    latest = {d["path"]: d for d in plan.left_out if d.get("path") not in sources}
    return {"left_out": list(latest.values())} if latest else {}


def relative_state(state: dict | None, base: str | None) -> dict | None:
    """The append state (plan/_state.py) to record: its paths relative to `base` (a
    relocatable output's location) like the sources, or as they are without one."""
    if not base:
        return state
    from ..plan import relocate_state
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
