"""What `virtualize catalog` keeps in its output directory: its record (what each
dataset was built from, so that a re-run finds what changed without scanning), and the
intake-esm catalog (the ESM collection spec: `catalog.json` and `catalog.csv`, one row per
cube), each replaced in one rename when complete."""

from __future__ import annotations

import csv
import datetime
import io
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._version import __version__
from ..model import Location, Problem
from ..outputs.staging import replace_atomically

RECORD = "virtualize-catalog.json"  # the record, in OUT
CATALOG_JSON, CATALOG_CSV = "catalog.json", "catalog.csv"
RECORD_VERSION = 1
# intake-esm opens a row by its format: a kerchunk JSON of regular chunk grids as fsspec
# "reference" (read without virtualize); any other output through the virtualize://
# filesystem as zarr: a kerchunk JSON of rectilinear grids (zarr reads them only with
# array.rectilinear_chunks on, which intake-esm cannot ask for and virtualize:// does), a
# parquet set (fsspec reads it only with fastparquet and a remote_protocol intake-esm
# cannot pass), a cube directory, an Icechunk repository
REFERENCE_KINDS = ("kerchunk",)
VARIABLE_COLUMNS = ("variable_id", "variable", "variables")


@dataclass
class DatasetRecord:
    """One dataset as the last run left it: `status` "built" (in the catalog) or
    "refused"; its `facets`, output (`path` relative to OUT, `kind`), `files` (path,
    size, time, ETag each), members, version, data variables, and a refusal's problems."""

    name: str
    status: str
    facets: dict[str, str]
    files: list[list]
    path: str | None = None
    kind: str | None = None
    members: list[str] | None = None
    version: str | None = None
    variables: list[str] = field(default_factory=list)
    problems: list[dict] = field(default_factory=list)
    regular: bool = False  # every array's chunk grid regular (plain zarr reads it)

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "facets": self.facets, "files": self.files,
                "path": self.path, "kind": self.kind, "members": self.members,
                "version": self.version, "variables": self.variables,
                "problems": self.problems, "regular": self.regular}

    @classmethod
    def from_dict(cls, name: str, d: Mapping[str, Any]) -> DatasetRecord:
        return cls(name, d["status"], dict(d.get("facets") or {}),
                   [list(f) for f in d.get("files") or ()], d.get("path"), d.get("kind"),
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
    ETag, facets, member]), so that an unchanged file is not scanned again."""

    grouping: dict[str, Any]
    format: str
    datasets: dict[str, DatasetRecord] = field(default_factory=dict)
    content: dict[str, list] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"virtualize_catalog": RECORD_VERSION, "virtualize_version": __version__,
                "written": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "grouping": self.grouping, "format": self.format,
                "datasets": {n: d.to_dict() for n, d in sorted(self.datasets.items())},
                "content": self.content}


def load(out: Path) -> CatalogRecord | None:
    """The record in `out`, or None (no catalog there yet). Raises ValueError for one
    that cannot be read (edited, or of a later virtualize)."""
    p = out / RECORD
    if not p.is_file():
        return None
    try:
        d = json.loads(p.read_text())
        if d.get("virtualize_catalog") != RECORD_VERSION:
            raise ValueError(f"a record of version {d.get('virtualize_catalog')!r}")
        return CatalogRecord(dict(d["grouping"]), d["format"],
                             {n: DatasetRecord.from_dict(n, x) for n, x in d["datasets"].items()},
                             dict(d.get("content") or {}))
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{p}: not a catalog record virtualize can read ({e})") from None


def save(out: Path, record: CatalogRecord) -> None:
    replace_atomically(out / RECORD, json.dumps(record.to_dict(), indent=1).encode())


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
    built = [d for _, d in sorted(record.datasets.items()) if d.status == "built"]
    facet_cols = columns(built, order)
    variable = next((c for c in VARIABLE_COLUMNS if c in facet_cols), None)
    cols = ["dataset", *facet_cols]
    if variable is None:
        variable = "variables"
        cols.append(variable)
    cols += ["path", "format"]
    buf = io.StringIO()
    w = csv.DictWriter(buf, cols, lineterminator="\n")
    w.writeheader()
    for d in built:
        path, fmt = asset(out, d)
        row = {"dataset": d.name, **{c: d.facets.get(c, "") for c in facet_cols},
               "path": path, "format": fmt}
        if variable not in d.facets:
            row[variable] = " ".join(d.variables)
        w.writerow(row)
    groupby = [c for c in name_facets if c in facet_cols]
    keys = {tuple(d.facets.get(c, "") for c in groupby) for d in built}
    if not groupby or len(keys) < len(built):
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
    replace_atomically(out / CATALOG_CSV, buf.getvalue().encode())
    replace_atomically(out / CATALOG_JSON, json.dumps(doc, indent=2).encode())
    return out / CATALOG_JSON
