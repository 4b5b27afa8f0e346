"""The HDF5 scanner: block tables, layouts, filters, dimensions, attributes."""

from __future__ import annotations

import json
import math
import re
import subprocess

import h5py
import numpy as np
import pytest

import virtualize

from helpers import assert_same


def test_block_table_matches_the_chunk_index(tmp_path):
    p = tmp_path / "a.h5"
    with h5py.File(p, "w") as f:
        d = f.create_dataset("x", shape=(25, 7), chunks=(10, 4), dtype="<i4", compression="gzip")
        d[...] = np.arange(25 * 7).reshape(25, 7)
    inv = virtualize.inventory(p)
    bt = inv.variables["x"].blocks
    assert bt.block_shape == (10, 4) and bt.padded and bt.grid_shape == (3, 2)
    with h5py.File(p, "r") as f:
        d = f["x"]
        for i in range(d.id.get_num_chunks()):  # the slow way, for checking only
            info = d.id.get_chunk_info(i)
            idx = tuple(o // c for o, c in zip(info.chunk_offset, d.chunks))
            assert (bt.refs[idx]["offset"], bt.refs[idx]["length"]) == (info.byte_offset, info.size)


def test_never_written_chunks_read_as_fill(tmp_path):
    p = tmp_path / "sparse.h5"
    with h5py.File(p, "w") as f:
        d = f.create_dataset("x", shape=(4, 6), chunks=(2, 3), dtype="f4", fillvalue=-5.0)
        d[0:2, 3:6] = 1.5
    inv = virtualize.inventory(p)
    refs = inv.variables["x"].blocks.refs
    assert (refs["length"] > 0).sum() == 1
    virtualize.virtualize([p], tmp_path / "c.zarr")
    with h5py.File(p) as f:
        assert_same(virtualize.open(tmp_path / "c.zarr")["x"][...], f["x"][()], "sparse")


def test_never_written_contiguous_dataset_reads_as_fill(tmp_path):
    p = tmp_path / "empty.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("x", shape=(3,), dtype="i2", fillvalue=7)
    inv = virtualize.inventory(p)
    assert inv.variables["x"].blocks.refs["length"].sum() == 0
    virtualize.virtualize([p], tmp_path / "c.zarr")
    assert virtualize.open(tmp_path / "c.zarr")["x"][...].tolist() == [7, 7, 7]


def test_chunk_with_a_filter_mask_is_a_located_problem(tmp_path):
    p = tmp_path / "mask.h5"
    with h5py.File(p, "w") as f:
        d = f.create_dataset("x", shape=(4, 4), chunks=(2, 4), dtype="u1", compression="gzip")
        d[...] = 3
        # the second chunk stored raw, with the deflate filter marked as skipped
        d.id.write_direct_chunk((2, 0), np.full((2, 4), 9, "u1").tobytes(), filter_mask=1)
    inv = virtualize.inventory(p)
    (prob,) = [q for q in inv.problems if q.kind == "filter-mask"]
    assert (prob.loc.file, prob.loc.variable, prob.loc.block) == (str(p), "x", (1, 0))
    assert not virtualize.check([p], inline_threshold=0).ok
    # inlining reads the values through HDF5 itself, which honours the mask
    virtualize.virtualize([p], tmp_path / "c.zarr", inline=["x"])
    with h5py.File(p) as f:
        assert_same(virtualize.open(tmp_path / "c.zarr")["x"][...], f["x"][()], "masked")


@pytest.mark.parametrize("kw,label", [
    (dict(scaleoffset=2), "scaleoffset"),
    (dict(scaleoffset=0), "scaleoffset-int"),
])  # (lzf reads through virtualize.lzf: test_h5codecs.py)
def test_filters_without_an_exact_codec_are_refused(tmp_path, kw, label):
    p = tmp_path / "f.h5"
    with h5py.File(p, "w") as f:
        # compressible: an optional filter that cannot shrink a chunk is skipped for it
        f.create_dataset("x", data=np.zeros((80, 5), "f4"), chunks=(40, 5), **kw)
        f.create_dataset("ok", data=np.arange(5, dtype="i4"))
    report = virtualize.check([p], inline_threshold=0)
    (prob,) = [q for q in report.problems if q.kind == "unsupported-filter"]
    assert prob.loc.variable == "x" and prob.fatal
    assert "ok" in report.plan.arrays and "x" not in report.plan.arrays


def test_external_storage_is_refused_and_a_vds_referenced(tmp_path):
    src = tmp_path / "src.h5"
    with h5py.File(src, "w") as f:
        f["a"] = np.arange(4.0)
    raw = tmp_path / "raw.bin"
    raw.write_bytes(np.arange(4, dtype="<i4").tobytes())
    p = tmp_path / "v.h5"
    with h5py.File(p, "w") as f:
        layout = h5py.VirtualLayout(shape=(4,), dtype="f8")
        layout[:] = h5py.VirtualSource(str(src), "a", shape=(4,))
        f.create_virtual_dataset("vds", layout)
        f.create_dataset("ext", shape=(4,), dtype="<i4", external=[(str(raw), 0, 16)])
        f["link"] = h5py.ExternalLink(str(src), "a")
        f["soft"] = h5py.SoftLink("/vds")
    report = virtualize.check([p], inline_threshold=0)
    found = {(q.loc.variable, q.kind, q.fatal) for q in report.problems}
    # (the external link's target is beside the file: followed, test_coverage.py; the
    # VDS's source too: referenced through its mapping, test_vds.py)
    assert found == {("ext", "external-storage", True)}
    inv = virtualize.inventory(p)
    assert inv.variables["vds"].blocks is not None and inv.variables["soft"].blocks is not None
    assert [s.path for s in inv.data_files] == [str(src)]


def test_soft_links_to_datasets_are_virtualized_under_both_names(tmp_path):
    p = tmp_path / "s.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("g/data", data=np.arange(12, dtype="i2").reshape(3, 4), chunks=(2, 2),
                         compression="gzip")
        f["alias"] = h5py.SoftLink("/g/data")
        f["grp_alias"] = h5py.SoftLink("/g")
        f["dangling"] = h5py.SoftLink("/nowhere")
    report = virtualize.virtualize([p], tmp_path / "c.zarr")
    assert {q.loc.variable for q in report.problems if q.kind == "soft-link"} == \
        {"grp_alias", "dangling"}
    cube = virtualize.open(tmp_path / "c.zarr")
    with h5py.File(p) as f:
        for name in ("g/data", "alias"):
            assert_same(cube[name][...], f[name][()], name)


def test_strings_are_inlined_and_compounds_skipped_not_fatal(tmp_path):
    p = tmp_path / "s.h5"
    with h5py.File(p, "w") as f:
        f["names"] = np.array([b"a", b"bc"])
        f["rec"] = np.zeros(3, dtype=[("a", "i4"), ("b", "S8")])  # a string member: skipped
        f["vals"] = np.arange(3, dtype="i8")
    report = virtualize.check([p])
    assert report.ok
    assert {(q.loc.variable, q.kind) for q in report.problems} == {("rec", "unsupported-type")}
    assert sorted(report.plan.arrays) == ["names", "vals"]
    assert report.plan.arrays["names"].inline.tolist() == ["a", "bc"]


def test_anonymous_axes_get_stable_names(tmp_path):
    p = tmp_path / "a.h5"
    with h5py.File(p, "w") as f:
        f["g/x"] = np.zeros((6, 6))
    assert virtualize.inventory(p).variables["g/x"].dims == ("x_dim0", "x_dim1")


def test_attributes_are_plain_python(tmp_path):
    p = tmp_path / "a.h5"
    with h5py.File(p, "w") as f:
        d = f.create_dataset("x", data=np.zeros(2, "f4"))
        d.attrs["units"] = "K"
        d.attrs["scale_factor"] = np.float32(0.5)
        d.attrs["valid_range"] = np.array([0, 10], "i2")
        d.attrs["bytes"] = np.bytes_(b"abc")
    attrs = virtualize.inventory(p).variables["x"].attrs
    assert attrs == {"units": "K", "scale_factor": 0.5, "valid_range": [0, 10], "bytes": "abc"}


def test_bytes_read_are_counted(case):
    f = case("months2024")[0]
    inv = virtualize.inventory(f)
    import os
    assert 0 < inv.bytes_read < os.path.getsize(f) + 1


pytest.importorskip("hdf5plugin")

WRITE_WITH_PLUGIN = """
import sys, h5py, hdf5plugin, numpy as np
path, n, i, flt = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rows = n * 50 if "compressible" in sys.argv[5:] else n
data = np.floor((np.arange(rows * 12, dtype="f8") + 1000 * i) / 7).reshape(rows, 12)
if "compressible" not in sys.argv[5:]:
    data = np.random.default_rng(i).random((rows, 12))
with h5py.File(path, "w") as f:
    f.create_dataset("x", data=data, chunks=(max(rows // 2, 1), 6), **eval(flt))
"""


def write_with_plugin(path, n, i, flt, *extra):
    """Write in a fresh interpreter: netCDF4-python, imported by the fixtures, points
    HDF5_PLUGIN_PATH at its own plugin builds, which break hdf5plugin's blosc."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "HDF5_PLUGIN_PATH"}
    subprocess.run([sys.executable, "-c", WRITE_WITH_PLUGIN, str(path), str(n), str(i), flt, *extra],
                   check=True, env=env)


@pytest.mark.parametrize("flt", [
    "hdf5plugin.Zstd(clevel=5)",
    "hdf5plugin.Blosc(cname='lz4', clevel=5, shuffle=hdf5plugin.Blosc.SHUFFLE)",
    "hdf5plugin.Blosc(cname='zstd', clevel=3, shuffle=hdf5plugin.Blosc.BITSHUFFLE)",
], ids=["zstd", "blosc-lz4", "blosc-zstd-bitshuffle"])
def test_plugin_filters_with_exact_codecs_round_trip(tmp_path, flt):
    files = []
    for i, n in enumerate([6, 8]):
        p = tmp_path / f"{i}.h5"
        write_with_plugin(p, n, i, flt, "compressible")
        files.append(p)
    virtualize.virtualize(files, tmp_path / "c.zarr", concat_dim="x_dim0")
    expected = np.concatenate([h5py.File(p)["x"][()] for p in files])
    assert_same(virtualize.open(tmp_path / "c.zarr")["x"][...], expected, "plugin filter")


MIXED_MASKS = """
import sys, h5py, hdf5plugin, numpy as np
data = np.zeros((40, 120), "u1")
data[10:20] = np.random.default_rng(0).integers(0, 256, (10, 120))  # blosc is skipped
with h5py.File(sys.argv[1], "w") as f:
    f.create_dataset("x", data=data, chunks=(10, 60), **hdf5plugin.Blosc(cname="lz4"))
    f.create_dataset("noise", data=data[10:20], chunks=(5, 60), **hdf5plugin.Blosc(cname="lz4"))
"""


def test_optional_filter_skipped_on_some_chunks_is_a_filter_mask_materialized(tmp_path):
    """Blosc is an optional filter: on chunks it cannot shrink HDF5 stores the bytes raw
    and sets the chunk's filter mask. Where every chunk skips it (`noise`) the cube's
    pipeline leaves blosc out; where only some do (`x`), those chunks are refused, each
    named, with --materialize as the remedy, which copies them exactly."""
    import os
    import sys

    p = tmp_path / "a.h5"
    env = {k: v for k, v in os.environ.items() if k != "HDF5_PLUGIN_PATH"}
    subprocess.run([sys.executable, "-c", MIXED_MASKS, str(p)], check=True, env=env)
    report = virtualize.check([p], inline_threshold=0)
    masked = [q for q in report.problems if q.kind == "filter-mask"]
    assert {q.loc.block for q in masked} == {(1, 0), (1, 1)} and not report.ok
    assert all(q.fatal and "--materialize" in q.remedy for q in masked)
    assert {q.loc.variable for q in report.problems if q.kind == "filter-skipped"} == {"noise"}
    assert report.plan.remedies["materialize (not enabled)"].blocks == 2
    virtualize.virtualize([p], tmp_path / "c.zarr", materialize=True, inline_threshold=0)
    cube = virtualize.open(tmp_path / "c.zarr")
    with h5py.File(p) as f:
        for name in ("x", "noise"):
            assert_same(cube[name][...], f[name][()], name)
    doc = json.loads((tmp_path / "c.zarr" / "noise" / "zarr.json").read_text())
    assert [c["name"] for c in doc["codecs"]] == ["bytes"]


@pytest.mark.parametrize("flt,why", [
    ("hdf5plugin.Blosc2()", "Blosc2 NDim frame"),
    ("hdf5plugin.Zfp(reversible=True)", "zfp header"),
], ids=["blosc2", "zfp"])  # (bitshuffle reads through virtualize.bitshuffle: test_h5codecs.py)
def test_plugin_filters_without_an_exact_codec_are_refused_saying_why(tmp_path, flt, why):
    p = tmp_path / "a.h5"
    write_with_plugin(p, 8, 0, flt, "compressible")
    report = virtualize.check([p], inline_threshold=0)
    (prob,) = report.problems
    assert (prob.kind, prob.loc.variable, prob.fatal) == ("unsupported-filter", "x", True)
    assert why in prob.message


@pytest.mark.parametrize("flt", ["hdf5plugin.LZ4()", "hdf5plugin.LZ4(nbytes=64)"],
                         ids=["lz4", "lz4-small-blocks"])
def test_hdf5_lz4_filter_decodes_with_imagecodecs_lz4h5(tmp_path, flt):
    """HDF5's LZ4 filter (32004, its own block framing) is imagecodecs' lz4h5: a stack
    written by hdf5plugin reads back as h5py + hdf5plugin read it (the small block size
    makes every chunk several LZ4 blocks, incompressible ones stored raw)."""
    files = []
    for i, n in enumerate([6, 8]):
        files.append(tmp_path / f"{i}.h5")
        write_with_plugin(files[-1], n, i, flt, *(["compressible"] if i else []))
    virtualize.virtualize(files, tmp_path / "c.zarr", concat_dim="x_dim0")
    doc = json.loads((tmp_path / "c.zarr" / "x" / "zarr.json").read_text())
    assert [c["name"] for c in doc["codecs"]][-1] == "imagecodecs_lz4h5"
    expected = np.concatenate([h5py.File(p)["x"][()] for p in files])
    assert_same(virtualize.open(tmp_path / "c.zarr")["x"][...], expected, "lz4")


def _szip_by_h5py(path, data):
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=(7, 10), compression="szip",
                         compression_opts=("nn", 8))


def _szip_by_h5repack(path, data):
    plain = str(path) + ".plain.h5"
    with h5py.File(plain, "w") as f:
        f.create_dataset("x", data=data, chunks=(7, 10))
    subprocess.run(["h5repack", "-f", "x:SZIP=8,EC", plain, str(path)], check=True)


@pytest.mark.skipif(not h5py.h5z.filter_avail(h5py.h5z.FILTER_SZIP), reason="HDF5 without szip")
@pytest.mark.parametrize("writer", [_szip_by_h5py, pytest.param(_szip_by_h5repack,
                                                                  marks=pytest.mark.needs("h5repack"))],
                         ids=["h5py", "h5repack"])
@pytest.mark.parametrize("dtype", ["<f4", "<i2", ">f8", "u1"])
def test_szip_decodes_with_imagecodecs_szip(tmp_path, writer, dtype):
    """szip (filter 4, NASA's HDF-EOS / netCDF-4 products) is imagecodecs' szip with the
    parameters HDF5 stored; big-endian values too (the options mask carries the order);
    edge chunks are padded to full size as every HDF5 chunk."""
    rng = np.random.default_rng(3)
    files = []
    for i, rows in enumerate([21, 23]):  # the last file's edge chunk is padded
        files.append(tmp_path / f"{i}.h5")
        data = (rng.integers(0, 50, (rows, 33)) + np.arange(33)).astype(dtype)
        writer(files[-1], data)
    virtualize.virtualize(files, tmp_path / "c.zarr", concat_dim="x_dim0")
    doc = json.loads((tmp_path / "c.zarr" / "x" / "zarr.json").read_text())
    # szip leaves 8-bit values alone (every chunk's filter mask skips it)
    assert [c["name"] for c in doc["codecs"]][-1] == ("bytes" if dtype == "u1" else "imagecodecs_szip")
    expected = np.concatenate([h5py.File(p)["x"][()] for p in files])
    assert_same(virtualize.open(tmp_path / "c.zarr")["x"][...], expected, "szip")


def test_bool_and_enum_types(tmp_path):
    p = tmp_path / "e.h5"
    cloud = h5py.enum_dtype({"clear": 0, "cloudy": 1, "unknown": 7}, basetype="u1")
    with h5py.File(p, "w") as f:
        f.create_dataset("flag", data=np.array([True, False, True]))
        f.create_dataset("cloud", data=np.array([0, 1, 7, 1], "u1"), dtype=cloud)
    inv = virtualize.inventory(p)
    assert inv.variables["flag"].dtype == np.dtype(bool)
    assert inv.variables["cloud"].attrs["_enum"] == {"clear": 0, "cloudy": 1, "unknown": 7}
    virtualize.virtualize([p], tmp_path / "c.zarr")
    g = virtualize.open(tmp_path / "c.zarr")
    with h5py.File(p) as f:
        assert_same(g["flag"][...], f["flag"][()], "bool")
        assert_same(g["cloud"][...], f["cloud"][()].astype("u1"), "enum")


def test_empty_and_unwritten_chunked_datasets(tmp_path):
    p = tmp_path / "z.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("empty", shape=(0, 4), maxshape=(None, 4), chunks=(2, 4), dtype="f4")
        f.create_dataset("unwritten", shape=(5, 4), chunks=(2, 4), dtype="f4", fillvalue=3)
    inv = virtualize.inventory(p)
    assert inv.variables["empty"].blocks.refs.shape == (0, 1)
    assert inv.variables["unwritten"].blocks.refs["length"].sum() == 0
    virtualize.virtualize([p], tmp_path / "c.zarr")
    g = virtualize.open(tmp_path / "c.zarr")
    assert g["empty"].shape == (0, 4)
    assert (g["unwritten"][...] == 3).all()


def test_shrunken_dataset_keeps_only_chunks_inside_its_extent(tmp_path):
    p = tmp_path / "s.h5"
    with h5py.File(p, "w") as f:
        d = f.create_dataset("x", data=np.arange(40, dtype="i4").reshape(10, 4), chunks=(2, 4),
                             maxshape=(None, 4))
        d.resize((5, 4))
    inv = virtualize.inventory(p)
    assert inv.variables["x"].blocks.grid_shape == (3, 1)
    virtualize.virtualize([p], tmp_path / "c.zarr")
    with h5py.File(p) as f:
        assert_same(virtualize.open(tmp_path / "c.zarr")["x"][...], f["x"][()], "shrunken")


def test_truncated_hdf5_is_a_located_problem(tmp_path):
    p = tmp_path / "t.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("x", data=np.arange(4000, dtype="f8").reshape(100, 40), chunks=(10, 40))
    data = p.read_bytes()
    cut = tmp_path / "cut.h5"
    cut.write_bytes(data[: len(data) - 5000])
    report = virtualize.check([cut])
    (prob,) = report.problems  # HDF5 itself sees its end-of-file address past the end
    assert prob.loc.file == str(cut) and prob.kind == "corrupt" and "truncated" in prob.message


def test_blocks_past_the_end_of_a_file_are_truncated(tmp_path):
    from virtualize.formats import _check_extent

    p = tmp_path / "a.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("x", data=np.arange(40, dtype="f8").reshape(10, 4), chunks=(5, 4))
    inv = virtualize.inventory(p)
    inv.size = int(inv.variables["x"].blocks.refs["offset"].max())  # as if cut mid-block
    _check_extent(inv)
    (prob,) = [q for q in inv.problems if q.kind == "truncated"]
    assert prob.loc.variable == "x" and prob.loc.block is not None


def test_objects_hdf5_cannot_open_are_refused_alone(tmp_path, monkeypatch):
    """A link h5py cannot follow ("Unknown link type") is skipped, a dataset it cannot
    describe ("Insufficient precision") refused, each named; the rest of the file is
    virtualized (with --drop for the refused one)."""
    from virtualize.formats.hdf5 import attrs as hdf5_attrs
    from virtualize.formats.hdf5 import walk as hdf5_walk

    p = tmp_path / "odd.h5"
    with h5py.File(p, "w") as f:
        f["ok"] = np.arange(4.0)
        f["weird"] = np.arange(3)
        f["broken"] = np.arange(2)
    real_get, real_dims = h5py.Group.get, hdf5_walk._Scanner._dims
    real_links = hdf5_attrs._hard_links

    def links(g):  # "weird" listed as a link of a type HDF5 cannot open (user-defined)
        return {k: hard and k != "weird" for k, hard in real_links(g).items()}

    def get(self, key, *a, **kw):
        if key == "weird" and kw.get("getlink"):
            raise OSError("Unknown link type")
        return real_get(self, key, *a, **kw)

    def dims(self, name, ds):
        if name == "broken":
            raise OSError("Insufficient precision")
        return real_dims(self, name, ds)

    monkeypatch.setattr(h5py.Group, "get", get)
    monkeypatch.setattr(hdf5_walk, "_hard_links", links)
    monkeypatch.setattr(hdf5_walk._Scanner, "_dims", dims)
    report = virtualize.check([p], scan_timeout=None)
    found = {(q.loc.variable, q.kind, q.fatal) for q in report.problems}
    assert found == {("weird", "unsupported-object", False), ("broken", "corrupt", True)}
    assert "Unknown link type" in str(report.problems) and "--drop broken" in str(report.problems)
    virtualize.virtualize([p], tmp_path / "c.zarr", drop=["broken"], scan_timeout=None)
    assert virtualize.open(tmp_path / "c.zarr")["ok"][...].tolist() == [0, 1, 2, 3]


def test_bitfields_and_half_floats_round_trip(tmp_path):
    """HDF5 bitfields (h5py reads them as unsigned integers of their size, either byte
    order) and 16-bit floats are referenced exactly."""
    p = tmp_path / "b.h5"
    with h5py.File(p, "w") as f:
        sid = h5py.h5s.create_simple((4,))
        for name, tid, data in [(b"bits", h5py.h5t.STD_B8LE, np.array([1, 2, 255, 0], "u1")),
                                (b"bits16", h5py.h5t.STD_B16BE,
                                 np.array([1, 2, 65535, 256], ">u2"))]:
            ds = h5py.h5d.create(f.id, name, tid.copy(), sid)
            ds.write(h5py.h5s.ALL, h5py.h5s.ALL, data, mtype=tid)
        f.create_dataset("half", data=np.array([1.5, -2, np.inf, np.nan], "f2"), chunks=(2,))
    report = virtualize.virtualize([p], tmp_path / "c.zarr")
    assert report.problems == [] and all(a.inline is None for a in report.plan.arrays.values())
    cube = virtualize.open(tmp_path / "c.zarr")
    with h5py.File(p) as f:
        for name in ("bits", "bits16", "half"):
            assert_same(cube[name][...], f[name][()], name)


# Every HDF5 chunk index type, as HDF5 picks it: the v1 B-tree for files any library
# version reads (libver "earliest"); with libver "latest" a single chunk, an implicit
# index (fixed extent, no filters, space allocated early), a fixed array (fixed extent),
# an extensible array (one unlimited axis) or a v2 B-tree (two or more unlimited axes).
INDEX_TYPES = {
    "btree-v1": dict(libver="earliest", maxshape=None),
    "single-chunk": dict(libver="latest", maxshape=None, chunks=(7, 5)),
    "implicit": dict(libver="latest", maxshape=None, early=True),
    "fixed-array": dict(libver="latest", maxshape=None),
    "extensible-array": dict(libver="latest", maxshape=(None, 5)),
    "btree-v2": dict(libver="latest", maxshape=(None, None)),
}


def _index_type_file(path, libver, maxshape, chunks=(2, 2), early=False, filtered=True,
                     sparse=True, masked=True):
    """x(7, 5) f4 in `chunks` (a partial last chunk on both axes), some chunks never
    written, one stored with its filter mask set (the deflate filter skipped)."""
    data = np.arange(35, dtype="f4").reshape(7, 5)
    with h5py.File(path, "w", libver=libver) as f:
        if early:
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_chunk(chunks)
            dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
            h5py.h5d.create(f.id, b"x", h5py.h5t.IEEE_F32LE,
                            h5py.h5s.create_simple((7, 5), (7, 5)), dcpl=dcpl)
            d = f["x"]
        else:
            kw = dict(compression="gzip", shuffle=True) if filtered else {}
            d = f.create_dataset("x", shape=(7, 5), chunks=chunks, maxshape=maxshape,
                                 dtype="f4", fillvalue=-1.0, **kw)
        if sparse and not early and chunks != (7, 5):
            d[0:4, :] = data[0:4]  # chunk rows 2-3 never written
            d[6:7, 4:5] = data[6:7, 4:5]
        else:
            d[...] = data
        if masked and filtered and not early:
            raw = np.full(chunks, 9, "f4").tobytes()
            d.id.write_direct_chunk((0, 0), raw, filter_mask=1)


@pytest.mark.parametrize("index,filtered", [
    (index, filtered) for index in INDEX_TYPES for filtered in (True, False)
    if not (index == "implicit" and filtered)  # HDF5 keeps it only for unfiltered data
], ids=lambda v: v if isinstance(v, str) else ("filtered" if v else "unfiltered"))
def test_block_table_equals_the_chunk_index_on_every_index_type(tmp_path, index, filtered):
    """The block table is the dataset's chunk index exactly, whatever index HDF5 keeps:
    every chunk `get_chunk_info` lists (the slow per-chunk call, independent of the
    scan's `chunk_iter` pass) at its grid cell with its byte range, every other cell
    unreferenced, a chunk stored with another filter mask held back (MATERIALIZED)."""
    from virtualize.model import MATERIALIZED

    spec = dict(INDEX_TYPES[index])
    p = tmp_path / f"{index}.h5"
    _index_type_file(p, filtered=filtered, **spec)
    inv = virtualize.inventory(p)
    bt = inv.variables["x"].blocks
    masked = filtered and not spec.get("early")
    with h5py.File(p, "r") as f:
        d = f["x"]
        assert bt.block_shape == d.chunks and bt.padded
        expected = {}
        for i in range(d.id.get_num_chunks()):
            info = d.id.get_chunk_info(i)
            cell = tuple(o // c for o, c in zip(info.chunk_offset, d.chunks))
            expected[cell] = (info.byte_offset, info.size, info.filter_mask)
    assert len(expected) >= 1
    if spec.get("chunks") != (7, 5) and not spec.get("early"):
        assert len(expected) < bt.refs.size  # some chunks were never written
    for cell in np.ndindex(bt.refs.shape):
        ref = bt.refs[cell]
        if cell not in expected:
            assert ref["length"] == 0, (cell, ref)
            continue
        off, size, mask = expected[cell]
        if mask and masked and index != "single-chunk":
            assert (ref["path"], ref["length"]) == (MATERIALIZED, 0), (cell, ref)
        else:
            assert (ref["path"], ref["offset"], ref["length"]) == (0, off, size), (cell, ref)
    kinds = {q.kind for q in inv.problems}
    if masked and index != "single-chunk":
        assert "filter-mask" in kinds
    assert "corrupt" not in kinds


def _native_and_chunk_iter(path, name="x"):
    import os

    from virtualize.formats.hdf5 import index as hdf5_index

    with h5py.File(path, "r") as f:
        d = f[name]
        fd = os.open(path, os.O_RDONLY)
        try:
            native = hdf5_index._native_chunk_index(
                lambda n, off: os.pread(fd, n, off), os.fstat(fd).st_size, d.id,
                tuple(d.chunks), d.id.get_num_chunks)
        finally:
            os.close(fd)
        return native, hdf5_index._walk_chunk_index(d.id, d.ndim)


@pytest.mark.parametrize("index", ["btree-v1", "fixed-array", "extensible-array", "btree-v2"])
@pytest.mark.parametrize("shape,chunks,maxshape,filtered", [
    ((5000,), (1,), None, False),  # B-trees of several levels; a paged fixed array
    ((3000, 3), (1, 2), None, True),
    ((7, 5), (2, 2), (9, 5), True),  # a fixed array over the maximum extent's grid
    ((4, 3, 6, 2), (1, 2, 4, 1), None, False),
])
def test_chunk_index_read_directly_equals_chunk_iter(tmp_path, index, shape, chunks, maxshape,
                                                     filtered):
    """The direct reader of v1 B-tree, fixed array, extensible array and v2 B-tree chunk
    indexes gives chunk_iter's arrays exactly (same chunks, order, addresses, sizes,
    filter masks): trees of several levels, paged arrays with pages never written, sparse,
    filtered and filter-masked chunks. Other indexes are left to chunk_iter (None)."""
    libver = "earliest" if index == "btree-v1" else "latest"
    if index == "btree-v2":  # two or more unlimited axes
        shape, chunks, maxshape = shape + (2,), chunks + (1,), (None,) * (len(shape) + 1)
    if index == "extensible-array":  # one, the first (`test_extensible_array_...`: others)
        maxshape = (None,) + (maxshape or shape)[1:]
    p = tmp_path / "a.h5"
    with h5py.File(p, "w", libver=libver) as f:
        kw = dict(compression="gzip", shuffle=True) if filtered else {}
        d = f.create_dataset("x", shape=shape, chunks=chunks, maxshape=maxshape, dtype="i2", **kw)
        n = shape[0]
        d[: n // 5] = (np.arange(math.prod(shape)).reshape(shape) % 1000)[: n // 5]
        d[n - 1] = 7  # the pages between never written
        if filtered:
            d.id.write_direct_chunk((0,) * len(shape), np.zeros(chunks, "i2").tobytes(),
                                    filter_mask=1)
    native, ref = _native_and_chunk_iter(p)
    assert native is not None and len(ref[0]) > 0
    for a, b in zip(native, ref):
        assert a.dtype == b.dtype and a.shape == b.shape and (a == b).all()
    if filtered:
        assert (native[3] == 1).sum() == 1
    q = tmp_path / "other.h5"
    with h5py.File(q, "w", libver="latest") as f:  # a single chunk
        f.create_dataset("x", data=np.zeros(shape, "i2"), chunks=shape)
    assert _native_and_chunk_iter(q)[0] is None


def test_chunk_index_reader_refuses_what_it_does_not_expect(tmp_path, monkeypatch):
    """A damaged node or a chunk count other than HDF5's is `_Unexpected` (the scan then
    asks chunk_iter); with the direct reader failing the scan's block table is the same."""
    from virtualize.formats.hdf5 import header as hdf5_header
    from virtualize.formats.hdf5 import index as hdf5_index
    from virtualize.formats.hdf5 import walk as hdf5_walk

    p = tmp_path / "v1.h5"
    with h5py.File(p, "w", libver="earliest") as f:
        f.create_dataset("x", data=np.arange(1800, dtype="f4").reshape(600, 3), chunks=(2, 3),
                         compression="gzip")
    good = virtualize.inventory(p).variables["x"].blocks.refs.copy()
    with h5py.File(p, "r") as f:
        d = f["x"]
        with pytest.raises(hdf5_header.Unexpected, match="HDF5 counts"):
            with open(p, "rb") as fh:
                hdf5_index._native_chunk_index(lambda n, off: (fh.seek(off), fh.read(n))[1],
                                              p.stat().st_size, d.id, (2, 3), lambda: 7)
        body = hdf5_header.layout_message(lambda n, off: p.read_bytes()[off:off + n],
                                         h5py.h5g.get_objinfo(d.id, b".").objno[0], p.stat().st_size)
        root = int.from_bytes(body[3:11], "little")
    raw = bytearray(p.read_bytes())
    assert raw[root:root + 4] == b"TREE"
    raw[root:root + 4] = b"TRE?"
    with h5py.File(p, "r") as f:
        d = f["x"]
        with pytest.raises(hdf5_header.Unexpected, match="no chunk B-tree node"):
            hdf5_index._native_chunk_index(lambda n, off: bytes(raw[off:off + n]), len(raw),
                                          d.id, (2, 3), d.id.get_num_chunks)

    def unexpected(*a, **kw):
        raise hdf5_header.Unexpected("as if")
    monkeypatch.setattr(hdf5_walk, "_native_chunk_index", unexpected)
    assert (virtualize.inventory(p).variables["x"].blocks.refs == good).all()


def test_damaged_fixed_array_is_refused_as_before(tmp_path):
    """A fixed array element damaged on disk fails HDF5's checksum in its own walk of the
    index (which the direct reader asks for its count): the dataset is refused as corrupt,
    as chunk_iter refuses it, never referenced from the damaged bytes."""
    from virtualize.formats.hdf5 import header as hdf5_header

    p = tmp_path / "fa.h5"
    with h5py.File(p, "w", libver="latest") as f:
        f.create_dataset("x", data=np.arange(1200, dtype="f4").reshape(600, 2), chunks=(2, 2))
        f["ok"] = np.arange(3.0)
    raw = bytearray(p.read_bytes())
    with h5py.File(p, "r") as f:
        body = hdf5_header.layout_message(lambda n, off: bytes(raw[off:off + n]),
                                         h5py.h5g.get_objinfo(f["x"].id, b".").objno[0], len(raw))
    header = int.from_bytes(body[-8:], "little")
    block = int.from_bytes(raw[header + 16:header + 24], "little")
    assert raw[block:block + 4] == b"FADB"
    raw[block + 14 + 8 * 3] ^= 0x40  # the fourth chunk's address
    p.write_bytes(bytes(raw))
    inv = virtualize.inventory(p)
    assert inv.variables["ok"].blocks is not None
    assert "x" not in inv.variables or inv.variables["x"].blocks is None
    assert any(q.kind == "corrupt" and q.loc.variable == "x" for q in inv.problems)


# Extensible arrays (libver "latest", one unlimited axis) as HDF5 makes them: 4 elements
# in the index block, then super blocks s of 2**(s//2) data blocks of 16 * 2**((s+1)//2)
# elements, the first four super blocks' data blocks addressed by the index block, the
# others' by super blocks; data blocks of more than 1024 elements in pages of 1024, each
# written or not. Per case: shape, chunks, maxshape, the chunk cells written (slices of
# the grid), the structures read.
_ALL = slice(None)
EARRAYS = {
    "index-block": ((3,), (1,), (None,), [(slice(0, 3),)], {b"EAHD", b"EAIB"}),
    # the index block's data blocks, some never written (elements 52..115, 180..243)
    "data-blocks": ((200,), (1,), (None,), [(slice(0, 30),), (slice(150, 151),)],
                    {b"EAHD", b"EAIB", b"EADB"}),
    # super blocks (elements 244..): 4..7 never written, of 8's 16 data blocks one
    "super-blocks": ((20000,), (4,), (None,), [(slice(0, 75),), (slice(4999, 5000),)],
                     {b"EAHD", b"EAIB", b"EADB", b"EASB"}),
    # paged data blocks (super blocks 13.., elements 131060..), most pages never written
    "paged": ((300000,), (1,), (None,),
              [(slice(0, 1000),), (slice(150000, 150001),), (slice(150500, 152000),),
               (slice(299999, 300000),)], {b"EAHD", b"EAIB", b"EADB", b"EASB", b"page"}),
    "unlimited-first": ((3000, 3), (2, 2), (None, 3), [(slice(0, 120), _ALL), (1499, 1)],
                        {b"EAHD", b"EAIB", b"EADB", b"EASB"}),
    # HDF5 numbers the chunks with the unlimited axis moved first
    "unlimited-second": ((3, 24000), (2, 8), (3, None), [(_ALL, slice(0, 600)), (1, 2999)],
                         {b"EAHD", b"EAIB", b"EADB", b"EASB"}),
    "unlimited-third": ((2, 3, 400), (1, 2, 1), (2, 3, None),
                        [(_ALL, _ALL, slice(0, 100)), (1, 0, 399)],
                        {b"EAHD", b"EAIB", b"EADB", b"EASB"}),
    # a grid of the maximum extent larger than the current one before the unlimited axis
    "unlimited-second-grown": ((7, 300), (2, 2), (9, None), [(slice(0, 4), slice(0, 30)),
                                                               (3, 149)],
                               {b"EAHD", b"EAIB", b"EADB", b"EASB"}),
}


def _earray_file(path, shape, chunks, maxshape, writes, filtered, libver="latest"):
    """x(shape) i2 in `chunks`, the chunk cells `writes` written (values of varying
    sparsity: filtered, their stored sizes differ), cell 0 rewritten with its filter mask
    set when filtered. The cells written."""
    grid = tuple(-(-n // c) for n, c in zip(shape, chunks))
    written = np.zeros(grid, bool)
    rng = np.random.default_rng(1)
    with h5py.File(path, "w", libver=libver) as f:
        kw = dict(compression="gzip", shuffle=True) if filtered else {}
        d = f.create_dataset("x", shape=shape, chunks=chunks, maxshape=maxshape, dtype="i2",
                             fillvalue=-1, **kw)
        for w in writes:
            w = tuple(slice(i, i + 1) if isinstance(i, int) else i for i in w)
            written[w] = True
            region = tuple(slice((s.start or 0) * c, min((g if s.stop is None else s.stop) * c, n))
                           for s, c, n, g in zip(w, chunks, shape, grid))
            size = tuple(r.stop - r.start for r in region)
            values = rng.integers(0, 1000, size=size).astype("i2")
            values[rng.random(size) < rng.random(size)] = 0
            d[region] = values
        if filtered:
            d.id.write_direct_chunk((0,) * len(shape), np.zeros(chunks, "i2").tobytes(),
                                    filter_mask=1)
            written[(0,) * len(shape)] = True
    return {tuple(int(i) for i in c) for c in np.argwhere(written)}


def _assert_chunks_are_there(path, got, cells):
    """Every chunk of `got` (offsets, addresses, sizes, masks) is the one HDF5 reads at its
    offset (`read_direct_chunk`: its bytes and filter mask), and they are the cells written."""
    with h5py.File(path, "r") as f, open(path, "rb") as fh:
        d = f["x"]
        raw = fh.read()
        assert len(got[0]) == d.id.get_num_chunks() == len(cells)
        assert {tuple(int(o) // c for o, c in zip(off, d.chunks)) for off in got[0]} == cells
        for off, addr, size, mask in zip(*got):
            m, data = d.id.read_direct_chunk(tuple(int(o) for o in off))
            assert (m, data) == (mask, raw[addr:addr + size]), off


@pytest.mark.parametrize("filtered", [False, True], ids=["unfiltered", "filtered"])
@pytest.mark.parametrize("case", list(EARRAYS))
def test_extensible_array_read_directly_equals_chunk_iter(tmp_path, case, filtered):
    """The direct reader of extensible arrays: its index block, data blocks, super blocks
    and pages as the case uses them, blocks and pages never written, filtered chunks of
    different stored sizes, a filter-masked chunk. It lists chunk_iter's chunks in
    chunk_iter's order, each at the cell whose data it holds (as HDF5 reads them), with
    its address, stored size and filter mask; chunk_iter gives the same coordinates where
    the unlimited axis is the first, and where it is not, coordinates HDF5 got wrong
    (`_chunk_iter_swizzles`) from which the scan puts them right."""
    import os

    from virtualize.formats.hdf5 import index as hdf5_index

    shape, chunks, maxshape, writes, structures = EARRAYS[case]
    p = tmp_path / "ea.h5"
    cells = _earray_file(p, shape, chunks, maxshape, writes, filtered)
    seen = set()

    def pread(n, off):
        data = os.pread(fd, n, off)
        seen.add(data[:4] if data[:2] == b"EA" else b"page" if n >= 1024 else b"")
        return data

    with h5py.File(p, "r") as f:
        d = f["x"]
        fd = os.open(p, os.O_RDONLY)
        try:
            native = hdf5_index._native_chunk_index(pread, os.fstat(fd).st_size, d.id,
                                                   tuple(d.chunks), d.id.get_num_chunks)
        finally:
            os.close(fd)
        ref = hdf5_index._walk_chunk_index(d.id, d.ndim)
    assert native is not None and seen - {b""} == structures
    _assert_chunks_are_there(p, native, cells)
    for a, b in zip(native[1:], ref[1:]):
        assert a.dtype == b.dtype and a.shape == b.shape and (a == b).all()
    k = maxshape.index(None)
    if k and hdf5_index._chunk_iter_swizzles():
        grid = tuple(0 if a == k else -(-(m or 0) // c) for a, (m, c) in enumerate(zip(maxshape, chunks)))
        assert (hdf5_index._chunk_iter_renumbered(ref[0], chunks, k, grid) == native[0]).all()
        assert (ref[0] != native[0]).any()  # what HDF5 lists is elsewhere
    else:
        assert native[0].dtype == ref[0].dtype and (native[0] == ref[0]).all()
    if filtered:
        assert (native[3] == 1).sum() == 1
        if math.prod(chunks) >= 4:
            assert len(np.unique(native[2][native[3] == 0])) > 2  # stored sizes differ


@pytest.fixture(scope="module")
def earray_paged(tmp_path_factory):
    """The "paged" extensible array, filtered: its bytes, and its super and data blocks'
    offsets in them."""
    p = tmp_path_factory.mktemp("earray") / "ea.h5"
    shape, chunks, maxshape, writes, _structures = EARRAYS["paged"]
    _earray_file(p, shape, chunks, maxshape, writes, True)
    raw = p.read_bytes()
    where = {sig: [m.start() for m in re.finditer(sig, raw)]
             for sig in (b"EAHD", b"EAIB", b"EASB", b"EADB")}
    return p, raw, where


@pytest.mark.parametrize("damage,message", [
    ("EAHD", "no extensible array header"),
    ("EAIB", "no extensible array index block"),
    ("EASB", "no extensible array super block"),
    ("EADB", "no extensible array data block"),
    ("super block's header", "no extensible array super block"),
    ("data block's offset", "no extensible array data block"),
    ("header's data block count", "not those its header counts"),
    ("page bitmap", "HDF5 counts"),
    ("count", "HDF5 counts"),
])
def test_damaged_extensible_array_is_unexpected(earray_paged, damage, message):
    """An extensible array whose structures the direct reader finds other than HDF5 left
    them (HDF5 reads the file, the reader a damaged copy): a signature, the owning header's
    address, a block's offset, the header's block counts, a page bitmap (fewer chunks
    than HDF5 counts), or a count other than HDF5's is `_Unexpected` (chunk_iter decides)."""
    from virtualize.formats.hdf5 import header as hdf5_header
    from virtualize.formats.hdf5 import index as hdf5_index

    p, good, where = earray_paged
    raw = bytearray(good)
    count = None
    if damage.encode() in where:  # the last one's signature
        raw[where[damage.encode()][-1] + 3] ^= 0x01
    elif damage == "super block's header":
        raw[where[b"EASB"][0] + 6] ^= 0x01
    elif damage == "data block's offset":
        raw[where[b"EADB"][-1] + 14] ^= 0x01
    elif damage == "header's data block count":
        raw[where[b"EAHD"][0] + 28] ^= 0x01
    elif damage == "page bitmap":  # the last super block's: its data blocks are paged
        sb = where[b"EASB"][-1]
        bits = next(i for i in range(sb + 18, sb + 82) if raw[i])
        raw[bits] = 0
    else:
        count = 7
    with h5py.File(p, "r") as f:
        d = f["x"]
        with pytest.raises(hdf5_header.Unexpected, match=message):
            hdf5_index._native_chunk_index(lambda n, off: bytes(raw[off:off + n]), len(raw),
                                          d.id, tuple(d.chunks),
                                          d.id.get_num_chunks if count is None else lambda: count)


def test_damaged_extensible_array_falls_back_to_chunk_iter(earray_paged, tmp_path, monkeypatch):
    """In a scan, an extensible array the direct reader finds damaged is read by
    chunk_iter: the same block table as a scan without the direct reader. Damaged on disk
    (an element), HDF5's own walk fails its checksum: refused as corrupt, as chunk_iter
    refuses it, never referenced from the damaged bytes."""
    from virtualize.formats.hdf5 import header as hdf5_header
    from virtualize.formats.hdf5 import index as hdf5_index
    from virtualize.formats.hdf5 import walk as hdf5_walk

    p, good, where = earray_paged
    real = hdf5_index._native_chunk_index
    raised = []

    def damaged(pread, size, *a):
        def bad(n, off):
            data = bytes(pread(n, off))
            return data.replace(b"EASB", b"EASb") if data[:4] == b"EASB" else data
        try:
            return real(bad, size, *a)
        except hdf5_header.Unexpected as e:
            raised.append(e)
            raise

    monkeypatch.setattr(hdf5_walk, "_native_chunk_index", damaged)
    fallback = virtualize.inventory(p)
    assert len(raised) == 1
    monkeypatch.setattr(hdf5_walk, "_native_chunk_index", lambda *a: None)
    plain = virtualize.inventory(p)
    assert (fallback.variables["x"].blocks.refs == plain.variables["x"].blocks.refs).all()
    monkeypatch.setattr(hdf5_walk, "_native_chunk_index", real)
    raw = bytearray(good)
    block = where[b"EADB"][0]
    raw[block + 18 + 5] ^= 0x40  # the first data block's first chunk address
    q = tmp_path / "damaged.h5"
    q.write_bytes(bytes(raw))
    inv = virtualize.inventory(q)
    assert "x" not in inv.variables or inv.variables["x"].blocks is None
    assert any(e.kind == "corrupt" and e.loc.variable == "x" for e in inv.problems)


def _unlimited_later_file(path, libver="latest", **kw):
    """Datasets with one unlimited axis that is not the first: small grids (listed by
    chunk_iter) and a large one (read directly), sparse; one with its unlimited axis first."""
    rng = np.random.default_rng(2)
    with h5py.File(path, "w", libver=libver, **kw) as f:
        d = f.create_dataset("a", shape=(3, 5), maxshape=(3, None), chunks=(1, 2), dtype="i4")
        d[...] = np.arange(15).reshape(3, 5)
        d = f.create_dataset("b", shape=(3, 2), maxshape=(3, None), chunks=(1, 1), dtype="i4",
                             fillvalue=-1)
        d[1, 1] = 42  # the only chunk: chunk_iter lists it at (0, 4), outside the grid
        d = f.create_dataset("c", shape=(2, 3, 40), maxshape=(2, 3, None), chunks=(1, 2, 4),
                             dtype="f4", compression="gzip")
        d[:, :, :12] = rng.random((2, 3, 12))
        d[1, 2, 39] = 5
        d = f.create_dataset("big", shape=(4, 1000), maxshape=(4, None), chunks=(1, 2),
                             dtype="i2", fillvalue=-3)
        d[:, :300] = rng.integers(0, 99, (4, 300))
        d[3, 999] = 1
        d = f.create_dataset("first", shape=(10, 3), maxshape=(None, 3), chunks=(2, 2),
                             dtype="i2")
        d[...] = np.arange(30).reshape(10, 3)
        d = f.create_dataset("row", shape=(1, 9), maxshape=(1, None), chunks=(1, 2), dtype="i2")
        d[0, 3:] = 8  # one chunk before the unlimited axis: the numberings agree


@pytest.mark.parametrize("libver", ["latest", "earliest"])
def test_chunks_of_an_unlimited_axis_not_the_first_are_at_their_places(tmp_path, monkeypatch,
                                                                        libver):
    """Datasets with their one unlimited axis not the first: an extensible array (libver
    "latest"), whose chunks HDF5's chunk_iter lists at other cells (HDF5 2.0.0), read
    directly (a large grid) or listed by chunk_iter and put at their places (small
    grids, a dataset behind an external link, a file with a user block), and a v1 B-tree
    (libver "earliest"), which chunk_iter lists right: every cube reads as h5py."""
    from virtualize.formats.hdf5 import index as hdf5_index
    from virtualize.formats.hdf5 import walk as hdf5_walk

    (tmp_path / "sub").mkdir()
    _unlimited_later_file(tmp_path / "sub" / "t.h5", libver)
    _unlimited_later_file(tmp_path / "m.h5", libver)
    with h5py.File(tmp_path / "m.h5", "a", libver=libver) as f:
        f["lnk"] = h5py.ExternalLink("sub/t.h5", "/a")
    read = []
    real = hdf5_index._native_chunk_index
    monkeypatch.setattr(hdf5_walk, "_native_chunk_index",
                        lambda *a: read.append(len(real(*a)[0])) or real(*a))
    inv = virtualize.inventory(tmp_path / "m.h5")  # every dataset referenced, none inlined
    assert not inv.problems and all(v.blocks is not None for v in inv.variables.values())
    # "big", read directly (a v1 B-tree's every dataset: only its keys show a key HDF5's
    # lookups miss)
    assert read == ([601] if libver == "latest" else [9, 1, 601, 13, 10, 4])
    out = tmp_path / "m.zarr"
    report = virtualize.virtualize([tmp_path / "m.h5"], out, scan_timeout=None)
    assert report.ok, report.problems
    cube = virtualize.open(out)
    with h5py.File(tmp_path / "m.h5", "r") as f:
        for name in ("a", "b", "c", "big", "first", "row", "lnk"):
            np.testing.assert_array_equal(cube[name][...], f[name][()], err_msg=name)
        assert f["b"][1, 1] == 42
    _unlimited_later_file(tmp_path / "ub.h5", libver, userblock_size=512)
    inv = virtualize.inventory(tmp_path / "ub.h5")
    assert not inv.problems and all(v.blocks is not None for v in inv.variables.values())
    report = virtualize.virtualize([tmp_path / "ub.h5"], tmp_path / "ub.zarr", scan_timeout=None)
    assert report.ok, report.problems
    cube = virtualize.open(tmp_path / "ub.zarr")
    with h5py.File(tmp_path / "ub.h5", "r") as f:
        for name in ("a", "b", "c", "big", "first", "row"):
            np.testing.assert_array_equal(cube[name][...], f[name][()], err_msg=name)


def test_chunks_that_cannot_be_placed_are_refused(tmp_path, monkeypatch):
    """Where chunk_iter misplaces an extensible array's chunks and the dataset's layout
    message cannot be read (or this HDF5 lists them some way not known), the dataset is
    refused (`chunk-coordinates`, inlined on request), never referenced at chunk_iter's
    places; datasets whose chunks chunk_iter places right (the unlimited axis first, one
    chunk before it) are not."""
    from virtualize.formats.hdf5 import walk as hdf5_walk

    p = tmp_path / "u.h5"
    _unlimited_later_file(p)

    def unreadable(*a):
        raise OSError("as if")

    for i, patch in enumerate([(hdf5_walk._Scanner, "_layout_body", unreadable),
                               (hdf5_walk, "_chunk_iter_swizzles", lambda: None)]):
        with monkeypatch.context() as m:
            m.setattr(*patch)
            inv = virtualize.inventory(p)
            refused = {q.loc.variable for q in inv.problems if q.kind == "chunk-coordinates"}
            assert refused == {"a", "b", "c"}, inv.problems
            assert all(inv.variables[v].blocks is None for v in refused)
            assert inv.variables["first"].blocks is not None
            assert inv.variables["row"].blocks is not None
            out = tmp_path / f"u{i}.zarr"
            report = virtualize.virtualize([p], out, inline=["a", "b", "c"], scan_timeout=None)
            assert report.ok, report.problems
            cube = virtualize.open(out)
            with h5py.File(p, "r") as f:
                for name in ("a", "b", "c", "first", "row"):
                    np.testing.assert_array_equal(cube[name][...], f[name][()], err_msg=name)


def test_remote_extensible_array_chunks_are_at_their_places(tmp_path):
    """A remote file's extensible arrays whose unlimited axis is not the first (chunk_iter,
    the layout message read through the remote file): the same block tables as the
    local file's."""
    from servers import RangeHTTPServer

    p = tmp_path / "u.h5"
    _unlimited_later_file(p)
    local = virtualize.inventory(p)
    srv = RangeHTTPServer(tmp_path)
    try:
        remote = virtualize.inventory(f"{srv.url}/u.h5")
    finally:
        srv.stop()
    assert not remote.problems and sorted(remote.variables) == sorted(local.variables)
    for name, v in local.variables.items():
        assert (remote.variables[name].blocks.refs == v.blocks.refs).all(), name
    refs = remote.variables["b"].blocks.refs  # its one chunk, where h5py reads 42
    assert refs[1, 1]["length"] == 4 and (refs["length"] > 0).sum() == 1


@pytest.mark.parametrize("shape,chunks,maxshape", [
    ((7, 5), (2, 2), None), ((7, 5), (2, 2), (11, 9)), ((4, 3, 6), (1, 2, 4), (4, 5, 6)),
])
def test_implicit_index_read_directly_equals_chunk_iter(tmp_path, shape, chunks, maxshape):
    """An implicit index (no filters, space allocated early): the chunks of the current
    extent at their places in the grid of the maximum extent, as chunk_iter lists them."""
    p = tmp_path / "implicit.h5"
    with h5py.File(p, "w", libver="latest") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk(chunks)
        dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
        h5py.h5d.create(f.id, b"x", h5py.h5t.STD_I16LE,
                        h5py.h5s.create_simple(shape, maxshape or shape), dcpl=dcpl)
    native, ref = _native_and_chunk_iter(p)
    assert native is not None and len(ref[0]) == math.prod(-(-n // c) for n, c in zip(shape, chunks))
    for a, b in zip(native, ref):
        assert a.dtype == b.dtype and a.shape == b.shape and (a == b).all()


@pytest.mark.parametrize("index", ["btree-v1", "fixed-array", "extensible-array", "btree-v2",
                                   "implicit"])
def test_scan_with_the_direct_reader_equals_the_scan_without(tmp_path, monkeypatch, index):
    """A whole scan (block tables, problems, bytes read) is the same whether the chunk
    index is read directly or through chunk_iter; the direct reader is used."""
    from virtualize.formats.hdf5 import index as hdf5_index
    from virtualize.formats.hdf5 import walk as hdf5_walk

    p = tmp_path / "a.h5"
    spec = {"btree-v1": dict(libver="earliest", maxshape=None),
            "fixed-array": dict(libver="latest", maxshape=None),
            "extensible-array": dict(libver="latest", maxshape=(None, 5)),
            "btree-v2": dict(libver="latest", maxshape=(None, None)),
            "implicit": dict(libver="latest", maxshape=None, early=True)}[index]
    _index_type_file(p, chunks=(1, 1), **spec)  # 35 chunks
    with h5py.File(p, "a", libver=spec["libver"]) as f:  # and one of 600 chunks
        if spec.get("early"):
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_chunk((1, 2))
            dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
            h5py.h5d.create(f.id, b"y", h5py.h5t.STD_I32LE,
                            h5py.h5s.create_simple((600, 2), (600, 2)), dcpl=dcpl)
            f["y"][...] = np.arange(1200, dtype="i4").reshape(600, 2)
        else:
            f.create_dataset("y", data=np.arange(1200, dtype="i4").reshape(600, 2),
                             chunks=(1, 2), maxshape=spec["maxshape"] and
                             ((None, 2) if index == "extensible-array" else (None, None)),
                             compression="gzip")
    got = []
    real = hdf5_index._native_chunk_index
    monkeypatch.setattr(hdf5_walk, "_native_chunk_index",
                        lambda *a: got.append(real(*a)) or got[-1])
    direct = virtualize.inventory(p)
    # the 600-chunk index was read directly (and a v1 B-tree of any size: its keys)
    assert [len(g[1]) for g in got] == ([21, 600] if index == "btree-v1" else [600])
    monkeypatch.setattr(hdf5_walk, "_native_chunk_index", lambda *a: None)
    plain = virtualize.inventory(p)
    for name in ("x", "y"):
        assert (direct.variables[name].blocks.refs == plain.variables[name].blocks.refs).all()
    assert [(q.kind, q.loc) for q in direct.problems] == [(q.kind, q.loc) for q in plain.problems]
    assert direct.bytes_read <= plain.bytes_read + 4096


def _hdf5_library():
    """The libhdf5 h5py runs on (for H5Pset_chunk_opts, which h5py does not wrap)."""
    import ctypes
    import glob
    import os

    here = os.path.dirname(h5py.__file__)
    found = sorted(glob.glob(os.path.join(here, "..", "h5py.libs", "libhdf5-*.so*"))) + \
        sorted(glob.glob(os.path.join(here, "..", "h5py.libs", "libhdf5.so*")))
    found = [f for f in found if "_hl" not in f]
    if not found:
        pytest.skip("h5py's libhdf5 not found to set chunk options")
    return ctypes.CDLL(found[0])


@pytest.mark.parametrize("shape,chunks", [((10,), (4,)), ((7, 10), (2, 3)), ((5, 7), (2, 3))])
def test_partial_edge_chunks_left_unfiltered_are_held_not_misread(tmp_path, shape, chunks):
    """A layout that leaves partial edge chunks unfiltered (H5Pset_chunk_opts with
    H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS; their filter mask says nothing): referenced with
    the dataset's codecs they would read as other numbers (shuffle alone: silently). As
    for chunks of another filter mask, the pipeline is that of most chunks and the others
    are refused as `filter-mask` problems naming each block (the edge chunks, or where
    they are most of them the filtered ones); --materialize copies them exactly."""
    import ctypes

    lib = _hdf5_library()
    p = tmp_path / "edges.h5"
    data = (np.arange(math.prod(shape), dtype="i4") * 1000 + 7).reshape(shape)
    with h5py.File(p, "w", libver="latest") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk(chunks)
        dcpl.set_shuffle()
        assert lib.H5Pset_chunk_opts(ctypes.c_int64(dcpl.id), ctypes.c_uint(0x0002)) >= 0
        ds = h5py.h5d.create(f.id, b"x", h5py.h5t.STD_I32LE, h5py.h5s.create_simple(shape),
                             dcpl)
        ds.write(h5py.h5s.ALL, h5py.h5s.ALL, data)
    grid = [-(-n // c) for n, c in zip(shape, chunks)]
    edge = {b for b in np.ndindex(*grid)
            if any((i + 1) * c > n for i, c, n in zip(b, chunks, shape))}
    inner = set(np.ndindex(*grid)) - edge
    report = virtualize.check([p], inline_threshold=0)
    held = [q for q in report.problems if q.kind == "filter-mask"]
    assert not report.ok and {q.loc.block for q in held} == (edge if len(edge) < len(inner)
                                                              else inner)
    if len(edge) < len(inner):
        assert all("partial edge chunk is stored unfiltered" in q.message for q in held)
    else:  # the cube's pipeline is the edge chunks' (none)
        assert [q.loc.variable for q in report.problems if q.kind == "filter-skipped"] == ["x"]
    virtualize.virtualize([p], tmp_path / "c.zarr", materialize=True, inline_threshold=0)
    with h5py.File(p) as f:
        assert_same(virtualize.open(tmp_path / "c.zarr")["x"][...], f["x"][()], "x")


def test_contiguous_coordinates_read_from_their_bytes_are_h5pys(tmp_path, monkeypatch):
    """A contiguous coordinate's values are read from its bytes in the file (big-endian,
    integer, float): equal to h5py's read, in h5py's type, and digested as when h5py reads
    them (the digest of the bytes the scan read is the digest of the bytes in the file)."""
    from virtualize.formats.hdf5 import walk

    p = tmp_path / "c.h5"
    with h5py.File(p, "w") as f:
        for name, dt in (("x", ">f8"), ("y", "<i2"), ("t", ">u4")):
            f.create_dataset(name, data=(np.arange(5) * 3 + 1).astype(dt))
            f[name].make_scale(name)
        v = f.create_dataset("v", data=np.zeros((5, 5, 5), "f4"), chunks=(5, 5, 1))
        for axis, name in enumerate(("t", "x", "y")):
            v.dims[axis].attach_scale(f[name])
    read = virtualize.inventory(p)
    monkeypatch.setattr(walk, "_stored_values", lambda *a: None)  # h5py reads them
    h5 = virtualize.inventory(p)
    with h5py.File(p, "r") as f:
        for name in ("x", "y", "t"):
            got = read.variables[name].values
            assert got.dtype == f[name].dtype and np.array_equal(got, f[name][()]), name
            assert read.variables[name].digest == h5.variables[name].digest
            assert read.variables[name].digest is not None
    assert read.fingerprint == h5.fingerprint
