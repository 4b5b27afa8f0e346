"""Kerchunk reference JSON (version 1) for zarr v3: readable with fsspec's `reference://`
filesystem by zarr-python and xarray, without virtualize installed."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import numpy as np
import ujson

from ...model import Plan
from ...storage import common_dir, dirname, relative, resolve
from ..cube.writer import CUBE_FORMAT_VERSION
from ..metadata import array_doc, chunk_grid, group_doc
from ..record import finish_growth, grow_record, record, relative_state
from ..staging import staged_file
from ..walk import walk, walk_append


def kerchunk_refs(plan: Plan, relative_to: str | None = None) -> dict:
    """The reference set as a dict: {"version": 1, "virtualize": {...}, "refs": {key: json |
    [url, off, len]}}. The `virtualize` section (first, so that a later run recognises
    its own output from the file's first bytes) records the sources with their size and
    modification time and the allowed roots; fsspec's reader ignores it.

    `relative_to`: the JSON's final location (path or URL). The sources that can be named
    relative to its directory (local ones for a local JSON, same scheme and host for a
    URL) are then referenced through a kerchunk template, `"{{u}}/sub/a.nc"` with
    `"templates": {"u": "<their common directory>"}`, and recorded relative in the
    `virtualize` section (with `u` relative too): a relocatable reference set. Moved
    together with its files, `virtualize.open` resolves `u` against the JSON's new
    directory; plain fsspec reads it with `template_overrides={"u": "<new directory>"}`
    (fsspec resolves no relative paths: a reference without a protocol is opened relative
    to the current directory)."""
    paths = [s.path for s in plan.sources]
    templates: dict[str, str] = {}
    section = kerchunk_section(plan)
    if relative_to is not None:
        base = dirname(relative_to)
        # (a path with braces would be taken for a template by fsspec: left absolute)
        movable = [p for p in paths if relative(p, base) != p and not set("{}") & set(p)]
        if movable:
            u = common_dir(movable)
            templates = {"u": u}
            paths = ["{{u}}/" + relative(p, u)
                     if p in movable else p for p in paths]
            section["templates"] = {"u": relative(u + "/", base)}
            for d in section["sources"]:
                d["path"] = relative(d["path"], base)
            section["roots"] = [relative(r, base) for r in section["roots"]]
            section["append"] = relative_state(section["append"], base)
    sink = _Refs(paths)
    walk(plan, sink)
    refs: dict[str, object] = {}
    docs = sink.docs
    for path, doc in docs.items():
        if path == "":
            # the whole hierarchy in the root document: one read opens every array
            doc = dict(doc, consolidated_metadata={
                "kind": "inline", "must_understand": False,
                "metadata": {p: d for p, d in docs.items() if p}})
        refs[_key(path, "zarr.json")] = json.dumps(doc, allow_nan=False)
    refs.update(sink.refs)  # (after every document, as readers of the set expect)
    doc = {"version": 1, "virtualize": section}
    if templates:
        doc["templates"] = templates
    doc["refs"] = refs
    return doc


class _Refs:
    """The walk's sink of a reference set: documents (`docs`, joined into the root's
    consolidated metadata by `kerchunk_refs`) and references (`refs`: [url, offset,
    length] through `paths`, or inline base64); an append's grown documents and new
    references go straight into the set's `refs`."""

    def __init__(self, paths: list[str], refs: dict | None = None) -> None:
        self.paths = paths
        self.docs: dict[str, dict] = {}
        self.refs: dict[str, object] = {} if refs is None else refs

    def group(self, path: str, attrs: dict) -> None:
        self.docs[path] = group_doc(attrs)

    def array(self, name: str, a, g=None) -> None:
        if g is None:
            self.docs[name] = array_doc(a)
            return
        key = _key(name, "zarr.json")
        self.refs[key] = json.dumps(dict(json.loads(self.refs[key]),
                                         shape=[int(n) for n in a.shape],
                                         chunk_grid=chunk_grid(a)), allow_nan=False)

    def chunk(self, name: str, key: str, data: bytes) -> None:
        self.refs[_key(name, key)] = "base64:" + base64.b64encode(data).decode()

    def references(self, name: str, a, g=None) -> None:
        m, paths, refs = a.refs, self.paths, self.refs
        if m.ndim == 0:
            if m["length"]:
                refs[_key(name, "c")] = [paths[int(m["path"])], int(m["offset"]), int(m["length"])]
            return
        idx = np.nonzero(m["length"])
        sel = m[idx]
        prefix = _key(name, "c/")
        if g is None:
            for coords, p, off, n in zip(zip(*(i.tolist() for i in idx)), sel["path"].tolist(),
                                         sel["offset"].tolist(), sel["length"].tolist()):
                refs[prefix + "/".join(map(str, coords))] = [paths[p], off, n]
            return
        for coords, p, off, n in zip(zip(*(i.tolist() for i in idx)), sel["path"].tolist(),
                                     sel["offset"].tolist(), sel["length"].tolist()):
            coords = [c + g.start if ax == g.axis else c for ax, c in enumerate(coords)]
            refs[prefix + "/".join(map(str, coords))] = [paths[p], off, n]


def kerchunk_section(plan: Plan) -> dict:
    return record(plan, ("format", "version", "created_by", "recipe", "sources", "roots",
                         "append"), format="virtualize-kerchunk", version=CUBE_FORMAT_VERSION)


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
    walk_append(merged, _Refs(paths, refs))
    root = json.loads(refs["zarr.json"])
    meta = root.get("consolidated_metadata", {}).get("metadata")
    if isinstance(meta, dict):
        for name in merged.grown:
            meta[name] = json.loads(refs[_key(name, "zarr.json")])
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


def _key(prefix: str, key: str) -> str:
    return f"{prefix}/{key}" if prefix else key
