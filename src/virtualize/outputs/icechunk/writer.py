"""An Icechunk repository (2.x): the same hierarchy, with virtual chunk references.

Virtual chunks point at `file://` URLs of the sources, under one virtual chunk container
whose prefix is the sources' common directory. A remote source's references carry its
ETag as the checksum (Icechunk refuses a chunk whose object changed, as `virtualize.open`
refuses such a source); a local file's carry none: whether it changed is the staleness
check's to say when the repository is opened, as for every kind (a touched file, its
blocks as recorded, is read with a note; docs/reading.md, Staleness). Repositories
written before (no `checksums` in their record) stamped every reference with its file's
modification time, which Icechunk compares itself: a touched source of one is refused at
open until `verify --refresh` stamps its references anew (`CHECKSUMS`). Inline
coordinates and materialized chunks are native chunks of the repository. Readers
authorize the container: `virtualize.open` does it for them; see docs/reading.md for
plain Icechunk.

A relocatable repository (`relative_to`): the sources that can be named relative to it
are referenced as `vcc://relative/<path>` through a container named `relative`, whose
prefix (their common directory) is recorded relative to the repository in the commit's
metadata; a reader re-points that container at the repository's new location
(`Repository.open(config=...)` with the named container at its new prefix).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ... import storage
from ...model import MATERIALIZED, Plan
from ...storage import is_url
from ..metadata import array_doc, chunk_grid, group_doc
from ..record import grow_roots, record, resolved
from ..staging import staged_dir
from ..walk import walk, walk_append


def container_prefix(plan: Plan) -> str:
    """`file:///common/dir/` of every local source: Icechunk needs a prefix with a path."""
    local = [s.path for s in plan.sources if not is_url(s.path)]
    common = os.path.commonpath([os.path.dirname(p) for p in local] or ["/"])
    return "file://" + common.rstrip("/") + "/"


def container_prefixes(plan: Plan, skip=frozenset()) -> list[str]:
    """One container per bucket or host of the URL sources (`s3://bucket/`,
    `http://host:port/`), and one for the local ones (but the paths in `skip`)."""
    paths = [s.path for s in plan.sources if s.path not in skip]
    out = sorted({_url_prefix(p) for p in paths if is_url(p)})
    local = [p for p in paths if not is_url(p)]
    if local:
        common = os.path.commonpath([os.path.dirname(p) for p in local])
        out.append("file://" + common.rstrip("/") + "/")
    return out


# the fields of a commit's `virtualize` metadata, in order (record.record)
RECORD_LAYOUT = ("concat_dim", "recipe", "sources", "roots", "append")
# what a repository's references carry as checksums, recorded in its commits: "etag" (a
# remote object's ETag, nothing for a local file). Absent: an older repository, whose
# references all carry their file's modification time.
CHECKSUMS = "etag"

RELATIVE = "relative"  # the container of a relocatable repository's movable sources


def _prefix_url(d: str) -> str:
    """A directory or URL prefix as a container prefix (`file:///dir/`, `s3://b/p/`)."""
    d = d.rstrip("/")
    return (d if is_url(d) else "file://" + d) + "/"


def _relocatable(plan: Plan, relative_to: str | None):
    """(movable source paths, their container prefix, {path: location}) of a relocatable
    repository at `relative_to`: the sources that can be named relative to it."""
    if relative_to is None:
        return set(), None, {}
    movable = {s.path for s in plan.sources if storage.relative(s.path, relative_to) != s.path}
    if not movable:
        return set(), None, {}
    common = storage.common_dir(sorted(movable))
    locations = {p: f"vcc://{RELATIVE}/" + storage.relative(p, common) for p in movable}
    return movable, _prefix_url(common), locations


def _url_prefix(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}/"


def write_icechunk(plan: Plan, dest: str | Path, overwrite: bool = False, *,
                   relative_to: str | None = None) -> Path:
    """A new repository at `dest` (staged, published when complete) with one commit.
    `relative_to`: its final location (path or URL), to make it relocatable (above)."""
    import icechunk as ic

    dest = Path(dest)
    movable, moving, locations = _relocatable(plan, relative_to)
    prefixes = container_prefixes(plan, skip=movable)
    with staged_dir(dest, overwrite, [s.path for s in plan.sources], mark=False) as stage:
        config = ic.RepositoryConfig.default()
        config.manifest = manifest_config()
        for prefix in prefixes:
            config.set_virtual_chunk_container(_container(prefix))
        if moving:
            config.set_virtual_chunk_container(_container(moving, RELATIVE))
            prefixes = prefixes + [moving]
        repo = ic.Repository.create(ic.local_filesystem_storage(str(stage)), config,
                                    authorize_virtual_chunk_access=_credentials(prefixes))
        _commit(repo, plan, f"virtualize: {len(plan.arrays)} arrays from "
                            f"{len(plan.sources)} files", locations,
                relative_to if moving else None, moving)
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
    _commit(_open_to_append(dest, plan, plan.sources), plan,
            f"virtualize append: {added} file(s)")
    return Path(dest)


def _open_to_append(dest: str | Path, plan: Plan, sources):
    """The repository at `dest`, opened to commit `plan` of `sources`: a virtual chunk
    container added (and saved in its config) when local sources live outside its own."""
    import icechunk as ic

    storage_ = ic.local_filesystem_storage(str(dest))
    config = ic.Repository.fetch_config(storage_)
    prefixes = list(config.virtual_chunk_containers or {})
    local = [s for s in sources if not is_url(s.path)]
    if all(any(("file://" + s.path).startswith(p) for p in prefixes) for s in local):
        return ic.Repository.open(storage_, authorize_virtual_chunk_access=_credentials(prefixes))
    prefix = container_prefix(plan)
    config.set_virtual_chunk_container(_container(prefix))
    repo = ic.Repository.open(storage_, config=config,
                              authorize_virtual_chunk_access=_credentials(prefixes + [prefix]))
    repo.save_config()
    return repo


def append_icechunk_new(dest: str | Path, merged, recipe: dict, old_roots=(),
                        checksums: str | None = CHECKSUMS) -> Path:
    """A commit on `main` touching only what an append adds (plan/_state.py `Merged`):
    each grown array's zarr.json (shape, chunk grid), the virtual references of its new
    chunks (and materialized ones), inline arrays' chunk; the commit records the grown
    source list and the new last step (`checksums`: the repository's, as recorded)."""
    import zarr

    plan = merged.plan
    session = _open_to_append(dest, plan, merged.sources).writable_session("main")
    store = session.store

    with zarr.config.set({"array.rectilinear_chunks": True}):
        walk_append(merged, _Session(store, plan, {}))
    added = len(merged.sources) - len(merged.old_sources)
    new = [s.path for s in merged.sources[len(merged.old_sources):]]
    info = record(plan, RECORD_LAYOUT, recipe=recipe,
                  sources=[s.to_dict() for s in merged.sources],
                  roots=grow_roots(list(old_roots), new))
    if checksums is not None:  # (an older repository's old references keep their times)
        info["checksums"] = checksums
    session.commit(f"virtualize append: {added} file(s)", metadata={"virtualize": info})
    return Path(dest)


def refresh_icechunk(dest: str | Path, plan: Plan | None, info: dict,
                     times: dict[int, int]) -> None:
    """A commit on `main` recording new modification times (recorded source index ->
    mtime_ns) of touched sources. A repository whose references carry no time
    (`CHECKSUMS` recorded) needs nothing else (`plan` None); an older one's references are
    all stamped again from `plan` (the stack planned again: the same references, the
    touched files' block tables being as recorded), without times, and `CHECKSUMS` is
    recorded: a later touch is read with a note, as for every kind."""
    import icechunk as ic

    from ..record import set_times

    if plan is None:
        storage_ = ic.local_filesystem_storage(str(dest))
        session = ic.Repository.open(storage_).writable_session("main")
    else:
        session = _open_to_append(dest, plan, plan.sources).writable_session("main")
        for name, a in plan.arrays.items():
            if a.inline is None and a.refs is not None:
                _virtual_refs(session.store, plan, name, a.refs, {})
    set_times(info["sources"], times)
    info["checksums"] = CHECKSUMS
    session.commit(f"virtualize verify --refresh: {len(times)} touched source(s)",
                   metadata={"virtualize": info}, allow_empty=True)


def recorded(path: str | os.PathLike, base: str | None = None) -> dict | None:
    """What the last commit on `main` recorded about how it was made (sources, recipe,
    roots), relative paths resolved against the repository's location (`base`: the URL
    it was read from)."""
    import icechunk as ic

    store = ic.local_filesystem_storage(str(path))
    repo = ic.Repository.open(store)  # commit metadata only: no virtual chunk is read
    head = next(iter(repo.ancestry(branch="main")))
    info = (head.metadata or {}).get("virtualize")
    if isinstance(info, dict):
        base = base or os.path.abspath(path)
        resolved(info, base)
        if isinstance(info.get("containers"), dict):
            info["containers"] = {k: _prefix_url(storage.resolve(v, base))
                                  for k, v in info["containers"].items() if isinstance(v, str)}
    return info


def _commit(repo, plan: Plan, message: str, locations: dict | None = None,
            relative_to: str | None = None, moving: str | None = None) -> None:
    import zarr

    session = repo.writable_session("main")
    store = session.store

    with zarr.config.set({"array.rectilinear_chunks": True}):
        walk(plan, _Session(store, plan, locations or {}))
    info = record(plan, RECORD_LAYOUT)
    info["checksums"] = CHECKSUMS
    if relative_to is not None and moving is not None:
        rel = lambda p: storage.relative(p, relative_to)  # noqa: E731
        info["sources"] = [dict(d, path=rel(d["path"])) for d in info["sources"]]
        info["roots"] = [rel(r) for r in info["roots"]]
        local = moving[len("file://"):] if moving.startswith("file://") else moving
        info["containers"] = {RELATIVE: rel(local)}
    session.commit(message, metadata={"virtualize": info})


class _Session:
    """The walk's sink of an Icechunk writable session's store: documents and stored
    chunks set as keys, references as virtual chunks (`moved`: a relocatable
    repository's locations); an append's grown documents from the stored ones."""

    def __init__(self, store, plan: Plan, moved: dict) -> None:
        self.store, self.plan, self.moved = store, plan, moved

    def _put(self, key: str, data: bytes) -> None:
        from zarr.core.buffer import cpu
        from zarr.core.sync import sync

        sync(self.store.set(key, cpu.Buffer.from_bytes(data)))

    def group(self, path: str, attrs: dict) -> None:
        self._put(_key(path, "zarr.json"), json.dumps(group_doc(attrs), allow_nan=False).encode())

    def array(self, name: str, a, g=None) -> None:
        if g is None:
            self._put(_key(name, "zarr.json"), json.dumps(array_doc(a), allow_nan=False).encode())
            return
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.sync import sync

        buf = sync(self.store.get(_key(name, "zarr.json"), default_buffer_prototype()))
        doc = dict(json.loads(buf.to_bytes()), shape=[int(n) for n in a.shape],
                   chunk_grid=chunk_grid(a))
        self._put(_key(name, "zarr.json"), json.dumps(doc, allow_nan=False).encode())

    def chunk(self, name: str, key: str, data: bytes) -> None:
        self._put(_key(name, key), data)

    def references(self, name: str, a, g=None) -> None:
        origin = None if g is None else tuple(g.start if ax == g.axis else 0
                                              for ax in range(a.refs.ndim))
        _virtual_refs(self.store, self.plan, name, a.refs, self.moved, origin)


def _container(prefix: str, name: str | None = None):
    import icechunk as ic

    if prefix.startswith(("s3://", "s3a://")):
        opts = storage.options_for("s3")
        endpoint = opts.get("endpoint_url") or (opts.get("client_kwargs") or {}).get("endpoint_url")
        region = (opts.get("client_kwargs") or {}).get("region_name") or "us-east-1"
        store = ic.s3_store(region=region, endpoint_url=endpoint,
                            allow_http=bool(endpoint and str(endpoint).startswith("http://")),
                            force_path_style=bool(endpoint))
        return ic.VirtualChunkContainer(prefix, store, name=name)
    if prefix.startswith(("http://", "https://")):
        return ic.VirtualChunkContainer(prefix, ic.http_store(), name=name)
    return ic.VirtualChunkContainer(prefix, ic.local_filesystem_store(prefix[len("file://"):]),
                                    name=name)


def _credentials(prefixes: list[str]) -> dict:
    auth: dict = {}
    for prefix in prefixes:
        auth.update(credentials(prefix))
    return auth


def _virtual_refs(store, plan: Plan, name: str, refs: np.ndarray, moved: dict,
                  origin: tuple[int, ...] | None = None) -> None:
    """One call per source over the box of chunks it holds (a file's chunks in a
    concatenation, a tile's in a mosaic), stamped with the object's ETag when it is a
    remote one with an ETag (`CHECKSUMS`), else with nothing. `origin`: the chunk index of
    refs[0, 0, ...] in the array (an append's new chunks)."""
    scalar = refs.ndim == 0
    if scalar:
        refs = refs.reshape(1)
    present = (refs["length"] > 0) & (refs["path"] != MATERIALIZED)
    for i in np.unique(refs["path"][present]).tolist():
        src = plan.sources[i]
        mine = present & (refs["path"] == i)
        where = np.nonzero(mine)
        if not where[0].size:
            continue
        lo = [int(w.min()) for w in where]
        hi = [int(w.max()) + 1 for w in where]
        box = tuple(slice(a, b) for a, b in zip(lo, hi))
        sub, sel = refs[box], mine[box]
        url = moved.get(src.path) or (src.path if is_url(src.path) else "file://" + src.path)
        locations = np.where(sel.reshape(-1), url, "").tolist()
        # Icechunk refuses a chunk whose object's ETag changed (If-Match), as the
        # staleness check refuses the source; a time would make it refuse a touched file
        # the staleness check reads with a note
        checksum = src.etag if is_url(src.path) and src.etag else None
        if scalar:  # a 0-d array's one chunk is at key "c", not at index (0,)
            store.set_virtual_ref(f"{name}/c", url, offset=int(sub["offset"][0]),
                                  length=int(sub["length"][0]), checksum=checksum)
            continue
        failed = store.set_virtual_refs_arr(
            name, tuple(b - a for a, b in zip(lo, hi)), locations,
            np.array(sub["offset"], dtype=np.uint64).reshape(-1),  # aligned copies of packed fields
            np.array(sub["length"], dtype=np.uint64).reshape(-1),
            arr_offset=tuple(a + b for a, b in zip(lo, origin or [0] * len(lo))),
            checksum=checksum)
        if failed:
            raise ValueError(f"Icechunk refused {len(failed)} reference(s) of {name} to {src.path}")


def credentials(prefix: str) -> dict:
    import icechunk as ic

    if prefix.startswith(("s3://", "s3a://")):
        return ic.containers_credentials({prefix: ic.s3_credentials(from_env=True)})
    if prefix.startswith(("http://", "https://")):
        # the explicit no-auth credential (None is deprecated), where this icechunk has it
        access = getattr(ic.Credentials, "HttpAccess", None)
        return ic.containers_credentials({prefix: access() if access else None})
    return ic.containers_credentials({prefix: ic.Credentials.LocalFileSystemAccess()})


def _key(prefix: str, key: str) -> str:
    return f"{prefix}/{key}" if prefix else key
