"""Kerchunk reference sets of a plan (JSON version 1, for zarr v3), which the kerchunk
JSON, a GDAL VRT's recorded references and an in-memory plan's store all are: the set
made from a plan (`reference_set`, the walk's sink `References`) and a read-only zarr
store over one (`reference_store`, fsspec's `reference://` with every reference confined
and checked first). Readable by zarr-python and xarray without virtualize installed."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
from zarr.storage import FsspecStore

from ..model import Location, Plan, Problem, VirtualizeError
from ..storage import common_dir, dirname, relative
from .access import Access, invalid
from .base import register_codecs
from .metadata import array_doc, chunk_grid, group_doc
from .record import record, relative_state
from .sparse import coordinates, present_among
from .walk import walk

# the fields of the `virtualize` section, in order (record.record)
RECORD_LAYOUT = ("format", "version", "created_by", "recipe", "sources", "roots", "append")


def record_section(plan: Plan, format: str, version: int) -> dict:
    """The `virtualize` section of a reference set virtualize writes: `format` (what it
    recognises its own by) and `version` first, then the sources, roots and append state."""
    return record(plan, RECORD_LAYOUT, format=format, version=version)


def reference_set(plan: Plan, section: dict | None, relative_to: str | None = None) -> dict:
    """The reference set of `plan` as a dict: {"version": 1, "virtualize": section, "refs":
    {key: json | [url, off, len]}}. The `virtualize` section (first, so that a later run
    recognises its own output from the file's first bytes: `record_section`) records the
    sources with their size and modification time and the allowed roots; fsspec's reader
    ignores it. None: no section (an in-memory plan's store).

    `relative_to`: the JSON's final location (path or URL). The sources that can be named
    relative to its directory (local ones for a local JSON, same scheme and host for a
    URL) are then referenced through a kerchunk template, `"{{u}}/sub/a.nc"` with
    `"templates": {"u": "<their common directory>"}`, and recorded relative in the
    `virtualize` section (with `u` relative too): a relocatable reference set. Moved
    together with its files, `virtualize.open` resolves `u` against the JSON's new
    directory; plain fsspec reads it with `template_overrides={"u": "<new directory>"}`
    (fsspec resolves no relative paths: a reference without a protocol is opened relative
    to the current directory)."""
    paths = [s.path for s in plan.sources]
    templates: dict[str, str] = {}
    if relative_to is not None:
        base = dirname(relative_to)
        # (a path with braces would be taken for a template by fsspec: left absolute)
        movable = [p for p in paths if relative(p, base) != p and not set("{}") & set(p)]
        if movable:
            u = common_dir(movable)
            templates = {"u": u}
            paths = ["{{u}}/" + relative(p, u)
                     if p in movable else p for p in paths]
            if section is not None:
                section["templates"] = {"u": relative(u + "/", base)}
                for d in section["sources"]:
                    d["path"] = relative(d["path"], base)
                section["roots"] = [relative(r, base) for r in section["roots"]]
                section["append"] = relative_state(section["append"], base)
    sink = References(paths)
    walk(plan, sink)
    refs: dict[str, object] = {}
    docs = sink.docs
    for path, doc in docs.items():
        if path == "":
            # the whole hierarchy in the root document: one read opens every array
            doc = dict(doc, consolidated_metadata={
                "kind": "inline", "must_understand": False,
                "metadata": {p: d for p, d in docs.items() if p}})
        refs[ref_key(path, "zarr.json")] = json.dumps(doc, allow_nan=False)
    refs.update(sink.refs)  # (after every document, as readers of the set expect)
    doc = {"version": 1} if section is None else {"version": 1, "virtualize": section}
    if templates:
        doc["templates"] = templates
    doc["refs"] = refs
    return doc


class References:
    """The walk's sink of a reference set: documents (`docs`, joined into the root's
    consolidated metadata by `reference_set`) and references (`refs`: [url, offset,
    length] through `paths`, or inline base64); an append's grown documents and new
    references go straight into the set's `refs`."""

    def __init__(self, paths: list[str], refs: dict | None = None) -> None:
        self.paths = paths
        self.docs: dict[str, dict] = {}
        self.refs: dict[str, object] = {} if refs is None else refs

    def group(self, path: str, attrs: dict) -> None:
        self.docs[path] = group_doc(attrs)

    def array(self, name: str, a, g=None) -> None:
        if g is None:
            self.docs[name] = array_doc(a)
            return
        key = ref_key(name, "zarr.json")
        self.refs[key] = json.dumps(dict(json.loads(self.refs[key]),
                                         shape=[int(n) for n in a.shape],
                                         chunk_grid=chunk_grid(a)), allow_nan=False)

    def chunk(self, name: str, key: str, data: bytes) -> None:
        self.refs[ref_key(name, key)] = "base64:" + base64.b64encode(data).decode()

    def references(self, name: str, a, g=None) -> None:
        m, paths, refs = a.refs, self.paths, self.refs
        if m.ndim == 0:
            if m["length"]:
                refs[ref_key(name, "c")] = [paths[int(m["path"])], int(m["offset"]), int(m["length"])]
            return
        idx = np.nonzero(m["length"])
        sel = m[idx]
        prefix = ref_key(name, "c/")
        if g is None:
            for coords, p, off, n in zip(zip(*(i.tolist() for i in idx)), sel["path"].tolist(),
                                         sel["offset"].tolist(), sel["length"].tolist()):
                refs[prefix + "/".join(map(str, coords))] = [paths[p], off, n]
            return
        for coords, p, off, n in zip(zip(*(i.tolist() for i in idx)), sel["path"].tolist(),
                                     sel["offset"].tolist(), sel["length"].tolist()):
            coords = [c + g.start if ax == g.axis else c for ax, c in enumerate(coords)]
            refs[prefix + "/".join(map(str, coords))] = [paths[p], off, n]


def reference_store(doc: dict, path: Path, access: Access, sources, templates=None):
    """A read-only zarr store over a kerchunk reference dict, every reference checked
    against `access` (and, when `sources` is given, against that source table);
    `templates` override the set's own (a relocated set's resolved `u`)."""
    from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper
    from fsspec.implementations.local import LocalFileSystem
    from fsspec.implementations.reference import ReferenceFileSystem

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
        from .. import storage
        fss = {None: local, "file": local, **storage.async_filesystems(remote)}
        fs = ReferenceFileSystem(doc, fs=fss, asynchronous=True, skip_instance_cache=True,
                                 template_overrides=templates)
    return ReferenceStore(fs, read_only=True, path="")


class ReferenceStore(FsspecStore):
    """zarr's `FsspecStore` over a reference set, saying which chunks exist from its keys
    (outputs/sparse.py)."""

    async def chunks_present(self, array: str, axes: list, metadata):
        """Which chunks of `array` exist: its chunk keys among the references (listed once
        per array: O(the references))."""
        known = self.__dict__.setdefault("_coordinates", {})
        if array not in known:
            prefix = f"{array}/" if array else ""
            keys = [k[len(prefix):] for k in self.fs.references if k.startswith(prefix)]
            known[array] = coordinates(keys, len(axes),
                                       metadata.chunk_key_encoding.decode_chunk_key)
        return present_among(known[array], axes)


def _check_references(path: Path, refs, access: Access, sources) -> bool:
    """Every reference of a kerchunk set is allowed and, for a set written by virtualize,
    names a recorded source and lies inside it. The protocols of the remote URLs."""
    from ..storage import protocol
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


def ref_key(prefix: str, key: str) -> str:
    """The key of `key` (zarr.json, c/0/1) of the node `prefix` ("" the root)."""
    return f"{prefix}/{key}" if prefix else key
