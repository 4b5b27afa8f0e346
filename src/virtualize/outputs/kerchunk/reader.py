"""Reading a kerchunk reference JSON (virtualize's or any other): a zarr store over
fsspec's `reference://` filesystem (references.py), every reference confined and checked
first."""

from __future__ import annotations

import os
from pathlib import Path

from ...model import Location, Problem, VirtualizeError
from ..access import Access, invalid
from ..base import load_json
from ..record import recorded_roots, resolve_roots, resolve_sources, source_table
from ..references import reference_store


def kerchunk_store(path: str | os.PathLike, *, check_sources: bool = True, allow=None,
                   base: str | None = None, strict: bool = False):
    """A zarr store over a kerchunk reference JSON (fsspec `reference://`). Written by
    virtualize, it records its sources (checked for changes, like a cube directory's) and
    its allowed roots; any other reference set may only reach files under its own
    directory or `allow`. Every reference is checked before the store is returned.
    A relocatable one (sources, roots and template `u` recorded relative) resolves them
    against its directory (`base`: the URL prefix it was read from)."""
    from ...storage import resolve
    path = Path(path)
    base = base or os.path.dirname(os.path.abspath(path))
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise VirtualizeError([Problem(Location(str(path)), "not-a-cube",
                                       f"cannot be read: {e.strerror}")]) from None
    doc = load_json(path, raw, path.name)
    section = doc.get("virtualize")
    templates = None
    if section is not None:
        if not isinstance(section, dict):
            raise invalid(path, "its 'virtualize' section is not an object")
        sources = resolve_sources(source_table(path, section), base)
        roots = resolve_roots(recorded_roots(path, section), base)
        access = Access(path, roots, allow)
        moved = section.get("templates")
        if isinstance(moved, dict) and all(isinstance(v, str) for v in moved.values()):
            templates = {k: resolve(v, base).rstrip("/") or "/" for k, v in moved.items()}
    else:  # not written by virtualize: nothing recorded, its own directory only
        sources = []
        access = Access(path, [os.path.dirname(os.path.realpath(path))], allow)
    for s in sources:
        access.check_source(s)
    if section is not None and check_sources:
        from ..staleness import refuse_stale
        refuse_stale(sources, path, strict=strict)
    return reference_store(doc, path, access, sources if section else None, templates)
