"""Tiles on one pixel grid: what a mosaic (mosaic.py) and a mosaic over time
(mosaic_time.py) share. The tiles are placed by georeferencing or offsets
(`place_tiles`); a variable is cut at every tile edge and every tile's own block
boundary (`tile_cuts`; cuts that end up inside one block of one tile everywhere along
them are dropped again), and every grid cell must then be exactly one stored block of
one tile, or a gap (no tile: reads as the fill value) (`mosaic_variable`). A cut through
the inside of a block, a padded block that is not the last chunk of the mosaic,
misaligned pixels and overlapping tiles are located problems; `overlap="last"` or
`"first"` settles overlaps block by block (GDAL VRT's rule: the last input wins) where the
winner's blocks cover the overlapped cells exactly. For an output that reads whole tiles
(`MosaicOptions.windows`: a GDAL VRT) a cell that is no whole stored block is no problem:
it is held as a window of its tile (a `Cell`, as --materialize's, read from the tile by
the format's library when the output is read, never copied). The mosaic's x/y coordinates
(`mosaic_coordinates`) and attributes (`combined_attrs`) are made here too.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ..model import (
    GAP,
    MATERIALIZED,
    OK,
    ArrayPlan,
    Cell,
    FileInventory,
    MosaicFigure,
    Source,
    VariableFigure,
    empty_refs,
)
from ._common import (
    Context,
    SourceMaps,
    can_materialize,
    carry_scan_problems,
    compare_shared,
    consistent,
    figure,
    groups_for,
    inline_plan,
    is_uncompressed,
    settle_unknown_fills,
    source_table,
)
from .attrs import combine, dropped_note
from .grid import block_lengths

X_NAMES = ("x", "lon", "longitude")
Y_NAMES = ("y", "lat", "latitude")
MAX_PROBLEMS_PER_TILE = 10


@dataclass
class MosaicOptions:
    offsets: Sequence[tuple[int, int]] | None = None  # (row, col) of each tile, no georeferencing
    overlap: str | None = None  # None: overlaps are problems; "last" / "first": who wins
    tolerance: float = 1e-3  # pixels: how far from whole-pixel alignment tiles may be
    drop: frozenset[str] = frozenset()
    split: bool = True  # cut uncompressed blocks into row ranges (exact, nothing copied)
    materialize: bool = False  # copy the cells no block fits exactly into the cube
    # the output reads whole tiles (a GDAL VRT: SimpleSources are files, painted in order):
    # cells no block fits exactly are windows of their tile (`ArrayPlan.materialize` cells
    # the output reads from the tile, not copies), not padded-block / cut-through-block
    windows: bool = False
    # a mosaic over time (plan/mosaic_time.py): each date's tiles placed, the dates stacked
    concat_dim: str | None = None
    coords: dict[str, str] | None = None  # DIM -> a --coord form (plan/coords.py)
    # attributes differing between tiles (plan/attrs.py): drop_conflicts, override, identical
    combine_attrs: str = "drop_conflicts"


@dataclass
class Georef:
    """A tile's north-up pixel grid: left/top edges, signed pixel sizes, CRS, axes."""

    x0: float
    dx: float
    y0: float
    dy: float
    crs: str | None
    xdim: str
    ydim: str
    xvar: str | None = None
    yvar: str | None = None
    mapping: str | None = None  # the grid-mapping variable's name


@dataclass
class Tile:
    index: int
    inv: FileInventory
    row0: int = 0
    col0: int = 0
    height: int = 0
    width: int = 0


@dataclass
class TileContext(Context):
    opts: MosaicOptions = field(default_factory=MosaicOptions)
    tiles: list[Tile] = field(default_factory=list)
    overlaps: list[tuple[int, int, int, int]] = field(default_factory=list)
    mosaic: MosaicFigure | None = None
    # per tile: its refs' `path` (0 = itself, k = its k-th data file) -> Plan.sources index
    source_maps: SourceMaps | None = None
    # a mosaic over time: who makes a cut (any date's tile), (name, position, axis, victim)
    who_cuts: Callable | None = None


def tile_context(inventories: Sequence[FileInventory], opts: MosaicOptions,
                 drop: frozenset[str]) -> tuple[TileContext, list[Source]]:
    """The planning context of tiles (each inventory copied: the planner adds to its
    variables), the scanners' problems carried, unknown fill values settled, and the
    plan's source table."""
    invs = [replace(inv, variables=dict(inv.variables)) for inv in inventories]
    ctx = TileContext(invs, drop=drop, opts=opts)
    ctx.tiles = [Tile(i, inv) for i, inv in enumerate(invs)]
    carry_scan_problems(ctx)
    settle_unknown_fills(ctx)
    sources, ctx.source_maps = source_table(invs)
    return ctx, sources


def combined_attrs(ctx: TileContext, arrays: dict[str, ArrayPlan], made: set[str],
                   leave: frozenset[str] = frozenset()) -> dict[str, dict]:
    """The mosaic's attributes over every tile (plan/attrs.py `combine`, `--combine-attrs`),
    never the first tile's unseen: each array's (in place) and each group's (returned). The
    arrays the mosaic makes (`made`: x/y, the grid mapping, the stacked dates; their
    GeoTransform and values are the whole mosaic's) keep theirs; `leave`: root attributes
    left out (a `--coord attr:` one: the coordinate holds it). Those that change what the
    values mean differing are refused (`attribute-drift`) once per variable."""
    how = ctx.opts.combine_attrs
    dropped: dict[str, list[str]] = {}
    drift = {p.loc.variable for p in ctx.problems if p.kind == "attribute-drift"}
    for name, a in arrays.items():
        held = [inv for inv in ctx.invs[1:] if name in inv.variables]
        if name in made or not held:
            continue
        out, gone, problems = combine([a.attrs, *(inv.variables[name].attrs for inv in held)],
                                      how, name, [ctx.invs[0].path, *(i.path for i in held)])
        ctx.problems.extend(p for p in problems
                            if p.kind != "attribute-drift" or name not in drift)
        a.attrs = out
        if gone:
            dropped[name] = gone
    groups = groups_for(ctx.invs[0], arrays)
    for g in groups:
        if g not in ctx.invs[0].groups:
            continue
        given = [{k: v for k, v in inv.groups.get(g, {}).items() if g or k not in leave}
                 for inv in ctx.invs]
        out, gone, problems = combine(given, how, g and f"group {g}",
                                      [inv.path for inv in ctx.invs])
        groups[g] = out
        ctx.problems.extend(problems)
        if gone:
            dropped[g and f"group {g}"] = gone
    note = dropped_note(dropped)
    if note:
        ctx.notes.append(note.replace("between files", "between tiles"))
    return groups


# -- placement -------------------------------------------------------------------------


@dataclass
class Placed:
    """The tiles placed (`Tile.row0/col0/height/width`, the mosaic's origin at 0, 0): the
    mosaic's axes, its variables, the first tile's georeference (None: by offsets), the
    origin's offset from the first tile's and the mosaic's size."""

    ydim: str
    xdim: str
    names: list[str]
    georef: Georef | None
    r0: int
    c0: int
    height: int
    width: int


def place_tiles(ctx: TileContext) -> Placed | None:
    """Every tile's size and place, by the options' offsets or by georeferencing (a mosaic
    and each date of a mosaic over time alike); None when they cannot be placed (the
    problems say why)."""
    opts, invs = ctx.opts, ctx.invs
    georefs = None
    if opts.offsets is not None:
        if len(opts.offsets) != len(invs):
            raise ValueError(f"{len(opts.offsets)} offsets for {len(invs)} tiles")
        ydim, xdim = _plain_axes(ctx)
    else:
        georefs = [_georef(ctx, inv) for inv in invs]
        if any(g is None for g in georefs):
            return None
        ydim, xdim = georefs[0].ydim, georefs[0].xdim
    names = _mosaic_variables(ctx, ydim, xdim)
    if not names:
        ctx.problem(None, None, "no-mosaic-variables",
                    f"no variable has both {ydim!r} and {xdim!r} axes in every tile")
        return None
    first = invs[0].variables[names[0]]
    iy, ix = first.dims.index(ydim), first.dims.index(xdim)
    for tile in ctx.tiles:
        v = tile.inv.variables[names[0]]
        tile.height, tile.width = v.shape[iy], v.shape[ix]
    if georefs is None:
        for tile, (r, c) in zip(ctx.tiles, opts.offsets):
            tile.row0, tile.col0 = int(r), int(c)
    elif not _place(ctx, georefs):
        return None
    r0 = min(t.row0 for t in ctx.tiles)
    c0 = min(t.col0 for t in ctx.tiles)
    for t in ctx.tiles:
        t.row0 -= r0
        t.col0 -= c0
    return Placed(ydim, xdim, names, georefs[0] if georefs else None, r0, c0,
                  max(t.row0 + t.height for t in ctx.tiles),
                  max(t.col0 + t.width for t in ctx.tiles))

def _georef(ctx: TileContext, inv: FileInventory) -> Georef | None:
    """From a GeoTIFF's spatial_ref/GeoTransform, or 1-D regular x/y (lon/lat) coordinates."""
    vs = inv.variables
    sr = vs.get("spatial_ref")
    if sr is not None and "GeoTransform" in sr.attrs:
        x0, dx, rx, y0, ry, dy = (float(v) for v in str(sr.attrs["GeoTransform"]).split())
        if rx or ry:
            ctx.problem(inv.path, None, "needs-warping",
                        "the geotransform is rotated or sheared: tiles cannot be placed by "
                        "whole pixels")
            return None
        return Georef(x0, dx, y0, dy, _crs_key(sr.attrs), "x", "y", "x" if "x" in vs else None,
                      "y" if "y" in vs else None, "spatial_ref")
    xname = next((n for n in X_NAMES if n in vs and vs[n].is_coordinate), None)
    yname = next((n for n in Y_NAMES if n in vs and vs[n].is_coordinate), None)
    if xname is None or yname is None:
        ctx.problem(inv.path, None, "no-georeferencing",
                    "no GeoTIFF transform and no 1-D x/y (lon/lat) coordinates: give the tiles' "
                    "pixel offsets instead (Python API: offsets=[(row, col), ...])")
        return None
    edges = []
    for name in (xname, yname):
        vals = vs[name].values
        if vals is None or vals.size < 2:
            ctx.problem(inv.path, name, "no-georeferencing",
                        f"{name!r} has fewer than 2 values: its pixel size is unknown")
            return None
        step = np.diff(vals.astype("f8"))
        d = float(step[0])
        if not np.isfinite(vals.astype("f8")).all():
            i = int(np.flatnonzero(~np.isfinite(vals.astype("f8")))[0])
            ctx.problem(inv.path, name, "irregular-coordinate",
                        f"{name!r} has a value that is not a number at index {i} "
                        f"({float(vals[i])!r}): tiles need a regular grid to be placed")
            return None
        if d == 0 or np.abs(step - d).max() > ctx.opts.tolerance * abs(d):
            ctx.problem(inv.path, name, "irregular-coordinate",
                        f"{name!r} is not evenly spaced (steps {float(step.min())!r} to "
                        f"{float(step.max())!r}): tiles need a regular grid to be placed")
            return None
        edges.append((float(vals[0]) - d / 2, d))
    mapping = next((v.attrs.get("grid_mapping") for v in vs.values()
                    if xname in v.dims and yname in v.dims and v.attrs.get("grid_mapping")), None)
    crs = _crs_key(vs[mapping].attrs) if mapping in vs else None
    (x0, dx), (y0, dy) = edges
    return Georef(x0, dx, y0, dy, crs, xname, yname, xname, yname,
                  mapping if mapping in vs else None)


def _crs_key(attrs: dict) -> str | None:
    for key in ("crs_wkt", "spatial_ref", "epsg", "epsg_code", "proj4"):
        if attrs.get(key):
            return f"{key}={attrs[key]}"
    return None


def crs_name(key: str | None) -> str:
    """A CRS as a reader knows it: "EPSG:32633" (from an EPSG code, or a WKT's last
    AUTHORITY / ID, or through pyproj when installed), else its name, else the start of
    its text -- not kilobytes of WKT."""
    if key is None:
        return "none"
    kind, _, text = key.partition("=")
    if kind in ("epsg", "epsg_code"):
        return f"EPSG:{text.split(':')[-1].strip()}"
    found = re.findall(r'(?:AUTHORITY|ID)\[\s*"EPSG"\s*,\s*"?(\d+)"?\s*\]', text)
    if found:
        return f"EPSG:{found[-1]}"
    try:
        import pyproj

        crs = pyproj.CRS.from_user_input(text)
        epsg = crs.to_epsg()
        return f"EPSG:{epsg}" if epsg else crs.name
    except Exception:  # noqa: BLE001 - no pyproj, or text it cannot read
        pass
    name = re.match(r'\s*[A-Z_]+\[\s*"([^"]+)"', text)
    return repr(name.group(1)) if name else repr(text[:60] + ("..." if len(text) > 60 else ""))


def _plain_axes(ctx: TileContext) -> tuple[str, str]:
    """Without georeferencing: the last two axes of the first multi-dimensional variable
    (TIFF: y, x)."""
    for v in ctx.invs[0].variables.values():
        if v.blocks is not None and len(v.dims) >= 2:
            if "y" in v.dims and "x" in v.dims:
                return "y", "x"
            return v.dims[-2], v.dims[-1]
    return "y", "x"


def _place(ctx: TileContext, georefs: list[Georef]) -> bool:
    """Whole-pixel offsets of every tile in the first tile's grid; misfits are problems."""
    ref = georefs[0]
    tol = ctx.opts.tolerance
    ok = True
    for tile, g in zip(ctx.tiles, georefs):
        where = tile.inv.path
        if g.crs != ref.crs:
            ctx.problem(where, None, "needs-warping",
                        f"CRS differs from {ctx.invs[0].path}: {crs_name(g.crs)} vs "
                        f"{crs_name(ref.crs)}")
            ok = False
            continue
        n = max(tile.width, tile.height, 1)
        if abs(g.dx / ref.dx - 1) * n > tol or abs(g.dy / ref.dy - 1) * n > tol:
            ctx.problem(where, None, "needs-warping",
                        f"pixel size ({g.dx!r}, {g.dy!r}) differs from ({ref.dx!r}, {ref.dy!r}) "
                        f"in {ctx.invs[0].path}")
            ok = False
            continue
        col = (g.x0 - ref.x0) / ref.dx
        row = (g.y0 - ref.y0) / ref.dy
        dcol, drow = col - round(col), row - round(row)
        if abs(dcol) > tol or abs(drow) > tol:
            ctx.problem(where, None, "needs-warping",
                        f"pixels are misaligned with {ctx.invs[0].path} by {drow:+.4f} rows, "
                        f"{dcol:+.4f} columns (more than {tol} pixel): the tile must be "
                        "resampled onto the common grid")
            ok = False
            continue
        tile.row0, tile.col0 = int(round(row)), int(round(col))
    return ok


def report_overlaps(ctx: TileContext) -> None:
    tiles = sorted(ctx.tiles, key=lambda t: t.col0)
    for i, a in enumerate(tiles):
        for b in tiles[i + 1:]:
            if b.col0 >= a.col0 + a.width:
                break
            r0, r1 = max(a.row0, b.row0), min(a.row0 + a.height, b.row0 + b.height)
            c0, c1 = max(a.col0, b.col0), min(a.col0 + a.width, b.col0 + b.width)
            if r0 < r1 and c0 < c1:
                ctx.overlaps.append((r0, r1, c0, c1))
                first, second = sorted((a, b), key=lambda t: t.index)
                ctx.problem(second.inv.path, None, "overlap",
                            f"overlaps {first.inv.path} in mosaic rows {r0}..{r1 - 1}, columns "
                            f"{c0}..{c1 - 1}: a chunk grid is a partition; choose a winner with "
                            "--overlap last|first")


# -- one variable ----------------------------------------------------------------------

def _mosaic_variables(ctx: TileContext, ydim: str, xdim: str) -> list[str]:
    first = ctx.invs[0]
    names = [n for n, v in first.variables.items()
             if ydim in v.dims and xdim in v.dims and not v.is_coordinate and n not in ctx.drop]
    left_out = [n for n in first.variables
                if n not in names and n not in ctx.drop and not first.variables[n].is_coordinate
                and first.variables[n].shape != ()]
    if left_out:
        ctx.notes.append("not part of the mosaic (no {!r} and {!r} axes): {}".format(
            ydim, xdim, ", ".join(left_out)))
    out = []
    for n in names:
        missing = [inv.path for inv in ctx.invs if n not in inv.variables]
        for path in missing:
            if (path, n) not in ctx.reported:
                ctx.problem(path, n, "missing-variable", f"{n!r} is in other tiles but not here")
        if not missing:
            out.append(n)
    return out


def other_variables(ctx: TileContext, names: list[str], ydim: str, xdim: str) -> dict[str, ArrayPlan]:
    """The tiles' coordinates of the other axes the mosaic variables keep (a leading
    `time`) and their scalars (not grid mappings), compared through `compare_shared`: the
    cube holds one value for them all. A coordinate the same in every tile (its values
    recorded) is kept in the cube; one that differs is refused (a mosaic over time is not
    supported yet); a scalar is left out, with a note naming it, as is a coordinate whose
    values were not recorded."""
    first = ctx.invs[0]
    kept = {d for n in names for d in first.variables[n].dims} - {ydim, xdim}
    mappings = {x.attrs.get("grid_mapping") for x in first.variables.values()} - {None}
    out: dict[str, ArrayPlan] = {}
    left: list[str] = []
    absent: list[str] = []
    for n, v in first.variables.items():
        if n in ctx.drop or n in names:
            continue
        coord = v.is_coordinate and len(v.dims) == 1 and v.dims[0] in kept
        scalar = v.shape == () and v.basename not in mappings and "grid_mapping_name" not in v.attrs
        if not (coord or scalar):
            continue
        vs = [inv.variables.get(n) for inv in ctx.invs]
        if any(x is None for x in vs):
            absent.append(n)
            continue
        why = (f"is the coordinate of the mosaic's {v.dims[0]!r} axis" if coord
               else "is a scalar of the tiles")
        before = len(ctx.problems)
        if not compare_shared(ctx, n, vs, why):
            ctx.problems[before:] = [
                replace(p, remedy=p.remedy or (
                    f"a mosaic over {v.dims[0]!r} (tiles of different {v.dims[0]!r}) is not "
                    f"supported yet: mosaic each {v.dims[0]!r} step's tiles separately" if coord
                    else f"--drop {n}, or mosaic the tiles of each {n!r} separately"))
                if p.kind == "differs-between-files" else p for p in ctx.problems[before:]]
            continue
        if coord and v.values is not None:
            out[n] = inline_plan(n, np.asarray(v.values), v.dims, v.attrs)
        else:
            left.append(n)
    if left:
        ctx.notes.append("left out of the mosaic, the same in every tile: " + ", ".join(left))
    if absent:
        ctx.notes.append("left out of the mosaic, not in every tile: " + ", ".join(absent))
    return out


def mosaic_variable(ctx: TileContext, name: str, ydim: str, xdim: str, height: int, width: int,
                    grid: tuple | None = None) -> ArrayPlan | None:
    """`grid`: (ycuts, xcuts, ylast, xlast) shared by every date of a mosaic over time (the
    cuts, and the stored lengths of the whole last blocks along each axis over all dates);
    None: this mosaic's own."""
    vs = [inv.variables[name] for inv in ctx.invs]
    if any(v.blocks is None for v in vs):
        return None  # the scanner reported why
    held = [inv.path for inv, v in zip(ctx.invs, vs) if (v.blocks.refs["path"] == MATERIALIZED).any()]
    for path in held:
        ctx.problem(path, name, "inline-chunk", "chunks held inline in the reference set (no byte "
                    "range) cannot be placed in a mosaic yet")
    if held:
        return None
    if not consistent(ctx, name, vs, frozenset({ydim, xdim}), "the tiles' x and y"):
        return None
    first = vs[0]
    iy, ix = first.dims.index(ydim), first.dims.index(xdim)
    before = len(ctx.problems)
    tiles = ctx.tiles
    bh = np.array([v.blocks.block_shape[iy] for v in vs])
    bw = np.array([v.blocks.block_shape[ix] for v in vs])
    padded = np.array([v.blocks.padded for v in vs])
    ylast = xlast = None
    if grid is None:
        ycuts = tile_cuts(height, [(t.row0, t.height, b) for t, b in zip(tiles, bh)])
        xcuts = tile_cuts(width, [(t.col0, t.width, b) for t, b in zip(tiles, bw)])
        owner = paint(ctx, ycuts, xcuts)
        # cuts inside one block of one tile all along them are not needed: drop them
        ycuts, owner = _merge(ycuts, owner, tiles, bh, axis=0, start="row0")
        xcuts, owner = _merge(xcuts, owner, tiles, bw, axis=1, start="col0")
    else:
        ycuts, xcuts, ylast, xlast = grid
        owner = paint(ctx, ycuts, xcuts)
    ya = axis_cells(ycuts, owner, tiles, bh, padded, axis=0)
    xa = axis_cells(xcuts, owner, tiles, bw, padded, axis=1)
    # every cell must be one whole block of its tile, stored at the cell's chunk length
    splittable_tile = np.array([ctx.opts.split and iy == 0 and is_uncompressed(v.codecs)
                                for v in vs])
    # (a window is decoded and encoded again at reading, as a copy is at writing)
    copyable_tile = np.array([(ctx.opts.materialize or ctx.opts.windows)
                              and can_materialize(v.codecs) for v in vs])
    need_y, ylens = _needs(ya, owner, ycuts, axis=0, last=ylast)
    need_x, xlens = _needs(xa, owner, xcuts, axis=1, last=xlast)
    safe = np.where(owner >= 0, owner, 0)
    # rows of an uncompressed block, stored at exactly the row's listed length (the last
    # row may be listed longer, at the padded blocks' length: a piece cannot fill that)
    exact_row = (np.asarray(ylens) == np.diff(ycuts)).reshape(-1, 1)
    split = need_y & ~need_x & splittable_tile[safe] & exact_row
    copy = (need_y | need_x) & ~split & copyable_tile[safe]
    bad = (need_y | need_x) & ~split & ~copy
    _report_cells(ctx, name, ydim, bad & need_y, ya, owner, ycuts, tiles, bh, 0, vs)
    _report_cells(ctx, name, xdim, bad & need_x, xa, owner, xcuts, tiles, bw, 1, vs)
    chunk_lengths: list[tuple[int, ...]] = []
    for axis, (n, b) in enumerate(zip(first.shape, first.blocks.block_shape)):
        if axis == iy:
            chunk_lengths.append(tuple(ylens))
        elif axis == ix:
            chunk_lengths.append(tuple(xlens))
        else:
            chunk_lengths.append(tuple(block_lengths(n, b, first.blocks.padded)))
    shape = list(first.shape)
    shape[iy], shape[ix] = height, width
    failed = len(ctx.problems) > before
    ctx.figures[name] = figure(name, first.dims, shape, chunk_lengths,
                               {iy: set(np.flatnonzero(bad.any(axis=1)).tolist()),
                                ix: set(np.flatnonzero(bad.any(axis=0)).tolist())},
                               refused_variable=failed)
    ctx.figures[name] = _mark_gaps(ctx.figures[name], owner, iy, ix)
    if ctx.mosaic is None:
        ctx.mosaic = MosaicFigure(height, width,
                                  [(t.inv.path, t.row0, t.col0, t.height, t.width) for t in tiles],
                                  ycuts.tolist(), xcuts.tolist(), list(ctx.overlaps),
                                  [(int(ycuts[i]), int(ycuts[i + 1]), int(xcuts[j]), int(xcuts[j + 1]))
                                   for i, j in zip(*np.nonzero(bad))])
    others = int(np.prod([len(c) for a, c in enumerate(chunk_lengths) if a not in (iy, ix)]))
    if split.any():
        ctx.use_remedy("split", int(split.sum()) * others, 0)
    cells = _copied_cells(ctx, name, vs, copy, ycuts, xcuts, iy, ix, chunk_lengths, owner,
                          counted=not ctx.opts.windows)
    if not (ctx.opts.materialize or ctx.opts.windows):  # what --materialize would copy
        could = bad & np.array([can_materialize(v.codecs) for v in vs])[safe]
        _copied_cells(ctx, name, vs, could, ycuts, xcuts, iy, ix, chunk_lengths, owner,
                      enabled=False)
    if failed:
        return None
    grid = tuple(len(c) for c in chunk_lengths)
    refs = empty_refs(grid)
    moved = np.moveaxis(refs, (iy, ix), (0, 1))
    for t, v in zip(tiles, vs):
        rows, cols = np.nonzero((owner == t.index) & ~copy)
        if rows.size == 0:
            continue
        by, bx = ya.idx[rows, cols], xa.idx[rows, cols]
        src = np.moveaxis(v.blocks.refs, (iy, ix), (0, 1))[by, bx].copy()
        src["path"] = ctx.source_maps[t.index][src["path"]]
        piece = split[rows, cols]
        if piece.any():
            # rows [a, z) of a C-ordered uncompressed block are one byte range
            row_bytes = int(np.prod(v.blocks.block_shape[1:])) * v.dtype.itemsize
            skip = (ycuts[rows] - ya.bstart[rows, cols])[piece]
            keep = (ycuts[rows + 1] - ycuts[rows])[piece]
            sel = src[piece]
            present = sel["length"] > 0
            sel["offset"] = np.where(present, sel["offset"] + (skip * row_bytes).reshape(
                (-1,) + (1,) * (sel.ndim - 1)), 0)
            sel["length"] = np.where(present, (keep * row_bytes).reshape(
                (-1,) + (1,) * (sel.ndim - 1)), 0)
            src[piece] = sel
        moved[rows, cols] = src
    for index in cells:
        refs[index] = (MATERIALIZED, 0, 0)
    return ArrayPlan(name=name, dtype=first.dtype, shape=tuple(shape), dims=first.dims,
                     chunk_lengths=tuple(chunk_lengths), codecs=first.codecs,
                     fill_value=first.fill_value, attrs=dict(first.attrs), refs=refs,
                     materialize=cells)


@dataclass
class AxisCells:
    """Per grid cell, along one axis: the owner's block index, that block's extent in the
    mosaic [bstart, bend), whether the cell is exactly it, and its stored length."""

    idx: np.ndarray
    bstart: np.ndarray
    bend: np.ndarray
    whole: np.ndarray
    stored: np.ndarray
    lengths: np.ndarray  # the cells' own lengths along the axis, broadcastable


def axis_cells(cuts, owner, tiles, block, padded, axis: int) -> AxisCells:
    start = np.array([t.row0 if axis == 0 else t.col0 for t in tiles])
    size = np.array([t.height if axis == 0 else t.width for t in tiles])
    shape = (-1, 1) if axis == 0 else (1, -1)
    a, z = cuts[:-1].reshape(shape), cuts[1:].reshape(shape)
    safe = np.where(owner >= 0, owner, 0)
    t0, b, n = start[safe], block[safe], size[safe]
    idx = np.where(owner >= 0, (a - t0) // b, -1)
    bstart = t0 + idx * b
    bend = t0 + np.minimum((idx + 1) * b, n)
    whole = (a == bstart) & (z == bend)
    stored = np.where(padded[safe], b, bend - bstart)
    return AxisCells(idx, bstart, bend, whole, stored, z - a)


def last_stored(c: AxisCells, owner, axis: int) -> set[int]:
    """The stored lengths of the whole blocks in the last line of cells along the axis."""
    if not owner.size:
        return set()
    line = np.take(owner, -1, axis=axis) >= 0
    whole_last = np.take(c.whole, -1, axis=axis) & line
    return {int(s) for s in np.unique(np.take(c.stored, -1, axis=axis)[whole_last])}


def _needs(c: AxisCells, owner, cuts, axis: int, last: set[int] | None = None):
    """Which owned cells are not a whole block stored at their chunk length along this
    axis, and the axis' chunk lengths: each cell's length, except that the last chunk is
    listed at the stored length of the whole blocks there when they agree (an overhang;
    `last`: those lengths over every date of a mosaic over time, else this one's)."""
    listed = np.diff(cuts)
    if listed.size:
        stored_last = last_stored(c, owner, axis) if last is None else last
        if len(stored_last) == 1:
            listed[-1] = int(next(iter(stored_last)))
    want = listed.reshape((-1, 1) if axis == 0 else (1, -1))
    need = (owner >= 0) & (~c.whole | (c.stored != want))
    return need, listed.tolist()


def _report_cells(ctx, name, dim, bad, c: AxisCells, owner, cuts, tiles, block, axis: int,
                  vs) -> None:
    """One problem per (tile, block along the axis) that cannot be referenced, naming
    where it is cut and by whom, with the remedy when there is one."""
    where = "row" if axis == 0 else "column"
    count: dict[int, int] = {}
    blocks: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for i, j in zip(*(x.tolist() for x in np.nonzero(bad))):
        blocks.setdefault((int(owner[i, j]), int(c.idx[i, j])), []).append((i, j))
    for (t_index, k), cells_ in blocks.items():
        t, b, v = tiles[t_index], int(block[t_index]), vs[t_index]
        i, j = cells_[0]
        bstart, bend = int(c.bstart[i, j]), int(c.bend[i, j])
        spans = {(int(cuts[i2 if axis == 0 else j2]), int(cuts[(i2 if axis == 0 else j2) + 1]))
                 for i2, j2 in cells_}
        positions = sorted({p for span in spans for p in span if bstart < p < bend})
        remedy = ("materialize the block's cells (--materialize)" if can_materialize(v.codecs)
                  else None)
        if positions:
            who = ctx.who_cuts or (lambda _n, p, axis, t: cut_by(tiles, block, p, axis, t))
            at = ", ".join(f"{p} ({who(name, p, axis, t)})" for p in positions)
            hint = "" if (axis == 0 and is_uncompressed(v.codecs)) else (
                "; it cannot be split by byte ranges (" + ("compressed" if axis == 0 or not
                                                           is_uncompressed(v.codecs)
                                                           else "cut along an inner axis") + ")")
            _limited(ctx, count, t, name, "cut-through-block",
                     f"block {k} along {dim!r} (tile {where}s {k * b}..{k * b + bend - bstart - 1}, "
                     f"mosaic {bstart}..{bend - 1}) is cut at mosaic {where} {at}; only whole "
                     f"blocks can be referenced{hint}", dim, k, remedy)
        else:
            _limited(ctx, count, t, name, "padded-block",
                     f"block {k} along {dim!r} is stored padded to {b} but holds {bend - bstart} "
                     f"(mosaic {bstart}..{bend - 1}); a padded block can only be the last chunk "
                     "of the mosaic on its axis", dim, k, remedy)


def _copied_cells(ctx, name, vs, copy, ycuts, xcuts, iy, ix, chunk_lengths, owner,
                  enabled: bool = True, counted: bool = True):
    """Cells to materialize (or windows: not `counted` as a copy): chunk index -> the tile
    region that fills it."""
    cells: dict[tuple[int, ...], Cell] = {}
    if not copy.any():
        return cells
    nbytes = 0
    other_axes = [a for a in range(len(chunk_lengths)) if a not in (iy, ix)]
    for i, j in zip(*(x.tolist() for x in np.nonzero(copy))):
        t = ctx.tiles[int(owner[i, j])]
        v = vs[t.index]
        for rest in itertools.product(*(range(len(chunk_lengths[a])) for a in other_axes)):
            index, region = [0] * len(chunk_lengths), [None] * len(chunk_lengths)
            index[iy], index[ix] = i, j
            region[iy] = (int(ycuts[i]) - t.row0, int(ycuts[i + 1]) - t.row0)
            region[ix] = (int(xcuts[j]) - t.col0, int(xcuts[j + 1]) - t.col0)
            for a, m in zip(other_axes, rest):
                b = v.blocks.block_shape[a]
                index[a], region[a] = m, (m * b, min((m + 1) * b, v.shape[a]))
            cells[tuple(index)] = Cell(int(ctx.source_maps[t.index][0]), name, tuple(region))
            nbytes += int(np.prod([hi - lo for lo, hi in region])) * v.dtype.itemsize
    if counted:
        ctx.use_remedy("materialize", len(cells), nbytes, enabled)
    return cells


def windows_note(ctx: TileContext, arrays: dict[str, ArrayPlan]) -> None:
    """The note of a mosaic for an output that reads whole tiles (`MosaicOptions.windows`):
    how many chunks are windows of their tiles, and that --materialize copies nothing."""
    if not ctx.opts.windows:
        return
    held = {n: len(a.materialize) for n, a in arrays.items() if a.materialize}
    if held:
        ctx.notes.append(
            "not whole stored blocks of one tile (padded or cut blocks), read as windows of "
            "their tiles (GDAL reads the tiles whole; virtualize decodes these chunks from "
            "them with the format's library, nothing copied): "
            + ", ".join(f"{n} {k} chunk(s)" for n, k in held.items()))
    if ctx.opts.materialize:
        ctx.notes.append("--materialize copies nothing into this output: it reads the tiles "
                         "whole")


def tile_cuts(extent: int, spans: list[tuple[int, int, int]]) -> np.ndarray:
    """Every tile edge and every block boundary inside a tile, along one axis."""
    cuts = [np.array([0, extent])]
    for start, length, block in spans:
        cuts.append(start + np.arange(0, length, block))
        cuts.append(np.array([start + length]))
    return np.unique(np.concatenate(cuts))


def paint(ctx: TileContext, ycuts: np.ndarray, xcuts: np.ndarray) -> np.ndarray:
    """Which tile owns each grid cell (-1: none). Later tiles paint over earlier ones, so
    with overlap="last" the last listed tile wins, with "first" the first."""
    owner = np.full((len(ycuts) - 1, len(xcuts) - 1), -1, dtype=np.int64)
    order = ctx.tiles if ctx.opts.overlap != "first" else list(reversed(ctx.tiles))
    for t in order:
        i0, i1 = np.searchsorted(ycuts, [t.row0, t.row0 + t.height])
        j0, j1 = np.searchsorted(xcuts, [t.col0, t.col0 + t.width])
        owner[i0:i1, j0:j1] = t.index
    return owner


def block_index(cuts: np.ndarray, owner: np.ndarray, tiles, block, axis: int, start: str):
    """For every cell, the index of the owner's block its start falls in (-1 for gaps)."""
    starts = np.array([getattr(t, start) for t in tiles])
    pos = cuts[:-1].reshape((-1, 1) if axis == 0 else (1, -1))
    safe = np.where(owner >= 0, owner, 0)
    idx = (pos - starts[safe]) // block[safe]
    return np.where(owner >= 0, idx, -1)


def _merge(cuts, owner, tiles, block, axis: int, start: str):
    """Drop each inner cut that, all along it, separates two parts of one block of one
    tile (or two gaps)."""
    idx = block_index(cuts, owner, tiles, block, axis, start)
    o = np.moveaxis(owner, axis, 0)
    b = np.moveaxis(idx, axis, 0)
    same = ((o[:-1] == o[1:]) & (b[:-1] == b[1:])).all(axis=1)
    keep_cell = np.concatenate([[True], ~same])
    keep_cut = np.concatenate([keep_cell, [True]])
    return cuts[keep_cut], np.take(owner, np.flatnonzero(keep_cell), axis=axis)


def _mark_gaps(fig: VariableFigure, owner: np.ndarray, iy: int, ix: int) -> VariableFigure:
    """Rows / columns of the grid that no tile covers at all are gaps."""
    for axis, gap in ((iy, (owner < 0).all(axis=1)), (ix, (owner < 0).all(axis=0))):
        marks = fig.axes[axis].marks
        if len(marks) == len(gap):
            marks[gap & (marks == OK)] = GAP
    return fig


def cut_by(tiles, block, p: int, axis: int, victim) -> str:
    start = "row0" if axis == 0 else "col0"
    size = "height" if axis == 0 else "width"
    for t in tiles:
        if t is victim:
            continue
        s, n = getattr(t, start), getattr(t, size)
        if p in (s, s + n):
            return f"the edge of {t.inv.path}"
        if s < p < s + n and (p - s) % int(block[t.index]) == 0:
            return f"a block boundary of {t.inv.path}"
    return "a neighbouring tile's edge"


def _limited(ctx: TileContext, count: dict, t: Tile, name, kind, msg, dim, k, remedy=None) -> None:
    n = count.get(t.index, 0)
    count[t.index] = n + 1
    if n < MAX_PROBLEMS_PER_TILE:
        ctx.problem(t.inv.path, name, kind, msg, axis=dim, block=(k,), remedy=remedy)
    elif n == MAX_PROBLEMS_PER_TILE:
        ctx.problem(t.inv.path, name, kind, "... more blocks of this tile are cut", axis=dim)


# -- coordinates of the whole mosaic ---------------------------------------------------

def mosaic_coordinates(ctx: TileContext, g: Georef, r0: int, c0: int, height: int, width: int
                       ) -> dict[str, ArrayPlan]:
    first = ctx.invs[0].variables
    x0 = g.x0 + c0 * g.dx
    y0 = g.y0 + r0 * g.dy
    out: dict[str, ArrayPlan] = {}
    for name, dim, n, start, step in ((g.xvar, g.xdim, width, x0, g.dx),
                                      (g.yvar, g.ydim, height, y0, g.dy)):
        if name is None:
            continue
        src = first[name]
        values = (start + (np.arange(n) + 0.5) * step).astype(src.dtype.newbyteorder("="))
        out[name] = inline_plan(name, values, (dim,), src.attrs)
    mapping = [inv.variables.get(g.mapping) for inv in ctx.invs] if g.mapping else []
    # the tiles' grid mapping is taken from the first tile: each tile's must be its value
    # (their CRS attributes are compared when they are placed; GeoTransform differs)
    if mapping and all(m is not None for m in mapping) and \
            compare_shared(ctx, g.mapping, mapping, "is the tiles' grid mapping"):
        m = first[g.mapping]
        attrs = dict(m.attrs)
        if "GeoTransform" in attrs:
            attrs["GeoTransform"] = " ".join(repr(float(v)) for v in (x0, g.dx, 0.0, y0, 0.0, g.dy))
        value = m.values if m.values is not None else np.zeros(m.shape, m.dtype)
        out[g.mapping] = inline_plan(g.mapping, np.asarray(value), m.dims, attrs)
    return out
