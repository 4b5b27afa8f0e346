"""Attributes read from an HDF5 file's bytes (`scan/_h5meta.py`) against h5py's reading of
the same attributes, on every kind of attribute, header and storage the reader knows, and
on the fixtures: the direct reader must give what h5py gives (names, order, values, types)
or leave the attribute (ASK_H5PY) or the object (Unexpected) to h5py."""

from __future__ import annotations

import json
import math

import h5py
import numpy as np
import pytest

import virtualize
from virtualize.formats.hdf5 import attrs as hdf5_attrs
from virtualize.formats.hdf5 import header as _h5meta
from virtualize.formats.hdf5 import walk as hdf5_walk

# fixtures of netCDF-4 / HDF5 files written by netCDF4-python, h5py and the HDF5 tools
HDF5_CASES = ["months2024", "years2000_2010", "tenday_padded", "appended_batches",
              "filters_gzip_shuffle", "filters_fletcher32", "filters_none", "contiguous",
              "bigendian", "groups", "dtypes", "h5py_plain", "attr_drift", "sample",
              "nccopy_chunked", "h5repack_gzip"]


def _spacepad(obj, name: bytes, text: bytes) -> None:
    tid = h5py.h5t.C_S1.copy()
    tid.set_size(len(text) + 3)
    tid.set_strpad(h5py.h5t.STR_SPACEPAD)
    attr = h5py.h5a.create(obj.id, name, tid, h5py.h5s.create(h5py.h5s.SCALAR))
    attr.write(np.array(text + b"   ", dtype=f"S{len(text) + 3}"), mtype=tid)


def _fill(obj, many: int = 0) -> None:
    """Attributes of every kind on `obj` (and `many` more small ones)."""
    a = obj.attrs
    for dt in ("i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8"):
        for order in "<>":
            a[f"{dt}{order}"] = np.array(7, dtype=order + dt)
            a[f"{dt}{order}_arr"] = np.arange(3).astype(order + dt)
    a["f8_2d"] = np.arange(6.0).reshape(2, 3)
    a["nan"] = np.float64("nan")
    a["empty_arr"] = np.zeros(0, "f4")
    a["vlen"] = "text, vlen"
    a["vlen_utf8"] = "Ångström °C"
    a["vlen_arr"] = ["a", "bb", "ccc"]
    a["vlen_empty"] = ""
    a["vlen_nul"] = h5py.Empty("f4")  # a null dataspace
    a["fixed"] = np.bytes_(b"fixed text")
    a["fixed_nul"] = np.bytes_(b"ab\0cd")
    a["fixed_arr"] = np.array([b"x", b"yy", b""], dtype="S4")
    a.create("fixed_utf8", "é".encode(), dtype=h5py.string_dtype("utf-8", 8))
    _spacepad(obj, b"spacepad", b"padded")
    a["bool"] = True
    a["complex"] = np.complex64(1 + 2j)
    a["enum"] = np.array(1, dtype=h5py.enum_dtype({"a": 0, "b": 1}, basetype="i1"))
    a["compound"] = np.array((1, 2.0), dtype=[("x", "i4"), ("y", "f8")])
    tid = h5py.h5t.array_create(h5py.h5t.IEEE_F32LE, (2,))  # an HDF5 array type
    h5py.h5a.create(obj.id, b"array_type", tid, h5py.h5s.create(h5py.h5s.SCALAR)).write(
        np.arange(2, dtype="f4"), mtype=tid)
    a["vlen_ints"] = np.array([np.arange(2), np.arange(3)], dtype=h5py.vlen_dtype("i4"))
    a["opaque"] = np.void(b"\x01\x02")
    a["nön_ascii_name"] = 1
    for i in range(many):
        a[f"many_{i:03d}"] = f"value {i} " * (i % 5 + 1)


def _write(path, libver, track_order: bool, many: int = 0, big: bool = False) -> None:
    with h5py.File(path, "w", libver=libver, track_order=track_order) as f:
        _fill(f)
        ds = f.create_dataset("x", data=np.arange(4.0), track_order=track_order)
        _fill(ds, many)
        s = f.create_dataset("scale", data=np.arange(4.0))
        s.make_scale("scale")
        ds.dims[0].attach_scale(s)
        ds.attrs["ref"] = s.ref
        g = f.create_group("g", track_order=track_order)
        g.attrs["in_group"] = 3
        _storages(g)
        if big:  # a dense attribute beyond the fractal heap's managed objects (a huge one)
            ds.attrs["big"] = np.zeros(70_000, "u1")


def _storages(g) -> None:
    """Datasets of every storage the header reader reads or leaves to h5py."""
    data = np.arange(24, dtype="f4").reshape(4, 6)
    g.create_dataset("contiguous", data=data)
    g.create_dataset("unallocated", shape=(4, 6), dtype="i2")
    g.create_dataset("chunked", data=data, chunks=(2, 3), compression="gzip", shuffle=True,
                     fletcher32=True, fillvalue=-1.5)
    g.create_dataset("big_endian", data=data.astype(">f8"), chunks=(4, 2), fillvalue=7)
    g.create_dataset("ints", data=np.arange(6, dtype="u8"), chunks=(4,), maxshape=(None,))
    g.create_dataset("scaleoffset", data=np.arange(6, dtype="i4"), chunks=(3,), scaleoffset=0)
    g.create_dataset("nbit", data=np.arange(6, dtype="i4"), chunks=(3,),
                     compression=h5py.h5z.FILTER_NBIT)
    g.create_dataset("lzf", data=data, chunks=(2, 2), compression="lzf")
    g.create_dataset("bools", data=np.array([True, False]))
    g.create_dataset("enum", data=np.array([0, 1], "i1"),
                     dtype=h5py.enum_dtype({"a": 0, "b": 1}, basetype="i1"))
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.COMPACT)
    h5py.h5d.create(g.id, b"compact", h5py.h5t.IEEE_F32LE, h5py.h5s.create_simple((3,)), dcpl)
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk((2,))
    dcpl.set_fill_value(np.array(3, "i4"))
    h5py.h5d.create(g.id, b"fill_set", h5py.h5t.STD_I32LE, h5py.h5s.create_simple((5,)), dcpl)
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
    h5py.h5d.create(g.id, b"fill_never", h5py.h5t.IEEE_F64BE, h5py.h5s.create_simple((5,)), dcpl)
    g.create_dataset("external", shape=(4,), dtype="f4",
                     external=[(g.file.filename + ".raw", 0, 16)])


def _objects(path):
    f = h5py.File(path, "r")
    objs = [("", f)]
    f.visititems(lambda name, obj: objs.append((name, obj)))
    return f, objs


def _same(mine, theirs) -> bool:
    if isinstance(theirs, np.ndarray):
        return isinstance(mine, np.ndarray) and mine.dtype == theirs.dtype and \
            mine.shape == theirs.shape and \
            (mine.tolist() == theirs.tolist() if mine.dtype.kind in "OSU" else
             np.array_equal(mine, theirs, equal_nan=mine.dtype.kind == "f"))
    if type(mine) is not type(theirs):
        return False
    if isinstance(mine, float | np.floating) and math.isnan(mine):
        return math.isnan(theirs)
    return mine == theirs


def _compare(path) -> dict:
    """Every object's attributes read both ways; returns {object: 'direct' | 'h5py'}."""
    raw = open(path, "rb").read()
    reader = _h5meta.AttrReader(lambda n, off: raw[off:off + n], len(raw))
    how = {}
    f, objs = _objects(path)
    with f:
        for name, obj in objs:
            info = h5py.h5o.get_info(obj.id)
            try:
                pairs, _dense = reader.attributes(info.addr)
            except _h5meta.Unexpected:
                how[name] = "h5py"
                continue
            how[name] = "direct"
            assert [k for k, _v in pairs] == list(obj.attrs.keys()), name
            assert [k for k, _v in pairs] == hdf5_attrs._attr_names(obj.id, obj), name
            assert len(pairs) == info.num_attrs
            for key, value in pairs:
                if value is _h5meta.ASK_H5PY:
                    continue
                if isinstance(value, _h5meta.DimensionList):
                    refs = obj.attrs[key]
                    assert len(value) == len(refs)
                    for addrs, targets in zip(value, refs):
                        assert list(addrs) == [
                            h5py.h5o.get_info(h5py.h5r.dereference(r, f.id)).addr
                            for r in targets]
                    continue
                assert _same(value, obj.attrs[key]), (name, key, value, obj.attrs[key])
    return how


@pytest.mark.parametrize("libver,track", [("earliest", False), ("latest", False),
                                          ("latest", True)])
@pytest.mark.parametrize("many", [0, 300])
def test_attributes_read_directly_equal_h5py(tmp_path, libver, track, many):
    """Compact attributes in version 1 and 2 object headers (with continuation blocks),
    creation order tracked or not, and dense storage (300 more attributes: a fractal heap
    with a root indirect block) read as h5py reads them; kinds the reader leaves alone
    (compound, enum, array, opaque, references, vlen sequences, space-padded and empty
    strings, null dataspaces) are ASK_H5PY."""
    p = tmp_path / "a.h5"
    _write(p, libver, track, many)
    how = _compare(p)
    assert set(how.values()) == {"direct"}, how
    raw = open(p, "rb").read()
    reader = _h5meta.AttrReader(lambda n, off: raw[off:off + n], len(raw))
    with h5py.File(p) as f:
        pairs, dense = reader.attributes(h5py.h5o.get_info(f["x"].id).addr)
    assert dense == (libver == "latest" and True)  # > 8 attributes: dense from 1.8 on
    asked = {k for k, v in pairs if v is _h5meta.ASK_H5PY}
    assert asked == {"spacepad", "bool", "complex", "enum", "compound", "array_type",
                     "vlen_ints", "opaque", "ref", "vlen_empty", "vlen_nul"}
    if many:
        assert sum(k.startswith("many_") for k, _v in pairs) == many


def test_huge_dense_attribute_is_left_to_h5py(tmp_path):
    """An attribute too big for the fractal heap's managed space (a 'huge' object): the
    object's attributes are read by h5py, and the scan gives what it gave before."""
    p = tmp_path / "big.h5"
    _write(p, "latest", True, big=True)
    how = _compare(p)
    assert how["x"] == "h5py" and how[""] == "direct"
    inv = virtualize.inventory(p)
    assert inv.variables["x"].attrs["big"] == [0] * 70_000


@pytest.mark.parametrize("name", HDF5_CASES)
def test_fixture_attributes_read_directly(case, name):
    """Every object of every netCDF-4 / HDF5 fixture: read directly, equal to h5py."""
    for path in case(name):
        how = _compare(path)
        assert set(how.values()) == {"direct"}, (path, how)


def _inventory_fields(inv):
    # attributes as JSON text: their order counts, and NaN equals NaN
    out = {"problems": sorted((str(p.loc), p.kind, p.message, p.fatal) for p in inv.problems),
           "groups": json.dumps(inv.groups), "dims": inv.dimensions, "format": inv.format}
    for name, v in inv.variables.items():
        refs = None if v.blocks is None else (v.blocks.block_shape, v.blocks.padded,
                                              v.blocks.refs.tolist())
        values = None if v.values is None else np.asarray(v.values).tolist()
        out[name] = (str(v.dtype), v.shape, v.dims, json.dumps(v.attrs), repr(v.fill_value), v.codecs,
                     refs, values, v.is_coordinate, v.digest)
    out["order"] = list(inv.variables)
    return out


@pytest.mark.parametrize("name", HDF5_CASES)
def test_scan_is_the_same_with_h5py_attributes(case, name, monkeypatch):
    """The whole inventory (attributes, their order, dimensions, shapes, problems) is the
    same when every attribute is read through h5py."""
    paths = case(name)
    direct = [_inventory_fields(virtualize.inventory(p)) for p in paths]
    monkeypatch.setattr(hdf5_walk._Scanner, "_direct_attrs", lambda self, name, obj: None)
    assert direct == [_inventory_fields(virtualize.inventory(p)) for p in paths]


@pytest.mark.parametrize("libver", ["earliest", "latest"])
def test_scan_is_the_same_with_h5py_attributes_on_every_kind(tmp_path, monkeypatch, libver):
    """Every kind of attribute, and datasets of every storage (their layouts, filters and
    fill values read from their headers, or h5py's where the reader leaves them)."""
    p = tmp_path / "a.h5"
    _write(p, libver, True, 40)
    direct = _inventory_fields(virtualize.inventory(p))
    monkeypatch.setattr(hdf5_walk._Scanner, "_direct_attrs", lambda self, name, obj: None)
    assert direct == _inventory_fields(virtualize.inventory(p))


def _corrupt(path, signature: bytes, which: int) -> None:
    raw = bytearray(path.read_bytes())
    found = [i for i in range(len(raw)) if raw.startswith(signature, i)]
    at = found[which]
    raw[at:at + 4] = b"XXXX"
    path.write_bytes(bytes(raw))


def _outcome(path):
    try:
        return _inventory_fields(virtualize.inventory(path))
    except virtualize.VirtualizeError as e:
        return ("refused", str(e))


@pytest.mark.parametrize("which", [0, -1])
@pytest.mark.parametrize("signature", [b"FHDB", b"FRHP", b"BTHD", b"BTLF", b"GCOL"])
def test_damaged_attribute_storage_reads_as_h5py_reads_it(tmp_path, monkeypatch, signature,
                                                          which):
    """A damaged dense attribute heap, its name index or the global heap holding
    variable-length values (the root group's or a dataset's): the scan gives exactly what
    it gives through h5py (which reports what it cannot read), never values read from the
    wrong bytes."""
    p = tmp_path / "a.h5"
    _write(p, "latest", True, 400)
    _corrupt(p, signature, which)
    direct = _outcome(p)
    monkeypatch.setattr(hdf5_walk._Scanner, "_direct_attrs", lambda self, name, obj: None)
    assert direct == _outcome(p)


def test_a_count_other_than_hdf5s_falls_back(tmp_path, monkeypatch):
    """The reader's attributes are used only when as many as HDF5 counts."""
    p = tmp_path / "a.h5"
    _write(p, "latest", False, 0)
    real = _h5meta.AttrReader.read_object

    def one_short(self, addr):  # what the scanner calls
        pairs, dense, messages = real(self, addr)
        return pairs[1:], dense, messages

    expected = _inventory_fields(virtualize.inventory(p))
    monkeypatch.setattr(_h5meta.AttrReader, "read_object", one_short)
    assert _inventory_fields(virtualize.inventory(p)) == expected
    # and it was the count that turned the reader away (each object with attributes then
    # read by h5py)
    got = []
    real_direct = hdf5_walk._Scanner._direct_attrs
    monkeypatch.setattr(hdf5_walk._Scanner, "_direct_attrs",
                        lambda self, name, obj: got.append(real_direct(self, name, obj)))
    virtualize.inventory(p)
    assert None in got and all(g is None or g == [] for g in got)


def test_direct_reader_is_used_on_netcdf4(case, monkeypatch):
    """The scan of a netCDF-4 file reads every object's attributes directly (else the
    tests above compare h5py with itself)."""
    used = []
    real = hdf5_walk._Scanner._direct_attrs

    def spy(self, name, obj):
        got = real(self, name, obj)
        used.append((name, got is not None))
        return got

    storages = []
    real_storage = _h5meta.dataset_storage

    def spy_storage(messages, itemsize):
        got = real_storage(messages, itemsize)
        storages.append(got)
        return got

    monkeypatch.setattr(hdf5_walk._Scanner, "_direct_attrs", spy)
    monkeypatch.setattr(hdf5_walk, "dataset_storage", spy_storage)
    inv = virtualize.inventory(case("months2024")[0])
    assert used and all(ok for _n, ok in used), used
    # and every variable's layout, filters and fill value come from its header
    assert len(storages) == len(inv.variables) and None not in storages


@pytest.mark.parametrize("libver", ["earliest", "latest"])
def test_storage_read_from_headers_of_every_kind(tmp_path, libver):
    """Which storages the header reader describes (the rest: h5py's property lists):
    layout messages of version 3 and of the versions libver "latest" writes."""
    p = tmp_path / "s.h5"
    with h5py.File(p, "w", libver=libver) as f:
        _storages(f)
    raw = p.read_bytes()
    reader = _h5meta.AttrReader(lambda n, off: raw[off:off + n], len(raw))
    described = set()
    with h5py.File(p) as f:
        for name in f:
            _pairs, _dense, messages = reader.read_object(h5py.h5o.get_info(f[name].id).addr)
            st = _h5meta.dataset_storage(messages, f[name].dtype.itemsize)
            if st is not None:
                described.add(name)
                dcpl = f[name].id.get_create_plist()
                assert st.layout == dcpl.get_layout() and st.external == bool(
                    dcpl.get_external_count())
                assert [(c, v) for c, _fl, v, _n in st.filters] == [
                    (c, tuple(v)) for c, _fl, v, _n in (dcpl.get_filter(i)
                                                        for i in range(dcpl.get_nfilters()))]
                if st.chunks is not None:
                    assert st.chunks == f[name].chunks
    assert described == {"contiguous", "unallocated", "chunked", "big_endian", "ints",
                         "bools", "enum", "compact", "fill_set", "fill_never", "external",
                         "scaleoffset", "nbit"}  # not lzf: a plugin's filter


def test_a_file_with_a_user_block_is_read_through_h5py(tmp_path, monkeypatch):
    """Addresses in a file with a user block are relative to the superblock: the direct
    readers are not used, and the scan is what h5py gives."""
    p = tmp_path / "ub.h5"
    with h5py.File(p, "w", userblock_size=512) as f:
        _storages(f)
        f["x"] = np.arange(4.0)
        _fill(f["x"], 20)
    assert _h5meta.superblock_sizes(lambda n, off: p.read_bytes()[off:off + n]) is None
    direct = _inventory_fields(virtualize.inventory(p))
    monkeypatch.setattr(hdf5_walk._Scanner, "_direct_attrs", lambda self, name, obj: None)
    assert direct == _inventory_fields(virtualize.inventory(p))
    assert json.loads(direct["x"][3])["f4<"] == 7.0


def test_a_name_that_is_not_utf8_is_skipped_located(tmp_path):
    """A link whose name is not UTF-8 (h5py gives it as bytes) is skipped with a located
    problem whose variable is text; the rest of the file is virtualized."""
    p = tmp_path / "names.h5"
    with h5py.File(p, "w") as f:
        f["ok"] = np.arange(3.0)
        f["\u00e9t\u00e9"] = np.arange(2.0)
    raw = bytearray(p.read_bytes())
    at = raw.index("\u00e9t\u00e9".encode())
    raw[at] = 0xFF  # no longer UTF-8
    p.write_bytes(bytes(raw))
    report = virtualize.check([p])
    skipped = [q for q in report.problems if q.kind == "unsupported-object"]
    assert report.ok and len(skipped) == 1 and isinstance(skipped[0].loc.variable, str)
    assert "\\xff" in skipped[0].loc.variable and "UTF-8" in skipped[0].message
    assert list(report.plan.arrays) == ["ok"]


def test_fill_value_of_a_type_that_is_not_standard_is_hdf5s(tmp_path, monkeypatch):
    """A fill value is stored in the dataset's own type: of an n-bit integer (bits at an
    offset, fewer than its size) or a float of another layout, HDF5 converts the stored
    bytes (3 stored at bit offset 8 is 768 read as they are); the fill value is h5py's,
    not the stored bytes, and the inventory is the h5py path's."""
    p = tmp_path / "nbit.h5"
    with h5py.File(p, "w") as f:
        for name, base, precision, offset, fill in [("i32_16at8", h5py.h5t.STD_I32LE, 16, 8, "i4"),
                                                    ("u16be_6at4", h5py.h5t.STD_U16BE, 6, 4, "u2")]:
            tid = base.copy()
            tid.set_precision(precision)
            tid.set_offset(offset)
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_chunk((2,))
            dcpl.set_fill_value(np.array(3, fill))
            h5py.h5d.create(f.id, name.encode(), tid, h5py.h5s.create_simple((5,)), dcpl)
        tid = h5py.h5t.IEEE_F64LE.copy()
        tid.set_norm(h5py.h5t.NORM_MSBSET)  # no implied mantissa bit
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_fill_value(np.array(1.5, "f8"))
        h5py.h5d.create(f.id, b"f64_msbset", tid, h5py.h5s.create_simple((5,)), dcpl)
        f.create_dataset("standard", shape=(5,), dtype=">i4", fillvalue=3)
    direct = _inventory_fields(virtualize.inventory(p))
    assert direct["i32_16at8"][4] == "np.int32(3)" and direct["u16be_6at4"][4] == "np.uint16(3)"
    assert direct["standard"][4] == "np.int32(3)"
    monkeypatch.setattr(hdf5_walk._Scanner, "_direct_attrs", lambda self, name, obj: None)
    assert direct == _inventory_fields(virtualize.inventory(p))


def _vlen_fill_heap_damaged(path) -> None:
    """A netCDF-4 string variable with a _FillValue whose fill value (a global heap object
    of the dataset's creation properties) is gone: HDF5 cannot make its creation property
    list (what h5repack -L / --latest writes from such a file, HDF5 1.10)."""
    import netCDF4

    with netCDF4.Dataset(path, "w") as ds:
        ds.createDimension("x", 3)
        ds.createVariable("ok", "f4", ("x",))[:] = 1.0
        v = ds.createVariable("s", str, ("x",), fill_value="zz")
        v[0] = "abc"
        v.units = "1"
    raw = bytearray(path.read_bytes())
    at = raw.index(b"GCOL")
    size = int.from_bytes(raw[at + 8:at + 16], "little")
    # the collection's objects: the fill value's "zz" is one of them; renumber it (index
    # 0x7fff) so that the fill value's reference points to no object
    pos = at + 16
    while pos + 16 <= at + size:
        index, length = int.from_bytes(raw[pos:pos + 2], "little"), \
            int.from_bytes(raw[pos + 8:pos + 16], "little")
        if index == 0:
            break
        if bytes(raw[pos + 16:pos + 16 + length]) == b"zz":
            raw[pos:pos + 2] = (0x7FFF).to_bytes(2, "little")
        pos += 16 + ((length + 7) & ~7)
    path.write_bytes(bytes(raw))


def test_a_dataset_hdf5_cannot_describe_is_located_both_ways(tmp_path, monkeypatch):
    """A dataset whose creation property list HDF5 cannot make (its variable-length fill
    value unreadable): h5py cannot list its attributes, the direct reader can. Both paths
    give the same inventory: the rest of the file, and a located problem for it (the
    h5py path refused the whole file)."""
    p = tmp_path / "vlenfill.nc"
    _vlen_fill_heap_damaged(p)
    with h5py.File(p, "r") as f, pytest.raises(Exception):
        f["s"].id.get_create_plist()
    direct = _inventory_fields(virtualize.inventory(p))
    assert "ok" in direct and "s" not in direct
    assert any("/ s" in loc and kind == "unsupported-type" for loc, kind, _m, _f
               in direct["problems"]), direct["problems"]
    monkeypatch.setattr(hdf5_walk._Scanner, "_direct_attrs", lambda self, name, obj: None)
    assert direct == _inventory_fields(virtualize.inventory(p))
