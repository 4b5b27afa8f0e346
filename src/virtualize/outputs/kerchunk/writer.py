"""Kerchunk reference JSON (version 1) for zarr v3: readable with fsspec's `reference://`
filesystem by zarr-python and xarray, without virtualize installed. The set itself is
made by references.py (a VRT records the same); here it is written, grown and
refreshed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import ujson

from ...model import Plan
from ...storage import relative, resolve
from ..base import CUBE_FORMAT_VERSION
from ..record import finish_growth, grow_record
from ..references import References, record_section, ref_key, reference_set
from ..staging import staged_file
from ..walk import walk_append


def kerchunk_refs(plan: Plan, relative_to: str | None = None) -> dict:
    """The kerchunk reference JSON of `plan` as a dict (references.py `reference_set`),
    its `virtualize` section saying virtualize wrote it; `relative_to`: its final
    location, for a relocatable set."""
    return reference_set(plan, kerchunk_section(plan), relative_to)


def kerchunk_section(plan: Plan) -> dict:
    return record_section(plan, "virtualize-kerchunk", CUBE_FORMAT_VERSION)


def append_kerchunk(dest: str | Path, merged, doc: dict, new_sources: list[str]) -> list[str]:
    """Rewrite the reference JSON `doc` (as read from `dest`) grown by `merged`
    (plan/_state.py `Merged`): the grown arrays' documents, their new chunks' references,
    inline arrays' chunk, the sources and the last step; the old references are kept as
    they are (the file is rewritten whole: one JSON document).

    A relocatable JSON (its section records the template `u` relative: `kerchunk_refs`)
    stays so: its template is kept (`u` resolved against where the JSON is now), new
    references under `u` are written through it, and new sources, roots and last step are
    recorded relative. Returns the new sources it references by absolute path instead
    (outside `u`: the JSON is then no longer relocatable as a whole)."""
    plan = merged.plan
    refs = doc["refs"]
    base = os.path.dirname(os.path.abspath(dest))
    moved = doc["virtualize"].get("templates")
    u = resolve(moved["u"], base).rstrip("/") or "/" \
        if isinstance(moved, dict) and isinstance(moved.get("u"), str) else None
    paths = [_through(s.path, u) for s in merged.sources]
    outside = [p for p, s in zip(paths[len(merged.old_sources):],
                                 merged.sources[len(merged.old_sources):])
               if u is not None and p == s.path]
    walk_append(merged, References(paths, refs))
    root = json.loads(refs["zarr.json"])
    meta = root.get("consolidated_metadata", {}).get("metadata")
    if isinstance(meta, dict):
        for name in merged.grown:
            meta[name] = json.loads(refs[ref_key(name, "zarr.json")])
        refs["zarr.json"] = json.dumps(root, allow_nan=False)
    rel = base if u is not None else None
    section = finish_growth(grow_record(dict(doc["virtualize"]), merged, new_sources, rel=rel,
                                        old_base=base), plan, rel)
    out = {"version": 1, "virtualize": section}
    if u is not None:
        out["templates"] = dict(doc.get("templates") or {}, u=u)  # (where the JSON is now)
    elif doc.get("templates"):
        out["templates"] = doc["templates"]
    out["refs"] = refs
    with staged_file(dest, True, new_sources) as stage:
        with open(stage, "w") as f:
            ujson.dump(out, f, escape_forward_slashes=False)
    return outside


def _through(p: str, u: str | None) -> str:
    """A reference's path: through the template `u` when `p` is under it (the way
    `kerchunk_refs` wrote the relocatable set's), else `p` itself."""
    if u is None or set("{}") & set(p):
        return p
    rel = relative(p, u)
    if rel == p or os.path.isabs(rel) or rel == ".." or rel.startswith("../"):
        return p
    return "{{u}}/" + rel


def write_kerchunk(plan: Plan, dest: str | Path, overwrite: bool = False, *,
                   relative_to: str | None = None) -> Path:
    """The reference JSON at `dest`; `relative_to`: its final location, to reference the
    sources relative to it (see `kerchunk_refs`)."""
    dest = Path(dest)
    doc = kerchunk_refs(plan, relative_to)
    with staged_file(dest, overwrite, [s.path for s in plan.sources]) as stage:
        with open(stage, "w") as f:
            ujson.dump(doc, f, escape_forward_slashes=False)
    return dest


def refresh_kerchunk(dest: str | Path, times: dict[int, int]) -> None:
    """Record new modification times (source index -> mtime_ns) of touched sources in a
    reference JSON's `virtualize` section (the file replaced in one rename)."""
    from ..record import set_times
    from ..staging import replace_atomically

    dest = Path(dest)
    with open(dest, "rb") as f:
        doc = ujson.load(f)
    set_times(doc["virtualize"]["sources"], times)
    replace_atomically(dest, ujson.dumps(doc, escape_forward_slashes=False).encode())
