"""The Icechunk repository plug-in: writer (writer.py) and reader (reader.py,
open_icechunk)."""

from __future__ import annotations

import os
from pathlib import Path

from ..base import OutputKind
from .reader import open_icechunk
from .writer import (
    CHECKSUMS,
    MANIFEST_SPLIT,
    append_icechunk,
    append_icechunk_new,
    recorded,
    refresh_icechunk,
    write_icechunk,
)

ICECHUNK_ENTRIES = {"repo", "config.yaml", "snapshots", "manifests", "transactions", "chunks",
                    "refs", "overwritten", "attributes"}


class Icechunk(OutputKind):
    name = "icechunk"
    suffixes = (".icechunk",)
    title = "an Icechunk repository"  # in the usage errors naming what virtualize writes
    package, extra = "icechunk", "icechunk"
    remote_marker = "repo"
    root_documents = ("repo",)

    def detect(self, path: Path, *, by_name: bool = True) -> bool:
        return path.is_dir() and (path / "repo").exists() and \
            not (path / "virtualize.json").exists()

    def is_ours(self, path: Path) -> bool:
        if not path.is_dir() or (path / "virtualize.json").is_file():
            return False
        entries = set(os.listdir(path))
        return "repo" in entries and entries <= ICECHUNK_ENTRIES

    def is_ours_remote(self, fs, base: str) -> bool:
        return True  # (asked when its `repo` is there)

    def guess_can_open(self, path: str) -> bool:
        return path.rstrip("/").endswith(".icechunk")  # as xarray's zarr backend goes by .zarr

    def write(self, plan, dest, overwrite: bool = False, *, relative_to=None) -> Path:
        return write_icechunk(plan, dest, overwrite, relative_to=relative_to)

    def recorded(self, path: Path) -> dict | None:
        return recorded(path)

    def refuses_growth(self, info: dict) -> str | None:
        if info.get("containers"):  # relocatable (--relative): not supported yet
            return ("this Icechunk repository is relocatable (--relative): appending to it "
                    "is not supported yet; re-run virtualize --relative with all the files")
        return None

    def array_docs(self, path: Path, plan, along: list[str]):
        import json

        import zarr
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.sync import sync

        docs: dict[str, dict | None] = {}
        store = open_icechunk(path)
        for n in plan.arrays:
            buf = sync(store.get(f"{n}/zarr.json", default_buffer_prototype()))
            docs[n] = json.loads(buf.to_bytes()) if buf is not None else None
        values = {n: zarr.open_array(store, path=n, mode="r")[...] for n in along if docs[n]}
        return docs, values, None

    def grow(self, path: Path, merged, info: dict, new_sources: list[str], *, recipe: dict,
             state) -> list[str]:
        append_icechunk_new(path, merged, recipe, info.get("roots") or [],
                            checksums=info.get("checksums"))
        return []

    def commit_rebuild(self, plan, path: Path, added: int) -> bool:
        append_icechunk(plan, path, added=added)
        return True

    def refresh(self, path: Path, info: dict, times: dict[int, int], replan):
        if info.get("checksums") == CHECKSUMS:  # references without times: a new record
            refresh_icechunk(path, None, info, times)
            return None
        # an older repository's references carry the times too: the stack is planned
        # again (the same references, the touched files' block tables being as recorded)
        # to stamp them again, without times
        report = replan()
        if report.ok:
            refresh_icechunk(path, report.plan, info, times)
        return report

    def open_store(self, path: Path, *, check_sources: bool = True, allow=None, base=None,
                   strict: bool = False):
        from ..base import ConsolidatedView
        store = open_icechunk(path, allow=allow, base=base)
        if check_sources:  # as for cube directories: refused at open, not at a chunk's read
            from ..staleness import refuse_stale
            info = recorded(path, base) or {}
            # a touched source is read with a note, as for every kind; but an older
            # repository's references carry their files' times, which Icechunk compares
            # itself: its chunks are refused at read until `verify --refresh`
            refuse_stale(info.get("sources") or [], path, strict=strict,
                         touched_fatal=None if info.get("checksums") == CHECKSUMS else
                         "this repository was written by an older virtualize, whose references "
                         "carry their files' modification times: Icechunk refuses its chunks "
                         "until `virtualize verify --refresh` stamps them again")
        return ConsolidatedView(store)


KIND = Icechunk()

__all__ = ["KIND", "MANIFEST_SPLIT", "append_icechunk", "append_icechunk_new", "open_icechunk",
           "recorded", "refresh_icechunk", "write_icechunk"]
