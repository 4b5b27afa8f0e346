"""What `virtualize catalog` keeps in its output directory: its record (what each
dataset was built from, so that a re-run finds what changed without scanning), and the
intake-esm catalog (the ESM collection spec: `catalog.json` and `catalog.csv`, one row per
cube), each replaced in one rename when complete."""

from __future__ import annotations

import csv
import datetime
import hashlib
import io
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._version import __version__
from ..model import Location, Problem
from ..outputs.staging import replace_atomically
from ..report.catalog import Spooled

RECORD = "virtualize-catalog.json"  # the record, in OUT
CATALOG_JSON, CATALOG_CSV = "catalog.json", "catalog.csv"
# 2: a dataset's files packed (`RecordedFiles`); a record of 1 (the same facts, a list per
# file) is read as it was written
RECORD_VERSION = 2
READS = (1, 2)
# intake-esm opens a row by its format: a kerchunk JSON of regular chunk grids as fsspec
# "reference" (read without virtualize); any other output through the virtualize://
# filesystem as zarr: a kerchunk JSON of rectilinear grids (zarr reads them only with
# array.rectilinear_chunks on, which intake-esm cannot ask for and virtualize:// does), a
# parquet set (fsspec reads it only with fastparquet and a remote_protocol intake-esm
# cannot pass), a cube directory, an Icechunk repository
REFERENCE_KINDS = ("kerchunk",)
VARIABLE_COLUMNS = ("variable_id", "variable", "variables")


_SEPARATORS = ("\t", "\n", "\r")


class RecordedFiles:
    """A dataset's files as the record holds them: (path, size, time ns, ETag or None) each,
    packed in one string (`base`, the directory their paths share, then a line per file:
    the path after it, size, time, ETag, tab-separated): an archive of 10^5 files is not
    10^5 lists in memory, nor in the record a line per number. Paths holding a tab or a
    line break are kept as a list of rows (`rows`) instead."""

    __slots__ = ("base", "table", "rows")

    def __init__(self, base: str = "", table: str = "", rows: list[tuple] | None = None):
        self.base, self.table, self.rows = base, table, rows

    @classmethod
    def of(cls, files: Iterable) -> RecordedFiles:
        """From (path, size, time ns, ETag or None) rows."""
        rows = [(str(f[0]), int(f[1]), int(f[2]), (f[3] or None) if len(f) > 3 else None)
                for f in files]
        if any(c in r[0] or c in (r[3] or "") for r in rows for c in _SEPARATORS):
            return cls(rows=rows)
        base = os.path.commonprefix([r[0] for r in rows]) if rows else ""
        base = base[:base.rfind("/") + 1]
        return cls(base, "".join(f"{r[0][len(base):]}\t{r[1]}\t{r[2]}\t{r[3] or ''}\n"
                                 for r in rows))

    @classmethod
    def from_json(cls, value) -> RecordedFiles:
        if isinstance(value, Mapping):
            table = str(value["table"])
            if table and not table.endswith("\n"):
                raise ValueError("a dataset's file table does not end its last line")
            return cls(str(value["base"]), table)
        return cls.of(value or ())  # (a list of rows: version 1, or paths with tabs)

    def to_json(self):
        if self.rows is not None:
            return [list(r) for r in self.rows]
        return {"base": self.base, "table": self.table}

    def __iter__(self) -> Iterator[tuple[str, int, int, str | None]]:
        if self.rows is not None:
            yield from self.rows
            return
        for line in self.table.splitlines():
            name, size, mtime, etag = line.split("\t")
            yield self.base + name, int(size), int(mtime), etag or None

    def __len__(self) -> int:
        return len(self.rows) if self.rows is not None else self.table.count("\n")


@dataclass
class DatasetRecord:
    """One dataset as the last run left it: `status` "built" (in the catalog) or
    "refused"; its `facets`, output (`path` relative to OUT, `kind`), `files` (path,
    size, time, ETag each), members, version, data variables, and a refusal's problems."""

    name: str
    status: str
    facets: dict[str, str]
    files: Any  # (path, size, time, ETag) rows: `RecordedFiles`, or the listing's own view
    path: str | None = None
    kind: str | None = None
    members: list[str] | None = None
    version: str | None = None
    variables: list[str] = field(default_factory=list)
    problems: list[dict] = field(default_factory=list)
    regular: bool = False  # every array's chunk grid regular (plain zarr reads it)

    def to_dict(self) -> dict[str, Any]:
        files = self.files if isinstance(self.files, RecordedFiles) else \
            RecordedFiles.of(self.files)
        return {"status": self.status, "facets": self.facets, "files": files.to_json(),
                "path": self.path, "kind": self.kind, "members": self.members,
                "version": self.version, "variables": self.variables,
                "problems": self.problems, "regular": self.regular}

    @classmethod
    def from_dict(cls, name: str, d: Mapping[str, Any]) -> DatasetRecord:
        return cls(name, d["status"], dict(d.get("facets") or {}),
                   RecordedFiles.from_json(d.get("files")), d.get("path"), d.get("kind"),
                   d.get("members"), d.get("version"), list(d.get("variables") or ()),
                   list(d.get("problems") or ()), bool(d.get("regular")))

    def refusal(self) -> list[Problem]:
        """A refused dataset's problems as recorded."""
        return [Problem(Location(**{k: (tuple(v) if k == "block" and v is not None else v)
                                    for k, v in (p.get("loc") or {}).items()}),
                        p["kind"], p["message"], p.get("fatal", True), p.get("remedy"))
                for p in self.problems]


@dataclass
class CatalogRecord:
    """The record of a catalog directory: how its datasets are grouped (`grouping`, which a
    re-run must give alike), the output kind, each dataset (`DatasetRecord`), and, when
    grouped by what the files hold, each file's facets (`content`: path -> [size, time,
    ETag, facets, member]), so that an unchanged file is not scanned again. A run's
    datasets are `add`ed in name order as each is done and kept on disk (`spooled`):
    not held in memory until the record is written."""

    grouping: dict[str, Any]
    format: str
    datasets: dict[str, DatasetRecord] = field(default_factory=dict)
    content: dict[str, list] = field(default_factory=dict)
    spooled: Spooled | None = None

    def add(self, rec: DatasetRecord) -> None:
        """A dataset done this run, after every one added before it by name."""
        if not isinstance(rec.files, RecordedFiles):
            rec.files = RecordedFiles.of(rec.files)
        if self.spooled is None:
            self.spooled = Spooled()
        self.spooled.append(rec)

    def entries(self) -> Iterator[DatasetRecord]:
        """Every dataset, by name."""
        if self.spooled is not None and not self.datasets:
            yield from self.spooled
            return
        every = dict(self.datasets)
        every.update((d.name, d) for d in self.spooled or ())
        yield from (d for _, d in sorted(every.items()))

    def to_dict(self) -> dict[str, Any]:
        return {**self._head(),
                "datasets": {d.name: d.to_dict() for d in self.entries()},
                "content": self.content}

    def _head(self) -> dict[str, Any]:
        return {"virtualize_catalog": RECORD_VERSION, "virtualize_version": __version__,
                "written": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "grouping": self.grouping, "format": self.format}

    def chunks(self) -> Iterator[str]:
        """`to_dict` as JSON text, a dataset at a time (written so: the record of an
        archive's 5,000 datasets is never one string in memory)."""
        head = json.dumps(self._head(), indent=1)
        yield head[:-2] + ',\n "datasets": {'
        for k, d in enumerate(self.entries()):
            yield ("," if k else "") + f"\n  {json.dumps(d.name)}: {json.dumps(d.to_dict())}"
        yield '\n },\n "content": {'
        for k, (path, row) in enumerate(self.content.items()):
            yield ("," if k else "") + f"\n  {json.dumps(path)}: {json.dumps(row)}"
        yield "\n }\n}\n"


def load(out: Path) -> CatalogRecord | None:
    """The record in `out`, or None (no catalog there yet). Raises ValueError for one
    that cannot be read (edited, or of a later virtualize)."""
    p = out / RECORD
    if not p.is_file():
        return None
    try:
        with open(p, "rb") as f:
            d = json.load(f)
        if d.get("virtualize_catalog") not in READS:
            raise ValueError(f"a record of version {d.get('virtualize_catalog')!r}")
        return CatalogRecord(dict(d["grouping"]), d["format"],
                             {n: DatasetRecord.from_dict(n, x) for n, x in d["datasets"].items()},
                             dict(d.get("content") or {}))
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{p}: not a catalog record virtualize can read ({e})") from None


def save(out: Path, record: CatalogRecord) -> None:
    replace_atomically(out / RECORD, (c.encode() for c in record.chunks()))


def is_catalog(out: Path) -> bool:
    return (out / RECORD).is_file()


# -- the intake-esm catalog --------------------------------------------------------------

def asset(out: Path, rec: DatasetRecord) -> tuple[str, str]:
    """(path, format) of a dataset's row: a kerchunk JSON of regular grids as fsspec
    references (read without virtualize), any other output as a virtualize:// URL that
    zarr opens through virtualize's confined store (fsspec_backend.py)."""
    path = os.path.join(os.path.abspath(out), rec.path or "")
    if rec.kind in REFERENCE_KINDS and rec.regular:
        return path, "reference"
    return f"virtualize://{path}", "zarr"


def columns(datasets: Iterable[DatasetRecord], order: Iterable[str]) -> list[str]:
    """The facet columns: those of `order` (a template's facets, or the attributes a
    dataset is identified by) any dataset has, then any other, in the order met."""
    seen: dict[str, None] = {}
    for d in datasets:
        for k in d.facets:
            seen.setdefault(k, None)
    first = [c for c in order if c in seen]
    return first + [c for c in seen if c not in first]


def write_catalog(out: Path, record: CatalogRecord, order: Iterable[str],
                  name_facets: list[str], description: str) -> Path:
    """catalog.csv (one row per dataset in the catalog: its facets, `dataset`, `path`,
    `format`) and catalog.json (the ESM collection spec naming it); grouped by the facets a
    dataset's name is made of when they tell every row apart (else by `dataset`), so that
    `to_dataset_dict()` gives one dataset per row, keyed as the datasets are named."""
    def built() -> Iterator[DatasetRecord]:  # (read twice, a dataset at a time)
        return (d for d in record.entries() if d.status == "built")

    facet_cols = columns(built(), order)
    variable = next((c for c in VARIABLE_COLUMNS if c in facet_cols), None)
    cols = ["dataset", *facet_cols]
    if variable is None:
        variable = "variables"
        cols.append(variable)
    cols += ["path", "format"]
    groupby = [c for c in name_facets if c in facet_cols]
    keys = bytearray()  # (an 8-byte digest of each row's groupby values: no object a row)
    rows = 0

    def csv_text() -> Iterator[bytes]:
        nonlocal rows
        buf = io.StringIO()
        w = csv.DictWriter(buf, cols, lineterminator="\n")
        w.writeheader()
        for d in built():
            path, fmt = asset(out, d)
            row = {"dataset": d.name, **{c: d.facets.get(c, "") for c in facet_cols},
                   "path": path, "format": fmt}
            if variable not in d.facets:
                row[variable] = " ".join(d.variables)
            w.writerow(row)
            keys.extend(hashlib.blake2b(json.dumps([d.facets.get(c, "") for c in groupby])
                                        .encode(), digest_size=8).digest())
            rows += 1
            if buf.tell() > 1 << 13:  # (a few rows at a time)
                yield buf.getvalue().encode()
                buf.seek(0)
                buf.truncate()
        yield buf.getvalue().encode()

    replace_atomically(out / CATALOG_CSV, csv_text())
    if not groupby or len(np.unique(np.frombuffer(bytes(keys), dtype="u8"))) < rows:
        groupby = ["dataset"]
    doc = {
        "esmcat_version": "0.1.0",
        "id": "virtualize-catalog",
        "description": description,
        "catalog_file": str((out / CATALOG_CSV).absolute()),
        "attributes": [{"column_name": c, "vocabulary": ""} for c in cols
                       if c not in ("path", "format")],
        "assets": {"column_name": "path", "format_column_name": "format"},
        "aggregation_control": {"variable_column_name": variable, "groupby_attrs": groupby,
                                "aggregations": []},
        "last_updated": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    replace_atomically(out / CATALOG_JSON, json.dumps(doc, indent=2).encode())
    return out / CATALOG_JSON
