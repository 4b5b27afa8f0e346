"""An output kind as another package adds one (tests/test_plugins.py, docs/architecture.md
"Adding an output kind"): kerchunk references under the name OUT.refs, marked as this
kind's, read back through virtualize's confined reference store. It is made of the
shared modules below the kinds only (references, record, staging, access). Registered by
the entry point `virtualize.outputs: refs = virtualize_refs:KIND`."""

from __future__ import annotations

import json
import os
from pathlib import Path

from virtualize.outputs.access import Access
from virtualize.outputs.base import CUBE_FORMAT_VERSION, OutputKind, load_json
from virtualize.outputs.record import (
    recorded_in,
    recorded_roots,
    resolve_roots,
    resolve_sources,
    set_times,
    source_table,
)
from virtualize.outputs.references import record_section, reference_set, reference_store
from virtualize.outputs.staging import replace_atomically, staged_file
from virtualize.outputs.staleness import refuse_stale

FORMAT = "example-refs"  # what its first bytes say
HEAD = b'{"version": 1, "virtualize": {"format": "example-refs"'


class Refs(OutputKind):
    name = "refs"
    title = "example references"
    suffixes = (".refs",)

    def detect(self, path: Path, *, by_name: bool = True) -> bool:
        return path.suffix == ".refs" and (by_name or path.is_file())

    def is_ours(self, path: Path) -> bool:
        if not path.is_file():
            return False
        with open(path, "rb") as f:
            return f.read(len(HEAD)) == HEAD

    def write(self, plan, dest, overwrite: bool = False, *, relative_to=None) -> Path:
        doc = reference_set(plan, record_section(plan, FORMAT, CUBE_FORMAT_VERSION))
        with staged_file(dest, overwrite, [s.path for s in plan.sources]) as stage:
            stage.write_text(json.dumps(doc))
        return Path(dest)

    def open_store(self, path: Path, *, check_sources: bool = True, allow=None, base=None,
                   strict: bool = False):
        doc = load_json(path, path.read_bytes(), path.name)
        base = base or os.path.dirname(os.path.abspath(path))
        section = doc["virtualize"]
        sources = resolve_sources(source_table(path, section), base)
        access = Access(path, resolve_roots(recorded_roots(path, section), base), allow)
        if check_sources:  # a changed source is refused, a touched one warned about
            refuse_stale(sources, path, strict=strict)
        return reference_store(doc, path, access, sources)

    def recorded(self, path: Path) -> dict | None:
        return recorded_in(path, os.path.dirname(os.path.abspath(path)))

    def refresh(self, path: Path, info: dict, times: dict[int, int], replan):
        doc = json.loads(Path(path).read_bytes())
        set_times(doc["virtualize"]["sources"], times)
        replace_atomically(Path(path), json.dumps(doc).encode())


KIND = Refs()
