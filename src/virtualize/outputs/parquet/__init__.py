"""The kerchunk parquet reference plug-in (a directory: `.zmetadata` and per-array
`refs.K.parq` records): writer (writer.py) and reader (reader.py)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ..base import OutputKind

# a .zmetadata written by virtualize begins with this (its `virtualize` section first)
PARQUET_HEAD = b'{"virtualize":{"format":"virtualize-parquet"'
ZMETADATA = ".zmetadata"
RECORD = re.compile(r"refs\.[0-9]+\.parq")


def _has_record_size(meta: Path) -> bool:
    try:
        with open(meta, "rb") as f:
            doc = json.loads(f.read())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and "record_size" in doc


class Parquet(OutputKind):
    name = "parquet"
    suffixes = (".parq", ".parquet")
    title = "kerchunk parquet references"  # in the usage errors naming what virtualize writes
    package, extra = "pyarrow", "parquet"
    remote_marker = ZMETADATA
    root_documents = (ZMETADATA,)
    # (registry.refuse_relative: --relative is refused before anything is scanned)
    not_relocatable = ("the parquet form cannot record its sources relative to it (fsspec's "
                       "parquet records have no templates): use --relative with a cube "
                       "directory or a kerchunk JSON")

    def refuse_name(self, out, suffix: str, kind: str) -> str:
        # (kerchunk's readers take a .parq / .parquet name for its parquet form)
        return (f"{out}: virtualize does not write {suffix} files as {kind}: the name "
                "promises kerchunk's parquet form (--format parquet), or name it otherwise")

    def detect(self, path: Path, *, by_name: bool = True) -> bool:
        if path.is_dir():  # (a Zarr v2 store's consolidated .zmetadata has no record_size)
            return self.guess_can_open(str(path)) or _has_record_size(path / ZMETADATA)
        return by_name and not path.exists() and path.suffix.lower() in self.suffixes

    def is_ours(self, path: Path) -> bool:
        if not path.is_dir() or not (path / ZMETADATA).is_file():
            return False
        with open(path / ZMETADATA, "rb") as f:
            if f.read(len(PARQUET_HEAD)) != PARQUET_HEAD:
                return False
        # and nothing but its records (what --overwrite replaces is only what it wrote)
        for p in path.rglob("*"):
            if p.is_symlink():
                return False
            if p.is_dir():
                continue
            if not (p.name == ZMETADATA if p.parent == path else RECORD.fullmatch(p.name)):
                return False
        return True

    def is_ours_remote(self, fs, base: str) -> bool:
        try:
            return fs.cat_file(f"{base}/{ZMETADATA}", start=0, end=200).startswith(PARQUET_HEAD)
        except FileNotFoundError:
            return False

    def guess_can_open(self, path: str) -> bool:
        try:
            with open(os.path.join(path, ZMETADATA), "rb") as f:
                return f.read(len(PARQUET_HEAD)) == PARQUET_HEAD
        except OSError:
            return False

    def write(self, plan, dest, overwrite: bool = False, *, relative_to=None) -> Path:
        from ...model import UsageError
        from .writer import write_parquet

        if relative_to is not None:  # fsspec's records have no templates
            raise UsageError(self.not_relocatable)
        return write_parquet(plan, dest, overwrite)

    def recorded(self, path: Path) -> dict | None:
        from ..record import recorded_in

        return recorded_in(Path(path) / ZMETADATA, os.path.dirname(os.path.abspath(path)))

    def array_docs(self, path: Path, plan, along: list[str]):
        from ..metadata import CHUNK_KEY_ENCODING
        from .reader import read_table
        from .writer import read_zmetadata

        doc = read_zmetadata(path)
        meta = doc["metadata"]
        docs: dict[str, dict | None] = {}
        for n in plan.arrays:
            d = meta.get(f"{n}/zarr.json")
            # as the cube writer's array_doc gives it (the planner compares them)
            docs[n] = dict(d, chunk_key_encoding=CHUNK_KEY_ENCODING) \
                if isinstance(d, dict) else None
        values = {}
        import numpy as np
        for n in along:
            a, d = plan.arrays[n], meta.get(f"{n}/zarr.json")
            if d is None or a.dtype.kind == "T":
                return docs, None, doc
            _, raw = read_table(path, n, d, int(doc["record_size"]), {})
            if 0 not in raw:
                return docs, None, doc
            values[n] = np.frombuffer(raw[0], dtype=a.dtype).reshape(d["shape"])
        return docs, values, doc

    def grow(self, path: Path, merged, info: dict, new_sources: list[str], *, recipe: dict,
             state) -> list[str]:
        from .writer import append_parquet

        append_parquet(path, merged, state, new_sources)
        return []

    def refresh(self, path: Path, info: dict, times: dict[int, int], replan):
        from .writer import refresh_parquet
        refresh_parquet(path, times)

    def open_store(self, path: Path, *, check_sources: bool = True, allow=None, base=None,
                   strict: bool = False):
        from ...model import Location, Problem, VirtualizeError
        from ..base import ConsolidatedView, register_codecs
        from .reader import ParquetStore

        why = self.missing()
        if why is not None:
            raise VirtualizeError([Problem(Location(str(path)), "unreadable", why)])
        register_codecs()
        return ConsolidatedView(ParquetStore(path, check_sources=check_sources, allow=allow,
                                             strict=strict))


KIND = Parquet()
