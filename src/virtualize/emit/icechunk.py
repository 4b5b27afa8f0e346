"""An Icechunk repository (2.x): the same hierarchy, with virtual chunk references.

Virtual chunks point at `file://` URLs of the sources, under one virtual chunk container
whose prefix is the sources' common directory. Each source's references carry its
modification time as the checksum, so Icechunk refuses a chunk whose file changed since
(as `virtualize.open` does for cubes). Inline coordinates and materialized chunks are
native chunks of the repository. Readers authorize the container: `virtualize.open`
does it for them; see docs/reading.md for plain Icechunk.
"""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

import numpy as np

from .. import storage
from ..model import MATERIALIZED, Plan
from ..storage import is_url
from ._staging import staged_dir
from .cube import inline_chunks, source_roots
from .materialize import materialized_chunks
from .metadata import array_doc, group_doc


def container_prefix(plan: Plan) -> str:
    """`file:///common/dir/` of every local source: Icechunk needs a prefix with a path."""
    local = [s.path for s in plan.sources if not is_url(s.path)]
    common = os.path.commonpath([os.path.dirname(p) for p in local] or ["/"])
    return "file://" + common.rstrip("/") + "/"


def container_prefixes(plan: Plan) -> list[str]:
    """One container per bucket or host of the URL sources (`s3://bucket/`,
    `http://host:port/`), and one for the local ones."""
    out = sorted({_url_prefix(s.path) for s in plan.sources if is_url(s.path)})
    if any(not is_url(s.path) for s in plan.sources):
        out.append(container_prefix(plan))
    return out


def _url_prefix(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}/"


def write_icechunk(plan: Plan, dest: str | Path, overwrite: bool = False) -> Path:
    """A new repository at `dest` (staged, published when complete) with one commit."""
    import icechunk as ic

    dest = Path(dest)
    prefixes = container_prefixes(plan)
    with staged_dir(dest, overwrite, [s.path for s in plan.sources], mark=False) as stage:
        config = ic.RepositoryConfig.default()
        config.manifest = manifest_config()
        for prefix in prefixes:
            config.set_virtual_chunk_container(_container(prefix))
        repo = ic.Repository.create(ic.local_filesystem_storage(str(stage)), config,
                                    authorize_virtual_chunk_access=_credentials(prefixes))
        _commit(repo, plan, f"virtualize: {len(plan.arrays)} arrays from "
                            f"{len(plan.sources)} files")
    return dest


MANIFEST_SPLIT = 20000  # chunks per axis in one Icechunk manifest (docs/reading.md)


def manifest_config():
    """Icechunk manifests split every `MANIFEST_SPLIT` chunks along each axis, so reading a
    chunk of a 1,000,000-chunk array loads one small manifest, not all its references."""
    import icechunk as ic

    return ic.ManifestConfig(splitting=ic.ManifestSplittingConfig.from_dict(
        {ic.ManifestSplitCondition.AnyArray(): {ic.ManifestSplitDimCondition.Any(): MANIFEST_SPLIT}}))


def append_icechunk(plan: Plan, dest: str | Path, added: int) -> Path:
    """A new commit on `main` of an existing repository: the grown stack (Icechunk keeps
    the earlier snapshots). A container is added when new files live elsewhere."""
    import icechunk as ic

    storage = ic.local_filesystem_storage(str(dest))
    config = ic.Repository.fetch_config(storage)
    prefixes = list(config.virtual_chunk_containers or {})
    repo = ic.Repository.open(storage, authorize_virtual_chunk_access=_credentials(prefixes))
    if not all(any(("file://" + s.path).startswith(p) for p in prefixes) for s in plan.sources):
        prefix = container_prefix(plan)
        config.set_virtual_chunk_container(_container(prefix))
        repo = ic.Repository.open(storage, config=config,
                                  authorize_virtual_chunk_access=_credentials(prefixes + [prefix]))
        repo.save_config()
    _commit(repo, plan, f"virtualize append: {added} file(s)")
    return Path(dest)


def recorded(path: str | os.PathLike) -> dict | None:
    """What the last commit on `main` recorded about how it was made (sources, recipe)."""
    import icechunk as ic

    storage = ic.local_filesystem_storage(str(path))
    config = ic.Repository.fetch_config(storage)
    prefixes = list((config.virtual_chunk_containers or {}) if config else {})
    repo = ic.Repository.open(storage, authorize_virtual_chunk_access=_credentials(prefixes))
    head = next(iter(repo.ancestry(branch="main")))
    return (head.metadata or {}).get("virtualize")


def _commit(repo, plan: Plan, message: str) -> None:
    import zarr
    from zarr.core.buffer import cpu
    from zarr.core.sync import sync

    session = repo.writable_session("main")
    store = session.store

    def put(key: str, data: bytes) -> None:
        sync(store.set(key, cpu.Buffer.from_bytes(data)))

    with zarr.config.set({"array.rectilinear_chunks": True}):
        for group, attrs in plan.groups.items():
            put(_key(group, "zarr.json"), json.dumps(group_doc(attrs), allow_nan=False).encode())
        for name, a in plan.arrays.items():
            put(_key(name, "zarr.json"), json.dumps(array_doc(a), allow_nan=False).encode())
            if a.inline is not None:
                for key, data in inline_chunks(a):
                    put(_key(name, key), data)
                continue
            _virtual_refs(store, plan, name, a.refs)
            for key, data in materialized_chunks(plan, a):
                put(_key(name, key), data)
    session.commit(message, metadata={"virtualize": {
        "concat_dim": plan.concat_dim, "recipe": plan.recipe,
        "sources": [s.to_dict() for s in plan.sources],
        "roots": source_roots([s.path for s in plan.sources])}})


def _container(prefix: str):
    import icechunk as ic

    if prefix.startswith(("s3://", "s3a://")):
        opts = storage.options_for("s3")
        endpoint = opts.get("endpoint_url") or (opts.get("client_kwargs") or {}).get("endpoint_url")
        region = (opts.get("client_kwargs") or {}).get("region_name") or "us-east-1"
        store = ic.s3_store(region=region, endpoint_url=endpoint,
                            allow_http=bool(endpoint and str(endpoint).startswith("http://")),
                            force_path_style=bool(endpoint))
        return ic.VirtualChunkContainer(prefix, store)
    if prefix.startswith(("http://", "https://")):
        return ic.VirtualChunkContainer(prefix, ic.http_store())
    return ic.VirtualChunkContainer(prefix, ic.local_filesystem_store(prefix[len("file://"):]))


def _credentials(prefixes: list[str]) -> dict:
    auth: dict = {}
    for prefix in prefixes:
        auth.update(credentials(prefix))
    return auth


def _virtual_refs(store, plan: Plan, name: str, refs: np.ndarray) -> None:
    """One call per source over the box of chunks it holds (a file's chunks in a
    concatenation, a tile's in a mosaic), stamped with that file's modification time."""
    if refs.ndim == 0:
        refs = refs.reshape(1)
    present = (refs["length"] > 0) & (refs["path"] != MATERIALIZED)
    for i, src in enumerate(plan.sources):
        mine = present & (refs["path"] == i)
        where = np.nonzero(mine)
        if not where[0].size:
            continue
        lo = [int(w.min()) for w in where]
        hi = [int(w.max()) + 1 for w in where]
        box = tuple(slice(a, b) for a, b in zip(lo, hi))
        sub, sel = refs[box], mine[box]
        url = src.path if is_url(src.path) else "file://" + src.path
        locations = np.where(sel.reshape(-1), url, "").tolist()
        # Icechunk refuses a chunk whose object was modified after this time, compared at
        # whole seconds (an If-Unmodified-Since date): round the mtime up to the second;
        # an object's ETag when it has one (If-Match)
        mtime = datetime.datetime.fromtimestamp(-(-src.mtime_ns // 10**9), tz=datetime.UTC)
        if is_url(src.path) and src.etag:
            mtime = src.etag
        failed = store.set_virtual_refs_arr(
            name, tuple(b - a for a, b in zip(lo, hi)), locations,
            np.array(sub["offset"], dtype=np.uint64).reshape(-1),  # aligned copies of packed fields
            np.array(sub["length"], dtype=np.uint64).reshape(-1),
            arr_offset=tuple(lo), checksum=mtime)
        if failed:
            raise ValueError(f"Icechunk refused {len(failed)} reference(s) of {name} to {src.path}")


def credentials(prefix: str) -> dict:
    import icechunk as ic

    if prefix.startswith(("s3://", "s3a://")):
        return ic.containers_credentials({prefix: ic.s3_credentials(from_env=True)})
    if prefix.startswith(("http://", "https://")):
        return ic.containers_credentials({prefix: None})
    return ic.containers_credentials({prefix: ic.Credentials.LocalFileSystemAccess()})


def is_icechunk_repo(path: str | os.PathLike) -> bool:
    p = Path(path)
    return p.is_dir() and (p / "repo").exists() and not (p / "virtualize.json").exists()


def open_icechunk(path: str | os.PathLike, allow=None):
    """A read-only zarr store of an Icechunk repo's main branch. Only the virtual chunk
    containers inside the allowed roots are authorized (access.py): the roots recorded by
    virtualize in the last commit (or the repository's own directory, for one it did not
    write) and the caller's `allow`. A container outside them is refused."""
    import icechunk as ic

    from ..access import Access, not_allowed

    storage = ic.local_filesystem_storage(str(path))
    config = ic.Repository.fetch_config(storage)
    prefixes = list((config.virtual_chunk_containers or {}) if config else {})
    info = recorded(path) if prefixes else None
    roots = (info or {}).get("roots")
    if not isinstance(roots, list):
        roots = [os.path.dirname(os.path.realpath(path))]
    access = Access(path, roots, allow)
    broad = False  # a container wider than the roots (sources in several directories)
    for prefix in prefixes:
        why = access.container(prefix)
        if why is not None:
            if not access.within(prefix):
                raise not_allowed(path, why)
            broad = True
    repo = ic.Repository.open(storage, authorize_virtual_chunk_access=_credentials(prefixes) or None)
    session = repo.readonly_session("main")
    if broad:  # then every virtual chunk's location is checked
        for location in set(session.all_virtual_chunk_locations()):
            access.check(location)
    return session.store


def _key(prefix: str, key: str) -> str:
    return f"{prefix}/{key}" if prefix else key
