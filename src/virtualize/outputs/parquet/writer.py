"""kerchunk's parquet reference layout for zarr v3: a directory fsspec's
`LazyReferenceMapper` (the `reference://` filesystem given a directory) reads, and
`kerchunk.df.refs_to_dataframe` writes for Zarr v2:

    cube.parq/.zmetadata            {"virtualize": {...}, "metadata": {key: document},
                                     "record_size": N}
    cube.parq/tas/refs.0.parq       rows 0 .. N-1 of tas's chunks (C order over its grid),
    cube.parq/tas/refs.1.parq       columns path, offset, size, raw
    ...

What Zarr v3 and the rectilinear grid need of that layout, which fsspec knows only for
Zarr v2 (docs/reading.md, "The parquet form"):

- each array's `zarr.json` names the `v2` chunk key encoding with separator "." (its
  chunks are `tas/0.3.1`): fsspec finds an array's records by the key's last "/", and
  the coordinates by "." (a `c/0/3/1` key would be taken for array `tas/c/0/3`);
- fsspec sizes an array's records by a `.zarray` document (`ceil(shape / chunks)` chunks
  per axis), which a rectilinear grid does not have: beside each `zarr.json`, a stub
  `tas/.zarray` gives the chunk counts as `shape` and 1 as `chunks`. It holds nothing
  else (no `zarr_format`, no `dtype`), so a Zarr v2 reader refuses it rather than read
  the array as regular; zarr ≥ 3 prefers `zarr.json`.

Every chunk of an array's grid has a row: a reference [path, offset, size], inline bytes
(`raw`: an inline array's chunk, a materialized one), or nothing (path and raw null: an
absent chunk, read as the fill value), typed as kerchunk's writer types them, so fsspec
reads them with fastparquet and pyarrow under pandas 2 and 3 (`record_schema`). The
records are written with pyarrow straight from the plan's reference tables (vectorized;
fsspec's writer files v3 `zarr.json` keys as chunk references and sizes its records by
`.zarray` only). The provenance record (the
kerchunk JSON's `virtualize` section) is `.zmetadata`'s first member: fsspec reads only
`metadata` and `record_size`."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np

from ...model import MATERIALIZED, Location, Plan, Problem, VirtualizeError
from ..access import grid_shape
from ..base import CUBE_FORMAT_VERSION
from ..metadata import array_doc, group_doc
from ..record import finish_growth, grow_record, record
from ..staging import replace_atomically, staged_dir
from ..walk import walk, walk_append

FORMAT = "virtualize-parquet"
ZMETADATA = ".zmetadata"
RECORD_SIZE = 100_000  # rows per parquet file (kerchunk's refs_to_dataframe default)
# the chunk keys fsspec's records are found by: tas/0.3.1
CHUNK_KEY_ENCODING = {"name": "v2", "configuration": {"separator": "."}}
STUB_NOTE = ("the chunk counts of zarr.json's grid, for fsspec's LazyReferenceMapper; not a "
             "Zarr v2 array")


def record_schema():
    """The columns of a record as kerchunk's own writer (fsspec's
    `LazyReferenceMapper.write`) stores them, so that fsspec reads them with either
    engine (fastparquet, its default, and pyarrow) under pandas 2 and 3:

    - `offset`, `size`: required int64, 0 where a row has no reference, written with
      statistics (a null count of 0): fastparquet reads an integer column it cannot prove
      null-free as floats, which fsspec cannot take for a byte range (kerchunk's writer
      proves it by its pandas metadata);
    - `path`: optional UTF-8, null for an absent or inline row. pyarrow under pandas ≥ 3
      turns a null string into NaN, which fsspec follows as a URL (it tests `is None`);
      the column is therefore marked in its Arrow schema as Arrow's canonical `opaque`
      extension over `string` (vendor "virtualize"), which pyarrow gives pandas as
      Python strings and None. Parquet's own type is the plain UTF-8 column kerchunk
      writes (fastparquet and other readers see just that);
    - `raw`: optional bytes, the inline chunks."""
    import pyarrow as pa

    return pa.schema([pa.field("path", path_type()), pa.field("offset", pa.int64(), False),
                      pa.field("size", pa.int64(), False), pa.field("raw", pa.binary())])


def path_type():
    import pyarrow as pa

    return pa.opaque(pa.string(), type_name="path", vendor_name="virtualize")


def parquet_doc(a) -> dict:
    """An array's zarr.json as the parquet form writes it (chunk keys `0.3.1`)."""
    return dict(array_doc(a), chunk_key_encoding=CHUNK_KEY_ENCODING)


def stub(doc: dict) -> dict:
    """The `.zarray` stub fsspec sizes the records of the array `doc` by."""
    counts = grid_shape(doc)
    return {"shape": list(counts), "chunks": [1] * len(counts), "note": STUB_NOTE}


class _Tables:
    """The walk's sink: documents, and per array its reference table (the plan's, whole
    grid) and inline bytes by flat chunk index; for an append, the grown arrays only."""

    def __init__(self) -> None:
        self.docs: dict[str, dict] = {}
        self.refs: dict[str, np.ndarray] = {}
        self.raw: dict[str, dict[int, bytes]] = {}
        self.grown: dict = {}

    def group(self, path: str, attrs: dict) -> None:
        self.docs[path] = group_doc(attrs)

    def array(self, name: str, a, g=None) -> None:
        self.docs[name] = parquet_doc(a)
        self.raw.setdefault(name, {})
        if g is not None:
            self.grown[name] = g

    def chunk(self, name: str, key: str, data: bytes) -> None:
        counts = grid_shape(self.docs[name])
        idx = tuple(int(i) for i in key.split("/")[1:])
        flat = int(np.ravel_multi_index(idx, counts)) if counts else 0
        self.raw[name][flat] = data

    def references(self, name: str, a, g=None) -> None:
        self.refs[name] = a.refs


def _metadata(docs: dict[str, dict]) -> dict[str, dict]:
    """`.zmetadata`'s `metadata`: every document (the root's with the hierarchy
    consolidated into it, as the JSON form's) and each array's `.zarray` stub."""
    meta: dict[str, dict] = {}
    for path, doc in docs.items():
        if path == "":
            doc = dict(doc, consolidated_metadata={
                "kind": "inline", "must_understand": False,
                "metadata": {p: d for p, d in docs.items() if p}})
        meta[f"{path}/zarr.json" if path else "zarr.json"] = doc
        if doc.get("node_type") == "array":
            meta[f"{path}/.zarray"] = stub(doc)
    return meta


def write_records(out: Path, name: str, doc: dict, refs: np.ndarray | None,
                  raw: dict[int, bytes], paths: list[str], record_size: int) -> None:
    """The records of array `name` (`refs`: its REF_DTYPE table over the whole grid, or
    None for an inline array; `raw`: flat chunk index -> bytes) as `out/name/refs.K.parq`,
    each `record_size` rows (the last padded with absent rows, as fsspec writes it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    counts = grid_shape(doc)
    total = int(np.prod(counts, dtype=np.int64)) if counts else 1
    if total == 0:
        return
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    flat = refs.reshape(-1) if refs is not None else None
    names = pa.array(paths, type=pa.string())
    raw_at = np.array(sorted(raw), dtype=np.int64)
    for k in range(-(-total // record_size)):
        start, stop = k * record_size, min((k + 1) * record_size, total)
        idx = np.full(record_size, -1, dtype=np.int64)
        offset = np.zeros(record_size, dtype=np.int64)
        size = np.zeros(record_size, dtype=np.int64)
        if flat is not None:
            rows = flat[start:stop]
            virtual = (rows["length"] > 0) & (rows["path"] != MATERIALIZED)
            n = stop - start
            idx[:n] = np.where(virtual, rows["path"].astype(np.int64), -1)
            offset[:n] = np.where(virtual, rows["offset"], 0).astype(np.int64)
            size[:n] = np.where(virtual, rows["length"], 0).astype(np.int64)
        here = raw_at[(raw_at >= start) & (raw_at < stop)]
        raws = [None] * record_size
        for i in here.tolist():
            raws[i - start] = raw[i]
            idx[i - start], offset[i - start], size[i - start] = -1, 0, 0
        path = pa.ExtensionArray.from_storage(path_type(),
                                              names.take(pa.array(idx, mask=idx < 0)))
        table = pa.Table.from_arrays([path, pa.array(offset), pa.array(size),
                                      pa.array(raws, type=pa.binary())], schema=record_schema())
        pq.write_table(table, d / f"refs.{k}.parq", compression="zstd",
                       write_statistics=["offset", "size"])


def write_zmetadata(out: Path, section: dict, meta: dict, record_size: int) -> None:
    doc = {"virtualize": section, "metadata": meta, "record_size": record_size}
    (out / ZMETADATA).write_text(json.dumps(doc, allow_nan=False, separators=(",", ":")))


def parquet_section(plan: Plan) -> dict:
    return record(plan, ("format", "version", "created_by", "recipe", "sources", "roots",
                         "append"), format=FORMAT, version=CUBE_FORMAT_VERSION)


def refuse_meta_names(plan: Plan, dest: Path) -> None:
    """Refuse arrays fsspec's reader would serve no chunk of: it takes every key with a
    component beginning `.z` for Zarr v2 metadata (`LazyReferenceMapper._is_meta`), so
    such an array would read as its fill value without virtualize (and a root
    `.zmetadata` is the set's own file); and sources whose path is not UTF-8."""
    bad = [Problem(Location(str(dest), n), "parquet-unsupported",
                   f"a name with a part beginning '.z' ({n}) is taken by fsspec's parquet "
                   "reader for Zarr v2 metadata: it would serve none of its chunks (read as "
                   "the fill value); write a kerchunk JSON (-o cube.json) or a cube "
                   "(-o cube.zarr) instead")
           for n in plan.arrays if any(part.startswith(".z") for part in n.split("/"))]
    bad += [Problem(Location(s.path), "parquet-unsupported",
                    "its path is not UTF-8 text, which a parquet string column holds only: "
                    "write a cube (-o cube.zarr) instead, or rename it")
            for s in plan.sources if not _utf8(s.path)]
    if bad:
        raise VirtualizeError(bad, f"cannot write kerchunk parquet references: {len(bad)} "
                                   "problem(s); nothing was written")


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # (a file name's undecodable bytes, as surrogates)
        return False
    return True


def write_parquet(plan: Plan, dest: str | Path, overwrite: bool = False, *,
                  record_size: int = RECORD_SIZE) -> Path:
    """The parquet reference set of `plan` at `dest` (staged, published when complete)."""
    dest = Path(dest)
    refuse_meta_names(plan, dest)
    sink = _Tables()
    walk(plan, sink)
    paths = [s.path for s in plan.sources]
    with staged_dir(dest, overwrite, paths) as stage:
        for name in plan.arrays:
            write_records(stage, name, sink.docs[name], sink.refs.get(name), sink.raw[name],
                          paths, record_size)
        write_zmetadata(stage, parquet_section(plan), _metadata(sink.docs), record_size)
    return dest


def read_zmetadata(path: Path) -> dict:
    with open(Path(path) / ZMETADATA, "rb") as f:
        return json.loads(f.read())


def append_parquet(dest: str | Path, merged, doc: dict, new_sources: list[str]) -> None:
    """The set at `dest` (its `.zmetadata` as read: `doc`) grown by `merged`
    (plan/_state.py `Merged`), written again as a new directory published in one step: the
    grown arrays' records rewritten (their old rows, read back, placed in the grown grid
    with the new ones), the others' records copied as they are."""
    from .reader import read_table

    dest = Path(dest)
    plan = merged.plan
    sink = _Tables()
    walk_append(merged, sink)
    meta = dict(doc["metadata"])
    record_size = int(doc["record_size"])
    paths = [s.path for s in merged.sources]
    index = {p: i for i, p in enumerate(paths)}
    with staged_dir(dest, True, new_sources) as stage:
        for name in plan.arrays:
            if name not in sink.grown:
                if (dest / name).is_dir():
                    shutil.copytree(dest / name, stage / name)
                continue
            g = sink.grown[name]
            old_doc = meta[f"{name}/zarr.json"]
            new_doc = sink.docs[name]
            refs, raw = read_table(dest, name, old_doc, record_size, index)
            counts = grid_shape(new_doc)
            if g.array.inline is not None:  # its one chunk written anew
                write_records(stage, name, new_doc, None, sink.raw[name], paths, record_size)
            else:
                grown = np.zeros(counts, dtype=refs.dtype)
                old = grid_shape(old_doc)
                grown[tuple(slice(0, n) for n in old)] = refs
                new = sink.refs[name]
                at = tuple(slice(g.start, g.start + new.shape[ax]) if ax == g.axis
                           else slice(0, new.shape[ax]) for ax in range(len(counts)))
                region = grown[at]  # (a view) absent new rows keep what was there, as
                present = new["length"] > 0  # the JSON form's append does
                region[present] = new[present]
                rawall = {}
                for i, data in raw.items():  # old inline rows, at their grown index
                    rawall[int(np.ravel_multi_index(np.unravel_index(i, old), counts))] = data
                rawall.update(sink.raw[name])
                write_records(stage, name, new_doc, grown, rawall, paths, record_size)
            meta[f"{name}/zarr.json"] = new_doc
            meta[f"{name}/.zarray"] = stub(new_doc)
        root = dict(meta["zarr.json"])
        cons = root.get("consolidated_metadata")
        if isinstance(cons, dict) and isinstance(cons.get("metadata"), dict):
            cons = dict(cons, metadata=dict(cons["metadata"]))
            for name in sink.grown:
                cons["metadata"][name] = meta[f"{name}/zarr.json"]
            root["consolidated_metadata"] = cons
            meta["zarr.json"] = root
        section = finish_growth(grow_record(dict(doc["virtualize"]), merged, new_sources,
                                            rel=None, old_base=os.path.dirname(
                                                os.path.abspath(dest))), plan, None)
        write_zmetadata(stage, section, meta, record_size)


def refresh_parquet(dest: str | Path, times: dict[int, int]) -> None:
    """Record new modification times (source index -> mtime_ns) of touched sources in the
    set's `.zmetadata` (replaced in one rename)."""
    from ..record import set_times

    dest = Path(dest)
    doc = read_zmetadata(dest)
    set_times(doc["virtualize"]["sources"], times)
    replace_atomically(dest / ZMETADATA,
                       json.dumps(doc, allow_nan=False, separators=(",", ":")).encode())

