"""The report of `virtualize catalog`: the archive at a glance. What each dataset became
(built, appended, unchanged, rebuilt, refused, removed), why the refused ones were
refused (grouped by problem kind, the first dataset and problem of each), and the files
no dataset took (grouped by why). As text (one screen; `verbose`: every dataset), JSON
(`to_dict`) and one HTML page (`to_html`)."""

from __future__ import annotations

import html
import json
import os
import pickle
import tempfile
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..model import Location, Problem

STATUSES = ("built", "appended", "rebuilt", "unchanged", "refused", "removed")
IN_CATALOG = {"built", "appended", "rebuilt", "unchanged"}


class Spooled(Sequence):
    """Items kept on disk as they come, not in memory: each pickled to an unnamed
    temporary file when appended, read back in order when iterated (a catalog of 5,000
    datasets holds no object per dataset until its report is asked for). A sequence
    like a list; `spooled[i]` reads up to item i."""

    def __init__(self, items: Iterable = ()) -> None:
        self._file = tempfile.TemporaryFile(prefix="virtualize-catalog-")
        self._ends = array("q")  # (where each item ends: no object each)
        for item in items:
            self.append(item)

    def append(self, item) -> None:
        f = self._file
        f.seek(0, 2)
        pickle.dump(item, f, protocol=pickle.HIGHEST_PROTOCOL)
        self._ends.append(f.tell())

    def extend(self, items: Iterable) -> None:
        for item in items:
            self.append(item)

    def __len__(self) -> int:
        return len(self._ends)

    def __iter__(self) -> Iterator:
        start = 0
        for k in range(len(self._ends)):  # (items appended meanwhile: not read)
            end = self._ends[k]
            yield self._read(start, end)
            start = end

    def _read(self, start: int, end: int):
        self._file.flush()
        return pickle.loads(os.pread(self._file.fileno(), end - start, start))

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self._read(self._ends[i - 1] if i else 0, self._ends[i])

    def __eq__(self, other) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return list(self) == list(other)
        return NotImplemented

    def __add__(self, other: Iterable) -> list:
        return [*self, *other]

    def __repr__(self) -> str:
        return repr(list(self))

    def __reduce__(self):  # (copied or pickled: as the list it holds)
        return (list, (list(self),))


@dataclass
class DatasetOutcome:
    """One dataset of the catalog's run: its `name`, `status` (`STATUSES`), `facets`, how
    many files and members, its output (`path`, `kind`), `why` (what changed, in words),
    and a refused one's `problems` (the fatal ones)."""

    name: str
    status: str
    facets: dict[str, str] = field(default_factory=dict)
    files: int = 0
    members: int = 0
    path: str | None = None
    kind: str | None = None
    why: str = ""
    problems: list[Problem] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "facets": dict(self.facets),
                "files": self.files, "members": self.members, "path": self.path,
                "kind": self.kind, "why": self.why,
                "problems": [p.to_dict() for p in self.problems]}


@dataclass
class CatalogReport:
    """What `virtualize.catalog` did: `datasets` (one `DatasetOutcome` each), `left_out`
    (path -> why no dataset took it), `files` (how many the walk found), `scanned` (how
    many were scanned this run), the catalog written (`catalog`: its catalog.json) and
    `problems` of the walk itself (a root that cannot be listed)."""

    roots: list[str]
    out: str
    catalog: str | None = None
    datasets: Sequence[DatasetOutcome] = field(default_factory=list)  # (`Spooled`)
    left_out: dict[str, str] = field(default_factory=dict)
    files: int = 0
    scanned: int = 0
    problems: list[Problem] = field(default_factory=list)
    grouping: str = ""

    @property
    def ok(self) -> bool:
        """Every dataset found is in the catalog (none refused) and every root was walked."""
        return not any(d.status == "refused" for d in self.datasets) and \
            not any(p.fatal for p in self.problems)

    @property
    def counts(self) -> dict[str, int]:
        c = Counter(d.status for d in self.datasets)
        return {s: c[s] for s in STATUSES if c[s]}

    def by(self, status: str) -> list[DatasetOutcome]:
        return [d for d in self.datasets if d.status == status]

    def refusals(self) -> list[tuple[str, list[tuple[DatasetOutcome, Problem]]]]:
        """The refused datasets grouped by the kind of their first problem: (kind, [(dataset,
        its first problem of that kind)]), the most frequent first."""
        groups: dict[str, list[tuple[DatasetOutcome, Problem]]] = {}
        for d in self.by("refused"):
            first = d.problems[0] if d.problems else Problem(Location(), "refused", d.why)
            groups.setdefault(first.kind, []).append((d, first))
        return sorted(groups.items(), key=lambda kv: -len(kv[1]))

    def left_out_groups(self) -> list[tuple[str, list[str]]]:
        """Files no dataset took, by why (versions superseded said once): most first."""
        groups: dict[str, list[str]] = {}
        for path, why in self.left_out.items():
            key = "a version superseded by a later one" if why.startswith("version ") else why
            groups.setdefault(key, []).append(path)
        return sorted(groups.items(), key=lambda kv: -len(kv[1]))

    def summary_line(self) -> str:
        counts = self.counts
        shown = sum(counts.get(s, 0) for s in IN_CATALOG)
        words = ", ".join(f"{n} {s}" for s, n in counts.items() if s in IN_CATALOG)
        line = f"catalog {self.catalog or self.out}: {shown} dataset(s)"
        line += f" ({words})" if words else ""
        if counts.get("refused"):
            line += f"; {counts['refused']} refused"
        if counts.get("removed"):
            line += f"; {counts['removed']} removed (their files are gone)"
        taken = self.files - len(self.left_out)
        line += (f"; {self.files} file(s) found, {taken} in datasets, {len(self.left_out)} "
                 f"left out, {self.scanned} scanned")
        return line

    def to_text(self, verbose: bool = False, limit: int = 8) -> str:
        """One screen: the summary, the refusals by kind (count, first dataset and its
        problem), the files left out by why; `verbose`: every dataset and file."""
        lines = [self.summary_line()]
        if self.grouping:
            lines.append(f"datasets by {self.grouping}")
        for p in self.problems:
            lines.append(f"problem: {p}")
        refusals = self.refusals()
        if refusals:
            lines += ["", "refused:"]
            for kind, items in refusals[: None if verbose else limit]:
                d, p = items[0]
                lines.append(f"  {kind}: {len(items)} dataset(s); first {d.name}: "
                             f"{_short(p)}")
                if verbose:
                    lines += [f"    {d.name}: {_short(p)}" for d, p in items[1:]]
            if not verbose and len(refusals) > limit:
                lines.append(f"  ... {len(refusals) - limit} more kind(s) (-v)")
        groups = self.left_out_groups()
        if groups:
            lines += ["", "left out (in no dataset):"]
            for why, paths in groups[: None if verbose else limit]:
                lines.append(f"  {why}: {len(paths)} file(s), first {paths[0]}")
                if verbose:
                    lines += [f"    {p}" for p in paths[1:]]
        again = any(d.status != "built" and d.status != "refused" for d in self.datasets)
        changed = [d for d in self.datasets if d.status in ("appended", "rebuilt", "removed")
                   or again and d.status == "built"]  # (a re-run's new datasets too)
        shown = self.datasets if verbose else changed[:limit]
        if shown:
            lines += ["", "datasets:" if verbose else "changed:"]
            for d in shown:
                lines.append(f"  {d.status:<9} {d.name}: {d.files} file(s)"
                             + (f", {d.members} member(s)" if d.members else "")
                             + (f"; {d.why}" if d.why else ""))
            if not verbose and len(changed) > limit:
                lines.append(f"  ... {len(changed) - limit} more (-v)")
        if self.catalog:
            lines += ["", f"open it: intake.open_esm_datastore({self.catalog!r}).to_dataset_dict()"]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "out": self.out, "catalog": self.catalog, "roots": self.roots,
                "grouping": self.grouping, "counts": self.counts, "files": self.files,
                "scanned": self.scanned,
                "datasets": [d.to_dict() for d in self.datasets],
                "refused_by_kind": {k: [d.name for d, _ in items] for k, items in self.refusals()},
                "left_out": dict(self.left_out),
                "problems": [p.to_dict() for p in self.problems]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)

    def to_html(self) -> str:
        """One self-contained page: the counts, the refusals by kind, every dataset as a
        table row coloured by its status, the files left out by why."""
        e = html.escape
        color = {"built": "#d4f4d4", "appended": "#d4e8f4", "rebuilt": "#f4ecd4",
                 "unchanged": "#eeeeee", "refused": "#f4d4d4", "removed": "#dddddd"}
        parts = ["<!doctype html><meta charset=utf-8><title>virtualize catalog</title>",
                 "<style>body{font:14px sans-serif;margin:2em}td,th{padding:2px 8px;"
                 "text-align:left;vertical-align:top}table{border-collapse:collapse}</style>",
                 f"<h1>{e(self.summary_line())}</h1>"]
        refusals = self.refusals()
        if refusals:
            parts.append("<h2>Refused, by kind</h2><ul>")
            for kind, items in refusals:
                d, p = items[0]
                parts.append(f"<li><b>{e(kind)}</b>: {len(items)} dataset(s); first "
                             f"{e(d.name)}: {e(_short(p))}</li>")
            parts.append("</ul>")
        parts.append("<h2>Datasets</h2><table><tr><th>status</th><th>dataset</th><th>files"
                     "</th><th>members</th><th>why</th></tr>")
        for d in self.datasets:
            why = d.why or (_short(d.problems[0]) if d.problems else "")
            parts.append(f'<tr style="background:{color.get(d.status, "#fff")}"><td>'
                         f"{e(d.status)}</td><td>{e(d.name)}</td><td>{d.files}</td>"
                         f"<td>{d.members or ''}</td><td>{e(why)}</td></tr>")
        parts.append("</table>")
        groups = self.left_out_groups()
        if groups:
            parts.append("<h2>Left out</h2><ul>")
            parts += [f"<li>{e(why)}: {len(paths)} file(s), first {e(paths[0])}</li>"
                      for why, paths in groups]
            parts.append("</ul>")
        return "\n".join(parts)


def _short(p: Problem, width: int = 160) -> str:
    where = p.loc.variable or (p.loc.file.rsplit("/", 1)[-1] if p.loc.file else "")
    text = f"{where}: {p.message}" if where else p.message
    return text if len(text) <= width else text[: width - 3] + "..."
