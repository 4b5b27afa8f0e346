"""What a cube records so that `append` can plan new files without its old ones.

A concatenation is planned against its first file, and every file agrees with it; so the
last file, as the planner last saw it (coordinate re-expressed in the cube's units,
per-block digests and values of the variables every file shares, dtypes, codecs, block
layout, attributes), stands for all of them: the new files' shared variables are compared
with it as with a first file (`plan._common.compare_shared`). `append_state` keeps it as
JSON (no refs: a block table is recorded as its block shape and grid), with the
concatenation dimension and the final set of inlined variables; `resume_from` turns it
back into an inventory (`Resume.last`) that `plan_concat` puts before the new files.
Then `merge_append` takes the new files' part of that plan and joins it to the cube's
arrays (their zarr.json documents): the new chunks along the concatenation axis, or None
when the grown cube would not be the tail of a full rebuild (the caller then rebuilds).
"""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..model import (
    MATERIALIZED,
    REF_DTYPE,
    ArrayPlan,
    BlockTable,
    Cell,
    Dimension,
    FileInventory,
    Location,
    Plan,
    Problem,
    Source,
    Variable,
)

# 2: per-block digests of the variables every file shares (a cube of version 1 is rebuilt
# by `append`: its recorded digests cannot name a block)
STATE_VERSION = 2
VALUES_LIMIT = 4 << 20  # bytes of one variable's values recorded (else re-read if needed)


@dataclass
class Resume:
    """The cube's last step, to plan new files after it."""

    last: FileInventory
    dim: str
    new_axis: bool
    inline: frozenset[str]
    arrays: dict[str, str]  # the cube's arrays: "inline" or "virtual"


# -- JSON without loss: non-finite floats, numpy scalars and arrays -----------------------

def _enc(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return {"$float": repr(x)}
    if isinstance(x, dict):
        return {str(k): _enc(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_enc(v) for v in x]
    if isinstance(x, np.generic):
        return _enc(x.item())
    return x


def _dec(x: Any) -> Any:
    if isinstance(x, dict):
        if set(x) == {"$float"}:
            return float(x["$float"])
        return {k: _dec(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_dec(v) for v in x]
    return x


def _dtype_str(dtype: np.dtype) -> str:
    return "T" if dtype.kind == "T" else dtype.str


def _dtype(s: str) -> np.dtype:
    return np.dtypes.StringDType() if s == "T" else np.dtype(s)


def _array(a: np.ndarray) -> dict:
    if a.dtype.kind == "T":
        return {"dtype": "T", "shape": list(a.shape), "text": [str(x) for x in a.reshape(-1)]}
    return {"dtype": a.dtype.str, "shape": list(a.shape),
            "b64": base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()}


def _unarray(d: dict) -> np.ndarray:
    if d["dtype"] == "T":
        return np.array(d["text"], dtype=np.dtypes.StringDType()).reshape(d["shape"])
    return np.frombuffer(base64.b64decode(d["b64"]), dtype=np.dtype(d["dtype"])) \
        .reshape(d["shape"]).copy()


def _scalar(value: Any, dtype: np.dtype) -> Any:
    if value is None:
        return None
    if dtype.kind == "T" or isinstance(value, str):
        return {"text": str(value)}
    a = np.asarray(value)
    return {"dtype": a.dtype.str, "hex": a.tobytes().hex()}


def _unscalar(d: Any) -> Any:
    if d is None:
        return None
    if "text" in d:
        return d["text"]
    return np.frombuffer(bytes.fromhex(d["hex"]), dtype=np.dtype(d["dtype"]))[0]


def _variable(v: Variable) -> dict:
    d: dict[str, Any] = {
        "dtype": _dtype_str(v.dtype), "shape": list(v.shape), "dims": list(v.dims),
        "attrs": _enc(v.attrs), "fill": _scalar(v.fill_value, v.dtype), "codecs": v.codecs,
        "is_coordinate": v.is_coordinate, "digest": v.digest}
    if v.blocks is not None:
        held = bool((v.blocks.refs["path"] == MATERIALIZED).any())
        d["blocks"] = {"block_shape": list(v.blocks.block_shape), "padded": v.blocks.padded,
                       "grid": list(v.blocks.refs.shape), "held": held}
    if v.values is not None and v.values.nbytes <= VALUES_LIMIT:
        d["values"] = _array(np.asarray(v.values))
    if v.block_digests is not None:  # (compared with the new files': plan._common)
        d["block_digests"] = _array(v.block_digests)
    return d


def _unvariable(name: str, d: dict) -> Variable:
    blocks = None
    if d.get("blocks") is not None:
        b = d["blocks"]
        refs = np.zeros(tuple(b["grid"]), dtype=REF_DTYPE)  # the old references: not needed
        if b.get("held") and refs.size:
            refs.reshape(-1)[0]["path"] = MATERIALIZED
        blocks = BlockTable(tuple(b["block_shape"]), bool(b["padded"]), refs)
    dtype = _dtype(d["dtype"])
    return Variable(name=name, dtype=dtype, shape=tuple(d["shape"]), dims=tuple(d["dims"]),
                    attrs=_dec(d["attrs"]), fill_value=_unscalar(d["fill"]), codecs=d["codecs"],
                    blocks=blocks, values=_unarray(d["values"]) if "values" in d else None,
                    is_coordinate=bool(d["is_coordinate"]), digest=d.get("digest"),
                    block_digests=_unarray(d["block_digests"]) if "block_digests" in d else None)


def inventory_json(inv: FileInventory) -> dict:
    return {
        "path": inv.path, "format": inv.format, "size": inv.size, "mtime_ns": inv.mtime_ns,
        "etag": inv.etag, "groups": _enc(inv.groups),
        "dimensions": {n: [d.size, d.unlimited] for n, d in inv.dimensions.items()},
        "variables": {n: _variable(v) for n, v in inv.variables.items()},
        # the scanner's refusals the cube resolved (by --drop, --inline, --materialize)
        "problems": [{"kind": p.kind, "variable": p.loc.variable, "message": p.message,
                      "remedy": p.remedy} for p in inv.problems if p.fatal and p.loc.variable],
        "data_files": [s.to_dict() for s in inv.data_files],
    }


def inventory_from_json(d: dict) -> FileInventory:
    return FileInventory(
        path=d["path"], format=d["format"], size=int(d["size"]), mtime_ns=int(d["mtime_ns"]),
        groups=_dec(d["groups"]),
        dimensions={n: Dimension(n, int(s), bool(u)) for n, (s, u) in d["dimensions"].items()},
        variables={n: _unvariable(n, v) for n, v in d["variables"].items()},
        problems=[Problem(Location(d["path"], p["variable"]), p["kind"], p["message"],
                          remedy=p.get("remedy")) for p in d["problems"]],
        etag=d.get("etag"),
        data_files=[Source(s["path"], s["size"], s["mtime_ns"], s.get("referenced_by"),
                           s.get("etag")) for s in d["data_files"]])


def append_state(last: FileInventory, dim: str, new_axis: bool, inline,
                 arrays: dict[str, ArrayPlan]) -> dict:
    return {"version": STATE_VERSION, "dim": dim, "new_axis": new_axis,
            "inline": sorted(inline), "last": inventory_json(last),
            "arrays": {n: "inline" if a.inline is not None else "virtual"
                       for n, a in arrays.items()}}


def relocate_state(state: Any, fn) -> Any:
    """A copy of a recorded state with its file paths (the last file's, its data files'
    and the reference sets they were found through) mapped by `fn`: recorded relative to a
    relocatable cube (`storage.relative`), resolved against where it is now when read
    (`storage.resolve`), like its sources. Anything else is returned as it is."""
    if not isinstance(state, dict) or not isinstance(state.get("last"), dict):
        return state
    last = dict(state["last"])
    if isinstance(last.get("path"), str):
        last["path"] = fn(last["path"])
    if isinstance(last.get("data_files"), list):
        last["data_files"] = [
            dict(s, **{k: fn(s[k]) for k in ("path", "referenced_by") if isinstance(s.get(k), str)})
            if isinstance(s, dict) else s for s in last["data_files"]]
    return dict(state, last=last)


def resume_from(state: Any) -> Resume | None:
    """The recorded state, or None when there is none this version reads."""
    try:
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            return None
        return Resume(inventory_from_json(state["last"]), state["dim"], bool(state["new_axis"]),
                      frozenset(state["inline"]), dict(state["arrays"]))
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


# -- joining the new files' part to the cube ----------------------------------------------

def axis_lengths(doc: dict, axis: int) -> list[int] | None:
    """Every chunk's length along `axis` from an array's zarr.json."""
    try:
        n = int(doc["shape"][axis])
        grid = doc["chunk_grid"]
        if grid["name"] == "regular":
            c = int(grid["configuration"]["chunk_shape"][axis])
            return [c] * (-(-n // c)) if c > 0 else []
        spec = grid["configuration"]["chunk_shapes"][axis]
        if isinstance(spec, int):
            return [spec] * (-(-n // spec)) if spec > 0 else []
        out: list[int] = []
        for item in spec:
            if isinstance(item, list):
                out += [int(item[0])] * int(item[1])
            else:
                out.append(int(item))
        return out if n else []
    except (KeyError, TypeError, ValueError, IndexError):
        return None


@dataclass
class Grown:
    """One array of the grown cube: its new metadata, and what to add."""

    array: ArrayPlan  # shape and chunk grid of the whole; refs: the new chunks only
    axis: int | None  # the concatenation axis (None: unchanged)
    start: int  # index of the first new chunk along the axis
    inline_changed: bool = False


@dataclass
class Merged:
    old_sources: list[Source]
    sources: list[Source]  # the cube's, then the new ones
    plan: Plan  # the grown cube's arrays (refs: the new chunks only), sources as above
    grown: dict[str, Grown]  # the arrays an append writes


def still_dropped(combined: dict | None, cube: dict | None, last: dict) -> dict | None:
    """The attributes `combined` over the cube's last file and the new files, less those
    the cube left out although its last file has them: files before it disagreed
    (plan/attrs.py, drop_conflicts), and a full build would leave them out again."""
    if not isinstance(combined, dict) or not isinstance(cube, dict):
        return combined
    return {k: v for k, v in combined.items() if k in cube or k not in last}


def merge_append(plan: Plan, resume: Resume, docs: dict[str, dict | None],
                 old_sources: list[Source], old_inline: dict[str, np.ndarray],
                 array_doc) -> Merged | str:
    """The new files' part of `plan` (planned after `resume.last`) joined to the cube whose
    array documents are `docs` (zarr.json, manifest field included) and sources
    `old_sources`; `old_inline(name)` gives an inline array's stored values;
    `array_doc(array_plan)`: the zarr.json an array plan is written as (the cube writer's,
    passed in: the planner imports no writer). A string (why) when the grown cube would
    differ from a full rebuild beyond its new chunks."""

    last = resume.last
    if set(docs) != set(plan.arrays) or set(resume.arrays) != set(plan.arrays):
        return "the arrays differ from the cube's"
    index = {s.path: i for i, s in enumerate(old_sources)}
    sources = list(old_sources)
    remap = np.zeros(len(plan.sources), dtype=np.uint32)
    for i, s in enumerate(plan.sources):
        j = index.get(s.path)
        if j is None:
            j = index[s.path] = len(sources)
            sources.append(s)
        remap[i] = j
    dim = plan.concat_dim
    grown: dict[str, Grown] = {}
    arrays: dict[str, ArrayPlan] = {}
    for name, a in plan.arrays.items():
        doc = docs[name]
        if doc is None:
            return f"{name}: no zarr.json"
        if (resume.arrays[name] == "virtual") != (a.inline is None):
            return f"{name}: stored differently (inline / referenced)"
        new_doc = json.loads(json.dumps(array_doc(a)))
        # (attributes: those that change what the numbers mean were checked against the
        # cube's last file; the others combined with it, plan/attrs.py: one the new files
        # give another value makes the cube's differ from a rebuild's)
        v_last = last.variables.get(name)
        new_doc["attributes"] = still_dropped(new_doc.get("attributes"), doc.get("attributes"),
                                              v_last.attrs if v_last is not None else {})
        for key in new_doc:
            if key not in ("shape", "chunk_grid") and new_doc[key] != doc.get(key):
                return f"{name}: its {key} differ from the cube's"
        if dim not in a.dims:
            if new_doc["shape"] != doc.get("shape") or new_doc["chunk_grid"] != doc.get("chunk_grid"):
                return f"{name}: its shape or chunks differ from the cube's"
            arrays[name] = a  # unchanged (not written)
            continue
        k = a.dims.index(dim)
        v = last.variables.get(name)
        p_n = v.shape[k] if v is not None and dim in v.dims else 1  # (a new axis: one step)
        old_n = int(doc["shape"][k])
        shape = list(a.shape)
        shape[k] = old_n + a.shape[k] - p_n
        if a.inline is not None:
            old = old_inline[name]
            new = np.take(a.inline, range(p_n, a.inline.shape[k]), axis=k)
            old = np.asarray(old, dtype=a.inline.dtype)
            if old.ndim != new.ndim or any(m != n for ax, (m, n) in
                                           enumerate(zip(old.shape, new.shape)) if ax != k):
                return f"{name}: its shape off {dim!r} differs from the cube's"
            data = np.concatenate([old, new], axis=k)
            arrays[name] = replace(a, shape=tuple(data.shape), inline=data,
                                   chunk_lengths=tuple((max(n, 1),) for n in data.shape))
            grown[name] = Grown(arrays[name], k, 0, inline_changed=True)
            continue
        old_lens = axis_lengths(doc, k)
        if old_lens is None or sum(old_lens) != old_n:
            return f"{name}: the cube's last chunk along {dim!r} overhangs its end"
        p_c = v.blocks.refs.shape[k] if v is not None and v.blocks is not None and \
            dim in v.dims else 1
        lens = list(a.chunk_lengths[k])
        if lens[:p_c] != old_lens[len(old_lens) - p_c:]:
            return f"{name}: the cube's last file's chunks along {dim!r} would change"
        refs = np.take(a.refs, range(p_c, a.refs.shape[k]), axis=k).copy()
        stored = refs["path"] != MATERIALIZED
        refs["path"] = np.where(stored, remap[np.where(stored, refs["path"], 0)], MATERIALIZED)
        shift = len(old_lens) - p_c
        cells = {tuple(i + shift if ax == k else i for ax, i in enumerate(key)):
                 Cell(int(remap[c.source]), c.variable, c.region)
                 for key, c in a.materialize.items() if key[k] >= p_c}
        chunk_lengths = list(a.chunk_lengths)
        chunk_lengths[k] = tuple(old_lens + lens[p_c:])
        arrays[name] = replace(a, shape=tuple(shape), chunk_lengths=tuple(chunk_lengths),
                               refs=refs, materialize=cells)
        grown[name] = Grown(arrays[name], k, len(old_lens))
    merged_plan = Plan(sources=sources, groups=plan.groups, arrays=arrays, concat_dim=dim,
                       notes=plan.notes, remedies=plan.remedies, recipe=plan.recipe,
                       append_state=plan.append_state)
    return Merged(list(old_sources), sources, merged_plan, grown)
