"""The steps every job of the API shares, by their public names: inputs expanded
(`expand_paths`), files scanned (`scan_all`), a stack checked (`check_stack`: scanned,
cut, planned, every zarr.json rendered, a few chunks decoded; `check_recipe`: planned by a
`Recipe`), a checked plan written (`output_kind` before scanning, `write_checked`), and
what an existing output recorded (`existing_output`, `recorded`, `replan`: its
stack planned again from its record). The jobs (checking, create, appending, cubes) are
made of these; none takes another's private name."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import glob
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from .. import storage
from ..checks.decode import decode_check
from ..conventions import ScanHint
from ..formats import registry as _formats
from ..model import (
    FileInventory,
    Location,
    Plan,
    Problem,
    UnsafeOutputError,
    UsageError,
    VirtualizeError,
)
from ..outputs.metadata import array_doc, group_doc, omitted_attrs
from ..outputs.staging import guard_output, refuse_sources
from ..plan.cut import cut_stack
from ..plan.datasets import split as dataset_split
from ..plan.merge import unknown_variables
from ..plan.pile import data_variables, odd_files
from ..report import Report
from ..run.executors import scan_on
from ..run.policy import check_jobs, scan_jobs
from ..run.share import Sharer
from ..run.workers import run_alone, scan_bounded, scan_or_problems
from .recipe import Planner, Recipe

PathLike = str | os.PathLike
# Seconds one file's scan may take before it is stopped and reported (`scan-timeout`).
DEFAULT_SCAN_TIMEOUT = 60.0


def _registry():
    """The output kinds' registry, imported where an output is named or written: it imports
    every kind's writer (zarr among them), which a check never needs."""
    from ..outputs import registry

    return registry


def set_storage(options: dict | None) -> None:
    """Storage options of remote sources and outputs: {protocol: {key: value}} or one flat
    {key: value} for every protocol (storage.py)."""
    if options is not None:
        storage.set_options(options)



# -- inputs ---------------------------------------------------------------------

# names of files a directory argument takes without looking inside (a damaged one is then
# reported, not skipped); any other file is taken when its first bytes are of a format read
# DATA_SUFFIXES: every format's (formats/registry.py), the entry points' too: read on first
# use (`__getattr__`), not by a check of files named one by one


def __getattr__(name: str):
    if name == "DATA_SUFFIXES":
        return _formats.suffixes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def expand_paths(paths, empty: list[str] | None = None,
           skipped: dict[str, list[tuple[str, str]]] | None = None,
           unmatched: list[str] | None = None,
           refused: list[Problem] | None = None) -> list[str]:
    """Files as given; a pattern with * ? [ that names no file is expanded (sorted, as a
    shell would; one that matches nothing is added to `unmatched`); a directory stands for
    the files in it (sorted, not recursive) of formats virtualize reads, unless it is one
    input (a kerchunk parquet reference set, a zarr v2 store); every entry of it not
    taken (a file of no format read, such as .aux.xml side-cars and checksums, a hidden
    file, a subdirectory, a broken link) is added to `skipped` by directory, with why
    (`skipped_note`); directories that hold none are added to `empty`. A directory's
    entry that is a link leading out of it (itself, a chain of links, or through a
    directory link) is not taken: a located `reference-not-allowed` in `refused` (a file
    named itself is taken wherever it is)."""
    from ..formats import is_input_directory

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
                out += expand_paths(matched, empty, skipped, refused=refused)
                continue
            if unmatched is not None:  # not a file named with * either: nothing matches
                unmatched.append(p)
                continue
        if os.path.isdir(p) and not is_input_directory(p):
            taken, left = [], []
            for name in sorted(os.listdir(p)):
                f = os.path.join(p, name)
                why = _not_taken(name, f)
                if why is None:
                    taken.append(f)
                else:
                    left.append((name, why))
            if left and skipped is not None:
                skipped[p] = left
            if not taken and empty is not None:
                empty.append(p)
            out += _inside_directory(p, taken, refused)
        else:
            out.append(p)
    return out


def _inside_directory(d: str, files: list[str], refused: list[Problem] | None) -> list[str]:
    """The entries of directory `d` that lie inside it once their links are followed (a
    directory given is a place: a link in it must not make the cube reference a file
    elsewhere, which its reader would then serve); the others as problems in `refused`."""
    real_dir = os.path.realpath(d)
    out = []
    for f in files:
        real = os.path.realpath(f) if os.path.islink(f) else None
        if real is None or real.startswith(real_dir.rstrip("/") + "/"):
            out.append(f)
        elif refused is not None:
            refused.append(Problem(Location(os.path.abspath(f)), "reference-not-allowed",
                                   f"{f} is a link leading outside the directory {d} given as "
                                   f"input, to {real}: not taken (name the file itself to "
                                   "take it)"))
    return out


# why an entry of a directory given as input is not one of its inputs (`expand_paths`)
NO_FORMAT, HIDDEN, SUBDIRECTORY, BROKEN_LINK, SPECIAL = (
    "of no format virtualize reads", "hidden", "a subdirectory: not read, give it as an "
    "input too", "a broken symbolic link", "not a regular file")


def _not_taken(name: str, path: str) -> str | None:
    if name.startswith("."):
        return HIDDEN
    if os.path.isdir(path):
        return SUBDIRECTORY
    if not os.path.exists(path):
        return BROKEN_LINK if os.path.islink(path) else "gone while listed"
    if not os.path.isfile(path):
        return SPECIAL
    return None if _readable_format(path) else NO_FORMAT


def skipped_note(directory: str, entries: list[tuple[str, str]], shown: int = 5) -> str:
    """One note for the entries of `directory` not taken, grouped by why: "skipped 3
    entries in D: SHA256SUMS, a.aux.xml (of no format virtualize reads); gone.nc (a broken
    symbolic link)"."""
    by_why: dict[str, list[str]] = {}
    for name, why in entries:
        by_why.setdefault(why, []).append(name)
    parts = [", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown
                                         else "") + f" ({why})" for why, names in by_why.items()]
    n = len(entries)
    return f"skipped {n} entr{'y' if n == 1 else 'ies'} in {directory}: " + "; ".join(parts)


def unmatched_problems(patterns: list[str]) -> list[Problem]:
    """A pattern that matches nothing: fatal, as a missing file is (a stack without the
    files it names would be silently shorter)."""
    return [Problem(Location(p if storage.is_url(p) else os.path.abspath(p)), "no-files",
                    f"no file matches {p!r}") for p in patterns]


def _readable_format(path: str) -> bool:
    from ..formats import detect_format

    if path.lower().endswith(_formats.suffixes()):
        return True
    try:
        return detect_format(path) is not None
    except OSError:
        return True  # unreadable: reported by the scan


# -- scanning and checking -------------------------------------------------------

# what leaves a file out with `skip_unreadable`: a scan that failed so (the file is not a
# readable file of a format virtualize reads; missing or forbidden, a URL's 404 or 403 too),
# or a damaged object in it (fatal corrupt)
UNSCANNABLE = frozenset({"unreadable", "unknown-format", "corrupt", "truncated",
                         "scan-timeout", "scan-crashed", "source-missing", "source-forbidden"})
DAMAGED = frozenset({"corrupt", "truncated"})


def unscannable(result: FileInventory | list[Problem]) -> Problem | None:
    """The problem that makes this file one `skip_unreadable` leaves out, or None."""
    if isinstance(result, FileInventory):
        return next((p for p in result.problems if p.fatal and p.kind in DAMAGED), None)
    return next((p for p in result if p.fatal and p.kind in UNSCANNABLE), None)


def check_stack(paths, planner: Planner, progress, materialize_limit: int | None = None,
                jobs: int | str = "auto", scan_timeout: float | None = DEFAULT_SCAN_TIMEOUT,
                names=None, decode: str = "groups", exclude: Sequence[str] = (), executor=None,
                chunk_size: int | None = None, like: FileInventory | None = None,
                hint: ScanHint | None = None, skip_unreadable: bool = False) -> Report:
    """Scan `paths`, plan them, check the plan (`exclude`: files whose chunks the decode
    check does not read: an append's recorded last step; `chunk_size`: large uncompressed
    blocks cut first, for the plan and the decode check alike; `like`: an append's
    recorded last step, whose cuts the new files keep; `hint`: how `planner` plans;
    `skip_unreadable`: files that cannot be scanned are left out, listed in the report's
    `left_out`). One file scanned within `scan_timeout` is checked whole in one worker
    process (`run_alone`): its format's library is loaded and first used once."""
    check_jobs(jobs, executor)
    alone = _alone(paths, jobs, scan_timeout, executor)
    if alone is not None:
        def job(scanned):
            return check_stack(paths, planner, lambda _i, _n, inv: scanned(inv), materialize_limit,
                               1, None, names, decode, exclude, None, chunk_size, like, hint,
                               skip_unreadable)

        forward = None if progress is None else (lambda inv: progress(1, 1, inv))
        got = run_alone(job, alone, scan_timeout, forward)
        if got is not None and got[0] == "done":
            return got[1]
        if got is not None:  # its scan timed out or crashed: reported as a scan's are
            if progress is not None:
                progress(1, 1, None)
            with reusing({storage.normalize(alone): got[1]}):
                return check_stack(paths, planner, None, materialize_limit, jobs, scan_timeout,
                                   names, decode, exclude, None, chunk_size, like, hint,
                                   skip_unreadable)
        # (no fork, or the job died after its scan: done here, the scan in a worker)
    empty: list[str] = []
    skipped: dict[str, list[tuple[str, str]]] = {}
    unmatched: list[str] = []
    refused: list[Problem] = []  # a directory's links leading out of it
    files = expand_paths(paths, empty, skipped, unmatched, refused)
    problems: list[Problem] = unmatched_problems(unmatched) + refused
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
    for i, result in enumerate(scan_all(files, jobs, scan_timeout, executor, hint)):
        listed.append(storage.normalize(files[i]))
        why = unscannable(result) if skip_unreadable else None
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
        problems.append(Problem(Location(), "all-left-out",
                                f"every file was left out: none of the {len(left_out)} file(s) "
                                f"can be scanned (first: {left_out[0]['path']}: "
                                f"{left_out[0]['kind']} {left_out[0]['message']})"))
    plan = None
    notes: list[str] = [skipped_note(d, entries) for d, entries in skipped.items()]
    unknown = names(invs) if names is not None and invs else []
    problems.extend(unknown)
    # files that do not belong with the rest (a stray TIFF among netCDF files), named
    # whatever their order; the rest planned without them
    odd, apart = odd_files(invs)
    problems.extend(odd)
    # (their own problems too, which the planner would have reported)
    problems.extend(p for inv in invs if inv.path in apart for p in inv.problems)
    data = data_variables(invs)
    invs = [inv for inv in invs if inv.path not in apart]
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
            unsupported = sorted({p.loc.variable for p in problems if p.loc.variable})
            one = len(invs) == 1  # then the file is named
            problems.append(Problem(
                Location(invs[0].path) if one else Location(), "no-arrays",
                f"no variable of {'this file' if one else 'these files'} can be virtualized, "
                "so a cube would be empty"
                + (f" (skipped: {', '.join(unsupported)})" if unsupported else "")))
        # every zarr.json rendered as the write renders it (check and write agree)
        problems.extend(render_problems(plan))
        # a few stored chunks decoded through the cube's codecs, compared with the sources
        checked = decode_check(plan, invs, select=decode,
                               skip={(p.loc.file, p.loc.variable) for p in problems if p.fatal}
                               | {(f, None) for f in exclude})
        problems.extend(checked.problems)
        notes.extend(checked.notes)
    scanned = len(invs) + len(apart)
    if scanned + len(left_out) < len(files) and plan is not None:
        notes.append(f"{len(files) - scanned - len(left_out)} file(s) could not be scanned")
    if left_out:
        notes.insert(0, f"left out {len(left_out)} file(s) that cannot be scanned "
                        "(--skip-unreadable): " + ", ".join(
                            f"{os.path.basename(d['path'])} ({d['kind']})" for d in left_out[:5])
                     + (", ..." if len(left_out) > 5 else ""))
        if plan is not None:
            plan.left_out = left_out
    if len(listed) + len(left_out) != len(files):
        listed = [storage.normalize(f) for f in files]
    # files that are several datasets (two models, tables, grids): said, with how to build them
    several = dataset_split(invs) if any(p.fatal for p in problems) else None
    if several is not None:
        notes.insert(0, several.note())
    report = Report(files=listed, problems=problems, plan=plan, notes=notes,
                    bytes_read=bytes_read, requests=requests, left_out=left_out,
                    data_variables=data)
    report.datasets = several
    return report


def _alone(paths, jobs, scan_timeout, executor) -> str | None:
    """The file of a one-file job that `check_stack` runs whole in one bounded worker
    (`run_alone`), or None: not one file, a file scanned already (`reusing`), no time
    bound (`scan_timeout` 0: scanned here), on an executor, or an unknown `jobs`."""
    if not scan_timeout or executor is not None:
        return None
    if not isinstance(paths, (str, os.PathLike)):
        if not isinstance(paths, (list, tuple)) or len(paths) != 1:
            return None
    files = expand_paths(paths)
    if len(files) != 1 or (_SCANNED.get() or {}).get(storage.normalize(files[0])) is not None:
        return None
    try:
        if scan_jobs(jobs, files) > 1:
            return None
    except (TypeError, ValueError):
        return None
    return files[0]


def render_problems(plan: Plan) -> list[Problem]:
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


# files already scanned, by their normalized path (`reusing`): scan_all takes their results
_SCANNED: contextvars.ContextVar[Mapping[str, FileInventory | list[Problem]] | None] = \
    contextvars.ContextVar("scanned", default=None)


@contextlib.contextmanager
def reusing(results: Mapping[str, FileInventory | list[Problem]]):
    """Within it, `scan_all` takes a file's result from `results` (by its normalized path)
    instead of scanning it again: a job that scanned an archive's files once (`catalog`)
    plans and writes each dataset through the same steps (check, write, append) without
    a second scan. Each result must have been scanned as its planner plans (`ScanHint`)."""
    token = _SCANNED.set(results)
    try:
        yield
    finally:
        _SCANNED.reset(token)


def scan_all(files: list[str], jobs: int | str, scan_timeout: float | None,
              executor=None, hint: ScanHint | None = None
              ) -> Iterator[FileInventory | list[Problem]]:
    """Scan in file order: as tasks of `executor` when given, else with a time limit (or
    jobs > 1; 0: one per core; "auto": by the stack) in worker processes, each file within
    `scan_timeout` seconds (see run/workers.py and docs/scale.md). `hint`: how the files
    will be planned (the scan digests what that planner compares across files). A file
    scanned already (`reusing`) is not scanned again."""
    if scan_timeout is not None and scan_timeout < 0:
        raise ValueError(f"scan_timeout must be positive (or None / 0 for no limit), not {scan_timeout}")
    have = _SCANNED.get()
    if have:
        keys = [storage.normalize(f) for f in files]
        fresh = _scan_all([f for f, k in zip(files, keys) if k not in have], jobs,
                          scan_timeout, executor, hint)
        yield from (have[k] if k in have else next(fresh) for k in keys)
        return
    yield from _scan_all(files, jobs, scan_timeout, executor, hint)


def _scan_all(files: list[str], jobs: int | str, scan_timeout: float | None,
              executor=None, hint: ScanHint | None = None
              ) -> Iterator[FileInventory | list[Problem]]:
    if executor is not None:
        yield from scan_on(executor, files, scan_timeout or None, hint=hint)
        return
    jobs = scan_jobs(jobs, files)
    if not scan_timeout and jobs <= 1:
        yield from (scan_or_problems(f, hint) for f in files)
        return
    preload_format(files)
    yield from scan_bounded(files, scan_timeout or None, jobs, hint)


def preload_format(files: list[str]) -> None:
    """The library of the first local file's format imported here, before scan workers
    are forked: they inherit it, and the decode check that follows, which reads through
    the same library here, does not import it again (a one-file check of a GRIB, FITS or
    HDF4 file paid for ecCodes, astropy or pyhdf twice: in its worker and in itself)."""
    import importlib

    from ..formats import detect

    first = next((f for f in files if not storage.is_url(f)), None)
    try:
        fmt = detect(first) if first is not None and os.path.isfile(first) else None
        for module in fmt.modules if fmt is not None else ():
            importlib.import_module(module)
    except Exception:  # unreadable, or its library broken: the worker's scan reports it
        pass


def unknown_names(invs: list[FileInventory], recipe: Recipe) -> list[Problem]:
    """The recipe's --drop / --inline / --variables names no file has, and an axis no file
    has where a new axis makes no sense (some file has an unlimited dimension, or a
    dimension spelled almost alike): problems listing the names that exist."""
    import difflib

    # and those a scanner could not take (named by its problems: --drop is their remedy)
    variables = {n for inv in invs for n in inv.variables}
    variables |= {p.loc.variable for inv in invs for p in inv.problems if p.loc.variable}
    variables |= {n.rpartition("/")[2] for n in variables}
    dims = {d for inv in invs for v in inv.variables.values() for d in v.dims}
    dims |= {d.rpartition("/")[2] for inv in invs for d in inv.dimensions}  # unused ones too
    out = []
    for option, wanted in (("--drop", recipe.drop), ("--inline", recipe.inline)):
        for name in sorted(set(wanted) - variables):
            out.append(Problem(Location(None, name), "unknown-name",
                               f"{option} {name}: no file has a variable {name!r}; the variables "
                               f"are: {', '.join(sorted(variables)) or '(none)'}"))
    for name in unknown_variables(invs, recipe.variables or ()):
        out.append(Problem(Location(None, name), "unknown-name",
                           f"--variables {name}: no file has a variable {name!r}; the "
                           f"variables are: {', '.join(sorted(variables)) or '(none)'}"))
    for dim in (d for d in recipe.named_dims if d not in dims):
        unlimited = any(d.unlimited for inv in invs for d in inv.dimensions.values())
        close = difflib.get_close_matches(dim, sorted(dims), n=3, cutoff=0.6)
        if unlimited or close:
            out.append(Problem(Location(None, None, dim), "unknown-name",
                               f"--concat-dim {dim}: no file has a dimension "
                               f"{dim!r}; the dimensions are: {', '.join(sorted(dims))}"
                               + (f" (did you mean {close[0]!r}?)" if close else "")
                               + f"; a new axis takes each file's value from --coord "
                                 f"{dim}=attr:NAME, var:NAME, name:REGEX or v1,v2,..."))
    return out


def check_recipe(paths, recipe: Recipe, *, jobs: int | str = "auto", executor=None,
                 progress=None, scan_timeout: float | None = DEFAULT_SCAN_TIMEOUT,
                 skip_unreadable: bool = False, decode: str = "groups") -> Report:
    """`paths` checked as `recipe` plans them (`check_stack`; its --drop, --inline and
    axis names checked against the files first): the report of `check` and
    `check_mosaic`, of an output's stack planned again and of an append's rebuild. Its
    plan records the recipe (with each file's listed value of a new axis)."""
    planner, hint = recipe.planner(), recipe.hint()
    report = check_stack(paths, planner, progress, recipe.materialize_limit, jobs,
                         scan_timeout, decode=decode, executor=executor,
                         chunk_size=recipe.chunk_size, hint=hint,
                         names=lambda invs: unknown_names(invs, recipe),
                         skip_unreadable=skip_unreadable)
    if report.plan is not None:
        report.plan.recipe = recipe.record(report.files)
    return report


# -- writing, and what an output recorded -------------------------------------------------

def output_kind(out: PathLike, format: str | None, overwrite: bool, paths=None,
                relative: bool = False) -> str:
    """The output's kind; refuses early (before any scanning) an output named with a
    suffix of a format virtualize does not write (outputs/registry.py FOREIGN_SUFFIXES), one that exists
    without `overwrite`, that virtualize did not write, or that is, holds or sits in one
    of `paths` (when given as a path or a list: an iterator is checked at writing)."""
    out = storage.local_path(out)  # (file:///abs/x.zarr is /abs/x.zarr)
    remote = storage.is_url(out)
    if remote:
        storage.normalize(out)  # an unknown scheme is refused before anything is scanned
    out = os.fspath(out) if remote else Path(out)
    kind = _registry().kind_of(out, format)
    if relative:
        _registry().refuse_relative(kind)
    sources = expand_paths(paths) if isinstance(paths, (str, os.PathLike, list, tuple)) else []
    refuse_foreign(out, sources)  # a name that promises a format not written: usage
    if remote:
        from ..outputs.remote import guard_remote
        guard_remote(out, overwrite, sources)
    else:
        guard_output(out, overwrite, sources)  # before any scanning: fail fast, lose nothing
    return kind


def refuse_foreign(out: str | Path, sources: list[str]) -> None:
    """An output named with a suffix of a format virtualize does not write (a `.nc`, a
    `.tif`) is a usage error, whatever is there: a source given as the output
    (`output-is-source`), or a file that exists under that name (`output-exists`), is
    named as such, never offered --overwrite."""
    try:
        _registry().refuse_foreign(out)
    except UsageError as e:
        try:
            refuse_sources(out, sources)
        except UnsafeOutputError:
            kind, there = "output-is-source", "is one of the files given: a source is never " \
                "written over"
        else:
            if storage.is_url(str(out)) or not os.path.lexists(out):
                raise
            kind, there = "output-exists", "exists, and is left as it is"
        message = f"{e}; {out} {there}"
        raise UsageError(message, [Problem(Location(str(out)), kind, message)]) from None


def refuse_unless_ok(report: Report) -> None:
    if not report.ok:
        raise VirtualizeError([p for p in report.problems if p.fatal],
                              f"cannot virtualize: {sum(p.fatal for p in report.problems)} "
                              "problem(s); nothing was written", report=report)


def write_checked(report: Report, out: PathLike, kind: str, overwrite: bool,
                  relative: bool = False) -> Report:
    """Write a checked stack's plan to `out` (its `kind`: `output_kind`), locally or to
    object storage, through the kind's plug-in; refused (nothing written) unless the
    report is ok."""
    refuse_unless_ok(report)
    out = storage.local_path(out)
    plugin = _registry().by_name(kind)
    # every file named, scanned or not, is protected (the writers check their plan's too)
    if storage.is_url(out):  # object storage: built here, uploaded root documents last
        from ..outputs.remote import write_remote
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


def existing_output(cube: PathLike, what: str) -> tuple[Path, str]:
    """An output on this machine's file system (a file:// URL too; another URL is
    refused, not mangled into a local path) and its kind (outputs/registry.py `kind_at`:
    by what is there; nothing there reads as a cube directory, refused with its record)."""
    cube = storage.local_path(cube)
    if storage.is_url(str(cube)):
        raise VirtualizeError([Problem(Location(str(cube)), "remote-cube",
                                       f"{what} works on a cube on this machine's file system; "
                                       "copy the cube here first (virtualize.open reads it "
                                       "where it is)")], f"{cube}: {what} needs a local cube")
    return Path(cube), _registry().kind_at(cube, by_name=False)


def recorded(cube: Path, kind: str) -> dict:
    """What a cube recorded about how it was made: sources and recipe (a kerchunk JSON
    written by virtualize: its `virtualize` section)."""
    plugin = _registry().by_name(kind)
    info = plugin.recorded(cube)
    if not isinstance(info, dict) or not isinstance(info.get("sources"), list):
        gdal = f"; {plugin.foreign_hint}" if plugin.foreign_hint else ""
        raise VirtualizeError([Problem(Location(str(cube)), "not-a-cube",
                                       "not a cube directory, GDAL VRT, kerchunk JSON or "
                                       "parquet set, or Icechunk repository written by "
                                       f"virtualize{gdal}")])
    return info


def recipe_of(cube: Path, info: dict) -> Recipe:
    """The recipe `cube` recorded (`info`: `recorded`); refused when it records none."""
    recipe = Recipe.from_dict(info.get("recipe"))
    if recipe is None:
        raise VirtualizeError([Problem(Location(str(cube)), "not-appendable",
                                       "the cube records no recipe (written by an older "
                                       "virtualize): re-run virtualize with its files")])
    return recipe


def replan(cube: Path, info: dict, *, jobs: int | str = "auto", executor=None, progress=None,
           decode: str = "groups",
           scan_timeout: float | None = DEFAULT_SCAN_TIMEOUT, windows: bool = False) -> Report:
    """The cube's stack planned again from its recorded inputs and recipe (its plan
    keeps the record's recipe as it was written); `windows`: for an output kind that
    `reads_windows` (Recipe.windows)."""
    recipe = recipe_of(cube, info)
    if windows and recipe.kind == "mosaic":
        recipe = dataclasses.replace(recipe, windows=True)
    inputs = [s["path"] for s in info["sources"] if not s.get("referenced_by")]
    report = check_recipe(inputs, recipe, jobs=jobs, executor=executor, progress=progress,
                          scan_timeout=scan_timeout, decode=decode)
    if report.plan is not None:
        report.plan.recipe = dict(info["recipe"])
    return report
