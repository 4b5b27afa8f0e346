"""What is done with an existing output: `export` (as another kind), `verify_cube`
(staleness, the decode check, `--refresh`), `open`. What it recorded, and its stack
planned again from its record, are shared steps (steps.py)."""

from __future__ import annotations

from pathlib import Path

import zarr

from .. import storage
from ..model import Location, Plan, Problem, VirtualizeError
from ..open import open_cube
from ..outputs import registry
from ..outputs.staleness import check_sources
from ..report import Report
from .steps import (
    DEFAULT_SCAN_TIMEOUT,
    PathLike,
    existing_output,
    output_kind,
    recorded,
    replan,
    set_storage,
    write_checked,
)


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
    from ..outputs.staging import locked

    cube, kind = existing_output(cube, "verify")
    with locked(cube) if refresh else _nothing():  # (an append waits, as for appends)
        info = recorded(cube, kind)
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
            report = replan(cube, info, jobs=jobs, executor=executor, progress=progress,
                            decode="sources", scan_timeout=scan_timeout,
                            windows=registry.by_name(kind).reads_windows)
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

    def planned_again() -> Report:
        return replan(cube, info, jobs=jobs, executor=executor, progress=progress,
                      decode="sources" if decode else "groups", scan_timeout=scan_timeout)
    report = registry.by_name(kind).refresh(cube, info, times, planned_again)
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
    cube, have = existing_output(cube, "export")
    info = recorded(cube, have)
    _refuse_stale(cube, info, strict)
    kind = output_kind(out, format, overwrite,
                       [s["path"] for s in info["sources"] if not s.get("referenced_by")],
                       relative)
    return write_checked(replan(cube, info, jobs=jobs, executor=executor, progress=progress,
                                scan_timeout=scan_timeout,
                                windows=registry.by_name(kind).reads_windows),
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
    set_storage(storage_options)
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
