"""Reports for people (a text table) and for pipelines (JSON)."""

from __future__ import annotations

import json
import os
from collections import defaultdict

from .emit.metadata import chunk_grid
from .model import Report

JSON_SCHEMA_VERSION = 1


def to_json(report: Report) -> str:
    doc = {"schema": "virtualize-report", "version": JSON_SCHEMA_VERSION, **report.to_dict()}
    if report.plan is not None:
        for name, a in report.plan.arrays.items():
            doc["arrays"][name]["chunk_grid"] = chunk_grid(a)
    return json.dumps(doc, indent=2, default=str)


def format_text(report: Report, verbose: bool = False) -> str:
    lines: list[str] = []
    fatal = [p for p in report.problems if p.fatal]
    other = [p for p in report.problems if not p.fatal]
    n = len(report.files)
    if report.ok:
        lines.append(f"yes: {n} file(s) can be virtualized"
                     + (f" ({len(other)} note(s) below)" if other else ""))
    else:
        lines.append(f"no: {len(fatal)} problem(s) in {n} file(s) keep this stack from being "
                     "virtualized")
    if report.problems:
        lines.append("")
        lines.extend(_problem_table(fatal + other))
    if report.notes:
        lines.append("")
        lines.extend(f"note: {t}" for t in report.notes)
    if report.plan is not None and (verbose or report.ok):
        lines.append("")
        concat = report.plan.concat_dim
        lines.append(f"arrays (concatenated along {concat!r}):" if concat else "arrays:")
        for name, a in report.plan.arrays.items():
            grid = chunk_grid(a)
            spec = (grid["configuration"].get("chunk_shapes") or
                    grid["configuration"].get("chunk_shape"))
            kind = "inline" if a.inline is not None else grid["name"]
            lines.append(f"  {name} {tuple(a.dims)} {tuple(a.shape)} {a.dtype.newbyteorder('=').name}"
                         f"  {kind} {json.dumps(spec)}")
    if verbose and report.bytes_read:
        lines.append("")
        total = sum(report.bytes_read.values())
        lines.append(f"bytes read while scanning: {total} in {len(report.bytes_read)} file(s)")
        for path, b in report.bytes_read.items():
            lines.append(f"  {b:>12}  {path}")
    return "\n".join(lines)


def _problem_table(problems) -> list[str]:
    by_file: dict[str, list] = defaultdict(list)
    for p in problems:
        by_file[p.loc.file or "(stack)"].append(p)
    out = []
    for f, ps in by_file.items():
        out.append(f"{f}")
        rows = [("variable", "axis", "block", "kind", "problem")]
        for p in ps:
            rows.append((p.loc.variable or "-", p.loc.axis or "-",
                         ",".join(map(str, p.loc.block)) if p.loc.block is not None else "-",
                         p.kind + ("" if p.fatal else " (skipped)"), p.message))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        for r in rows:
            out.append("  " + "  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4])
    return out


def short(path: str) -> str:
    return os.path.relpath(path) if not path.startswith("..") else path
