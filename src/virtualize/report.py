"""Preflight reports: a verdict, counts, every located problem, and pictures of the grids.

Three forms of one `Report`: a terminal table (`format_text`, colour only on a TTY), JSON
for pipelines (`to_json`, schema in docs/report.md) and one self-contained HTML page
(`to_html`: inline SVG, no network) that draws each variable's cuts as bands and a
mosaic's tiles as a map.
"""

from __future__ import annotations

import html
import json
from collections import defaultdict
from typing import Any

import numpy as np

from . import model
from .emit.metadata import chunk_grid
from .model import GAP, OK, OVERHANG, REFUSED, SHORT

JSON_SCHEMA_VERSION = 1
YES, REMEDIES, NO = "yes", "yes with remedies", "no"


class Report(model.Report):
    """`model.Report` with its presentations: `.to_json()`, `.to_html()`, `.to_text()`."""

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
    return {
        "files": len(report.files),
        "variables": len(plan.figures or plan.arrays) if plan else 0,
        "variables_refused": sum(f.refused for f in figures),
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
        doc["concat_dim"] = report.plan.concat_dim
        doc["remedies"] = [r.to_dict() for r in report.plan.remedies.values()]
    return doc


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


def format_text(report: model.Report, verbose: bool = False, color: bool = False) -> str:
    lines: list[str] = []
    v = verdict(report)
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
        lines.append(f"{s['variables']} variable(s) examined, {s['variables_refused']} refused")
    if report.plan is not None and s["variables"] and report.ok:
        lines.append(f"{s['variables']} variable(s), {s['chunks']} chunk(s), {s['references']} "
                     f"reference(s) to {_size(s['bytes_referenced'])}"
                     + (f", {s['unsupported_variables_skipped']} unsupported variable(s) skipped"
                        if s["unsupported_variables_skipped"] else ""))
    for r in (report.plan.remedies.values() if report.plan else ()):
        lines.append(f"remedy {r.kind}: {r.blocks} block(s), "
                     + (f"{_size(r.bytes)} copied into the cube" if r.kind == "materialize"
                        else "nothing copied (exact byte ranges)")
                     + ("" if r.enabled else f" -- not enabled: pass --{r.kind}"))
    if report.problems:
        lines.append("")
        lines.extend(_problem_table(sorted(report.problems, key=lambda p: not p.fatal), color))
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
            lines.append(f"  {name} {tuple(a.dims)} {tuple(int(n) for n in a.shape)} "
                         f"{a.dtype.newbyteorder('=').name}"
                         f"  {kind} {json.dumps(spec)}")
    if verbose and report.bytes_read:
        lines.append("")
        lines.append(f"bytes read while scanning: {s['bytes_read']} in {len(report.bytes_read)} file(s)")
        for path, b in report.bytes_read.items():
            r = report.requests.get(path)
            lines.append(f"  {b:>12}  {path}" + (f"  ({r} requests)" if r is not None else ""))
    return "\n".join(lines)


def _problem_table(problems, color: bool) -> list[str]:
    by_file: dict[str, list] = defaultdict(list)
    for p in problems:
        by_file[p.loc.file or "(stack)"].append(p)
    out = []
    for f, ps in by_file.items():
        out.append(f)
        rows = [("variable", "axis", "block", "kind", "problem")]
        for p in ps:
            msg = p.message + (f" [remedy: {p.remedy}]" if p.remedy else "")
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

MARK_COLORS = {OK: "#4c78a8", SHORT: "#f2a541", OVERHANG: "#9c6ade", REFUSED: "#d62728",
               GAP: "#d9d9d9"}
MARK_NAMES = {OK: "chunk", SHORT: "short chunk", OVERHANG: "padded last block (overhang)",
              REFUSED: "refused block", GAP: "gap (no tile)"}
BAND_WIDTH = 900
MAX_RUNS = 300  # runs drawn per band; the rest are summarized, so huge grids stay small

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
             "<title>virtualize report</title>", f"<style>{CSS}</style></head><body>",
             "<h1>Can this stack be virtualized?</h1>",
             f'<div class="verdict {cls}" id="verdict">{html.escape(v)}</div>',
             '<table class="counts">']
    for key, value in s.items():
        shown = _size(value) if key.startswith("bytes") else str(value)
        parts.append(f"<tr><td>{html.escape(key.replace('_', ' '))}</td><td>{shown}</td></tr>")
    parts.append("</table>")
    for r in (report.plan.remedies.values() if report.plan else ()):
        cost = (f"{_size(r.bytes)} copied" if r.kind == "materialize" else "nothing copied")
        state = "" if r.enabled else " — not enabled"
        parts.append(f'<p class="remedy"><b>remedy {html.escape(r.kind)}</b>: {r.blocks} '
                     f"block(s), {cost}{state}</p>")
    plan = report.plan
    if plan is not None and plan.mosaic is not None:
        parts.append("<h2>Mosaic</h2>")
        parts.append(_mosaic_svg(plan.mosaic))
    if plan is not None and plan.figures:
        parts.append("<h2>Chunk grids</h2>")
        parts.append(_legend())
        for name, fig in plan.figures.items():
            a = plan.arrays.get(name)
            kind = ("refused" if fig.refused or a is None else
                    "inline" if a.inline is not None else chunk_grid(a)["name"])
            parts.append(f'<section class="variable" data-variable="{html.escape(name)}">'
                         f"<h3>{html.escape(name)} <small>({kind})</small></h3>")
            for axis in fig.axes:
                parts.append(_band(axis))
            parts.append("</section>")
    parts.append(_problems_html(report))
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
        remedy = f"<br><b>remedy:</b> {html.escape(p.remedy)}" if p.remedy else ""
        rows.append(f'<tr class="problem {"fatal" if p.fatal else "warning"}" '
                    f'data-kind="{html.escape(p.kind)}"><td>{html.escape(p.loc.file or "")}</td>'
                    f"<td>{html.escape(p.loc.variable or '')}</td><td>{html.escape(p.loc.axis or '')}"
                    f'</td><td>{block}</td><td class="kind">{html.escape(p.kind)}</td>'
                    f"<td>{html.escape(p.message)}{remedy}</td></tr>")
    rows.append("</table>")
    return "\n".join(rows)


def _legend() -> str:
    items = "".join(f'<span><i style="background:{c}"></i>{MARK_NAMES[m]}</span>'
                    for m, c in MARK_COLORS.items())
    return f'<div class="legend">{items}</div>'


def _band(axis) -> str:
    """One axis as a horizontal band: each run of equal chunks one rectangle, chunk
    boundaries drawn as ticks while there are few enough to see."""
    runs = axis.runs()
    total = max(int(axis.lengths.sum()), axis.extent, 1)
    scale = BAND_WIDTH / total
    h, y = 26, 4
    svg = [f'<svg width="{BAND_WIDTH + 2}" height="{h + 22}" role="img">']
    x = 0.0
    shown = runs[:MAX_RUNS]
    for length, mark, count in shown:
        w = length * count * scale
        color = MARK_COLORS.get(mark, MARK_COLORS[OK])
        label = f"{length}" + (f" × {count}" if count > 1 else "")
        svg.append(f'<rect x="{x:.2f}" y="{y}" width="{max(w, 0.8):.2f}" height="{h}" '
                   f'fill="{color}" stroke="white" stroke-width="{0.6 if w > 3 else 0}">'
                   f"<title>{label} ({MARK_NAMES.get(mark, mark)})</title></rect>")
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
        rest = sum(n for _, _, n in runs[MAX_RUNS:])
        svg.append(f'<text x="{min(x, BAND_WIDTH - 160):.2f}" y="{y + h + 14}" font-size="11">'
                   f"… {rest} more chunks in {len(runs) - MAX_RUNS} runs</text>")
    ext = axis.extent * scale
    svg.append(f'<line x1="{ext:.2f}" y1="0" x2="{ext:.2f}" y2="{h + 8}" stroke="#222" '
               'stroke-dasharray="3,2"><title>end of the array</title></line>')
    svg.append("</svg>")
    spec = json.dumps([r[0] if r[2] == 1 else [r[0], r[2]] for r in runs[:12]])
    more = " …" if len(runs) > 12 else ""
    caption = (f"<figcaption><b>{html.escape(axis.dim)}</b>: {axis.extent} steps in "
               f"{len(axis.lengths)} chunk(s) <code>{html.escape(spec)}{more}</code></figcaption>")
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
