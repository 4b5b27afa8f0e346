"""The Python API: scan → plan → emit, with every problem collected."""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import zarr

from .emit import write_cube, write_kerchunk
from .emit._staging import guard_output
from .emit.cube import SOURCES_NAME
from .emit.metadata import array_doc, group_doc, omitted_attrs
from .model import FileInventory, Location, Plan, Problem, VirtualizeError
from .plan import ConcatOptions, MosaicOptions, plan_concat, plan_mosaic
from .plan._common import DEFAULT_INLINE_THRESHOLD
from .read import changed_sources, open_cube
from .report import Report
from .scan import scan as _scan
from .scan._worker import scan_bounded, scan_or_problems
from .verify import decode_check

PathLike = str | os.PathLike
Planner = Callable[[list[FileInventory]], tuple[Plan, list[Problem]]]
# Seconds one file's scan may take before it is stopped and reported (`scan-timeout`).
DEFAULT_SCAN_TIMEOUT = 60.0


def scan(path: PathLike) -> FileInventory:
    """One file's inventory: variables, dimensions, block tables. Reads no data but
    small coordinate variables. A kerchunk reference set's block tables point into the
    data files it names (`data_files`). Raises `VirtualizeError` for unreadable files."""
    return _scan(path)


def check(paths: Iterable[PathLike] | PathLike, concat_dim: str | None = None, *,
          inline: Iterable[str] = (), drop: Iterable[str] = (), sort: bool = True,
          split: bool = True, materialize: bool = False, materialize_limit: int | None = None,
          jobs: int = 1, progress=None, scan_timeout: float | None = DEFAULT_SCAN_TIMEOUT,
          inline_threshold: int = DEFAULT_INLINE_THRESHOLD) -> Report:
    """Can this stack be virtualized (concatenated along `concat_dim`)? Scans every file
    and plans the cube, collecting every problem of every file. Writes nothing.

    Remedies: `split` (default on) trims padded uncompressed blocks to their valid rows;
    `materialize` copies blocks that cannot be referenced into the cube (at most
    `materialize_limit` bytes). Each file is scanned in a worker process within
    `scan_timeout` seconds (None or 0: in this process, no limit). Variables that cannot be
    referenced are inlined when they take at most `inline_threshold` decoded bytes per
    file (0: refused instead)."""
    opts = ConcatOptions(concat_dim=concat_dim, inline=frozenset(_names(inline)),
                         drop=frozenset(_names(drop)), sort=sort, split=split,
                         materialize=materialize, inline_threshold=inline_threshold)
    recipe = {"kind": "concat", "concat_dim": concat_dim, "inline": sorted(opts.inline),
              "drop": sorted(opts.drop), "sort": sort, "split": split,
              "materialize": materialize, "materialize_limit": materialize_limit,
              "inline_threshold": inline_threshold}
    report = _check(paths, lambda invs: plan_concat(invs, opts), progress, materialize_limit, jobs,
                    scan_timeout)
    if report.plan is not None:
        report.plan.recipe = recipe
    return report


def check_mosaic(paths: Iterable[PathLike] | PathLike, *,
                 offsets: Sequence[tuple[int, int]] | None = None, overlap: str | None = None,
                 drop: Iterable[str] = (), tolerance: float = 1e-3, split: bool = True,
                 materialize: bool = False, materialize_limit: int | None = None,
                 jobs: int = 1, progress=None,
                 scan_timeout: float | None = DEFAULT_SCAN_TIMEOUT) -> Report:
    """Can these tiles be placed into one mosaic? By georeferencing (GeoTIFF transform,
    or 1-D x/y / lon/lat coordinates), or by explicit `offsets` [(row, col), ...] in pixels.
    `overlap`: None (overlaps are problems), "last" or "first" (which tile wins).
    Remedies as in `check`: `split` cuts uncompressed blocks into row ranges, `materialize`
    copies cells no block fits."""
    opts = MosaicOptions(offsets=offsets, overlap=overlap, tolerance=tolerance,
                         drop=frozenset(_names(drop)), split=split, materialize=materialize)
    report = _check(paths, lambda invs: plan_mosaic(invs, opts), progress, materialize_limit, jobs,
                    scan_timeout)
    if report.plan is not None:
        report.plan.recipe = {"kind": "mosaic", "overlap": overlap, "tolerance": tolerance,
                              "offsets": [list(o) for o in offsets] if offsets else None,
                              "drop": sorted(opts.drop), "split": split,
                              "materialize": materialize}
    return report


def virtualize(paths: Iterable[PathLike] | PathLike, out: PathLike, concat_dim: str | None = None,
               *, overwrite: bool = False, inline: Iterable[str] = (), drop: Iterable[str] = (),
               sort: bool = True, split: bool = True, materialize: bool = False,
               materialize_limit: int | None = None, format: str | None = None,
               jobs: int = 1, progress=None,
               scan_timeout: float | None = DEFAULT_SCAN_TIMEOUT,
               inline_threshold: int = DEFAULT_INLINE_THRESHOLD) -> Report:
    """Virtualize a stack into `out`: a cube directory, a kerchunk reference JSON
    (`format="kerchunk"` or `out` ending in `.json`) or an Icechunk repository
    (`format="icechunk"` or `.icechunk`). Nothing is written unless every file
    can be referenced exactly; then `VirtualizeError` carries every problem."""
    kind = _output_kind(out, format, overwrite, paths)
    report = check(paths, concat_dim, inline=inline, drop=drop, sort=sort, split=split,
                   materialize=materialize, materialize_limit=materialize_limit,
                   jobs=jobs, progress=progress, scan_timeout=scan_timeout,
                   inline_threshold=inline_threshold)
    return _write(report, out, kind, overwrite)


def mosaic(paths: Iterable[PathLike] | PathLike, out: PathLike, *,
           offsets: Sequence[tuple[int, int]] | None = None, overlap: str | None = None,
           drop: Iterable[str] = (), tolerance: float = 1e-3, split: bool = True,
           materialize: bool = False, materialize_limit: int | None = None,
           overwrite: bool = False, format: str | None = None, jobs: int = 1,
           progress=None, scan_timeout: float | None = DEFAULT_SCAN_TIMEOUT) -> Report:
    """Place tiles into one mosaic cube at `out` (see `check_mosaic`); nothing is written
    unless every cell is exactly one block of one tile or a gap."""
    kind = _output_kind(out, format, overwrite, paths)
    report = check_mosaic(paths, offsets=offsets, overlap=overlap, drop=drop,
                          tolerance=tolerance, split=split, materialize=materialize,
                          materialize_limit=materialize_limit, jobs=jobs, progress=progress,
                          scan_timeout=scan_timeout)
    return _write(report, out, kind, overwrite)


def append(cube: PathLike, paths: Iterable[PathLike] | PathLike, *, jobs: int = 1,
           progress=None, scan_timeout: float | None = DEFAULT_SCAN_TIMEOUT) -> Report:
    """Add files to the end of a cube directory or Icechunk repository written by
    `virtualize`: the grown stack is planned as the cube was (its recorded recipe) and
    checked whole; a cube directory is replaced in one rename when complete, an Icechunk
    repository gets a new commit. Refused (nothing changed) when a source of the cube
    changed, a file is already in it, or a new file does not come after its last step."""
    cube = Path(cube)
    from .emit.icechunk import is_icechunk_repo

    icechunk = is_icechunk_repo(cube)
    info = _recorded(cube, icechunk)
    recipe = dict(info.get("recipe") or {})
    if recipe.get("kind") != "concat":
        raise VirtualizeError([Problem(Location(str(cube)), "not-appendable",
                                       "this cube was not made by concatenation (or by an older "
                                       "virtualize): re-run virtualize with all the files")])
    changed = list(changed_sources(info["sources"]))
    if changed:
        raise VirtualizeError(changed, f"{cube}: its sources changed since it was written")
    # the files given (data files found through reference sets are not inputs)
    old = [s["path"] for s in info["sources"] if not s.get("referenced_by")]
    empty: list[str] = []
    new = [os.path.abspath(p) for p in _paths(paths, empty)]
    if not new:
        raise VirtualizeError([Problem(Location(os.path.abspath(d)), "no-files",
                                       f"the directory {d} holds no files") for d in empty]
                              or [Problem(Location(), "no-files", "no files to append were given")],
                              "nothing appended")
    twice = [Problem(Location(p), "already-in-cube", f"{p} is already a source of {cube}")
             for p in new if p in old]
    if twice:
        raise VirtualizeError(twice, "nothing appended")
    recipe.pop("kind")
    report = check(old + new, jobs=jobs, progress=progress, scan_timeout=scan_timeout, **recipe)
    if report.plan is not None and \
            [s.path for s in report.plan.sources if not s.referenced_by][: len(old)] != old:
        report.problems.append(Problem(
            Location(str(cube)), "append-not-at-end",
            f"the new files do not all come after the cube's last {report.plan.concat_dim!r} step; "
            "to put them in the middle, re-run virtualize with all the files"))
    if icechunk:
        _refuse_unless_ok(report)
        from .emit.icechunk import append_icechunk
        append_icechunk(report.plan, cube, added=len(new))
        return report
    return _write(report, cube, "cube", overwrite=True)


def _recorded(cube: Path, icechunk: bool) -> dict:
    """What a cube recorded about how it was made: sources and recipe."""
    if icechunk:
        from .emit.icechunk import recorded
        info = recorded(cube)
    else:
        path = cube / SOURCES_NAME
        info = json.loads(path.read_text()) if path.is_file() else None
    if not info:
        raise VirtualizeError([Problem(Location(str(cube)), "not-a-cube",
                                       "not a cube directory or Icechunk repository written by "
                                       "virtualize")])
    return info


def open(path: PathLike, *, check_sources: bool = True, allow=None) -> zarr.Group:  # noqa: A001
    """A cube (directory, kerchunk JSON or Icechunk repository) as a read-only zarr
    group. Rectilinear grids
    are enabled for the open only; the caller's zarr config is left as it was.

    The reader follows only references inside the roots recorded when the cube was
    written (its sources' directories) or in `allow` (paths, or URL prefixes such as
    "s3://bucket/"): docs/reading.md, Confinement."""
    return open_cube(path, check_sources=check_sources, allow=allow)


# -- the shared steps ------------------------------------------------------------------

def _check(paths, planner: Planner, progress, materialize_limit: int | None = None,
           jobs: int = 1, scan_timeout: float | None = DEFAULT_SCAN_TIMEOUT) -> Report:
    empty: list[str] = []
    files = _paths(paths, empty)
    problems: list[Problem] = []
    invs: list[FileInventory] = []
    bytes_read: dict[str, int] = {}
    for d in empty:
        problems.append(Problem(Location(os.path.abspath(d)), "no-files",
                                f"the directory {d} holds no files (hidden files and "
                                "subdirectories are not read)", fatal=not files))
    if not files and not empty:
        problems.append(Problem(Location(), "no-files", "no input files were given"))
    for i, result in enumerate(_scan_all(files, jobs, scan_timeout)):
        if isinstance(result, FileInventory):
            invs.append(result)
            bytes_read[result.path] = result.bytes_read
        else:
            problems.extend(result)
        if progress is not None:
            progress(i + 1, len(files), result if isinstance(result, FileInventory) else None)
    plan = None
    notes: list[str] = []
    if invs:
        plan, plan_problems = planner(invs)
        problems.extend(plan_problems)
        notes = list(plan.notes)
        copied = plan.remedies.get("materialize")
        if copied and materialize_limit is not None and copied.bytes > materialize_limit:
            problems.append(Problem(Location(), "materialize-limit",
                                    f"the plan would copy {copied.bytes} bytes in {copied.blocks} "
                                    f"block(s), more than the limit of {materialize_limit}"))
        # every zarr.json rendered as the write renders it (check and write agree)
        problems.extend(_render_problems(plan))
        # a few stored chunks decoded through the cube's codecs, compared with the sources
        checked = decode_check(plan, invs, skip={(p.loc.file, p.loc.variable)
                                                 for p in problems if p.fatal})
        problems.extend(checked.problems)
        notes.extend(checked.notes)
    if len(invs) < len(files) and plan is not None:
        notes.append(f"{len(files) - len(invs)} file(s) could not be scanned")
    return Report(files=[os.path.abspath(f) for f in files], problems=problems, plan=plan,
                  notes=notes, bytes_read=bytes_read)


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


def _scan_all(files: list[str], jobs: int,
              scan_timeout: float | None) -> Iterator[FileInventory | list[Problem]]:
    """Scan in file order. With a time limit (or jobs > 1; 0: one per core) in worker
    processes, each file within `scan_timeout` seconds (see scan/_worker.py)."""
    jobs = jobs or os.cpu_count() or 1
    if scan_timeout is not None and scan_timeout < 0:
        raise ValueError(f"scan_timeout must be positive (or None / 0 for no limit), not {scan_timeout}")
    if not scan_timeout and jobs <= 1:
        yield from map(scan_or_problems, files)
        return
    yield from scan_bounded(files, scan_timeout or None, min(jobs, max(1, len(files))))


def _output_kind(out: PathLike, format: str | None, overwrite: bool, paths=None) -> str:
    """The output's kind; refuses early (before any scanning) an output that exists
    without `overwrite`, that virtualize did not write, or that is, holds or sits in one
    of `paths` (when given as a path or a list: an iterator is checked at writing)."""
    out = Path(out)
    kind = format or {".json": "kerchunk", ".icechunk": "icechunk"}.get(out.suffix, "cube")
    if kind not in ("cube", "kerchunk", "icechunk"):
        raise ValueError(f"unknown output format {kind!r} (cube, kerchunk or icechunk)")
    if kind == "icechunk" and importlib.util.find_spec("icechunk") is None:
        raise ValueError("the icechunk output needs the icechunk package: "
                         "pip install 'virtualize[icechunk]'")
    sources = _paths(paths) if isinstance(paths, (str, os.PathLike, list, tuple)) else []
    guard_output(out, overwrite, sources)  # before any scanning: fail fast, lose nothing
    return kind


def _refuse_unless_ok(report: Report) -> None:
    if not report.ok:
        raise VirtualizeError([p for p in report.problems if p.fatal],
                              f"cannot virtualize: {sum(p.fatal for p in report.problems)} "
                              "problem(s); nothing was written", report=report)


def _write(report: Report, out: PathLike, kind: str, overwrite: bool) -> Report:
    _refuse_unless_ok(report)
    # every file named, scanned or not, is protected (the writers check their plan's too)
    guard_output(out, overwrite, report.files)
    if kind == "kerchunk":
        write_kerchunk(report.plan, out, overwrite)
    elif kind == "icechunk":
        from .emit.icechunk import write_icechunk
        write_icechunk(report.plan, out, overwrite)
    else:
        write_cube(report.plan, out, overwrite)
    return report


def _paths(paths, empty: list[str] | None = None) -> list[str]:
    """Files as given; a directory stands for the files in it (sorted, not hidden, not
    recursive), unless it is a kerchunk parquet reference set (one input); directories
    that hold none are added to `empty`."""
    from .scan.kerchunk import is_parquet_references

    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[str] = []
    for p in map(os.fspath, paths):
        if os.path.isdir(p) and not is_parquet_references(p):
            inside = sorted(os.path.join(p, f) for f in os.listdir(p)
                            if not f.startswith(".") and os.path.isfile(os.path.join(p, f)))
            if not inside and empty is not None:
                empty.append(p)
            out += inside
        else:
            out.append(p)
    return out


def _names(names: Iterable[str] | str) -> Sequence[str]:
    if isinstance(names, str):
        names = [names]
    return [n.strip("/") for n in names]
