"""Opening an output of any kind (`virtualize.open`, the xarray backend): the kind is
found by outputs/registry.py, its reader returns a confined, checked, read-only zarr
store (docs/reading.md: Confinement, Staleness)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (imported where used: `import virtualize` imports this module)
    import zarr
    from zarr.abc.store import Store


def open_cube(path: str | os.PathLike, *, check_sources: bool = True, allow=None,
              strict: bool = False) -> zarr.Group:
    """Open an output virtualize wrote (a cube directory, a kerchunk reference JSON, an
    Icechunk repository, ...) as a read-only zarr group. `allow`: more roots (paths, or URL prefixes)
    the reader may open files in (docs/reading.md, Confinement). `strict`: a touched
    source (blocks unchanged: docs/reading.md, Staleness) is refused, not a warning."""
    from .model import VirtualizeError
    from .outputs.access import invalid
    from .outputs.base import rectilinear_enabled
    from .outputs.sparse import open_group

    with rectilinear_enabled(codecs=False):  # the store registers them when needed
        store = open_store(path, check_sources=check_sources, allow=allow, strict=strict)
        try:
            return open_group(store)
        except VirtualizeError:
            raise
        except (ValueError, TypeError, KeyError) as e:  # metadata zarr cannot take (edited)
            raise invalid(path, f"its metadata cannot be opened by zarr: {type(e).__name__}: "
                                f"{e}") from None


def open_store(path: str | os.PathLike, *, check_sources: bool = True, allow=None,
               base: str | None = None, strict: bool = False) -> Store:
    """The read-only zarr store of an output of any kind (checked and confined).
    `base`: where it really is (the URL of a downloaded copy), for relative sources."""
    from .outputs import registry
    from .storage import is_url, normalize
    if is_url(path):
        url = normalize(path).rstrip("/")
        for kind in registry.kinds():  # (a cube directory: read in place)
            store = kind.open_remote(url, check_sources=check_sources, allow=allow,
                                     strict=strict)
            if store is not None:
                return store
        # any other (a kerchunk JSON, an Icechunk repository): copied here first
        import tempfile

        from .outputs.remote import download
        tmp = tempfile.mkdtemp(prefix="virtualize-open-")
        import shutil
        import weakref

        try:
            local = download(normalize(path), tmp)
            # relative sources (a relocatable output) resolve against its URL
            store = open_store(local, check_sources=check_sources, allow=allow,
                               base=normalize(path), strict=strict)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        weakref.finalize(store, shutil.rmtree, tmp, True)  # the copy goes with the store
        return store
    path = Path(path)
    kind = registry.by_name(registry.kind_at(path))
    return kind.open_store(path, check_sources=check_sources, allow=allow, base=base,
                           strict=strict)


def plan_store(plan, allow=None):
    """A read-only in-memory zarr store of a plan (nothing written): its metadata and
    inline values in memory, its chunks read from the sources by byte range, as the
    kerchunk export would serve them; confined to the sources' directories and `allow`."""
    from .outputs.access import Access
    from .outputs.record import source_roots
    from .outputs.references import reference_set, reference_store

    doc = reference_set(plan, None)
    sources = [s.to_dict() for s in plan.sources]
    access = Access("(in-memory plan)", source_roots([s["path"] for s in sources]), allow)
    return reference_store(doc, Path("(in-memory plan)"), access, sources)
