"""`append`: files added to the end of an output virtualize wrote, only the new files
scanned and only what they add written (by the output kind's plug-in)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from pathlib import Path

from .. import storage
from ..conventions import ScanHint
from ..formats import registry as _formats
from ..model import Location, Plan, Problem, UsageError, VirtualizeError
from ..outputs import registry
from ..outputs.metadata import array_doc
from ..outputs.staleness import check_sources
from ..plan import plan_concat
from ..plan.merge import select, selected_files
from ..report import Report
from .recipe import Recipe
from .steps import (
    DEFAULT_SCAN_TIMEOUT,
    PathLike,
    check_recipe,
    check_stack,
    existing_output,
    expand_paths,
    recorded,
    refuse_unless_ok,
    skipped_note,
    unmatched_problems,
    write_checked,
)


def _appending(fn):
    """`append`'s reports (and those of its refusals) name its ways through as re-runs of
    `virtualize` with all the files: `append` takes no remedy, --drop or --inline option
    (it plans as the cube's recorded recipe did)."""
    import functools

    @functools.wraps(fn)
    def run(*args, **kwargs):
        try:
            report = fn(*args, **kwargs)
        except VirtualizeError as e:
            if isinstance(e.report, Report):
                e.report.appending = True
            raise
        if isinstance(report, Report):
            report.appending = True
        return report
    return run


@_appending
def append(cube: PathLike, paths: Iterable[PathLike] | PathLike, *, jobs: int | str = "auto",
           executor=None, progress=None, scan_timeout: float | None = DEFAULT_SCAN_TIMEOUT,
           strict: bool = False, skip_unreadable: bool = False, no_gaps: bool = False,
           coords: dict | None = None) -> Report:
    """Add files to the end of a cube directory, kerchunk JSON or Icechunk repository
    written by `virtualize`: only the new files are scanned, planned as the cube was (its
    recorded recipe) after the cube's last step (recorded with it: docs/planning.md,
    Appending), and only what they add is written: a cube directory gets a new manifest
    segment per array and is replaced in one exchange of names when complete, an Icechunk
    repository a commit of the new chunks, a kerchunk JSON their references. When the
    grown cube would differ from a full rebuild beyond its new chunks (the last file's
    padded block no longer last, a variable stored differently), the whole stack is
    scanned and planned again instead. Refused (nothing changed) when a source of the
    cube changed (`strict`: or was touched), or a new file does not come after its last
    step.

    For cron jobs: a file given that is already in the cube, as recorded (its size and
    time or identity, or a touched file's fingerprint), is skipped with a note, so running
    a job again is a no-op ("nothing to append"); one with the same path but other
    content is refused (`already-in-cube`). `skip_unreadable`, `no_gaps`: as for `check`
    (a gap between the cube's last step and the new files counts).

    A hypercube (made with `concat_dims` / `coords`) grows along any of its axes: its
    recorded sources and the new files are planned together by its recipe (every check of
    a full build). `coords`: a new axis whose values were listed (`{"member": "v1,v2,..."}`)
    takes the new files' values from it, one per new file in the order given; any other
    form must be the one recorded."""
    from ..outputs.staging import locked

    cube, kind = existing_output(cube, "append")  # (not a cube: refused before locking)
    if not os.path.lexists(cube):  # append never creates a cube
        registry.refuse_foreign(cube)  # (-o x.nc: a usage error, as for virtualize)
        raise VirtualizeError([Problem(Location(str(cube)), "not-a-cube",
                                       "no such cube: append adds to a cube virtualize wrote "
                                       "(make it first: virtualize FILES -o CUBE)")],
                              "nothing appended")
    with locked(cube):  # concurrent appends to one cube wait for each other
        return _append(cube, kind, paths, jobs=jobs, executor=executor, progress=progress,
                       scan_timeout=scan_timeout, strict=strict, skip_unreadable=skip_unreadable,
                       no_gaps=no_gaps, coords=coords)


def _append(cube: Path, kind: str, paths, *, jobs, executor, progress, scan_timeout,
            strict=False, skip_unreadable=False, no_gaps=False, coords=None) -> Report:
    info = recorded(cube, kind)
    recipe = Recipe.from_dict(info.get("recipe"))
    if recipe is None or recipe.kind != "concat":
        raise VirtualizeError([Problem(Location(str(cube)), "not-appendable",
                                       "this cube was not made by concatenation (or by an older "
                                       "virtualize): re-run virtualize with all the files")])
    if registry.by_name(kind).refuses_growth(info):
        raise VirtualizeError([Problem(Location(str(cube)), "not-appendable",
                                       "this Icechunk repository is relocatable (--relative): "
                                       "appending to it is not supported yet; re-run virtualize "
                                       "--relative with all the files")])
    recipe = dataclasses.replace(recipe, no_gaps=no_gaps)  # (each run's own)
    checked = check_sources(info["sources"], strict=strict, scan_timeout=scan_timeout)
    # the files given (data files found through reference sets are not inputs)
    old = [s["path"] for s in info["sources"] if not s.get("referenced_by")]
    empty: list[str] = []
    unmatched: list[str] = []
    refused: list[Problem] = []  # a directory's links leading out of it
    skipped: dict[str, list[tuple[str, str]]] = {}  # a directory's entries not taken
    new = [storage.normalize(p) for p in expand_paths(paths, empty, skipped, unmatched,
                                                      refused)]
    if unmatched or refused:
        raise VirtualizeError(unmatched_problems(unmatched) + refused, "nothing appended")
    if not new:
        raise VirtualizeError([Problem(Location(os.path.abspath(d)), "no-files",
                                       f"the directory {d} holds no files") for d in empty]
                              or [Problem(Location(), "no-files", "no files to append were given")],
                              "nothing appended")
    # a file given again (a cron job run twice): skipped when the cube's record of it
    # holds (size, identity or time, or a touched file's fingerprint); refused when not
    old_set = set(old)
    again = list(dict.fromkeys(p for p in new if p in old_set))
    stale = [p for p in checked.problems if p.fatal]
    changed = {p.loc.file: p for p in stale}
    refused = [Problem(Location(p), "already-in-cube",
                       f"{p} is already a source of {cube}, with other content now ("
                       f"{changed[p].message}): re-run virtualize with all the files")
               for p in again if p in changed]
    if stale:
        raise VirtualizeError(refused + [p for p in stale if p.loc.file not in set(again)],
                              f"{cube}: its sources changed since it was written; nothing "
                              "appended")
    touched = [p for p in checked.problems if not p.fatal]
    new = [p for p in new if p not in old_set]
    if not new:
        return _nothing_new(cube, kind, again, touched)
    try:
        report = _append_files(cube, kind, info, old, new, recipe, jobs=jobs, executor=executor,
                               progress=progress, scan_timeout=scan_timeout,
                               skip_unreadable=skip_unreadable, coords=coords)
    except VirtualizeError as e:
        # every new file left out, the others already in (a cron job run again): nothing to do
        r = e.report
        if not (again and r is not None and r.left_out
                and all(p.kind == "all-left-out" for p in e.problems)):
            raise
        return _nothing_new(cube, kind, again, touched, r)
    report.problems[:0] = touched
    report.notes[:0] = [skipped_note(d, entries) for d, entries in skipped.items()]
    if again:
        report.notes.insert(0, f"{len(new)} new, {len(again)} already in the cube (skipped: "
                            + ", ".join(os.path.basename(p) for p in again[:3])
                            + (", ..." if len(again) > 3 else "") + ")")
        report.already = again
    return report


def _nothing_new(cube: Path, kind: str, again: list[str], touched: list[Problem],
                 left: Report | None = None) -> Report:
    """The report of an append with nothing to add: every file given is in the cube (or
    was left out: `left`, the report that left them out)."""
    report = Report(files=again, problems=touched, plan=Plan([], {}, {}),
                    notes=[n for n in (left.notes if left else ()) if n.startswith("left out")]
                    + [f"nothing to append: 0 new, {len(again)} already in the cube"],
                    left_out=left.left_out if left else [])
    # the cube as it was: not written (report.facts `wrote`)
    report.output = {"path": os.path.abspath(cube), "kind": kind, "written": False}
    report.already = again
    return report


def _append_files(cube: Path, kind: str, info: dict, old: list[str], new: list[str],
                  recipe: Recipe, *, jobs, executor, progress, scan_timeout, skip_unreadable,
                  coords=None) -> Report:
    """Append the files `new` (none of them in the cube)."""
    if recipe.hypercube:
        recipe = _grown_coords(cube, recipe, old, new, coords)
    elif coords:
        raise UsageError(f"{cube} is a stack along one axis made without --coord: "
                         "coords= does not apply")
    # a hypercube grows by planning its recorded sources (scanned again: metadata) with
    # the new files, checked as a full build; a plain stack by scanning only the new files
    report = None if recipe.hypercube else _append_new(
        cube, kind, info, new, recipe, jobs=jobs, executor=executor, progress=progress,
        scan_timeout=scan_timeout, skip_unreadable=skip_unreadable)
    if report is not None:
        return report
    report = check_recipe(old + new, recipe, jobs=jobs, executor=executor, progress=progress,
                          scan_timeout=scan_timeout, skip_unreadable=skip_unreadable)
    if report.plan is not None:  # the files left out before, and now
        report.plan.left_out = list(info.get("left_out") or []) + report.plan.left_out
    if report.plan is not None and not recipe.hypercube and \
            [s.path for s in report.plan.sources if not s.referenced_by][: len(old)] != old:
        report.problems.append(_not_at_end(cube, report.plan.concat_dim))
    plugin = registry.by_name(kind)
    refuse_unless_ok(report)
    if plugin.commit_rebuild(report.plan, cube, added=len(new)):  # (a repository: a commit)
        return report
    return write_checked(report, cube, kind, overwrite=True, relative=plugin.relative(cube, info))


def _grown_coords(cube: Path, recipe: Recipe, old: list[str], new: list[str],
                  given: dict | None) -> Recipe:
    """The recipe's `coords` for the old and new files together: a listed new axis' values
    (`--coord DIM=v1,v2,...`, each old file's recorded) followed by the new files' (given);
    every other form as recorded (given: the same)."""
    from ..plan.coords import label, parse_coord, parse_coords

    given = parse_coords(given)
    for d in given:
        if d not in recipe.coords:
            raise UsageError(f"coords: {d!r} is not a new axis of {cube} (its new axes: "
                             f"{', '.join(recipe.coords) or 'none'})")
    coords = dict(recipe.coords)
    for d, spec in recipe.coords.items():
        if spec.kind != "values":
            if d in given and given[d] != spec:
                raise UsageError(f"coords: {d}={given[d].text()} is not how {cube} was made "
                                 f"({d}={spec.text()})")
            continue
        by_path = {p: v for p, v in (recipe.coord_values or {}).get(d) or ()}
        if d not in given or any(p not in by_path for p in old):
            raise VirtualizeError([Problem(
                Location(str(cube), None, d), "not-appendable",
                f"the cube's {d!r} values were listed (--coord {d}=v1,v2,...): give the new "
                f"files' (coords={{{d!r}: 'v1,v2,...'}}, one per new file)"
                if d not in given else f"the cube records no {d!r} value of each file: "
                "re-run virtualize with all the files and their values")], "nothing appended")
        values = list(given[d].values)
        if given[d].kind != "values" or len(values) != len(new):
            raise UsageError(f"coords: {d}: {len(values)} value(s) for {len(new)} new file(s)")
        coords[d] = parse_coord(",".join(label(v) for v in [by_path[p] for p in old] + values))
    # (check_recipe records each file's value again)
    return dataclasses.replace(recipe, coords=coords, coord_values=None)


def _not_at_end(cube: Path, dim: str | None) -> Problem:
    return Problem(Location(str(cube)), "append-not-at-end",
                   f"the new files do not all come after the cube's last {dim!r} step; "
                   "to put them in the middle, re-run virtualize with all the files")


def _same_group_attrs(cube: Path, plan: Plan, last: dict) -> bool:
    """Whether the groups' attributes of the grown stack (combined over the cube's last
    file and the new files: plan/attrs.py) are the cube's; when not (a new file's
    `history` differs), the cube would differ from a full rebuild, which drops it."""
    import json

    from ..open import open_cube
    from ..outputs.metadata import group_doc
    from ..plan import still_dropped
    try:
        root = open_cube(cube, check_sources=False)
        for g, attrs in plan.groups.items():
            node = root[g] if g else root
            have = dict(node.attrs)
            want = json.loads(json.dumps(group_doc(attrs)["attributes"]))
            if still_dropped(want, have, last.get(g, {})) != have:
                return False
    except Exception:  # (a group the cube lacks, a cube that cannot be read so)
        return False
    return True


def _append_new(cube: Path, kind: str, info: dict, new: list[str], recipe: Recipe, *,
                jobs: int | str, executor, progress, scan_timeout,
                skip_unreadable=False) -> Report | None:
    """Append by scanning only the new files (see `append`); None when the cube must be
    rebuilt instead (no recorded last step, or a grown cube that would differ from a full
    rebuild beyond its new chunks)."""
    from ..model import Source
    from ..plan import merge_append, resume_from

    plugin = registry.by_name(kind)
    resume = resume_from(info.get("append"))
    if resume is None:
        return None
    # (the recorded last step keeps its format's name: its plug-in says what it is)
    fmt = _formats.of_inventory(resume.last.format)
    resume.last.reference_set = fmt is not None and fmt.reference_set
    opts = recipe.concat_options()
    last = resume.last.path

    def planner(invs):
        # (new files holding none of the variables a --variables cube keeps: left out,
        # as a full build leaves them out)
        chosen = select(invs, opts)
        invs, notes = selected_files(invs, chosen)
        plan, problems = plan_concat(invs, chosen, resume=resume)
        plan.notes[:0] = notes
        return plan, problems

    report = check_stack(new, planner, progress, recipe.materialize_limit, jobs, scan_timeout,
                         exclude=(last,), executor=executor, chunk_size=recipe.chunk_size,
                         like=resume.last, hint=ScanHint("append", resume.dim, inline=opts.inline,
                                        layout=recipe.hint().layout),
                         skip_unreadable=skip_unreadable)
    plan = report.plan
    if plan is None:
        refuse_unless_ok(report)
        return None
    plan.recipe = record = dict(info["recipe"])  # (the grown cube's, as recorded)
    if plan.sources[0].path != last:
        raise VirtualizeError([_not_at_end(cube, plan.concat_dim)], "nothing appended")
    if any(p.fatal and p.loc.file == last for p in report.problems):
        return None  # the cube's last file would change (e.g. a padded block, now inside)
    report.problems = [p for p in report.problems if p.loc.file != last]
    refuse_unless_ok(report)
    old_sources = [Source(s["path"], s["size"], s["mtime_ns"], s.get("referenced_by"),
                          s.get("etag"), s.get("fingerprint"), bool(s.get("copied")))
                   for s in info["sources"]]
    along = [n for n, a in plan.arrays.items()
             if a.inline is not None and plan.concat_dim in a.dims]
    # each array's zarr.json in the cube, and the values of the inline arrays along the
    # concatenation axis (read as plain zarr: the cube's own files, no source opened; None
    # when they cannot be had so)
    docs, old_inline, state = plugin.array_docs(cube, plan, along)
    if old_inline is None:
        return None
    merged = merge_append(plan, resume, docs, old_sources, old_inline, array_doc)
    if isinstance(merged, str) or not _same_group_attrs(cube, plan, resume.last.groups):
        return None
    merged.plan.left_out = list(info.get("left_out") or []) + plan.left_out
    fresh = [s.path for s in merged.sources[len(old_sources):]]
    report.notes.extend(plugin.grow(cube, merged, info, fresh, recipe=record, state=state))
    report.notes.append(f"appended {len(new) - len(report.left_out)} file(s) after the cube's "
                        "last step, scanning only "
                        f"them: {len(old_sources)} recorded source(s) checked unchanged, not "
                        "read")
    report.output = {"path": os.path.abspath(cube), "kind": kind}
    report.plan = merged.plan  # the grown cube (references: those of the new chunks)
    return report
