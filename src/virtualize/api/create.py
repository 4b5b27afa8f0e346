"""Writing a checked stack: `virtualize` (a concatenation) and `mosaic`; the output's kind
and guards decided before anything is scanned, the write through the kind's plug-in."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..outputs import registry
from ..report import Report
from .checking import check, check_mosaic
from .recipe import DEFAULTS
from .steps import DEFAULT_SCAN_TIMEOUT, PathLike, output_kind, set_storage, write_checked


def virtualize(paths: Iterable[PathLike] | PathLike, out: PathLike, concat_dim: str | None = None,
               *, overwrite: bool = False, inline: Iterable[str] = (), drop: Iterable[str] = (),
               sort: bool = DEFAULTS.sort, split: bool = DEFAULTS.split,
               materialize: bool = DEFAULTS.materialize,
               materialize_limit: int | None = DEFAULTS.materialize_limit,
               format: str | None = None, jobs: int | str = "auto", executor=None, progress=None,
               scan_timeout: float | None = DEFAULT_SCAN_TIMEOUT,
               storage_options: dict | None = None,
               relative: bool = False,
               inline_threshold: int = DEFAULTS.inline_threshold,
               chunk_size: int | str | None = DEFAULTS.chunk_size, skip_unreadable: bool = False,
               no_gaps: bool = DEFAULTS.no_gaps, join: str = DEFAULTS.join,
               combine_attrs: str = DEFAULTS.combine_attrs,
               variables: Iterable[str] | None = None, concat_dims: Sequence[str] | None = None,
               coords: dict | Sequence[str] | None = None,
               compat: str = DEFAULTS.compat,
               grib_layout: str = DEFAULTS.grib_layout) -> Report:
    """Virtualize a stack into `out`: a cube directory, a kerchunk reference JSON
    (`format="kerchunk"` or `out` ending in `.json`) or an Icechunk repository
    (`format="icechunk"` or `.icechunk`). Nothing is written unless every file
    can be referenced exactly; then `VirtualizeError` carries every problem.
    `relative`: record the sources relative to the output (a relocatable cube, to be moved
    or mirrored together with its files: a cube directory's source table, a kerchunk
    JSON's template, an Icechunk repository's named virtual chunk container).
    `skip_unreadable`, `no_gaps`, `join`, `combine_attrs`, `variables`, `compat`,
    `grib_layout`, and a
    hypercube's `concat_dims`, `coords`: as for `check`."""
    set_storage(storage_options)
    kind = output_kind(out, format, overwrite, paths, relative)
    report = check(paths, concat_dim, inline=inline, drop=drop, sort=sort, split=split,
                   materialize=materialize, materialize_limit=materialize_limit,
                   jobs=jobs, executor=executor, progress=progress, scan_timeout=scan_timeout,
                   inline_threshold=inline_threshold, chunk_size=chunk_size,
                   skip_unreadable=skip_unreadable, no_gaps=no_gaps, join=join,
                   combine_attrs=combine_attrs, variables=variables, concat_dims=concat_dims,
                   coords=coords, compat=compat, grib_layout=grib_layout)
    return write_checked(report, out, kind, overwrite, relative)


def mosaic(paths: Iterable[PathLike] | PathLike, out: PathLike, *,
           offsets: Sequence[tuple[int, int]] | None = None, overlap: str | None = None,
           drop: Iterable[str] = (), tolerance: float = DEFAULTS.tolerance,
           split: bool = DEFAULTS.split, materialize: bool = DEFAULTS.materialize,
           materialize_limit: int | None = DEFAULTS.materialize_limit, overwrite: bool = False,
           format: str | None = None, jobs: int | str = "auto", executor=None, progress=None,
           scan_timeout: float | None = DEFAULT_SCAN_TIMEOUT, storage_options: dict | None = None,
           relative: bool = False,
           chunk_size: int | str | None = DEFAULTS.chunk_size,
           skip_unreadable: bool = False, concat_dim: str | None = None,
           coords: dict[str, str] | None = None,
           combine_attrs: str = DEFAULTS.combine_attrs) -> Report:
    """Place tiles into one mosaic cube at `out` (see `check_mosaic`); nothing is written
    unless every cell is exactly one block of one tile or a gap. `concat_dim`, `coords`:
    a mosaic over time; `combine_attrs`: attributes differing between tiles
    (`check_mosaic`)."""
    set_storage(storage_options)
    kind = output_kind(out, format, overwrite, paths, relative)
    report = check_mosaic(paths, offsets=offsets, overlap=overlap, drop=drop,
                          tolerance=tolerance, split=split, materialize=materialize,
                          materialize_limit=materialize_limit, jobs=jobs, executor=executor,
                          progress=progress, scan_timeout=scan_timeout, chunk_size=chunk_size,
                          skip_unreadable=skip_unreadable, concat_dim=concat_dim,
                          coords=coords, combine_attrs=combine_attrs,
                          windows=registry.by_name(kind).reads_windows)
    return write_checked(report, out, kind, overwrite, relative)
