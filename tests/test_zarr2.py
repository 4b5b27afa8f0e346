"""Zarr v2 directory stores as sources (formats/zarr2.py): fixtures written by zarr-python
with zarr_format=2 (and xarray); every array read through the cube (virtualize.open,
xarray engine="virtualize", the kerchunk export read with fsspec + zarr) equals
zarr-python's own v2 read of the store."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numcodecs
import numpy as np
import pytest
import xarray as xr
import zarr

import virtualize
from virtualize.formats import detect_format, is_input_directory, scan
from virtualize.model import OutputExistsError, UnsafeOutputError, VirtualizeError

from helpers import assert_same as _assert_same
from helpers import kerchunk_group, kerchunk_xarray

pytestmark = pytest.mark.filterwarnings("ignore::zarr.errors.ZarrUserWarning",
                                        "ignore::UserWarning:zarr")


def assert_same(actual, expected, what: str) -> None:
    """helpers.assert_same, complex values compared as their float parts, bit for bit."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    if expected.dtype.kind == "c":
        assert actual.dtype == expected.dtype.newbyteorder("="), what
        part = f"f{expected.dtype.itemsize // 2}"
        actual, expected = (np.ascontiguousarray(x.astype(x.dtype.newbyteorder("="))).view(part)
                            for x in (actual, expected))
    _assert_same(actual, expected, what)


def v2(store):
    """The store as zarr-python reads it as zarr v2 (the oracle)."""
    return zarr.open(str(store), mode="r", zarr_format=2)


def make_store(path, arrays: dict, attrs: dict | None = None, consolidated: bool = False):
    """A v2 group at `path` with arrays name -> (data, dims, create_array keywords); the
    arrays' data written whole (pass `write=False` in the keywords to leave it unwritten,
    or `regions` to write only those)."""
    g = zarr.open_group(str(path), mode="w", zarr_format=2)
    g.attrs.update(attrs or {})
    for name, (data, dims, kw) in arrays.items():
        kw = dict(kw)
        regions = kw.pop("regions", None)
        kw.setdefault("fill_value", 0)
        a = g.create_array(name, shape=data.shape, dtype=data.dtype, **kw)
        a.attrs["_ARRAY_DIMENSIONS"] = list(dims)
        if regions is None:
            a[...] = data
        else:
            for r in regions:
                a[r] = data[r]
    if consolidated:
        zarr.consolidate_metadata(str(path), zarr_format=2)
    return path


def same_everywhere(store, tmp_path, names=None, tag="cube"):
    """Virtualize the store alone; compare every array read through the cube, xarray and
    the kerchunk export with zarr-python's v2 read. Returns the report."""
    cube, export = tmp_path / f"{tag}.zarr", tmp_path / f"{tag}.json"
    report = virtualize.virtualize([store], cube)
    assert report.ok, report.problems
    assert virtualize.virtualize([store], export).ok
    src = v2(store)
    names = names or [n for n, _ in src.arrays()]
    g, k = virtualize.open(cube), kerchunk_group(export)
    ds = xr.open_dataset(cube, engine="virtualize", mask_and_scale=False, decode_times=False)
    kx = kerchunk_xarray(export, mask_and_scale=False, decode_times=False)
    for name in names:
        want = src[name][...]
        assert_same(g[name][...], want, f"{name} (cube)")
        assert_same(k[name][...], want, f"{name} (kerchunk export)")
        if "/" not in name:  # (xarray opens the root group)
            assert_same(ds[name].values, want, f"{name} (xarray)")
            assert_same(kx[name].values, want, f"{name} (xarray over the export)")
    return report


# -- codecs, byte order, layout -----------------------------------------------------------

CODECS = [
    ("<f8", dict(compressors=None)),
    (">i4", dict(compressors=None)),
    (">f8", dict(compressors=numcodecs.Blosc("zstd", 3, numcodecs.Blosc.BITSHUFFLE))),
    ("<f4", dict(compressors=numcodecs.Blosc("lz4", 5, numcodecs.Blosc.SHUFFLE))),
    ("<u2", dict(compressors=numcodecs.Zstd(level=3))),
    ("<i2", dict(compressors=numcodecs.GZip(level=5))),
    ("<i8", dict(compressors=numcodecs.Zlib(level=1))),
    ("<u4", dict(compressors=numcodecs.LZ4())),
    ("<f4", dict(compressors=numcodecs.BZ2())),
    ("<f8", dict(compressors=numcodecs.LZMA())),
    ("<i4", dict(filters=[numcodecs.Delta("<i4", astype=">i2")], compressors=numcodecs.Zlib())),
    ("<f8", dict(filters=[numcodecs.FixedScaleOffset(0, 4, "<f8", astype="<u2")],
                 compressors=numcodecs.Zstd())),
    (">f4", dict(filters=[numcodecs.Shuffle(4)], compressors=numcodecs.Blosc("lz4"))),
    ("<i8", dict(filters=[numcodecs.AsType(">i4", "<i8"), numcodecs.Shuffle(4)],
                 compressors=None)),
    ("<f4", dict(filters=[numcodecs.Fletcher32()], compressors=numcodecs.Zlib())),
    ("<f4", dict(compressors=numcodecs.Zstd(), chunk_key_encoding={"name": "v2",
                                                                   "separator": "/"})),
    ("<c8", dict(compressors=numcodecs.Zstd())),
    (">c16", dict(compressors=None)),
    ("|b1", dict(compressors=numcodecs.Zlib())),
    ("<f2", dict(compressors=None)),
    ("|u1", dict(compressors=numcodecs.Blosc("zlib", 1, numcodecs.Blosc.NOSHUFFLE))),
    (">i2", dict(order="F", compressors=None)),
    ("<f8", dict(order="F", compressors=numcodecs.Zstd())),
]


@pytest.mark.parametrize("dtype, kw", CODECS, ids=[f"{d}-{i}" for i, (d, _) in enumerate(CODECS)])
def test_codecs_byte_order_and_layout(tmp_path, dtype, kw):
    data = (np.arange(7 * 5).reshape(7, 5) * 3 + 1).astype(dtype)
    store = make_store(tmp_path / "s.zarr", {"v": (data, ("y", "x"), dict(chunks=(3, 2), **kw))})
    assert detect_format(store) == "zarr2"
    report = same_everywhere(store, tmp_path, ["v"])
    a = report.plan.arrays["v"]
    # every chunk is referenced, from its own chunk file, whole
    assert a.refs is not None and (a.refs["length"] > 0).all()
    sources = report.plan.sources
    files = {sources[i].path for i in a.refs["path"].reshape(-1)}
    assert len(files) == 3 * 3 and all(f.startswith(str(store)) for f in files)
    assert (a.refs["offset"] == 0).all()
    assert [int(x) for x in a.refs["length"].reshape(-1)] == \
        [os.path.getsize(f) for f in (sources[i].path for i in a.refs["path"].reshape(-1))]


def test_root_array_store(tmp_path):
    data = np.arange(20, dtype=">u2").reshape(4, 5)
    a = zarr.create_array(str(tmp_path / "r.zarr"), shape=data.shape, dtype=data.dtype,
                          chunks=(3, 3), zarr_format=2, compressors=numcodecs.Zlib(),
                          fill_value=9)
    a[...] = data
    inv = scan(tmp_path / "r.zarr")
    assert list(inv.variables) == ["data"] and inv.variables["data"].dims == ("y", "x")
    cube = tmp_path / "cube.zarr"
    assert virtualize.virtualize([tmp_path / "r.zarr"], cube).ok
    assert_same(virtualize.open(cube)["data"][...], v2(tmp_path / "r.zarr")[...], "data")


def test_fortran_order_in_three_dimensions(tmp_path):
    data = np.arange(5 * 4 * 3, dtype=">u4").reshape(5, 4, 3) * 7
    store = make_store(tmp_path / "s.zarr", {"v": (data, ("t", "y", "x"), dict(
        chunks=(2, 3, 2), order="F", compressors=numcodecs.Zstd()))})
    assert json.loads((store / "v" / ".zarray").read_text())["order"] == "F"
    report = same_everywhere(store, tmp_path, ["v"])
    codecs = [c["name"] for c in report.plan.arrays["v"].codecs]
    assert codecs[0] == "transpose"


def test_scalar_and_empty_arrays(tmp_path):
    g = zarr.open_group(str(tmp_path / "s.zarr"), mode="w", zarr_format=2)
    s0 = g.create_array("s", shape=(), dtype="<f8", fill_value=0, compressors=numcodecs.Zstd())
    s0[()] = 2.5
    g.create_array("e", shape=(0, 4), dtype="<i4", chunks=(2, 4), fill_value=0)
    g["e"].attrs["_ARRAY_DIMENSIONS"] = ["n", "x"]
    g.create_array("never", shape=(3, 4), dtype=">f4", chunks=(2, 2), fill_value=np.nan)
    g["never"].attrs["_ARRAY_DIMENSIONS"] = ["y", "x"]
    same_everywhere(tmp_path / "s.zarr", tmp_path, ["s", "e", "never"])


def test_unknown_codec_is_refused_located(tmp_path):
    data = np.arange(12, dtype="<f4").reshape(3, 4)
    store = make_store(tmp_path / "s.zarr", {"v": (data, ("y", "x"), dict(
        chunks=(3, 4), filters=[numcodecs.Quantize(2, "<f4")], compressors=None))})
    (p,) = [p for p in virtualize.check([store]).problems if p.fatal]
    assert (p.kind, p.loc.file, p.loc.variable) == ("unsupported-filter", str(store), "v")
    assert "'quantize'" in p.message


# -- fill values and absent chunks --------------------------------------------------------

@pytest.mark.parametrize("dtype, fill", [("<f8", np.nan), ("<f4", np.inf), (">f8", -np.inf),
                                         ("<i4", -99), ("<u1", 255), ("<c8", 1 + 2j),
                                         (">c16", complex(np.nan, -np.inf))])
def test_absent_chunks_read_as_the_fill_value(tmp_path, dtype, fill):
    data = np.arange(10 * 6).reshape(10, 6).astype(dtype)
    store = make_store(tmp_path / "s.zarr", {"v": (data, ("t", "x"), dict(
        chunks=(4, 3), fill_value=fill, compressors=numcodecs.Zstd(),
        regions=[(slice(0, 4), slice(0, 3)), (slice(8, 10), slice(3, 6))]))})
    raw = json.loads((store / "v" / ".zarray").read_text())["fill_value"]
    if dtype[1] == "c":
        assert isinstance(raw, list) and len(raw) == 2
    if dtype[1] == "f":
        assert raw == {np.nan: "NaN", np.inf: "Infinity", -np.inf: "-Infinity"}.get(fill, raw) \
            or np.isnan(fill) and raw == "NaN"
    report = same_everywhere(store, tmp_path, ["v"])
    refs = report.plan.arrays["v"].refs
    assert int((refs["length"] > 0).sum()) == 2  # 4 of the 6 chunks were never written
    got = virtualize.open(tmp_path / "cube.zarr")["v"][...]
    assert_same(got[4:8], np.full((4, 6), fill, dtype), "fill")


def test_null_fill_with_absent_chunks_is_refused(tmp_path):
    data = np.arange(8, dtype="<i4")
    store = make_store(tmp_path / "s.zarr", {"v": (data, ("t",), dict(
        chunks=(4,), fill_value=None, compressors=None, regions=[slice(0, 4)]))})
    assert json.loads((store / "v" / ".zarray").read_text())["fill_value"] is None
    (p,) = [p for p in virtualize.check([store]).problems if p.fatal]
    assert (p.kind, p.loc.variable, p.loc.block) == ("unknown-fill", "v", (1,))


def test_null_fill_with_every_chunk_present_is_read(tmp_path):
    data = np.arange(8, dtype="<i4") - 3
    store = make_store(tmp_path / "s.zarr", {"v": (data, ("t",), dict(
        chunks=(4,), fill_value=None, compressors=None))})
    same_everywhere(store, tmp_path, ["v"])


# -- what is refused or skipped -----------------------------------------------------------

def test_strings_objects_and_structs_are_skipped_located(tmp_path):
    g = zarr.open_group(str(tmp_path / "s.zarr"), mode="w", zarr_format=2)
    ok = g.create_array("ok", shape=(4,), dtype="<f4", chunks=(2,), fill_value=0)
    ok[...] = np.arange(4, dtype="<f4")
    ok.attrs["_ARRAY_DIMENSIONS"] = ["n"]
    s = g.create_array("name", shape=(4,), dtype=str, chunks=(2,))
    s[...] = np.array(["a", "bb", "ccc", "d"])
    s.attrs["_ARRAY_DIMENSIONS"] = ["n"]
    fixed = g.create_array("code", shape=(4,), dtype="S3", chunks=(2,))
    fixed[...] = np.array([b"a", b"bb", b"ccc", b"d"])
    fixed.attrs["_ARRAY_DIMENSIONS"] = ["n"]
    rec = g.create_array("rec", shape=(4,), dtype=[("a", "<i4"), ("b", "<f8")], chunks=(2,))
    rec.attrs["_ARRAY_DIMENSIONS"] = ["n"]
    when = g.create_array("when", shape=(4,), dtype="<M8[s]", chunks=(2,))
    when[...] = np.arange(4).astype("<M8[s]")
    when.attrs["_ARRAY_DIMENSIONS"] = ["n"]
    report = virtualize.check([tmp_path / "s.zarr"])
    skipped = {p.loc.variable: p for p in report.problems}
    assert set(skipped) == {"name", "code", "rec", "when"}
    assert all(p.kind == "unsupported-type" and not p.fatal and p.loc.file == str(tmp_path / "s.zarr")
               for p in skipped.values())
    assert report.ok and set(report.plan.arrays) == {"ok"}
    cube = tmp_path / "cube.zarr"
    assert virtualize.virtualize([tmp_path / "s.zarr"], cube).ok
    assert_same(virtualize.open(cube)["ok"][...], v2(tmp_path / "s.zarr")["ok"][...], "ok")


def test_bad_metadata_and_chunks_are_located(tmp_path):
    data = np.arange(12, dtype="<f4").reshape(3, 4)
    store = make_store(tmp_path / "s.zarr", {
        "v": (data, ("y", "x"), dict(chunks=(3, 2), compressors=None)),
        "w": (data, ("y", "x"), dict(chunks=(3, 2), compressors=None)),
        "u": (data, ("y", "x"), dict(chunks=(3, 2), compressors=None))})
    (store / "w" / ".zarray").write_text('{"shape": [3, 4], "chunks": [3')  # cut short
    (store / "v" / "0.1").unlink()
    (store / "v" / "0.1").mkdir()  # a directory where a chunk file should be
    with open(store / "u" / "0.0", "r+b") as f:  # an uncompressed chunk cut short
        f.truncate(20)
    problems = {p.loc.variable: p for p in virtualize.check([store]).problems}
    assert problems["w"].kind == "corrupt"
    assert (problems["v"].kind, problems["v"].loc.block) == ("unreadable", (0, 1))
    assert (problems["u"].kind, problems["u"].loc.block) == ("chunk-length", (0, 0))
    assert all(p.fatal and p.loc.file == str(store) for p in problems.values())


def test_detection_is_strict(tmp_path):
    store = make_store(tmp_path / "s.zarr", {"v": (np.zeros(3), ("t",), dict(chunks=(3,)))},
                       consolidated=True)
    assert detect_format(store) == "zarr2"
    (store / ".zgroup").unlink()  # consolidated metadata alone still says v2
    assert detect_format(store) == "zarr2"
    v3 = zarr.open_group(str(tmp_path / "v3.zarr"), mode="w", zarr_format=3)
    v3.create_array("v", shape=(3,), dtype="f8")
    cube = tmp_path / "cube.zarr"
    virtualize.virtualize([store], cube)
    for d in (tmp_path / "v3.zarr", cube):  # a zarr v3 store, a cube: not zarr v2 stores
        assert not is_input_directory(d)
        with pytest.raises(VirtualizeError) as e:
            scan(d)
        assert e.value.problems[0].kind == "unreadable"


def test_consolidated_and_walked_metadata_agree(tmp_path):
    arrays = {"a": (np.arange(6.0), ("t",), dict(chunks=(4,))),
              "g/b": (np.arange(12, dtype="<i2").reshape(3, 4), ("y", "x"), dict(chunks=(2, 2)))}
    walked = scan(make_store(tmp_path / "w.zarr", arrays, attrs={"title": "x"}))
    cons = scan(make_store(tmp_path / "c.zarr", arrays, attrs={"title": "x"}, consolidated=True))
    assert set(walked.variables) == set(cons.variables) == {"a", "g/b"}
    assert walked.groups[""] == cons.groups[""] == {"title": "x"}
    for name, v in walked.variables.items():
        w = cons.variables[name]
        assert (v.dims, v.shape, v.codecs, v.attrs) == (w.dims, w.shape, w.codecs, w.attrs)
    # only metadata was read: the .z* files, no chunk
    meta = sum(f.stat().st_size for f in (tmp_path / "w.zarr").rglob(".z*"))
    assert walked.bytes_read == meta
    same_everywhere(tmp_path / "c.zarr", tmp_path, ["a", "g/b"])


# -- xarray stores and stacks ----------------------------------------------------------------

def _xr_store(path, start, n, chunk, seed, compressor=True):
    import pandas as pd

    rng = np.random.default_rng(seed)
    ds = xr.Dataset(
        {"tas": (("time", "lat", "lon"), rng.random((n, 3, 4)).astype("f4"),
                 {"units": "K", "standard_name": "air_temperature"}),
         "orog": (("lat", "lon"), np.arange(12.0).reshape(3, 4), {"units": "m"})},
        coords={"time": pd.date_range(start, periods=n, freq="D"),
                "lat": ("lat", [10.0, 20.0, 30.0], {"units": "degrees_north"}),
                "lon": ("lon", [0.0, 1.0, 2.0, 3.0], {"units": "degrees_east"})},
        attrs={"Conventions": "CF-1.8", "title": "test"})
    enc = {"tas": {"chunks": (chunk, 3, 4)}}
    if not compressor:
        enc["tas"]["compressors"] = None
    ds.to_zarr(path, zarr_format=2, encoding=enc, mode="w")
    return path


def test_xarray_store_dimensions_and_cf_attrs(tmp_path):
    store = _xr_store(tmp_path / "x.zarr", "2000-01-01", 9, 4, 0)
    report = same_everywhere(store, tmp_path)
    assert report.plan.arrays["tas"].dims == ("time", "lat", "lon")
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize")
    want = xr.open_zarr(store, zarr_format=2)
    xr.testing.assert_identical(ds.load(), want.load())


def test_xarray_decodes_as_it_decodes_the_store(tmp_path):
    """xarray takes a v2 fill_value as _FillValue (masking it), 0 included: so does the
    cube's xarray view of the store."""
    data = np.array([[0, 1, 2], [3, 0, 5]])
    store = make_store(tmp_path / "s.zarr", {
        "i": (data.astype("<i2"), ("y", "x"), dict(chunks=(1, 3), fill_value=0)),
        "f": (data.astype("<f4"), ("y", "x"), dict(chunks=(2, 2), fill_value=0.0)),
        "n": (data.astype("<f8"), ("y", "x"), dict(chunks=(2, 2), fill_value=np.nan)),
        "j": (data.astype("<u1"), ("y", "x"), dict(chunks=(2, 2), fill_value=None))})
    same_everywhere(store, tmp_path)
    got = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize")
    want = xr.open_zarr(store, zarr_format=2, consolidated=False)
    assert np.isnan(want["i"].values[0, 0])  # (xarray masks a v2 store's 0 fill)
    xr.testing.assert_identical(got.load(), want.load())


def test_two_stores_of_different_chunkings_become_one_cube(tmp_path):
    a = _xr_store(tmp_path / "a.zarr", "2000-01-01", 30, 10, 1)
    b = _xr_store(tmp_path / "b.zarr", "2000-01-31", 21, 7, 2)
    cube = tmp_path / "cube.zarr"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [os.path.join(os.path.dirname(virtualize.__file__), os.pardir), *sys.path])}
    run = subprocess.run([sys.executable, "-m", "virtualize.cli", str(a), str(b), "-o", str(cube)],
                         capture_output=True, text=True, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr + run.stdout
    grid = json.loads((cube / "tas" / "zarr.json").read_text())["chunk_grid"]["configuration"]
    lengths = [[n] if isinstance(n, int) else [n[0]] * n[1] for n in grid["chunk_shapes"][0]]
    assert sum(lengths, []) == [10, 10, 10, 7, 7, 7]
    ds = xr.open_dataset(cube, engine="virtualize")
    want = xr.concat([xr.open_zarr(a, zarr_format=2), xr.open_zarr(b, zarr_format=2)], "time",
                     data_vars="minimal", coords="minimal", compat="override")
    xr.testing.assert_identical(ds.load(), want.load())
    export = tmp_path / "cube.json"
    assert virtualize.virtualize([a, b], export).ok
    want_tas = np.concatenate([v2(a)["tas"][...], v2(b)["tas"][...]])
    assert_same(kerchunk_group(export)["tas"][...], want_tas, "tas (kerchunk export)")
    assert_same(virtualize.open(cube)["tas"][...], want_tas, "tas (cube)")


@pytest.mark.parametrize("compressor", [True, False])
def test_padded_last_chunk_mid_stack(tmp_path, compressor):
    """a (25 steps in chunks of 10: its last chunk stored padded) then b: compressed, the
    padded chunk cannot be the middle of the cube (refused, located); uncompressed, the
    split remedy trims it exactly."""
    a = _xr_store(tmp_path / "a.zarr", "2000-01-01", 25, 10, 3, compressor)
    b = _xr_store(tmp_path / "b.zarr", "2000-01-26", 14, 7, 4, compressor)
    report = virtualize.check([a, b])
    if compressor:
        (p,) = [p for p in report.problems if p.fatal]
        assert (p.kind, p.loc.file, p.loc.variable, p.loc.block) == \
            ("padded-block", str(a), "tas", (2,))
        # the other order is fine: the padded chunk is the cube's last
        b2 = _xr_store(tmp_path / "b2.zarr", "1999-12-01", 14, 7, 4, compressor)
        cube = tmp_path / "cube.zarr"
        assert virtualize.virtualize([b2, a], cube).ok
        want = np.concatenate([v2(b2)["tas"][...], v2(a)["tas"][...]])
        assert_same(virtualize.open(cube)["tas"][...], want, "tas")
        return
    assert report.ok, report.problems
    assert report.plan.remedies["split"].blocks == 1
    cube = tmp_path / "cube.zarr"
    assert virtualize.virtualize([a, b], cube).ok
    want = np.concatenate([v2(a)["tas"][...], v2(b)["tas"][...]])
    assert_same(virtualize.open(cube)["tas"][...], want, "tas")


def test_stores_stack_along_a_new_axis(tmp_path):
    stores = [make_store(tmp_path / f"m{i}.zarr", {"v": (np.arange(12.0).reshape(3, 4) + i,
                                                        ("y", "x"), dict(chunks=(2, 4)))})
              for i in range(3)]
    cube = tmp_path / "cube.zarr"
    report = virtualize.virtualize(stores, cube, concat_dim="member")
    assert report.ok, report.problems
    want = np.stack([v2(s)["v"][...] for s in stores])
    assert_same(virtualize.open(cube)["v"][...], want, "v")


# -- outputs never confused with sources ---------------------------------------------------

def test_an_existing_v2_store_is_never_overwritten(tmp_path):
    src = make_store(tmp_path / "in.zarr", {"v": (np.arange(4.0), ("t",), dict(chunks=(2,)))})
    other = make_store(tmp_path / "other.zarr", {"v": (np.arange(4.0), ("t",), dict(chunks=(2,)))})
    before = sorted(p.name for p in other.rglob("*"))
    with pytest.raises(OutputExistsError):
        virtualize.virtualize([src], other)
    with pytest.raises(UnsafeOutputError) as e:
        virtualize.virtualize([src], other, overwrite=True)
    assert e.value.problems[0].kind == "output-not-ours"
    assert sorted(p.name for p in other.rglob("*")) == before
    with pytest.raises(UnsafeOutputError) as e:
        virtualize.virtualize([src], src, overwrite=True)
    assert e.value.problems[0].kind == "output-is-source"
    with pytest.raises(UnsafeOutputError):
        virtualize.virtualize([src], src / "v" / "cube.zarr")
    assert_same(v2(src)["v"][...], np.arange(4.0), "the source is untouched")


def test_staleness_and_decode_check(tmp_path):
    a = _xr_store(tmp_path / "a.zarr", "2000-01-01", 8, 4, 5)
    b = _xr_store(tmp_path / "b.zarr", "2000-01-09", 6, 3, 6)
    cube = tmp_path / "cube.zarr"
    assert virtualize.virtualize([a, b], cube).ok
    # every chunk file is a source of the cube, found through its store
    sources = json.loads((cube / "virtualize.json").read_text())["sources"]
    chunk = str(b / "tas" / "1.0.0")
    assert {"path": chunk, "referenced_by": str(b)}.items() <= \
        next(s for s in sources if s["path"] == chunk).items()
    assert virtualize.verify_cube(cube, decode=True) == []
    # a chunk rewritten (other values): the cube is stale, located at that chunk file
    z = zarr.open_array(str(b / "tas"), mode="r+", zarr_format=2)
    z[3:6] = z[3:6] + 1
    problems = virtualize.verify_cube(cube)
    assert [(p.kind, p.loc.file) for p in problems if p.fatal] == [("source-changed", chunk)]
    with pytest.raises(VirtualizeError):
        virtualize.open(cube)


# -- damaged metadata: a clean located refusal, or the values zarr itself reads ------------

def _outcome(store, tmp_path, tag):
    """("refused", problems) or ("read", values) for virtualizing the store."""
    try:
        report = virtualize.virtualize([store], tmp_path / f"{tag}.zarr")
    except VirtualizeError as e:
        return "refused", e.problems
    if not report.ok or "v" not in report.plan.arrays:
        return "refused", report.problems
    return "read", virtualize.open(tmp_path / f"{tag}.zarr")["v"][...]


def test_mutated_array_metadata(tmp_path):
    data = (np.arange(7 * 5).reshape(7, 5) - 11).astype("<i4")
    store = make_store(tmp_path / "s.zarr", {"v": (data, ("y", "x"), dict(
        chunks=(3, 2), compressors=numcodecs.Zlib(), fill_value=-1))})
    meta = store / "v" / ".zarray"
    good = meta.read_bytes()
    rng = np.random.default_rng(23)
    cases = [("cut", int(n)) for n in rng.choice(len(good), 12, replace=False)] + \
        [("flip", int(i)) for i in rng.choice(len(good), 40, replace=False)]
    seen = set()
    for n, (kind, at) in enumerate(cases):
        b = bytearray(good)
        if kind == "cut":
            b = b[:at]
        else:
            b[at] ^= 1 << int(rng.integers(0, 8))
        meta.write_bytes(bytes(b))
        what, got = _outcome(store, tmp_path, f"m{n}")
        seen.add(what)
        where = f"{kind} at {at}: {bytes(b)!r}"
        if what == "refused":
            # (a chunk file, when the decode check found the cube would read otherwise)
            assert got and all(p.loc.file.startswith(str(store)) for p in got), where
            continue
        try:  # accepted: exactly what zarr reads from the damaged store
            want = v2(store)["v"][...]
        except Exception as e:  # zarr cannot read it: neither may the cube
            raise AssertionError(f"{where}: read by the cube, not by zarr ({e})") from None
        assert_same(got, want, where)
    meta.write_bytes(good)
    assert "refused" in seen


def test_truncated_compressed_chunk_does_not_read_as_data(tmp_path):
    data = np.arange(40, dtype="<f8").reshape(8, 5)
    store = make_store(tmp_path / "s.zarr", {"v": (data, ("y", "x"), dict(
        chunks=(4, 5), compressors=numcodecs.Zstd()))})
    chunk = store / "v" / "1.0"
    chunk.write_bytes(chunk.read_bytes()[:-6])
    with pytest.raises(Exception):
        v2(store)["v"][...]  # zarr itself cannot decode it
    # scanning reads no chunk; the decode check before writing finds it (one per source)
    with pytest.raises(VirtualizeError) as e:
        virtualize.virtualize([store], tmp_path / "cube.zarr")
    (p,) = e.value.problems
    assert (p.kind, p.loc.file, p.loc.variable, p.loc.block) == \
        ("decode-mismatch", str(chunk), "v", (1, 0))
    assert not (tmp_path / "cube.zarr").exists()


def test_a_chunk_symlinked_into_a_system_location_is_refused(tmp_path):
    data = np.arange(4, dtype="u1")
    store = make_store(tmp_path / "s.zarr", {"v": (data, ("t",), dict(
        chunks=(4,), compressors=None))})
    (store / "v" / "0").unlink()
    (store / "v" / "0").symlink_to("/etc/hostname" if os.path.exists("/etc/hostname")
                                   else "/etc/passwd")
    (p,) = [p for p in virtualize.check([store]).problems if p.fatal]
    assert (p.kind, p.loc.variable, p.loc.block) == ("reference-not-allowed", "v", (0,))


def test_append_a_store_to_a_cube_of_stores(tmp_path):
    a = _xr_store(tmp_path / "a.zarr", "2000-01-01", 30, 10, 7)
    b = _xr_store(tmp_path / "b.zarr", "2000-01-31", 21, 7, 8)
    c = _xr_store(tmp_path / "c.zarr", "2000-02-21", 5, 5, 9)
    cube = tmp_path / "cube.zarr"
    assert virtualize.virtualize([a, b], cube).ok
    assert virtualize.append(cube, [c]).ok
    want = np.concatenate([v2(s)["tas"][...] for s in (a, b, c)])
    assert_same(virtualize.open(cube)["tas"][...], want, "tas")
    assert virtualize.verify_cube(cube, decode=True) == []


# -- remote stores (object storage: moto's S3; a web server) ---------------------------------

BUCKET = "stores"


@pytest.fixture(scope="module")
def remote(tmp_path_factory):
    """Stores on moto's S3 (s3://stores/<name>) and over HTTP (<url>/<name>): a.zarr and
    b.zarr (xarray, consolidated; chunks of 10 and 7 along time) and w.zarr (zarr-python,
    not consolidated, with absent chunks and a nested group)."""
    pytest.importorskip("moto")
    pytest.importorskip("s3fs")
    from servers import RangeHTTPServer, s3_bucket, start_moto

    root = tmp_path_factory.mktemp("remote")
    _xr_store(root / "a.zarr", "2000-01-01", 30, 10, 1)
    _xr_store(root / "b.zarr", "2000-01-31", 21, 7, 2)
    data = np.arange(10 * 6, dtype="<i4").reshape(10, 6)
    make_store(root / "w.zarr", {
        "v": (data, ("t", "x"), dict(chunks=(4, 3), fill_value=-5, compressors=numcodecs.Zstd(),
                                     regions=[(slice(0, 4), slice(0, 6))])),
        "g/u": (data.astype(">f8"), ("t", "x"), dict(chunks=(5, 6), compressors=None))})
    r = zarr.create_array(str(root / "r.zarr"), shape=(6, 4), dtype="<u2", chunks=(4, 4),
                          zarr_format=2, compressors=numcodecs.Zlib(), fill_value=3)
    r[:4] = np.arange(16, dtype="<u2").reshape(4, 4)  # the second chunk never written
    srv = RangeHTTPServer(root)
    server, endpoint = start_moto()
    with pytest.MonkeyPatch.context() as mp:
        client = s3_bucket(mp, endpoint, BUCKET)
        for f in sorted(root.rglob("*")):
            if f.is_file():
                client.upload_file(str(f), BUCKET, f.relative_to(root).as_posix())
        yield root, client, srv
    server.stop()
    srv.stop()


def test_s3_stores_of_different_chunkings_become_one_cube(remote, tmp_path):
    root, _client, _srv = remote
    urls = [f"s3://{BUCKET}/a.zarr", f"s3://{BUCKET}/b.zarr"]
    assert detect_format(urls[0]) == "zarr2"
    cube = tmp_path / "cube.zarr"
    report = virtualize.virtualize(urls, cube)
    assert report.ok, report.problems
    grid = json.loads((cube / "tas" / "zarr.json").read_text())["chunk_grid"]["configuration"]
    assert grid["chunk_shapes"][0] == [[10, 3], [7, 3]]
    want = np.concatenate([v2(root / "a.zarr")["tas"][...], v2(root / "b.zarr")["tas"][...]])
    assert_same(virtualize.open(cube)["tas"][...], want, "tas")
    # the chunk objects are the cube's references; each store recorded by its .zmetadata
    sources = json.loads((cube / "virtualize.json").read_text())["sources"]
    assert [s["path"] for s in sources if not s.get("referenced_by")] == \
        [f"{u}/.zmetadata" for u in urls]
    assert f"s3://{BUCKET}/b.zarr/tas/2.0.0" in {s["path"] for s in sources}
    ds = xr.open_dataset(cube, engine="virtualize")
    local = xr.concat([xr.open_zarr(root / n, zarr_format=2) for n in ("a.zarr", "b.zarr")],
                      "time", data_vars="minimal", coords="minimal", compat="override")
    xr.testing.assert_identical(ds.load(), local.load())
    assert virtualize.verify_cube(cube, decode=True) == []
    # a glob of stores is the same stack
    glob = virtualize.check([f"s3://{BUCKET}/[ab].zarr"])
    assert glob.ok and glob.files == urls


def test_s3_store_walked_without_consolidated_metadata(remote, tmp_path):
    root, client, _srv = remote
    url = f"s3://{BUCKET}/w.zarr"
    inv = scan(url)
    assert inv.path == f"{url}/.zgroup" and set(inv.variables) == {"v", "g/u"}
    assert inv.requests < 10  # one listing, the metadata objects: no request per chunk
    cube = tmp_path / "cube.zarr"
    assert virtualize.virtualize([url], cube).ok
    g, src = virtualize.open(cube), v2(root / "w.zarr")
    for name in ("v", "g/u"):
        assert_same(g[name][...], src[name][...], name)
    assert int((virtualize.check([url]).plan.arrays["v"].refs["length"] > 0).sum()) == 2
    # a chunk object rewritten: the cube is stale, located at that object
    client.put_object(Bucket=BUCKET, Key="w.zarr/g/u/0.0", Body=b"\0" * 240)
    problems = [p for p in virtualize.verify_cube(cube) if p.fatal]
    assert [(p.kind, p.loc.file) for p in problems] == [("source-changed", f"{url}/g/u/0.0")]
    client.upload_file(str(root / "w.zarr" / "g" / "u" / "0.0"), BUCKET, "w.zarr/g/u/0.0")


def test_http_stores(remote, tmp_path):
    root, _client, srv = remote
    url = f"{srv.url}/a.zarr"
    cube = tmp_path / "cube.zarr"
    assert virtualize.virtualize([url], cube).ok  # consolidated: read over http
    assert_same(virtualize.open(cube)["tas"][...], v2(root / "a.zarr")["tas"][...], "tas")
    # a group without .zmetadata cannot be listed over http: refused, located
    with pytest.raises(VirtualizeError) as e:
        scan(f"{srv.url}/w.zarr")
    (p,) = e.value.problems
    assert (p.kind, p.loc.file) == ("unreadable", f"{srv.url}/w.zarr")
    assert ".zmetadata" in p.message
    # one array at the root needs no listing: a 404 is a chunk never written ...
    url = f"{srv.url}/r.zarr"
    cube = tmp_path / "r.zarr"
    report = virtualize.virtualize([url], cube)
    assert report.ok, report.problems
    assert_same(virtualize.open(cube)["data"][...], v2(root / "r.zarr")[...], "data")
    assert int((report.plan.arrays["data"].refs["length"] > 0).sum()) == 1
    # ... any other answer is no fill: refused, located at its block
    srv.status["r.zarr/1.0"] = 403
    try:
        (p,) = [p for p in virtualize.check([url]).problems if p.fatal]
    finally:
        del srv.status["r.zarr/1.0"]
    assert (p.kind, p.loc.file, p.loc.variable, p.loc.block) == \
        ("unreadable", f"{url}/.zarray", "data", (1, 0))
