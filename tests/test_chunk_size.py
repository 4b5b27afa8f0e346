"""--chunk-size: uncompressed blocks larger than it (contiguous HDF5 datasets, netCDF
classic variables, single-strip TIFFs, records and strips) are cut into chunks at whole
rows, read back exactly through virtualize.open, the kerchunk export and xarray; files of a
stack are cut alike; compressed blocks stay whole; the 4 TiB sparse file becomes 262,144
references and one value reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import h5py
import netCDF4
import numpy as np
import pytest
import tifffile
from test_roundtrip_hdf5 import roundtrip

import virtualize
from virtualize.model import UsageError

from helpers import assert_same, kerchunk_group

KIB = 1024


def grid(cube, name) -> list:
    doc = json.loads((cube / name / "zarr.json").read_text())
    g = doc["chunk_grid"]
    if g["name"] == "regular":
        return g["configuration"]["chunk_shape"]
    return g["configuration"]["chunk_shapes"]


def lengths(report, name) -> tuple:
    return tuple(tuple(int(x) for x in ax) for ax in report.plan.arrays[name].chunk_lengths)


def contiguous_h5(path, rng):
    with h5py.File(path, "w") as f:
        f.create_dataset("wide", data=rng.random((128, 1024)))  # 1 MiB, rows of 8 KiB
        f.create_dataset("deep", data=rng.random((4, 100, 300)).astype("f4"))  # rows 117 KiB
        f.create_dataset("small", data=np.arange(10, dtype="i4"))
        f.create_dataset("ints", data=rng.integers(0, 99, (50, 1000)).astype(">i2"))
    return path


def test_hdf5_contiguous_cut_at_whole_rows(tmp_path):
    src = contiguous_h5(tmp_path / "c.h5", np.random.default_rng(1))
    report = roundtrip([src], tmp_path, chunk_size="64K")
    assert report.ok, report.problems
    # (k, full) when a row of axis 0 fits: 8 rows of 8 KiB
    assert lengths(report, "wide") == ((8,) * 16, (1024,))
    assert grid(tmp_path / "cube.zarr", "wide") == [8, 1024]  # (regular: a regular grid)
    # (1, k, full) when it does not: 54 rows of 1200 bytes, the last 46
    assert lengths(report, "deep") == ((1,) * 4, (54, 46), (300,))
    assert lengths(report, "ints") == ((32, 18), (1000,))  # (the short last is listed)
    assert lengths(report, "small") == ((10,),)  # fits: unchanged
    refs = report.plan.arrays["wide"].refs
    assert refs["length"].max() <= 64 * KIB and len(np.unique(refs["offset"])) == 16
    assert any("cut into chunks" in n and "wide (8x1024)" in n for n in report.notes)
    # recorded, for append
    recipe = json.loads((tmp_path / "cube.zarr" / "virtualize.json").read_text())["recipe"]
    assert recipe["chunk_size"] == 64 * KIB


def test_chunk_size_larger_than_the_data_changes_nothing(tmp_path):
    src = contiguous_h5(tmp_path / "c.h5", np.random.default_rng(2))
    big = virtualize.check(src, chunk_size="2M")
    never = virtualize.check(src, chunk_size=0)
    assert big.ok and never.ok
    for name, a in never.plan.arrays.items():
        b = big.plan.arrays[name]
        assert a.chunk_lengths == b.chunk_lengths and (a.refs == b.refs).all()
        assert np.prod(a.refs.shape) == 1
    assert not any("cut" in n for n in big.notes)
    assert never.plan.recipe["chunk_size"] is None
    # the inventory as stored, or as a cube cuts it
    assert virtualize.inventory(src).variables["wide"].blocks.block_shape == (128, 1024)
    cut = virtualize.inventory(src, chunk_size="64K").variables["wide"].blocks
    assert cut.block_shape == (8, 1024) and cut.refs.shape == (16, 1)


def test_chunk_size_below_one_element_keeps_one_element_per_chunk(tmp_path):
    src = tmp_path / "e.h5"
    data = np.arange(15, dtype="f8").reshape(3, 5)
    with h5py.File(src, "w") as f:
        f.create_dataset("v", data=data)
    report = roundtrip([src], tmp_path, chunk_size=3)  # smaller than one 8-byte element
    assert report.ok
    assert lengths(report, "v") == ((1, 1, 1), (1,) * 5)
    report = virtualize.check(src, chunk_size=16)  # two elements of the last axis
    assert lengths(report, "v") == ((1, 1, 1), (2, 2, 1))


def test_netcdf_classic_fixed_and_record_variables(tmp_path):
    rng = np.random.default_rng(3)
    src = tmp_path / "c.nc"
    with netCDF4.Dataset(src, "w", format="NETCDF3_64BIT_OFFSET") as d:
        d.createDimension("time", None)
        d.createDimension("y", 60)
        d.createDimension("x", 70)
        d.createVariable("fixed", "f4", ("y", "x"))[:] = rng.random((60, 70))
        t = d.createVariable("time", "f8", ("time",))
        t[:] = np.arange(3)
        # two record variables: each record is contiguous by itself (records interleave)
        d.createVariable("rec", "f4", ("time", "y", "x"))[:] = rng.random((3, 60, 70))
        d.createVariable("rec2", "i2", ("time", "y", "x"))[:] = rng.integers(0, 9, (3, 60, 70))
    report = roundtrip([src], tmp_path, chunk_size=4 * KIB)
    assert report.ok, report.problems
    assert lengths(report, "fixed") == ((14, 14, 14, 14, 4), (70,))
    assert lengths(report, "rec") == ((1, 1, 1), (14, 14, 14, 14, 4), (70,))
    assert lengths(report, "rec2") == ((1, 1, 1), (29, 29, 2), (70,))


def test_netcdf_classic_lone_record_variable(tmp_path):
    src = tmp_path / "lone.nc"
    data = np.random.default_rng(4).random((40, 30)).astype("f4")
    with netCDF4.Dataset(src, "w", format="NETCDF3_CLASSIC") as d:
        d.createDimension("time", None)
        d.createDimension("x", 30)
        d.createVariable("v", "f4", ("time", "x"))[:] = data
    report = roundtrip([src], tmp_path, chunk_size=1000)  # the records' one block cut
    assert report.ok and lengths(report, "v") == ((8,) * 5, (30,))


def test_single_strip_tiff_and_large_strips(tmp_path):
    rng = np.random.default_rng(5)
    one = tmp_path / "one.tif"
    image = rng.integers(0, 60000, (100, 64)).astype("u2")
    tifffile.imwrite(one, image)  # uncompressed: one strip, the whole image
    with tifffile.TiffFile(one) as t:
        assert len(t.pages[0].dataoffsets) == 1
    cube = tmp_path / "one.zarr"
    report = virtualize.virtualize(one, cube, chunk_size=1 * KIB)
    assert lengths(report, "image") == ((8,) * 12 + (4,), (64,))
    assert_same(virtualize.open(cube)["image"][...], image, "single strip")
    # strips of 40 rows (5 KiB each, the last short): cut at whole rows of each strip, in a
    # count of rows that divides the strip (20), so that every strip cuts alike
    strips = tmp_path / "strips.tif"
    tifffile.imwrite(strips, image, rowsperstrip=40)
    cube = tmp_path / "strips.zarr"
    report = virtualize.virtualize(strips, cube, chunk_size=3 * KIB)
    assert lengths(report, "image") == ((20, 20, 20, 20, 20), (64,))
    assert_same(virtualize.open(cube)["image"][...], image, "strips")
    k = tmp_path / "strips.json"
    virtualize.virtualize(strips, k, chunk_size=3 * KIB)
    assert_same(kerchunk_group(k)["image"][...], image, "strips via kerchunk")


def test_compressed_strip_stays_whole_with_a_note(tmp_path):
    src = tmp_path / "z.tif"
    image = np.random.default_rng(6).integers(0, 255, (100, 64)).astype("u2")
    tifffile.imwrite(src, image, compression="zlib", rowsperstrip=100)
    report = virtualize.check(src, chunk_size=1 * KIB)
    assert report.ok
    assert lengths(report, "image") == ((100,), (64,))
    assert any("compressed blocks larger than 1 KiB cannot be cut" in n and "image" in n
               for n in report.notes)


def year(path, days: int, start: int, rng):
    with netCDF4.Dataset(path, "w", format="NETCDF4") as d:
        d.createDimension("time", days)
        d.createDimension("lat", 6)
        d.createDimension("lon", 8)
        t = d.createVariable("time", "f8", ("time",))
        t.units = "days since 2000-01-01"
        t[:] = np.arange(start, start + days)
        v = d.createVariable("tas", "f4", ("time", "lat", "lon"), contiguous=True)
        v[:] = rng.random((days, 6, 8))
    return path


def test_stack_along_time_cut_alike(tmp_path):
    rng = np.random.default_rng(7)
    files = [year(tmp_path / "y2000.nc", 366, 0, rng), year(tmp_path / "y2001.nc", 365, 366, rng)]
    report = roundtrip(files, tmp_path, concat_dim="time", chunk_size=192 * 10)  # 10 days
    assert report.ok, report.problems
    assert not [p for p in report.problems if p.kind == "blocks-differ"]
    # each file's cut is listed: its short last chunk in the middle of the cube too
    assert lengths(report, "tas")[0] == (10,) * 36 + (6,) + (10,) * 36 + (5,)
    assert grid(tmp_path / "cube.zarr", "tas")[0] == [[10, 36], 6, [10, 36], 5]


def test_uncompressed_hdf5_chunks_cut_padded_and_split(tmp_path):
    rng = np.random.default_rng(12)
    files = []
    for i, days in enumerate((150, 100)):
        path = tmp_path / f"p{i}.nc"
        with netCDF4.Dataset(path, "w", format="NETCDF4") as d:
            d.createDimension("time", days)
            d.createDimension("x", 100)
            t = d.createVariable("time", "f8", ("time",))
            t.units = "days since 2000-01-01"
            t[:] = np.arange(days) + 150 * i
            v = d.createVariable("v", "f8", ("time", "x"), chunksizes=(64, 100))
            v[:] = rng.random((days, 100))
        files.append(path)
    # chunks of 64 rows (51,200 bytes), padded; cut to 8 rows (a divisor of 64 within
    # 8,000 bytes): the first file's padded last sub-chunk is trimmed (split), the last
    # file's overhangs
    report = roundtrip(files, tmp_path, concat_dim="time", chunk_size=8000)
    assert report.ok, report.problems
    assert lengths(report, "v") == ((8,) * 18 + (6,) + (8,) * 13, (100,))
    assert report.plan.remedies["split"].blocks == 1


@pytest.mark.parametrize("out", ["cube.zarr", "cube.json"])
def test_append_cuts_new_files_as_the_cube_recorded(tmp_path, out):
    rng = np.random.default_rng(8)
    a = year(tmp_path / "a.nc", 30, 0, rng)
    b = year(tmp_path / "b.nc", 25, 30, rng)
    cube = tmp_path / out
    virtualize.virtualize([a], cube, "time", chunk_size=192 * 8)
    report = virtualize.append(cube, [b])
    assert report.ok, report.problems
    assert any("appended 1 file(s)" in n for n in report.notes)  # (not rebuilt)
    expected = np.concatenate([netCDF4.Dataset(f)["tas"][:] for f in (a, b)])
    if out.endswith(".json"):
        assert_same(kerchunk_group(cube)["tas"][...], expected, "appended (kerchunk)")
        return
    assert virtualize.open(cube)["tas"].shape == (55, 6, 8)
    assert grid(cube, "tas")[0] == [[8, 3], 6, [8, 3], 1]
    assert_same(virtualize.open(cube)["tas"][...], expected, "appended")
    assert virtualize.verify_cube(cube, decode=True) == []


def test_materialize_beside_cuts(tmp_path):
    """A compressed padded variable copied (--materialize) beside a cut contiguous one."""
    rng = np.random.default_rng(14)
    files = []
    for i, days in enumerate((40, 30)):
        path = year(tmp_path / f"m{i}.nc", days, 40 * i, rng)
        with netCDF4.Dataset(path, "a") as d:
            v = d.createVariable("pr", "f4", ("time", "lat", "lon"), zlib=True,
                                 chunksizes=(16, 6, 8))
            v[:] = rng.random((days, 6, 8))
        files.append(path)
    report = roundtrip(files, tmp_path, concat_dim="time", chunk_size=192 * 8, materialize=True)
    assert report.ok and report.plan.remedies["materialize"].blocks == 1
    assert lengths(report, "tas")[0] == (8,) * 5 + (8,) * 3 + (6,)


def test_inline_and_mosaic_with_cuts(tmp_path):
    rng = np.random.default_rng(9)
    files = [year(tmp_path / "a.nc", 20, 0, rng), year(tmp_path / "b.nc", 21, 20, rng)]
    report = roundtrip(files, tmp_path, concat_dim="time", chunk_size=192 * 4, inline=["tas"])
    assert report.ok and report.plan.arrays["tas"].inline is not None
    # two plain single-strip tiles side by side, cut alike (4 rows: the wider one's)
    left = rng.integers(0, 999, (40, 30)).astype("u2")
    right = rng.integers(0, 999, (40, 50)).astype("u2")
    tiles = [tmp_path / "l.tif", tmp_path / "r.tif"]
    tifffile.imwrite(tiles[0], left)
    tifffile.imwrite(tiles[1], right)
    cube = tmp_path / "m.zarr"
    report = virtualize.mosaic(tiles, cube, offsets=[(0, 0), (0, 30)], chunk_size=480)
    assert report.ok, report.problems
    assert lengths(report, "image")[0] == (4,) * 10
    assert_same(virtualize.open(cube)["image"][...], np.hstack([left, right]), "mosaic")


def test_bad_chunk_size_is_a_usage_error(tmp_path):
    src = contiguous_h5(tmp_path / "c.h5", np.random.default_rng(10))
    for bad in ("lots", -5, "1X", 1.5):
        with pytest.raises(UsageError, match="chunk_size"):
            virtualize.check(src, chunk_size=bad)
    assert virtualize.check(src, chunk_size="64KiB").plan.recipe["chunk_size"] == 65536


def cli(*args):
    exe = os.path.join(os.path.dirname(sys.executable), "virtualize")
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True)


def test_cli_chunk_size_and_inspect_show_the_cut(tmp_path):
    src = contiguous_h5(tmp_path / "c.h5", np.random.default_rng(11))
    r = cli("inspect", src, "--chunk-size", "64KiB")
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith("wide"))
    assert "16/16" in line and "8x1024" in line
    assert "note: blocks larger than 64 KiB (--chunk-size) cut" in r.stdout
    r = cli("inspect", src, "--chunk-size", "0", "--json")
    wide = next(v for v in json.loads(r.stdout)["variables"] if v["name"] == "wide")
    assert wide["blocks"]["block_shape"] == [128, 1024] and wide["blocks"]["count"] == 1
    r = cli(src, "-o", tmp_path / "cube.zarr", "--chunk-size", "65536")
    assert r.returncode == 0, r.stderr
    assert grid(tmp_path / "cube.zarr", "wide") == [8, 1024]
    r = cli("check", src, "--chunk-size", "lots")
    assert r.returncode == 2 and "not a size" in r.stderr


def sparse_classic(path, claim: int | None = None):
    """A netCDF classic (CDF-2) file whose header claims v(2**20, 2**20) float32 (4 TiB),
    written without fill: netCDF-C extends the file sparsely (no disk used)."""
    with netCDF4.Dataset(path, "w", format="NETCDF3_64BIT_OFFSET") as d:
        d.set_fill_off()
        d.createDimension("y", 2**20)
        d.createDimension("x", 2**20)
        d.createVariable("v", "f4", ("y", "x"))
    size = os.path.getsize(path)
    if size < 2**42 or os.stat(path).st_blocks * 512 > 2**20:
        os.remove(path)
        pytest.skip("this file system does not hold a sparse 4 TiB file")
    return size


def test_sparse_4tib_netcdf_classic_is_many_references_and_reads(tmp_path):
    src = tmp_path / "huge.nc"
    size = sparse_classic(src)
    with open(src, "r+b") as f:  # a few values near the end (still sparse)
        f.seek(size - 4 * 2**20 + 8)
        f.write(np.array([1.5, 2.5, 3.5], ">f4").tobytes())
    try:  # (how long it takes: benchmarks/bench_netcdf3.py, virtualize-cut)
        cube = tmp_path / "cube.zarr"
        report = virtualize.virtualize(src, cube)
        a = report.plan.arrays["v"]
        assert a.refs.shape == (262144, 1) and int(a.refs["length"].max()) == 16 * 2**20
        assert lengths(report, "v")[1] == (2**20,)
        z = virtualize.open(cube)["v"]
        with netCDF4.Dataset(src) as d:
            want = d["v"][2**20 - 1, 0:6]
        assert_same(z[2**20 - 1, 0:6], np.asarray(want), "4 TiB claim, last row")
        assert z[12345, 678] == 0
        # a cut into more chunks than a manifest may hold is refused, naming the way out
        report = virtualize.check(src, chunk_size=4)
        tm = [p for p in report.problems if p.kind == "too-many-blocks"]
        assert not report.ok and tm and tm[0].loc.variable == "v" and "--chunk-size" in tm[0].remedy
        # a header claiming more than the file holds stays refused
        os.truncate(src, 2**30)
        report = virtualize.check(src)
        assert not report.ok and any(p.kind == "truncated" for p in report.problems)
    finally:
        os.remove(src)


def test_sparse_4tib_hdf5_contiguous_and_bigtiff_strip_read(tmp_path):
    n = 2**20
    h5 = tmp_path / "huge.h5"
    with h5py.File(h5, "w") as f:  # allocated (no fill written): HDF5 extends the file sparsely
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.CONTIGUOUS)
        dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
        dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
        ds = h5py.Dataset(h5py.h5d.create(f.id, b"v", h5py.h5t.NATIVE_FLOAT,
                                          h5py.h5s.create_simple((n, n)), dcpl=dcpl))
        ds[n - 1, 2:5] = [1, 2, 3]
    tif = tmp_path / "huge.tif"
    tifffile.imwrite(tif, shape=(n, n), dtype="f4", bigtiff=True)  # one 4 TiB strip, empty
    try:
        for path in (h5, tif):
            if os.path.getsize(path) < 2**42 or os.stat(path).st_blocks * 512 > 2**20:
                pytest.skip("this file system does not hold a sparse 4 TiB file")
        with tifffile.TiffFile(tif) as t:
            assert list(t.pages[0].databytecounts) == [4 * n * n]
            start = int(t.pages[0].dataoffsets[0])
        with open(tif, "r+b") as f:
            f.seek(start + (n - 1) * n * 4 + 8)
            f.write(np.array([1, 2, 3], "<f4").tobytes())
        for path, name in ((h5, "v"), (tif, "image")):
            cube = tmp_path / f"{path.name}.zarr"
            report = virtualize.virtualize(path, cube)
            assert report.plan.arrays[name].refs.size == 262144
            assert_same(virtualize.open(cube)[name][n - 1, 2:5], np.array([1, 2, 3], "f4"),
                        f"{path.name}: the last row")
    finally:
        for path in (h5, tif):
            if path.exists():
                os.remove(path)


def test_stack_along_a_later_axis_cut_alike(tmp_path):
    """Files differing along the concatenation axis, the second one: one row of axis 0
    holds 365 or 366 steps, so each file alone would fit a different row count; the
    stack's is the fewest, and the chunks line up on axis 0."""
    rng = np.random.default_rng(13)
    files = []
    for i, days in enumerate((365, 366)):
        path = tmp_path / f"s{i}.nc"
        with netCDF4.Dataset(path, "w", format="NETCDF3_CLASSIC") as d:
            d.createDimension("station", 10)
            d.createDimension("time", days)
            t = d.createVariable("time", "f8", ("time",))
            t.units = "days since 2000-01-01"
            t[:] = np.arange(days) + 365 * i
            d.createVariable("obs", "f4", ("station", "time"))[:] = rng.random((10, days))
        files.append(path)
    alone = [lengths(virtualize.check(f, chunk_size=2921), "obs")[0] for f in files]
    assert alone == [(2,) * 5, (1,) * 10]  # 2921 // 1460 = 2, 2921 // 1464 = 1
    report = roundtrip(files, tmp_path, concat_dim="time", chunk_size=2921)
    assert report.ok, report.problems
    assert lengths(report, "obs") == ((1,) * 10, (365, 366))
    # appended, the new file keeps the cube's cut (its own alone would be 1 station a chunk)
    cube = tmp_path / "appended.zarr"
    virtualize.virtualize(files[:1], cube, "time", chunk_size=2921)
    assert grid(cube, "obs")[0] == 2
    assert virtualize.append(cube, files[1:]).ok
    expected = np.concatenate([netCDF4.Dataset(f)["obs"][:] for f in files], axis=1)
    assert_same(virtualize.open(cube)["obs"][...], expected, "appended along time")
    assert grid(cube, "obs") == [[[2, 5]], [365, 366]]


def test_blocks_whose_length_is_not_their_raw_size_are_not_cut():
    from virtualize.model import REF_DTYPE, BlockTable, FileInventory, Variable
    from virtualize.plan.cut import cut_stack

    refs = np.zeros((1, 1), REF_DTYPE)
    refs[0, 0] = (0, 100, 40 * 30 * 4 + 16)  # 16 bytes more than its values
    v = Variable("v", np.dtype("<f4"), (40, 30), ("y", "x"), {}, np.float32(0),
                 [{"name": "bytes", "configuration": {"endian": "little"}}],
                 BlockTable((40, 30), False, refs))
    inv = FileInventory("/x.tif", "tiff", 10**6, 0, {"": {}}, {}, {"v": v})
    (out,), notes, problems = cut_stack([inv], 1000)
    assert out.variables["v"].blocks is v.blocks and not problems
    assert any("were not cut" in n and "v" in n for n in notes)
    good = Variable("w", v.dtype, v.shape, v.dims, {}, v.fill_value, v.codecs,
                    BlockTable((40, 30), False, np.array([[(0, 100, 4800)]], REF_DTYPE)))
    inv = FileInventory("/x.tif", "tiff", 10**6, 0, {"": {}}, {}, {"w": good})
    (out,), notes, _ = cut_stack([inv], 1000)
    t = out.variables["w"].blocks
    assert t.block_shape == (8, 30) and inv.variables["w"] is good  # (the caller's kept)
    assert t.refs["offset"].ravel().tolist() == [100 + 960 * i for i in range(5)]
    assert t.refs["length"].ravel().tolist() == [960] * 5
