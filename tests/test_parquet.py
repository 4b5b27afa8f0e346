"""The kerchunk parquet output (`-o cube.parq`, `format="parquet"`): read back exactly by
virtualize and by fsspec's reference filesystem + zarr + xarray in a process that never
imports virtualize; export, append, refresh, the output guards, damaged records."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tifffile
import xarray as xr
import zarr

import virtualize
from virtualize.model import UsageError, VirtualizeError

from conftest import needs
from helpers import assert_same, source_values

pytest.importorskip("pyarrow")

# A fresh interpreter: fsspec's reference filesystem over the set, zarr and xarray, with
# each parquet engine: fsspec's default (`fo` the directory: fastparquet) and pyarrow (`fo` a
# LazyReferenceMapper naming it); every array of the hierarchy hashed. argv: the set.
PLAIN = r"""
import sys, json, hashlib
import fsspec, pandas, zarr, xarray as xr
from fsspec.implementations.reference import LazyReferenceMapper
assert "virtualize" not in sys.modules
zarr.config.set({"array.rectilinear_chunks": True})
ENGINES = ("fastparquet", "pyarrow")

def refs(engine):
    if engine == "fastparquet":  # fsspec's default engine
        return sys.argv[1]
    return LazyReferenceMapper(sys.argv[1], engine=engine)

result = {"pandas": pandas.__version__}
for engine in ENGINES:
    fs = fsspec.filesystem("reference", fo=refs(engine), remote_protocol="file",
                           asynchronous=True)
    g = zarr.open_group(zarr.storage.FsspecStore(fs, read_only=True), mode="r")
    out = result[engine] = {"zarr": {}, "xarray": {}, "grids": {}}
    for path, a in g.members(max_depth=None):
        if isinstance(a, zarr.Array):
            out["zarr"][path] = hashlib.sha256(a[...].tobytes()).hexdigest()
            out["grids"][path] = a.metadata.chunk_grid.to_dict()["name"]
    groups = [""] + [p for p, m in g.members(max_depth=None) if isinstance(m, zarr.Group)]
    for grp in groups:
        ds = xr.open_dataset("reference://", engine="zarr", group=grp or None,
                             storage_options={"fo": refs(engine), "remote_protocol": "file"},
                             mask_and_scale=False, decode_times=False)
        for name in ds.variables:
            key = f"{grp}/{name}" if grp else name
            out["xarray"][key] = hashlib.sha256(ds[name].values.tobytes()).hexdigest()
assert "virtualize" not in sys.modules
print(json.dumps(result))
"""


def plain_run(path, env=None) -> dict:
    r = subprocess.run([sys.executable, "-W", "ignore", "-c", PLAIN, str(path)],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def plain(path) -> dict:
    """What fsspec + zarr + xarray read of the set without virtualize: the same with
    fastparquet (fsspec's default) as with pyarrow."""
    got = plain_run(path)
    assert got["fastparquet"] == got["pyarrow"], (got["fastparquet"], got["pyarrow"])
    return got["pyarrow"]


def sha(a) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def hashes(g: zarr.Group) -> dict[str, str]:
    return {p: sha(a[...]) for p, a in g.members(max_depth=None) if isinstance(a, zarr.Array)}


def tiff(path) -> np.ndarray:
    import tifffile
    return tifffile.imread(path)


# -- read back exactly ---------------------------------------------------------------------

def test_uneven_netcdf4_stack_reads_without_virtualize(case, tmp_path):
    """months2024: tas in one chunk per month (31, 29, 31, ...: a rectilinear grid), its
    coordinates inline; the plain reader gets the netCDF4 library's bytes."""
    files = case("months2024")
    out = tmp_path / "cube.parq"
    report = virtualize.virtualize(files, out)
    assert report.output["kind"] == "parquet"
    assert sorted(p.name for p in out.iterdir()) == [".zmetadata", "lat", "lon", "tas", "time"]
    got = plain(out)
    want = source_values(files, "tas", "time", ("time", "lat", "lon"))
    assert got["zarr"]["tas"] == got["xarray"]["tas"] == sha(want)
    assert got["grids"]["tas"] == "rectilinear"
    with netcdf(files[0]) as nc:
        lat = np.asarray(nc["lat"][:])
    assert got["zarr"]["lat"] == got["xarray"]["lat"] == sha(lat)
    times = np.concatenate([netcdf_values(f, "time") for f in files])
    assert got["zarr"]["time"] == sha(times)
    # through virtualize too
    g = virtualize.open(out)
    assert_same(g["tas"][...], want, "tas via virtualize.open")
    ds = xr.open_dataset(out, engine="virtualize", mask_and_scale=False, decode_times=False)
    assert_same(ds["tas"].values, want, "tas via engine=virtualize")
    assert_same(ds["time"].values, times, "time")
    assert virtualize.verify_cube(out, decode=True) == []


def netcdf(path):
    import netCDF4
    ds = netCDF4.Dataset(path)
    ds.set_auto_maskandscale(False)
    return ds


def netcdf_values(path, name):
    with netcdf(path) as nc:
        return np.asarray(nc[name][...])


def test_netcdf_classic_stack(case, tmp_path):
    files = case("nc3_months_classic")
    out = tmp_path / "cube.parquet"
    virtualize.virtualize(files, out)
    g = virtualize.open(out)
    want = {n: source_values(files, n, "time", g[n].metadata.dimension_names)
            for n in g.array_keys()}
    for n, w in want.items():
        assert_same(g[n][...], w, n)
    got = plain(out)
    assert {n: got["zarr"][n] for n in want} == {n: sha(w) for n, w in want.items()}
    assert {n: got["xarray"][n] for n in want} == {n: sha(w) for n, w in want.items()}


def test_grouped_file(case, tmp_path):
    files = case("groups")
    out = tmp_path / "g.parq"
    virtualize.virtualize(files, out)
    g = virtualize.open(out)
    for name in ("surface/tas", "surface/stats/nobs"):
        want = np.concatenate([netcdf_values(f, name) for f in files])
        assert_same(g[name][...], want, name)
    got = plain(out)
    assert got["zarr"]["surface/tas"] == got["xarray"]["surface/tas"] == sha(g["surface/tas"][...])
    assert got["xarray"]["surface/stats/nobs"] == sha(g["surface/stats/nobs"][...])
    assert got["zarr"] == hashes(virtualize.open(tmp_path / "g.parq"))


def test_tiff_stack(case, tmp_path):
    files = case("stack_dates")
    out = tmp_path / "s.parq"
    virtualize.virtualize(files, out, concat_dim="time")
    want = np.stack([tiff(f) for f in files])
    assert_same(virtualize.open(out)["image"][...], want, "stack")
    got = plain(out)
    assert got["zarr"]["image"] == got["xarray"]["image"] == sha(want)


def test_absent_chunks_read_as_fill(case, tmp_path):
    """A mosaic with a missing tile and a TIFF with empty tiles: absent rows (path and raw
    null) read as the fill value, by virtualize and by fsspec with either engine (pyarrow
    under pandas 3 gave the null path as NaN, which fsspec followed as a URL: TypeError)."""
    import make_mosaic as mm

    files = case("mosaic_gap")
    out = tmp_path / "m.parq"
    report = virtualize.mosaic(files, out)
    name = next(n for n in report.plan.arrays if n not in ("x", "y", "spatial_ref", "crs"))
    assert (report.plan.arrays[name].refs["length"] == 0).any()
    expected = mm.expected("mosaic_gap")
    g = virtualize.open(out)
    assert_same(g[name][...], expected.astype(g[name].dtype), "mosaic via virtualize")
    got = plain(out)
    assert got["zarr"][name] == got["xarray"][name] == sha(expected.astype(g[name].dtype))

    (path,) = case("sparse_tiles")
    virtualize.virtualize([path], tmp_path / "t.parq")
    assert_same(virtualize.open(tmp_path / "t.parq")["image"][...], tiff(path), "sparse")
    assert plain(tmp_path / "t.parq")["zarr"]["image"] == sha(tiff(path))


def test_records_are_typed_as_kerchunk_writes_them(case, tmp_path):
    """The columns as kerchunk's writer (fsspec's LazyReferenceMapper) stores them: path
    UTF-8 and raw bytes, optional; offset and size required int64, with a null count of 0
    (fastparquet reads an integer column it cannot prove null-free as floats: every read
    failed, "'numpy.float64' object cannot be interpreted as an integer"). Each engine
    gives pandas integers and, for an absent row, None."""
    import fastparquet
    import pandas as pd
    import pyarrow.parquet as pq

    files = case("mosaic_gap")
    out = tmp_path / "m.parq"
    virtualize.mosaic(files, out)
    record = out / "image" / "refs.0.parq"
    schema = pq.ParquetFile(record).schema  # parquet's own types, as any reader sees them
    assert [(c.name, c.physical_type, c.logical_type.type, c.max_definition_level)
            for c in schema] == [("path", "BYTE_ARRAY", "STRING", 1),
                                 ("offset", "INT64", "NONE", 0), ("size", "INT64", "NONE", 0),
                                 ("raw", "BYTE_ARRAY", "NONE", 1)]
    stats = pq.ParquetFile(record).metadata.row_group(0)
    assert [stats.column(i).statistics.null_count for i in (1, 2)] == [0, 0]
    assert fastparquet.ParquetFile(str(record)).dtypes["offset"] == np.int64
    for engine in ("fastparquet", "pyarrow"):
        df = pd.read_parquet(record, engine=engine)
        cols = {c: df[c].to_numpy(copy=True) for c in df.columns}  # as fsspec reads them
        assert cols["offset"].dtype == cols["size"].dtype == np.int64, engine
        absent = [i for i, p in enumerate(cols["path"]) if p is None]
        assert absent and all(cols["raw"][i] is None and cols["size"][i] == 0
                              for i in absent), engine
        assert all(isinstance(p, str) for p in cols["path"] if p is not None), engine


@pytest.fixture(scope="session")
def pandas2(tmp_path_factory):
    """A directory holding pandas 2 (and pytz, which it needs), put before the test
    environment's pandas 3 on PYTHONPATH: the plain reader under pandas 2."""
    import os

    target = tmp_path_factory.mktemp("pandas2")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                        "--disable-pip-version-check", "--target", str(target),
                        "pandas>=2.2,<3", "pytz"], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"pandas 2 could not be installed beside the tests: {r.stderr[-300:]}")
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(target), *filter(None, [os.environ.get("PYTHONPATH")])]))


@needs("pip")
def test_plain_readers_under_pandas_2_and_3(case, tmp_path, pandas2):
    """The same set read without virtualize under pandas 2 and pandas 3, with fastparquet
    and pyarrow: absent rows (a missing tile), inline rows (the coordinates) and references
    alike, all four equal to virtualize's read."""
    files = case("mosaic_gap")
    out = tmp_path / "m.parq"
    virtualize.mosaic(files, out)
    want = hashes(virtualize.open(out))
    got = {}
    for env in (None, pandas2):
        run = plain_run(out, env)
        for engine in ("fastparquet", "pyarrow"):
            got[run["pandas"].split(".")[0], engine] = run[engine]["zarr"]
    assert sorted(got) == [("2", "fastparquet"), ("2", "pyarrow"), ("3", "fastparquet"),
                           ("3", "pyarrow")]
    assert all(g == want for g in got.values()), got


def test_records_are_loaded_lazily(tmp_path, monkeypatch):
    """100,000 chunks in records of 10,000 rows: opening reads `.zmetadata` only; a chunk
    read loads its one record; fsspec finds the same row."""
    import h5py

    from virtualize.outputs.parquet import reader, writer

    n = 100_000
    src = tmp_path / "big.h5"
    with h5py.File(src, "w") as f:
        v = f.create_dataset("v", shape=(n, 2), chunks=(1, 2), dtype="<i2")
        v[:] = (np.arange(2 * n) % 30000).astype("<i2").reshape(n, 2)
    plan = virtualize.check([src], scan_timeout=None).plan
    writer.write_parquet(plan, tmp_path / "big.parq", record_size=10_000)
    assert len(list((tmp_path / "big.parq" / "v").glob("refs.*.parq"))) == 10
    loads = []
    orig = reader.ParquetStore._load
    monkeypatch.setattr(reader.ParquetStore, "_load",
                        lambda self, name, k: (loads.append((name, k)), orig(self, name, k))[1])
    g = virtualize.open(tmp_path / "big.parq")
    assert loads == []
    assert g["v"][n - 1].tolist() == [(2 * n - 2) % 30000, (2 * n - 1) % 30000]
    assert loads == [("v", 9)]
    rows = [0, 9_999, 10_000, 54_321, n - 1]  # (records 0, 0, 1, 5, 9)
    script = PLAIN.split("result = ")[0] + (
        "out = []\n"
        "for engine in ENGINES:\n"
        "    fs = fsspec.filesystem('reference', fo=refs(engine), remote_protocol='file',\n"
        "                           asynchronous=True)\n"
        "    g = zarr.open_group(zarr.storage.FsspecStore(fs, read_only=True), mode='r')\n"
        f"    out.append([g['v'][i].tolist() for i in {rows}])\n"
        "print(json.dumps(out))\n")
    r = subprocess.run([sys.executable, "-W", "ignore", "-c", script,
                        str(tmp_path / "big.parq")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    want = [g["v"][i].tolist() for i in rows]
    assert json.loads(r.stdout) == [want, want]  # fastparquet's, pyarrow's
    assert want == [[(2 * i) % 30000, (2 * i + 1) % 30000] for i in rows]
    assert sorted(set(loads)) == [("v", 0), ("v", 1), ("v", 5), ("v", 9)]


# -- export, append, refresh ------------------------------------------------------------------

def test_export_between_directory_parquet_and_json(case, tmp_path):
    files = case("months2024")
    virtualize.virtualize(files, tmp_path / "cube.zarr")
    virtualize.export(tmp_path / "cube.zarr", tmp_path / "a.parq")
    virtualize.export(tmp_path / "a.parq", tmp_path / "b.json")
    virtualize.export(tmp_path / "b.json", tmp_path / "c.parq", format="parquet")
    want = hashes(virtualize.open(tmp_path / "cube.zarr"))
    for out in ("a.parq", "b.json", "c.parq"):
        assert hashes(virtualize.open(tmp_path / out)) == want, out
    assert plain(tmp_path / "c.parq")["zarr"] == want
    with pytest.raises(VirtualizeError):  # exists: replaced only with overwrite
        virtualize.export(tmp_path / "cube.zarr", tmp_path / "a.parq")
    virtualize.export(tmp_path / "b.json", tmp_path / "a.parq", overwrite=True)
    assert hashes(virtualize.open(tmp_path / "a.parq")) == want


def test_published_only_when_complete(case, tmp_path, monkeypatch):
    """A write or an append that fails midway leaves nothing new: no set, no staging
    directory, the old set as it was."""
    from virtualize.outputs.parquet import writer

    files = case("months2024")
    out = tmp_path / "p.parq"

    def boom(*a, **k):
        raise OSError("disk full")
    monkeypatch.setattr(writer, "write_zmetadata", boom)
    with pytest.raises(OSError):
        virtualize.virtualize(files[:6], out)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    virtualize.virtualize(files[:6], out)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    monkeypatch.setattr(writer, "write_zmetadata", boom)
    with pytest.raises(OSError):
        virtualize.append(out, files[6:])
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.parq"]


def test_cli_writes_and_exports_parquet(case, tmp_path):
    from virtualize.cli import main

    files = case("months2024")
    assert main([*map(str, files), "-o", str(tmp_path / "c.parq")]) == 0
    assert main(["export", str(tmp_path / "c.parq"), "-o", str(tmp_path / "c.json")]) == 0
    assert main([*map(str, files), "-o", str(tmp_path / "d"), "--format", "parquet"]) == 0
    assert (tmp_path / "d" / ".zmetadata").is_file()
    assert hashes(virtualize.open(tmp_path / "c.json")) == \
        hashes(virtualize.open(tmp_path / "c.parq")) == hashes(virtualize.open(tmp_path / "d"))


@pytest.mark.parametrize("name", ["months2024", "stack_dates"])
def test_append_grows_the_set_like_a_full_write(case, tmp_path, name):
    files = case(name)
    kw = {"concat_dim": "time"} if name == "stack_dates" else {}
    out = tmp_path / "a.parq"
    virtualize.virtualize(files[:-1], out, **kw)
    report = virtualize.append(out, [files[-1]])
    assert any("scanning only" in n for n in report.notes), report.notes
    virtualize.virtualize(files, tmp_path / "full.parq", **kw)
    want = hashes(virtualize.open(tmp_path / "full.parq"))
    assert hashes(virtualize.open(out)) == want
    assert plain(out)["zarr"] == want
    info = json.loads((out / ".zmetadata").read_text())["virtualize"]
    assert [s["path"] for s in info["sources"]] == [str(f) for f in files]


def test_refresh_records_a_touched_source(case, tmp_path):
    import os

    files = case("months2024")
    work = tmp_path / "src"
    shutil.copytree(files[0].parent, work)
    mine = sorted(work.glob("*.nc"))
    out = tmp_path / "r.parq"
    virtualize.virtualize(mine, out)
    st = os.stat(mine[3])
    os.utime(mine[3], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.warns(Warning):
        virtualize.open(out)
    assert not any(p.fatal for p in virtualize.verify_cube(out, refresh=True))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        virtualize.open(out)
    with open(mine[5], "r+b") as f:  # a changed size: refused
        f.seek(0, 2)
        f.write(b"x")
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(out)
    assert e.value.problems[0].kind == "source-changed"


# -- names, guards --------------------------------------------------------------------------

def test_output_names_and_guards(case, tmp_path):
    from virtualize.outputs import registry

    assert registry.kind_of(tmp_path / "x.parq") == "parquet"
    assert registry.kind_of(tmp_path / "x.PARQUET") == "parquet"
    assert registry.kind_of(tmp_path / "x", "parquet") == "parquet"
    registry.refuse_foreign(tmp_path / "x.parq")  # no longer a foreign name
    with pytest.raises(UsageError):
        registry.refuse_foreign(tmp_path / "x.nc")
    files = case("months2024")
    out = tmp_path / "c.parq"
    virtualize.virtualize(files[:2], out)
    assert registry.written_kind(out) == "parquet"
    assert registry.kind_at(out, by_name=False) == "parquet"
    assert registry.guess_can_open(str(out))
    with pytest.raises(VirtualizeError):  # exists: not without overwrite
        virtualize.virtualize(files, out)
    virtualize.virtualize(files, out, overwrite=True)
    assert virtualize.open(out)["tas"].shape[0] == 366
    (out / "tas" / "notes.txt").write_text("mine")  # something of the user's inside it
    assert registry.written_kind(out) is None
    with pytest.raises(VirtualizeError):
        virtualize.virtualize(files, out, overwrite=True)
    (out / "tas" / "notes.txt").unlink()
    other = tmp_path / "other.parq"  # a directory virtualize did not write
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(VirtualizeError):
        virtualize.virtualize(files, other, overwrite=True)
    assert (other / "keep.txt").read_text() == "mine"
    with pytest.raises(UsageError):
        virtualize.virtualize(files, tmp_path / "rel.parq", relative=True)
    assert not (tmp_path / "rel.parq").exists()


# -- damaged sets ---------------------------------------------------------------------------

def _rewrite_record(path, fn):
    import pyarrow.parquet as pq
    t = pq.read_table(path).to_pydict()
    fn(t)
    import pyarrow as pa
    pq.write_table(pa.table(t), path)


def test_damaged_records_are_refused(case, tmp_path):
    files = case("months2024")
    out = tmp_path / "d.parq"
    virtualize.virtualize(files, out)
    good = tmp_path / "good.parq"
    shutil.copytree(out, good)

    def grow(t):
        t["size"][2] = t["size"][2] + 10**9
    _rewrite_record(out / "tas" / "refs.0.parq", grow)
    g = virtualize.open(out)  # opening reads no record
    with pytest.raises(VirtualizeError) as e:
        g["tas"][...]
    assert e.value.problems[0].kind == "invalid-reference"
    assert e.value.problems[0].loc.variable == "tas"

    shutil.rmtree(out)
    shutil.copytree(good, out)

    def elsewhere(t):
        t["path"][0] = "/etc/passwd"
    _rewrite_record(out / "tas" / "refs.0.parq", elsewhere)
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(out)["tas"][...]
    assert e.value.problems[0].kind == "reference-not-allowed"

    shutil.rmtree(out)
    shutil.copytree(good, out)
    doc = json.loads((out / ".zmetadata").read_text())
    doc["metadata"]["tas/.zarray"]["shape"][0] = 11  # fsspec would read other rows
    (out / ".zmetadata").write_text(json.dumps(doc))
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(out)
    assert e.value.problems[0].kind == "invalid-cube"


def test_the_stub_zarray_is_no_v2_array(case, tmp_path):
    """A Zarr v2 reader refuses the `.zarray` stubs (no dtype, no zarr_format) instead of
    reading the rectilinear array as a regular one."""
    files = case("months2024")
    out = tmp_path / "s.parq"
    virtualize.virtualize(files, out)
    doc = json.loads((out / ".zmetadata").read_text())
    assert list(doc) == ["virtualize", "metadata", "record_size"]
    stub = doc["metadata"]["tas/.zarray"]
    assert stub["shape"] == [12, 1, 1] and stub["chunks"] == [1, 1, 1]
    assert "zarr_format" not in stub and "dtype" not in stub
    assert doc["metadata"]["tas/zarr.json"]["chunk_key_encoding"] == {
        "name": "v2", "configuration": {"separator": "."}}
    import fsspec
    from fsspec.implementations.reference import LazyReferenceMapper
    fs = fsspec.filesystem("reference", fo=LazyReferenceMapper(str(out), engine="pyarrow"),
                           remote_protocol="file", asynchronous=True)
    with pytest.raises(Exception):  # noqa: B017 - whatever zarr says, not an array
        zarr.open_array(zarr.storage.FsspecStore(fs, read_only=True), path="tas", mode="r",
                        zarr_format=2)


def test_materialized_chunks_and_cli_append(case, tmp_path):
    """Blocks copied into the set (`--materialize`) are `raw` rows; `virtualize append`
    on the command line grows the set; xarray picks the virtualize engine for it."""
    from virtualize.cli import main

    files = case("tenday_padded")
    out = tmp_path / "m.parq"
    virtualize.virtualize(files[:2], out, materialize=True)
    assert main(["append", str(out), *map(str, files[2:4])]) == 0
    want = source_values(files[:4], "tas", "time", ("time", "lat", "lon"))
    assert_same(virtualize.open(out)["tas"][...], want, "appended with materialized blocks")
    import pyarrow.parquet as pq
    raw = [r for f in sorted((out / "tas").glob("refs.*.parq"))
           for r in pq.read_table(f).column("raw").to_pylist() if r is not None]
    assert raw  # (the blocks that end mid-month)
    assert plain(out)["zarr"]["tas"] == sha(want)
    ds = xr.open_dataset(out, mask_and_scale=False, decode_times=False)  # no engine named
    assert_same(ds["tas"].values, want, "tas via xarray's guess")


def test_a_zarr_v2_parquet_set_is_a_source_not_a_cube(case, tmp_path):
    """kerchunk's own parquet sets (Zarr v2, written by fsspec's LazyReferenceMapper) are
    read as sources (docs/references.md); opened as a cube they are refused clearly."""
    import fsspec
    from fsspec.implementations.reference import LazyReferenceMapper

    (ref,) = case("kerchunk_months2024")[:1]
    root = tmp_path / "v2.parq"
    m = LazyReferenceMapper.create(root=str(root), fs=fsspec.filesystem("file"),
                                   record_size=10, engine="pyarrow")
    for k, v in sorted(json.loads(ref.read_text())["refs"].items()):
        m[k] = v
    m.flush()
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(root)
    assert e.value.problems[0].kind == "not-a-cube"
    virtualize.virtualize([root], tmp_path / "again.parq")
    src = next(v[0] for v in json.loads(ref.read_text())["refs"].values()
               if isinstance(v, list))
    assert_same(virtualize.open(tmp_path / "again.parq")["tas"][...],
                netcdf_values(src, "tas"), "a v2 set's tas through the v3 parquet form")


@pytest.mark.parametrize("name", [".zarray", ".zeta", "g/.zattrs", ".zmetadata", ".zgrp/t"])
def test_parquet_refuses_names_fsspec_takes_for_metadata(tmp_path, name):
    """fsspec's LazyReferenceMapper takes every key with a component beginning `.z` for
    Zarr v2 metadata (`_is_meta`) and serves no chunk under it: such an array would read
    as its fill value without virtualize (and `.zmetadata` collided with the set's own
    file: a bare OSError). Refused, located, before anything is written; the kerchunk
    JSON and the cube directory hold it."""
    h5py = pytest.importorskip("h5py")
    src = tmp_path / "names.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset(name, data=np.arange(30, dtype="i4").reshape(5, 6) + 1, chunks=(2, 3))
        f.create_dataset("v", data=np.arange(30, dtype="i4").reshape(5, 6), chunks=(2, 3))
    with pytest.raises(VirtualizeError) as e:
        virtualize.virtualize([src], tmp_path / "c.parq")
    (p,) = e.value.problems
    assert p.kind == "parquet-unsupported" and p.loc.variable == name
    assert "-o cube.json" in p.message
    assert not (tmp_path / "c.parq").exists()
    assert [q.name for q in tmp_path.iterdir()] == ["names.h5"]  # no staging left
    virtualize.virtualize([src], tmp_path / "c.json")
    with h5py.File(src) as f:
        np.testing.assert_array_equal(virtualize.open(tmp_path / "c.json")[name][...], f[name][...])


@pytest.mark.skipif(os.name != "posix", reason="a file name of undecodable bytes (POSIX)")
def test_a_source_path_that_is_not_utf8_is_refused_by_parquet_and_vrt(tmp_path):
    """A file name of bytes that are not UTF-8 (undecodable, held as surrogates) cannot be
    a parquet string or VRT XML text: a located refusal, not a UnicodeEncodeError
    traceback; a cube directory and a kerchunk JSON hold it."""
    src = tmp_path / os.fsdecode(b"t\xff.tif")
    tifffile.imwrite(src, np.arange(64, dtype="u1").reshape(8, 8))
    for out in ("c.parq", "c.vrt"):
        with pytest.raises(VirtualizeError) as e:
            virtualize.virtualize([src], tmp_path / out)
        (p,) = e.value.problems
        assert p.kind in ("parquet-unsupported", "vrt-unsupported") and p.loc.file == str(src)
        assert "UTF-8" in p.message
        assert not (tmp_path / out).exists()
    virtualize.virtualize([src], tmp_path / "c.json")
    np.testing.assert_array_equal(virtualize.open(tmp_path / "c.json")["image"][...],
                                  tifffile.imread(src))


@pytest.mark.parametrize("engine", ["fastparquet", "pyarrow"])
def test_a_zarr_v2_parquet_set_with_absent_chunks_is_a_source(tmp_path, engine):
    """kerchunk's own writer (refs_to_dataframe: fsspec's LazyReferenceMapper) over an HDF5
    dataset with chunks never written: its absent rows read as the fill value, as h5py
    reads them (pandas 3 gave their null paths as NaN, which fsspec took for a URL: the
    scan failed with "TypeError: argument of type 'float' is not iterable")."""
    import fsspec
    import h5py
    import kerchunk.hdf
    from fsspec.implementations.reference import LazyReferenceMapper

    src = tmp_path / "s.h5"
    with h5py.File(src, "w") as f:
        d = f.create_dataset("v", shape=(4, 6), chunks=(2, 2), dtype="<i2", fillvalue=-9)
        d[0:2, 0:2] = 1
        d[2:4, 4:6] = 2
    refs = kerchunk.hdf.SingleHdf5ToZarr(str(src)).translate()
    assert sum(k.startswith("v/") and ".z" not in k for k in refs["refs"]) == 2  # of 6
    root = tmp_path / "v2.parq"
    m = LazyReferenceMapper.create(root=str(root), fs=fsspec.filesystem("file"),
                                   record_size=10, engine=engine)
    for k, v in sorted(refs["refs"].items()):
        m[k] = v
    m.flush()
    virtualize.virtualize([root], tmp_path / "c.zarr")
    with h5py.File(src) as f:
        want = f["v"][...]
    assert (want == -9).sum() == 16
    assert_same(virtualize.open(tmp_path / "c.zarr")["v"][...], want, "absent chunks")
