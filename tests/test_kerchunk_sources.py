"""Kerchunk reference sets as sources: per-file references made by kerchunk itself join
into the same cube as scanning the files, and what they cannot prove is refused, located."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import xarray as xr

import virtualize

from helpers import assert_same, kerchunk_group, source_values

pytest.importorskip("kerchunk")

LEAP_2024 = [31, 29, 31, 30, 31, 30, [31, 2], 30, 31, 30, 31]
NAMES = ("tas", "time", "lat", "lon")


def data_files(refs):
    d = refs[0].parent.parent
    return [d / (r.stem + ".nc") for r in refs]


def grid(cube, name="tas"):
    doc = json.loads((cube / name / "zarr.json").read_text())
    return doc["chunk_grid"]


def check_values(group, files):
    for name in NAMES:
        dims = tuple(group[name].metadata.dimension_names)
        assert_same(group[name][...], source_values(files, name, "time", dims), name)


def test_months_2024_from_kerchunk_references(case, tmp_path):
    refs = case("kerchunk_months2024")
    files = data_files(refs)
    cube, export = tmp_path / "cube.zarr", tmp_path / "cube.json"
    report = virtualize.virtualize(refs, cube)
    virtualize.virtualize(refs, export)
    assert report.ok and report.plan.concat_dim == "time"
    assert grid(cube)["configuration"]["chunk_shapes"] == [LEAP_2024, [3], [4]]
    check_values(virtualize.open(cube), files)
    check_values(kerchunk_group(export), files)
    ds = xr.open_dataset(cube, engine="virtualize", mask_and_scale=False, decode_times=False)
    assert_same(ds["tas"].values, source_values(files, "tas", "time", ("time", "lat", "lon")),
                "tas via xarray")
    # the cube references the original data files, and records the reference sets too
    sources = json.loads((cube / "virtualize.json").read_text())["sources"]
    assert [s["path"] for s in sources if s.get("referenced_by")] == [str(f) for f in files]
    assert [s["path"] for s in sources if not s.get("referenced_by")] == [str(r) for r in refs]
    manifest = np.load(cube / "tas" / "manifest.npy")
    paths = [sources[i]["path"] for i in manifest["path"].reshape(-1)]
    assert paths == [str(f) for f in files]


def test_same_cube_as_scanning_the_files(case, tmp_path):
    refs = case("kerchunk_months2024")
    files = data_files(refs)
    a = virtualize.virtualize(refs, tmp_path / "refs.zarr").plan
    b = virtualize.virtualize(files, tmp_path / "files.zarr").plan
    assert set(a.arrays) == set(b.arrays)
    for name, x in a.arrays.items():
        y = b.arrays[name]
        assert (x.shape, x.dims, x.chunk_lengths, str(x.dtype)) == \
            (y.shape, y.dims, y.chunk_lengths, str(y.dtype)), name
        assert x.codecs == y.codecs and x.attrs == y.attrs, name
    ga, gb = virtualize.open(tmp_path / "refs.zarr"), virtualize.open(tmp_path / "files.zarr")
    for name in a.arrays:
        assert_same(ga[name][...], gb[name][...], name)
    # byte ranges: the same as the scanner found
    ma = np.load(tmp_path / "refs.zarr" / "tas" / "manifest.npy")
    mb = np.load(tmp_path / "files.zarr" / "tas" / "manifest.npy")
    assert np.array_equal(ma[["offset", "length"]], mb[["offset", "length"]])


def test_cli_joins_references(case, tmp_path):
    refs = case("kerchunk_months2024")
    exe = os.path.join(os.path.dirname(sys.executable), "virtualize")
    r = subprocess.run([exe, *map(str, refs), "-o", str(tmp_path / "cube.zarr"), "-v"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "[[31, 29, 31, 30, 31, 30, [31, 2], 30, 31, 30, 31], [3], [4]]" in r.stdout
    check_values(virtualize.open(tmp_path / "cube.zarr"), data_files(refs))


def test_mixed_stack_references_and_files(case, tmp_path):
    refs = case("kerchunk_months2024")
    files = data_files(refs)
    mixed = [refs[i] if i % 2 else files[i] for i in range(12)]
    report = virtualize.virtualize(mixed, tmp_path / "cube.zarr")
    assert report.ok, report.problems
    check_values(virtualize.open(tmp_path / "cube.zarr"), files)


def test_kerchunk_cannot_combine_this_stack(case):
    """What this is for: kerchunk's own MultiZarrToZarr refuses months of unequal length."""
    from kerchunk.combine import MultiZarrToZarr

    refs = case("kerchunk_months2024")
    with pytest.raises(ValueError, match="chunk size mismatch"):
        MultiZarrToZarr([str(r) for r in refs], concat_dims=["time"],
                        identical_dims=["lat", "lon"]).translate()


def test_padded_references_are_refused_located(case):
    refs = case("kerchunk_tenday_padded")
    report = virtualize.check(refs)
    assert not report.ok
    padded = [p for p in report.problems if p.kind == "padded-block"]
    assert len(padded) == 7  # the months of 31 and 29 days but December end padded
    p = padded[0]
    assert (p.loc.file, p.loc.variable, p.loc.axis, p.loc.block) == (str(refs[0]), "tas", "time", (3,))


def _edit(src, dst, fn):
    doc = json.loads(src.read_text())
    fn(doc["refs"])
    dst.write_text(json.dumps(doc))
    return dst


def test_missing_data_file_is_located(case, tmp_path):
    refs = case("kerchunk_months2024")
    gone = tmp_path / "gone.nc"

    def point_away(r):
        r["tas/0.0.0"][0] = str(gone)

    bad = _edit(refs[1], tmp_path / refs[1].name, point_away)
    report = virtualize.check([refs[0], bad, refs[2]])
    assert not report.ok
    (p,) = [p for p in report.problems if p.fatal]
    assert (p.kind, p.loc.file, p.loc.variable, p.loc.block) == \
        ("missing-data-file", str(bad), "tas", (0, 0, 0))
    assert str(gone) in p.message


def test_reference_past_the_end_of_its_data_file(case, tmp_path):
    refs = case("kerchunk_months2024")

    def shift(r):
        r["tas/0.0.0"][1] = 10**7

    bad = _edit(refs[0], tmp_path / refs[0].name, shift)
    (p,) = virtualize.check([bad]).problems
    assert (p.kind, p.loc.file, p.loc.variable) == ("truncated", str(bad), "tas")


def test_partly_inline_variable_is_stored_in_the_cube(case, tmp_path):
    """kerchunk inlines chunks smaller than its threshold: a variable partly inline keeps
    its other chunks referenced; the inline ones are decoded and stored in the cube."""
    from kerchunk.hdf import SingleHdf5ToZarr

    refs = case("kerchunk_tenday_padded")
    months = [3, 5, 8, 10]  # April, June, September, November: 30 days, 3 whole blocks
    files = [data_files(refs)[m] for m in months]
    partial = []
    for m, f in zip(months, files):
        sizes = sorted(v[2] for k, v in json.loads(refs[m].read_text())["refs"].items()
                       if k.startswith("tas/") and isinstance(v, list))
        threshold = sizes[0] + 1  # this file's smallest tas chunk(s) are inlined
        r = SingleHdf5ToZarr(str(f), inline_threshold=threshold).translate()
        out = tmp_path / (f.stem + ".json")
        out.write_text(json.dumps(r))
        partial.append(out)
    for d in partial:
        kinds = [isinstance(v, str) for k, v in json.loads(d.read_text())["refs"].items()
                 if k.startswith("tas/") and not k.startswith("tas/.")]
        assert any(kinds) and not all(kinds)
    report = virtualize.virtualize(partial, tmp_path / "cube.zarr")
    assert report.ok, report.problems
    a = report.plan.arrays["tas"]
    assert 0 < len(a.materialize) < a.refs.size  # some chunks stored, the rest referenced
    check_values(virtualize.open(tmp_path / "cube.zarr"), files)
    assert any("held inline" in n for n in report.notes)


def test_reference_set_changes_make_the_cube_stale(case, tmp_path):
    refs = case("kerchunk_months2024")
    d = tmp_path / "copy"
    shutil.copytree(refs[0].parent.parent, d)
    mine = sorted((d / "refs").glob("*.json"))[:2]
    for r in mine:  # point the copies at the copied data files
        r.write_text(r.read_text().replace(str(refs[0].parent.parent), str(d)))
    virtualize.virtualize(mine, tmp_path / "cube.zarr")
    data = d / "tas_day_202402.nc"
    os.utime(data, ns=(data.stat().st_atime_ns, data.stat().st_mtime_ns + 10**9))
    with pytest.raises(virtualize.VirtualizeError) as e:
        virtualize.open(tmp_path / "cube.zarr")
    assert [(p.kind, p.loc.file) for p in e.value.problems] == [("source-changed", str(data))]


def test_append_references(case, tmp_path):
    refs = case("kerchunk_months2024")
    cube = tmp_path / "cube.zarr"
    virtualize.virtualize(refs[:6], cube)
    assert virtualize.append(cube, refs[6:]).ok
    assert grid(cube)["configuration"]["chunk_shapes"] == [LEAP_2024, [3], [4]]
    check_values(virtualize.open(cube), data_files(refs))


def test_not_a_reference_set(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"a": 1}')
    with pytest.raises(virtualize.VirtualizeError) as e:
        virtualize.inventory(p)
    assert e.value.problems[0].kind == "unknown-format"


# -- zarr v2 layouts and codecs, made by zarr itself --------------------------------------

def _v2_refs(tmp_path, name, data, **kw):
    """A zarr v2 array written by zarr-python into a directory, and a version 1 reference
    set whose chunks are [chunk file, 0, size] (as kerchunk would make)."""
    import zarr

    store = tmp_path / f"{name}.zarr"
    a = zarr.create_array(str(store), shape=data.shape, dtype=data.dtype, zarr_format=2,
                          fill_value=7, **kw)
    a[...] = data
    refs = {".zgroup": json.dumps({"zarr_format": 2})}
    for f in sorted(store.rglob("*")):
        if f.is_file():
            key = f.relative_to(store).as_posix()
            if key.startswith("."):
                refs[f"v/{key}"] = f.read_text()
            else:
                refs[f"v/{key}"] = [str(f), 0, f.stat().st_size]
    attrs = {"_ARRAY_DIMENSIONS": ["y", "x"][-data.ndim:]}
    refs["v/.zattrs"] = json.dumps(attrs)
    out = tmp_path / f"{name}.json"
    out.write_text(json.dumps({"version": 1, "refs": refs}))
    return out


@pytest.mark.parametrize("dtype, kw", [
    (">i4", dict(order="F", compressors=None)),
    ("<f8", dict(order="F", compressors={"id": "zstd", "level": 3})),
    (">f4", dict(filters=[{"id": "shuffle", "elementsize": 4}],
                 compressors={"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1})),
    ("<u2", dict(compressors={"id": "gzip", "level": 5})),
    ("<i4", dict(filters=[{"id": "delta", "dtype": "<i4", "astype": ">i2"}],
                 compressors={"id": "zlib", "level": 1})),
    ("<f8", dict(filters=[{"id": "fixedscaleoffset", "offset": 0, "scale": 4, "dtype": "<f8",
                           "astype": "<u2"}], compressors=None)),
    ("<i8", dict(filters=[{"id": "astype", "encode_dtype": ">i4", "decode_dtype": "<i8"},
                          {"id": "shuffle", "elementsize": 4}], compressors=None)),
])
def test_v2_codecs_order_and_byte_order(tmp_path, dtype, kw):
    import numcodecs

    kw = dict(kw)
    if "filters" in kw:
        kw["filters"] = [numcodecs.get_codec(c) for c in kw["filters"]]
    if isinstance(kw.get("compressors"), dict):
        kw["compressors"] = numcodecs.get_codec(kw["compressors"])
    data = (np.arange(7 * 5).reshape(7, 5) * 3 + 1).astype(dtype)
    refs = _v2_refs(tmp_path, "a", data, chunks=(3, 2), **kw)
    report = virtualize.virtualize([refs], tmp_path / "cube.zarr")
    assert report.ok, report.problems
    import zarr

    got = virtualize.open(tmp_path / "cube.zarr")["v"][...]
    assert_same(got, data, "v")
    assert_same(got, zarr.open_array(str(tmp_path / "a.zarr"), mode="r")[...], "v (zarr v2)")
    # the cube references the chunk files (padded edge chunks are the cube's last chunks)
    assert report.plan.arrays["v"].refs is not None


def test_v2_unknown_codec_is_refused(tmp_path):
    import numcodecs

    data = np.arange(12, dtype="<i4").reshape(3, 4)
    refs = _v2_refs(tmp_path, "d", data, chunks=(3, 4), filters=[numcodecs.Delta("<i4")],
                    compressors=None)
    doc = json.loads(refs.read_text())  # a codec not mapped (bitround)
    doc["refs"]["v/.zarray"] = doc["refs"]["v/.zarray"].replace('"delta"', '"bitround"')
    refs.write_text(json.dumps(doc))
    (p,) = virtualize.check([refs]).problems
    assert (p.kind, p.loc.file, p.loc.variable) == ("unsupported-filter", str(refs), "v")
    assert "'bitround'" in p.message


def test_padded_references_materialized(case, tmp_path):
    """The materialize remedy decodes the padded blocks through zarr over the references."""
    refs = case("kerchunk_tenday_padded")
    report = virtualize.virtualize(refs, tmp_path / "cube.zarr", materialize=True)
    assert report.ok and report.plan.remedies["materialize"].blocks == 7
    check_values(virtualize.open(tmp_path / "cube.zarr"), data_files(refs))


# -- netCDF classic and TIFF references --------------------------------------------------

def test_netcdf_classic_references_alone_and_mixed(case, tmp_path):
    pytest.importorskip("scipy")  # kerchunk.netCDF3 reads headers with scipy
    refs = case("kerchunk_nc3_months")
    files = data_files(refs)
    for name, stack in (("refs", refs), ("mixed", [refs[0], files[1], refs[2]])):
        cube = tmp_path / f"{name}.zarr"
        report = virtualize.virtualize(stack, cube)
        assert report.ok, report.problems
        g = virtualize.open(cube)
        assert set(report.plan.arrays) == {"time", "lat", "lon", "tas", "count", "qc", "orog"}
        for var in report.plan.arrays:
            dims = tuple(g[var].metadata.dimension_names)
            assert_same(g[var][...], source_values(files, var, "time", dims), f"{name}: {var}")
        # record variables are referenced, one chunk per record; kerchunk's inline
        # (blosc-compressed) small variables are kept inline in the cube
        assert report.plan.arrays["tas"].refs is not None
        assert report.plan.arrays["orog"].inline is not None


def _tiff_refs(path, out):
    """The references kerchunk.tiff.tiff_to_zarr makes (its writer: tifffile's
    ZarrTiffStore.write_fsspec; tiff_to_zarr itself fails reading tags with this tifffile)."""
    import io

    import tifffile

    with tifffile.TiffFile(str(path)) as tif, tif.series[0].aszarr() as store:
        buf = io.StringIO()
        store.write_fsspec(buf, url=str(path.parent))
    out.write_text(buf.getvalue())
    return out


@pytest.mark.parametrize("name", ["tiles_padded", "multipage", "bigendian_tiles"])
def test_tiff_references(case, tmp_path, name):
    import tifffile

    (tif,) = case(name)[:1]
    refs = _tiff_refs(tif, tmp_path / "tif.json")
    report = virtualize.virtualize([refs], tmp_path / "cube.zarr")
    assert report.ok, report.problems
    got = virtualize.open(tmp_path / "cube.zarr")["image"][...]  # a root array is 'image'
    assert_same(got, tifffile.imread(str(tif)), name)


def test_zarr_v3_references_virtualizes_own_export(case, tmp_path):
    """A zarr v3 reference set (virtualize's own kerchunk export of one month, a regular
    grid) is a source too; a rectilinear one (a whole year) is refused, located."""
    files = case("months2024")
    for i in range(3):
        virtualize.virtualize(files[i:i + 1], tmp_path / f"m{i}.json")
    report = virtualize.virtualize([tmp_path / f"m{i}.json" for i in range(3)],
                                   tmp_path / "cube.zarr")
    assert report.ok, report.problems
    assert grid(tmp_path / "cube.zarr")["configuration"]["chunk_shapes"] == [[31, 29, 31], [3], [4]]
    check_values(virtualize.open(tmp_path / "cube.zarr"), files[:3])
    virtualize.virtualize(files[:2], tmp_path / "two.json")
    problems = virtualize.check([tmp_path / "two.json"]).problems
    assert ("unsupported-layout", "tas") in {(p.kind, p.loc.variable) for p in problems}


def test_parquet_references(case, tmp_path):
    """kerchunk's parquet form (a directory, read with fsspec's LazyReferenceMapper) of the
    same per-file references; a directory given as input that is one stays one source."""
    import fsspec

    pytest.importorskip("pyarrow")
    from fsspec.implementations.reference import LazyReferenceMapper

    refs = case("kerchunk_months2024")[:3]
    out = []
    for r in refs:
        root = tmp_path / (r.stem + ".parq")
        m = LazyReferenceMapper.create(root=str(root), fs=fsspec.filesystem("file"),
                                       record_size=1000, engine="pyarrow")
        for k, v in sorted(json.loads(r.read_text())["refs"].items()):
            m[k] = v
        m.flush()
        out.append(root)
    report = virtualize.virtualize(out, tmp_path / "cube.zarr")
    assert report.ok, report.problems
    assert report.files == [str(p) for p in out]
    check_values(virtualize.open(tmp_path / "cube.zarr"), data_files(refs))


def test_templates_and_version_0(case, tmp_path):
    refs = case("kerchunk_months2024")[:2]
    files = data_files(refs)
    # January: version 1 with a template for its data file; February: version 0 (bare refs)
    doc = json.loads(refs[0].read_text())
    doc["templates"] = {"u": str(files[0])}
    for k, v in doc["refs"].items():
        if isinstance(v, list):
            v[0] = "{{u}}"
    jan = tmp_path / refs[0].name
    jan.write_text(json.dumps(doc))
    feb = tmp_path / refs[1].name
    feb.write_text(json.dumps(json.loads(refs[1].read_text())["refs"]))
    report = virtualize.virtualize([jan, feb], tmp_path / "cube.zarr")
    assert report.ok, report.problems
    check_values(virtualize.open(tmp_path / "cube.zarr"), files)


def test_mosaic_of_tiff_references(case, tmp_path):
    """The mosaic planner maps each tile's data file too; padded edge tiles inside the
    mosaic are refused, located at the reference set, and materialized on request."""
    import tifffile

    (tif,) = case("tiles_padded")[:1]
    other = tmp_path / "b.tif"
    shutil.copy(tif, other)
    refs = [_tiff_refs(tif, tmp_path / "a.json"), _tiff_refs(other, tmp_path / "b.json")]
    with pytest.raises(virtualize.VirtualizeError) as e:
        virtualize.mosaic(refs, tmp_path / "no.zarr", offsets=[(0, 0), (70, 0)])
    (p,) = e.value.problems
    assert (p.kind, p.loc.file, p.loc.variable) == ("padded-block", str(refs[0]), "image")
    report = virtualize.mosaic(refs, tmp_path / "m.zarr", offsets=[(0, 0), (70, 0)],
                               materialize=True)
    assert report.plan.remedies["materialize"].blocks == 4
    got = virtualize.open(tmp_path / "m.zarr")["image"][...]
    assert_same(got, np.concatenate([tifffile.imread(str(tif)), tifffile.imread(str(other))]),
                "mosaic")


def test_partly_inline_shared_variable_compared_by_values(case, tmp_path, monkeypatch):
    from virtualize.formats import _planning

    """A variable without the concatenation axis, partly inline: compared across files by
    its decoded values (inline chunks have no bytes to compare), stored in the cube."""
    refs = case("kerchunk_months2024")[:2]
    files = data_files(refs)

    def add_orog(doc_refs, data_file):
        doc_refs["orog/.zarray"] = json.dumps({
            "shape": [3, 4], "chunks": [1, 4], "dtype": "<f8", "fill_value": None,
            "order": "C", "filters": None, "compressor": None, "zarr_format": 2})
        doc_refs["orog/.zattrs"] = json.dumps({"_ARRAY_DIMENSIONS": ["lat", "lon"]})
        doc_refs["orog/0.0"] = "base64:" + base64.b64encode(np.arange(4.0).tobytes()).decode()
        off = json.loads(refs[0].read_text())["refs"]["time/0"][1]
        for r in (1, 2):  # rows 1 and 2: time values of `data_file`, as raw <f8 bytes
            doc_refs[f"orog/{r}.0"] = [str(data_file), off + 32 * (r - 1), 32]

    jan = _edit(refs[0], tmp_path / "jan.json", lambda r: add_orog(r, files[0]))
    feb = _edit(refs[1], tmp_path / "feb.json", lambda r: add_orog(r, files[0]))
    report = virtualize.virtualize([jan, feb], tmp_path / "cube.zarr")
    assert report.ok, report.problems
    orog = report.plan.arrays["orog"]  # row 0 stored in the cube, rows 1-2 referenced
    assert list(orog.materialize) == [(0, 0)] and orog.refs["length"].tolist() == [[0], [32], [32]]
    time0 = source_values(files[:1], "time", None, ("time",))
    expected = np.concatenate([np.arange(4.0), time0[:8]]).reshape(3, 4)
    assert_same(virtualize.open(tmp_path / "cube.zarr")["orog"][...], expected, "orog")
    other = _edit(refs[1], tmp_path / "feb2.json", lambda r: add_orog(r, files[1]))
    (p,) = [p for p in virtualize.check([jan, other]).problems if p.fatal]
    assert (p.kind, p.loc.file, p.loc.variable) == ("differs-between-files", str(other), "orog")
    # by the digests of its decoded values per block: the first differing one is named
    assert p.loc.block == (1, 0) and "decoded values differ" in p.message
    # too large to decode for digests (the limit patched small; scanned in this process):
    # refused, never taken from the first file
    monkeypatch.setattr(_planning, "DIGEST_LIMIT", 8)
    (p,) = [p for p in virtualize.check([jan, other], scan_timeout=0).problems if p.fatal]
    assert (p.kind, p.loc.variable, p.remedy) == ("not-comparable", "orog", "--drop orog")


def test_mosaic_refuses_inline_chunks(case, tmp_path):
    (tif,) = case("tiles_padded")[:1]
    refs = _tiff_refs(tif, tmp_path / "a.json")
    doc = json.loads(refs.read_text())
    url, off, n = doc["0.0"]
    with open(url, "rb") as f:
        f.seek(off)
        doc["0.0"] = "base64:" + base64.b64encode(f.read(n)).decode()  # the same bytes, inline
    refs.write_text(json.dumps(doc))
    problems = virtualize.check_mosaic([refs], offsets=[(0, 0)]).problems
    assert [(p.kind, p.loc.file, p.loc.variable) for p in problems] == \
        [("inline-chunk", str(refs), "image")]
    # not in a mosaic, the inline chunk is stored in the cube, the others referenced
    report = virtualize.virtualize([refs], tmp_path / "c.zarr")
    import tifffile

    assert_same(virtualize.open(tmp_path / "c.zarr")["image"][...], tifffile.imread(str(tif)),
                "image")
    assert list(report.plan.arrays["image"].materialize) == [(0, 0)]


def test_default_fill_is_not_an_attribute(tmp_path):
    """kerchunk writes an HDF5 dataset's own fill value (0 or netCDF's default, e.g. for a
    scalar grid mapping never written) as fill_value: that is not a _FillValue attribute,
    so references and scanned files agree; the never-written scalar reads as that fill."""
    import netCDF4
    from kerchunk.hdf import SingleHdf5ToZarr

    files, refs = [], []
    for i in range(2):
        f = tmp_path / f"g{i}.nc"
        with netCDF4.Dataset(f, "w") as ds:
            ds.createDimension("time", None)
            ds.createDimension("x", 2)
            t = ds.createVariable("time", "f8", ("time",))
            t.units = "days since 2000-01-01"
            t[:] = [2 * i, 2 * i + 1]
            crs = ds.createVariable("crs", "i4", ())
            crs.grid_mapping_name = "latitude_longitude"
            v = ds.createVariable("v", "f4", ("time", "x"))
            v.grid_mapping = "crs"
            v[:] = np.arange(4, dtype="f4").reshape(2, 2) + 4 * i
        r = tmp_path / f"g{i}.json"
        r.write_text(json.dumps(SingleHdf5ToZarr(str(f)).translate()))
        files.append(f)
        refs.append(r)
    assert json.loads(json.loads(refs[0].read_text())["refs"]["crs/.zarray"])["fill_value"] \
        == -2147483647
    for name, stack in (("refs", refs), ("mixed", [refs[0], files[1]])):
        report = virtualize.virtualize(stack, tmp_path / f"{name}.zarr")
        assert report.ok, report.problems
        assert "_FillValue" not in report.plan.arrays["crs"].attrs
        g = virtualize.open(tmp_path / f"{name}.zarr")
        for var in ("crs", "v", "time"):
            dims = tuple(g[var].metadata.dimension_names)
            assert_same(g[var][...], source_values(files, var, "time", dims), f"{name}: {var}")


def test_unknown_fill_with_a_missing_chunk_is_refused(case, tmp_path):
    refs = case("kerchunk_months2024")

    def unwritten(r):
        z = json.loads(r["tas/.zarray"])
        z["fill_value"] = None
        r["tas/.zarray"] = json.dumps(z)
        del r["tas/0.0.0"]

    bad = _edit(refs[0], tmp_path / refs[0].name, unwritten)
    (p,) = virtualize.check([bad, refs[1]]).problems
    assert (p.kind, p.loc.file, p.loc.variable, p.loc.block) == \
        ("unknown-fill", str(bad), "tas", (0, 0, 0))
    assert "--drop tas" in p.remedy
    assert virtualize.check([bad, refs[1]], drop=["tas"]).ok


def test_a_reference_set_cannot_copy_system_files_into_a_cube(tmp_path):
    """A reference set given as an input is scanned on its word: one pointing into a
    system location (here /etc/passwd, as a small 1-D coordinate, which is inlined) is
    refused, never copied into the output."""
    n = os.path.getsize("/etc/passwd")
    doc = {"version": 1, "refs": {
        ".zgroup": json.dumps({"zarr_format": 2}),
        "x/.zarray": json.dumps({"chunks": [n], "compressor": None, "dtype": "|u1",
                                 "fill_value": 0, "filters": None, "order": "C", "shape": [n],
                                 "zarr_format": 2}),
        "x/.zattrs": json.dumps({"_ARRAY_DIMENSIONS": ["x"]}),
        "x/0": ["/etc/passwd", 0, n]}}
    evil = tmp_path / "evil.json"
    evil.write_text(json.dumps(doc))
    with pytest.raises(virtualize.VirtualizeError) as e:
        virtualize.virtualize([evil], tmp_path / "out.json")
    assert {p.kind for p in e.value.problems} == {"reference-not-allowed"}
    assert not (tmp_path / "out.json").exists()


def test_references_gone_stale_before_the_cube_is_made_are_caught(tmp_path):
    """A data file rewritten after its reference set was made (same size, its datasets
    laid out in another order) would read other values through the references: the
    decode check reads the data file with its own library, and refuses."""
    import h5py
    from kerchunk.hdf import SingleHdf5ToZarr

    path = tmp_path / "x.h5"
    # (larger than kerchunk's inline threshold: the chunks are referenced, not copied)
    a, b = np.full((40, 50), 280.0, "f4"), np.full((40, 50), 0.001, "f4")

    def write(order):
        with h5py.File(path, "w") as f:
            for name in order:
                f.create_dataset(name, data={"a": a, "b": b}[name])

    write("ab")
    refs = tmp_path / "x.json"
    refs.write_text(json.dumps(SingleHdf5ToZarr(str(path)).translate()))
    assert virtualize.check([refs]).ok
    size = path.stat().st_size
    write("ba")
    assert path.stat().st_size == size
    report = virtualize.check([refs])
    bad = [p for p in report.problems if p.kind == "decode-mismatch"]
    assert bad and not report.ok, report.problems
    assert {p.loc.variable for p in bad} == {"a", "b"}


def test_reference_set_of_several_files_is_checked_in_each_files_own_coordinates(
        case, tmp_path):
    """A reference set joining several files (here virtualize's own kerchunk export of
    three netCDF classic months): the decode check reads each data file with its own
    library at the block's place in that file, not at its place in the joined array."""
    files = case("nc3_months_classic")
    export = tmp_path / "months.json"
    assert virtualize.virtualize(files, export).ok
    report = virtualize.virtualize([export], tmp_path / "again.zarr")
    assert report.ok, report.problems
    g = virtualize.open(tmp_path / "again.zarr")
    for var in ("tas", "count", "qc", "time"):
        dims = tuple(g[var].metadata.dimension_names)
        assert_same(g[var][...], source_values(files, var, "time", dims), var)
