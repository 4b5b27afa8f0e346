"""Writing a checked stack: `virtualize` (a concatenation) and `mosaic`; the output's kind
and guards decided before anything is scanned, the write through the kind's plug-in."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from .. import storage
from ..model import VirtualizeError
from ..outputs import registry
from ..outputs.staging import guard_output
from ..plan import DEFAULT_INLINE_THRESHOLD
from ..plan.cut import DEFAULT_CHUNK_SIZE
from ..report import Report
from .checking import DEFAULT_SCAN_TIMEOUT, PathLike, _storage, check, check_mosaic
from .paths import _paths


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
               no_gaps: bool = False, join: str = "exact", combine_attrs: str = "drop_conflicts",
               variables: Iterable[str] | None = None, concat_dims: Sequence[str] | None = None,
               coords: dict | Sequence[str] | None = None, compat: str = "identical") -> Report:
    """Virtualize a stack into `out`: a cube directory, a kerchunk reference JSON
    (`format="kerchunk"` or `out` ending in `.json`) or an Icechunk repository
    (`format="icechunk"` or `.icechunk`). Nothing is written unless every file
    can be referenced exactly; then `VirtualizeError` carries every problem.
    `relative`: record the sources relative to the output (a relocatable cube, to be moved
    or mirrored together with its files: a cube directory's source table, a kerchunk
    JSON's template, an Icechunk repository's named virtual chunk container).
    `skip_unreadable`, `no_gaps`, `join`, `combine_attrs`, `variables`, `compat`, and a
    hypercube's `concat_dims`, `coords`: as for `check`."""
    _storage(storage_options)
    kind = _output_kind(out, format, overwrite, paths, relative)
    report = check(paths, concat_dim, inline=inline, drop=drop, sort=sort, split=split,
                   materialize=materialize, materialize_limit=materialize_limit,
                   jobs=jobs, executor=executor, progress=progress, scan_timeout=scan_timeout,
                   inline_threshold=inline_threshold, chunk_size=chunk_size,
                   skip_unreadable=skip_unreadable, no_gaps=no_gaps, join=join,
                   combine_attrs=combine_attrs, variables=variables, concat_dims=concat_dims,
                   coords=coords, compat=compat)
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
           skip_unreadable: bool = False, concat_dim: str | None = None,
           coords: dict[str, str] | None = None,
           combine_attrs: str = "drop_conflicts") -> Report:
    """Place tiles into one mosaic cube at `out` (see `check_mosaic`); nothing is written
    unless every cell is exactly one block of one tile or a gap. `concat_dim`, `coords`:
    a mosaic over time; `combine_attrs`: attributes differing between tiles
    (`check_mosaic`)."""
    _storage(storage_options)
    kind = _output_kind(out, format, overwrite, paths, relative)
    report = check_mosaic(paths, offsets=offsets, overlap=overlap, drop=drop,
                          tolerance=tolerance, split=split, materialize=materialize,
                          materialize_limit=materialize_limit, jobs=jobs, executor=executor,
                          progress=progress, scan_timeout=scan_timeout, chunk_size=chunk_size,
                          skip_unreadable=skip_unreadable, concat_dim=concat_dim,
                          coords=coords, combine_attrs=combine_attrs)
    return _write(report, out, kind, overwrite, relative)


def _output_kind(out: PathLike, format: str | None, overwrite: bool, paths=None,
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
    kind = registry.kind_of(out, format)
    if relative:
        registry.refuse_relative(kind)
    sources = _paths(paths) if isinstance(paths, (str, os.PathLike, list, tuple)) else []
    if remote:
        from ..outputs.remote import guard_remote
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
