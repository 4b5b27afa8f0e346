"""Reading back a VRT virtualize wrote: through the kerchunk references of the same plan
it records in `<Metadata domain="virtualize">` (sources, roots, staleness checked as for
a kerchunk JSON), after checking that its raster part (bands, sources, placement) is
still what was written with them (its digest): an edited VRT, which GDAL would read
differently from the recorded references, is refused, never read. The chunks it records
as windows of its sources (a mosaic's padded or cut blocks: `WindowStore`) are decoded
from them by the format's library (tifffile), as GDAL paints those windows of the whole
tiles. Any other VRT is refused too: virtualize does not interpret GDAL's VRT semantics
itself."""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import os
import re
import zlib
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from zarr.abc.buffer import Buffer, BufferPrototype
from zarr.abc.store import ByteRequest, Store
from zarr.buffer import default_buffer_prototype

from ...model import Location, Problem, VirtualizeError
from ..access import Access, invalid
from ..readonly import ReadOnlyStore, slice_bytes
from ..record import recorded_roots, resolve_roots, resolve_sources, source_table
from ..references import ref_key, reference_store
from .writer import META_END, VRT_FORMAT, VRT_VERSION, WINDOWS_VERSION, digest, is_ours, pack

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
    return _load(Path(path))[0]


def _unpack(path: Path, items: dict[str, str], key: str):
    try:
        raw = zlib.decompressobj().decompress(base64.b64decode(items[key], validate=True),
                                              MAX_REFERENCES)
        return json.loads(raw)
    except (KeyError, ValueError, zlib.error) as e:
        raise invalid(path, f"its recorded {key} cannot be read: {e}") from None


def _load(path: Path) -> tuple[dict, dict]:
    """(the recorded reference set, the recorded windows: {} when none)."""
    first, items, body = _parts(path)
    if items.get("version") not in (str(VRT_VERSION), str(WINDOWS_VERSION)):
        raise invalid(path, f"its virtualize metadata is of version {items.get('version')!r}, "
                            "which this virtualize does not read (written by a newer one?)")
    if items.get("digest") != digest(first, body, items.get("windows")):
        raise VirtualizeError([Problem(
            Location(str(path)), "vrt-edited",
            "its bands, sources or windows are not those virtualize wrote (the digest it "
            "recorded differs): GDAL would read other values than the references it "
            "records; refused (write it again with virtualize)")])
    doc = _unpack(path, items, "references")
    if not isinstance(doc, dict) or not isinstance(doc.get("virtualize"), dict) \
            or doc["virtualize"].get("format") != VRT_FORMAT:
        raise invalid(path, "its recorded references are not virtualize's")
    windows = _unpack(path, items, "windows") if "windows" in items else {}
    if not isinstance(windows, dict):
        raise invalid(path, "its recorded windows are not an object")
    return doc, windows


def vrt_store(path: str | os.PathLike, *, check_sources: bool = True, allow=None,
              base: str | None = None, strict: bool = False):
    """A read-only zarr store of our VRT (see the module): its recorded references,
    confined to its recorded roots, its sources checked for changes."""
    from ...storage import resolve

    path = Path(path)
    base = base or os.path.dirname(os.path.abspath(path))
    doc, windows = _load(path)
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
    store = reference_store(doc, path, access, sources, templates)
    return WindowStore(store, _windows(path, doc, windows, sources)) if windows else store


def _windows(path: Path, doc: dict, windows: dict, sources: list) -> dict[str, tuple]:
    """The recorded windows checked: chunk key -> (array's zarr.json, source path,
    variable, region, chunk shape); each names a recorded source (`vrt_store` checked every
    one against the roots) and a chunk of an array of the VRT."""
    out: dict[str, tuple] = {}
    for name, cells in windows.items():
        raw = doc["refs"].get(ref_key(name, "zarr.json"))
        if not isinstance(raw, str) or not isinstance(cells, list):
            raise invalid(path, f"its recorded windows name {name!r}, not an array of it")
        meta = json.loads(raw)
        ndim = len(meta.get("shape") or ())
        for cell in cells:
            ok = isinstance(cell, list) and len(cell) == 5
            key, source, variable, region, shape = cell if ok else (None,) * 5
            ok = ok and isinstance(key, str) and key.startswith("c/") \
                and isinstance(source, int) and 0 <= source < len(sources) \
                and isinstance(variable, str) and isinstance(region, list) \
                and isinstance(shape, list) and len(shape) == ndim \
                and all(isinstance(n, int) and n > 0 for n in shape) \
                and len(region) <= ndim and all(
                    isinstance(r, list) and len(r) == 2 and all(isinstance(v, int) for v in r)
                    and 0 <= r[0] < r[1] for r in region)
            if not ok:
                raise invalid(path, f"a recorded window of {name} is not [chunk key, source, "
                                    f"variable, region, chunk shape]: {cell!r:.200}", name)
            out[ref_key(name, key)] = (meta, sources[source]["path"], variable,
                                       tuple(tuple(r) for r in region), tuple(shape))
    return out


@functools.cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=4, thread_name_prefix="virtualize-vrt-window")


class WindowStore(ReadOnlyStore):
    """A VRT's store: its references' store (`inner`), and the chunks recorded as windows of
    their sources (`windows`, chunk key -> what `_windows` gives) decoded from the source by
    the format's library (`formats.SourceReader`: tifffile for a TIFF) and encoded again
    with the array's codecs (checked to give back the same values), as the materialize
    remedy copies them, but at reading. Read-only."""

    def __init__(self, inner: Store, windows: dict[str, tuple]) -> None:
        super().__init__()
        self._inner, self._windows = inner, windows

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WindowStore) and other._inner == self._inner \
            and other._windows is self._windows

    def _get_bytes(self, key: str) -> bytes | None:  # (a window's: in `_pool`'s threads)
        from ...formats import SourceReader
        from ..materialize import encode_chunk

        meta, path, variable, region, shape = self._windows[key]
        name = key.rpartition("/c/")[0]
        with SourceReader(path) as reader:
            values = reader.read(variable, region)
        return encode_chunk(meta, shape, values, Location(path, name or None))

    async def get(self, key: str, prototype: BufferPrototype | None = None,
                  byte_range: ByteRequest | None = None) -> Buffer | None:
        prototype = prototype or default_buffer_prototype()
        if key not in self._windows:
            return await self._inner.get(key, prototype, byte_range)
        # (in threads of its own: the encoding waits on zarr's loop, whose default
        # executor decodes the chunks that loop is reading)
        data = await asyncio.get_running_loop().run_in_executor(_pool(), self._get_bytes, key)
        return prototype.buffer.from_bytes(slice_bytes(data, byte_range))

    async def exists(self, key: str) -> bool:
        return key in self._windows or await self._inner.exists(key)

    async def list(self) -> AsyncIterator[str]:
        async for key in self._inner.list():
            yield key
        for key in self._windows:
            yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        seen = set()
        async for entry in self._inner.list_dir(prefix):
            seen.add(entry)
            yield entry
        base = prefix.rstrip("/") + "/" if prefix else ""
        for key in self._windows:
            if key.startswith(base):
                entry = key[len(base):].split("/", 1)[0]
                if entry not in seen:
                    seen.add(entry)
                    yield entry


def refresh_vrt(path: str | os.PathLike, times: dict[int, int]) -> None:
    """Record new modification times (source index -> mtime_ns) of touched sources in the
    VRT's recorded references (the file replaced in one rename; its raster part as it is)."""
    from ..record import set_times
    from ..staging import replace_atomically

    path = Path(path)
    doc = load(path)
    set_times(doc["virtualize"]["sources"], times)
    first, items, body = _parts(path)
    packed = pack(doc)
    text = path.read_text(encoding="utf-8")
    old = f'    <MDI key="references">{items["references"]}</MDI>\n'
    replace_atomically(path, text.replace(old, f'    <MDI key="references">{packed}</MDI>\n', 1)
                       .encode())
