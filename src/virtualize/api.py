"""The Python API: scan → plan → emit, with every problem collected."""

from __future__ import annotations

import dataclasses
import glob
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import zarr

from . import storage
from .checks.decode import decode_check
from .conventions import ScanHint
from .formats import read_values
from .formats import registry as _formats
from .formats import scan as _scan
from .model import FileInventory, Location, Plan, Problem, UsageError, VirtualizeError
from .open import open_cube
from .outputs import registry
from .outputs.metadata import array_doc, group_doc, omitted_attrs
from .outputs.staging import guard_output
from .outputs.staleness import check_sources
from .plan import DEFAULT_INLINE_THRESHOLD, ConcatOptions, MosaicOptions, plan_concat, plan_mosaic
from .plan.cut import DEFAULT_CHUNK_SIZE, chunk_bytes, cut_stack
from .report import Report
from .run.executors import scan_on
from .run.share import Sharer
from .run.workers import scan_bounded, scan_or_problems

PathLike = str | os.PathLike
Planner = Callable[[list[FileInventory]], tuple[Plan, list[Problem]]]
# Seconds one file's scan may take before it is stopped and reported (`scan-timeout`).
DEFAULT_SCAN_TIMEOUT = 60.0


def inventory(path: PathLike, *, chunk_size: int | str | None = None,
              scan_timeout: float | None = None,
              storage_options: dict | None = None) -> FileInventory:
    """One file's inventory: variables, dimensions, block tables. Reads no data but
    small coordinate variables. A kerchunk reference set's block tables point into the
    data files it names (`data_files`). Raises `VirtualizeError` for unreadable files.
    `chunk_size` (bytes, or "16M"): the block tables as a cube cuts them (uncompressed
    blocks larger than that cut at whole rows; docs/planning.md); default: as stored.
    Scanned in this process (`scan_timeout` None or 0), else in a worker process within
    `scan_timeout` seconds, as `check` scans (`virtualize inspect` does).
    (Called `virtualize.scan(path)` before 0.2, a name that hid the `virtualize.scan`
    subpackage; that call still works, with a DeprecationWarning.)"""
    _storage(storage_options)
    if not scan_timeout:
        inv = _scan(path)
    else:
        [inv] = _scan_all([os.fspath(path)], 1, scan_timeout)
        if isinstance(inv, list):
            raise VirtualizeError(inv, f"{storage.normalize(path)}: cannot be scanned")
    limit = _chunk_size(chunk_size)
    if limit:
        (inv,), _, problems = cut_stack([inv], limit)
        inv.problems = [*inv.problems, *problems]
    return inv


def inventories(paths: Iterable[PathLike] | PathLike, *, jobs: int | str = "auto", executor=None,
                scan_timeout: float | None = DEFAULT_SCAN_TIMEOUT,
                storage_options: dict | None = None) -> Iterator[FileInventory | list[Problem]]:
    """Many files' inventories, in the order given (paths, globs, directories as for
    `check`): each file's `FileInventory`, or the list of located problems that stopped
    its scan. Scanned as `check` scans: in worker processes (`jobs`, `scan_timeout`) or
    as tasks of `executor` (a `dask.distributed.Client` or a `concurrent.futures.Executor`;
    docs/scale.md)."""
    _storage(storage_options)
    _check_jobs(jobs, executor)
    yield from _scan_all(_paths(paths), jobs, scan_timeout, executor)


def check(paths: Iterable[PathLike] | PathLike, concat_dim: str | None = None, *,
          inline: Iterable[str] = (), drop: Iterable[str] = (), sort: bool = True,
          split: bool = True, materialize: bool = False, materialize_limit: int | None = None,
          jobs: int | str = "auto", executor=None, progress=None,
          scan_timeout: float | None = DEFAULT_SCAN_TIMEOUT,
          storage_options: dict | None = None,
          inline_threshold: int = DEFAULT_INLINE_THRESHOLD,
          chunk_size: int | str | None = DEFAULT_CHUNK_SIZE, skip_unreadable: bool = False,
          no_gaps: bool = False) -> Report:
    """Can this stack be virtualized (concatenated along `concat_dim`)? Scans every file
    and plans the cube, collecting every problem of every file. Writes nothing.

    Remedies: `split` (default on) trims padded uncompressed blocks to their valid rows;
    `materialize` copies blocks that cannot be referenced into the cube (at most
    `materialize_limit` bytes). Each file is scanned in a worker process within
    `scan_timeout` seconds (None or 0: in this process, no limit); `jobs` of them ("auto":
    one for small stacks, one a core for large ones, several for remote files), or as tasks
    of `executor` (a `dask.distributed.Client` or `concurrent.futures.Executor`: the files
    are scanned on its workers, the plan is made here; docs/scale.md). Variables that cannot be
    referenced are inlined when they take at most `inline_threshold` decoded bytes per
    file (0: refused instead). Uncompressed blocks larger than `chunk_size` bytes (an int,
    or "16M"; default 16 MiB; None or 0: never) are cut into chunks at whole rows
    (docs/planning.md, Chunk size).

    `skip_unreadable`: a file that cannot be scanned (unreadable, of no format read,
    truncated, corrupt, a damaged object in it, its scan timed out or crashed) is left out
    and listed (`Report.left_out`, and the cube's record) instead of stopping the job.
    `no_gaps`: a gap in a regular concatenation coordinate (`coordinate-gap`, otherwise a
    note) is fatal."""
    _storage(storage_options)
    limit = _chunk_size(chunk_size)
    opts = ConcatOptions(concat_dim=concat_dim, inline=frozenset(_names(inline)),
                         drop=frozenset(_names(drop)), sort=sort, split=split,
                         materialize=materialize, inline_threshold=inline_threshold,
                         no_gaps=no_gaps, read=read_values)
    recipe = {"kind": "concat", "concat_dim": concat_dim, "inline": sorted(opts.inline),
              "drop": sorted(opts.drop), "sort": sort, "split": split,
              "materialize": materialize, "materialize_limit": materialize_limit,
              "inline_threshold": inline_threshold, "chunk_size": limit}
    report = _check(paths, lambda invs: plan_concat(invs, opts), progress, materialize_limit, jobs,
                    scan_timeout, executor=executor, chunk_size=limit,
                    names=lambda invs: _unknown_names(invs, opts.drop, opts.inline, concat_dim),
                    hint=ScanHint("concat", concat_dim, inline=opts.inline),
                    skip_unreadable=skip_unreadable)
    if report.plan is not None:
        report.plan.recipe = recipe
    return report


def check_mosaic(paths: Iterable[PathLike] | PathLike, *,
                 offsets: Sequence[tuple[int, int]] | None = None, overlap: str | None = None,
                 drop: Iterable[str] = (), tolerance: float = 1e-3, split: bool = True,
                 materialize: bool = False, materialize_limit: int | None = None,
                 jobs: int | str = "auto", executor=None, progress=None,
                 scan_timeout: float | None = DEFAULT_SCAN_TIMEOUT,
                 storage_options: dict | None = None,
                 chunk_size: int | str | None = DEFAULT_CHUNK_SIZE,
                 skip_unreadable: bool = False) -> Report:
    """Can these tiles be placed into one mosaic? By georeferencing (GeoTIFF transform,
    or 1-D x/y / lon/lat coordinates), or by explicit `offsets` [(row, col), ...] in pixels.
    `overlap`: None (overlaps are problems), "last" or "first" (which tile wins).
    Remedies as in `check`: `split` cuts uncompressed blocks into row ranges, `materialize`
    copies cells no block fits; `chunk_size` cuts large uncompressed blocks as in `check`;
    `skip_unreadable` as in `check`."""
    _storage(storage_options)
    limit = _chunk_size(chunk_size)
    opts = MosaicOptions(offsets=offsets, overlap=overlap, tolerance=tolerance,
                         drop=frozenset(_names(drop)), split=split, materialize=materialize)
    if overlap not in (None, "last", "first"):
        raise UsageError(f"overlap must be None, 'last' or 'first', not {overlap!r}")
    report = _check(paths, lambda invs: plan_mosaic(invs, opts), progress, materialize_limit, jobs,
                    scan_timeout, executor=executor, chunk_size=limit,
                    names=lambda invs: _unknown_names(invs, opts.drop, (), None),
                    hint=ScanHint("mosaic"),
                    skip_unreadable=skip_unreadable)
    if report.plan is not None:
        report.plan.recipe = {"kind": "mosaic", "overlap": overlap, "tolerance": tolerance,
                              "offsets": [list(o) for o in offsets] if offsets else None,
                              "drop": sorted(opts.drop), "split": split,
                              "materialize": materialize, "chunk_size": limit}
    return report


def virtualize(paths: Iterable[PathLike] | PathLike, out: PathLike, concat_dim: str | None = None,
               *, overwrite: bool = False, inline: Iterable[str] = (), drop: Iterable[str] = (),
               sort: bool = True, split: bool = True, materialize: bool = False,
               materialize_limit: int | None = None, format: str | None = None,
               jobs: int | str = "auto", executor=None, progress=None,
               scan_timeout: float | None = DEFAULT_SCAN_TIMEOUT,
               storage_options: dict | None = None,
               relative: bool = False,
               inline_threshold: int = DEFAULT_INLINE_THRESHOLD,
               chunk_size: int | str | None = DEFAULT_CHUNK_SIZE, skip_unreadable: bool = False,
               no_gaps: bool = False) -> Report:
    """Virtualize a stack into `out`: a cube directory, a kerchunk reference JSON
    (`format="kerchunk"` or `out` ending in `.json`) or an Icechunk repository
    (`format="icechunk"` or `.icechunk`). Nothing is written unless every file
    can be referenced exactly; then `VirtualizeError` carries every problem.
    `relative`: record the sources relative to the output (a relocatable cube, to be moved
    or mirrored together with its files: a cube directory's source table, a kerchunk
    JSON's template, an Icechunk repository's named virtual chunk container).
    `skip_unreadable`, `no_gaps`: as for `check`."""
    _storage(storage_options)
    kind = _output_kind(out, format, overwrite, paths)
    report = check(paths, concat_dim, inline=inline, drop=drop, sort=sort, split=split,
                   materialize=materialize, materialize_limit=materialize_limit,
                   jobs=jobs, executor=executor, progress=progress, scan_timeout=scan_timeout,
                   inline_threshold=inline_threshold, chunk_size=chunk_size,
                   skip_unreadable=skip_unreadable, no_gaps=no_gaps)
    return _write(report, out, kind, overwrite, relative)


def mosaic(paths: Iterable[PathLike] | PathLike, out: PathLike, *,
           offsets: Sequence[tuple[int, int]] | None = None, overlap: str | None = None,
           drop: Iterable[str] = (), tolerance: float = 1e-3, split: bool = True,
           materialize: bool = False, materialize_limit: int | None = None,
           overwrite: bool = False, format: str | None = None, jobs: int | str = "auto", executor=None,
           progress=None, scan_timeout: float | None = DEFAULT_SCAN_TIMEOUT,
           storage_options: dict | None = None,
           relative: bool = False,
           chunk_size: int | str | None = DEFAULT_CHUNK_SIZE,
           skip_unreadable: bool = False) -> Report:
    """Place tiles into one mosaic cube at `out` (see `check_mosaic`); nothing is written
    unless every cell is exactly one block of one tile or a gap."""
    _storage(storage_options)
    kind = _output_kind(out, format, overwrite, paths)
    report = check_mosaic(paths, offsets=offsets, overlap=overlap, drop=drop,
                          tolerance=tolerance, split=split, materialize=materialize,
                          materialize_limit=materialize_limit, jobs=jobs, executor=executor,
                          progress=progress, scan_timeout=scan_timeout, chunk_size=chunk_size,
                          skip_unreadable=skip_unreadable)
    return _write(report, out, kind, overwrite, relative)


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
           strict: bool = False, skip_unreadable: bool = False, no_gaps: bool = False) -> Report:
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
    (a gap between the cube's last step and the new files counts)."""
    from .outputs.staging import locked

    cube = _local_cube(cube, "append")
    kind = _cube_kind(cube)  # (not a cube: refused before anything is locked)
    with locked(cube):  # concurrent appends to one cube wait for each other
        return _append(cube, kind, paths, jobs=jobs, executor=executor, progress=progress,
                       scan_timeout=scan_timeout, strict=strict, skip_unreadable=skip_unreadable,
                       no_gaps=no_gaps)


def _append(cube: Path, kind: str, paths, *, jobs, executor, progress, scan_timeout,
            strict=False, skip_unreadable=False, no_gaps=False) -> Report:
    info = _recorded(cube, kind)
    recipe = dict(info.get("recipe") or {})
    if recipe.get("kind") != "concat":
        raise VirtualizeError([Problem(Location(str(cube)), "not-appendable",
                                       "this cube was not made by concatenation (or by an older "
                                       "virtualize): re-run virtualize with all the files")])
    if registry.by_name(kind).refuses_growth(info):
        raise VirtualizeError([Problem(Location(str(cube)), "not-appendable",
                                       "this Icechunk repository is relocatable (--relative): "
                                       "appending to it is not supported yet; re-run virtualize "
                                       "--relative with all the files")])
    checked = check_sources(info["sources"], strict=strict, scan_timeout=scan_timeout)
    # the files given (data files found through reference sets are not inputs)
    old = [s["path"] for s in info["sources"] if not s.get("referenced_by")]
    empty: list[str] = []
    unmatched: list[str] = []
    new = [storage.normalize(p) for p in _paths(paths, empty, unmatched=unmatched)]
    if unmatched:
        raise VirtualizeError(_unmatched(unmatched), "nothing appended")
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
        report = Report(files=again, problems=touched, plan=Plan([], {}, {}),
                        notes=[f"nothing to append: 0 new, {len(again)} already in the cube"])
        report.output = {"path": os.path.abspath(cube), "kind": kind}
        report.already = again
        return report
    try:
        report = _append_files(cube, kind, info, old, new, recipe, jobs=jobs, executor=executor,
                               progress=progress, scan_timeout=scan_timeout,
                               skip_unreadable=skip_unreadable, no_gaps=no_gaps)
    except VirtualizeError as e:
        # every new file left out, the others already in (a cron job run again): nothing to do
        r = e.report
        if not (again and r is not None and r.left_out
                and all(p.kind == "no-files" for p in e.problems)):
            raise
        report = Report(files=again, problems=touched, plan=Plan([], {}, {}),
                        notes=[n for n in r.notes if n.startswith("left out")]
                        + [f"nothing to append: 0 new, {len(again)} already in the cube"],
                        left_out=r.left_out)
        report.output = {"path": os.path.abspath(cube), "kind": kind}
        report.already = again
        return report
    report.problems[:0] = touched
    if again:
        report.notes.insert(0, f"{len(new)} new, {len(again)} already in the cube (skipped: "
                            + ", ".join(os.path.basename(p) for p in again[:3])
                            + (", ..." if len(again) > 3 else "") + ")")
        report.already = again
    return report


def _append_files(cube: Path, kind: str, info: dict, old: list[str], new: list[str],
                  recipe: dict, *, jobs, executor, progress, scan_timeout, skip_unreadable,
                  no_gaps) -> Report:
    """Append the files `new` (none of them in the cube)."""
    report = _append_new(cube, kind, info, new, jobs=jobs, executor=executor,
                         progress=progress, scan_timeout=scan_timeout,
                         skip_unreadable=skip_unreadable, no_gaps=no_gaps)
    if report is not None:
        return report
    recipe.pop("kind")
    recipe.setdefault("chunk_size", None)  # (a cube written before the cut: never cut)
    report = check(old + new, jobs=jobs, executor=executor, progress=progress,
                   scan_timeout=scan_timeout, skip_unreadable=skip_unreadable, no_gaps=no_gaps,
                   **recipe)
    if report.plan is not None:  # the files left out before, and now
        report.plan.left_out = list(info.get("left_out") or []) + report.plan.left_out
    if report.plan is not None and \
            [s.path for s in report.plan.sources if not s.referenced_by][: len(old)] != old:
        report.problems.append(_not_at_end(cube, report.plan.concat_dim))
    plugin = registry.by_name(kind)
    _refuse_unless_ok(report)
    if plugin.commit_rebuild(report.plan, cube, added=len(new)):  # (a repository: a commit)
        return report
    return _write(report, cube, kind, overwrite=True, relative=plugin.relative(cube, info))


def _not_at_end(cube: Path, dim: str | None) -> Problem:
    return Problem(Location(str(cube)), "append-not-at-end",
                   f"the new files do not all come after the cube's last {dim!r} step; "
                   "to put them in the middle, re-run virtualize with all the files")


def _append_new(cube: Path, kind: str, info: dict, new: list[str], *, jobs: int | str,
                executor, progress, scan_timeout, skip_unreadable=False,
                no_gaps=False) -> Report | None:
    """Append by scanning only the new files (see `append`); None when the cube must be
    rebuilt instead (no recorded last step, or a grown cube that would differ from a full
    rebuild beyond its new chunks)."""
    from .model import Source
    from .plan import merge_append, resume_from

    plugin = registry.by_name(kind)
    resume = resume_from(info.get("append"))
    if resume is None:
        return None
    # (the recorded last step keeps its format's name: its plug-in says what it is)
    fmt = _formats.of_inventory(resume.last.format)
    resume.last.reference_set = fmt is not None and fmt.reference_set
    recipe = dict(info.get("recipe") or {})
    opts = ConcatOptions(concat_dim=recipe.get("concat_dim"),
                         inline=frozenset(recipe.get("inline") or ()),
                         drop=frozenset(recipe.get("drop") or ()), sort=recipe.get("sort", True),
                         split=recipe.get("split", True),
                         materialize=recipe.get("materialize", False),
                         inline_threshold=recipe.get("inline_threshold", DEFAULT_INLINE_THRESHOLD),
                         no_gaps=no_gaps, read=read_values)
    last = resume.last.path
    report = _check(new, lambda invs: plan_concat(invs, opts, resume=resume), progress,
                    recipe.get("materialize_limit"), jobs, scan_timeout, exclude=(last,),
                    executor=executor, chunk_size=recipe.get("chunk_size"), like=resume.last,
                    hint=ScanHint("append", resume.dim, inline=opts.inline),
                    skip_unreadable=skip_unreadable)
    plan = report.plan
    if plan is None:
        _refuse_unless_ok(report)
        return None
    plan.recipe = recipe
    if plan.sources[0].path != last:
        raise VirtualizeError([_not_at_end(cube, plan.concat_dim)], "nothing appended")
    if any(p.fatal and p.loc.file == last for p in report.problems):
        return None  # the cube's last file would change (e.g. a padded block, now inside)
    report.problems = [p for p in report.problems if p.loc.file != last]
    _refuse_unless_ok(report)
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
    if isinstance(merged, str):
        return None
    merged.plan.left_out = list(info.get("left_out") or []) + plan.left_out
    fresh = [s.path for s in merged.sources[len(old_sources):]]
    report.notes.extend(plugin.grow(cube, merged, info, fresh, recipe=recipe, state=state))
    report.notes.append(f"appended {len(new) - len(report.left_out)} file(s) after the cube's "
                        "last step, scanning only "
                        f"them: {len(old_sources)} recorded source(s) checked unchanged, not "
                        "read")
    report.output = {"path": os.path.abspath(cube), "kind": kind}
    report.plan = merged.plan  # the grown cube (references: those of the new chunks)
    return report


def _local_cube(cube: PathLike, what: str) -> Path:
    """`cube` as a local path (a file:// URL too); another URL is refused (not mangled
    into a local path)."""
    cube = storage.local_path(cube)
    if storage.is_url(str(cube)):
        raise VirtualizeError([Problem(Location(str(cube)), "remote-cube",
                                       f"{what} works on a cube on this machine's file system; "
                                       "copy the cube here first (virtualize.open reads it "
                                       "where it is)")], f"{cube}: {what} needs a local cube")
    return Path(cube)


def _cube_kind(cube: Path) -> str:
    """"icechunk", "kerchunk" (a file: a reference JSON) or "cube" (a directory)."""
    return registry.kind_at(cube, by_name=False)


def _recorded(cube: Path, kind: str | bool) -> dict:
    """What a cube recorded about how it was made: sources and recipe (a kerchunk JSON
    written by virtualize: its `virtualize` section)."""
    info = registry.by_name(kind).recorded(cube)
    if not isinstance(info, dict) or not isinstance(info.get("sources"), list):
        raise VirtualizeError([Problem(Location(str(cube)), "not-a-cube",
                                       "not a cube directory, kerchunk JSON or Icechunk "
                                       "repository written by virtualize")])
    return info


def _replan(cube: Path, info: dict, *, jobs: int | str = "auto", executor=None, progress=None,
            decode: str = "groups",
            extra: Sequence[str] = (),
            scan_timeout: float | None = DEFAULT_SCAN_TIMEOUT) -> Report:
    """The cube's stack planned again from its recorded inputs and recipe."""
    recipe = dict(info.get("recipe") or {})
    kind = recipe.pop("kind", None)
    inputs = [s["path"] for s in info["sources"] if not s.get("referenced_by")] + list(extra)
    if kind == "concat":
        opts = ConcatOptions(concat_dim=recipe.get("concat_dim"),
                             inline=frozenset(recipe.get("inline") or ()),
                             drop=frozenset(recipe.get("drop") or ()), sort=recipe.get("sort", True),
                             split=recipe.get("split", True),
                             materialize=recipe.get("materialize", False),
                             inline_threshold=recipe.get("inline_threshold", 0), read=read_values)
        planner = lambda invs: plan_concat(invs, opts)  # noqa: E731
        hint = ScanHint("concat", opts.concat_dim, inline=opts.inline)
    elif kind == "mosaic":
        offsets = recipe.get("offsets")
        opts = MosaicOptions(offsets=[tuple(o) for o in offsets] if offsets else None,
                             overlap=recipe.get("overlap"), tolerance=recipe.get("tolerance", 1e-3),
                             drop=frozenset(recipe.get("drop") or ()), split=recipe.get("split", True),
                             materialize=recipe.get("materialize", False))
        planner = lambda invs: plan_mosaic(invs, opts)  # noqa: E731
        hint = ScanHint("mosaic")
    else:
        raise VirtualizeError([Problem(Location(str(cube)), "not-appendable",
                                       "the cube records no recipe (written by an older "
                                       "virtualize): re-run virtualize with its files")])
    report = _check(inputs, planner, progress, recipe.get("materialize_limit"), jobs,
                    scan_timeout, decode=decode, executor=executor,
                    chunk_size=recipe.get("chunk_size"), hint=hint)
    if report.plan is not None:
        report.plan.recipe = dict(info.get("recipe") or {})
    return report


def verify_cube(cube: PathLike, *, decode: bool = False, refresh: bool = False,
                strict: bool = False, jobs: int | str = "auto", executor=None, progress=None,
                scan_timeout: float | None = DEFAULT_SCAN_TIMEOUT) -> list[Problem]:
    """Re-check a cube's sources against what the cube recorded (`source-changed` /
    `source-missing` problems name each stale one; a source whose modification time
    alone changed is re-scanned and, its block tables as recorded, is `source-touched`:
    a note, fatal when `strict`; docs/reading.md, Staleness). `refresh`: record the
    touched sources' new times in the cube (any kind), so that later opens are silent.
    With `decode`, the stack is also scanned and planned again from the cube's recorded
    inputs and recipe, and one chunk per source is decoded through the cube's codecs and
    compared with the source library's read (`decode-mismatch`). [] when all is well;
    fatal problems when the cube is stale (or broken)."""
    from .outputs.staging import locked

    cube = _local_cube(cube, "verify")
    kind = _cube_kind(cube)
    with locked(cube) if refresh else _nothing():  # (an append waits, as for appends)
        info = _recorded(cube, kind)
        checked = check_sources(info["sources"], strict=strict, scan_timeout=scan_timeout)
        problems = checked.problems
        if any(p.fatal for p in problems):
            return problems
        report = None
        if refresh and checked.touched:
            if registry.by_name(kind).refuses_growth(info):
                return problems + [Problem(Location(str(cube)), "not-refreshable",
                                           "this Icechunk repository is relocatable (--relative): "
                                           "refreshing it is not supported yet; re-run virtualize "
                                           "--relative with all the files")]
            report = _refresh(cube, kind, info, checked.touched, jobs=jobs, executor=executor,
                              progress=progress, scan_timeout=scan_timeout, decode=decode)
            if not report.ok:
                return problems + [p for p in report.problems if p.fatal]
            problems = [Problem(p.loc, p.kind, p.message.split("; `virtualize verify")[0]
                                + "; its new time is now recorded", fatal=False)
                        for p in problems]
        if not decode:
            return problems
        if report is None:
            report = _replan(cube, info, jobs=jobs, executor=executor, progress=progress,
                             decode="sources", scan_timeout=scan_timeout)
        return problems + _rewritten(info, report) + [p for p in report.problems if p.fatal]


def _rewritten(info: dict, report: Report) -> list[Problem]:
    """The sources whose block tables, scanned again, differ from the fingerprints the cube
    recorded although size and time are as recorded (a rewrite in place)."""
    if report.plan is None:
        return []
    now = {s.path: s.fingerprint for s in report.plan.sources}
    return [Problem(Location(s["path"]), "source-changed",
                    "its size and modification time are as recorded, but scanned again its "
                    "block tables differ from what the cube recorded (rewritten in place?)")
            for s in info["sources"] if isinstance(s.get("fingerprint"), str)
            and now.get(s["path"]) not in (None, s["fingerprint"])
            and _scanned_alike(now[s["path"]], s["fingerprint"])]


def _scanned_alike(a: str, b: str) -> bool:
    """Two fingerprints made under the same scan hint (which variables carry digests): a
    cube's files re-planned otherwise than they were scanned (one file, then appended to)
    cannot be compared by them."""
    return a.rsplit(":", 1)[0] == b.rsplit(":", 1)[0]


def _nothing():
    import contextlib
    return contextlib.nullcontext()


def _refresh(cube: Path, kind: str, info: dict, touched, *, jobs, executor, progress,
             scan_timeout, decode: bool) -> Report:
    """Record the touched sources' new times in the cube (`verify --refresh`). An Icechunk
    repository's references carry the times too: the stack is planned again (the same
    references, the touched files' block tables being as recorded) to stamp them again."""
    times = {t.index: t.mtime_ns for t in touched}

    def replan() -> Report:
        return _replan(cube, info, jobs=jobs, executor=executor, progress=progress,
                       decode="sources" if decode else "groups", scan_timeout=scan_timeout)
    report = registry.by_name(kind).refresh(cube, info, times, replan)
    return report if report is not None else Report(files=[], problems=[], plan=Plan([], {}, {}))


def export(cube: PathLike, out: PathLike, *, format: str | None = None,
           overwrite: bool = False, jobs: int | str = "auto", executor=None, progress=None,
           scan_timeout: float | None = DEFAULT_SCAN_TIMEOUT, relative: bool = False,
           strict: bool = False) -> Report:
    """Write a cube (directory, kerchunk JSON or Icechunk repository written by
    virtualize) as another kind: `format` or `out`'s suffix as for `virtualize`. Its
    recorded inputs are scanned and planned again with its recorded recipe (after
    checking that none changed; `strict`: a touched one refused too), so the export holds
    the same references (`relative`: recorded relative to `out`, as for `virtualize`)."""
    cube = _local_cube(cube, "export")
    info = _recorded(cube, _cube_kind(cube))
    _refuse_stale(cube, info, strict)
    kind = _output_kind(out, format, overwrite,
                        [s["path"] for s in info["sources"] if not s.get("referenced_by")])
    return _write(_replan(cube, info, jobs=jobs, executor=executor, progress=progress,
                          scan_timeout=scan_timeout),
                  out, kind, overwrite, relative)


def open(path: PathLike, *, check_sources: bool = True, allow=None,  # noqa: A001
         storage_options: dict | None = None, strict: bool = False) -> zarr.Group:
    """A cube (directory, kerchunk JSON or Icechunk repository) as a read-only zarr
    group. Rectilinear grids
    are enabled for the open only; the caller's zarr config is left as it was.

    The reader follows only references inside the roots recorded when the cube was
    written (its sources' directories) or in `allow` (paths, or URL prefixes such as
    "s3://bucket/"): docs/reading.md, Confinement.

    A source that changed is refused (`check_sources`); one that was only touched (its
    modification time changed, a re-scan finds its blocks as recorded) is read with a
    `SourceTouchedWarning`, or refused when `strict` (docs/reading.md, Staleness)."""
    _storage(storage_options)
    return open_cube(storage.local_path(path), check_sources=check_sources, allow=allow,
                     strict=strict)


def _refuse_stale(cube: Path, info: dict, strict: bool) -> list:
    """The cube's source check (staleness.py): refused when a source is stale (or touched,
    when `strict`); the touched sources otherwise (a note for the report)."""
    checked = check_sources(info["sources"], strict=strict)
    fatal = [p for p in checked.problems if p.fatal]
    if fatal:
        raise VirtualizeError(fatal, f"{cube}: its sources changed since it was written"
                              + ("" if checked.stale else
                                 " (touched only: `virtualize verify --refresh` records them)"))
    return checked.problems


def _storage(options: dict | None) -> None:
    """Storage options of remote sources and outputs: {protocol: {key: value}} or one flat
    {key: value} for every protocol (storage.py)."""
    if options is not None:
        storage.set_options(options)


# -- the shared steps ------------------------------------------------------------------

# what leaves a file out with `skip_unreadable`: a scan that failed so (the file is not a
# readable file of a format virtualize reads; missing or forbidden, a URL's 404 or 403 too),
# or a damaged object in it (fatal corrupt)
UNSCANNABLE = frozenset({"unreadable", "unknown-format", "corrupt", "truncated",
                         "scan-timeout", "scan-crashed", "source-missing", "source-forbidden"})
DAMAGED = frozenset({"corrupt", "truncated"})


def _unscannable(result: FileInventory | list[Problem]) -> Problem | None:
    """The problem that makes this file one `skip_unreadable` leaves out, or None."""
    if isinstance(result, FileInventory):
        return next((p for p in result.problems if p.fatal and p.kind in DAMAGED), None)
    return next((p for p in result if p.fatal and p.kind in UNSCANNABLE), None)


def _check(paths, planner: Planner, progress, materialize_limit: int | None = None,
           jobs: int | str = "auto", scan_timeout: float | None = DEFAULT_SCAN_TIMEOUT, names=None,
           decode: str = "groups", exclude: Sequence[str] = (), executor=None,
           chunk_size: int | None = None, like: FileInventory | None = None,
           hint: ScanHint | None = None, skip_unreadable: bool = False) -> Report:
    """Scan `paths`, plan them, check the plan (`exclude`: files whose chunks the decode
    check does not read: an append's recorded last step; `chunk_size`: large uncompressed
    blocks cut first, for the plan and the decode check alike; `like`: an append's
    recorded last step, whose cuts the new files keep; `hint`: how `planner` plans;
    `skip_unreadable`: files that cannot be scanned are left out, listed in the report's
    `left_out`)."""
    _check_jobs(jobs, executor)
    empty: list[str] = []
    skipped: dict[str, list[str]] = {}
    unmatched: list[str] = []
    files = _paths(paths, empty, skipped, unmatched)
    problems: list[Problem] = _unmatched(unmatched)
    invs: list[FileInventory] = []
    bytes_read: dict[str, int] = {}
    requests: dict[str, int] = {}
    for d in empty:
        problems.append(Problem(Location(os.path.abspath(d)), "no-files",
                                f"the directory {d} holds no files (hidden files and "
                                "subdirectories are not read)", fatal=not files))
    if not files and not empty and not unmatched:
        problems.append(Problem(Location(), "no-files", "no input files were given"))
    if hint is not None and hint.planner != "append" and len(files) == 1:
        # one file is compared with no other: its shared variables need no digests (an
        # append to its cube, finding none recorded, rebuilds it: plan/_state.py)
        hint = dataclasses.replace(hint, alone=True)
    share = Sharer()  # what the files repeat is held once (flat memory for large stacks)
    listed: list[str] = []  # the files as the report names them
    left_out: list[dict[str, str]] = []
    for i, result in enumerate(_scan_all(files, jobs, scan_timeout, executor, hint)):
        listed.append(storage.normalize(files[i]))
        why = _unscannable(result) if skip_unreadable else None
        if why is not None:
            left_out.append({"path": listed.pop(), "kind": why.kind, "message": why.message})
        elif isinstance(result, FileInventory):
            if result.path == listed[-1]:
                result.path = listed[-1]  # one string for the report, the plan and the check
            invs.append(share(result))
            bytes_read[result.path] = result.bytes_read
            requests[result.path] = result.requests
        else:
            problems.extend(result)
        if progress is not None:
            progress(i + 1, len(files), result if isinstance(result, FileInventory) else None)
    if left_out and not invs and not any(p.fatal for p in problems):
        problems.append(Problem(Location(), "no-files",
                                f"every file was left out: none of the {len(left_out)} file(s) "
                                f"can be scanned (first: {left_out[0]['path']}: "
                                f"{left_out[0]['kind']} {left_out[0]['message']})"))
    plan = None
    notes: list[str] = [f"skipped {len(fs)} file(s) in {d} of no format virtualize reads: "
                        + ", ".join(fs[:5]) + (", ..." if len(fs) > 5 else "")
                        for d, fs in skipped.items()]
    unknown = names(invs) if names is not None and invs else []
    problems.extend(unknown)
    if invs and not unknown:
        invs, cut_notes, cut_problems = cut_stack(invs, chunk_size, like)
        notes.extend(cut_notes)
        problems.extend(cut_problems)
        plan, plan_problems = planner(invs)
        problems.extend(plan_problems)
        # the sources the cube copies chunks from (--materialize): no re-scan proves a touch
        for k in {c.source for a in plan.arrays.values() for c in a.materialize.values()}:
            plan.sources[k].copied = True
        notes.extend(plan.notes)
        copied = plan.remedies.get("materialize")
        if copied and materialize_limit is not None and copied.bytes > materialize_limit:
            problems.append(Problem(Location(), "materialize-limit",
                                    f"the plan would copy {copied.bytes} bytes in {copied.blocks} "
                                    f"block(s), more than the limit of {materialize_limit}"))
        if not plan.arrays and not any(p.fatal for p in problems):
            skipped = sorted({p.loc.variable for p in problems if p.loc.variable})
            one = len(invs) == 1  # then the file is named
            problems.append(Problem(
                Location(invs[0].path) if one else Location(), "no-arrays",
                f"no variable of {'this file' if one else 'these files'} can be virtualized, "
                "so a cube would be empty"
                + (f" (skipped: {', '.join(skipped)})" if skipped else "")))
        # every zarr.json rendered as the write renders it (check and write agree)
        problems.extend(_render_problems(plan))
        # a few stored chunks decoded through the cube's codecs, compared with the sources
        checked = decode_check(plan, invs, select=decode,
                               skip={(p.loc.file, p.loc.variable) for p in problems if p.fatal}
                               | {(f, None) for f in exclude})
        problems.extend(checked.problems)
        notes.extend(checked.notes)
    if len(invs) + len(left_out) < len(files) and plan is not None:
        notes.append(f"{len(files) - len(invs) - len(left_out)} file(s) could not be scanned")
    if left_out:
        notes.insert(0, f"left out {len(left_out)} file(s) that cannot be scanned "
                        "(--skip-unreadable): " + ", ".join(
                            f"{os.path.basename(d['path'])} ({d['kind']})" for d in left_out[:5])
                     + (", ..." if len(left_out) > 5 else ""))
        if plan is not None:
            plan.left_out = left_out
    if len(listed) + len(left_out) != len(files):
        listed = [storage.normalize(f) for f in files]
    return Report(files=listed, problems=problems, plan=plan, notes=notes,
                  bytes_read=bytes_read, requests=requests, left_out=left_out)


def _render_problems(plan: Plan) -> list[Problem]:
    """Every zarr.json document of the plan rendered as the emitters render it (the same
    functions, strict JSON), so that `check` refuses what the write could not write; each
    failure is located at the file the metadata comes from (the first) and the node."""
    first = plan.sources[0].path if plan.sources else None
    out: list[Problem] = []
    nodes = [(g or "/", lambda attrs=attrs: group_doc(attrs)) for g, attrs in plan.groups.items()]
    nodes += [(name, lambda a=a: array_doc(a)) for name, a in plan.arrays.items()]
    for name, a in plan.arrays.items():
        for key, why in omitted_attrs(a.attrs, a.dtype):
            out.append(Problem(Location(first, name), "attribute-omitted",
                               f"attribute {key!r} is left out of the cube: {why}", fatal=False))
    for name, render in nodes:
        try:
            json.dumps(render(), allow_nan=False)
        except (ValueError, TypeError, OverflowError) as e:
            out.append(Problem(Location(first, name), "metadata-unrenderable",
                               f"its zarr.json cannot be written: {e}"))
    return out


# `jobs="auto"`: local files are scanned by one worker below this many files (starting
# more costs more than they save), else by one a core; remote files, whose scans wait on
# requests, by up to REMOTE_JOBS at once
AUTO_SERIAL = 200
REMOTE_JOBS = 8


def _chunk_size(value) -> int | None:
    try:
        return chunk_bytes(value)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _check_jobs(jobs, executor) -> None:
    if jobs not in ("auto", None) and (isinstance(jobs, bool) or not isinstance(jobs, int)
                                       or jobs < 0):
        raise UsageError(f"jobs must be a whole number >= 0 (0: one per core) or 'auto', "
                         f"not {jobs!r}")
    if executor is not None and not callable(getattr(executor, "submit", None)):
        raise UsageError(f"executor must be a dask.distributed Client or a "
                         f"concurrent.futures.Executor, not {type(executor).__name__}")


def scan_jobs(jobs: int | str | None, files: Sequence[str]) -> int:
    """The number of scan workers `jobs` means for `files` (docs/scale.md)."""
    if jobs in ("auto", None):
        if any(storage.is_url(f) for f in files):
            return max(1, min(REMOTE_JOBS, len(files)))
        return 1 if len(files) < AUTO_SERIAL else os.cpu_count() or 1
    return min(jobs or os.cpu_count() or 1, max(1, len(files)))


def _scan_all(files: list[str], jobs: int | str, scan_timeout: float | None,
              executor=None, hint: ScanHint | None = None
              ) -> Iterator[FileInventory | list[Problem]]:
    """Scan in file order: as tasks of `executor` when given, else with a time limit (or
    jobs > 1; 0: one per core; "auto": by the stack) in worker processes, each file within
    `scan_timeout` seconds (see run/workers.py and docs/scale.md). `hint`: how the files
    will be planned (the scan digests what that planner compares across files)."""
    if scan_timeout is not None and scan_timeout < 0:
        raise ValueError(f"scan_timeout must be positive (or None / 0 for no limit), not {scan_timeout}")
    if executor is not None:
        yield from scan_on(executor, files, scan_timeout or None, hint=hint)
        return
    jobs = scan_jobs(jobs, files)
    if not scan_timeout and jobs <= 1:
        yield from (scan_or_problems(f, hint) for f in files)
        return
    yield from scan_bounded(files, scan_timeout or None, jobs, hint)


def _output_kind(out: PathLike, format: str | None, overwrite: bool, paths=None) -> str:
    """The output's kind; refuses early (before any scanning) an output named with a
    suffix of a format virtualize does not write (outputs/registry.py FOREIGN_SUFFIXES), one that exists
    without `overwrite`, that virtualize did not write, or that is, holds or sits in one
    of `paths` (when given as a path or a list: an iterator is checked at writing)."""
    out = storage.local_path(out)  # (file:///abs/x.zarr is /abs/x.zarr)
    remote = storage.is_url(out)
    if remote:
        storage.normalize(out)  # an unknown scheme is refused before anything is scanned
    out = os.fspath(out) if remote else Path(out)
    kind = registry.kind_of(out, format)
    sources = _paths(paths) if isinstance(paths, (str, os.PathLike, list, tuple)) else []
    if remote:
        from .outputs.remote import guard_remote
        guard_remote(out, overwrite, sources)
    else:
        guard_output(out, overwrite, sources)  # before any scanning: fail fast, lose nothing
    # (after the guards: a source named as the output is refused as that)
    registry.refuse_foreign(out)  # a name that promises a format not written
    return kind


def _refuse_unless_ok(report: Report) -> None:
    if not report.ok:
        raise VirtualizeError([p for p in report.problems if p.fatal],
                              f"cannot virtualize: {sum(p.fatal for p in report.problems)} "
                              "problem(s); nothing was written", report=report)


def _write(report: Report, out: PathLike, kind: str, overwrite: bool,
           relative: bool = False) -> Report:
    _refuse_unless_ok(report)
    out = storage.local_path(out)
    plugin = registry.by_name(kind)
    # every file named, scanned or not, is protected (the writers check their plan's too)
    if storage.is_url(out):  # object storage: built here, uploaded root documents last
        from .outputs.remote import write_remote
        url = storage.normalize(out)

        def write(plan, local, over):
            return plugin.write(plan, local, over, relative_to=url if relative else None)
        write_remote(write, report.plan, url, kind, overwrite)
        report.output = {"path": url, "kind": kind}
        return report
    guard_output(out, overwrite, report.files)
    plugin.write(report.plan, out, overwrite,
                 relative_to=os.path.abspath(out) if relative else None)
    report.output = {"path": os.path.abspath(out), "kind": kind}
    return report


# names of files a directory argument takes without looking inside (a damaged one is then
# reported, not skipped); any other file is taken when its first bytes are of a format read
DATA_SUFFIXES = _formats.suffixes()  # (every format's: formats/registry.py)


def _paths(paths, empty: list[str] | None = None,
           skipped: dict[str, list[str]] | None = None,
           unmatched: list[str] | None = None) -> list[str]:
    """Files as given; a pattern with * ? [ that names no file is expanded (sorted, as a
    shell would; one that matches nothing is added to `unmatched`); a directory stands for
    the files in it (sorted, not hidden, not recursive) of formats virtualize reads
    (others, such as .aux.xml side-cars and checksums, are added to `skipped` by
    directory), unless it is a kerchunk parquet reference set (one input); directories
    that hold none are added to `empty`."""
    from .formats import is_input_directory

    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[str] = []
    for p in map(os.fspath, paths):
        p = os.fspath(storage.local_path(p))  # file:///abs: a local path (a directory, a glob)
        if storage.is_url(p):
            storage.normalize(p)  # an unknown scheme is refused here
            if storage.has_magic(p):
                matched = storage.glob(p)
                if not matched and unmatched is not None:
                    unmatched.append(p)
                out += matched
            elif p.endswith("/") and storage.isdir(p):
                inside = storage.listdir(p)
                if not inside and empty is not None:
                    empty.append(p)
                out += inside
            else:
                out.append(p)
            continue
        if glob.has_magic(p) and not os.path.exists(p):
            matched = sorted(glob.glob(p))
            if matched:
                out += _paths(matched, empty, skipped)
                continue
            if unmatched is not None:  # not a file named with * either: nothing matches
                unmatched.append(p)
                continue
        if os.path.isdir(p) and not is_input_directory(p):
            inside = sorted(os.path.join(p, f) for f in os.listdir(p)
                            if not f.startswith(".") and os.path.isfile(os.path.join(p, f)))
            taken = [f for f in inside if _readable_format(f)]
            if len(taken) < len(inside) and skipped is not None:
                skipped[p] = [os.path.basename(f) for f in inside if f not in taken]
            if not taken and empty is not None:
                empty.append(p)
            out += taken
        else:
            out.append(p)
    return out


def _unmatched(patterns: list[str]) -> list[Problem]:
    """A pattern that matches nothing: fatal, as a missing file is (a stack without the
    files it names would be silently shorter)."""
    return [Problem(Location(p if storage.is_url(p) else os.path.abspath(p)), "no-files",
                    f"no file matches {p!r}") for p in patterns]


def _readable_format(path: str) -> bool:
    from .formats import detect_format

    if path.lower().endswith(DATA_SUFFIXES):
        return True
    try:
        return detect_format(path) is not None
    except OSError:
        return True  # unreadable: reported by the scan


def _unknown_names(invs: list[FileInventory], drop, inline, concat_dim) -> list[Problem]:
    """`drop`/`inline` names no file has, and a `concat_dim` no file has where a new axis
    makes no sense (some file has an unlimited dimension, or a dimension spelled almost
    alike): problems listing the names that exist."""
    import difflib

    # and those a scanner could not take (named by its problems: --drop is their remedy)
    variables = {n for inv in invs for n in inv.variables}
    variables |= {p.loc.variable for inv in invs for p in inv.problems if p.loc.variable}
    variables |= {n.rpartition("/")[2] for n in variables}
    dims = {d for inv in invs for v in inv.variables.values() for d in v.dims}
    dims |= {d.rpartition("/")[2] for inv in invs for d in inv.dimensions}  # unused ones too
    out = []
    for option, wanted in (("--drop", drop), ("--inline", inline)):
        for name in sorted(set(wanted) - variables):
            out.append(Problem(Location(None, name), "unknown-name",
                               f"{option} {name}: no file has a variable {name!r}; the variables "
                               f"are: {', '.join(sorted(variables)) or '(none)'}"))
    if concat_dim is not None and concat_dim not in dims:
        unlimited = any(d.unlimited for inv in invs for d in inv.dimensions.values())
        close = difflib.get_close_matches(concat_dim, sorted(dims), n=3, cutoff=0.6)
        if unlimited or close:
            out.append(Problem(Location(None, None, concat_dim), "unknown-name",
                               f"--concat-dim {concat_dim}: no file has a dimension "
                               f"{concat_dim!r}; the dimensions are: {', '.join(sorted(dims))}"
                               + (f" (did you mean {close[0]!r}?)" if close else "")))
    return out


def _names(names: Iterable[str] | str) -> Sequence[str]:
    if isinstance(names, str):
        names = [names]
    return [n.strip("/") for n in names]
