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

import contextlib
import json
import os
import re
import time
from pathlib import Path

import numpy as np

from ...model import REF_DTYPE, ArrayPlan, Location, Plan, Problem, VirtualizeError
from ..base import CUBE_FORMAT_VERSION
from ..metadata import MANIFEST_FIELD, array_doc, chunk_grid, group_doc
from ..record import finish_growth, grow_record, record, set_times
from ..staging import replace_atomically, staged_dir
from ..walk import walk, walk_append

# the fields of virtualize.json, in order (record.record)
RECORD_LAYOUT = ("format", "version", "created_by", "created", "concat_dim", "recipe", "sources",
                 "roots", "arrays", "groups", "remedies", "notes", "append")
MANIFEST_NAME = "manifest.npy"
SOURCES_NAME = "virtualize.json"


def write_cube(plan: Plan, dest: str | Path, overwrite: bool = False, *,
               relative_to: str | None = None) -> Path:
    """The cube directory at `dest`. `relative_to`: the cube's final location (a path or
    URL); sources and roots are then recorded relative to it where they can be (a
    relocatable cube: move or mirror it together with its files)."""
    dest = Path(dest)
    refuse_own_names(plan, dest)
    with staged_dir(dest, overwrite, [s.path for s in plan.sources]) as stage:
        walk(plan, _NewCube(stage))
        _write_json(stage / SOURCES_NAME, record(
            plan, RECORD_LAYOUT, relative_to, lazy=True,
            format="virtualize-cube",
            version=CUBE_FORMAT_VERSION,
            created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            arrays={name: ("inline" if a.inline is not None else "virtual")
                    for name, a in plan.arrays.items()},
            groups=sorted(g for g in plan.groups if g),  # readers list no directories
            remedies=[r.to_dict() for r in plan.remedies.values() if r.enabled],
            notes=plan.notes))
    return dest


def refuse_own_names(plan: Plan, dest: Path) -> None:
    """Refuse arrays and groups named as a file of the layout: a group's `zarr.json`, the
    root's `virtualize.json` (the node's directory and the document would be one path)."""
    bad = [n for n in [*plan.arrays, *(g for g in plan.groups if g)]
           if "zarr.json" in n.split("/") or n == SOURCES_NAME]
    if bad:
        raise VirtualizeError(
            [Problem(Location(str(dest), n), "cube-unsupported",
                     f"{n} is named as a file of the cube directory's layout (a group's "
                     f"zarr.json, the root's {SOURCES_NAME}): write a kerchunk JSON "
                     "(-o cube.json) instead") for n in bad],
            f"cannot write a cube directory: {len(bad)} problem(s); nothing was written")


class _NewCube:
    """The walk's sink of a new cube directory (`stage`): documents, manifests, chunks."""

    def __init__(self, stage: Path) -> None:
        self.stage = stage

    def group(self, path: str, attrs: dict) -> None:
        _write_json(self.stage / path / "zarr.json", group_doc(attrs))

    def array(self, name: str, a: ArrayPlan) -> None:
        if a.inline is not None:
            _write_json(self.stage / name / "zarr.json", array_doc(a))
            return
        manifest = {"version": CUBE_FORMAT_VERSION, "manifest": MANIFEST_NAME,
                    "sources": "/" + SOURCES_NAME}
        _write_json(self.stage / name / "zarr.json", array_doc(a, manifest))

    def references(self, name: str, a: ArrayPlan) -> None:
        np.save(self.stage / name / MANIFEST_NAME,
                np.asarray(a.refs, dtype=REF_DTYPE).copy(order="C"), allow_pickle=False)

    def chunk(self, name: str, key: str, data: bytes) -> None:
        p = self.stage / name / key
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


class _GrownCube:
    """The append walk's sink of a cube directory (`dest`) staged at `stage` (its files
    hard-linked): grown documents, one new manifest segment per grown virtual array."""

    def __init__(self, dest: Path, stage: Path) -> None:
        self.dest, self.stage = dest, stage

    def array(self, name: str, a: ArrayPlan, g) -> None:
        old = json.loads((self.dest / name / "zarr.json").read_text())
        doc = dict(old, shape=[int(n) for n in a.shape], chunk_grid=chunk_grid(a))
        if a.inline is None:
            field = dict(old[MANIFEST_FIELD])
            _axis, segments = manifest_segments(field)
            self.segment = f"manifest.{len(segments)}.npy"
            field["segments"] = [list(s) for s in segments] + [[g.start, self.segment]]
            field["axis"] = g.axis
            doc[MANIFEST_FIELD] = field
        _replace(self.stage / name / "zarr.json", _json(doc))

    def references(self, name: str, a: ArrayPlan, g) -> None:
        np.save(self.stage / name / self.segment,
                np.asarray(a.refs, dtype=REF_DTYPE).copy(order="C"), allow_pickle=False)

    def chunk(self, name: str, key: str, data: bytes) -> None:
        _replace(self.stage / name / key, data)


# -- manifest segments (appends) ------------------------------------------------------------

def manifest_segments(field: dict) -> tuple[int, list[tuple[int, str]]]:
    """(axis, [(first chunk index along the axis, file name), ...]) of a virtual array's
    manifest: one file (`manifest.npy`) as written, one more per `virtualize append`
    (`manifest.1.npy`, ...) holding the chunks it added along the concatenation axis."""
    segments = field.get("segments")
    if segments is None:
        name = field.get("manifest", MANIFEST_NAME)
        if not (isinstance(name, str) and _SEGMENT.fullmatch(name)):
            raise ValueError(f"its manifest file name {name!r} is not manifest[.N].npy")
        return 0, [(0, name)]
    if not isinstance(segments, list) or not all(
            isinstance(s, list) and len(s) == 2 and type(s[0]) is int and
            isinstance(s[1], str) for s in segments):
        raise ValueError("its manifest segments are not a list of [first chunk, file name]")
    # segment i is manifest.npy (i = 0), else manifest.i.npy: the order is in the names
    names = [MANIFEST_NAME] + [f"manifest.{i}.npy" for i in range(1, len(segments))]
    if [s[1] for s in segments] != names:
        raise ValueError(f"its manifest segments are not named {', '.join(names)} in order")
    starts = [s[0] for s in segments]
    if starts[:1] != [0] or starts != sorted(set(starts)):
        raise ValueError("its manifest segments do not start at 0 in increasing order")
    axis = field.get("axis", 0)
    if type(axis) is not int or axis < 0:
        raise ValueError(f"its manifest segments' axis {axis!r} is not a whole number")
    return axis, [(int(a), str(b)) for a, b in segments]


_SEGMENT = re.compile(r"manifest(\.[1-9][0-9]*)?\.npy")


def append_cube(dest: str | Path, merged, info: dict, new_sources: list[str],
                relative_to: str | None = None) -> Path:
    """Grow the cube directory at `dest` by `merged` (plan/_state.py `Merged`): a new
    manifest segment per grown virtual array, its zarr.json (shape, chunk grid, segments),
    inline arrays' chunk, and virtualize.json rewritten; every other file of the cube is
    hard-linked, untouched (old segments keep their inode and mtime), into a staging
    directory that replaces the cube in one exchange of names when complete."""
    dest = Path(dest)
    plan = merged.plan
    with staged_dir(dest, True, new_sources) as stage:
        for dirpath, _dirs, files in os.walk(dest):
            rel = Path(dirpath).relative_to(dest)
            (stage / rel).mkdir(parents=True, exist_ok=True)
            for f in files:
                os.link(Path(dirpath) / f, stage / rel / f)
        walk_append(merged, _GrownCube(dest, stage))
        info = grow_record(dict(info), merged, [s.path for s in merged.sources
                                                 [len(merged.old_sources):]],
                           rel=relative_to, old_base=relative_to)
        info["notes"] = list(info.get("notes") or []) + [
            n for n in plan.notes if n not in (info.get("notes") or [])]
        finish_growth(info, plan, relative_to)
        # (compact: the C encoder; a source table of 10,000 files indented takes 10x as long)
        _replace(stage / SOURCES_NAME, json.dumps(info, allow_nan=False).encode())
    return dest


def refresh_cube(dest: str | Path, times: dict[int, int]) -> None:
    """Record new modification times (source index -> mtime_ns) of touched sources in a
    cube directory's virtualize.json, replaced in one rename (readers see either)."""
    path = Path(dest) / SOURCES_NAME
    info = json.loads(path.read_text())
    set_times(info["sources"], times)
    replace_atomically(path, json.dumps(info, allow_nan=False).encode())


def _json(doc: dict) -> bytes:
    return json.dumps(doc, indent=2, allow_nan=False).encode()


def _replace(path: Path, data: bytes) -> None:
    """Write a file of the staging directory that may be a hard link to the cube's own:
    a new file, never into the linked one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    path.write_bytes(data)


def _write_json(path: Path, doc: dict) -> None:
    """As `json.dumps(doc, indent=2)`, written as it is encoded (the document of a large
    stack is never held whole, nor the pieces it is joined from)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for piece in json.JSONEncoder(indent=2, allow_nan=False).iterencode(doc):
            f.write(piece)
