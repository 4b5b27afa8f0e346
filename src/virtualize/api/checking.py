"""Checking a stack: files scanned (in bounded workers, or on an executor), planned, every
zarr.json rendered and a few chunks decoded through the cube's codecs, every problem
collected (`check`, `check_mosaic`; `inventory`, `inventories`). The shared steps of
every command are here (`_check`, `_scan_all`)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence

from .. import storage
from ..checks.decode import decode_check
from ..conventions import ScanHint
from ..formats import read_values
from ..formats import scan as _scan
from ..model import FileInventory, Location, Plan, Problem, UsageError, VirtualizeError
from ..outputs.metadata import array_doc, group_doc, omitted_attrs
from ..plan import DEFAULT_INLINE_THRESHOLD, ConcatOptions, MosaicOptions, plan_mosaic
from ..plan.attrs import COMBINE_ATTRS
from ..plan.coords import label, parse_coords
from ..plan.cut import DEFAULT_CHUNK_SIZE, chunk_bytes, cut_stack
from ..plan.hypercube import HypercubeOptions, plan_hypercube
from ..plan.merge import COMPATS, JOINS, unknown_variables
from ..report import Report
from ..run.executors import scan_on
from ..run.policy import check_jobs, scan_jobs
from ..run.share import Sharer
from ..run.workers import scan_bounded, scan_or_problems
from .paths import _paths, _unmatched

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
    check_jobs(jobs, executor)
    yield from _scan_all(_paths(paths), jobs, scan_timeout, executor)


def check(paths: Iterable[PathLike] | PathLike, concat_dim: str | None = None, *,
          inline: Iterable[str] = (), drop: Iterable[str] = (), sort: bool = True,
          split: bool = True, materialize: bool = False, materialize_limit: int | None = None,
          jobs: int | str = "auto", executor=None, progress=None,
          scan_timeout: float | None = DEFAULT_SCAN_TIMEOUT,
          storage_options: dict | None = None,
          inline_threshold: int = DEFAULT_INLINE_THRESHOLD,
          chunk_size: int | str | None = DEFAULT_CHUNK_SIZE, skip_unreadable: bool = False,
          no_gaps: bool = False, join: str = "exact", combine_attrs: str = "drop_conflicts",
          variables: Iterable[str] | None = None, concat_dims: Sequence[str] | None = None,
          coords: dict | Sequence[str] | None = None, compat: str = "identical") -> Report:
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
    note) is fatal.

    Files holding different variables (tas in yearly files, pr in 5-year ones) are merged
    (docs/planning.md, Merging variables split across files): `join` "exact" (every
    variable covers the same span of the axis) or "outer" (the union; steps no file of a
    variable holds read as its fill value). `combine_attrs`: attributes that differ
    between files, "drop_conflicts" (left out, named in a note), "override" (the first
    file's) or "identical" (refused); those that change what the values mean are refused
    whatever it is. `variables`: keep only these and the coordinates they need. `compat`:
    a variable without the concatenation axes that no coordinate needs (a grid's area, a
    constant) differing between files or a hypercube's cells, "identical" (refused) or
    "override" (the first's, named in a note; xarray's `compat="override"`).

    A hypercube: `concat_dims` (several axes, outermost first; `concat_dim` is one) and
    `coords` ({dim: "attr:NAME" | "var:NAME" | "name:REGEX" | "v1,v2,..." or a list of
    values}, or "DIM=FORM" strings): a new axis' position of each file (docs/planning.md,
    Hypercubes). `join="outer"`: the grid's cells no file fills are absent chunks that
    read as the fill value (default "exact": refused, naming the cell)."""
    _storage(storage_options)
    limit = _chunk_size(chunk_size)
    if join not in JOINS:
        raise UsageError(f"join must be one of {', '.join(JOINS)}, not {join!r}")
    if combine_attrs not in COMBINE_ATTRS:
        raise UsageError(f"combine_attrs must be one of {', '.join(COMBINE_ATTRS)}, "
                         f"not {combine_attrs!r}")
    if compat not in COMPATS:
        raise UsageError(f"compat must be one of {', '.join(COMPATS)}, not {compat!r}")
    selected = frozenset(_names(variables)) if variables is not None else None
    dims = _concat_dims(concat_dim, concat_dims)
    specs = parse_coords(coords)
    cube = len(dims) > 1 or bool(specs)
    opts = ConcatOptions(concat_dim=concat_dim, inline=frozenset(_names(inline)),
                         drop=frozenset(_names(drop)), sort=sort, split=split,
                         materialize=materialize, inline_threshold=inline_threshold,
                         no_gaps=no_gaps, read=read_values, join=join,
                         combine_attrs=combine_attrs, variables=selected, compat=compat)
    hyper = HypercubeOptions(dims=dims, coords=specs, concat=opts)
    # (one axis given as `concat_dims=[DIM]`, as the CLI's --concat-dim gives it, is
    # recorded as `concat_dim`: re-planning the cube, verify --decode and append, use it)
    recipe = {"kind": "concat", "concat_dim": dims[0] if len(dims) == 1 else concat_dim,
              "inline": sorted(opts.inline),
              "drop": sorted(opts.drop), "sort": sort, "split": split,
              "materialize": materialize, "materialize_limit": materialize_limit,
              "inline_threshold": inline_threshold, "chunk_size": limit}
    # (recorded only when not the default: cubes read as before where unused)
    if join != "exact":
        recipe["join"] = join
    if combine_attrs != "drop_conflicts":
        recipe["combine_attrs"] = combine_attrs
    if selected is not None:
        recipe["variables"] = sorted(selected)
    if compat != "identical":
        recipe["compat"] = compat
    if cube:  # (a plain stack's recipe stays as it was)
        recipe.update(concat_dim=None, concat_dims=dims,
                      coords={d: s.text() for d, s in specs.items()}, join=join)
    known = [d for d in dims if d not in specs]
    report = _check(paths, lambda invs: plan_hypercube(invs, hyper), progress, materialize_limit,
                    jobs, scan_timeout, executor=executor, chunk_size=limit,
                    names=lambda invs: _unknown_names(invs, opts.drop, opts.inline, *known,
                                                      selected=selected),
                    hint=ScanHint("concat", dims[0] if len(dims) == 1 else None,
                                  inline=opts.inline, dims=tuple(dims) if cube else ()),
                    skip_unreadable=skip_unreadable)
    listed = {d: s.values for d, s in specs.items() if s.kind == "values"}
    if listed and len(report.files) == len(next(iter(listed.values()))):
        # (each file's listed value, so that `append` can list the new files' alone)
        # (dates as their text, which the recipe's JSON holds and parse_coord reads back)
        recipe["coord_values"] = {d: [[f, label(v) if isinstance(v, datetime.datetime) else v]
                                      for f, v in zip(report.files, values)]
                                  for d, values in listed.items()}
    if report.plan is not None:
        report.plan.recipe = recipe
    return report


def _concat_dims(concat_dim: str | None, concat_dims: Sequence[str] | str | None) -> list[str]:
    """The concatenation axes, outermost first, from `concat_dim` and `concat_dims`."""
    if isinstance(concat_dims, str):
        concat_dims = [concat_dims]
    dims = [d for d in (concat_dims or ()) if d]
    if concat_dim is not None and dims and dims != [concat_dim]:
        raise UsageError(f"concat_dim={concat_dim!r} and concat_dims={dims!r}: give one of them")
    return dims or ([concat_dim] if concat_dim is not None else [])


def check_mosaic(paths: Iterable[PathLike] | PathLike, *,
                 offsets: Sequence[tuple[int, int]] | None = None, overlap: str | None = None,
                 drop: Iterable[str] = (), tolerance: float = 1e-3, split: bool = True,
                 materialize: bool = False, materialize_limit: int | None = None,
                 jobs: int | str = "auto", executor=None, progress=None,
                 scan_timeout: float | None = DEFAULT_SCAN_TIMEOUT,
                 storage_options: dict | None = None,
                 chunk_size: int | str | None = DEFAULT_CHUNK_SIZE,
                 skip_unreadable: bool = False, concat_dim: str | None = None,
                 coords: dict[str, str] | None = None,
                 combine_attrs: str = "drop_conflicts") -> Report:
    """Can these tiles be placed into one mosaic? By georeferencing (GeoTIFF transform,
    or 1-D x/y / lon/lat coordinates), or by explicit `offsets` [(row, col), ...] in pixels.
    `overlap`: None (overlaps are problems), "last" or "first" (which tile wins).
    Remedies as in `check`: `split` cuts uncompressed blocks into row ranges, `materialize`
    copies cells no block fits; `chunk_size` cuts large uncompressed blocks as in `check`;
    `skip_unreadable` as in `check`.
    `concat_dim` ("time"): a mosaic over time, each file one tile on one date, the dates
    stacked along `concat_dim` (docs/mosaic.md, Mosaics over time); each file's date from
    `coords` ({"time": "name:REGEX" | "attr:NAME" ...}), else its own `concat_dim`
    variable, else the date in its name. `combine_attrs`: attributes that differ between
    tiles, as in `check` (drop_conflicts, the default, with a note; override; identical)."""
    _storage(storage_options)
    limit = _chunk_size(chunk_size)
    coords = _mosaic_coords(concat_dim, coords)
    if combine_attrs not in COMBINE_ATTRS:
        raise UsageError(f"combine_attrs must be one of {', '.join(COMBINE_ATTRS)}, "
                         f"not {combine_attrs!r}")
    if concat_dim is not None and materialize:
        raise UsageError("--materialize is not supported for a mosaic over time yet")
    opts = MosaicOptions(offsets=offsets, overlap=overlap, tolerance=tolerance,
                         drop=frozenset(_names(drop)), split=split, materialize=materialize,
                         concat_dim=concat_dim, coords=coords, combine_attrs=combine_attrs)
    if overlap not in (None, "last", "first"):
        raise UsageError(f"overlap must be None, 'last' or 'first', not {overlap!r}")
    report = _check(paths, lambda invs: plan_mosaic(invs, opts), progress, materialize_limit, jobs,
                    scan_timeout, executor=executor, chunk_size=limit,
                    names=lambda invs: _unknown_names(invs, opts.drop, (), None),
                    hint=ScanHint("mosaic", concat_dim),
                    skip_unreadable=skip_unreadable)
    if report.plan is not None:
        report.plan.recipe = {"kind": "mosaic", "overlap": overlap, "tolerance": tolerance,
                              "offsets": [list(o) for o in offsets] if offsets else None,
                              "drop": sorted(opts.drop), "split": split,
                              "materialize": materialize, "chunk_size": limit}
        if concat_dim is not None:
            report.plan.recipe.update(concat_dim=concat_dim, coords=coords)
        if combine_attrs != "drop_conflicts":
            report.plan.recipe["combine_attrs"] = combine_attrs
    return report


def _mosaic_coords(concat_dim: str | None, coords: dict[str, str] | None) -> dict | None:
    """A mosaic over time's `coords`, checked before anything is scanned."""
    if not coords:
        return None
    if concat_dim is None:
        raise UsageError("coords (--coord) needs concat_dim (--concat-dim) for a mosaic")
    extra = sorted(set(coords) - {concat_dim})
    if extra:
        raise UsageError(f"--coord {extra[0]}=...: a mosaic has one concat axis, {concat_dim!r}")
    from ..plan.mosaic_time import check_coord

    for dim, spec in coords.items():
        check_coord(dim, spec)
    return dict(coords)


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
    check_jobs(jobs, executor)
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


def _chunk_size(value) -> int | None:
    try:
        return chunk_bytes(value)
    except ValueError as e:
        raise UsageError(str(e)) from None


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


def _unknown_names(invs: list[FileInventory], drop, inline, concat_dim=None,
                   *more_dims: str, selected=None) -> list[Problem]:
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
    for name in unknown_variables(invs, selected or ()):
        out.append(Problem(Location(None, name), "unknown-name",
                           f"--variables {name}: no file has a variable {name!r}; the "
                           f"variables are: {', '.join(sorted(variables)) or '(none)'}"))
    for concat_dim in (d for d in (concat_dim, *more_dims) if d is not None and d not in dims):
        unlimited = any(d.unlimited for inv in invs for d in inv.dimensions.values())
        close = difflib.get_close_matches(concat_dim, sorted(dims), n=3, cutoff=0.6)
        if unlimited or close:
            out.append(Problem(Location(None, None, concat_dim), "unknown-name",
                               f"--concat-dim {concat_dim}: no file has a dimension "
                               f"{concat_dim!r}; the dimensions are: {', '.join(sorted(dims))}"
                               + (f" (did you mean {close[0]!r}?)" if close else "")
                               + f"; a new axis takes each file's value from --coord "
                                 f"{concat_dim}=attr:NAME, var:NAME, name:REGEX or v1,v2,..."))
    return out


def _names(names: Iterable[str] | str) -> Sequence[str]:
    if isinstance(names, str):
        names = [names]
    return [n.strip("/") for n in names]
