"""Checking a stack: files scanned (in bounded workers, or on an executor), planned, every
zarr.json rendered and a few chunks decoded through the cube's codecs, every problem
collected (`check`, `check_mosaic`; `inventory`, `inventories`). Each builds its `Recipe`
and runs the shared steps (steps.py)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence

from .. import storage
from ..formats import scan as _scan
from ..model import FileInventory, Problem, VirtualizeError
from ..plan.cut import cut_stack
from ..report import Report
from ..run.policy import check_jobs
from .recipe import DEFAULTS, Recipe, chunk_size_bytes
from .steps import DEFAULT_SCAN_TIMEOUT, PathLike, check_recipe, expand_paths, scan_all, set_storage


def inventory(path: PathLike, *, chunk_size: int | str | None = None,
              scan_timeout: float | None = None,
              storage_options: dict | None = None) -> FileInventory:
    """One file's inventory: variables, dimensions, block tables. Reads no data but
    small coordinate variables. A kerchunk reference set's block tables point into the
    data files it names (`data_files`). Raises `VirtualizeError` for unreadable files.
    `chunk_size` (bytes, or "16M"): the block tables as a cube cuts them (uncompressed
    blocks larger than that cut at whole rows; docs/planning.md); default: as stored.
    Scanned in this process (`scan_timeout` None or 0), else in a worker process within
    `scan_timeout` seconds, as `check` scans (`virtualize inspect` does)."""
    set_storage(storage_options)
    if not scan_timeout:
        inv = _scan(path)
    else:
        [inv] = scan_all([os.fspath(path)], 1, scan_timeout)
        if isinstance(inv, list):
            raise VirtualizeError(inv, f"{storage.normalize(path)}: cannot be scanned")
    limit = chunk_size_bytes(chunk_size)
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
    set_storage(storage_options)
    check_jobs(jobs, executor)
    yield from scan_all(expand_paths(paths), jobs, scan_timeout, executor)


def check(paths: Iterable[PathLike] | PathLike, concat_dim: str | None = None, *,
          inline: Iterable[str] = (), drop: Iterable[str] = (), sort: bool = DEFAULTS.sort,
          split: bool = DEFAULTS.split, materialize: bool = DEFAULTS.materialize,
          materialize_limit: int | None = DEFAULTS.materialize_limit,
          jobs: int | str = "auto", executor=None, progress=None,
          scan_timeout: float | None = DEFAULT_SCAN_TIMEOUT,
          storage_options: dict | None = None,
          inline_threshold: int = DEFAULTS.inline_threshold,
          chunk_size: int | str | None = DEFAULTS.chunk_size, skip_unreadable: bool = False,
          no_gaps: bool = DEFAULTS.no_gaps, join: str = DEFAULTS.join,
          combine_attrs: str = DEFAULTS.combine_attrs,
          variables: Iterable[str] | None = None, concat_dims: Sequence[str] | None = None,
          coords: dict | Sequence[str] | None = None,
          compat: str = DEFAULTS.compat, grib_layout: str = DEFAULTS.grib_layout) -> Report:
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
    `grib_layout`: GRIB files' arrays as cfgrib lays them out ("cfgrib", the default:
    cfgrib's names, squeezed axes, datasets as groups) or "virtualize" (shortName, `time`
    always an axis; docs/grib.md, Layouts).

    A hypercube: `concat_dims` (several axes, outermost first; `concat_dim` is one) and
    `coords` ({dim: "attr:NAME" | "var:NAME" | "name:REGEX" | "v1,v2,..." or a list of
    values}, or "DIM=FORM" strings): a new axis' position of each file (docs/planning.md,
    Hypercubes). `join="outer"`: the grid's cells no file fills are absent chunks that
    read as the fill value (default "exact": refused, naming the cell)."""
    set_storage(storage_options)
    recipe = Recipe.from_options(
        "concat", concat_dim=concat_dim, concat_dims=concat_dims, coords=coords, inline=inline,
        drop=drop, sort=sort, split=split, materialize=materialize,
        materialize_limit=materialize_limit, inline_threshold=inline_threshold,
        chunk_size=chunk_size, no_gaps=no_gaps, join=join, combine_attrs=combine_attrs,
        variables=variables, compat=compat, grib_layout=grib_layout)
    return check_recipe(paths, recipe, jobs=jobs, executor=executor, progress=progress,
                        scan_timeout=scan_timeout, skip_unreadable=skip_unreadable)


def check_mosaic(paths: Iterable[PathLike] | PathLike, *,
                 offsets: Sequence[tuple[int, int]] | None = None, overlap: str | None = None,
                 drop: Iterable[str] = (), tolerance: float = DEFAULTS.tolerance,
                 split: bool = DEFAULTS.split, materialize: bool = DEFAULTS.materialize,
                 materialize_limit: int | None = DEFAULTS.materialize_limit,
                 jobs: int | str = "auto", executor=None, progress=None,
                 scan_timeout: float | None = DEFAULT_SCAN_TIMEOUT,
                 storage_options: dict | None = None,
                 chunk_size: int | str | None = DEFAULTS.chunk_size,
                 skip_unreadable: bool = False, concat_dim: str | None = None,
                 coords: dict[str, str] | None = None,
                 combine_attrs: str = DEFAULTS.combine_attrs,
                 windows: bool = DEFAULTS.windows) -> Report:
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
    tiles, as in `check` (drop_conflicts, the default, with a note; override; identical).
    `windows`: for an output that reads whole tiles (a GDAL VRT, `OutputKind.reads_windows`)."""
    set_storage(storage_options)
    recipe = Recipe.from_options(
        "mosaic", offsets=offsets, overlap=overlap, drop=drop, tolerance=tolerance, split=split,
        materialize=materialize, materialize_limit=materialize_limit, chunk_size=chunk_size,
        concat_dim=concat_dim, coords=coords, combine_attrs=combine_attrs, windows=windows)
    return check_recipe(paths, recipe, jobs=jobs, executor=executor, progress=progress,
                        scan_timeout=scan_timeout, skip_unreadable=skip_unreadable)
