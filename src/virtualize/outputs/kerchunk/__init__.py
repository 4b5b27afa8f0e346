"""The kerchunk reference JSON plug-in: writer (writer.py) and reader (reader.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..base import OutputKind

# a kerchunk JSON written by virtualize begins with this (its `virtualize` section first)
KERCHUNK_HEAD = b'{"version":1,"virtualize":{"format":"virtualize-kerchunk"'
# ... and, whatever the version of its section, with this
KERCHUNK_PREFIX = KERCHUNK_HEAD[:KERCHUNK_HEAD.index(b"{", 1)]


class Kerchunk(OutputKind):
    name = "kerchunk"
    suffixes = (".json",)
    title = "a kerchunk reference file"  # in the usage errors naming what virtualize writes
    fallback = True  # any file is opened as a reference JSON (after the other kinds')

    def detect(self, path: Path, *, by_name: bool = True) -> bool:
        # a file is a reference JSON, whatever its name (`--format kerchunk -o refs`)
        return path.is_file() or (by_name and path.suffix.lower() == ".json" and not path.is_dir())

    def is_ours(self, path: Path) -> bool:
        if not path.is_file():
            return False
        with open(path, "rb") as f:
            return f.read(len(KERCHUNK_HEAD)) == KERCHUNK_HEAD

    def is_ours_remote(self, fs, base: str) -> bool:
        return fs.cat_file(base, start=0, end=200).startswith(KERCHUNK_PREFIX)

    def guess_can_open(self, path: str) -> bool:
        try:
            with open(path, "rb") as f:
                head = f.read(64)
        except OSError:
            return False
        return head.replace(b" ", b"").startswith(KERCHUNK_PREFIX)

    def write(self, plan, dest, overwrite: bool = False, *, relative_to=None) -> Path:
        from .writer import write_kerchunk
        return write_kerchunk(plan, dest, overwrite, relative_to=relative_to)

    def recorded(self, path: Path) -> dict | None:
        from ..record import recorded_in

        # (relative sources: against its directory)
        return recorded_in(path, os.path.dirname(os.path.abspath(path)))

    def array_docs(self, path: Path, plan, along: list[str]):
        import base64

        import numpy as np
        import ujson

        with open(path, "rb") as f:
            doc = ujson.load(f)
        docs: dict[str, dict | None] = {}
        refs = doc["refs"]
        for n in plan.arrays:
            d = refs.get(f"{n}/zarr.json")
            docs[n] = json.loads(d) if isinstance(d, str) else None
        values = {}
        for n in along:
            a, d = plan.arrays[n], docs[n]
            chunk = refs.get(f"{n}/c/" + "/".join("0" * len(a.shape)))
            if d is None or a.dtype.kind == "T" or not isinstance(chunk, str) or \
                    not chunk.startswith("base64:"):
                return docs, None, doc
            values[n] = np.frombuffer(base64.b64decode(chunk[7:]), dtype=a.dtype) \
                .reshape(d["shape"])
        return docs, values, doc

    def grow(self, path: Path, merged, info: dict, new_sources: list[str], *, recipe: dict,
             state) -> list[str]:
        from .writer import append_kerchunk

        outside = append_kerchunk(path, merged, state, new_sources)
        if not outside:
            return []
        return [f"{len(outside)} new file(s) outside the directory the relocatable JSON's "
                f"template names ({outside[0]}, ...) are referenced by absolute path: the "
                "JSON is no longer relocatable as a whole (re-run virtualize --relative with "
                "all the files to make it so)"]

    def relative(self, path: Path, info: dict) -> bool:
        return bool(info.get("templates"))

    def refresh(self, path: Path, info: dict, times: dict[int, int], replan):
        from .writer import refresh_kerchunk
        refresh_kerchunk(path, times)

    def open_store(self, path: Path, *, check_sources: bool = True, allow=None, base=None,
                   strict: bool = False):
        from ...storage import dirname
        from .reader import kerchunk_store
        return kerchunk_store(path, check_sources=check_sources, allow=allow,
                              base=dirname(base) if base else None, strict=strict)


KIND = Kerchunk()
