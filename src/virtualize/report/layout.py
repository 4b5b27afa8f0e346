"""A hypercube's file grid (`model.Layout`) as the report shows it: in text (each axis'
positions with their files, a grid table of the last two axes, the missing cells with
their coordinates) and in HTML (an SVG picture of the grid, missing cells marked).

Large grids are summarised, never drawn cell by cell: runs of complete cells (and of
complete rows, and of complete outer positions) collapse into one line or one rectangle.
"""

from __future__ import annotations

import html
import itertools
import os
from collections import defaultdict

from .. import model

# cell states
OK, MISSING, PARTIAL, EMPTY = "ok", "missing", "partial", "empty"

MAX_POSITIONS = 12  # positions listed per axis (the rest: a count; missing ones always)
MAX_TEXT_COLS = 12  # wider grids: each row as runs of equal cells
MAX_TEXT_ROWS = 30  # taller grids: runs of complete rows collapsed
MAX_TABLES = 8  # tables (outer positions) drawn; complete runs collapse first
MAX_MISSING_LISTED = 20
MAX_STRIPES = 8  # variables drawn as stripes of a cell; more: one stripe for all
COLORS = {OK: "#4c78a8", MISSING: "#d62728", PARTIAL: "#d62728", EMPTY: "#ffffff",
          "absent": "#d9d9d9"}


class Grid:
    """The cells of a layout by index, and what each index holds."""

    def __init__(self, layout: model.Layout):
        self.layout = layout
        self.axes = layout.axes
        self.shape = tuple(len(a.labels) for a in layout.axes)
        self.by_index: dict[tuple[int, ...], list[model.LayoutCell]] = defaultdict(list)
        for c in layout.cells:
            self.by_index[tuple(c.index)].append(c)
        names: list[str] = []
        for vs in dict.fromkeys(c.variables for c in layout.cells):
            names += [v for v in vs if v not in names]
        self.variables = names  # every variable any cell names, in first-seen order
        self.files = list(dict.fromkeys(c.path for c in layout.cells if c.path is not None))
        self._missing: list | None = None
        self.missing_set: set[tuple[int, ...]] = set()
        self.missing()

    def state(self, index: tuple[int, ...]) -> str:
        """ok: files fill the cell; missing: no file (a missing cell, or no cell listed);
        partial: files for some variables, a missing cell for others."""
        if index not in self.missing_set:
            return OK
        cells = self.by_index.get(index, [])
        held = [c for c in cells if c.path is not None]
        lack = [c for c in cells if c.path is None]
        if not held:
            return MISSING
        return PARTIAL if lack else OK

    def variables_at(self, index: tuple[int, ...]) -> set[str]:
        return {v for c in self.by_index.get(index, []) for v in c.variables}

    def lacking(self, index: tuple[int, ...]) -> list[str]:
        """The variables a missing cell at `index` lacks (empty when it names none)."""
        out: list[str] = []
        for c in self.by_index.get(index, []):
            if c.path is None:
                out += [v for v in c.variables if v not in out]
        return out

    def stripe(self, index: tuple[int, ...], variable: str) -> str:
        """One variable at one cell: ok (a file holds it), missing (a missing cell names it),
        empty (this variable has no file at this cell, and none is missing)."""
        cells = self.by_index.get(index, [])
        if index not in self.missing_set and variable in self.variables_at(index):
            return OK
        if any(c.path is not None and variable in c.variables for c in cells):
            return OK
        if any(c.path is None and (variable in c.variables or not c.variables) for c in cells):
            return MISSING
        return MISSING if not cells else EMPTY

    def missing(self) -> list[tuple[tuple[int, ...], list[str]]]:
        """Every cell with something missing, in grid order, with the variables it lacks:
        the cells of a missing file, and the indices no cell is listed for."""
        if self._missing is None:
            found = {ix for ix, cells in self.by_index.items()
                     if any(c.path is None for c in cells)}
            if self.shape and len(self.by_index) < _size(self.shape):  # (indices no cell is listed for)
                found |= {ix for ix in itertools.product(*map(range, self.shape))
                          if ix not in self.by_index}
            self._missing = [(ix, self.lacking(ix)) for ix in sorted(found)]
            self.missing_set = {ix for ix, _ in self._missing}
        return self._missing

    def paths(self, index: tuple[int, ...], variable: str | None = None) -> list[str]:
        """The files at `index` (those holding `variable`, when given)."""
        return [c.path for c in self.by_index.get(index, []) if c.path is not None
                and (variable is None or variable in c.variables)]

    def coords(self, index: tuple[int, ...]) -> str:
        """member='r3i1p1f1', time='2017-01-01 .. 2017-12-31'."""
        return ", ".join(f"{a.dim}={_label(a, i)!r}" for a, i in zip(self.axes, index))

    def coords_outer(self, o: tuple[int, ...]) -> str:
        """The outer axes' part of `coords` (an index of the first len(o) axes)."""
        return self.coords(o)

    def differ(self) -> bool:
        """Do the files hold different variables (a merge)?"""
        return len({tuple(c.variables) for c in self.layout.cells if c.path is not None}) > 1


def _size(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _label(axis: model.LayoutAxis, i: int) -> str:
    return str(axis.labels[i]) if 0 <= i < len(axis.labels) else f"[{i}]"


def _short(label: str, width: int = 12) -> str:
    """A column header: the label, or its start when it is a span (`2015-01-01 .. ...`)."""
    if len(label) <= width:
        return label
    head = label.split(" .. ")[0]
    if len(head) > width and len(head) > 10 and head[10] == "T" and width >= 10:
        head = head[:10]  # an ISO date and time: its date
    return head if len(head) <= width else label[:width - 1] + "…"


def _files_words(paths: list[str]) -> str:
    names = [os.path.basename(p) for p in paths]
    if not names:
        return "no file"
    if len(names) <= 2:
        return f"{len(names)} file(s): " + ", ".join(names)
    return f"{len(names)} files: {names[0]} ... {names[-1]}"


def summary(layout: model.Layout, g: Grid | None = None) -> str:
    """"member 3 × time 4 = 12 cells, 11 files, 1 missing"."""
    g = g or Grid(layout)
    dims = " × ".join(f"{a.dim} {n}" for a, n in zip(g.axes, g.shape))
    missing = len(g.missing())
    return (f"{dims} = {_size(g.shape)} cell(s), {len(g.files)} file(s)"
            + (f", {missing} missing" if missing else ", none missing"))


def to_dict_extra(layout: model.Layout) -> dict:
    """What the JSON adds to `Layout.to_dict()`: the grid's shape, and each cell with
    something missing (also those no cell is listed for) with its coordinates by axis
    and the variables it lacks."""
    g = Grid(layout)
    return {"shape": list(g.shape),
            "missing_cells": [{"index": list(ix),
                               "coords": {a.dim: _label(a, i) for a, i in zip(g.axes, ix)},
                               "variables": lack} for ix, lack in g.missing()]}


# -- text ------------------------------------------------------------------------------

def text(layout: model.Layout, refused: bool = True) -> list[str]:
    """The layout for the terminal report: its summary, each axis' positions with the
    files there, the grid (the last two axes; one table per outer position), the missing
    cells by their coordinates. `refused`: missing cells keep the cube from being built
    (else they are absent chunks, read as the fill value)."""
    g = Grid(layout)
    out = [f"layout ({summary(layout, g)}):"]
    for k, axis in enumerate(g.axes):
        out.append(f"  axis {axis.dim}" + (" (new)" if axis.new else "")
                   + f": {len(axis.labels)} position(s)")
        out += _axis_lines(g, k)
    if len(g.axes) >= 2:
        out += _tables(g)
    elif g.differ():
        out += _variable_rows(g)
    missing = g.missing()
    if missing:
        what = "refused" if refused else "absent chunks, read as the fill value"
        out.append(f"  missing cells ({len(missing)}, {what}):")
        for ix, lack in missing[:MAX_MISSING_LISTED]:
            out.append(f"    {g.coords(ix)}" + (f" ({', '.join(lack)})" if lack else ""))
        if len(missing) > MAX_MISSING_LISTED:
            out.append(f"    ... and {len(missing) - MAX_MISSING_LISTED} more")
    return out


def _axis_lines(g: Grid, k: int) -> list[str]:
    """One line per position of axis k: its label, the files there, how many cells of it
    are missing; past MAX_POSITIONS, runs of complete positions are counted, not listed."""
    axis, n = g.axes[k], g.shape[k]
    paths: dict[int, list[str]] = defaultdict(list)
    missing: dict[int, int] = defaultdict(int)
    for ix, cells in g.by_index.items():
        paths[ix[k]] += [c.path for c in cells if c.path is not None]
    for ix, _ in g.missing():
        missing[ix[k]] += 1
    shown = set(range(n)) if n <= MAX_POSITIONS else (
        {0, n - 1} | set(sorted(missing)[:MAX_POSITIONS]))
    out, skipped = [], 0
    for i in range(n):
        if i not in shown:
            skipped += 1
            continue
        if skipped:
            out.append(f"    ... {skipped} position(s), none missing")
            skipped = 0
        miss = f"; {missing[i]} missing" if missing.get(i) else ""
        files = list(dict.fromkeys(paths.get(i, [])))  # (a file over several cells: once)
        out.append(f"    [{i}] {_label(axis, i)}: {_files_words(files)}{miss}")
    return out


def _mark(g: Grid, ix: tuple[int, ...]) -> str:
    if ix not in g.missing_set:
        return "ok"
    state = g.state(ix)
    if state == OK:
        return "ok"
    lack = g.lacking(ix)
    return "MISSING" if state == MISSING and (not lack or len(lack) == len(g.variables)) \
        else "MISSING " + ",".join(lack)


def _tables(g: Grid) -> list[str]:
    """The last two axes as a table (rows × columns) for each position of the outer axes;
    runs of outer positions whose cells are all complete are one line."""
    *outer, ra, ca = g.axes
    outer_shape = g.shape[:-2]
    out = [f"  grid ({ra.dim} × {ca.dim}; ok: a file, MISSING: no file)"
           + (f", one table per {' × '.join(a.dim for a in outer)}:" if outer else ":")]
    missing_outer = {ix[:-2] for ix, _ in g.missing()}
    tables = 0
    run: list[tuple[int, ...]] = []

    def flush():
        if run:
            words = (g.coords_outer(run[0]) if len(run) == 1 else
                     f"{g.coords_outer(run[0])} .. {g.coords_outer(run[-1])} ({len(run)})")
            out.append(f"    {words}: all {g.shape[-2] * g.shape[-1]} cell(s) ok")
            run.clear()

    for o in itertools.product(*map(range, outer_shape)):
        if tables and (o not in missing_outer or tables >= MAX_TABLES):
            run.append(o)
            continue
        flush()
        tables += 1
        if outer:
            out.append(f"    {g.coords_outer(o)}:")
        out += [("      " if outer else "    ") + line for line in _table(g, o)]
    flush()
    return out


def _table(g: Grid, o: tuple[int, ...]) -> list[str]:
    """The last two axes at outer position `o`: a row per position of the row axis, a
    column per position of the column axis (wider: each row as runs of equal cells)."""
    ra, ca = g.axes[-2], g.axes[-1]
    nr, nc = g.shape[-2], g.shape[-1]
    corner = f"{ra.dim}\\{ca.dim}"
    rows = []
    if nc > MAX_TEXT_COLS:
        head = None
        for r in range(nr):
            marks = [_mark(g, (*o, r, c)) for c in range(nc)]
            words, j = [], 0
            for mark, grp in itertools.groupby(marks):
                n = len(list(grp))
                span = f"[{j}]" if n == 1 else f"[{j}..{j + n - 1}]"
                words.append(f"{ca.dim}{span} {mark}" + (f" ×{n}" if n > 1 else ""))
                j += n
            rows.append((_label(ra, r), ", ".join(words), all(m == "ok" for m in marks)))
    else:
        heads = [_short(_label(ca, c)) for c in range(nc)]
        cells = [[_mark(g, (*o, r, c)) for c in range(nc)] for r in range(nr)]
        widths = [max([len(heads[c])] + [len(cells[r][c]) for r in range(nr)])
                  for c in range(nc)]
        head = " ".join(h.ljust(w) for h, w in zip(heads, widths)).rstrip()
        rows = [(_label(ra, r), " ".join(m.ljust(w) for m, w in zip(cells[r], widths)).rstrip(),
                 all(m == "ok" for m in cells[r])) for r in range(nr)]
    rows = _collapse(rows, nr, nc)
    rw = max([len(label) for label, _, _ in rows] + [len(corner) if head else 0])
    lines = [f"{corner.ljust(rw)}  {head}"] if head else []
    return lines + [f"{label.ljust(rw)}  {words}" for label, words, _ in rows]


def _collapse(rows: list[tuple[str, str, bool]], nr: int, nc: int):
    """Runs of 3 or more complete rows as one row, when the table is taller than
    MAX_TEXT_ROWS."""
    if nr <= MAX_TEXT_ROWS:
        return rows
    out: list[tuple[str, str, bool]] = []
    for complete, grp in itertools.groupby(rows, key=lambda r: r[2]):
        grp = list(grp)
        if complete and len(grp) >= 3:
            out.append((f"{grp[0][0]} .. {grp[-1][0]}", f"({len(grp)} rows) all {nc} ok", True))
        else:
            out += grp
    return out


def _variable_rows(g: Grid) -> list[str]:
    """One axis whose files hold different variables (a merge): per variable, the
    positions a file holds it at."""
    axis, n = g.axes[0], g.shape[0]
    out = [f"  variables along {axis.dim}:"]
    w = max(len(v) for v in g.variables)
    for v in g.variables[:MAX_STRIPES * 4]:
        states = [g.stripe((i,), v) for i in range(n)]
        words, j = [], 0
        for state, grp in itertools.groupby(states):
            k = len(list(grp))
            span = f"[{j}]" if k == 1 else f"[{j}..{j + k - 1}]"
            words.append(f"{span} " + {OK: "ok", MISSING: "MISSING", EMPTY: "-"}[state])
            j += k
        out.append(f"    {v.ljust(w)}  " + ", ".join(words))
    return out


# -- HTML ------------------------------------------------------------------------------

def to_html(layout: model.Layout, refused: bool = True) -> str:
    """The grid as SVG pictures: the last two axes rows × columns (one axis: one row, or
    one row per variable when the files hold different variables), one picture per outer
    position (complete runs of outer positions drawn once, captioned); each cell split
    into a stripe per variable when the files hold different variables. A missing cell is
    red when it is refused, grey when it is an absent chunk (join outer)."""
    g = Grid(layout)
    lack = COLORS[MISSING] if refused else COLORS["absent"]
    parts = [f'<section class="layout" id="layout"><p class="layout-summary">'
             f"{html.escape(summary(layout, g))}</p>",
             '<div class="legend"><span><i style="background:' + COLORS[OK] + '"></i>a file'
             '</span><span><i style="background:' + lack + '"></i>missing (no file'
             + ("; refused" if refused else "; absent chunks, read as the fill value")
             + ")</span></div>"]
    for k, axis in enumerate(g.axes):
        labels = ", ".join(map(str, axis.labels[:MAX_POSITIONS])) + (
            f", … ({len(axis.labels)} in all)" if len(axis.labels) > MAX_POSITIONS else "")
        parts.append(f'<p class="layout-axis" data-dim="{html.escape(axis.dim)}"><b>'
                     f"{html.escape(axis.dim)}</b>{' (new)' if axis.new else ''}: "
                     f"{len(axis.labels)} position(s): {html.escape(labels)}</p>")
    if len(g.axes) == 1:
        parts.append(_svg(g, (), lack))
    else:
        missing_outer = {ix[:-2] for ix, _ in g.missing()}
        drawn, run = 0, []
        for o in itertools.product(*map(range, g.shape[:-2])):
            if drawn and (o not in missing_outer or drawn >= MAX_TABLES):
                run.append(o)
                continue
            if run:
                parts.append(_run_caption(g, run))
                run = []
            drawn += 1
            parts.append(_svg(g, o, lack))
        if run:
            parts.append(_run_caption(g, run))
    missing = g.missing()
    if missing:
        parts.append(f'<p class="layout-missing-head">{len(missing)} missing cell(s):</p>'
                     '<ul class="layout-missing">')
        parts += [f'<li data-index="{",".join(map(str, ix))}">{html.escape(g.coords(ix))}'
                  + (f" ({html.escape(', '.join(v))})" if v else "") + "</li>"
                  for ix, v in missing[:MAX_MISSING_LISTED]]
        if len(missing) > MAX_MISSING_LISTED:
            parts.append(f"<li>… and {len(missing) - MAX_MISSING_LISTED} more</li>")
        parts.append("</ul>")
    parts.append("</section>")
    return "\n".join(parts)


def _run_caption(g: Grid, run: list[tuple[int, ...]]) -> str:
    words = g.coords_outer(run[0]) + (f" .. {g.coords_outer(run[-1])}" if len(run) > 1 else "")
    return (f'<p class="layout-run">{html.escape(words)} ({len(run)} position(s)): '
            "every cell has its file(s), as above</p>")


def _svg(g: Grid, o: tuple[int, ...], lack: str) -> str:
    """One picture: rows × columns of cells (runs of equal cells drawn as one rectangle),
    row and column labels, each cell's files and coordinates in its tooltip."""
    if len(g.axes) == 1:
        ra, ca, nr, nc = None, g.axes[0], 1, g.shape[0]
    else:
        ra, ca, nr, nc = g.axes[-2], g.axes[-1], g.shape[-2], g.shape[-1]
    stripes = g.variables if g.differ() and len(g.variables) <= MAX_STRIPES else [None]
    one_axis_rows = len(g.axes) == 1 and stripes != [None]
    if one_axis_rows:  # one axis of a merge: a row per variable
        nr, stripes_in_cell = len(stripes), [None]
    else:
        stripes_in_cell = stripes
    rlabels = ([str(v) for v in stripes] if one_axis_rows else
               [_label(ra, r) for r in range(nr)] if ra is not None else [""])
    left = min(max([len(s) for s in rlabels] + [0]) * 7 + 10, 160)
    cw = max(min(700 / max(nc, 1), 76), 0.5)
    ch = min(400 / max(nr, 1), 28 if len(stripes_in_cell) == 1 else 44)
    many = nc * nr > 2000  # runs of equal cells (and of complete rows) as one rectangle
    top = 18
    names_w = 8 + 7 * max(len(v) for v in stripes_in_cell) if stripes_in_cell != [None] else 0
    W, H = left + cw * nc + 4 + names_w, top + ch * nr + 4
    svg = [f'<svg class="layout-grid" width="{W:.0f}" height="{H:.0f}" role="img">']
    if nc * cw / max(nc, 1) >= 40 or nc <= 12:
        for c in range(nc):
            svg.append(f'<text x="{left + (c + 0.5) * cw:.1f}" y="12" font-size="10" '
                       f'text-anchor="middle">{html.escape(_short(_label(ca, c), 10))}</text>')
    late: list[str] = []  # missing cells, drawn over their neighbours
    gap = 3 if len(stripes_in_cell) > 1 and ch >= 12 else 0  # rows apart: stripes are not rows
    rows_missing = ({ix[-2] for ix in g.missing_set if ix[:-2] == o} if ra is not None else
                    set(range(nr)))
    r = 0
    while r < nr:
        y = top + r * ch
        if many and stripes_in_cell == [None] and r not in rows_missing and not one_axis_rows:
            r1 = r
            while r1 < nr and r1 not in rows_missing:
                r1 += 1
            svg.append(f'<rect class="cell" x="{left}" y="{y:.2f}" width="{nc * cw:.2f}" '
                       f'height="{(r1 - r) * ch:.2f}" fill="{COLORS[OK]}" '
                       f'data-index="{",".join(map(str, (*o, r, 0)))}" data-cells="{(r1 - r) * nc}">'
                       f"<title>{html.escape(rlabels[r])} .. {html.escape(rlabels[r1 - 1])}: "
                       f"{(r1 - r) * nc} cells, every one with its file(s)</title></rect>")
            r = r1
            continue
        if ch >= 9:
            svg.append(f'<text x="{left - 4}" y="{y + ch / 2 + 4:.1f}" font-size="10" '
                       f'text-anchor="end">{html.escape(rlabels[r][:22])}</text>')
        for s_i, v in enumerate(stripes_in_cell):
            sh = (ch - gap) / len(stripes_in_cell)
            sy = y + s_i * sh
            if names_w and r == 0 and sh >= 8:  # the stripes named once, right of the first row
                svg.append(f'<text x="{left + nc * cw + 4:.1f}" y="{sy + sh / 2 + 3:.1f}" '
                           f'font-size="9">{html.escape(v)}</text>')
            var = stripes[r] if one_axis_rows else v
            states = []
            for c in range(nc):
                ix = (c,) if len(g.axes) == 1 else (*o, r, c)
                states.append(g.stripe(ix, var) if var is not None else
                              (MISSING if g.state(ix) != OK else OK))
            c0 = 0
            # few cells: each its own (its files in its tooltip); many: runs of equal ones
            keys = states if many else range(nc)
            for _, grp in itertools.groupby(zip(keys, states), key=lambda p: p[0]):
                grp = list(grp)
                state = grp[0][1]
                n = len(grp)
                if state != EMPTY:
                    ix0 = (c0,) if len(g.axes) == 1 else (*o, r, c0)
                    rect = _cell_rect(g, ix0, n, state, left + c0 * cw, sy, n * cw, sh,
                                      lack, cw, var)
                    (svg if state == OK else late).append(rect)
                c0 += n
        r += 1
    svg += late
    svg.append("</svg>")
    where = f" ({html.escape(g.coords_outer(o))})" if o else ""
    more = "; runs of complete cells drawn as one" if many else ""
    head = (f"{html.escape(ra.dim)} × {html.escape(ca.dim)}" if ra is not None and not one_axis_rows
            else f"variables × {html.escape(ca.dim)}" if one_axis_rows else html.escape(ca.dim))
    split = (f"; each cell split by variable: {html.escape(', '.join(stripes))} (top to bottom)"
             if stripes_in_cell != [None] else "")
    return (f'<figure class="layout-map">{"".join(svg)}<figcaption>{head}{where}{split}'
            f"{more}</figcaption></figure>")


def _cell_rect(g: Grid, ix: tuple[int, ...], n: int, state: str, x: float, y: float,
               w: float, h: float, lack: str, cw: float, variable: str | None) -> str:
    """A run of `n` equal cells from `ix` along the last axis: one rectangle, cell edges
    drawn while wide enough to see; its tooltip names the cell (or the run)."""
    color = COLORS[OK] if state == OK else lack
    end = _label(g.axes[-1], ix[-1] + n - 1)
    where = g.coords(ix) if n == 1 else f"{g.coords(ix)} .. {g.axes[-1].dim}={end!r} ({n} cells)"
    if state == OK:
        files = g.paths(ix, variable) if n == 1 else []
        what = ("; " + ", ".join(os.path.basename(p) for p in files[:6])) if files else ""
    else:
        what = "; MISSING" + (f" ({variable})" if variable else
                              f" ({', '.join(g.lacking(ix))})" if n == 1 and g.lacking(ix) else "")
    cls = "cell" if state == OK else "missing"
    # a missing cell at least 3 px wide: it is what the picture is for
    out = [f'<rect class="{cls}" x="{x:.2f}" y="{y:.2f}" '
           f'width="{max(w, 0.8 if state == OK else 3):.2f}" '
           f'height="{max(h, 0.5 if state == OK else 3):.2f}" fill="{color}" stroke="white" '
           f'stroke-width="{1 if cw >= 4 else 0}"'
           f' data-index="{",".join(map(str, ix))}" data-cells="{n}"'
           + (f' data-variable="{html.escape(variable)}"' if variable else "")
           + f"><title>{html.escape(where + what)}</title></rect>"]
    if n > 1 and cw >= 4:
        out += [f'<line x1="{x + i * cw:.2f}" y1="{y:.2f}" x2="{x + i * cw:.2f}" '
                f'y2="{y + h:.2f}" stroke="white" stroke-width="1"/>' for i in range(1, n)]
    if state != OK and cw >= 14 and h >= 12:
        out.append(f'<text x="{x + w / 2:.2f}" y="{y + h / 2 + 4:.2f}" fill="white" '
                   'font-size="11" text-anchor="middle">✗</text>')
    return "".join(out)
