"""The report for a terminal (`format_text`, `summary_line`): an accepted stack in one
line, a refused one with its counts, remedies and every problem; colour only when asked
(on a TTY)."""

from __future__ import annotations

import json
import os
from collections import defaultdict

import numpy as np

from .. import model
from ..outputs.metadata import chunk_grid
from . import layout as _layout
from .facts import (
    NO,
    REMEDIES,
    YES,
    missing_refused,
    not_enabled,
    refused_variables,
    remedy_shown,
    remedy_words,
    size_text,
    summary,
    verdict,
)

COLORS = {YES: "32", REMEDIES: "33", NO: "31"}


def _c(text: str, code: str, color: bool) -> str:
    return f"\033[{code}m{text}\033[0m" if color else text


def summary_line(report: model.Report) -> str:
    """An accepted stack in one line: verdict, counts, remedies used, what was skipped
    (after a write: where to)."""
    v = verdict(report)
    s = summary(report)
    line = f"{v}: {s['files']} file(s) can be virtualized"
    if report.output:
        line = (f"{v}: {s['files']} file(s) virtualized into {report.output['kind']} "
                f"{report.output['path']}")
    if report.plan is not None and s["variables"]:
        line += (f": {s['variables']} variable(s), {s['chunks']} chunk(s), {s['references']} "
                 f"reference(s) to {size_text(s['bytes_referenced'])}")
    for r in (report.plan.remedies.values() if report.plan else ()):
        if r.enabled and r.blocks:
            line += f"; {remedy_words(r, getattr(report, 'appending', False))}"
    groups = _grouped([p for p in report.problems if not p.fatal])
    skipped = [(p, files) for p, files in groups if p.kind == "unsupported-type"]
    if skipped:
        line += "; skipped " + ", ".join(
            f"{p.loc.variable} ({p.kind}, {_in_files(files)})" for p, files in skipped[:3])
        line += ", ..." if len(skipped) > 3 else ""
    others = len(groups) - len(skipped) + len(report.notes)
    if others:
        line += f"; {others} note(s) (-v)"
    if report.plan is not None and report.plan.layout is not None:
        line += f"; file grid {_layout.summary(report.plan.layout)} (-v shows it)"
    return _job_words(report, line)


def _job_words(report: model.Report, line: str) -> str:
    """The summary line with the files left out (skip_unreadable) and, for `append`, the
    files already in the cube."""
    if report.already and report.plan is not None and not report.plan.arrays:
        line = (f"{verdict(report)}: nothing to append to {report.output['kind']} "
                f"{report.output['path']}: 0 new, {len(report.already)} already in the cube"
                if report.output else line)
    elif report.already:
        line += f"; {len(report.already)} file(s) already in the cube, skipped"
    if report.left_out:
        kinds = sorted({d["kind"] for d in report.left_out})
        line += (f"; {len(report.left_out)} file(s) left out, cannot be scanned "
                 f"({', '.join(kinds)}; -v lists them)")
    return line


def _in_files(files: list[str | None]) -> str:
    return f"in {len(files)} files" if len(files) > 1 else "in 1 file"


def _grouped(problems) -> list[tuple[model.Problem, list[str | None]]]:
    """Problems that are the same but for their file, once each with their files."""
    groups: dict[tuple, tuple[model.Problem, list[str | None]]] = {}
    for p in problems:
        key = (p.loc.variable, p.loc.axis, p.loc.block, p.kind, p.message, p.fatal, p.remedy)
        groups.setdefault(key, (p, []))[1].append(p.loc.file)
    return list(groups.values())


def format_text(report: model.Report, verbose: bool = False, color: bool = False) -> str:
    """The report for a terminal: an accepted stack in one line (everything with
    `verbose`); a refused one with its verdict, counts, remedies and every problem,
    identical problems of several files once with their file count."""
    v = verdict(report)
    if report.ok and not verbose:
        return _c(summary_line(report), COLORS[v], color)
    lines: list[str] = []
    s = summary(report)
    n = s["files"]
    if v == YES or (v == REMEDIES and report.ok):
        head = f"{v}: {n} file(s) can be virtualized"
        if s["warnings"]:
            head += f" ({s['warnings']} note(s) below)"
    elif v == REMEDIES:
        head = (f"yes with remedies: {s['problems']} problem(s) in {n} file(s), each with a "
                "remedy (below) that is not enabled")
    else:
        head = f"no: {s['problems']} problem(s) in {n} file(s) keep this stack from being virtualized"
    lines.append(_c(head, COLORS[v], color))
    if report.plan is not None and s["variables"] and not report.ok:
        refused = refused_variables(report)
        lines.append(f"{s['variables']} variable(s) examined, {s['variables_refused']} refused"
                     + (f": {_refused_words(refused)}" if refused else
                        # (not "0 refused" alone beside a "no": what blocks is a file's)
                        " (the problems below are of files, not of a variable)"))
    if report.plan is not None and s["variables"] and report.ok:
        lines.append(f"{s['variables']} variable(s), {s['chunks']} chunk(s), {s['references']} "
                     f"reference(s) to {size_text(s['bytes_referenced'])}"
                     + (f", {s['unsupported_variables_skipped']} unsupported variable(s) skipped"
                        if s["unsupported_variables_skipped"] else ""))
    for r in (report.plan.remedies.values() if report.plan else ()):
        lines.append(f"remedy {r.kind}: {r.blocks} block(s), "
                     + (f"{size_text(r.bytes)} copied into the cube" if r.kind == "materialize"
                        else "nothing copied (exact byte ranges)")
                     + not_enabled(r, getattr(report, "appending", False)))
    if report.problems:
        lines.append("")
        lines.extend(_problem_table(sorted(report.problems, key=lambda p: not p.fatal), color,
                                    verbose, getattr(report, "appending", False)))
    if report.notes:
        lines.append("")
        lines.extend(f"note: {t}" for t in report.notes)
    if report.left_out:
        lines.append("")
        lines.append(f"left out ({len(report.left_out)} file(s) that cannot be scanned, "
                     "--skip-unreadable):")
        lines.extend(f"  {d['path']}: {d['kind']} {d['message']}" for d in report.left_out)
    if report.plan is not None and report.plan.layout is not None:
        # (a refused stack shows it too: where its files are missing)
        lines.append("")
        lines.extend(_layout.text(report.plan.layout, refused=missing_refused(report)))
    if report.plan is not None and (verbose or report.ok):
        lines.append("")
        concat = report.plan.concat_dim
        lines.append(f"arrays (concatenated along {concat!r}):" if concat else "arrays:")
        for name, a in report.plan.arrays.items():
            grid = chunk_grid(a)
            spec = (grid["configuration"].get("chunk_shapes") or
                    grid["configuration"].get("chunk_shape"))
            kind = "inline" if a.inline is not None else grid["name"]
            lines.append(f"  {name} {tuple(a.dims)} {tuple(int(n) for n in a.shape)} "
                         f"{_dtype_name(a.dtype)}"
                         f"  {kind} {json.dumps(spec)}")
    if verbose and report.bytes_read:
        lines.append("")
        lines.append(f"bytes read while scanning: {s['bytes_read']} in {len(report.bytes_read)} file(s)")
        for path, b in report.bytes_read.items():
            r = report.requests.get(path)
            lines.append(f"  {b:>12}  {path}" + (f"  ({r} requests)" if r is not None else ""))
    return "\n".join(lines)


def _dtype_name(dtype: np.dtype) -> str:
    """"float32", "string" (text), "struct[a: int32, b: float64]" (a compound)."""
    if dtype.kind == "T":
        return "string"
    if dtype.names is not None:
        return "struct[" + ", ".join(f"{k}: {_dtype_name(dtype.fields[k][0])}"
                                     for k in dtype.names) + "]"
    return dtype.newbyteorder("=").name


def _problem_table(problems, color: bool, verbose: bool = False,
                   appending: bool = False) -> list[str]:
    """By file; a problem several files share (the same variable, kind and message) is
    listed once under "(in N files)", with the files named when `verbose`."""
    by_file: dict[str, list] = defaultdict(list)
    shared: dict[str, list[str | None]] = {}
    for p, files in _grouped(problems):
        if len(files) > 1:
            names = [os.path.basename(f or "") for f in files]
            head = f"(in {len(files)} files: {names[0]} ... {names[-1]})"
            shared[head] = files
            by_file[head].append(p)
        else:
            by_file[files[0] or "(stack)"].append(p)
    out = []
    for f, ps in by_file.items():
        out.append(f)
        if f in shared and verbose:
            out.extend(f"  {name}" for name in shared[f])
        rows = [("variable", "axis", "block", "kind", "problem")]
        for p in ps:
            msg = p.message + (f" [remedy: {remedy_shown(p.remedy, appending)}]"
                               if p.remedy else "")
            rows.append((p.loc.variable or "-", p.loc.axis or "-",
                         ",".join(map(str, p.loc.block)) if p.loc.block is not None else "-",
                         p.kind + ("" if p.fatal else " (skipped)"), msg))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        for j, r in enumerate(rows):
            cells = [c.ljust(w) for c, w in zip(r[:4], widths)]
            if j and color:
                cells[3] = _c(cells[3], "31" if ps[j - 1].fatal else "33", True)
            out.append("  " + "  ".join(cells) + "  " + r[4])
    return out


def _refused_words(refused: dict[str, list[str]], limit: int = 3) -> str:
    """"stn (--drop stn)", the first few refused variables with their ways through."""
    words = ", ".join(f"{name} ({' or '.join(ways)})" for name, ways in list(refused.items())[:limit])
    return words + (", ..." if len(refused) > limit else "")
