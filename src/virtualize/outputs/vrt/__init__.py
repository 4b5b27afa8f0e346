"""The GDAL VRT plug-in: writer (writer.py; what it can hold: layout.py) and reader
(reader.py: a VRT virtualize wrote, read back through the references it records)."""

from __future__ import annotations

from pathlib import Path

from ..base import OutputKind


class Vrt(OutputKind):
    # not grown in place (`array_docs`' default): `append` plans the stack again whole
    # and writes the VRT anew (its sources, old and new, as recorded)
    name = "vrt"
    title = "a GDAL VRT of a mosaic or TIFF stack"  # in the usage errors naming what virtualize writes
    suffixes = (".vrt",)
    foreign_hint = "open a VRT virtualize did not write with GDAL"
    reads_windows = True  # GDAL paints whole tiles: a mosaic's padded blocks are no problem

    def refuse_name(self, out, suffix: str, kind: str) -> str:  # (GDAL would take it for one)
        return (f"{out}: a {suffix} name is a GDAL VRT's; the {kind} output is not one (name "
                "it otherwise, or --format vrt)")

    def detect(self, path: Path, *, by_name: bool = True) -> bool:
        # by its name, or a file of another name that virtualize wrote as a VRT
        if path.suffix.lower() == ".vrt" and not path.is_dir():
            return by_name or path.is_file()
        try:
            return self.is_ours(path)
        except OSError:
            return False

    def is_ours(self, path: Path) -> bool:
        from .writer import is_ours

        if not path.is_file():
            return False
        with open(path, "rb") as f:
            return is_ours(f.read(4096).decode("utf-8", "replace"))

    def is_ours_remote(self, fs, base: str) -> bool:
        from .writer import is_ours

        return is_ours(fs.cat_file(base, start=0, end=4096).decode("utf-8", "replace"))

    def guess_can_open(self, path: str) -> bool:
        try:
            return self.is_ours(Path(path))
        except OSError:
            return False

    def write(self, plan, dest, overwrite: bool = False, *, relative_to=None) -> Path:
        from .writer import write_vrt
        return write_vrt(plan, dest, overwrite, relative_to=relative_to)

    def recorded(self, path: Path) -> dict | None:
        import os

        from ..record import resolved
        from .reader import load

        try:
            doc = load(path)
        except Exception:  # noqa: BLE001 - not ours, edited or damaged: nothing recorded
            return None
        info = doc.get("virtualize")
        if isinstance(info, dict) and isinstance(info.get("sources"), list):
            resolved(info, os.path.dirname(os.path.abspath(path)), roots=False, append=True)
            return info
        return None

    def relative(self, path: Path, info: dict) -> bool:
        return bool(info.get("templates"))

    def refresh(self, path: Path, info: dict, times: dict[int, int], replan):
        from .reader import refresh_vrt
        refresh_vrt(path, times)

    def open_store(self, path: Path, *, check_sources: bool = True, allow=None, base=None,
                   strict: bool = False):
        from ...storage import dirname
        from .reader import vrt_store
        return vrt_store(path, check_sources=check_sources, allow=allow,
                         base=dirname(base) if base else None, strict=strict)


KIND = Vrt()
