"""What every output kind shares: the `OutputKind` protocol (registry.py holds the kinds)
and the helpers their readers use (zarr's rectilinear switch, imagecodecs' codecs, the
consolidated view of a hierarchy)."""

from __future__ import annotations

import contextlib
import functools
import json
from pathlib import Path
from typing import Protocol

import zarr
from zarr.abc.buffer import Buffer, BufferPrototype
from zarr.abc.store import ByteRequest
from zarr.buffer import default_buffer_prototype
from zarr.storage import WrapperStore

from .. import codecs as own_codecs

# virtualize's own codecs (HDF5's lzf and bitshuffle): by entry point when installed, by
# this call for a source tree that is not (cheap: no imagecodecs import until a decode)
own_codecs.register()


@functools.cache
def register_codecs() -> None:
    """Make imagecodecs' zarr 3 codecs (imagecodecs_lzw, _jpeg, _delta, ...) known to zarr:
    TIFF cubes name them. They register by a call, not by entry points."""
    try:
        import imagecodecs.zarr
    except ImportError:
        return
    imagecodecs.zarr.register_codecs(verbose=False)


@contextlib.contextmanager
def rectilinear_enabled(codecs: bool = True):
    """zarr-python reads rectilinear grids only with `array.rectilinear_chunks` on; turn it
    on for the duration of an open, then restore the caller's setting. `codecs`: register
    imagecodecs' codecs first (0.5 s of imports, once); `open_cube` leaves that to the
    store, which registers them only for a cube that names one."""
    if codecs:
        register_codecs()
    with zarr.config.set({"array.rectilinear_chunks": True}):
        yield


class ConsolidatedView(WrapperStore):
    """A read-only view of a store whose root `zarr.json` is served with the whole
    hierarchy consolidated into it, so every array's metadata is parsed when the group is
    opened (inside `rectilinear_enabled`) rather than at first access, when the caller's
    zarr config may refuse rectilinear grids. Used over cube directories and Icechunk
    repositories (which keep no consolidated metadata).

    The hierarchy is found without listing chunk keys: a cube directory names its nodes
    (`CubeStore.nodes`, from virtualize.json); any other store (Icechunk) is walked with
    `list_dir` from the root, one call per group (Icechunk answers it from its snapshot's
    node list, never from the chunk manifests), reading each child's `zarr.json`."""

    async def get(self, key: str, prototype: BufferPrototype | None = None,
                  byte_range: ByteRequest | None = None) -> Buffer | None:
        prototype = prototype or default_buffer_prototype()
        if key != "zarr.json" or byte_range is not None:
            return await self._store.get(key, prototype, byte_range)
        root = await self._store.get(key, prototype)
        if root is None:
            return None
        doc = json.loads(root.to_bytes())
        meta = {}
        async for node, child in self._nodes(prototype):
            meta[node] = child
        doc["consolidated_metadata"] = {"kind": "inline", "must_understand": False,
                                        "metadata": meta}
        text = json.dumps(doc)
        if '"imagecodecs_' in text:  # before zarr parses the documents
            register_codecs()
        return prototype.buffer.from_bytes(text.encode())

    async def _doc(self, node: str, prototype: BufferPrototype) -> dict | None:
        buf = await self._store.get(f"{node}/zarr.json", prototype)
        return None if buf is None else json.loads(buf.to_bytes())

    async def _nodes(self, prototype: BufferPrototype):
        """(path, metadata document) of every node below the root."""
        nodes = getattr(self._store, "nodes", None)
        if callable(nodes):
            for node in nodes():
                if node:
                    doc = await self._doc(node, prototype)
                    if doc is not None:
                        yield node, doc
            return
        groups = [""]
        while groups:
            group = groups.pop()
            async for entry in self._store.list_dir(group):
                if entry == "zarr.json" or entry.endswith("/"):
                    continue
                node = f"{group}/{entry}" if group else entry
                doc = await self._doc(node, prototype)
                if doc is None:
                    continue
                yield node, doc
                if doc.get("node_type") == "group":
                    groups.append(node)


class OutputKind(Protocol):
    """One output kind (a plug-in: outputs/cube, outputs/kerchunk, outputs/icechunk; the
    list is registry.KINDS). Each package holds its writer and its reader together."""

    kind: str  # "cube", "kerchunk", "icechunk": the `format` a caller names
    suffixes: tuple[str, ...]  # output names that choose this kind without `format`
    title: str  # what it is, in messages ("a cube directory")

    def detect(self, path: Path, *, by_name: bool = True) -> bool:
        """`path` (local, existing or not) is to be opened as this kind: the lenient test
        of readers (a file is a reference JSON whatever its content)."""

    def ours(self, path: Path) -> bool:
        """`path` is an output of this kind virtualize wrote (the strict test of the
        output guards: only such an output is replaced by --overwrite). May raise OSError."""

    def ours_remote(self, fs, base: str) -> bool:
        """The same for an output on object storage (`fs`, its path `base`)."""

    def looks_like(self, path: str) -> bool:
        """What xarray's `guess_can_open` goes by (cheap: no parse of the whole output)."""

    def write(self, plan, dest, overwrite: bool = False, *, relative_to=None) -> Path:
        """Write a plan as a new output at `dest` (staged, published when complete)."""

    def open_store(self, path: Path, *, check_sources: bool, allow, base, strict: bool):
        """The confined, checked, read-only zarr store of the output at `path`."""

    # -- what `append`, `verify --refresh` and `export` ask of an existing local output --

    def recorded(self, path: Path) -> dict | None:
        """Its provenance record (record.py): sources, recipe, roots, append state, relative
        paths resolved; None when it holds none."""

    def refuses_growth(self, info: dict) -> bool:
        """Appending to it / refreshing it is not supported (a relocatable Icechunk
        repository)."""

    def array_docs(self, path: Path, plan, along: list[str]):
        """(each array's zarr.json or None, the values of the inline arrays `along` the
        concatenation axis or None when they cannot be had from the output itself, what
        `grow` needs of what was read: the kind's own state)."""

    def grow(self, path: Path, merged, info: dict, new_sources: list[str], *, recipe: dict,
             state) -> list[str]:
        """Add an append's new part (`plan.merge_append`'s result) to the output; the notes
        the report gains."""

    def commit_rebuild(self, plan, path: Path, added: int) -> bool:
        """Take the stack planned again whole in place (an Icechunk commit): True; False
        when the kind is written again as a new output instead."""

    def relative(self, path: Path, info: dict) -> bool:
        """Whether it records its sources relative to itself (kept when written again)."""

    def refresh(self, path: Path, info: dict, times: dict[int, int], replan):
        """Record touched sources' new times (`times`: source index -> mtime_ns);
        `replan()` plans the stack again when the kind needs its references restamped:
        then its report, else None."""
