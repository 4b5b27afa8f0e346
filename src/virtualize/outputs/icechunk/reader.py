"""Reading an Icechunk repository virtualize wrote (or any other): a read-only store of
its main branch, only the virtual chunk containers inside the allowed roots authorized."""

from __future__ import annotations

import os

from ..access import Access, not_allowed
from .writer import _container, _credentials, recorded


def open_icechunk(path: str | os.PathLike, allow=None, base: str | None = None):
    """A read-only zarr store of an Icechunk repo's main branch. Only the virtual chunk
    containers inside the allowed roots are authorized (outputs/access.py): the roots recorded by
    virtualize in the last commit (or the repository's own directory, for one it did not
    write) and the caller's `allow`. A container outside them is refused. A relocatable
    repository's `relative` container is re-pointed at its location (`base`: the URL it
    was read from)."""
    import icechunk as ic

    storage = ic.local_filesystem_storage(str(path))
    config = ic.Repository.fetch_config(storage)
    containers = (config.virtual_chunk_containers or {}) if config else {}
    info = recorded(path, base) if containers else None
    moved = (info or {}).get("containers") or {}
    for name, prefix in moved.items():
        if any(c.name == name for c in containers.values()):
            config.set_virtual_chunk_container(_container(prefix, name))
    prefixes = list((config.virtual_chunk_containers or {}) if config else {})
    roots = (info or {}).get("roots")
    if not isinstance(roots, list):
        roots = [os.path.dirname(os.path.realpath(path))]
    access = Access(path, roots, allow)
    for s in (info or {}).get("sources") or []:  # a store's chunk linked out of it, ...
        why = access.linked_out(s) if isinstance(s, dict) else None
        if why is not None:
            raise not_allowed(path, why)
    broad = False  # a container wider than the roots (sources in several directories)
    for prefix in prefixes:
        why = access.container(prefix)
        if why is not None:
            if not access.within(prefix):
                raise not_allowed(path, why)
            broad = True
    repo = ic.Repository.open(storage, config=config if moved else None,
                              authorize_virtual_chunk_access=_credentials(prefixes) or None)
    session = repo.readonly_session("main")
    if broad:  # then every virtual chunk's location is checked
        for location in set(session.all_virtual_chunk_locations()):
            access.check(location)
    return session.store
