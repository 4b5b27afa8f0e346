"""The kerchunk reference JSON plug-in: writer (writer.py) and reader (reader.py)."""

from __future__ import annotations

from pathlib import Path

# a kerchunk JSON written by virtualize begins with this (its `virtualize` section first)
KERCHUNK_HEAD = b'{"version":1,"virtualize":{"format":"virtualize-kerchunk"'
# ... and, whatever the version of its section, with this
KERCHUNK_PREFIX = KERCHUNK_HEAD[:KERCHUNK_HEAD.index(b"{", 1)]


class Kerchunk:
    kind = "kerchunk"
    suffixes = (".json",)

    def detect(self, path: Path, *, by_name: bool = True) -> bool:
        # a file is a reference JSON, whatever its name (`--format kerchunk -o refs`)
        return path.is_file() or (by_name and path.suffix.lower() == ".json" and not path.is_dir())

    def ours(self, path: Path) -> bool:
        if not path.is_file():
            return False
        with open(path, "rb") as f:
            return f.read(len(KERCHUNK_HEAD)) == KERCHUNK_HEAD

    def ours_remote(self, fs, base: str) -> bool:
        return fs.cat_file(base, start=0, end=200).startswith(KERCHUNK_PREFIX)

    def looks_like(self, path: str) -> bool:
        try:
            with open(path, "rb") as f:
                head = f.read(64)
        except OSError:
            return False
        return head.replace(b" ", b"").startswith(KERCHUNK_PREFIX)

    def write(self, plan, dest, overwrite: bool = False, *, relative_to=None) -> Path:
        from .writer import write_kerchunk
        return write_kerchunk(plan, dest, overwrite, relative_to=relative_to)

    def append(self, dest, merged, doc: dict, new_sources: list[str]) -> list[str]:
        from .writer import append_kerchunk
        return append_kerchunk(dest, merged, doc, new_sources)

    def open_store(self, path: Path, *, check_sources: bool = True, allow=None, base=None,
                   strict: bool = False):
        from ...storage import dirname
        from .reader import kerchunk_store
        return kerchunk_store(path, check_sources=check_sources, allow=allow,
                              base=dirname(base) if base else None, strict=strict)


KIND = Kerchunk()
