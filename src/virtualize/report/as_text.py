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
from .datasets import several_datasets
from .facts import (
    NO,
    REMEDIES,
    YES,
    every_data_variable_refused,
    gap_words,
    missing_refused,
    path_lines,
    refused_variables,
    remedy_shown,
    remedy_words,
    short_paths,
    size_text,
    summary,
    verdict,
    ways_words,
    wrote,
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
    if wrote(report):
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
    # steps missing in the axis: said here, as files left out are (a cron job's log)
    gaps = [p for p, _ in groups if p.kind == "coordinate-gap"]
    if gaps:
        line += f"; {gap_words(gaps)}"
    others = len(groups) - len(skipped) - len(gaps) + len(report.notes)
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


SCREEN = 40  # lines a refusal's text takes by default, about one screen (-v: everything)
MIN_PROBLEM_LINES = 12  # the problems' share of it, at least
LIKE_SHOWN = 2  # the entries of one kind shown when grouped: the first and the last
LISTED = 5  # notes and files left out listed by default (-v: all)


def format_text(report: model.Report, verbose: bool = False, color: bool = False) -> str:
    """The report for a terminal: an accepted stack in one line (everything with
    `verbose`); a refused one with its verdict, counts, remedies and its problems,
    identical problems of several files once with their file count, within about one
    screen (`SCREEN` lines): when every problem does not fit, problems of one kind are
    grouped (count, first and last; `verbose`: every one, as the JSON has them)."""
    v = verdict(report)
    if report.ok and not verbose:
        return _c(summary_line(report), COLORS[v], color)
    appending = getattr(report, "appending", False)
    lines = _head(report, v, color)
    tail = _tail(report, verbose)
    if report.problems:
        problems = sorted(report.problems, key=lambda p: not p.fatal)
        table = _problem_table(problems, color, verbose, appending)
        if not verbose:
            room = max(SCREEN - len(lines) - sum(len(t) + 1 for t in tail) - 1,
                       MIN_PROBLEM_LINES)
            if len(table) > room:
                table = _problem_kinds(problems, room, color, appending)
        lines += ["", *table]
    if not verbose:  # what is left of the screen: the file grid shortened first
        tail = _shorten(tail, SCREEN - len(lines))
    for part in tail:
        lines += ["", *part]
    return "\n".join(lines)


def _head(report: model.Report, v: str, color: bool) -> list[str]:
    """The verdict, the variables (refused, with their ways through), the stack's hints
    (`Report.hints`, one line each) and the remedies."""
    s = summary(report)
    n = s["files"]
    if report.already and report.plan is not None and not report.plan.arrays and report.ok:
        head = summary_line(report)  # nothing to append
    elif v == YES or (v == REMEDIES and report.ok):
        head = f"{v}: {n} file(s) can be virtualized"
        if s["warnings"]:
            head += f" ({s['warnings']} note(s) below)"
    elif v == REMEDIES:
        head = (f"yes with remedies: {s['problems']} problem(s) in {n} file(s), each with a "
                "remedy (below) that is not enabled")
    else:
        head = f"no: {s['problems']} problem(s) in {n} file(s) keep this stack from being virtualized"
    lines = [_c(head, COLORS[v], color)]
    lines.extend(several_datasets(report))
    if report.plan is not None and s["variables"] and not report.ok:
        refused = refused_variables(report)
        lines.append(f"{s['variables']} variable(s) examined, {s['variables_refused']} refused"
                     + (f": {_refused_words(refused, every_data_variable_refused(report))}"
                        if refused else
                        # (not "0 refused" alone beside a "no": what blocks is a file's)
                        " (the problems below are of files, not of a variable)"))
    if report.plan is not None and s["variables"] and report.ok:
        lines.append(f"{s['variables']} variable(s), {s['chunks']} chunk(s), {s['references']} "
                     f"reference(s) to {size_text(s['bytes_referenced'])}"
                     + (f", {s['unsupported_variables_skipped']} unsupported variable(s) skipped"
                        if s["unsupported_variables_skipped"] else ""))
    lines += list(getattr(report, "hints", None) or ())
    for r in (report.plan.remedies.values() if report.plan else ()):
        lines.append(f"remedy {remedy_words(r, getattr(report, 'appending', False))}")
    return lines


def _tail(report: model.Report, verbose: bool) -> list[list[str]]:
    """The parts after the problems, each a list of lines: notes, files left out, the
    file grid, the arrays and the bytes read (those two: `verbose`, or accepted)."""
    parts: list[list[str]] = []
    if report.notes:
        notes = []
        for t in report.notes:
            if verbose:  # every path, but one a line
                t, paths = path_lines(t)
                notes += [f"note: {t}", *(f"  {p}" for p in paths)]
            else:
                notes.append(f"note: {short_paths(t)}")
        parts.append(notes)
    if report.left_out:
        parts.append([f"left out ({len(report.left_out)} file(s) that cannot be scanned, "
                      "--skip-unreadable):"]
                     + [f"  {d['path']}: {d['kind']} {d['message']}" for d in report.left_out])
    if report.plan is not None and report.plan.layout is not None:
        # (a refused stack shows it too: where its files are missing)
        parts.append(_layout.text(report.plan.layout, refused=missing_refused(report)))
    s = summary(report)
    if report.plan is not None and (verbose or report.ok):
        concat = report.plan.concat_dim
        arrays = [f"arrays (concatenated along {concat!r}):" if concat else "arrays:"]
        for name, a in report.plan.arrays.items():
            grid = chunk_grid(a)
            spec = (grid["configuration"].get("chunk_shapes") or
                    grid["configuration"].get("chunk_shape"))
            kind = "inline" if a.inline is not None else grid["name"]
            arrays.append(f"  {name} {tuple(a.dims)} {tuple(int(n) for n in a.shape)} "
                          f"{_dtype_name(a.dtype)}"
                          f"  {kind} {json.dumps(spec)}")
        parts.append(arrays)
    if verbose and report.bytes_read:
        read = [f"bytes read while scanning: {s['bytes_read']} in {len(report.bytes_read)} file(s)"]
        for path, b in report.bytes_read.items():
            r = report.requests.get(path)
            read.append(f"  {b:>12}  {path}" + (f"  ({r} requests)" if r is not None else ""))
        parts.append(read)
    return parts


def _shorten(parts: list[list[str]], room: int) -> list[list[str]]:
    """The parts after the problems within `room` lines, when they are longer: the file
    grid as its summary and missing cells, then the notes and files left out as their
    first few (each shortened part says -v has it all)."""
    parts = [list(p) for p in parts]

    def size() -> int:
        return sum(len(p) + 1 for p in parts)
    for i, part in enumerate(parts):
        if size() <= room:
            break
        if part and part[0].startswith("layout ("):
            missing = [j for j, line in enumerate(part) if line.startswith("  missing cells")]
            kept = part[missing[0]:missing[0] + 1 + LISTED] if missing else []
            more = len(part) - missing[0] - 1 - LISTED if missing else 0
            parts[i] = [part[0], *kept] + ([f"    ... and {more} more"] if more > 0 else []) \
                + ["  (-v shows every axis and the grid)"]
    for i, part in enumerate(parts):
        if size() <= room:
            break
        if part and part[0].startswith("note: ") and len(part) > LISTED:
            parts[i] = part[:LISTED] + [f"note: ... and {len(part) - LISTED} more note(s) (-v)"]
        elif part and part[0].startswith("left out (") and len(part) > LISTED + 1:
            parts[i] = part[:LISTED + 1] + [f"  ... and {len(part) - 1 - LISTED} more (-v)"]
    return parts


def _problem_kinds(problems, room: int, color: bool, appending: bool) -> list[str]:
    """Problems grouped by kind (fatal first), within `room` lines: each kind's count,
    files and variables, then its first and last problem (identical problems of several
    files once, as in the table); kinds past the room counted on one line."""
    kinds: dict[tuple[str, bool], list[tuple[model.Problem, list[str | None]]]] = {}
    for p, files in _grouped(problems):
        kinds.setdefault((p.kind, p.fatal), []).append((p, files))
    total = sum(len(files) for entries in kinds.values() for _, files in entries)
    out = [f"problems by kind, the first and last of each (-v lists all {total}; --json "
           "keeps every one):"]
    left = list(kinds.items())
    while left:
        (kind, fatal), entries = left[0]
        shown = entries if len(entries) <= LIKE_SHOWN else [entries[0], entries[-1]]
        size = 1 + len(shown) + (len(entries) > LIKE_SHOWN)  # (head, entries, "... more")
        if len(out) + size > room - (1 if len(left) > 1 else 0):
            break
        left.pop(0)
        count = sum(len(files) for _, files in entries)
        files = {f for _, fs in entries for f in fs}
        variables = list(dict.fromkeys(p.loc.variable for p, _ in entries if p.loc.variable))
        head = (f"{kind}{'' if fatal else ' (skipped)'}: {count} problem(s)"
                + (f" in {len(files)} file(s)" if len(files - {None}) > 1 else "")
                + (f", variable(s) {_few(variables)}" if variables else ""))
        out.append("  " + _c(head, "31" if fatal else "33", color))
        for j, (p, fs) in enumerate(shown):
            mark = ("first " if j == 0 else "last  ") if len(entries) > LIKE_SHOWN else ""
            out.append(f"    {mark}{_where(p, fs)}: {short_paths(p.message)}"
                       + (f" [remedy: {remedy_shown(p.remedy, appending)}]" if p.remedy else ""))
        if len(entries) > LIKE_SHOWN:
            out.insert(-1, f"    ... {len(entries) - LIKE_SHOWN} more of this kind (-v)")
    if left:
        out.append("  ... and " + ", ".join(
            f"{kind} ({sum(len(fs) for _, fs in entries)})" for (kind, _), entries in left)
            + " (-v)")
    return out


def _where(p: model.Problem, files: list[str | None]) -> str:
    """A problem's location: its file (or the files it is in) / variable / axis / block."""
    if len(files) > 1:
        names = [os.path.basename(f or "") for f in files]
        at = model.Location(f"(in {len(files)} files: {names[0]} ... {names[-1]})",
                            p.loc.variable, p.loc.axis, p.loc.block)
        return str(at)
    return str(p.loc)


def _few(names: list[str], shown: int = 5) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown
                                       else "")


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
            msg = (p.message if verbose else short_paths(p.message)) + (
                f" [remedy: {remedy_shown(p.remedy, appending)}]" if p.remedy else "")
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


def _refused_words(refused: dict[str, list[str]], every: list[str] = (), limit: int = 3) -> str:
    """"stn (--drop stn)", the first few refused variables with their ways through, the
    data variables first when every one is refused (`every`: no --drop is then offered)."""
    order = [n for n in refused if n in every] + [n for n in refused if n not in every]
    words = ", ".join(f"{name} ({ways_words(refused[name], every)})" for name in order[:limit])
    return words + (", ..." if len(refused) > limit else "")
