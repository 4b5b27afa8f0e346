"""Reading a kerchunk reference JSON (virtualize's or any other): a zarr store over
fsspec's `reference://` filesystem, every reference confined and checked first."""

from __future__ import annotations

import os
from pathlib import Path

from ...model import Location, Problem, VirtualizeError
from ..access import Access, invalid
from ..base import register_codecs
from ..cube.reader import load_json
from ..record import recorded_roots, resolve_roots, resolve_sources, source_table


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


def reference_store(doc: dict, path: Path, access: Access, sources, templates=None):
    """A read-only zarr store over a kerchunk reference dict, every reference checked
    against `access` (and, when `sources` is given, against that source table);
    `templates` override the set's own (a relocated set's resolved `u`)."""
    from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper
    from fsspec.implementations.local import LocalFileSystem
    from fsspec.implementations.reference import ReferenceFileSystem
    from zarr.storage import FsspecStore

    register_codecs()  # its arrays' documents are parsed as they are reached
    local = AsyncFileSystemWrapper(LocalFileSystem(), asynchronous=True)
    try:
        # given only the local file system, building it opens nothing and imports no
        # remote file system a reference names; templates and `gen` are expanded
        fs = ReferenceFileSystem(doc, fs={None: local, "file": local}, asynchronous=True,
                                 skip_instance_cache=True, template_overrides=templates)
    except Exception as e:  # noqa: BLE001 - any malformed reference set
        raise invalid(path, f"not a kerchunk reference set: {e}") from None
    remote = _check_references(path, fs.references, access, sources)
    if remote:  # allowed: the file systems of their protocols too, each with its options
        from ... import storage
        fss = {None: local, "file": local, **storage.async_filesystems(remote)}
        fs = ReferenceFileSystem(doc, fs=fss, asynchronous=True, skip_instance_cache=True,
                                 template_overrides=templates)
    return FsspecStore(fs, read_only=True, path="")


def _check_references(path: Path, refs, access: Access, sources) -> bool:
    """Every reference of a kerchunk set is allowed and, for a set written by virtualize,
    names a recorded source and lies inside it. The protocols of the remote URLs."""
    from ...storage import protocol
    sizes = {s["path"]: s["size"] for s in sources} if sources is not None else None
    remote: set[str] = set()
    for key, ref in refs.items():
        if not isinstance(ref, list):
            continue  # inline data
        if len(ref) not in (1, 3):
            raise invalid(path, f"reference {key}: {ref!r:.200} is not [url] or [url, offset, "
                                "length]")
        url = ref[0]
        why = access.refusal(url)
        if why is not None:
            raise VirtualizeError([Problem(Location(str(path), key.rpartition("/c")[0] or None),
                                           "reference-not-allowed", f"{key}: {why}")],
                                  f"{path}: refused to follow a reference (see "
                                  "Confinement in `virtualize docs reading`)")
        if isinstance(url, str) and protocol(url) not in (None, "file"):
            remote.add(protocol(url))
        if sizes is None:
            continue
        size = sizes.get(url)
        if size is None:
            raise VirtualizeError([Problem(Location(str(path), key.rpartition("/c")[0] or None),
                                           "reference-not-allowed",
                                           f"{key}: {url} is not in its source table")])
        if len(ref) == 3:
            off, n = ref[1], ref[2]
            if not (isinstance(off, int) and isinstance(n, int) and 0 <= off
                    and 0 <= n <= size - off):
                raise VirtualizeError([Problem(
                    Location(str(path), key.rpartition("/c")[0] or None), "invalid-reference",
                    f"{key} wants {n!r} bytes at {off!r} of {url}, which has {size} bytes")],
                    f"{path}: a reference lies outside its source: edited or damaged")
    return remote
