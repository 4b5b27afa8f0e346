"""The cube directory: zarr.json documents plus one byte-range manifest per array.

Layout (docs/cube-format.md):
    cube.zarr/zarr.json             root group
    cube.zarr/virtualize.json       sources (path, size, mtime) and provenance
    cube.zarr/<array>/zarr.json     array metadata + "virtualize_manifest" extension field
    cube.zarr/<array>/manifest.npy  one (path, offset, length) record per chunk, C order
    cube.zarr/<array>/c/...         materialized chunks of virtual arrays (manifest path
                                    0xFFFFFFFF), encoded with the array's own codecs
    cube.zarr/<array>/c/...         native chunks of arrays stored inline (coordinates)
"""

from __future__ import annotations

import json
import os
import struct
import time
from pathlib import Path

import numpy as np

from .. import __version__
from ..model import REF_DTYPE, ArrayPlan, Plan
from ..storage import relative
from ._staging import staged_dir
from .materialize import materialized_chunks
from .metadata import array_doc, group_doc

CUBE_FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.npy"
SOURCES_NAME = "virtualize.json"


def write_cube(plan: Plan, dest: str | Path, overwrite: bool = False, *,
               relative_to: str | None = None) -> Path:
    """The cube directory at `dest`. `relative_to`: the cube's final location (a path or
    URL); sources and roots are then recorded relative to it where they can be (a
    relocatable cube: move or mirror it together with its files)."""
    dest = Path(dest)
    with staged_dir(dest, overwrite, [s.path for s in plan.sources]) as stage:
        for group, attrs in plan.groups.items():
            _write_json(stage / group / "zarr.json", group_doc(attrs))
        for name, a in plan.arrays.items():
            d = stage / name
            if a.inline is not None:
                _write_json(d / "zarr.json", array_doc(a))
                for key, data in inline_chunks(a):
                    p = d / key
                    p.parent.mkdir(parents=True, exist_ok=True)
                    p.write_bytes(data)
            else:
                manifest = {"version": CUBE_FORMAT_VERSION, "manifest": MANIFEST_NAME,
                            "sources": "/" + SOURCES_NAME}
                _write_json(d / "zarr.json", array_doc(a, manifest))
                np.save(d / MANIFEST_NAME, np.asarray(a.refs, dtype=REF_DTYPE).copy(order="C"),
                        allow_pickle=False)
                for key, data in materialized_chunks(plan, a):  # native chunks at their keys
                    p = d / key
                    p.parent.mkdir(parents=True, exist_ok=True)
                    p.write_bytes(data)
        _write_json(stage / SOURCES_NAME, {
            "format": "virtualize-cube",
            "version": CUBE_FORMAT_VERSION,
            "created_by": f"virtualize {__version__}",
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "concat_dim": plan.concat_dim,
            "recipe": plan.recipe,
            "sources": _relative_sources(plan, relative_to),
            "roots": [relative(r, relative_to) if relative_to else r
                      for r in source_roots([s.path for s in plan.sources])],
            "arrays": {name: ("inline" if a.inline is not None else "virtual")
                       for name, a in plan.arrays.items()},
            "groups": sorted(g for g in plan.groups if g),  # readers list no directories
            "remedies": [r.to_dict() for r in plan.remedies.values() if r.enabled],
            "notes": plan.notes,
        })
    return dest


def _relative_sources(plan: Plan, base: str | None) -> list[dict]:
    out = []
    for s in plan.sources:
        d = s.to_dict()
        if base:
            d["path"] = relative(s.path, base)
        out.append(d)
    return out


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


def inline_chunks(a: ArrayPlan):
    """(chunk key, encoded bytes) of an inline array: one chunk holding all values,
    encoded with its `bytes` codec (little-endian, C order)."""
    data = a.inline
    if data is None or data.size == 0:
        return
    key = "c" if data.ndim == 0 else "c/" + "/".join("0" for _ in range(data.ndim))
    if data.dtype.kind == "T":  # zarr's vlen-utf8: item count, then each length and bytes
        items = [str(x).encode("utf-8") for x in data.reshape(-1)]
        yield key, b"".join([struct.pack("<I", len(items)),
                             *(struct.pack("<I", len(b)) + b for b in items)])
        return
    yield key, data.tobytes(order="C")


def _write_json(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, allow_nan=False))
