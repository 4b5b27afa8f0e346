"""HDF5 virtual datasets (VDS): read at the extent HDF5 resolves, referenced through
their mappings into the source files' chunks where they line up, else inlined when small
or refused. Every cube is read back through virtualize.open, xarray and the kerchunk
export (fsspec + zarr), and compared with h5py's read of the VDS."""

from __future__ import annotations

import os
import shutil

import h5py
import numpy as np
import pytest
import xarray as xr

import virtualize

from helpers import assert_same, kerchunk_group

U = h5py.h5s.UNLIMITED


def source(path, data, **kw):
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=data, **kw)


def low_level_vds(path, shape, maxshape, dtype, maps, fill=None, name="vds"):
    """A VDS made with h5py's low-level calls (unlimited and printf-style mappings):
    `maps` = [(virtual (start, stride, count, block), file, dataset, (source shape,
    source maxshape, source (start, count, stride, block) or None for all))]."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    if fill is not None:
        dcpl.set_fill_value(np.array([fill], dtype=dtype))
    vsp = h5py.h5s.create_simple(shape, maxshape)
    for (start, stride, count, block), fn, dn, (sshape, smax, ssel) in maps:
        vsp.select_hyperslab(start, count, stride, block)
        ssp = h5py.h5s.create_simple(sshape, smax)
        if ssel:
            ssp.select_hyperslab(*ssel)
        dcpl.set_virtual(vsp, fn.encode(), dn.encode(), ssp)
    with h5py.File(path, "a") as f:
        h5py.h5d.create(f.id, name.encode(), h5py.h5t.py_create(np.dtype(dtype)), vsp, dcpl=dcpl)


def h5read(path, name="vds"):
    with h5py.File(path, "r") as f:  # by path: HDF5 finds the sources beside the file
        return f[name][()]


def roundtrip(files, tmp_path, concat_dim=None, name="vds", expected=None, **kw):
    """Virtualize into a cube and a kerchunk export, read both three ways, compare with
    h5py's read of the VDS (`expected`, default: the one file's). Returns the report."""
    cube, refs = tmp_path / "cube.zarr", tmp_path / "x.json"
    report = virtualize.virtualize(files, cube, concat_dim, **kw)
    assert report.ok, report.to_text()
    virtualize.virtualize(files, refs, concat_dim, **kw)
    if expected is None:
        expected = h5read(files[0], name)
    assert_same(virtualize.open(cube)[name][...], expected, "virtualize.open")
    assert_same(kerchunk_group(refs)[name][...], expected, "kerchunk + fsspec + zarr")
    ds = xr.open_dataset(cube, engine="virtualize", mask_and_scale=False, decode_times=False)
    assert_same(ds[name].values, expected, "xarray")
    return report


def referenced(report, name="vds"):
    """The array's manifest references source chunks (it is not inlined)."""
    arr = report.plan.arrays[name]
    assert arr.refs is not None and (arr.refs["length"] > 0).any(), f"{name} not referenced"
    return {report.plan.sources[i].path for i in np.unique(arr.refs["path"][arr.refs["length"] > 0])}


def vds_problems(report):
    return [p for p in report.problems if p.kind in ("virtual-dataset", "external-link")]


# -- fixed extent ---------------------------------------------------------------------

@pytest.mark.parametrize("storage", ["gzip", "contiguous"])
def test_fixed_vds_over_three_files_is_referenced_into_their_chunks(tmp_path, storage):
    rng = np.random.default_rng(1)
    kw = dict(chunks=(2, 5, 12), compression="gzip", shuffle=True) if storage == "gzip" else {}
    for i in range(3):
        source(tmp_path / f"s{i}.h5", rng.normal(size=(4, 10, 12)).astype("<f4"), **kw)
    layout = h5py.VirtualLayout(shape=(12, 10, 12), dtype="<f4")
    for i in range(3):
        layout[4 * i:4 * i + 4] = h5py.VirtualSource(str(tmp_path / f"s{i}.h5"), "data",
                                                     shape=(4, 10, 12))
    with h5py.File(tmp_path / "v.h5", "w") as f:
        f.create_virtual_dataset("vds", layout, fillvalue=-9)
    report = roundtrip([tmp_path / "v.h5"], tmp_path)
    assert referenced(report) == {str(tmp_path / f"s{i}.h5") for i in range(3)}
    assert not vds_problems(report)
    # the source files are sources of the cube, found through the VDS
    srcs = {s.path: s for s in report.plan.sources}
    assert srcs[str(tmp_path / "s1.h5")].referenced_by == str(tmp_path / "v.h5")
    if storage == "gzip":
        assert any(c["name"] == "numcodecs.zlib" for c in report.plan.arrays["vds"].codecs)


def test_large_contiguous_sources_are_cut_into_blocks_of_whole_rows(tmp_path):
    """Two contiguous sources of 18 rows of 1 MiB: one block of 18 rows each in the scan
    (what every mapping's runs allow), cut into chunks of 9 rows by --chunk-size (16 MiB
    by default), not one 18 MiB chunk each."""
    layout = h5py.VirtualLayout(shape=(36, 512, 256), dtype="<f8")
    for i in range(2):
        data = np.arange(18 * 512 * 256, dtype="<f8").reshape(18, 512, 256) + i
        source(tmp_path / f"s{i}.h5", data)
        layout[18 * i:18 * i + 18] = h5py.VirtualSource(f"s{i}.h5", "data",
                                                       shape=(18, 512, 256))
    with h5py.File(tmp_path / "v.h5", "w") as f:
        f.create_virtual_dataset("vds", layout)
    report = roundtrip([tmp_path / "v.h5"], tmp_path)
    assert len(referenced(report)) == 2
    assert report.plan.arrays["vds"].chunk_lengths[0] == (9, 9, 9, 9)
    whole = virtualize.check([tmp_path / "v.h5"], chunk_size=0).plan.arrays["vds"]
    assert whole.chunk_lengths[0] == (18, 18)


def test_chunked_and_contiguous_sources_on_one_grid(tmp_path):
    """An unfiltered chunked source (chunks of 2 rows) beside a contiguous one of 5 rows:
    the contiguous one cut at the chunked one's grid, its short last block at the end."""
    source(tmp_path / "a.h5", np.arange(24, dtype="<i2").reshape(4, 6), chunks=(2, 6))
    source(tmp_path / "b.h5", -np.arange(30, dtype="<i2").reshape(5, 6))
    layout = h5py.VirtualLayout(shape=(9, 6), dtype="<i2")
    layout[:4] = h5py.VirtualSource("a.h5", "data", shape=(4, 6))
    layout[4:] = h5py.VirtualSource("b.h5", "data", shape=(5, 6))
    with h5py.File(tmp_path / "v.h5", "w") as f:
        f.create_virtual_dataset("vds", layout)
    report = roundtrip([tmp_path / "v.h5"], tmp_path)
    assert len(referenced(report)) == 2
    assert report.plan.arrays["vds"].chunk_lengths[0] == (2, 2, 2, 2, 1)


def test_unmapped_regions_read_as_the_vds_fill_value(tmp_path):
    source(tmp_path / "s.h5", np.arange(40, dtype="<i2").reshape(4, 10), chunks=(2, 5))
    layout = h5py.VirtualLayout(shape=(10, 10), dtype="<i2")
    layout[2:6] = h5py.VirtualSource(str(tmp_path / "s.h5"), "data", shape=(4, 10))
    with h5py.File(tmp_path / "v.h5", "w") as f:
        f.create_virtual_dataset("vds", layout, fillvalue=-7)
    report = roundtrip([tmp_path / "v.h5"], tmp_path)
    referenced(report)
    assert (h5read(tmp_path / "v.h5")[8:] == -7).all()


def test_vds_in_the_same_file_as_its_sources(tmp_path):
    p = tmp_path / "v.h5"
    with h5py.File(p, "w") as f:
        a = f.create_dataset("a", data=np.arange(60.0).reshape(6, 10), chunks=(3, 10),
                             compression="gzip")
        b = f.create_dataset("b", data=-np.arange(60.0).reshape(6, 10), chunks=(3, 10),
                             compression="gzip")
        layout = h5py.VirtualLayout(shape=(12, 10), dtype="<f8")
        layout[:6] = h5py.VirtualSource(a)
        layout[6:] = h5py.VirtualSource(b)
        f.create_virtual_dataset("vds", layout)
    report = roundtrip([p], tmp_path)
    assert referenced(report) == {str(p)}
    assert [s.path for s in report.plan.sources] == [str(p)]


def test_vds_over_sources_of_many_chunks(tmp_path):
    """Sources whose chunk indexes the scan reads directly (this file's) or by chunk_iter
    (another file's), with chunks never written."""
    p = tmp_path / "v.h5"
    rng = np.random.default_rng(4)
    data = rng.integers(0, 1000, size=(40, 64), dtype="<i4")
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f.create_dataset("data", data=data, chunks=(2, 4), compression="gzip", fillvalue=0)
    with h5py.File(p, "w") as f:
        a = f.create_dataset("a", shape=(40, 64), dtype="<i4", chunks=(2, 4),
                             compression="gzip", fillvalue=0)
        a[:20] = data[:20]  # half of its chunks never written
        layout = h5py.VirtualLayout(shape=(80, 64), dtype="<i4")
        layout[:40] = h5py.VirtualSource(a)
        layout[40:] = h5py.VirtualSource("other.h5", "data", shape=(40, 64))
        f.create_virtual_dataset("vds", layout, fillvalue=0)
    report = roundtrip([p], tmp_path)
    assert referenced(report) == {str(p), str(tmp_path / "other.h5")}
    refs = report.plan.arrays["vds"].refs
    assert (refs["length"][10:20] == 0).all() and (refs["length"][:10] > 0).all()


def test_a_source_fill_value_unlike_the_vds_is_not_referenced(tmp_path):
    with h5py.File(tmp_path / "s.h5", "w") as f:
        d = f.create_dataset("data", shape=(4, 4), dtype="<f4", chunks=(2, 4), fillvalue=5)
        d[:2] = 1
    layout = h5py.VirtualLayout(shape=(4, 4), dtype="<f4")
    layout[:] = h5py.VirtualSource(str(tmp_path / "s.h5"), "data", shape=(4, 4))
    with h5py.File(tmp_path / "v.h5", "w") as f:
        f.create_virtual_dataset("vds", layout, fillvalue=-1)
    assert (h5read(tmp_path / "v.h5")[2:] == 5).all()  # the source's fill, not the VDS's
    report = roundtrip([tmp_path / "v.h5"], tmp_path)
    assert report.plan.arrays["vds"].refs is None  # inlined
    (p,) = virtualize.inventory(tmp_path / "v.h5").problems
    assert "fill value" in p.message


def test_many_sources_are_opened_a_few_at_a_time(tmp_path, monkeypatch):
    """A VDS may name thousands of files: the scan keeps few open (the digest of its
    blocks too), and records every one."""
    layout = h5py.VirtualLayout(shape=(12, 3), dtype="<i4")
    for i in range(12):
        source(tmp_path / f"p{i}.h5", np.full((1, 3), i, dtype="<i4"), chunks=(1, 3))
        layout[i] = h5py.VirtualSource(f"p{i}.h5", "data", shape=(1, 3))
    with h5py.File(tmp_path / "v.h5", "w") as f:
        f.create_virtual_dataset("vds", layout)
        f["t"] = np.arange(2.0)
    from virtualize.conventions import ScanHint
    from virtualize.formats import _io, scan

    def inventory():  # as a stack along t's axis scans it: the VDS digested
        return scan(str(tmp_path / "v.h5"), ScanHint(concat_dim="t_dim0"))

    digest = inventory().variables["vds"].digest
    monkeypatch.setattr(_io, "OPEN_FILES", 2)
    inv = inventory()
    assert inv.variables["vds"].digest == digest and digest is not None
    assert len(inv.data_files) == 12
    roundtrip([tmp_path / "v.h5"], tmp_path)


def test_stacked_4d_vds_from_3d_sources(tmp_path):
    rng = np.random.default_rng(2)
    layout = h5py.VirtualLayout(shape=(3, 4, 6, 8), dtype="<f8")
    for i in range(3):
        source(tmp_path / f"s{i}.h5", rng.normal(size=(4, 6, 8)), chunks=(2, 6, 4),
               compression="gzip")
        layout[i] = h5py.VirtualSource(str(tmp_path / f"s{i}.h5"), "data", shape=(4, 6, 8))
    with h5py.File(tmp_path / "v.h5", "w") as f:
        f.create_virtual_dataset("vds", layout)
    report = roundtrip([tmp_path / "v.h5"], tmp_path)
    assert len(referenced(report)) == 3
    assert report.plan.arrays["vds"].chunk_lengths[1:] == ((2, 2), (6,), (4, 4))


def test_a_missing_source_file_reads_as_fill_as_hdf5_reads_it(tmp_path):
    for i in range(3):
        source(tmp_path / f"s{i}.h5", np.full((2, 5), i + 1, dtype="<i4"), chunks=(1, 5))
    layout = h5py.VirtualLayout(shape=(6, 5), dtype="<i4")
    for i in range(3):
        layout[2 * i:2 * i + 2] = h5py.VirtualSource(f"s{i}.h5", "data", shape=(2, 5))
    with h5py.File(tmp_path / "v.h5", "w") as f:
        f.create_virtual_dataset("vds", layout, fillvalue=-1)
    os.remove(tmp_path / "s1.h5")
    expected = h5read(tmp_path / "v.h5")
    assert (expected[2:4] == -1).all() and (expected[:2] == 1).all()
    report = roundtrip([tmp_path / "v.h5"], tmp_path)
    referenced(report)
    (note,) = vds_problems(report)
    assert not note.fatal and "s1.h5" in note.message and note.loc.variable == "vds"
    # inlined (HDF5 converts the sources' int32 to int64), the note is given too
    layout = h5py.VirtualLayout(shape=(4, 5), dtype="<i8")
    layout[:2] = h5py.VirtualSource("s0.h5", "data", shape=(2, 5))
    layout[2:] = h5py.VirtualSource("s1.h5", "data", shape=(2, 5))
    with h5py.File(tmp_path / "w.h5", "w") as f:
        f.create_virtual_dataset("vds", layout, fillvalue=-1)
    (out := tmp_path / "w").mkdir()
    report = roundtrip([tmp_path / "w.h5"], out)
    assert report.plan.arrays["vds"].refs is None
    assert [p.fatal for p in vds_problems(report)] == [False]
    assert (h5read(tmp_path / "w.h5")[2:] == -1).all()


def test_sources_are_found_where_hdf5_finds_them(tmp_path, monkeypatch):
    """An absolute name that does not exist: HDF5 reads the file of its base name beside
    the VDS; a relative name found only in the working directory: refused (h5py's read
    would depend on where it runs)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "cwd").mkdir()
    source(tmp_path / "a" / "s.h5", np.arange(6.0), chunks=(3,))
    source(tmp_path / "cwd" / "t.h5", np.arange(6.0), chunks=(3,))
    for name, fname in (("v", "/nonexistent/dir/s.h5"), ("w", "t.h5")):
        layout = h5py.VirtualLayout(shape=(6,), dtype="<f8")
        layout[:] = h5py.VirtualSource(fname, "data", shape=(6,))
        with h5py.File(tmp_path / "a" / f"{name}.h5", "w") as f:
            f.create_virtual_dataset("vds", layout, fillvalue=-1)
    monkeypatch.chdir(tmp_path / "cwd")
    assert h5read(tmp_path / "a" / "v.h5").tolist() == list(np.arange(6.0))
    assert h5read(tmp_path / "a" / "w.h5").tolist() == list(np.arange(6.0))
    report = roundtrip([tmp_path / "a" / "v.h5"], tmp_path)
    assert referenced(report) == {str(tmp_path / "a" / "s.h5")}
    # (scanned in this process: scan workers keep the directory they started in)
    inv = virtualize.inventory(tmp_path / "a" / "w.h5")
    (p,) = [p for p in inv.problems if p.fatal]
    assert p.kind == "virtual-dataset" and "working directory" in p.message
    assert p.loc.variable == "vds"


def test_hdf5_vds_prefix_set_is_refused(tmp_path, monkeypatch):
    source(tmp_path / "s.h5", np.arange(4.0))
    layout = h5py.VirtualLayout(shape=(4,), dtype="<f8")
    layout[:] = h5py.VirtualSource("s.h5", "data", shape=(4,))
    with h5py.File(tmp_path / "v.h5", "w") as f:
        f.create_virtual_dataset("vds", layout)
    monkeypatch.setenv("HDF5_VDS_PREFIX", str(tmp_path / "elsewhere"))
    (p,) = virtualize.inventory(tmp_path / "v.h5").problems  # (in this process)
    assert p.kind == "virtual-dataset" and p.fatal and "HDF5_VDS_PREFIX" in p.message


def test_a_source_outside_the_directory_is_refused_located(tmp_path):
    source(tmp_path / "outside.h5", np.arange(10.0))
    (tmp_path / "sub").mkdir()
    layout = h5py.VirtualLayout(shape=(10,), dtype="<f8")
    layout[:] = h5py.VirtualSource(str(tmp_path / "outside.h5"), "data", shape=(10,))
    with h5py.File(tmp_path / "sub" / "v.h5", "w") as f:
        f.create_virtual_dataset("vds", layout)
        f["ok"] = np.arange(3)
    report = virtualize.check([tmp_path / "sub" / "v.h5"])
    (p,) = [p for p in report.problems if p.fatal]
    assert p.kind == "external-link" and p.loc.variable == "vds"
    assert p.loc.file == str(tmp_path / "sub" / "v.h5") and "outside.h5" in p.message
    assert not report.ok  # not inlined either: small as it is
    report = virtualize.virtualize([tmp_path / "sub" / "v.h5"], tmp_path / "c.zarr", drop=["vds"])
    assert report.ok


def test_irregular_mapping_is_inlined_when_small_and_refused_when_big(tmp_path):
    # every other row of the source: not whole chunks of it
    for n, name in ((8, "small"), (400, "big")):
        src = tmp_path / f"{name}_s.h5"
        source(src, np.arange(2 * n * 50, dtype="<f8").reshape(2 * n, 50), chunks=(2, 50))
        layout = h5py.VirtualLayout(shape=(n, 50), dtype="<f8")
        layout[:] = h5py.VirtualSource(str(src), "data", shape=(2 * n, 50))[::2]
        with h5py.File(tmp_path / f"{name}.h5", "w") as f:
            f.create_virtual_dataset("vds", layout)
    sub = tmp_path / "small_out"
    sub.mkdir()
    report = roundtrip([tmp_path / "small.h5"], sub)
    assert report.plan.arrays["vds"].refs is None  # inlined, at its extent
    # its source is a source of the cube still: a change to it makes the cube stale
    assert str(tmp_path / "small_s.h5") in {s.path for s in report.plan.sources}
    assert any("vds: cannot be referenced" in n for n in report.notes)
    report = virtualize.check([tmp_path / "big.h5"])
    (p,) = [p for p in report.problems if p.fatal]
    assert p.kind == "virtual-dataset" and p.loc.variable == "vds"
    assert "not aligned with the chunks" in p.message and "--inline vds" in (p.remedy or "")


def test_mixed_codecs_and_overlapping_mappings_are_inlined(tmp_path):
    source(tmp_path / "a.h5", np.arange(20.0).reshape(2, 10), chunks=(1, 10), compression="gzip")
    source(tmp_path / "b.h5", np.arange(20.0).reshape(2, 10), chunks=(1, 10))
    layout = h5py.VirtualLayout(shape=(4, 10), dtype="<f8")
    layout[:2] = h5py.VirtualSource("a.h5", "data", shape=(2, 10))
    layout[2:] = h5py.VirtualSource("b.h5", "data", shape=(2, 10))
    over = h5py.VirtualLayout(shape=(3, 10), dtype="<f8")
    over[:2] = h5py.VirtualSource("b.h5", "data", shape=(2, 10))
    over[1:3] = h5py.VirtualSource("b.h5", "data", shape=(2, 10))
    with h5py.File(tmp_path / "v.h5", "w") as f:
        f.create_virtual_dataset("vds", layout)
        f.create_virtual_dataset("over", over)
    report = roundtrip([tmp_path / "v.h5"], tmp_path)
    assert report.plan.arrays["vds"].refs is None and report.plan.arrays["over"].refs is None
    inv = virtualize.inventory(tmp_path / "v.h5")
    why = {p.loc.variable: p.message for p in inv.problems if p.kind == "virtual-dataset"}
    assert "other codecs" in why["vds"] and "overlap" in why["over"]
    assert_same(virtualize.open(tmp_path / "cube.zarr")["over"][...], h5read(tmp_path / "v.h5",
                                                                               "over"), "over")


def test_an_irregular_hyperslab_is_inlined(tmp_path):
    source(tmp_path / "s.h5", np.arange(10.0), chunks=(2,))
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    vsp = h5py.h5s.create_simple((6,))
    vsp.select_hyperslab((0,), (2,))
    vsp.select_hyperslab((3,), (3,), op=h5py.h5s.SELECT_OR)  # two runs: not regular
    ssp = h5py.h5s.create_simple((10,))
    ssp.select_hyperslab((4,), (5,))
    dcpl.set_virtual(vsp, b"s.h5", b"data", ssp)
    with h5py.File(tmp_path / "v.h5", "w") as f:
        h5py.h5d.create(f.id, b"vds", h5py.h5t.IEEE_F64LE, h5py.h5s.create_simple((6,)),
                        dcpl=dcpl)
    assert h5read(tmp_path / "v.h5").tolist() == [4.0, 5.0, 0.0, 6.0, 7.0, 8.0]
    report = roundtrip([tmp_path / "v.h5"], tmp_path)
    assert report.plan.arrays["vds"].refs is None
    (p,) = virtualize.inventory(tmp_path / "v.h5").problems
    assert p.kind == "virtual-dataset" and "irregular hyperslab" in p.message


def test_a_vds_of_strings_reads_its_sources(tmp_path):
    with h5py.File(tmp_path / "s.h5", "w") as f:
        f["data"] = np.array([b"ab", b"cd", b"ef"], dtype="S2")
    layout = h5py.VirtualLayout(shape=(3,), dtype="S2")
    layout[:] = h5py.VirtualSource("s.h5", "data", shape=(3,))
    with h5py.File(tmp_path / "v.h5", "w") as f:
        f.create_virtual_dataset("vds", layout)
    inv = virtualize.inventory(tmp_path / "v.h5")
    assert inv.variables["vds"].values.tolist() == ["ab", "cd", "ef"]
    assert [s.path for s in inv.data_files] == [str(tmp_path / "s.h5")]  # staleness kept
    virtualize.virtualize([tmp_path / "v.h5"], tmp_path / "c.zarr")
    assert virtualize.open(tmp_path / "c.zarr")["vds"][...].tolist() == ["ab", "cd", "ef"]


# -- unlimited extent -------------------------------------------------------------------

def test_unlimited_vds_is_read_at_the_extent_hdf5_resolves(tmp_path):
    """The held-out corpus's case: an unlimited VDS whose stored extent is 0 reads (5, 18, 8)
    in h5py; a second unlimited mapping over a source of 0 rows: last-available 5."""
    rng = np.random.default_rng(3)
    source(tmp_path / "a.h5", rng.normal(size=(5, 9, 8)).astype("<f4"), maxshape=(None, 9, 8),
           chunks=(1, 9, 8))
    source(tmp_path / "b.h5", np.zeros((0, 9, 8), "<f4"), maxshape=(None, 9, 8),
           chunks=(1, 9, 8))
    sel = ((0, 0, 0), (U, 1, 1), (1, 1, 1), (1, 9, 8))
    low_level_vds(tmp_path / "v.h5", (0, 18, 8), (U, 18, 8), "<f4", [
        (((0, 0, 0), (1, 1, 1), (U, 1, 1), (1, 9, 8)), "a.h5", "data",
         ((5, 9, 8), (U, 9, 8), sel)),
        (((0, 9, 0), (1, 1, 1), (U, 1, 1), (1, 9, 8)), "b.h5", "data",
         ((0, 9, 8), (U, 9, 8), sel)),
    ], fill=np.float32(-1))
    expected = h5read(tmp_path / "v.h5")
    assert expected.shape == (5, 18, 8)
    report = roundtrip([tmp_path / "v.h5"], tmp_path)
    assert report.plan.arrays["vds"].shape == (5, 18, 8)
    assert referenced(report) == {str(tmp_path / "a.h5")}
    (note,) = vds_problems(report)
    assert not note.fatal and "first-missing view see 0" in note.message


def test_an_unlimited_vds_that_cannot_be_referenced_is_inlined_at_its_extent(tmp_path):
    """Every other row of an unlimited source chunked by 2 rows: not whole chunks, so
    inlined, at the extent h5py reads (3 rows), never the stored 0."""
    source(tmp_path / "s.h5", np.arange(24, dtype="<i2").reshape(6, 4), maxshape=(None, 4),
           chunks=(2, 4))
    low_level_vds(tmp_path / "v.h5", (0, 4), (U, 4), "<i2", [
        (((0, 0), (1, 1), (U, 1), (1, 4)), "s.h5", "data",
         ((6, 4), (U, 4), ((0, 0), (U, 1), (2, 1), (1, 4)))),
    ])
    assert h5read(tmp_path / "v.h5").shape == (3, 4)
    report = roundtrip([tmp_path / "v.h5"], tmp_path)
    assert report.plan.arrays["vds"].refs is None and report.plan.arrays["vds"].shape == (3, 4)


def test_unlimited_mapping_clipped_inside_a_block_of_its_source(tmp_path):
    """Source rows 0-1, 3-4, 6-7 ... of a 7-row source: the last block is cut at row 7
    (5 rows), beside a mapping of 6 rows; HDF5 fills the sixth row of the first."""
    source(tmp_path / "a.h5", np.arange(14, dtype="<i2").reshape(7, 2) + 1, maxshape=(None, 2),
           chunks=(1, 2))
    source(tmp_path / "b.h5", np.arange(12, dtype="<i2").reshape(6, 2) + 100,
           maxshape=(None, 2), chunks=(1, 2))
    low_level_vds(tmp_path / "v.h5", (0, 4), (U, 4), "<i2", [
        (((0, 0), (1, 1), (U, 1), (1, 2)), "a.h5", "data",
         ((7, 2), (U, 2), ((0, 0), (U, 1), (3, 1), (2, 2)))),
        (((0, 2), (1, 1), (U, 1), (1, 2)), "b.h5", "data",
         ((6, 2), (U, 2), ((0, 0), (U, 1), (1, 1), (1, 2)))),
    ])
    expected = h5read(tmp_path / "v.h5")
    assert expected[:, 0].tolist() == [1, 3, 7, 9, 13, 0]
    report = roundtrip([tmp_path / "v.h5"], tmp_path)
    assert len(referenced(report)) == 2
    (note,) = vds_problems(report)
    assert "first-missing view see 5" in note.message


def test_unlimited_printf_vds_over_numbered_files(tmp_path):
    for i in range(3):
        source(tmp_path / f"p{i}.h5", np.arange(2 * 4 * 3, dtype="<i8").reshape(2, 4, 3) + 100 * i,
               chunks=(1, 4, 3), compression="gzip")
    low_level_vds(tmp_path / "v.h5", (0, 4, 3), (U, 4, 3), "<i8", [
        (((0, 0, 0), (2, 1, 1), (U, 1, 1), (2, 4, 3)), "p%b.h5", "data", ((2, 4, 3), None, None)),
    ])
    assert h5read(tmp_path / "v.h5").shape == (6, 4, 3)
    report = roundtrip([tmp_path / "v.h5"], tmp_path)
    assert len(referenced(report)) == 3


def test_unlimited_interleaved_mappings(tmp_path):
    """Percival-style: source k's rows at k, k + 3, k + 6 ... (2, 2 and 1 rows: 5 in all)."""
    for i, n in enumerate((2, 2, 1)):
        data = (np.full((n, 4), i) + np.arange(n)[:, None] * 10).astype("<u2")
        source(tmp_path / f"r{i}.h5", data,
               maxshape=(None, 4), chunks=(1, 4))
    maps = [(((i, 0), (3, 1), (U, 1), (1, 4)), f"r{i}.h5", "data",
             ((n, 4), (U, 4), ((0, 0), (U, 1), (1, 1), (1, 4)))) for i, n in enumerate((2, 2, 1))]
    low_level_vds(tmp_path / "v.h5", (0, 4), (U, 4), "<u2", maps, fill=np.uint16(9))
    assert h5read(tmp_path / "v.h5").shape == (5, 4)
    report = roundtrip([tmp_path / "v.h5"], tmp_path)
    assert len(referenced(report)) == 3


# -- stacks and staleness ----------------------------------------------------------------

def test_a_stack_of_vds_files_concatenates_along_time(tmp_path):
    expected = []
    files = []
    for d in range(3):
        day = tmp_path / f"day{d}"
        day.mkdir()
        layout = h5py.VirtualLayout(shape=(4, 6), dtype="<f4")
        for h in range(2):
            data = np.arange(12, dtype="<f4").reshape(2, 6) + 100 * d + 10 * h
            source(day / f"h{h}.h5", data, chunks=(1, 6), compression="gzip")
            layout[2 * h:2 * h + 2] = h5py.VirtualSource(f"h{h}.h5", "data", shape=(2, 6))
        with h5py.File(day / "v.h5", "w") as f:
            t = f.create_dataset("time", data=np.arange(4.0) + 4 * d)
            t.make_scale("time")
            t.attrs["units"] = "hours since 2000-01-01"
            f.create_virtual_dataset("vds", layout)
            f["vds"].dims[0].attach_scale(t)
        files.append(day / "v.h5")
        expected.append(h5read(day / "v.h5"))
    report = roundtrip(files, tmp_path, "time", expected=np.concatenate(expected))
    assert len(referenced(report)) == 6


def test_unlimited_vds_with_a_vds_time_scale_stacks_along_time(tmp_path):
    """Each file: `time` (a dimension scale) and `x`, both unlimited VDS over a growing
    source: the dimension's length is the resolved extent (3, not the stored 0)."""
    files, times, xs = [], [], []
    sel1 = ((0,), (U,), (1,), (1,))
    sel2 = ((0, 0), (U, 1), (1, 1), (1, 4))
    for d in range(2):
        day = tmp_path / f"day{d}"
        day.mkdir()
        with h5py.File(day / "s.h5", "w") as f:
            f.create_dataset("t", data=np.arange(3.0) + 3 * d, maxshape=(None,), chunks=(1,))
            f.create_dataset("x", data=np.arange(12.0).reshape(3, 4) + 100 * d,
                             maxshape=(None, 4), chunks=(1, 4))
        v = day / "v.h5"
        low_level_vds(v, (0,), (U,), "<f8", [
            (((0,), (1,), (U,), (1,)), "s.h5", "t", ((3,), (U,), sel1))], name="time")
        low_level_vds(v, (0, 4), (U, 4), "<f8", [
            (((0, 0), (1, 1), (U, 1), (1, 4)), "s.h5", "x", ((3, 4), (U, 4), sel2))], name="x")
        with h5py.File(v, "a") as f:
            f["time"].make_scale("time")
            f["time"].attrs["units"] = "days since 2000-01-01"
            f["x"].dims[0].attach_scale(f["time"])
        files.append(v)
        times.append(h5read(v, "time"))
        xs.append(h5read(v, "x"))
    assert virtualize.inventory(files[0]).dimensions["time"].size == 3
    report = roundtrip(files, tmp_path, "time", name="x", expected=np.concatenate(xs))
    assert len(referenced(report, "x")) == 2
    assert_same(virtualize.open(tmp_path / "cube.zarr")["time"][...], np.concatenate(times),
                "time")


def test_verify_notices_a_changed_vds_source(tmp_path, capsys):
    for i in range(2):
        source(tmp_path / f"s{i}.h5", np.arange(10.0) + i, chunks=(5,))
    layout = h5py.VirtualLayout(shape=(20,), dtype="<f8")
    for i in range(2):
        layout[10 * i:10 * i + 10] = h5py.VirtualSource(f"s{i}.h5", "data", shape=(10,))
    with h5py.File(tmp_path / "v.h5", "w") as f:
        f.create_virtual_dataset("vds", layout)
    report = roundtrip([tmp_path / "v.h5"], tmp_path)
    assert virtualize.verify_cube(tmp_path / "cube.zarr") == []
    shutil.copy(tmp_path / "s1.h5", tmp_path / "keep.h5")
    with h5py.File(tmp_path / "s1.h5", "a") as f:
        f["data"][3] = -1
        f.attrs["changed"] = "x" * 1000
    changed = virtualize.verify_cube(tmp_path / "cube.zarr")
    assert [p.loc.file for p in changed] == [str(tmp_path / "s1.h5")]
    assert report.ok
    # the command line says so too, exit 1
    from virtualize.cli import main

    assert main(["verify", str(tmp_path / "cube.zarr")]) == 1
    assert "s1.h5" in capsys.readouterr().out


def test_a_source_smaller_than_its_mapping_is_refused_as_hdf5_cannot_read_it(tmp_path):
    source(tmp_path / "s.h5", np.arange(6.0), chunks=(3,))
    layout = h5py.VirtualLayout(shape=(10,), dtype="<f8")
    layout[:] = h5py.VirtualSource("s.h5", "data", shape=(10,))  # the file holds 6
    with h5py.File(tmp_path / "v.h5", "w") as f:
        f.create_virtual_dataset("vds", layout, fillvalue=-1)
    with pytest.raises(OSError, match="different number of elements"):
        h5read(tmp_path / "v.h5")
    report = virtualize.check([tmp_path / "v.h5"])
    assert not report.ok
    (p,) = [p for p in report.problems if p.fatal]
    assert (p.loc.variable, p.kind) == ("vds", "corrupt") and "cannot be inlined" in p.message
