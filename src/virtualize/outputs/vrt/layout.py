"""What a GDAL VRT of a plan holds: its one raster array, its bands, and per band the
source files in the order GDAL paints them, each placed by SrcRect/DstRect; or the
located problems that keep a plan from being one VRT that GDAL reads exactly.

GDAL's rules (VRT driver, SimpleSource): sources are painted in order, the later on top,
each opaque (a SimpleSource copies the source's values, its nodata included); what no
source covers reads as the band's NoDataValue, or 0 without one. The layout is checked
against the plan's own references chunk by chunk: the source GDAL shows last over a chunk
must cover the whole chunk and be the file the chunk references (or whose window it is:
a padded or cut block, `ArrayPlan.materialize`), and a chunk no file holds (a gap) must
read as the cube's fill value. Pure: reads no source bytes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ...model import MATERIALIZED, ArrayPlan, Location, Plan, Problem

KIND = "vrt-unsupported"  # the problem kind of everything a VRT cannot hold
Y_NAMES = ("y", "lat", "latitude")
X_NAMES = ("x", "lon", "longitude")
SAMPLES = "band"  # a TIFF's samples axis: GDAL's bands of the file, in order

# numpy -> GDAL data types that hold every value exactly (Int8 needs GDAL >= 3.7, Int64 /
# UInt64 GDAL >= 3.5: an older GDAL refuses to open the VRT, "Invalid dataType")
GDAL_TYPES = {"u1": "Byte", "i1": "Int8", "u2": "UInt16", "i2": "Int16", "u4": "UInt32",
              "i4": "Int32", "u8": "UInt64", "i8": "Int64", "f4": "Float32", "f8": "Float64",
              "c8": "CFloat32", "c16": "CFloat64"}
INSTEAD = "write a cube (-o cube.zarr) or a kerchunk JSON (-o cube.json) instead"


@dataclass
class Placed:
    """One source of a band: file `source` (index into Plan.sources), its band `band`
    (1-based), its `height` x `width` pixels painted at (`row0`, `col0`)."""

    source: int
    band: int
    row0: int
    col0: int
    height: int
    width: int
    derived: bool = False  # placed where its chunks are: to be confirmed by its header


@dataclass
class VrtLayout:
    name: str  # the raster array
    array: ArrayPlan
    height: int
    width: int
    gdal_type: str
    bands: list[list[Placed]] = field(default_factory=list)  # per band, in paint order
    nodata: object = None  # the band's NoDataValue, or None


def vrt_layout(plan: Plan) -> VrtLayout:
    """The VRT of `plan`, or a VirtualizeError with every problem found."""
    from ...model import VirtualizeError

    problems: list[Problem] = []
    layout = _layout(plan, problems)
    if problems or layout is None:
        raise VirtualizeError(problems, f"cannot write a GDAL VRT: {len(problems)} problem(s); "
                              f"nothing was written ({INSTEAD})")
    return layout


def _problem(problems, message, *, file=None, variable=None, axis=None, block=None) -> None:
    problems.append(Problem(Location(file, variable, axis, block), KIND, message))


def _layout(plan: Plan, problems: list[Problem]) -> VrtLayout | None:
    rasters = [n for n, a in plan.arrays.items() if a.inline is None and a.refs is not None]
    if len(rasters) != 1:
        what = ", ".join(rasters) if rasters else "none"
        _problem(problems, f"a VRT holds one raster; the cube has {len(rasters)} referenced "
                 f"arrays ({what}): drop all but one (--drop), or {INSTEAD}")
        return None
    name = rasters[0]
    a = plan.arrays[name]
    if "/" in name:
        _problem(problems, f"a VRT holds a raster at the root; {name} is in a group: {INSTEAD}",
                 variable=name)
        return None
    dims = a.dims
    ys = [i for i, d in enumerate(dims) if d in Y_NAMES]
    xs = [i for i, d in enumerate(dims) if d in X_NAMES]
    if not (len(dims) in (2, 3) and len(ys) == 1 and len(xs) == 1 and xs[0] == ys[0] + 1):
        _problem(problems, f"a VRT holds a 2-D (y, x) or 3-D (band, y, x) / (y, x, band) "
                 f"raster; {name} has dims {dims}: {INSTEAD}", variable=name)
        return None
    iy, ix = ys[0], xs[0]
    ib = next((i for i in range(len(dims)) if i not in (iy, ix)), None)
    gdal_type = GDAL_TYPES.get(f"{a.dtype.kind}{a.dtype.itemsize}")
    if gdal_type is None:
        _problem(problems, f"{name}'s type {a.dtype} has no GDAL data type that holds its "
                 f"values exactly: {INSTEAD}", variable=name)
    lossy = [c.get("name") for c in a.codecs if "jpeg" in str(c.get("name", "")).lower()]
    if lossy:
        _problem(problems, f"{name} is stored with {lossy[0]}: a lossy code whose decoded "
                 "values (and colour conversion) depend on the decoder, so GDAL's read may "
                 f"differ from the cube's: {INSTEAD}", variable=name)
    if a.refs.ndim != len(dims):
        _problem(problems, f"{name}'s references do not span its axes", variable=name)
        return None
    height, width = int(a.shape[iy]), int(a.shape[ix])
    nbands = int(a.shape[ib]) if ib is not None else 1
    owner = _owners(a)
    placed = _placements(plan, name, a, owner, iy, ix, ib, problems)
    if placed is None:
        return None
    nodata, sparse = _nodata(a, owner)
    layout = VrtLayout(name, a, height, width, gdal_type or "", nodata=nodata)
    edges = [_edges(a.chunk_lengths[ax], int(a.shape[ax])) for ax in range(len(dims))]
    for b in range(nbands):
        sources = placed(b)
        if sources is None:
            return None
        _check_band(plan, name, a, owner, edges, iy, ix, ib, b, sources, sparse, problems)
        layout.bands.append(sources)
    return layout


def _owners(a: ArrayPlan) -> np.ndarray:
    """Per chunk: the source whose values it holds (referenced, or a window of it), -1 for
    none."""
    refs = a.refs
    held = (refs["length"] > 0) & (refs["path"] != MATERIALIZED)
    owner = np.where(held, refs["path"].astype(np.int64), -1)
    for index, cell in a.materialize.items():
        owner[index] = cell.source
    return owner


def _edges(lengths, n: int) -> np.ndarray:
    """Chunk boundaries along an axis, clipped to its length (an overhanging last chunk)."""
    return np.minimum(np.concatenate([[0], np.cumsum(np.asarray(lengths, dtype=np.int64))]), n)


def _placements(plan, name, a, owner, iy, ix, ib, problems):
    """A function band -> its sources in paint order (or None after a problem)."""
    sources = [s.path for s in plan.sources]
    nbands = int(a.shape[ib]) if ib is not None else 1
    bdim = a.dims[ib] if ib is not None else None
    if plan.mosaic is not None:
        index = {p: i for i, p in enumerate(sources)}
        tiles = [(index[t[0]], *map(int, t[1:])) for t in plan.mosaic.tiles if t[0] in index]
        if (plan.recipe or {}).get("overlap") == "first":
            tiles = tiles[::-1]  # the first tile wins: painted last
        if ib is not None and bdim != SAMPLES:  # a mosaic over time: each date its tiles
            return _dated(plan, name, a, owner, iy, ix, ib, problems)
        return lambda b: [Placed(s, b + 1, r, c, h, w) for s, r, c, h, w in tiles]
    used = sorted(set(np.unique(owner).tolist()) - {-1})
    height, width = int(a.shape[iy]), int(a.shape[ix])
    if len(used) <= 1:  # one file (or none: all gaps)
        if ib is not None and bdim != SAMPLES and nbands > 1:
            _problem(problems, f"{name}'s axis {bdim} is not a samples (band) axis GDAL reads "
                     f"as the file's bands: {INSTEAD}", variable=name, axis=bdim)
            return None
        return lambda b: [Placed(s, b + 1, 0, 0, height, width) for s in used]
    axis = a.dims.index(plan.concat_dim) if plan.concat_dim in a.dims else None
    if axis is None:
        _problem(problems, f"{name} is made of {len(used)} files, but not stacked along one of "
                 f"its axes: {INSTEAD}", variable=name)
        return None
    span = _spans(plan, name, a, owner, axis, problems)
    if span is None:
        return None
    if axis == ib and bdim != SAMPLES and any(stop - start != 1 for start, stop in span.values()):
        _problem(problems, f"{name} is stacked along {bdim}, an axis of the files that GDAL "
                 f"does not read as bands: {INSTEAD}", variable=name, axis=bdim)
        return None
    if axis != ib and ib is not None and bdim != SAMPLES:
        _problem(problems, f"{name}'s axis {bdim} is not a samples (band) axis GDAL reads as "
                 f"the files' bands: {INSTEAD}", variable=name, axis=bdim)
        return None

    def band(b):
        out = []
        for s, (start, stop) in span.items():
            if axis == ib:
                if start <= b < stop:
                    out.append(Placed(s, b - start + 1, 0, 0, height, width))
            elif axis == iy:
                out.append(Placed(s, b + 1, start, 0, stop - start, width))
            else:
                out.append(Placed(s, b + 1, 0, start, height, stop - start))
        return out
    return band


def _dated(plan, name, a, owner, iy, ix, ib, problems):
    """A mosaic over `a.dims[ib]` (time): band b is date b, its sources the 2-D tiles of
    that date in the order overlaps were settled, each placed where the planner put it
    (`MosaicFigure.dated`; else where its chunks are, the window they span); the writer
    checks it is the whole file, from the file's header (a tile whose edge blocks are all
    sparse is refused there, not misplaced)."""
    edges = [_edges(a.chunk_lengths[ax], int(a.shape[ax])) for ax in range(a.refs.ndim)]
    dim = a.dims[ib]
    moved = np.moveaxis(owner, (ib, iy, ix), (0, 1, 2))
    moved = moved.reshape(moved.shape[:3] + (-1,))
    if moved.shape[3] != 1:
        _problem(problems, f"{name} is 4-D or more: {INSTEAD}", variable=name)
        return None
    slabs = moved[..., 0]
    ye, xe, be = edges[iy], edges[ix], edges[ib]
    if np.any(np.diff(be) != 1):
        _problem(problems, f"{name}'s {dim} chunks are not one date each: {INSTEAD}",
                 variable=name, axis=dim)
        return None
    # each file's place in the grid as the planner put it, in the order overlaps were
    # settled (a tile that loses part of itself to another holds fewer blocks than it is
    # big: placed by its blocks, GDAL would paint all of it squeezed there)
    index = {p: i for i, p in enumerate(s.path for s in plan.sources)}
    grid = [(index[t[0]], *map(int, t[1:])) for t in (plan.mosaic.dated if plan.mosaic else ())
            if t[0] in index]
    if (plan.recipe or {}).get("overlap") == "first":
        grid = grid[::-1]  # the first tile wins: painted last
    rank = {t[0]: k for k, t in enumerate(grid)}
    at = {t[0]: t[1:] for t in grid}
    dates: dict[int, int] = {}
    bands: list[list[Placed]] = []
    for b, slab in enumerate(slabs):
        placed = []
        for s in sorted(set(np.unique(slab).tolist()) - {-1}, key=lambda s: (rank.get(s, -1), s)):
            if dates.setdefault(s, b) != b:
                _problem(problems, f"{plan.sources[s].path} holds blocks of two {dim} steps "
                         f"of {name} ({dates[s]} and {b}): GDAL's band {b + 1} would need its "
                         f"band {b - dates[s] + 1}; {INSTEAD}", file=plan.sources[s].path,
                         variable=name, axis=dim)
                return None
            if s in at:  # (its header confirms the size; _check_band the blocks it wins)
                r0, c0, h, w = at[s]
                placed.append(Placed(s, 1, r0, c0, h, w, derived=True))
                continue
            rows, cols = np.nonzero(slab == s)
            r0, r1 = int(ye[rows.min()]), int(ye[rows.max() + 1])
            c0, c1 = int(xe[cols.min()]), int(xe[cols.max() + 1])
            placed.append(Placed(s, 1, r0, c0, r1 - r0, c1 - c0, derived=True))
        bands.append(placed)
    return lambda b: bands[b]


def _spans(plan, name, a, owner, axis, problems) -> dict[int, tuple[int, int]] | None:
    """A stack's files: each one's [start, stop) along the stacking axis, from the chunks
    it holds (each slab of chunks across that axis belongs to one file)."""
    edges = _edges(a.chunk_lengths[axis], int(a.shape[axis]))
    slabs = np.moveaxis(owner, axis, 0).reshape(owner.shape[axis], -1)
    span: dict[int, tuple[int, int]] = {}
    last = None
    for k, slab in enumerate(slabs):
        held = set(np.unique(slab).tolist()) - {-1}
        if len(held) != 1:
            why = "no file holds any block of it" if not held else "several files share it"
            _problem(problems, f"{name}: which file holds {a.dims[axis]} {edges[k]}..."
                     f"{edges[k + 1]} cannot be told ({why}): {INSTEAD}", variable=name,
                     axis=a.dims[axis])
            return None
        (s,) = held
        if s in span and s != last:
            _problem(problems, f"{name}: {plan.sources[s].path} holds two separate ranges of "
                     f"{a.dims[axis]}: {INSTEAD}", file=plan.sources[s].path, variable=name,
                     axis=a.dims[axis])
            return None
        start = span[s][0] if s in span else int(edges[k])
        span[s] = (start, int(edges[k + 1]))
        last = s
    return span


def _nodata(a: ArrayPlan, owner: np.ndarray):
    """(the band's NoDataValue or None, what a sparse block of a source reads as in GDAL:
    its nodata, or 0). The tiles' nodata (`_FillValue`) is the band's; without one, gaps
    need a NoDataValue only when the cube's fill value is not GDAL's 0."""
    fill = a.fill_value
    declared = a.attrs.get("_FillValue")
    if declared is not None:
        return fill, fill
    if (owner < 0).any() and not _equal(fill, 0):
        return fill, 0
    return None, 0


def _equal(u, v) -> bool:
    try:
        fu, fv = complex(u), complex(v)
    except (TypeError, ValueError):
        return False
    return fu == fv or (math.isnan(fu.real) and math.isnan(fv.real))


def _check_band(plan, name, a, owner, edges, iy, ix, ib, b, sources, sparse, problems) -> None:
    """GDAL's paint of band `b` against the plan's chunks: the source painted last over a
    chunk must cover all of it and be the chunk's file; a chunk of no file must show none
    (then it reads as the NoDataValue = the fill) or a sparse block of the last source."""
    ye, xe = edges[iy], edges[ix]
    if ib is not None:
        kb = int(np.searchsorted(edges[ib], b, side="right") - 1)
        want = np.take(owner, kb, axis=ib)
    else:
        want = owner
    top = np.full(want.shape, -1, dtype=np.int64)
    whole = np.zeros(want.shape, dtype=bool)
    for p in sources:
        r0, r1, c0, c1 = p.row0, p.row0 + p.height, p.col0, p.col0 + p.width
        ri = np.nonzero((ye[:-1] < r1) & (ye[1:] > r0))[0]
        ci = np.nonzero((xe[:-1] < c1) & (xe[1:] > c0))[0]
        if not len(ri) or not len(ci):
            continue
        inside_r = (ye[ri] >= r0) & (ye[ri + 1] <= r1)
        inside_c = (xe[ci] >= c0) & (xe[ci + 1] <= c1)
        top[np.ix_(ri, ci)] = p.source
        whole[np.ix_(ri, ci)] = inside_r[:, None] & inside_c[None, :]
    fill_ok = _equal(a.fill_value, sparse)
    bad = (want >= 0) & ((top != want) | ~whole)
    bad |= (want < 0) & (top >= 0) & (~whole | (not fill_ok))
    for i, j in list(zip(*np.nonzero(bad)))[:10]:
        rows, cols = f"{ye[i]}:{ye[i + 1]}", f"{xe[j]}:{xe[j + 1]}"
        shown = plan.sources[top[i, j]].path if top[i, j] >= 0 else "the NoDataValue"
        if want[i, j] >= 0:
            held = plan.sources[want[i, j]].path
            why = (f"the cube reads {held} there, GDAL would show {shown}"
                   + ("" if top[i, j] != want[i, j] else " over part of it only"))
        else:
            why = (f"the cube reads its fill value {a.fill_value} there (no block), GDAL "
                   f"would show {shown}")
        block = [0] * a.refs.ndim
        block[iy], block[ix] = int(i), int(j)
        if ib is not None:
            block[ib] = int(np.searchsorted(edges[ib], b, side="right") - 1)
        _problem(problems, f"band {b + 1}, rows {rows}, columns {cols}: {why}: GDAL's rule "
                 f"(sources painted in order, the last on top) does not give the cube's values "
                 f"here; {INSTEAD}", file=shown if top[i, j] >= 0 else None, variable=name,
                 block=tuple(block))
