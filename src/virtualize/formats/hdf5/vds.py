"""HDF5 virtual datasets (VDS): their extent as HDF5 resolves it, and their mappings
referenced directly into the source files' chunks where they line up.

A VDS is read with the file opened by its path: HDF5 finds a mapping's source file
relative to the VDS file's name, which a file-object driver does not have (it then reads
every source as missing: fill values, an unlimited extent of 0). Its extent is the one
h5py reads (HDF5's default view, last available, and printf gap 0).

Where every mapping is a regular hyperslab taking whole (or chunk-aligned) blocks of a
source dataset of the VDS's own type and placing them at chunk-aligned positions of one
regular grid, with the same codecs in every source, the VDS's block table points into
the sources' chunks: the source files become the inventory's data files (confined to the
VDS file's directory or below it, as followed external links are; the VDS file itself for
`.`), unmapped chunks and missing source files read as the VDS fill value, as HDF5 reads
them. Otherwise the VDS cannot be referenced (`virtual-dataset`, with the reason): it is
inlined when small (read by h5py through the file opened by path), else refused.
"""

from __future__ import annotations

import math
import os
import re

import h5py
import numpy as np

from ... import storage
from ...conventions import bytes_codec
from ...model import MATERIALIZED, BlockTable, Source, Variable, empty_refs
from .._values import COORD_VALUES_LIMIT
from .codecs import _fill_value, _numeric_dtype, stored_type_differs
from .index import MAX_BLOCKS

# printf-style source names: %b is the block number, %% a percent sign
_PRINTF = re.compile(r"%[b%]")
MAX_PRINTF = 100_000  # source files of one printf mapping looked for, at most


class _Fallback(Exception):
    """The VDS cannot be referenced through its mappings (the reason): inline or refuse."""


class _Refused(Exception):
    """The VDS cannot be virtualized at all (kind, reason): not even inlined."""

    def __init__(self, kind: str, why: str):
        super().__init__(why)
        self.kind = kind


class _ByPath:
    """An HDF5 file opened by its path when first used (`open`, `[name]`), closed quietly."""

    path: str
    file: h5py.File | None

    def open(self) -> h5py.File:
        if self.file is None:
            self.file = h5py.File(self.path, "r")
        return self.file

    def __getitem__(self, name: str):
        return self.open()[name]

    def close(self) -> None:
        if self.file is not None:
            try:
                self.file.close()
            except Exception:
                pass
            self.file = None


class VirtualFiles(_ByPath):
    """A scan's view of its VDS: the scanned file opened by path (HDF5 resolves sources
    against it), the datasets read through it (for inlined values), source files found."""

    def __init__(self, path: str):
        self.path = path
        self.file: h5py.File | None = None
        self.datasets: dict[str, h5py.Dataset] = {}


class _LazyFile(_ByPath):
    """A VDS's source file, open while it is used (a VDS may have thousands): what the
    scanner's followed link targets are (`get`, `close`), opened again when asked."""

    def __init__(self, path: str):
        self.path = path
        self.file: h5py.File | None = None

    def get(self, name: str, default=None):
        return self.open().get(name, default)


class _Src:
    """A mapping's source dataset: its file (opened when asked), name and shape."""

    __slots__ = ("file", "name", "shape")

    def __init__(self, file, name: str, shape: tuple[int, ...]):
        self.file, self.name, self.shape = file, name, shape

    def open(self) -> h5py.Dataset:
        return self.file[self.name]

    def release(self) -> None:
        if isinstance(self.file, _LazyFile):  # (not this file, nor a followed link's)
            self.file.close()


def shape(sc, name: str, ds: h5py.Dataset) -> tuple[int, ...]:
    """A dataset's shape; a VDS's as HDF5 resolves it (its file opened by path)."""
    if sc.header_storage(name, ds) is not None:  # its header read: not a VDS
        return tuple(int(n) for n in ds.shape)
    try:
        if ds.id.get_create_plist().get_layout() == h5py.h5d.VIRTUAL and \
                not storage.is_url(sc.path) and name not in sc._origin:
            return tuple(int(n) for n in sc._vds[name].shape)
    except Exception:  # as the scanner sees it (the VDS itself is judged later)
        pass
    return tuple(int(n) for n in ds.shape)


def by_path(sc, name: str, ds: h5py.Dataset) -> h5py.Dataset | None:
    """`ds` (as the scanner opened it), or where it is a VDS the same dataset opened by the
    file's path, which reads its sources (strings and compounds are read at scan time);
    None when it cannot be (a remote file: refused)."""
    try:
        virtual = ds.id.get_create_plist().get_layout() == h5py.h5d.VIRTUAL
    except Exception:
        return ds
    if not virtual:
        return ds
    if storage.is_url(sc.path) or name in sc._origin:
        sc.problem(name, "virtual-dataset", "HDF5 virtual dataset (VDS) in a remote or linked "
                   f"file: its sources cannot be found as HDF5 finds them; --drop {name} "
                   "virtualizes the rest")
        return None
    try:
        got = sc._vds.datasets[name] = sc._vds.open()[name]
    except Exception as e:
        sc.problem(name, "virtual-dataset", f"HDF5 virtual dataset (VDS): h5py cannot open it "
                   f"by the file's path ({type(e).__name__}: {e}); --drop {name} virtualizes "
                   "the rest")
        return None
    try:  # its source files: recorded as the cube's sources (staleness), confined
        _mappings(sc, name, got, tuple(int(n) for n in got.shape))
    except _Fallback:
        pass
    except _Refused as e:
        sc.problem(name, e.kind, f"HDF5 virtual dataset (VDS): {e}; --drop {name} "
                   "virtualizes the rest")
        return None
    return got


def virtual_variable(sc, name: str, fds: h5py.Dataset, dtype: np.dtype,
                     enum: dict | None) -> Variable | None:
    """The Variable of VDS `name` (`fds`: as the scanner opened it), its problems recorded
    in the scanner `sc`; None when it cannot be virtualized at all."""

    vf = sc._vds
    where = "HDF5 virtual dataset (VDS)"
    if storage.is_url(sc.path):
        sc.problem(name, "virtual-dataset", f"{where} in a remote file: its source files "
                   f"cannot be found as HDF5 finds them; --drop {name} virtualizes the rest")
        return None
    if name in sc._origin:
        sc.problem(name, "virtual-dataset", f"{where} in a file reached by an external link "
                   f"is not followed; --drop {name} virtualizes the rest")
        return None
    try:
        ds = vf.open()[name]
        shape = tuple(int(n) for n in ds.shape)
    except Exception as e:
        sc.problem(name, "virtual-dataset", f"{where}: h5py cannot open it by the file's path "
                   f"({type(e).__name__}: {e}); --drop {name} virtualizes the rest")
        return None
    vf.datasets[name] = ds
    attrs = sc._attrs(name, fds).plain(sc._omitted(name, name))
    if enum is not None:
        attrs["_enum"] = {k: int(v) for k, v in enum.items()}
    dims = sc._dims(name, fds)
    fill = _fill_value(ds, dtype)
    codecs = [bytes_codec(dtype)]
    blocks = None
    try:
        try:
            maps = _mappings(sc, name, ds, shape)
            for m in maps:
                if m.dset is None and m.vsel is not None:
                    sc.problem(name, "virtual-dataset", f"HDF5 virtual dataset: source file "
                               f"{m.label.rpartition(':')[0]} does not exist: its region "
                               "reads as the fill value, as HDF5 reads it (should it appear, "
                               "the cube still reads fill there: virtualize again)",
                               fatal=False)
            blocks, codecs = _direct(sc, name, ds, dtype, shape, fill, maps)
        except _Fallback as e:
            sc.problem(name, "virtual-dataset",
                       f"{where} of shape {shape} cannot be referenced through its mappings: "
                       f"{e}")
            codecs = [bytes_codec(dtype)]
    except _Refused as e:
        sc.problem(name, e.kind, f"{where}: {e}; --drop {name} virtualizes the rest")
        return None
    is_coord = len(shape) == 1 and dims[0] == name.rpartition("/")[2]
    values = None
    if is_coord and blocks is not None and shape[0] <= COORD_VALUES_LIMIT:
        values = ds[()]
    return Variable(name=name, dtype=dtype, shape=shape, dims=dims, attrs=attrs,
                    fill_value=fill, codecs=codecs, blocks=blocks, values=values,
                    is_coordinate=is_coord)


# -- mappings -------------------------------------------------------------------------

class _Map:
    """One resolved mapping: the virtual and source selections per axis as block lists
    [(start, length)], the source (`path` index: 0 this file, k > 0 data file k - 1;
    None: missing) and its dataset."""

    __slots__ = ("vsel", "ssel", "path", "dset", "label", "unlimited", "index")

    def __init__(self, vsel, ssel, path, dset, label, unlimited, index=0):
        self.vsel, self.ssel, self.path, self.dset = vsel, ssel, path, dset
        self.label, self.unlimited, self.index = label, unlimited, index


def _hyperslab(space, shape):
    """A selection as (start, stride, count, block) per axis (count may be UNLIMITED)."""
    kind = space.get_select_type()
    if kind == h5py.h5s.SEL_ALL:
        return [(0, 1, 1, int(n)) for n in shape]
    if kind == h5py.h5s.SEL_NONE:
        return None
    if kind != h5py.h5s.SEL_HYPERSLABS or not space.is_regular_hyperslab():
        raise _Fallback("a mapping selects points or an irregular hyperslab")
    start, stride, count, block = space.get_regular_hyperslab()
    return [tuple(int(x) for x in t) for t in zip(start, stride, count, block)]


MAX_RUNS = 1_000_000  # blocks of one selection along one axis, at most


def _blocks_along(s, t, c, b, limit=None):
    """The blocks [(start, length)] a regular hyperslab selects along one axis (runs that
    touch joined); with an unlimited count, those before `limit` (the last one cut there)."""
    if b > t and c != 1:
        raise _Fallback("a mapping's hyperslab blocks overlap")
    unlimited = c == h5py.h5s.UNLIMITED
    if unlimited:
        if limit is None:
            raise _Fallback("an unlimited selection could not be resolved")
        if b == t:
            return [(s, limit - s)] if limit > s else []
        c = max(0, -(-(limit - s) // t))
    elif b == t or c == 1:
        return [(s, c * b)] if c else []
    if c > MAX_RUNS:
        raise _Fallback(f"a mapping selects {c} separate blocks along one axis")
    out = [(s + k * t, b) for k in range(c)]
    if unlimited and out:
        last = out[-1]
        out[-1] = (last[0], min(last[1], limit - last[0]))
    return out


def _first(s, t, b, n):
    """The first n elements of an unlimited selection along one axis, as blocks."""
    if b == t:
        return [(s, n)] if n else []
    k, rest = divmod(n, b)
    if k + 1 > MAX_RUNS:
        raise _Fallback(f"a mapping selects {k} separate blocks along one axis")
    return [(s + i * t, b) for i in range(k)] + ([(s + k * t, rest)] if rest else [])


def _count(blocks) -> int:
    return sum(ln for _s, ln in blocks)


def _mappings(sc, name: str, ds, shape) -> list[_Map]:
    if os.environ.get("HDF5_VDS_PREFIX"):
        raise _Refused("virtual-dataset", "HDF5_VDS_PREFIX is set, so where HDF5 finds its "
                       "sources depends on it")
    dcpl = ds.id.get_create_plist()
    n = dcpl.get_virtual_count()
    base = os.path.dirname(os.path.realpath(sc.path))
    # every named source first: confined, and recorded as a source (staleness) even when
    # the VDS is inlined
    found: dict[int, tuple] = {}
    for j in range(n):
        fname, dname = dcpl.get_virtual_filename(j), dcpl.get_virtual_dsetname(j)
        if not (_PRINTF.search(fname) or _PRINTF.search(dname)):
            try:
                found[j] = _source(sc, base, fname, dname)
            except _Fallback as e:
                found[j] = e
    out = []
    for j in range(n):
        fname = dcpl.get_virtual_filename(j)
        dname = dcpl.get_virtual_dsetname(j)
        vspace = dcpl.get_virtual_vspace(j)
        try:
            sspace = dcpl.get_virtual_srcspace(j)
        except Exception as e:
            raise _Fallback(f"mapping {j}'s source selection cannot be read ({e})") from e
        vhs = _hyperslab(vspace, shape)
        if vhs is None:
            continue
        # a selection of all of the source: of its extent when opened (HDF5 2 keeps no
        # extent for it before)
        shs = "all" if sspace.get_select_type() == h5py.h5s.SEL_ALL else \
            _hyperslab(sspace, sspace.shape)
        if shs is None:
            continue
        printf = bool(_PRINTF.search(fname)) or bool(_PRINTF.search(dname))
        if printf:
            out += _printf_maps(sc, base, j, fname, dname, vhs, shs, sspace.shape)
            continue
        if isinstance(found[j], _Fallback):
            raise found[j]
        path, dset, label = found[j]
        out.append(_resolve(j, vhs, shs, sspace.shape, path, dset, label))
    return out


def _expand(fmt: str, k: int) -> str:
    return _PRINTF.sub(lambda m: str(k) if m.group() == "%b" else "%", fmt)


def _printf_maps(sc, base, j, fname, dname, vhs, shs, sshape) -> list[_Map]:
    """A printf-style mapping: virtual block k from source `fname` % k (gap 0: up to the
    first source missing, as HDF5's default printf gap)."""
    unl = [a for a, (_s, _t, c, _b) in enumerate(vhs) if c == h5py.h5s.UNLIMITED]
    if len(unl) != 1 or shs != "all" and any(c == h5py.h5s.UNLIMITED for _s, _t, c, _b in shs):
        raise _Fallback(f"mapping {j} ({fname}) names printf-style sources without one "
                        "unlimited virtual axis")
    a = unl[0]
    s, t, _c, b = vhs[a]
    out = []
    for k in range(MAX_PRINTF):
        f = _expand(fname, k)
        d = _expand(dname, k)
        path, dset, label = _source(sc, base, f, d, printf=True)
        if dset is None:
            break
        v = list(vhs)
        v[a] = (s + k * t, 1, 1, b)
        out.append(_resolve(j, v, shs, sshape, path, dset, label, unlimited=True))
    else:
        raise _Fallback(f"mapping {j} ({fname}) has more than {MAX_PRINTF} source files")
    if not out:  # no block at all: the mapping spans nothing
        out.append(_Map(None, None, None, None, fname, True, j))
    return out


def _source(sc, base, fname: str, dname: str, printf: bool = False):
    """Where HDF5 finds a mapping's source: (path index, dataset, label). A missing file
    is (None, None, label); a printf source that is missing or without the dataset ends
    its sequence (None, None). Files outside the VDS file's directory are refused."""
    label = f"{fname}:{dname}"
    if fname == ".":
        return _opened(sc._vds, 0, dname, label, printf)
    if os.path.isabs(fname) and os.path.exists(fname):
        target = os.path.realpath(fname)
    else:  # HDF5 looks beside the VDS file, then in the working directory (an absolute
        # name that does not exist: for its base name)
        rel = os.path.basename(fname) if os.path.isabs(fname) else fname
        here = os.path.join(os.path.dirname(os.path.abspath(sc.path)), rel)
        if not os.path.exists(here):
            if os.path.exists(rel) and os.path.realpath(rel) != os.path.realpath(here):
                raise _Refused("virtual-dataset", f"source file {fname} is found only "
                               "relative to the working directory")
            return None, None, label  # missing: HDF5 reads fill (printf: the sequence ends)
        target = os.path.realpath(here)
    if target == os.path.realpath(sc.path):
        return _opened(sc._vds, 0, dname, label, printf)
    if not target.startswith(base + os.sep):
        raise _Refused("external-link", f"its source file {target} is not in {base} or below "
                       "it, where the cube's sources are")
    if target not in sc._targets:
        try:
            st = os.stat(target)
            tf = _LazyFile(target)
            tf.open()
        except Exception as e:
            if printf:
                return None, None, label
            raise _Fallback(f"source file {target} cannot be opened as HDF5 "
                            f"({type(e).__name__}: {e})") from e
        sc._targets[target] = (tf, Source(target, st.st_size, st.st_mtime_ns,
                                          referenced_by=sc.path))
    tf, _src = sc._targets[target]
    return _opened(tf, list(sc._targets).index(target) + 1, dname, label, printf)


def _opened(file, k: int, dname: str, label: str, printf: bool):
    """(k, the source dataset, label) once it opens; the file closed again."""
    src = None
    try:
        dset = file[dname]
        if not isinstance(dset, h5py.Dataset):
            raise KeyError("not a dataset")
        src = _Src(file, dname, tuple(int(n) for n in dset.shape))
    except Exception as e:
        if printf:
            return None, None, label
        raise _Fallback(f"source {label} cannot be opened ({type(e).__name__}: {e})") from e
    finally:
        if src is not None:
            src.release()
        elif isinstance(file, _LazyFile):
            file.close()
    return k, src, label


def _resolve(j, vhs, shs, sshape, path, dset, label, unlimited=False) -> _Map:
    """The mapping's selections as block lists per axis, unlimited counts clipped as HDF5
    clips them: the source's to its current extent, the virtual one to as many elements."""
    if dset is None:  # missing: its virtual region only (read as fill)
        if any(h[2] == h5py.h5s.UNLIMITED for h in vhs):
            return _Map([[] for _h in vhs], None, None, None, label, True, j)
        return _Map([_blocks_along(*h) for h in vhs], None, None, None, label, False, j)
    actual = tuple(int(n) for n in dset.shape)
    if shs == "all":
        shs = [(0, 1, 1, n) for n in actual]
    if len(actual) != len(shs):
        raise _Fallback(f"source {label} has rank {len(actual)}, the mapping {len(shs)}")
    v_unl = [a for a, h in enumerate(vhs) if h[2] == h5py.h5s.UNLIMITED]
    s_unl = [a for a, h in enumerate(shs) if h[2] == h5py.h5s.UNLIMITED]
    if len(s_unl) > 1 or len(v_unl) > 1:
        raise _Fallback(f"mapping {j} has more than one unlimited axis")
    ssel = [_blocks_along(*h, limit=actual[a]) for a, h in enumerate(shs)]
    for a, bl in enumerate(ssel):
        if bl and bl[-1][0] + bl[-1][1] > actual[a]:
            raise _Fallback(f"mapping {j} selects past the extent of source {label}")
    if v_unl:
        a = v_unl[0]
        total = math.prod(_count(bl) for bl in ssel)
        other = math.prod(_count(_blocks_along(*h)) for b, h in enumerate(vhs) if b != a)
        if other == 0 or total % other:
            raise _Fallback(f"mapping {j}'s unlimited selections cannot be matched")
        s, t, _c, b = vhs[a]
        vsel = [_blocks_along(*h) if i != a else _first(s, t, b, total // other)
                for i, h in enumerate(vhs)]
        unlimited = True
    else:
        vsel = [_blocks_along(*h) for h in vhs]
    if math.prod(_count(bl) for bl in vsel) != math.prod(_count(bl) for bl in ssel):
        raise _Fallback(f"mapping {j}'s selections differ in size")
    return _Map(vsel, ssel, path, dset, label, unlimited, j)


# -- the direct path ---------------------------------------------------------------------

def _listed(sel):
    """The axes along which a selection takes more than one element."""
    return [a for a, bl in enumerate(sel) if _count(bl) != 1]


def _segments(vbl, sbl):
    """Per-axis runs where both selections are contiguous: [(vstart, sstart, length)]."""
    out = []
    vi = si = 0
    vs, vl = vbl[0] if vbl else (0, 0)
    ss, sl = sbl[0] if sbl else (0, 0)
    while vi < len(vbl) and si < len(sbl):
        n = min(vl, sl)
        out.append((vs, ss, n))
        vs, vl, ss, sl = vs + n, vl - n, ss + n, sl - n
        if vl == 0:
            vi += 1
            if vi < len(vbl):
                vs, vl = vbl[vi]
        if sl == 0:
            si += 1
            if si < len(sbl):
                ss, sl = sbl[si]
    return out


def _source_table(sc, name, m, src, dtype, n: int):
    """A mapping's source dataset's block table, codecs and fill value bytes, built as the
    scanner builds any dataset's (`_Fallback` when it cannot be referenced)."""

    sdtype, _enum = _numeric_dtype(src.dtype)
    if sdtype is None or sdtype != dtype:
        raise _Fallback(f"source {m.label} is of type {src.dtype}, the VDS of {dtype} "
                        "(HDF5 converts)")
    odd = stored_type_differs(src.id.get_type(), sdtype)
    if odd:
        raise _Fallback(f"source {m.label}: {odd}")
    key = f"{name}\x00vds{n}"
    saved, sc.problems = sc.problems, []
    try:
        if m.path:  # a dataset of another file: its index read as a linked one's
            sc._origin[key] = m.path - 1
        st = sc._storage(key, src)
        if st.layout not in (h5py.h5d.CHUNKED, h5py.h5d.CONTIGUOUS) or st.external:
            raise _Fallback(f"source {m.label} is neither chunked nor contiguous")
        if st.layout == h5py.h5d.CONTIGUOUS:
            return _contiguous(m, st, src, sdtype)
        bt, cod = sc._blocks(key, src, sdtype, st)
        found = sc.problems
    finally:
        sc.problems = saved
        sc._origin.pop(key, None)
    if bt is None or found:
        why = found[0].message if found else "its blocks cannot be referenced"
        raise _Fallback(f"source {m.label}: {why}")
    if (bt.refs["path"] == MATERIALIZED).any():
        raise _Fallback(f"source {m.label} has chunks that decode differently")
    return bt, cod, _fill_value(src, dtype).tobytes()


def _contiguous(m, st, src, dtype):
    """A contiguous source: ((offset or None, bytes), codecs, fill bytes); its blocks are
    cut when every source's mapping is known (`_contiguous_table`)."""

    if not m.dset.shape:
        raise _Fallback(f"source {m.label} is a scalar")
    offset, nbytes = st.contiguous
    expected = math.prod(m.dset.shape) * dtype.itemsize
    if offset is not None and nbytes and nbytes != expected:
        raise _Fallback(f"source {m.label}'s contiguous data is {nbytes} bytes, {expected} "
                        "expected")
    where = (offset, nbytes) if offset is not None and nbytes else (None, 0)
    return where, [bytes_codec(dtype)], _fill_value(src, dtype).tobytes()


def _contiguous_rows(found, dtype) -> int | None:
    """The rows of a block of the contiguous sources: the chunked sources' grid along the
    axis a contiguous source's first axis is mapped to, else the greatest common divisor
    of every run's start and length along it (in the VDS and the source); 1 when a
    mapping takes one row of it."""
    chunked = [(m, bt) for m, bt, _c, _f in found if isinstance(bt, BlockTable)]
    plain = [m for m, bt, _c, _f in found if not isinstance(bt, BlockTable)]
    if not plain:
        return None
    if chunked:  # the grid is the chunked sources': the axis first mapped with them
        m, bt = chunked[0]
        sl, vl = _listed(m.ssel), _listed(m.vsel)
        grid = {va: bt.block_shape[sa] for va, sa in zip(vl, sl)}
        for p in plain:
            psl, pvl = _listed(p.ssel), _listed(p.vsel)
            if psl and psl[0] == 0:
                return grid.get(pvl[0], 1)
        return 1
    g = 0
    for p in plain:
        psl, pvl = _listed(p.ssel), _listed(p.vsel)
        if not psl or psl[0] != 0:
            return 1
        for v0, s0, n in _segments(p.vsel[pvl[0]], p.ssel[0]):
            g = math.gcd(g, v0, s0, n)
    return g or 1


def _contiguous_table(m, where, rows: int, dtype) -> BlockTable:
    """A contiguous source's blocks of `rows` rows (the last one short, stored so)."""
    shape = tuple(int(n) for n in m.dset.shape)
    rows = max(1, min(rows, shape[0])) if shape[0] else 1
    n = -(-shape[0] // rows)
    refs = empty_refs((n,) + (1,) * (len(shape) - 1))
    offset, _nbytes = where
    if offset is not None and n:
        row = math.prod(shape[1:]) * dtype.itemsize
        flat = refs.reshape(-1)
        starts = np.arange(n, dtype=np.uint64) * rows
        flat["offset"] = offset + starts * row
        flat["length"] = (np.minimum(starts + rows, shape[0]) - starts) * row
    return BlockTable((rows,) + tuple(max(k, 1) for k in shape[1:]), padded=False, refs=refs)


def _boxes(sel):
    """The boxes [(start, length) per axis] a selection of block lists covers."""
    import itertools

    return itertools.product(*sel)


def _direct(sc, name, ds, dtype, shape, fill, maps):

    ndim = len(shape)
    # the extent, as this resolution finds it, must be the one HDF5 resolved
    ends: dict[int, list[int]] = {}  # per unlimited mapping: where it ends on each axis
    for m in maps:
        if m.unlimited:
            e = ends.setdefault(m.index, [0] * ndim)
            for a, bl in enumerate(m.vsel or ()):
                e[a] = max(e[a], bl[-1][0] + bl[-1][1] if bl else 0)
    for a in range(ndim):
        if ds.maxshape[a] is not None:
            continue
        got = [e[a] for e in ends.values()]
        if not got:
            continue
        if max(got) != shape[a]:
            raise _Fallback(f"its extent along axis {a} ({shape[a]}, as HDF5 resolves it) "
                            "could not be confirmed from its mappings")
        if min(got) != max(got):
            sc.problem(name, "virtual-dataset", f"HDF5 virtual dataset: its extent along axis "
                       f"{a} is {max(got)} as h5py reads it (HDF5's default view, last "
                       f"available); readers using the first-missing view see {min(got)}",
                       fatal=False)
    chunk = None
    codecs = None
    padded = None
    tables = []
    missing = []
    found = []  # (mapping, table or contiguous (offset, bytes), codecs, fill bytes)
    for m in maps:
        if m.vsel is None:
            continue
        for a, bl in enumerate(m.vsel):
            if bl and bl[-1][0] + bl[-1][1] > shape[a]:
                raise _Fallback(f"a mapping of {m.label} reaches past the extent")
        if m.dset is None:
            missing.append(m)
            continue
        try:
            table = _source_table(sc, name, m, m.dset.open(), dtype, len(found))
        finally:
            m.dset.release()
        found.append((m, *table))
        cod = table[1]
        if codecs is None:
            codecs = cod
        elif cod != codecs:
            raise _Fallback(f"source {m.label} is stored with other codecs than the others")
    # contiguous sources are cut into blocks of whole rows (of their first axis), as many
    # as every mapping of one allows, or as the chunked sources' grid wants (the planner
    # cuts blocks larger than --chunk-size further)
    rows = _contiguous_rows(found, dtype)
    for m, bt, _cod, sfill in found:
        if not isinstance(bt, BlockTable):
            bt = _contiguous_table(m, bt, rows, dtype)
        sl, vl = _listed(m.ssel), _listed(m.vsel)
        if [_count(m.ssel[a]) for a in sl] != [_count(m.vsel[a]) for a in vl]:
            raise _Fallback(f"the mapping of {m.label} is not a block of the same shape")
        for a in range(len(m.dset.shape)):  # an axis the mapping takes one element of: one
            # element per chunk
            if a not in sl and bt.block_shape[a] != 1:
                raise _Fallback(f"source {m.label}'s chunks ({bt.block_shape}) hold more than "
                                f"the mapping takes along its axis {a}")
        c = [1] * ndim
        for va, sa in zip(vl, sl):
            c[va] = bt.block_shape[sa]
        c = tuple(c)
        if chunk is None:
            chunk = c
        elif c != chunk:
            raise _Fallback(f"source {m.label}'s chunks ({bt.block_shape}) do not form one "
                            "grid with the others")
        tables.append((m, bt, vl, sl, sfill))
    if chunk is None:
        chunk = tuple(max(n, 1) for n in shape)
        codecs = None
    grid = tuple(-(-n // c) for n, c in zip(shape, chunk))
    if math.prod(grid) > MAX_BLOCKS:
        raise _Fallback(f"its {math.prod(grid)} chunks are too many")
    refs = empty_refs(grid)
    taken = np.zeros(grid, dtype=bool)
    fbytes = np.asarray(fill, dtype=dtype).tobytes()
    for m, bt, vl, sl, sfill in tables:
        if any(not bl for bl in m.vsel) or any(not bl for bl in m.ssel):
            continue  # selects nothing (an unlimited source of no elements)
        vidx = [None] * ndim
        sidx = [None] * len(m.ssel)
        for a in range(ndim):
            if a not in vl:
                ((v0, _n),) = m.vsel[a]
                vidx[a] = np.array([v0 // chunk[a]])
        for a in range(len(m.ssel)):
            if a not in sl:
                ((s0, _n),) = m.ssel[a]
                sidx[a] = np.array([s0 // bt.block_shape[a]])
        short = edge_full = False
        for va, sa in zip(vl, sl):
            c = chunk[va]
            vv, ss = [], []
            for v0, s0, n in _segments(m.vsel[va], m.ssel[sa]):
                full = n % c == 0
                if v0 % c or s0 % c or not (full or v0 + n == shape[va]):
                    raise _Fallback(f"the mapping of {m.label} is not aligned with the chunks "
                                    f"({chunk}) along axis {va}")
                if not full and not bt.padded:
                    if s0 + n != int(m.dset.shape[sa]):
                        raise _Fallback(f"source {m.label}'s short block lands inside the VDS")
                    short = True
                elif not full:
                    edge_full = True  # a padded chunk at the VDS's edge, stored full size
                k = -(-n // c)
                vv.append(v0 // c + np.arange(k))
                ss.append(s0 // c + np.arange(k))
            vidx[va] = np.concatenate(vv) if vv else np.zeros(0, int)
            sidx[sa] = np.concatenate(ss) if ss else np.zeros(0, int)
        for want, used in ((False, short), (True, edge_full)):
            if used:
                if padded is not None and padded != want:
                    raise _Fallback("its sources store their short edge blocks differently")
                padded = want
        got = bt.refs[np.ix_(*sidx)].reshape([len(i) for i in vidx])
        spot = np.ix_(*vidx)
        if taken[spot].any():
            raise _Fallback("its mappings overlap")
        taken[spot] = True
        absent = got["length"] == 0
        if absent.any() and sfill != fbytes:
            raise _Fallback(f"source {m.label} has chunks never written, whose fill value is "
                            "not the VDS's")
        got = got.copy()
        got["path"][~absent] = m.path
        refs[spot] = got
    for m in missing:  # read as fill: none of its chunks may hold a source's data
        if math.prod(len(bl) for bl in m.vsel) > MAX_RUNS:
            raise _Fallback(f"missing source {m.label}'s region has too many blocks")
        for box in _boxes(m.vsel):
            spot = tuple(slice(v0 // c, -(-(v0 + n) // c)) for (v0, n), c in zip(box, chunk))
            if taken[spot].any():
                raise _Fallback(f"missing source {m.label}'s region shares chunks with other "
                                "sources' data")

    codecs = codecs or [bytes_codec(dtype)]
    return BlockTable(chunk, padded=True if padded is None else padded, refs=refs), codecs
