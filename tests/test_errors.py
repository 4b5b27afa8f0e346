"""Trust (issue 10): crashes become located problems, `check` and the write agree, the
planner refuses what docs/planning.md says it refuses, and zero-length or unwritten
netCDF-4 variables keep their netCDF shape. Every file is made by its real writer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import h5py
import netCDF4
import numpy as np
import pytest
import xarray as xr
import zarr

import virtualize
from virtualize.model import VirtualizeError

from helpers import kerchunk_group, rectilinear, source_values

# -- writers ---------------------------------------------------------------------------


def nc_times(path, times, fmt="NETCDF4", units="days since 2000-01-01"):
    with netCDF4.Dataset(path, "w", format=fmt) as d:
        d.createDimension("time", None)
        d.createDimension("x", 2)
        t = d.createVariable("time", "f8", ("time",))
        t.units = units
        t[:] = times
        d.createVariable("v", "f4", ("time", "x"))[:] = np.ones((len(times), 2), "f4")
    return str(path)


def all_outputs(files, tmp_path, tag, **kw):
    """The stack written as a cube directory, kerchunk JSON and (when installed) Icechunk,
    each opened as a zarr group with a real client."""
    out = {}
    virtualize.virtualize(files, tmp_path / f"{tag}.zarr", **kw)
    out["cube"] = virtualize.open(tmp_path / f"{tag}.zarr")
    virtualize.virtualize(files, tmp_path / f"{tag}.json", **kw)
    out["kerchunk"] = kerchunk_group(tmp_path / f"{tag}.json")
    try:
        import icechunk  # noqa: F401
    except ImportError:
        return out
    virtualize.virtualize(files, tmp_path / f"{tag}.icechunk", **kw)
    out["icechunk"] = virtualize.open(tmp_path / f"{tag}.icechunk")
    return out


# -- coordinates must increase strictly, within every file ---------------------------


@pytest.mark.parametrize("fmt", ["NETCDF4", "NETCDF3_CLASSIC"])
def test_a_file_with_time_out_of_order_in_a_stack_is_refused_at_the_index(tmp_path, fmt):
    # (one file alone is not ordered by its time: test_shared_compare.py)
    f = nc_times(tmp_path / "a.nc", [0.0, 2.0, 1.0, 3.0], fmt)
    g = nc_times(tmp_path / "b.nc", [4.0, 5.0], fmt)
    r = virtualize.check([f, g])
    assert not r.ok
    (p,) = [p for p in r.problems if p.kind == "coordinate-not-increasing"]
    assert (p.loc.file, p.loc.variable, p.loc.axis) == (os.path.abspath(f), "time", "time")
    assert "index 2 (1.0) is not after index 1 (2.0)" in p.message
    with pytest.raises(VirtualizeError):
        virtualize.virtualize([f, g], tmp_path / "a.zarr")
    assert not (tmp_path / "a.zarr").exists()


def test_repeated_time_inside_the_second_file_of_a_stack(tmp_path):
    a = nc_times(tmp_path / "a.nc", [0.0, 1.0])
    b = nc_times(tmp_path / "b.nc", [2.0, 3.0, 3.0, 4.0])
    r = virtualize.check([a, b])
    (p,) = [p for p in r.problems if p.kind == "coordinate-not-increasing"]
    assert p.loc.file == os.path.abspath(b)
    assert "index 2 (3.0) repeats index 1 (3.0)" in p.message
    assert "np." not in p.message


def test_time_checked_within_a_file_even_when_another_file_has_no_values(tmp_path):
    # the second file has no `time` coordinate variable at all: the first is still checked
    a = nc_times(tmp_path / "a.nc", [5.0, 4.0])
    with netCDF4.Dataset(tmp_path / "b.nc", "w") as d:
        d.createDimension("time", None)
        d.createDimension("x", 2)
        d.createVariable("v", "f4", ("time", "x"))[:] = np.ones((2, 2), "f4")
    r = virtualize.check([a, str(tmp_path / "b.nc")], sort=False)
    assert [p.loc.file for p in r.problems if p.kind == "coordinate-not-increasing"] == \
        [os.path.abspath(a)]


def test_tiff_dates_in_names_must_increase(tmp_path):
    tifffile = pytest.importorskip("tifffile")
    files = []
    for i, name in enumerate(["2024-01-02.tif", "2024-01-01.tif"]):
        tifffile.imwrite(tmp_path / name, np.full((4, 4), i, "u1"))
        files.append(str(tmp_path / name))
    r = virtualize.check(files, "time", sort=False)
    assert [p.kind for p in r.problems] == ["coordinate-not-increasing"]
    assert virtualize.check(files, "time").ok  # sorted by the dates, it is fine


def test_mosaic_coordinate_with_nan_is_refused(tmp_path):
    path = tmp_path / "tile.nc"
    with netCDF4.Dataset(path, "w") as d:
        d.createDimension("y", 3)
        d.createDimension("x", 3)
        d.createVariable("x", "f8", ("x",))[:] = [0.5, np.nan, 2.5]
        d.createVariable("y", "f8", ("y",))[:] = [0.5, 1.5, 2.5]
        d.createVariable("z", "f4", ("y", "x"))[:] = np.ones((3, 3), "f4")
    r = virtualize.check_mosaic([path])
    (p,) = [p for p in r.problems if p.kind == "irregular-coordinate"]
    assert p.loc.variable == "x" and "index 1" in p.message


# -- zero-length dimensions and unwritten netCDF-4 variables ----------------------------


@pytest.fixture(scope="module")
def zero_length(tmp_path_factory):
    d = tmp_path_factory.mktemp("zero")
    files = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # netCDF-4: a dimension of size 0 (netCDF4-python makes it unlimited; a fixed
        # one of length 0 is the h5py case below), records never written
        for i in range(2):
            p = d / f"nc4_{i}.nc"
            with netCDF4.Dataset(p, "w") as nc:
                nc.createDimension("empty", 0)  # first: still not the concat dim
                nc.createDimension("time", None)
                nc.createDimension("a", 2)
                nc.createVariable("time", "f8", ("time",))[:] = np.arange(3) + 3 * i
                nc.createVariable("v", "f4", ("time", "empty"), zlib=True)
                nc.createVariable("s", "f4", ("a", "empty"))
                w = nc.createVariable("w", "f4", ("time", "a"), chunksizes=(1, 2))
                if i == 0:
                    w[:1] = [[1, 2]]  # fewer records than `time` has: the rest read as fill
            files.setdefault("nc4", []).append(str(p))
        p = d / "nc4_norecords.nc"
        with netCDF4.Dataset(p, "w") as nc:
            nc.createDimension("time", None)
            nc.createDimension("a", 2)
            nc.createVariable("time", "f8", ("time",))
            nc.createVariable("w", "f4", ("time", "a"))
        files["nc4_norecords"] = [str(p)]
        p = d / "classic.nc"
        with netCDF4.Dataset(p, "w", format="NETCDF3_64BIT_OFFSET") as nc:
            nc.createDimension("time", None)
            nc.createDimension("a", 2)
            nc.createVariable("time", "f8", ("time",))
            nc.createVariable("w", "f4", ("time", "a"))
            nc.createVariable("u", "f4", ("a",))[:] = [1, 2]
        files["classic"] = [str(p)]
    p = d / "plain.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("contiguous", shape=(2, 0), dtype="f4")
        f.create_dataset("chunked", shape=(2, 0), maxshape=(2, None), dtype="f4", chunks=(1, 1))
    files["h5"] = [str(p)]
    return files


def _netcdf_shapes(files):
    with netCDF4.Dataset(files[0]) as nc:
        return {k: v.shape for k, v in nc.variables.items()}


@pytest.mark.parametrize("which", ["nc4", "nc4_norecords", "classic", "h5"])
def test_zero_length_shapes_and_values_agree_in_every_output(zero_length, tmp_path, which):
    files = zero_length[which]
    outputs = all_outputs(files, tmp_path, which)
    for kind, g in outputs.items():
        with rectilinear():
            names = [k for k, _ in g.arrays()]
            assert names, kind
            for name in names:
                a = g[name]
                dims = tuple(a.metadata.dimension_names)
                expected = source_values(files, name, "time", dims)
                assert a.shape == expected.shape, (kind, name)
                got = a[...]
                assert got.shape == expected.shape and np.array_equal(got, expected), (kind, name)
    if which == "nc4":
        ds = xr.open_dataset(tmp_path / "nc4.zarr", engine="virtualize", mask_and_scale=False)
        src = xr.open_mfdataset(files, combine="nested", concat_dim="time",
                                mask_and_scale=False, data_vars="minimal", coords="minimal",
                                compat="override")
        for k in ("v", "w", "time"):
            assert ds[k].shape == src[k].shape, k
            np.testing.assert_array_equal(ds[k].values, src[k].values)
        assert ds["s"].shape == (2, 0)
        assert ds["v"].shape == (6, 0)
    if which != "h5":
        shapes = _netcdf_shapes(files)
        for name, shape in shapes.items():
            if len(files) == 1:
                assert outputs["cube"][name].shape == shape, name


# -- attributes: every one JSON-representable, or left out with a located problem ------


@pytest.fixture(scope="module")
def odd_attrs(tmp_path_factory):
    d = tmp_path_factory.mktemp("attrs")
    p = d / "attrs.h5"
    with h5py.File(p, "w") as f:
        g = f.create_group("grp")
        ds = f.create_dataset("v", data=np.arange(4, dtype="f4"))
        ds.attrs["empty"] = h5py.Empty("f4")
        ds.attrs["ref"] = g.ref
        ds.attrs["rref"] = ds.regionref[1:2]
        ds.attrs["refs"] = np.array([g.ref, ds.ref], dtype=h5py.ref_dtype)
        ds.attrs.create("strs", ["a", "bc"], dtype=h5py.string_dtype())
        ds.attrs["bytes"] = np.bytes_(b"caf\xc3\xa9")
        ds.attrs["comp"] = np.array([(1, 2.5)], dtype=[("i", "i4"), ("f", "f8")])
        ds.attrs["comps"] = np.array([(1, 2.5), (2, 3.5)], dtype=[("i", "i4"), ("f", "f8")])
        ds.attrs["nan"] = np.float32("nan")
        ds.attrs["infs"] = np.array([1.0, np.inf, -np.inf])
        ds.attrs["i32"] = np.int32(2)
        ds.attrs["opaque"] = np.void(b"\x01\x02")
        gone = f.create_group("gone")
        ds.attrs["dangling"] = gone.ref
        del f["gone"]
        g.attrs["gempty"] = h5py.Empty("i4")
        f.attrs["root_ref"] = ds.ref
    q = d / "nan.nc"
    with netCDF4.Dataset(q, "w") as nc:
        nc.createDimension("x", 3)
        v = nc.createVariable("v", "f4", ("x",))
        v.valid_max = np.float32("inf")
        v.missing_value = np.float32("nan")
        v[:] = [1, np.nan, 3]
        nc.nan_global = np.float64("nan")
    return str(p), str(q)


EXPECTED_ATTRS = {
    "empty": None, "ref": "/grp", "rref": "/v", "refs": ["/grp", "/v"], "strs": ["a", "bc"],
    "bytes": "café", "comp": {"i": 1, "f": 2.5}, "comps": [{"i": 1, "f": 2.5}, {"i": 2, "f": 3.5}],
    "nan": "NaN", "infs": [1.0, "Infinity", "-Infinity"], "i32": 2,
}


def test_h5py_attributes_are_written_and_read_back(odd_attrs, tmp_path):
    path = odd_attrs[0]
    report = virtualize.check([path])
    assert report.ok
    omitted = [p for p in report.problems if p.kind == "attribute-omitted"]
    assert [(p.loc.file, p.loc.variable, p.fatal) for p in omitted] == [(path, "v", False)] * 2
    assert "'dangling'" in omitted[0].message and "'opaque'" in omitted[1].message
    for kind, g in all_outputs([path], tmp_path, "attrs").items():
        with rectilinear():
            assert dict(g["v"].attrs) == EXPECTED_ATTRS, kind
            assert dict(g["grp"].attrs) == {"gempty": None}, kind
            assert dict(g.attrs) == {"root_ref": "/v"}, kind
    doc = json.loads((tmp_path / "attrs.zarr" / "v" / "zarr.json").read_text())
    assert doc["attributes"] == EXPECTED_ATTRS


def test_netcdf4_nan_attributes(odd_attrs, tmp_path):
    path = odd_attrs[1]
    virtualize.virtualize([path], tmp_path / "nan.zarr")
    g = virtualize.open(tmp_path / "nan.zarr")
    assert g["v"].attrs["valid_max"] == "Infinity" and g["v"].attrs["missing_value"] == "NaN"
    assert g.attrs["nan_global"] == "NaN"
    ds = xr.open_dataset(tmp_path / "nan.zarr", engine="virtualize")
    src = xr.open_dataset(path)
    np.testing.assert_array_equal(ds.v.values, src.v.values)


# -- check and the write agree ---------------------------------------------------------


@pytest.fixture(scope="module")
def nan_fill_on_int(tmp_path_factory):
    d = tmp_path_factory.mktemp("nanfill")
    p = d / "h5attrs.nc"
    with h5py.File(p, "w") as f:  # attributes as a careless writer sets them
        ds = f.create_dataset("v", data=np.arange(3, dtype="i4"))
        ds.attrs["_FillValue"] = np.float64("nan")
        ds.attrs["missing_value"] = np.float64("nan")
    q = d / "netcdf4.nc"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with netCDF4.Dataset(q, "w") as nc:
            nc.createDimension("x", 3)
            w = nc.createVariable("w", "i2", ("x",))
            w.missing_value = np.float64("nan")
            w[:] = [1, 2, 3]
    return str(p), str(q)


@pytest.mark.parametrize("which,name", [(0, "v"), (1, "w")])
def test_nan_fill_on_an_integer_variable_checks_writes_and_reads(nan_fill_on_int, tmp_path,
                                                                  which, name):
    path = nan_fill_on_int[which]
    report = virtualize.check([path])
    assert report.ok
    omitted = [p for p in report.problems if p.kind == "attribute-omitted"]
    assert omitted and all((p.loc.file, p.loc.variable) == (path, name) for p in omitted)
    for kind, g in all_outputs([path], tmp_path, f"nan{which}").items():
        with rectilinear():
            np.testing.assert_array_equal(g[name][...], source_values([path], name, None, ("x",)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kw in ({}, {"mask_and_scale": False}):
            ds = xr.open_dataset(tmp_path / f"nan{which}.zarr", engine="virtualize", **kw)
            src = xr.open_dataset(path, engine="netcdf4", **kw)
            assert ds[name].dtype == src[name].dtype, kw
            np.testing.assert_array_equal(ds[name].values, src[name].values)


def test_check_renders_every_document_as_the_write_does(odd_attrs, monkeypatch, tmp_path):
    """A value no JSON can hold, however it got into a plan, is a fatal located problem
    in `check`, and the write refuses before writing anything."""
    from virtualize.api import steps as api

    real = api.scan_or_problems

    def scan_with_a_bad_attribute(path, hint=None):
        inv = real(path, hint)
        inv.variables["v"].attrs["bad"] = object()
        return inv

    # scanned in this process (no time limit), so that the patched scan is the one used
    monkeypatch.setattr(api, "scan_or_problems", scan_with_a_bad_attribute)
    report = virtualize.check([odd_attrs[0]], scan_timeout=None)
    (p,) = [p for p in report.problems if p.kind == "metadata-unrenderable"]
    assert (p.loc.file, p.loc.variable, p.fatal) == (odd_attrs[0], "v", True)
    with pytest.raises(VirtualizeError):
        virtualize.virtualize([odd_attrs[0]], tmp_path / "bad.zarr", scan_timeout=None)
    assert not (tmp_path / "bad.zarr").exists()


# -- messages and the command line -----------------------------------------------------


def _cli(*args, **kw):
    exe = os.path.join(os.path.dirname(sys.executable), "virtualize")
    return subprocess.Popen([exe, *map(str, args)], **kw)


def test_closed_stdout_ends_quietly(tmp_path):
    files = [nc_times(tmp_path / f"{i}.nc", [float(i)]) for i in range(3)]
    p = _cli("check", *files, "-v", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # the reader is gone before anything is written (`| head -0`)
    err = p.stderr.read().decode()
    p.wait()
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert p.returncode == 0  # the answer was "yes": a reader that stopped changes nothing


def test_messages_print_plain_numbers(tmp_path):
    a = tmp_path / "a.h5"
    b = tmp_path / "b.h5"
    for path, fill, scale in ((a, 1, 0.5), (b, 2, 0.25)):
        with h5py.File(path, "w") as f:
            ds = f.create_dataset("v", data=np.zeros((2, 3), "i4"), fillvalue=fill,
                                  chunks=(1, 3), maxshape=(None, 3))
            ds.attrs["scale_factor"] = np.float32(scale)
    r = virtualize.check([a, b], "v_dim0")
    kinds = {p.kind for p in r.problems}
    assert {"fill-value-differs", "attribute-drift"} <= kinds
    text = r.to_text() + r.to_json()
    assert "np." not in text, text
    assert "fill value 2 differs from 1" in text and "0.25" in text


@pytest.mark.parametrize("how", ["api", "cli"])
def test_an_empty_directory_is_named(tmp_path, how):
    empty = tmp_path / "nothing_here"
    empty.mkdir()
    if how == "api":
        r = virtualize.check([empty])
        (p,) = r.problems
        assert (p.kind, p.loc.file, p.fatal) == ("no-files", str(empty), True)
        assert "holds no files" in p.message
    else:
        p = _cli("check", empty, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = p.communicate()
        assert p.returncode == 2  # the arguments name no file: a usage error
        assert str(empty) in out and "holds no files" in out


def test_a_pattern_matching_nothing_is_named(tmp_path):
    """A quoted glob that matches no file is `no-files` "no file matches ..." (not an
    unreadable file named with a star), fatal even beside files that exist."""
    data = tmp_path / "data"
    data.mkdir()
    pattern = str(data / "*.nc")
    out = tmp_path / "c.zarr"
    p = _cli(pattern, "-o", out, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = p.communicate()
    assert p.returncode == 2 and not out.exists()  # a usage error, as a missing -o is
    assert f"no file matches {pattern!r}" in stdout and "unreadable" not in stdout + stderr
    (p,) = virtualize.check(pattern).problems
    assert (p.kind, p.loc.file, p.fatal, p.message) == \
        ("no-files", pattern, True, f"no file matches {pattern!r}")
    f = nc_times(data / "a.nc", [0.0])
    r = virtualize.check([f, str(data / "2025*.nc")])
    assert not r.ok and [(p.kind, p.fatal) for p in r.problems] == [("no-files", True)]
    cube = tmp_path / "a.zarr"
    virtualize.virtualize([f], cube)
    with pytest.raises(VirtualizeError) as e:
        virtualize.append(cube, [str(data / "2025*.nc")])
    assert [p.message for p in e.value.problems] == [f"no file matches {str(data / '2025*.nc')!r}"]


def test_direct_zarr_open_of_zero_length_cube(zero_length, tmp_path):
    """zarr alone (no virtualize code) reads the netCDF shape from a kerchunk export."""
    files = zero_length["nc4"]
    virtualize.virtualize(files, tmp_path / "z.json")
    with rectilinear():
        g = kerchunk_group(tmp_path / "z.json")
        assert g["v"].shape == (6, 0) and g["w"].shape == (6, 2)
    assert isinstance(g, zarr.Group)


def test_append_of_an_empty_directory_is_refused_and_named(zero_length, tmp_path):
    cube = tmp_path / "c.zarr"
    virtualize.virtualize(zero_length["nc4"][:1], cube)
    empty = tmp_path / "later"
    empty.mkdir()
    with pytest.raises(VirtualizeError) as e:
        virtualize.append(cube, [empty])
    (p,) = e.value.problems
    assert (p.kind, p.loc.file) == ("no-files", str(empty))


def test_unwritten_records_inside_a_written_block_are_refused(tmp_path):
    path = tmp_path / "partial.nc"
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("time", None)
        nc.createVariable("time", "f8", ("time",))[:] = np.arange(4.0)
        w = nc.createVariable("w", "f4", ("time",), chunksizes=(2,))
        w[:3] = [1, 2, 3]  # HDF5 extent 3, netCDF length 4: block 1 holds records 2 and 3
    r = virtualize.check([path], inline_threshold=0)
    (p,) = [p for p in r.problems if p.kind == "partial-records"]
    assert (p.loc.file, p.loc.variable, p.fatal) == (str(path), "w", True)
    inv = virtualize.inventory(path)
    assert inv.variables["w"].shape == (4,) and inv.dimensions["time"].size == 4
    # inlined, the values are read with the file's library and padded as netCDF-C reads them
    virtualize.virtualize([path], tmp_path / "p.zarr", inline=["w"])
    got = virtualize.open(tmp_path / "p.zarr")["w"][...]
    np.testing.assert_array_equal(got, source_values([path], "w", None, ("time",)))


def test_fill_values_xarray_cannot_decode_are_left_out(tmp_path):
    path = tmp_path / "fills.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("text", data=np.arange(3.0)).attrs["_FillValue"] = b"NaN"
        f.create_dataset("empty", data=np.arange(3.0)).attrs["_FillValue"] = h5py.Empty("f8")
        f.create_dataset("ok", data=np.arange(3.0)).attrs["_FillValue"] = 1.0
    report = virtualize.virtualize([path], tmp_path / "fills.zarr")
    assert sorted(p.loc.variable for p in report.problems if p.kind == "attribute-omitted") == \
        ["empty", "text"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = xr.open_dataset(tmp_path / "fills.zarr", engine="virtualize")
        src = xr.open_dataset(path, engine="netcdf4")
        for name in ("text", "empty", "ok"):
            np.testing.assert_array_equal(ds[name].values, src[name].values)


def test_a_stack_with_nothing_to_virtualize_is_refused(tmp_path):
    """Files whose every variable is skipped would give an empty cube with a "yes":
    refused instead (no-arrays), naming what was skipped; nothing is written."""
    import h5py

    path = tmp_path / "strings.h5"
    with h5py.File(path, "w") as f:
        f["pairs"] = np.zeros(2, dtype=[("a", "i4"), ("b", "S2")])  # string member: skipped
    report = virtualize.check([path])
    assert not report.ok
    (p,) = [p for p in report.problems if p.fatal]
    assert p.kind == "no-arrays" and "pairs" in p.message
    assert p.loc.file == str(path)  # one file: named
    with pytest.raises(VirtualizeError):
        virtualize.virtualize([path], tmp_path / "out.zarr")
    assert not (tmp_path / "out.zarr").exists()


def test_one_file_is_never_given_a_new_axis(tmp_path):
    """A single file whose unlimited dimension no variable uses (or a --concat-dim it
    lacks) keeps every variable's shape: no leading length-1 axis."""
    path = tmp_path / "one.nc"
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("time", None)
        nc.createDimension("x", 3)
        nc.createVariable("v", "f4", ("x",))[:] = [1, 2, 3]
    for kw in ({}, {"concat_dim": "time"}):
        report = virtualize.virtualize([path], tmp_path / "c.zarr", overwrite=True, **kw)
        assert not any("new leading" in n for n in report.notes)
        cube = virtualize.open(tmp_path / "c.zarr")
        assert cube["v"].shape == (3,) and cube["v"][...].tolist() == [1, 2, 3]
