"""The cube directory plug-in: writer (writer.py) and reader (reader.py, CubeStore)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ..base import OutputKind

CUBE_FILES = {"zarr.json", "virtualize.json", "manifest.npy"}


class Cube(OutputKind):
    name = "cube"
    suffixes = (".zarr", "")  # and any other name: the default kind
    title = "a cube directory"  # in the usage errors naming what virtualize writes
    remote_marker = "virtualize.json"
    root_documents = ("virtualize.json", "zarr.json")  # (the root group's, last)

    def detect(self, path: Path, *, by_name: bool = True) -> bool:
        return not path.is_file()  # what no other kind takes: checked when read

    def is_ours(self, path: Path) -> bool:
        return path.is_dir() and (path / "virtualize.json").is_file() and _is_cube_dir(path)

    def is_ours_remote(self, fs, base: str) -> bool:
        info = json.loads(fs.cat_file(base + "/virtualize.json"))
        return isinstance(info, dict) and info.get("format") == "virtualize-cube"

    def guess_can_open(self, path: str) -> bool:
        return os.path.isfile(os.path.join(path, "virtualize.json"))

    def write(self, plan, dest, overwrite: bool = False, *, relative_to=None) -> Path:
        from .writer import write_cube
        return write_cube(plan, dest, overwrite, relative_to=relative_to)

    def recorded(self, path: Path) -> dict | None:
        from ..record import resolved
        from .writer import SOURCES_NAME

        p = path / SOURCES_NAME
        info = json.loads(p.read_text()) if p.is_file() else None
        if isinstance(info, dict) and isinstance(info.get("sources"), list):
            resolved(info, os.path.abspath(path), roots=False, append=True)
        return info

    def array_docs(self, path: Path, plan, along: list[str]):
        import zarr
        from zarr.storage import LocalStore

        docs: dict[str, dict | None] = {}
        for n in plan.arrays:
            try:
                docs[n] = json.loads((path / n / "zarr.json").read_text())
            except (OSError, ValueError):
                docs[n] = None
        values = {n: zarr.open_array(LocalStore(path / n, read_only=True), mode="r")[...]
                  for n in along if docs[n]}
        return docs, values, None

    def grow(self, path: Path, merged, info: dict, new_sources: list[str], *, recipe: dict,
             state) -> list[str]:
        from .writer import SOURCES_NAME, append_cube

        raw = json.loads((path / SOURCES_NAME).read_text())
        append_cube(path, merged, raw, new_sources, relative_to=relative_location(path))
        return []

    def relative(self, path: Path, info: dict) -> bool:
        return relative_location(path) is not None

    def refresh(self, path: Path, info: dict, times: dict[int, int], replan):
        from .writer import refresh_cube
        refresh_cube(path, times)

    def open_store(self, path: Path, *, check_sources: bool = True, allow=None, base=None,
                   strict: bool = False):
        from ..base import ConsolidatedView
        from .reader import CubeStore
        return ConsolidatedView(CubeStore(path, check_sources=check_sources, allow=allow,
                                          base=base, strict=strict))

    def open_remote(self, url: str, *, check_sources: bool = True, allow=None,
                    strict: bool = False):
        # read in place, nothing downloaded: its manifests by byte range
        from ...model import VirtualizeError
        from ..base import ConsolidatedView
        from .reader import CubeStore, RemoteFiles
        from .writer import SOURCES_NAME

        files = RemoteFiles(url)
        try:
            info = files.read(SOURCES_NAME)
        except VirtualizeError:
            return None
        if info is None:
            return None
        files.cached[SOURCES_NAME] = info
        return ConsolidatedView(CubeStore(url, check_sources=check_sources, allow=allow,
                                          _files=files, strict=strict))


def relative_location(cube: Path) -> str | None:
    """The cube directory's location when it records its sources relative to it."""
    from ... import storage
    from .writer import SOURCES_NAME

    raw = json.loads((cube / SOURCES_NAME).read_text())
    if any(isinstance(s, dict) and not storage.is_url(s.get("path", "")) and
           not os.path.isabs(s.get("path", "")) for s in raw.get("sources") or []):
        return os.path.abspath(cube)
    return None


def _is_cube_dir(p: Path) -> bool:
    try:
        info = json.loads((p / "virtualize.json").read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(info, dict) or info.get("format") != "virtualize-cube":
        return False
    # nothing but what the cube writer makes: documents, manifests, chunk files c/i/j/k
    for dirpath, dirs, files in os.walk(p):
        rel = Path(dirpath).relative_to(p).parts
        for name in dirs + files:
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                return False
            if name in dirs:
                continue
            parts = rel + (name,)
            if name in CUBE_FILES or re.fullmatch(r"manifest\.[1-9][0-9]*\.npy", name):
                continue  # (manifest.N.npy: the segments appends add)
            if "c" in parts:
                after = parts[parts.index("c") + 1:]
                if all(x.isdigit() for x in after):
                    continue
            return False
    return True


KIND = Cube()
