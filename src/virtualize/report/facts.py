"""What every presentation of a report says: its verdict, its counts, the variables that
keep it from being virtualized with their ways through, and the words the text, JSON and
HTML renderers share (remedies, sizes, re-runs under `append`)."""

from __future__ import annotations

import re

import numpy as np

from .. import model

YES, REMEDIES, NO = "yes", "yes with remedies", "no"


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
    # a way through that leaves no data variable is none: `--drop` is not offered for
    # the data variables when every one of them is refused (ta, the only one)
    data = set(getattr(report, "data_variables", None) or ())
    keep_none = bool(data) and data <= set(out)
    for name, ways in out.items():
        kinds = {p.kind for p in report.problems if p.fatal and p.loc.variable == name}
        if name != dim or not kinds & _ORDER_KINDS:
            if not (keep_none and name in data):
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
            ways[:] = [rerun(w) if w.startswith("--") else w for w in ways]
    return out


def every_data_variable_refused(report: model.Report) -> list[str]:
    """The data variables, when every one is refused (no `--drop` is then a way
    through: dropping them leaves no data); else []."""
    data = list(getattr(report, "data_variables", None) or ())
    refused = refused_variables(report)
    return data if data and all(d in refused for d in data) else []


def ways_words(ways: list[str], every: list[str]) -> str:
    """A refused variable's ways through in words; none said so (`every`: the data
    variables, every one refused)."""
    if ways:
        return " or ".join(ways)
    if every:
        return ("the only data variable: dropping it leaves no data" if len(every) == 1 else
                "every data variable is refused: dropping them leaves no data")
    return "no way through"


def wrote(report: model.Report) -> bool:
    """Did the job write (or grow) its output? Not an `append` that found nothing new."""
    return bool(report.output) and report.output.get("written", True) is not False


# problems of the concatenation coordinate's order: `--drop` does not remove them
_ORDER_KINDS = frozenset({"duplicate-coordinate", "coordinate-not-increasing", "coordinate-gap"})


def rerun(option: str) -> str:
    """A way through under `append`: its option is one of `virtualize`'s."""
    return f"re-run virtualize with all the files and {option}"


def remedy_words(r, appending: bool = False) -> str:
    return (f"{r.kind}: {r.blocks} block(s), "
            + (f"{size_text(r.bytes)} copied into the cube" if r.kind == "materialize"
               else "nothing copied (exact byte ranges)")
            + not_enabled(r, appending))


def not_enabled(r, appending: bool = False) -> str:
    if r.enabled:
        return ""
    return f" -- not enabled: {rerun('--' + r.kind) if appending else 'pass --' + r.kind}"


def remedy_shown(remedy: str, appending: bool = False) -> str:
    return f"{remedy}, by re-running virtualize with all the files" if appending else remedy


def missing_refused(report: model.Report) -> bool:
    """Are a layout's missing cells refused (join "exact"), or absent chunks (join
    "outer", read as the fill value; a mosaic's missing tiles, always)? By the recipe's
    join, else by the verdict."""
    recipe = report.plan.recipe if report.plan is not None else {}
    if recipe.get("kind") == "mosaic":
        return False
    join = recipe.get("join")
    return join != "outer" if join else not report.ok


def size_text(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def gap_words(problems) -> str | None:
    """The gaps in a regular concatenation coordinate (`coordinate-gap` problems) as the
    one-line summary names them: "1 gap: 12 step(s) of 31 days missing between
    1986-12-16 and 1988-01-16" (the first two; more: counted)."""
    gaps = [p for p in problems if p.kind == "coordinate-gap"]
    if not gaps:
        return None
    spans = [gap_span(p.message) for p in gaps]
    return (f"{len(gaps)} gap{'s' if len(gaps) > 1 else ''}: " + ", ".join(spans[:2])
            + (f", ... ({len(gaps) - 2} more; -v lists them)" if len(gaps) > 2 else ""))


def gap_span(message: str) -> str:
    """What a `coordinate-gap` message says is missing, without where (plan/gaps.py)."""
    from ..plan.gaps import SPAN_END

    return message.split(SPAN_END)[0]


# a run of this many comma-separated paths or more in a note or message is shortened
PATH_RUN = 6
_PATH = r"[^\s,;()]*/[^\s,;()]+"
_PATHS = re.compile(rf"{_PATH}(?:, {_PATH}){{{PATH_RUN - 1},}}")


def short_paths(text: str, shown: int = 3) -> str:
    """`text` with each long list of paths ("a/1.nc, a/2.nc, ... a/130.nc") as its count,
    first few and last: "130 files: a/1.nc, a/2.nc, a/3.nc, ..., a/130.nc"."""
    def short(m: re.Match) -> str:
        paths = m.group(0).split(", ")
        return (f"{len(paths)} files: " + ", ".join(paths[:shown]) + f", ..., {paths[-1]}")
    return _PATHS.sub(short, text)


def path_lines(text: str) -> tuple[str, list[str]]:
    """`text` with its long lists of paths taken out, and the paths, one each (for a
    report that lists everything: never hundreds of paths on one line)."""
    found: list[str] = []

    def out(m: re.Match) -> str:
        paths = m.group(0).split(", ")
        found.extend(paths)
        return f"{len(paths)} files (below)"
    return _PATHS.sub(out, text), found
