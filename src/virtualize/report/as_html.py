"""The report as one self-contained HTML page (`to_html`: inline SVG, no network): each
variable's cuts as bands, a mosaic's tiles as a map, a hypercube's file grid
(`layout.py`) as a grid of cells."""

from __future__ import annotations

import html
import json
import os

from .. import model
from ..model import GAP, OK, OVERHANG, REFUSED, SHORT
from ..outputs.metadata import chunk_grid
from . import layout as _layout
from .facts import (
    NO,
    REMEDIES,
    YES,
    every_data_variable_refused,
    missing_refused,
    refused_variables,
    remedy_shown,
    rerun,
    size_text,
    summary,
    verdict,
    ways_words,
)

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
        shown = size_text(value) if key.startswith("bytes") else str(value)
        parts.append(f"<tr><td>{html.escape(key.replace('_', ' '))}</td><td>{shown}</td></tr>")
    parts.append("</table>")
    for r in (report.plan.remedies.values() if report.plan else ()):
        cost = (f"{size_text(r.bytes)} copied" if r.kind == "materialize" else "nothing copied")
        state = "" if r.enabled else " — not enabled" + (
            f" ({rerun('--' + r.kind)})" if getattr(report, "appending", False) else "")
        parts.append(f'<p class="remedy"><b>remedy {html.escape(r.kind)}</b>: {r.blocks} '
                     f"block(s), {cost}{state}</p>")
    # why a refused stack is refused, above the pictures
    refused = refused_variables(report)
    every = every_data_variable_refused(report)
    if refused and not report.ok:
        parts.append('<p class="refused-variables"><b>refused variables</b>: '
                     + ", ".join(f'<span data-variable="{html.escape(n)}">{html.escape(n)} '
                                 f"({html.escape(ways_words(w, every))})</span>"
                                 for n, w in refused.items()) + "</p>")
    parts += [f'<p class="hint">{html.escape(h)}</p>' for h in getattr(report, "hints", ())]
    parts.append(_problems_html(report))
    plan = report.plan
    if plan is not None and plan.layout is not None:
        parts.append("<h2>File grid</h2>")
        parts.append(_layout.to_html(plan.layout, refused=missing_refused(report)))
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
    """The problems (fatal: what keeps the stack from being virtualized) and, apart, the
    warnings (variables skipped, gaps in the axis, attributes left out: the cube is built
    with them)."""
    appending = getattr(report, "appending", False)
    fatal = [p for p in report.problems if p.fatal]
    warnings = [p for p in report.problems if not p.fatal]
    out = ["<h2>Problems</h2>", _problem_rows(fatal, "problems", appending) if fatal else
           "<p id=no-problems>None.</p>"]
    if warnings:
        out += ["<h2>Warnings</h2>", _problem_rows(warnings, "warnings", appending)]
    return "\n".join(out)


def _problem_rows(problems: list[model.Problem], table_id: str, appending: bool) -> str:
    rows = [f'<table class="problems" id="{table_id}"><tr><th>file</th>'
            "<th>variable</th><th>axis</th><th>block</th><th>kind</th><th>problem</th></tr>"]
    for p in problems:
        block = ",".join(map(str, p.loc.block)) if p.loc.block is not None else ""
        remedy = (f"<br><b>remedy:</b> {html.escape(remedy_shown(p.remedy, appending))}"
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
