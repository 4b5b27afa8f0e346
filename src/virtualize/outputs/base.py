"""What every output kind shares: the `OutputKind` base class (registry.py holds the
kinds), the version of the record they keep, and the helpers their readers use (zarr's
rectilinear switch, imagecodecs' codecs, the consolidated view of a hierarchy, a JSON
document read as an object)."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
from pathlib import Path

import numpy as np
import zarr
from zarr.abc.buffer import Buffer, BufferPrototype
from zarr.abc.store import ByteRequest
from zarr.buffer import default_buffer_prototype
from zarr.storage import WrapperStore

from .. import codecs as own_codecs
from .access import invalid

# the version of virtualize's record, in every kind that keeps one (a cube's
# virtualize.json and its manifests, a kerchunk JSON's or parquet set's `virtualize`)
CUBE_FORMAT_VERSION = 1

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

    def __init__(self, store) -> None:
        super().__init__(store)
        self._coordinates: dict[str, np.ndarray] = {}  # an Icechunk array's chunks

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

    async def chunks_present(self, array: str, axes: list, metadata):
        """Which chunks of `array` exist (outputs/sparse.py): the wrapped store's answer;
        for an Icechunk store, from its snapshot's chunk coordinates (those of the array's
        initialized chunks, listed once per array: O(the chunks that exist)). None: the
        store cannot say."""
        ask = getattr(self._store, "chunks_present", None)
        if ask is not None:
            return await ask(array, axes, metadata)
        listing = getattr(getattr(self._store, "session", None), "chunk_coordinates", None)
        if listing is None:
            return None
        from .sparse import present_among

        if array not in self._coordinates:
            coords = [c async for c in listing("/" + array.lstrip("/"))]
            self._coordinates[array] = np.array(coords, dtype=np.int64).reshape(
                len(coords), len(axes))
        return present_among(self._coordinates[array], axes)

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


def load_json(what: Path, data: bytes | None, name: str) -> dict:
    """The JSON object `data` (the document `name` of the output `what`), or the located
    problem: missing, not JSON, not an object."""
    if data is None:
        raise invalid(what, f"{name} is missing")
    try:
        doc = json.loads(data)
    except ValueError as e:
        raise invalid(what, f"{name} is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise invalid(what, f"{name} is not a JSON object")
    return doc


class OutputKind:
    """One output kind: a package of outputs/ holding its writer and its reader together,
    whose `KIND` (an instance of a subclass) is named once in `registry.KINDS`; another
    package's kind is named by an entry point of the group `virtualize.outputs`
    (plugins.py). Nothing outside its package tells it apart from the others: what
    differs between kinds is asked of this object.

    Every kind sets `name`, `title` and `suffixes` and answers `detect`, `is_ours`,
    `write`, `open_store`, `recorded` and `refresh`. What only some kinds can do has a
    default saying it cannot (not recognised on object storage, not grown in place, ...)."""

    name: str = ""  # the `format` a caller names (`--format`), the registry's key
    title: str = ""  # what it is, in the usage errors naming what virtualize writes
    # output names that choose it without `format`, lower case; "" (no suffix): the
    # kind claiming it is the default one, of any name no kind claims and of any local
    # path no other kind detects
    suffixes: tuple[str, ...] = ()
    # `detect` takes what the others leave (any file): asked after them
    fallback: bool = False
    package: str | None = None  # a package it needs, imported by this name ...
    extra: str = ""  # ... and the extra that installs it (pip install 'virtualize[EXTRA]')
    # on object storage: the object under OUT that says an output of this kind is there
    # (a cube's "virtualize.json"); None: OUT is the one object (a file output)
    remote_marker: str | None = None
    # uploaded last to object storage, in this order: what makes a reader see the output
    root_documents: tuple[str, ...] = ()
    not_relocatable: str | None = None  # why --relative is refused, for a kind refusing it
    foreign_hint: str = ""  # what to do with an output of this kind virtualize did not write
    # it reads the chunks of a mosaic no stored block fits as windows of their tiles (a GDAL
    # VRT, whose sources are whole files): planned so (plan/tiles.py MosaicOptions.windows)
    reads_windows: bool = False

    # -- what every kind answers -----------------------------------------------------

    def detect(self, path: Path, *, by_name: bool = True) -> bool:
        """`path` (local, existing or not) is to be opened as this kind: the lenient test
        of readers (`by_name`: a name alone may say it, for a path not written yet)."""
        raise NotImplementedError

    def is_ours(self, path: Path) -> bool:
        """`path` is an output of this kind virtualize wrote (the strict test of the
        output guards: only such an output is replaced by --overwrite, and a staging
        leftover is removed only when empty or so; staging.py). May raise OSError."""
        raise NotImplementedError

    def write(self, plan, dest, overwrite: bool = False, *, relative_to=None) -> Path:
        """Write a plan as a new output at `dest` (staged, published when complete);
        `relative_to`: its final location, to record the sources relative to it."""
        raise NotImplementedError

    def open_store(self, path: Path, *, check_sources: bool = True, allow=None, base=None,
                   strict: bool = False):
        """The confined, checked, read-only zarr store of the local output at `path`
        (`base`: where it really is, the URL of a downloaded copy)."""
        raise NotImplementedError

    def recorded(self, path: Path) -> dict | None:
        """Its provenance record (record.py): sources, recipe, roots, append state, relative
        paths resolved; None when it holds none."""
        raise NotImplementedError

    def refresh(self, path: Path, info: dict, times: dict[int, int], replan):
        """Record touched sources' new times (`times`: source index -> mtime_ns);
        `replan()` plans the stack again when the kind needs its references restamped:
        then its report, else None."""
        raise NotImplementedError

    # -- what some kinds can do (the defaults: they cannot) --------------------------

    def is_ours_remote(self, fs, base: str) -> bool:
        """`is_ours` for an output on object storage (`fs`, its path `base`), asked when
        its `remote_marker` is there; by default none is recognised (never replaced)."""
        return False

    def guess_can_open(self, path: str) -> bool:
        """What xarray's `guess_can_open` goes by (cheap: no parse of the whole output)."""
        return False

    def open_remote(self, url: str, *, check_sources: bool = True, allow=None,
                    strict: bool = False):
        """The store of an output on object storage read where it is, when `url` holds
        one of this kind that can be; None: it is downloaded and opened locally."""
        return None

    def missing(self) -> str | None:
        """Why this kind cannot be written or read here (its package is not installed),
        or None."""
        if self.package is None or importlib.util.find_spec(self.package) is not None:
            return None
        needs = f"the {self.package} package" if self.package == self.name else self.package
        return f"the {self.name} output needs {needs}: pip install 'virtualize[{self.extra}]'"

    def refuse_name(self, out, suffix: str, kind: str) -> str:
        """The usage error of writing another kind (`kind`) under a name ending in one of
        this kind's suffixes (readers go by the name: -o x.json a cube would mislead)."""
        return (f"{out}: a {suffix} name is {self.title}'s; the {kind} output is not one "
                f"(name it otherwise, or --format {self.name})")

    # -- what `append` asks of an existing local output -------------------------------

    def refuses_growth(self, info: dict) -> str | None:
        """Why appending to it / refreshing it is not supported, or None."""
        return None

    def array_docs(self, path: Path, plan, along: list[str]):
        """(each array's zarr.json or None, the values of the inline arrays `along` the
        concatenation axis or None when they cannot be had from the output itself, what
        `grow` needs of what was read: the kind's own state). By default nothing: the
        output is not grown in place, `append` plans the stack again whole and writes it
        anew (its sources, old and new, as recorded)."""
        return {}, None, None

    def grow(self, path: Path, merged, info: dict, new_sources: list[str], *, recipe: dict,
             state) -> list[str]:
        """Add an append's new part (`plan.merge_append`'s result) to the output; the notes
        the report gains. Asked only of a kind whose `array_docs` gave the values."""
        raise NotImplementedError(f"{self.title} is written again whole")

    def commit_rebuild(self, plan, path: Path, added: int) -> bool:
        """Take the stack planned again whole in place (an Icechunk commit): True; False
        (the default) when the kind is written again as a new output instead."""
        return False

    def relative(self, path: Path, info: dict) -> bool:
        """Whether it records its sources relative to itself (kept when written again)."""
        return False

    def __repr__(self) -> str:
        return f"<output kind {self.name}>"
