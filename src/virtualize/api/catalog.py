"""`catalog`: an archive's trees into one cube per dataset and an intake-esm catalog of
them, kept current by re-runs (docs/catalog.md).

The files are found by walking the roots (`archive.py`), grouped into datasets by a path
template or by what they hold (`plan/datasets.py`), compared with the catalog's record
(`catalog_record.py`) to decide what each dataset needs (built, appended, rebuilt,
unchanged), scanned once, in one pass over every file that needs it (in worker processes
or on an executor), and each dataset planned and written through the steps every job
uses (`steps.check_recipe`, `steps.write_checked`, `append`) as soon as its files are
scanned, its inventories then released. A dataset that cannot be built is a row of the
report with its problems, never a stop.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .. import storage
from ..model import FileInventory, Location, Problem, UsageError, VirtualizeError
from ..outputs import registry
from ..outputs.staging import recovered
from ..plan import datasets as groups
from ..plan.datasets import Dataset
from ..report.catalog import CatalogReport, DatasetOutcome, Spooled
from ..run.policy import check_jobs
from . import catalog_record as records
from .appending import append
from .archive import Entry, Listed, Listing, walk
from .catalog_record import CatalogRecord, DatasetRecord
from .recipe import Recipe
from .steps import (
    DATA_SUFFIXES,
    DEFAULT_SCAN_TIMEOUT,
    PathLike,
    check_recipe,
    reusing,
    scan_all,
    set_storage,
    write_checked,
)

KINDS = ("cube", "kerchunk", "parquet", "icechunk")  # what a catalog's datasets are written as
LOCK = ".virtualize-catalog.lock"
# a full garbage collection every this many datasets: a dataset's plan and check leave
# reference cycles, which Python's own schedule leaves for long once the heap is large
GC_EVERY = 64


@dataclass(slots=True)  # (one a dataset, all alive until they are run)
class _Job:
    """One dataset's work this run: `action` "build", "rebuild", "append", "unchanged",
    "refused" (unchanged since it was refused); the files to scan for it (`scan`: rows of
    the listing), the new files of an append, why (in words)."""

    ds: Dataset
    action: str
    scan: Sequence[int] = ()  # (rows of the listing)
    new: list[str] = field(default_factory=list)
    why: str = ""
    prev: DatasetRecord | None = None
    why_not: str = ""  # why an append was refused (then built again)


def catalog(roots: Iterable[PathLike] | PathLike, out: PathLike, *, drs: str | None = None,
            path_template: str | None = None, group_by: Sequence[str] | None = None,
            concat_dims: Sequence[str] | None = None, all_versions: bool = False,
            format: str | None = None, overwrite: bool = False, jobs: int | str = "auto",
            executor=None, progress=None, scan_timeout: float | None = DEFAULT_SCAN_TIMEOUT,
            storage_options: dict | None = None, skip_unreadable: bool = False,
            **recipe_options) -> CatalogReport:
    """Every dataset under `roots` (local directories, or s3:// / http(s):// prefixes)
    as one cube under `out` (a local directory), plus an intake-esm catalog of them
    (`out/catalog.json` + `catalog.csv`: `intake.open_esm_datastore(...)
    .to_dataset_dict()` opens every cube). Returns a `CatalogReport` (what each dataset
    became); refused datasets are rows of it, not errors.

    Datasets: by a path template (`drs` "cmip6", "cmip5" or "cordex": their data reference
    syntax, found at any depth under a root; or `path_template`, e.g.
    "{source_id}/{experiment_id}/{member_id}/{variable_id}/*.nc"), the latest `version`
    only unless `all_versions`; without one, by what the files hold (`group_by`: global
    attributes, default those that identify a CMIP / CORDEX dataset, plus the data
    variables). `concat_dims=["member"]`: the members of a dataset (the template's
    member facet, or the member attribute) stacked along a new axis `member` (labelled by
    them) before time, instead of one dataset each. `format`: "cube" (default),
    "kerchunk", "parquet" or "icechunk". Other keyword arguments: the recipe of every
    dataset, as for `virtualize` (`drop`, `join`, `combine_attrs`, `chunk_size`, ...).

    Re-run over a grown tree, it appends new files to the cubes they extend, builds new
    datasets, rebuilds what changed (a new version, a file changed or gone), and skips
    what did not (its record, `out/virtualize-catalog.json`). `jobs`, `executor`,
    `scan_timeout`, `skip_unreadable`, `storage_options`: as for `check`; each file is
    scanned once, and each dataset planned and written as soon as its files are."""
    set_storage(storage_options)
    check_jobs(jobs, executor)
    roots = [os.fspath(r) for r in ([roots] if isinstance(roots, (str, os.PathLike)) else roots)]
    if not roots:
        raise UsageError("catalog: give at least one ROOT (a directory or URL prefix)")
    out = _out_dir(out)
    try:
        tpl = groups.template(drs, path_template)
    except ValueError as e:
        raise UsageError(str(e)) from None
    fmt = format or registry.default().name
    if fmt not in KINDS:
        raise UsageError(f"catalog: --format {fmt}: one of {', '.join(KINDS)}")
    registry.kind_of(out / f"x{_suffix(fmt)}", fmt)  # (a missing package: refused now)
    member = _member_dim(concat_dims)
    base = Recipe.from_options("concat", concat_dims=[member, "time"] if member else None,
                               coords={member: "attr:_"} if member else None,
                               **recipe_options)  # (checked before anything is walked)
    grouping = {"drs": drs.lower() if drs else None, "path_template": path_template,
                "group_by": list(group_by) if group_by else None, "stack_members": bool(member),
                "all_versions": all_versions}
    if executor is None and (scan_timeout or jobs != 1):  # (forked now, before the record
        # is read and the archive walked: the scan workers hold neither)
        from ..run.workers import start as start_workers
        start_workers(jobs if isinstance(jobs, int) and jobs > 0 else os.cpu_count() or 1)
    prev = _previous(out, grouping, fmt, overwrite)
    out.mkdir(parents=True, exist_ok=True)
    with _locked(out):  # (two runs of a cron job: the second waits)
        return _catalog(roots, out, tpl, grouping, fmt, prev, base, member,
                        jobs=jobs, executor=executor, progress=progress,
                        scan_timeout=scan_timeout, skip_unreadable=skip_unreadable,
                        recipe_options=recipe_options)


@contextlib.contextmanager
def _locked(out: Path):
    """The catalog's lock: a POSIX record lock on OUT/.virtualize-catalog.lock, which the
    scan workers a fork makes while it is held do not hold (an flock would stay held by
    them, and the next run in this process would wait for ever)."""
    import fcntl

    fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _out_dir(out: PathLike) -> Path:
    out = storage.local_path(out)
    if storage.is_url(os.fspath(out)):
        raise UsageError(f"catalog: -o {out}: the catalog is written to a local directory "
                         "(its datasets' sources may be remote)")
    out = Path(os.path.abspath(out))
    if out.exists() and not out.is_dir():
        raise UsageError(f"catalog: -o {out}: not a directory")
    return out


def _suffix(kind: str) -> str:
    return next(s for s in registry.by_name(kind).suffixes if s)


def _member_dim(concat_dims: Sequence[str] | None) -> str | None:
    dims = [d for d in (concat_dims or ()) if d]
    if not dims:
        return None
    if len(dims) > 2 or len(dims) == 2 and dims[1] != "time":
        raise UsageError(f"catalog: --concat-dim {' --concat-dim '.join(dims)}: a catalog "
                         "stacks one new axis of members before time (--concat-dim member)")
    return dims[0]


def _previous(out: Path, grouping: dict, fmt: str, overwrite: bool) -> CatalogRecord | None:
    """The record of the catalog at `out`: None for a new one. Refused: a directory that
    holds other things, and a catalog grouped otherwise or of another kind (unless
    `overwrite`: then its datasets are all built again)."""
    try:
        prev = records.load(out)
    except ValueError as e:
        raise VirtualizeError([Problem(Location(str(out)), "not-a-catalog", str(e))],
                              str(e)) from None
    if prev is None:
        if out.is_dir() and any(not n.startswith(".") for n in os.listdir(out)) and not overwrite:
            raise VirtualizeError([Problem(Location(str(out)), "output-exists",
                                           "exists and holds no catalog virtualize wrote; "
                                           "give an empty or new directory (or --overwrite: "
                                           "outputs virtualize wrote there may be replaced)")])
        return None
    same = {k: prev.grouping.get(k) for k in grouping} == grouping and prev.format == fmt
    if not same and not overwrite:
        was = ", ".join(f"{k}={v}" for k, v in prev.grouping.items() if v) + f", format={prev.format}"
        raise UsageError(f"catalog: {out} was made with {was}; give the same grouping and "
                         "format to update it, or --overwrite to build it again")
    return prev if same else None


def _catalog(roots, out: Path, tpl, grouping, fmt, prev, base: Recipe, member, *, jobs,
             executor, progress, scan_timeout, skip_unreadable, recipe_options) -> CatalogReport:
    report = CatalogReport(roots=roots, out=str(out))
    listing, report.problems = walk(roots, None if tpl else DATA_SUFFIXES, skip=[out])
    if report.problems and not len(listing):
        raise VirtualizeError(report.problems, "catalog: no root could be walked; nothing written")
    report.files = len(listing)
    hint = base.hint()
    scanned: dict[str, FileInventory | list[Problem]] = {}
    content: dict[str, list] = {}
    if tpl is not None:
        found = groups.group_paths(listing, tpl, stack_members=bool(member),
                                   all_versions=grouping["all_versions"])
        report.grouping = f"the path template {tpl.name or tpl.text}"
        name_facets = [f for f in tpl.facets if f != (tpl.member if member else None)
                       and (grouping["all_versions"] or f != tpl.version)]
        order = list(tpl.facets)
    else:
        found, content = _by_content(listing, prev, grouping, bool(member), scanned, jobs,
                                     executor, scan_timeout, hint, progress, report)
        attrs = grouping["group_by"] or groups.DATASET_ATTRS
        report.grouping = "what the files hold (" + ", ".join(grouping["group_by"] or ["the "
                          "attributes that identify a dataset", "variables"]) + ")"
        order = [*attrs, groups.VARIABLES, groups.GRID]
        name_facets = groups.name_order({k for d in found.datasets for k in d.facets})
    report.left_out.update(found.left_out)
    record = CatalogRecord(grouping, fmt, content=content)
    # (by name: each dataset's record is added to the record's spool as it is done)
    jobs_ = sorted((_decide(ds, listing, prev, out) for ds in found.datasets),
                   key=lambda j: j.ds.name)
    if prev is not None:  # datasets whose files are all gone
        now = {ds.name for ds in found.datasets}
        for name, rec in sorted(prev.datasets.items()):
            if name not in now:
                report.datasets.append(DatasetOutcome(
                    name, "removed", rec.facets, len(rec.files), len(rec.members or ()),
                    str(out / rec.path) if rec.path else None, rec.kind,
                    "no file of it is in the archive now; its output is left in place"))
        prev.datasets.clear()  # (what a dataset needs is decided: its record is in its job)
    # every file to scan, dataset by dataset (each planned when its files are scanned), as
    # rows of the listing: one pass of the workers over the archive, no string a file held
    queue = groups.Rows(listing, (i for j in jobs_ for i in j.scan))  # (no int a file)
    report.scanned += sum(p not in scanned for p in queue) if scanned else len(queue)
    results = _scanned(queue, scanned, jobs, executor, scan_timeout, hint, progress)
    found.datasets = []  # (each in its job, which is dropped once the dataset is done)
    outcomes = Spooled()  # (each dataset's outcome and record kept on disk when done)
    with recovered(out):  # (a killed run's leftovers in OUT cleaned up once, not per cube)
        for k in range(len(jobs_)):
            if k % GC_EVERY == GC_EVERY - 1:
                gc.collect()  # (each dataset's check leaves cycles: not left to pile up)
            job, jobs_[k] = jobs_[k], None
            mine = {listing[i]: next(results) for i in job.scan}
            outcome, rec = _run(job, mine, out, fmt, member, recipe_options, listing,
                                by_template=tpl is not None, jobs=jobs, executor=executor,
                                scan_timeout=scan_timeout, skip_unreadable=skip_unreadable)
            outcomes.append(outcome)
            record.add(rec)
            for p in mine:  # (released as we go)
                scanned.pop(p, None)
            del job, mine, outcome, rec
    outcomes.extend(report.datasets)  # (then those removed)
    report.datasets = outcomes
    records.save(out, record)
    report.catalog = str(records.write_catalog(
        out, record, order, name_facets,
        f"datasets of {', '.join(roots)} by {report.grouping}, written by virtualize"))
    return report


def _by_content(listing: Listing, prev, grouping, stack_members: bool, scanned: dict,
                jobs, executor, scan_timeout, hint, progress, report):
    """Datasets by what the files hold: each file's facets from the record when it is
    unchanged, else from its scan (kept in `scanned`, for planning)."""
    attrs = grouping["group_by"] or groups.DATASET_ATTRS
    known = prev.content if prev is not None else {}
    items, content, todo = [], {}, []
    for i, path in enumerate(listing):
        was = known.get(path)
        if was is not None and Entry(path, was[0], was[1], was[2]).key() == listing.key(i):
            items.append((path, dict(was[3]), was[4]))
            content[path] = was
        else:
            todo.append(i)
    left_out: dict[str, str] = {}
    paths = groups.Rows(listing, todo)
    for i, path, result in zip(todo, paths, _scanned(paths, {}, jobs, executor, scan_timeout,
                                                     hint, progress)):
        scanned[path] = result
        if not isinstance(result, FileInventory):
            first = next((p for p in result if p.fatal), result[0] if result else None)
            left_out[path] = (f"cannot be scanned ({first.kind}: {first.message})" if first
                              else "cannot be scanned")
            continue
        facets = groups.content_facets(result, attrs, stack_members=stack_members)
        label = groups.member_label(result)
        member = str(groups.global_attrs(result)[label]) if label else None
        items.append((path, facets, member))
        content[path] = [listing.sizes[i], listing.mtimes[i], listing.etag(i), facets, member]
    report.scanned += len(todo)
    found = groups.Grouping(groups.group_facets(items, stack_members), left_out)
    rows = {path: i for i, path in enumerate(listing)}  # (its datasets as rows of the listing)
    for ds in found.datasets:
        ds.files = groups.Rows(listing, [rows[p] for p in ds.files])
    return found, content


def _scanned(paths: Sequence[str], have: dict, jobs, executor, scan_timeout, hint, progress
             ) -> Iterator[FileInventory | list[Problem]]:
    """Each of `paths` scanned (or taken from `have`), in order; `progress` called per file."""
    fresh = scan_all(groups.Rows(paths, [i for i, p in enumerate(paths) if p not in have])
                     if have else paths, jobs, scan_timeout, executor, hint)
    for i, p in enumerate(paths):
        result = have[p] if p in have else next(fresh)
        if progress is not None:
            progress(i + 1, len(paths), result if isinstance(result, FileInventory) else None)
        yield result


def _decide(ds: Dataset, listing: Listing, prev: CatalogRecord | None, out: Path) -> _Job:
    """What the dataset needs this run, against what the record says it was built from."""
    rec = prev.datasets.get(ds.name) if prev is not None else None
    rows = ds.files.rows
    if rec is None:
        return _Job(ds, "build", rows)
    was = {f[0]: Entry(*f).key() for f in rec.files}
    rec.files = ()  # (compared: not held for the rest of the run)
    now = {listing[i]: i for i in rows}
    changed = [p for p in was if p in now and was[p] != listing.key(now[p])]
    gone = [p for p in was if p not in now]
    new = [p for p in now if p not in was]
    exists = rec.path is not None and os.path.lexists(out / rec.path)
    if not changed and not gone and not new:
        if rec.status == "refused":
            return _Job(ds, "refused", why="refused before; its files are unchanged", prev=rec)
        if exists:
            return _Job(ds, "unchanged", prev=rec)
        return _Job(ds, "rebuild", rows, why="its output was missing", prev=rec)
    if rec.version is not None and ds.version is not None and rec.version != ds.version:
        why = f"version {ds.version} supersedes {rec.version}"
    elif changed or gone:
        what = [f"{len(changed)} file(s) changed"] if changed else []
        what += [f"{len(gone)} file(s) gone"] if gone else []
        why = ", ".join(what) + (f", {len(new)} new" if new else "")
    elif rec.status == "refused":
        why = f"refused before; {len(new)} new file(s)"
    elif not exists:
        why = "its output was missing"
    else:
        return _Job(ds, "append", [now[p] for p in new], new, f"{len(new)} new file(s)", rec)
    return _Job(ds, "rebuild", rows, why=why, prev=rec)


def _coords(ds: Dataset, member: str | None, invs: list, by_path: bool) -> dict | None:
    """A member-stacked dataset's member labels: the template's member facet of each file
    (`by_path`), or the member attribute the files have."""
    if member is None:
        return None
    if by_path:
        return {member: list(ds.members or ())}
    label = next((groups.member_label(i) for i in invs if isinstance(i, FileInventory)), None)
    return {member: f"attr:{label}"} if label else {member: list(ds.members or ())}


def _dims(member: str | None, invs: list) -> list[str] | None:
    if member is None:
        return None
    timed = any("time" in i.dimensions or any("time" in v.dims for v in i.variables.values())
                for i in invs if isinstance(i, FileInventory))
    return [member, "time"] if timed else [member]


def _run(job: _Job, results: dict, out: Path, fmt: str, member, recipe_options,
         listing: Listing, *, by_template: bool, jobs, executor, scan_timeout, skip_unreadable
         ) -> tuple[DatasetOutcome, DatasetRecord]:
    """Do the dataset's job: (its outcome for the report, its record)."""
    ds = job.ds
    paths = list(ds.files)
    facets = ds.facets  # (shared with the dataset, the outcome and the record)
    labels = ds.member_labels
    if member and labels:
        key = _member_facet(ds)
        if key:
            facets = {**facets, key: " ".join(labels)}
    dest = out / f"{ds.name}{_suffix(fmt)}"
    files = Listed(listing, ds.files.rows)  # (packed as the record is written)
    outcome = DatasetOutcome(ds.name, "unchanged", facets, len(paths), len(labels),
                             str(dest), fmt, job.why)
    rec = DatasetRecord(ds.name, "built", facets, files, dest.name, fmt,
                        ds.members, ds.version)
    if job.action in ("unchanged", "refused"):
        prev = job.prev
        rec.status, rec.problems, rec.variables = prev.status, prev.problems, prev.variables
        rec.path, rec.kind, rec.regular = prev.path, prev.kind, prev.regular
        outcome.status = job.action
        outcome.problems = prev.refusal()
        return outcome, rec
    invs = list(results.values())
    coords = _coords(ds, member, invs, by_template)
    try:
        with reusing(results):
            if job.action == "append":
                report = _append(job, out, coords, member, jobs=jobs, executor=executor,
                                 scan_timeout=scan_timeout, skip_unreadable=skip_unreadable)
                if report is None:  # (refused as an append: built again whole)
                    job.action, job.why = "rebuild", f"{job.why}; not an append ({job.why_not})"
            if job.action != "append":
                recipe = Recipe.from_options("concat", concat_dims=_dims(member, invs),
                                             coords=coords, **recipe_options)
                # (the kind only: the output is guarded as it is written, write_checked)
                kind = registry.kind_of(dest, fmt)
                report = check_recipe(paths, recipe, jobs=jobs, executor=executor,
                                      scan_timeout=scan_timeout, skip_unreadable=skip_unreadable)
                if report.ok:
                    write_checked(report, dest, kind, True)
    except VirtualizeError as e:
        report = e.report
        problems = list(e.problems)
        if report is None or report.ok:
            return _refused(outcome, rec, problems)
    if not report.ok:
        return _refused(outcome, rec, [p for p in report.problems if p.fatal])
    outcome.status = {"build": "built", "rebuild": "rebuilt", "append": "appended"}[job.action]
    outcome.why = job.why
    rec.variables = _data_variables(report.plan)
    rec.regular = _regular(report.plan)
    if report.left_out:
        outcome.why += ("; " if outcome.why else "") + \
            f"{len(report.left_out)} file(s) left out, cannot be scanned"
    return outcome, rec


def _member_facet(ds: Dataset) -> str | None:
    return next((k for k in (*groups.MEMBER_FACETS, *groups.MEMBER_LABELS) if k not in ds.facets),
                None)


def _append(job: _Job, out: Path, coords, member, *, jobs, executor, scan_timeout,
            skip_unreadable):
    """The dataset's new files appended to its output (`append`); None when the output
    cannot grow so (the new files do not come after it, ...): then it is built again."""
    cube = out / job.prev.path
    new_coords = None
    if member and coords and isinstance(coords.get(member), list):
        members = dict(zip(list(job.ds.files), job.ds.members or ()))
        new_coords = {member: [members[p] for p in job.new]}
    try:
        return append(cube, job.new, jobs=jobs, executor=executor, scan_timeout=scan_timeout,
                      skip_unreadable=skip_unreadable, coords=new_coords)
    except VirtualizeError as e:
        job.why_not = "; ".join(f"{p.kind}: {p.message}" for p in e.problems[:1]) or str(e)
        return None


def _refused(outcome: DatasetOutcome, rec: DatasetRecord, problems: list[Problem]):
    outcome.status = "refused"
    outcome.problems = problems or [Problem(Location(), "refused", "refused")]
    rec.status = "refused"
    rec.problems = [p.to_dict() for p in outcome.problems[:50]]
    return outcome, rec


def _regular(plan) -> bool:
    """Whether every array's chunk grid is regular (plain zarr reads it)."""
    from ..outputs.metadata import chunk_grid

    return plan is not None and all(chunk_grid(a)["name"] == "regular"
                                    for a in plan.arrays.values())


def _data_variables(plan) -> list[str]:
    if plan is None:
        return []
    dims = {d for a in plan.arrays.values() for d in a.dims}
    return sorted(n for n, a in plan.arrays.items() if n not in dims and a.dims
                  and not n.endswith(("_bnds", "_bounds")))
