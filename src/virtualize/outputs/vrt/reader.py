"""Reading back a VRT virtualize wrote: through the kerchunk references of the same plan
it records in `<Metadata domain="virtualize">` (sources, roots, staleness checked as for
a kerchunk JSON), after checking that its raster part (bands, sources, placement) is
still what was written with them (its digest): an edited VRT, which GDAL would read
differently from the recorded references, is refused, never read. Any other VRT is
refused too: virtualize does not interpret GDAL's VRT semantics itself."""

from __future__ import annotations

import base64
import json
import os
import re
import zlib
from pathlib import Path

from ...model import Location, Problem, VirtualizeError
from ..access import Access, invalid
from ..record import recorded_roots, resolve_roots, resolve_sources, source_table
from ..references import reference_store
from .writer import META_END, VRT_FORMAT, digest, is_ours

_MDI = re.compile(r'    <MDI key="([a-z]+)">([^<]*)</MDI>\n')
MAX_REFERENCES = 1 << 30  # bytes of the decompressed references a reader accepts


def _parts(path: Path) -> tuple[str, dict[str, str], str]:
    """(first line, the virtualize metadata items, the raster part) of our VRT."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise VirtualizeError([Problem(Location(str(path)), "not-a-cube",
                                       f"cannot be read: {getattr(e, 'strerror', None) or e}")]
                              ) from None
    if not is_ours(text[:4096]):
        raise VirtualizeError([Problem(
            Location(str(path)), "not-a-cube",
            "is a VRT virtualize did not write: virtualize reads back only its own VRTs "
            "(through the references they record); open this one with GDAL")])
    first, _, rest = text.partition("\n")
    meta, sep, body = rest.partition(META_END)
    if not sep:
        raise invalid(path, "its virtualize metadata does not end")
    items = dict(_MDI.findall(meta))
    return first + "\n", items, body


def load(path: str | os.PathLike) -> dict:
    """The recorded kerchunk reference set of our VRT at `path`, its raster part checked
    against the recorded digest."""
    path = Path(path)
    first, items, body = _parts(path)
    if items.get("digest") != digest(first, body):
        raise VirtualizeError([Problem(
            Location(str(path)), "vrt-edited",
            "its bands or sources are not those virtualize wrote (the digest it recorded "
            "differs): GDAL would read other values than the references it records; "
            "refused (write it again with virtualize)")])
    try:
        raw = zlib.decompressobj().decompress(base64.b64decode(items["references"], validate=True),
                                              MAX_REFERENCES)
        doc = json.loads(raw)
    except (KeyError, ValueError, zlib.error) as e:
        raise invalid(path, f"its recorded references cannot be read: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("virtualize"), dict) \
            or doc["virtualize"].get("format") != VRT_FORMAT:
        raise invalid(path, "its recorded references are not virtualize's")
    return doc


def vrt_store(path: str | os.PathLike, *, check_sources: bool = True, allow=None,
              base: str | None = None, strict: bool = False):
    """A read-only zarr store of our VRT (see the module): its recorded references,
    confined to its recorded roots, its sources checked for changes."""
    from ...storage import resolve

    path = Path(path)
    base = base or os.path.dirname(os.path.abspath(path))
    doc = load(path)
    section = doc["virtualize"]
    sources = resolve_sources(source_table(path, section), base)
    roots = resolve_roots(recorded_roots(path, section), base)
    access = Access(path, roots, allow)
    moved = doc.get("templates") and section.get("templates")
    templates = {k: resolve(v, base).rstrip("/") or "/" for k, v in moved.items()} \
        if isinstance(moved, dict) and all(isinstance(v, str) for v in moved.values()) else None
    for s in sources:
        access.check_source(s)
    if check_sources:
        from ..staleness import refuse_stale
        refuse_stale(sources, path, strict=strict)
    return reference_store(doc, path, access, sources, templates)


def refresh_vrt(path: str | os.PathLike, times: dict[int, int]) -> None:
    """Record new modification times (source index -> mtime_ns) of touched sources in the
    VRT's recorded references (the file replaced in one rename; its raster part as it is)."""
    from ..record import set_times
    from ..staging import replace_atomically

    path = Path(path)
    doc = load(path)
    set_times(doc["virtualize"]["sources"], times)
    first, items, body = _parts(path)
    packed = base64.b64encode(zlib.compress(
        json.dumps(doc, allow_nan=False, separators=(",", ":")).encode(), 6)).decode()
    text = path.read_text(encoding="utf-8")
    old = f'    <MDI key="references">{items["references"]}</MDI>\n'
    replace_atomically(path, text.replace(old, f'    <MDI key="references">{packed}</MDI>\n', 1)
                       .encode())
