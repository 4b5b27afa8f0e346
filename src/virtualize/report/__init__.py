"""Preflight reports: a verdict, counts, every located problem, and pictures of the grids.

Three forms of one `Report`: a terminal table (`format_text`, colour only on a TTY), JSON
for pipelines (`to_json`, schema in docs/report.md) and one self-contained HTML page
(`to_html`: inline SVG, no network) that draws each variable's cuts as bands, a
mosaic's tiles as a map and a hypercube's file grid (`layout.py`) as a grid of cells.
"""

from __future__ import annotations

import html
import json
import os
from collections import defaultdict
from typing import Any

import numpy as np

from .. import model
from ..model import GAP, OK, OVERHANG, REFUSED, SHORT
from ..outputs.metadata import chunk_grid
from . import layout as _layout

JSON_SCHEMA_VERSION = 1
YES, REMEDIES, NO = "yes", "yes with remedies", "no"


class Report(model.Report):
    """`model.Report` with its presentations (`.to_json()`, `.to_html()`, `.to_text()`,
    `_repr_html_` for notebooks), its `.verdict`, and its plan opened in memory
    (`.to_store()`, `.to_xarray()`) without writing anything."""

    appending = False  # a report of `append`: its ways through are re-runs of `virtualize`

    @property
    def verdict(self) -> str:
        """"yes", "yes with remedies" or "no" (docs/report.md)."""
        return verdict(self)

    @property
    def refused_variables(self) -> dict[str, list[str]]:
        """Each refused variable with its ways through (remedy options, `--drop VAR`)."""
        return refused_variables(self)

    def __repr__(self) -> str:
        s = summary(self)
        out = f", wrote {self.output['kind']} {self.output['path']}" if self.output else ""
        return (f"<virtualize.Report {verdict(self)}: {s['files']} file(s), {s['variables']} "
                f"variable(s), {s['problems']} problem(s), {s['warnings']} warning(s){out}>")

    def _repr_html_(self) -> str:
        """The HTML report in a notebook, in an iframe so that its styles stay its own."""
        return (f'<iframe class="virtualize-report" srcdoc="{html.escape(to_html(self))}" '
                'style="width:100%;height:640px;border:1px solid #ddd"></iframe>')

    def to_store(self, *, allow=None):
        """The plan as a read-only in-memory zarr store (metadata and inline values in
        memory, chunks read from the sources by byte range); nothing is written. Raises
        `VirtualizeError` with the problems when the stack cannot be virtualized."""
        from ..open import plan_store

        if not self.ok:
            raise model.VirtualizeError([p for p in self.problems if p.fatal] or
                                        [model.Problem(model.Location(), "no-files",
                                                       "nothing to open")],
                                        "the plan cannot be opened: the stack cannot be "
                                        "virtualized", report=self)
        return plan_store(self.plan, allow=allow)

    def to_zarr(self, *, allow=None):
        """The plan as a read-only zarr group (see `to_store`)."""
        import zarr

        from ..outputs.base import rectilinear_enabled

        with rectilinear_enabled():
            return zarr.open_group(self.to_store(allow=allow), mode="r", zarr_format=3)

    def to_xarray(self, *, allow=None, **kwargs):
        """The plan as an xarray Dataset read lazily from the sources (needs the `xarray`
        extra); `kwargs` go to `xarray.open_dataset`."""
        import xarray as xr

        from ..outputs.base import rectilinear_enabled

        store = self.to_store(allow=allow)
        with rectilinear_enabled():
            return xr.open_dataset(store, engine="zarr", zarr_format=3, consolidated=False,
                                   **kwargs)

    def to_json(self) -> str:
        return to_json(self)

    def to_html(self) -> str:
        return to_html(self)

    def to_text(self, verbose: bool = False, color: bool = False) -> str:
        return format_text(self, verbose, color)


def verdict(report: model.Report) -> str:
    if report.ok:
        used = report.plan.remedies.values() if report.plan else ()
        return REMEDIES if any(r.enabled and r.blocks for r in used) else YES
    fatal = [p for p in report.problems if p.fatal]
    if report.plan is not None and fatal and all(p.remedy for p in fatal):
        return REMEDIES
    return NO


def summary(report: model.Report) -> dict[str, int]:
    """Counts: files, variables, chunks (grid cells), references (stored blocks),
    bytes referenced, bytes stored inline, unsupported variables skipped, bytes read."""
    plan = report.plan
    arrays = plan.arrays.values() if plan else ()
    virtual = [a for a in arrays if a.refs is not None]
    skipped = {(p.loc.variable) for p in report.problems
               if not p.fatal and p.kind == "unsupported-type"}
    figures = plan.figures.values() if plan else ()
    refused = refused_variables(report)
    return {
        "files": len(report.files),
        "variables": len(set(plan.figures or plan.arrays) | set(refused)) if plan else 0,
        "variables_refused": len(refused),
        "chunks": int(sum(int(np.prod([len(ax.lengths) for ax in f.axes])) for f in figures)
                      if plan and plan.figures else sum(int(np.prod(a.grid_shape)) for a in arrays)),
        "references": int(sum(int((a.refs["length"] > 0).sum()) for a in virtual)),
        "bytes_referenced": int(sum(int(a.refs["length"].sum()) for a in virtual)),
        "bytes_inline": int(sum(a.inline.nbytes for a in arrays if a.inline is not None)),
        "unsupported_variables_skipped": len(skipped),
        "problems": sum(p.fatal for p in report.problems),
        "warnings": sum(not p.fatal for p in report.problems),
        "bytes_read": int(sum(report.bytes_read.values())),
        "requests": int(sum(report.requests.values())),
    }


def refused_variables(report: model.Report) -> dict[str, list[str]]:
    """Every variable that keeps the stack from being virtualized (a refused block in its
    figure, or a blocking problem located at it: e.g. a length that differs between
    files), with the ways through: the remedy options its problems name, then
    `--drop VAR` (always: the rest of the stack is then virtualized without it), except
    for the concatenation coordinate: its problems (overlapping or repeated steps) come
    back without it, so its ways are leaving out the file(s) or another --concat-dim.
    Under `append` (which takes none of these options) each option is a re-run of
    `virtualize` with all the files."""
    out: dict[str, list[str]] = {}
    plan = report.plan
    for name, fig in (plan.figures.items() if plan else ()):
        if fig.refused:
            out[name] = []
    for p in report.problems:
        if p.fatal and p.loc.variable:
            ways = out.setdefault(p.loc.variable, [])
            for option in (f"--inline {p.loc.variable}", *model.REMEDY_OPTIONS.values()):
                if option and p.remedy and option in p.remedy and option not in ways:
                    ways.append(option)
    dim = plan.concat_dim if plan else None
    for name, ways in out.items():
        kinds = {p.kind for p in report.problems if p.fatal and p.loc.variable == name}
        if name != dim or not kinds & _ORDER_KINDS:
            ways.append(f"--drop {name}")
            continue
        if "duplicate-coordinate" in kinds:
            ways.append("leave out the file given twice")
        if "coordinate-not-increasing" in kinds:
            ways.append(f"leave out the file(s) whose {dim} steps overlap or go back")
        if "coordinate-gap" in kinds:
            ways.append("add the missing files, or leave out --no-gaps")
        if kinds - {"coordinate-gap"}:
            ways.append("--concat-dim DIM (another dimension)")
    if getattr(report, "appending", False):
        for ways in out.values():
            ways[:] = [_rerun(w) if w.startswith("--") else w for w in ways]
    return out


# problems of the concatenation coordinate's order: `--drop` does not remove them
_ORDER_KINDS = frozenset({"duplicate-coordinate", "coordinate-not-increasing", "coordinate-gap"})


def _rerun(option: str) -> str:
    """A way through under `append`: its option is one of `virtualize`'s."""
    return f"re-run virtualize with all the files and {option}"


def _refused_words(refused: dict[str, list[str]], limit: int = 3) -> str:
    """"stn (--drop stn)", the first few refused variables with their ways through."""
    words = ", ".join(f"{name} ({' or '.join(ways)})" for name, ways in list(refused.items())[:limit])
    return words + (", ..." if len(refused) > limit else "")


# -- JSON ------------------------------------------------------------------------------

def to_dict(report: model.Report) -> dict[str, Any]:
    doc: dict[str, Any] = {"schema": "virtualize-report", "version": JSON_SCHEMA_VERSION,
                           "verdict": verdict(report), **report.to_dict(),
                           "summary": summary(report)}
    if report.plan is not None:
        for name, a in report.plan.arrays.items():
            doc["arrays"][name]["chunk_grid"] = chunk_grid(a)
            doc["arrays"][name]["bytes_referenced"] = (
                int(a.refs["length"].sum()) if a.refs is not None else 0)
        for name, fig in report.plan.figures.items():
            if name not in doc["arrays"]:
                doc["arrays"][name] = {"status": "refused", "dims": [ax.dim for ax in fig.axes],
                                       "shape": [int(ax.extent) for ax in fig.axes]}
            elif fig.refused:
                doc["arrays"][name]["status"] = "refused"
        for name, ways in refused_variables(report).items():
            entry = doc["arrays"].setdefault(name, {})
            entry["status"] = "refused"
            entry["ways_through"] = ways
        doc["concat_dim"] = report.plan.concat_dim
        if report.plan.layout is not None:
            doc["layout"].update(_layout.to_dict_extra(report.plan.layout))
        doc["remedies"] = [dict(r.to_dict(), option=model.REMEDY_OPTIONS.get(r.kind),
                                copies=r.kind == "materialize",
                                words=_remedy_words(r, getattr(report, "appending", False)))
                           for r in report.plan.remedies.values()]
    for p in report.problems:
        if p.kind == "unsupported-type" and not p.fatal and p.loc.variable \
                and p.loc.variable not in doc["arrays"]:
            doc["arrays"][p.loc.variable] = {"status": "skipped"}
    return doc


def _remedy_words(r, appending: bool = False) -> str:
    return (f"{r.kind}: {r.blocks} block(s), "
            + (f"{_size(r.bytes)} copied into the cube" if r.kind == "materialize"
               else "nothing copied (exact byte ranges)")
            + _not_enabled(r, appending))


def _not_enabled(r, appending: bool = False) -> str:
    if r.enabled:
        return ""
    return f" -- not enabled: {_rerun('--' + r.kind) if appending else 'pass --' + r.kind}"


def to_json(report: model.Report) -> str:
    return json.dumps(to_dict(report), indent=2, default=_json_default)


def _json_default(o):
    """numpy numbers as JSON numbers (not their str), anything else as its str."""
    v = o.item() if hasattr(o, "item") and getattr(o, "ndim", None) == 0 else o
    return v if isinstance(v, (int, float, bool, str)) else str(v)


# -- text ------------------------------------------------------------------------------

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
                 f"reference(s) to {_size(s['bytes_referenced'])}")
    for r in (report.plan.remedies.values() if report.plan else ()):
        if r.enabled and r.blocks:
            line += f"; {_remedy_words(r, getattr(report, 'appending', False))}"
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


def _missing_refused(report: model.Report) -> bool:
    """Are a layout's missing cells refused (join "exact"), or absent chunks (join
    "outer", read as the fill value; a mosaic's missing tiles, always)? By the recipe's
    join, else by the verdict."""
    recipe = report.plan.recipe if report.plan is not None else {}
    if recipe.get("kind") == "mosaic":
        return False
    join = recipe.get("join")
    return join != "outer" if join else not report.ok


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
                     f"reference(s) to {_size(s['bytes_referenced'])}"
                     + (f", {s['unsupported_variables_skipped']} unsupported variable(s) skipped"
                        if s["unsupported_variables_skipped"] else ""))
    for r in (report.plan.remedies.values() if report.plan else ()):
        lines.append(f"remedy {r.kind}: {r.blocks} block(s), "
                     + (f"{_size(r.bytes)} copied into the cube" if r.kind == "materialize"
                        else "nothing copied (exact byte ranges)")
                     + _not_enabled(r, getattr(report, "appending", False)))
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
        lines.extend(_layout.text(report.plan.layout, refused=_missing_refused(report)))
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


def _remedy_shown(remedy: str, appending: bool = False) -> str:
    return f"{remedy}, by re-running virtualize with all the files" if appending else remedy


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
            msg = p.message + (f" [remedy: {_remedy_shown(p.remedy, appending)}]"
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


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


# -- HTML ------------------------------------------------------------------------------

MARK_COLORS = {OK: "#4c78a8", SHORT: "#9ecae9", OVERHANG: "#9c6ade", REFUSED: "#d62728",
               GAP: "#d9d9d9"}
MARK_NAMES = {OK: "chunk", SHORT: "short chunk", OVERHANG: "padded last block (overhang)",
              REFUSED: "refused block", GAP: "gap (no tile)"}
BAND_WIDTH = 900
MAX_RUNS = 300  # runs drawn per band; the rest are summarized, so huge grids stay small
MAX_PADDED_DRAWN = 64  # padded chunks of one run drawn one by one (data, then padding)
PAD_FILL = "#ececec"

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1000px}
h1{font-size:22px;margin:0 0 8px} h2{font-size:17px;margin:28px 0 8px} h3{font-size:15px;margin:18px 0 4px}
.verdict{font-size:26px;font-weight:700;padding:10px 14px;border-radius:6px;display:inline-block}
.verdict.yes{background:#e3f4e1;color:#1e7b1e}.verdict.remedies{background:#fff3d6;color:#8a5a00}
.verdict.no{background:#fde2e1;color:#b3261e}
table.counts td{padding:2px 12px 2px 0} table.problems{border-collapse:collapse;width:100%}
table.problems td,table.problems th{border-bottom:1px solid #ddd;padding:4px 6px;text-align:left;
  vertical-align:top}
tr.fatal td.kind{color:#b3261e;font-weight:600} tr.warning td.kind{color:#8a5a00}
figure{margin:6px 0 10px} figcaption{font-size:12px;color:#555}
.legend span{display:inline-block;margin-right:14px;font-size:12px}
.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-2px}
code{background:#f4f4f4;padding:1px 3px;border-radius:3px}
"""


def to_html(report: model.Report) -> str:
    v = verdict(report)
    s = summary(report)
    cls = {YES: "yes", REMEDIES: "remedies", NO: "no"}[v]
    parts = ["<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
             f"<title>{html.escape(_page_title(report, v))}</title>",
             f"<style>{CSS}</style></head><body>",
             "<h1>Can this stack be virtualized?</h1>",
             f'<div class="verdict {cls}" id="verdict">{html.escape(v)}</div>',
             '<table class="counts">']
    for key, value in s.items():
        shown = _size(value) if key.startswith("bytes") else str(value)
        parts.append(f"<tr><td>{html.escape(key.replace('_', ' '))}</td><td>{shown}</td></tr>")
    parts.append("</table>")
    for r in (report.plan.remedies.values() if report.plan else ()):
        cost = (f"{_size(r.bytes)} copied" if r.kind == "materialize" else "nothing copied")
        state = "" if r.enabled else " — not enabled" + (
            f" ({_rerun('--' + r.kind)})" if getattr(report, "appending", False) else "")
        parts.append(f'<p class="remedy"><b>remedy {html.escape(r.kind)}</b>: {r.blocks} '
                     f"block(s), {cost}{state}</p>")
    # why a refused stack is refused, above the pictures
    refused = refused_variables(report)
    if refused and not report.ok:
        parts.append('<p class="refused-variables"><b>refused variables</b>: '
                     + ", ".join(f'<span data-variable="{html.escape(n)}">{html.escape(n)} '
                                 f"({html.escape(' or '.join(w))})</span>"
                                 for n, w in refused.items()) + "</p>")
    parts.append(_problems_html(report))
    plan = report.plan
    if plan is not None and plan.layout is not None:
        parts.append("<h2>File grid</h2>")
        parts.append(_layout.to_html(plan.layout, refused=_missing_refused(report)))
    if plan is not None and plan.mosaic is not None:
        parts.append("<h2>Mosaic</h2>")
        parts.append(_mosaic_svg(plan.mosaic))
    if plan is not None and plan.figures:
        parts.append("<h2>Chunk grids</h2>")
        used = {_shown_mark(m, i, len(ax.marks)) for fig in plan.figures.values()
                for ax in fig.axes for i, m in enumerate(ax.marks.tolist())}
        pads = [ax.pads() for fig in plan.figures.values() for ax in fig.axes]
        parts.append(_legend(used, any(len(p) and p[-1] for p in pads),
                             any(p.any() for p in pads)))
        for name, fig in plan.figures.items():
            a = plan.arrays.get(name)
            kind = ("refused" if fig.refused or a is None else
                    "inline" if a.inline is not None else chunk_grid(a)["name"])
            parts.append(f'<section class="variable" data-variable="{html.escape(name)}">'
                         f"<h3>{html.escape(name)} <small>({kind})</small></h3>")
            for axis in fig.axes:
                parts.append(_band(axis))
            parts.append("</section>")
    if report.left_out:
        parts.append(f"<h2>Left out</h2><p>{len(report.left_out)} file(s) that cannot be "
                     "scanned (--skip-unreadable):</p><ul class=left-out>")
        parts += [f"<li><code>{html.escape(d['path'])}</code>: {html.escape(d['kind'])} "
                  f"{html.escape(d['message'])}</li>" for d in report.left_out]
        parts.append("</ul>")
    if report.notes:
        parts.append("<h2>Notes</h2><ul class=notes>")
        parts += [f"<li>{html.escape(n)}</li>" for n in report.notes]
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _problems_html(report: model.Report) -> str:
    if not report.problems:
        return "<h2>Problems</h2><p id=no-problems>None.</p>"
    rows = ["<h2>Problems</h2>", '<table class="problems" id="problems"><tr><th>file</th>'
            "<th>variable</th><th>axis</th><th>block</th><th>kind</th><th>problem</th></tr>"]
    for p in sorted(report.problems, key=lambda p: not p.fatal):
        block = ",".join(map(str, p.loc.block)) if p.loc.block is not None else ""
        remedy = (f"<br><b>remedy:</b> "
                  f"{html.escape(_remedy_shown(p.remedy, getattr(report, 'appending', False)))}"
                  if p.remedy else "")
        rows.append(f'<tr class="problem {"fatal" if p.fatal else "warning"}" '
                    f'data-kind="{html.escape(p.kind)}"><td>{html.escape(p.loc.file or "")}</td>'
                    f"<td>{html.escape(p.loc.variable or '')}</td><td>{html.escape(p.loc.axis or '')}"
                    f'</td><td>{block}</td><td class="kind">{html.escape(p.kind)}</td>'
                    f"<td>{html.escape(p.message)}{remedy}</td></tr>")
    rows.append("</table>")
    return "\n".join(rows)


def _page_title(report: model.Report, v: str) -> str:
    """The stack and the verdict: "virtualize: yes -- 12 files in /data (a.nc ... l.nc)"."""
    files = report.files
    if not files:
        return f"virtualize: {v}"
    names = [os.path.basename(f) for f in files]
    where = os.path.dirname(os.path.commonpath(files)) if len(files) == 1 else \
        os.path.commonpath(files)
    span = names[0] if len(names) == 1 else f"{names[0]} ... {names[-1]}"
    return f"virtualize: {v} -- {len(files)} file(s) in {where} ({span})"


def _shown_mark(mark: str, i: int, n: int) -> str:
    """A short chunk at the end of an axis is the usual remainder: drawn as a chunk."""
    return OK if mark == SHORT and i == n - 1 else mark


def _legend(used: set[str] | None = None, overhang: bool = False,
            padding: bool = False) -> str:
    """The marks the page uses (all when `used` is None), padding and the dashed line
    when drawn."""
    items = "".join(f'<span><i style="background:{c}"></i>{MARK_NAMES[m]}</span>'
                    for m, c in MARK_COLORS.items() if used is None or m in used)
    if padding:
        items += (f'<span><i style="background:{PAD_FILL};outline:1px dashed #555;'
                  'outline-offset:-1px"></i>padding (stored in a padded block, holds no '
                  "data)</span>")
    if overhang:
        items += ('<span><i style="border-left:2px dashed #222;width:0"></i>end of the array, '
                  "where a padded last block reaches past it</span>")
    return f'<div class="legend">{items}</div>'


def _band(axis) -> str:
    """One axis as a horizontal band: each run of equal chunks one rectangle, chunk
    boundaries drawn as ticks while there are few enough to see. A padded block is drawn
    at its stored length: its data, then its padding (lighter, dashed); the dashed line
    marks the array's end when the last block is padded past it."""
    runs = axis.runs()
    if runs and runs[-1][1] == SHORT and runs[-1][3] == 1:  # the usual remainder at the end
        runs[-1] = (runs[-1][0], _shown_mark(SHORT, 0, 1), *runs[-1][2:])
    stored = int(axis.lengths.sum())
    pads = axis.pads()
    total = max(stored, axis.extent, 1)
    scale = BAND_WIDTH / total
    h, y = 26, 4
    svg = [f'<svg width="{BAND_WIDTH + 2}" height="{h + 22}" role="img">']
    x = 0.0
    shown = runs[:MAX_RUNS]
    for length, mark, pad, count in shown:
        w = length * count * scale
        color = MARK_COLORS.get(mark, MARK_COLORS[OK])
        held = length - pad
        label = (f"{held}+{pad}" if pad else f"{length}") + (f" × {count}" if count > 1 else "")
        what = MARK_NAMES.get(mark, mark) + (f"; {held} step(s) of data, stored padded to "
                                             f"{length}" if pad else "")
        if pad:  # each chunk: its data, then its padding
            for i in range(min(count, MAX_PADDED_DRAWN)):
                cx = x + i * length * scale
                svg.append(f'<rect class="chunk" x="{cx:.2f}" y="{y}" '
                           f'width="{max(held * scale, 0.8):.2f}" height="{h}" fill="{color}" '
                           f'data-steps="{held}"><title>{label} ({what})</title></rect>')
                svg.append(f'<rect class="padding" x="{cx + held * scale:.2f}" y="{y}" '
                           f'width="{pad * scale:.2f}" height="{h}" fill="{PAD_FILL}" '
                           f'stroke="{color}" stroke-width="0.8" stroke-dasharray="2,2" '
                           f'data-steps="{pad}"><title>{pad} step(s) of padding</title></rect>')
            if count > MAX_PADDED_DRAWN:  # the rest of a long run: one band
                cx = x + MAX_PADDED_DRAWN * length * scale
                svg.append(f'<rect x="{cx:.2f}" y="{y}" width="{w - (cx - x):.2f}" height="{h}" '
                           f'fill="{color}" opacity="0.6"><title>{label} ({what})</title></rect>')
        else:
            svg.append(f'<rect class="chunk" x="{x:.2f}" y="{y}" width="{max(w, 0.8):.2f}" '
                       f'height="{h}" fill="{color}" stroke="white" '
                       f'stroke-width="{0.6 if w > 3 else 0}" data-steps="{length * count}">'
                       f"<title>{label} ({what})</title></rect>")
            if count > 1 and length * scale >= 4:
                for i in range(1, count):
                    tx = x + i * length * scale
                    svg.append(f'<line x1="{tx:.2f}" y1="{y}" x2="{tx:.2f}" y2="{y + h}" '
                               'stroke="white" stroke-width="0.6"/>')
        if w >= 8 * len(label):
            svg.append(f'<text x="{x + w / 2:.2f}" y="{y + h / 2 + 4}" fill="white" '
                       f'font-size="11" text-anchor="middle">{label}</text>')
        x += w
    if len(runs) > MAX_RUNS:
        rest = sum(r[3] for r in runs[MAX_RUNS:])
        svg.append(f'<text x="{min(x, BAND_WIDTH - 160):.2f}" y="{y + h + 14}" font-size="11">'
                   f"… {rest} more chunks in {len(runs) - MAX_RUNS} runs</text>")
    if len(pads) and pads[-1]:  # the last block is padded past the end of the array
        ext = (stored - int(pads[-1])) * scale
        svg.append(f'<line class="end" x1="{ext:.2f}" y1="0" x2="{ext:.2f}" y2="{h + 8}" '
                   'stroke="#222" stroke-dasharray="3,2"><title>end of the array (the last '
                   "block is padded past it)</title></line>")
    svg.append("</svg>")
    spec = json.dumps([(f"{r[0] - r[2]}+{r[2]}" if r[2] else r[0]) if r[3] == 1 else
                       [f"{r[0] - r[2]}+{r[2]}" if r[2] else r[0], r[3]] for r in runs[:12]])
    more = " …" if len(runs) > 12 else ""
    padding = int(pads.sum())
    padded = (f"; {int((pads > 0).sum())} of them padded: {axis.extent} steps of data + "
              f"{padding} of padding = {stored} stored" if padding else "")
    caption = (f"<figcaption><b>{html.escape(axis.dim)}</b>: {axis.extent} steps in "
               f"{len(axis.lengths)} chunk(s){padded} <code>{html.escape(spec)}{more}</code>"
               "</figcaption>")
    return (f'<figure class="band" data-axis="{html.escape(axis.dim)}">{"".join(svg)}'
            f"{caption}</figure>")


def _mosaic_svg(m: model.MosaicFigure) -> str:
    scale = min(900 / max(m.width, 1), 600 / max(m.height, 1))
    W, H = m.width * scale, m.height * scale
    svg = [f'<svg width="{W + 2:.0f}" height="{H + 2:.0f}" role="img">',
           f'<rect x="0" y="0" width="{W:.2f}" height="{H:.2f}" fill="{MARK_COLORS[GAP]}"/>']
    palette = ["#9ecae1", "#a1d99b", "#fdd0a2", "#bcbddc", "#c7e9c0", "#fdae6b", "#dadaeb"]
    for i, (name, r0, c0, h, w) in enumerate(m.tiles):
        svg.append(f'<rect class="tile" x="{c0 * scale:.2f}" y="{r0 * scale:.2f}" '
                   f'width="{w * scale:.2f}" height="{h * scale:.2f}" fill="{palette[i % len(palette)]}" '
                   f'fill-opacity="0.85" stroke="#333"><title>{html.escape(name)}: rows {r0}..'
                   f"{r0 + h - 1}, columns {c0}..{c0 + w - 1}</title></rect>")
        label = html.escape(name.rsplit("/", 1)[-1])
        svg.append(f'<text x="{(c0 + w / 2) * scale:.2f}" y="{(r0 + h / 2) * scale:.2f}" '
                   f'font-size="11" text-anchor="middle">{label}</text>')
    for y in m.ycuts[1:-1] if len(m.ycuts) < 400 else ():
        svg.append(f'<line x1="0" y1="{y * scale:.2f}" x2="{W:.2f}" y2="{y * scale:.2f}" '
                   'stroke="#555" stroke-width="0.5" stroke-dasharray="2,2"/>')
    for x in m.xcuts[1:-1] if len(m.xcuts) < 400 else ():
        svg.append(f'<line x1="{x * scale:.2f}" y1="0" x2="{x * scale:.2f}" y2="{H:.2f}" '
                   'stroke="#555" stroke-width="0.5" stroke-dasharray="2,2"/>')
    for r0, r1, c0, c1 in m.overlaps:
        svg.append(f'<rect class="overlap" x="{c0 * scale:.2f}" y="{r0 * scale:.2f}" '
                   f'width="{(c1 - c0) * scale:.2f}" height="{(r1 - r0) * scale:.2f}" '
                   f'fill="{MARK_COLORS[REFUSED]}" fill-opacity="0.35"><title>overlap: rows {r0}..'
                   f"{r1 - 1}, columns {c0}..{c1 - 1}</title></rect>")
    for r0, r1, c0, c1 in m.refused[:2000]:
        svg.append(f'<rect class="refused" x="{c0 * scale:.2f}" y="{r0 * scale:.2f}" '
                   f'width="{(c1 - c0) * scale:.2f}" height="{(r1 - r0) * scale:.2f}" fill="none" '
                   f'stroke="{MARK_COLORS[REFUSED]}" stroke-width="2"/>')
    svg.append("</svg>")
    return (f'<figure class="mosaic-map">{"".join(svg)}<figcaption>{len(m.tiles)} tiles on a '
            f"{m.height} × {m.width} grid cut into {len(m.ycuts) - 1} × {len(m.xcuts) - 1} cells "
            "(dashed); grey: gaps, red: overlaps and cut blocks</figcaption></figure>")
