"""Mosaics: map tiles placed side by side into one array per variable.

A chunk grid is one list of lengths per axis and every cut runs across the whole array, so
the grid is cut at every tile edge and every tile's own block boundary; every grid cell
must then be exactly one stored block of one tile, or a gap, or (for an output that reads
whole tiles, a GDAL VRT) a window of one tile (tiles.py: the placing and
cutting a mosaic over time, mosaic_time.py, shares). `plan_mosaic` plans one mosaic of
the tiles given, or, with `concat_dim`, a mosaic over time.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..model import ArrayPlan, FileInventory, Plan, Problem
from ._common import figure_of, groups_for
from .mosaic_time import plan_mosaic_over_time
from .tiles import (
    MosaicOptions,
    combined_attrs,
    mosaic_coordinates,
    mosaic_variable,
    other_variables,
    place_tiles,
    report_overlaps,
    tile_context,
    windows_note,
)


def plan_mosaic(inventories: Sequence[FileInventory], options: MosaicOptions | None = None
                ) -> tuple[Plan, list[Problem]]:
    """Plan one mosaic from tiles. Returns the plan (possibly partial) and every problem."""
    opts = options or MosaicOptions()
    if opts.concat_dim is not None:
        return plan_mosaic_over_time(inventories, opts)
    ctx, sources = tile_context(inventories, opts, opts.drop)
    invs = ctx.invs
    if opts.overlap not in (None, "last", "first"):
        raise ValueError(f"overlap must be None, 'last' or 'first', not {opts.overlap!r}")
    placed = place_tiles(ctx)
    if placed is None:
        return Plan(sources, groups_for(invs[0], {}), {}), ctx.problems
    ydim, xdim, names = placed.ydim, placed.xdim, placed.names
    height, width = placed.height, placed.width
    if opts.overlap is None:
        report_overlaps(ctx)
    arrays: dict[str, ArrayPlan] = {}
    for name in names:
        array = mosaic_variable(ctx, name, ydim, xdim, height, width)
        if array is not None:
            arrays[name] = array
    windows_note(ctx, arrays)
    arrays.update(other_variables(ctx, names, ydim, xdim))
    if placed.georef is not None:
        coords = mosaic_coordinates(ctx, placed.georef, placed.r0, placed.c0, height, width)
        arrays.update(coords)
        ctx.figures.update({n: figure_of(a) for n, a in coords.items()})
    covered = sum(t.height * t.width for t in ctx.tiles)
    if covered < height * width and opts.overlap is None:
        ctx.notes.append(f"the tiles leave gaps: {height * width - covered} of {height * width} "
                         "pixels have no tile and read as the fill value")
    groups = combined_attrs(ctx, arrays, set(coords) if placed.georef is not None else set())
    plan = Plan(sources=sources, groups=groups, arrays=arrays,
                notes=ctx.notes, figures=ctx.figures, mosaic=ctx.mosaic, remedies=ctx.remedies)
    return plan, ctx.problems


__all__ = ["MosaicOptions", "plan_mosaic"]
