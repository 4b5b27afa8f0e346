"""Grouped cubes of every output kind opened as a DataTree (`xr.open_datatree`,
`xr.open_groups` with engine="virtualize"): the tree's structure as xarray's netcdf4
engine gives it for the source, every variable bit for bit netCDF4-python's read."""

from __future__ import annotations

import os
import subprocess

import netCDF4
import numpy as np
import pytest
import xarray as xr

import virtualize

from conftest import needs
from helpers import assert_same

# every output kind that holds groups, by the suffix choosing it (a new kind: add its
# suffix here; its reader's store is all the DataTree path asks of it)
KINDS = [".zarr", ".json", pytest.param(".icechunk", marks=needs("icechunk"))]


def _nested(path, first: int, n: int) -> None:
    """A netCDF-4 file with nested groups: root coordinates (time, lat, lon) and a
    variable; /surface (a compressed variable, attributes) holding /surface/stats (its
    own dimension and coordinate) holding /surface/stats/deep; /profile with its own
    dimension; /empty (attributes only)."""
    rng = np.random.default_rng(first)
    with netCDF4.Dataset(path, "w") as ds:
        ds.setncatts({"title": "nested groups", "source": "test"})
        ds.createDimension("time", None)
        ds.createDimension("lat", 2)
        ds.createDimension("lon", 3)
        t = ds.createVariable("time", "f8", ("time",))
        t.setncatts({"units": "days since 2000-01-01", "calendar": "standard"})
        t[:] = np.arange(first, first + n)
        lat = ds.createVariable("lat", "f4", ("lat",))
        lat.units = "degrees_north"
        lat[:] = [10.5, 20.5]
        ds.createVariable("lon", "f4", ("lon",))[:] = [1, 2, 3]
        r = ds.createVariable("count", "i2", ("time", "lat"), fill_value=-1)
        r[:] = np.arange(n * 2).reshape(n, 2) + first
        r[0, 0] = np.ma.masked
        s = ds.createGroup("surface")
        s.setncatts({"description": "surface fields", "level": "2 m"})
        tas = s.createVariable("tas", "f4", ("time", "lat", "lon"), compression="zlib",
                               shuffle=True, chunksizes=(n, 2, 3), fill_value=np.float32(1e20))
        tas.setncatts({"units": "K", "long_name": "air temperature"})
        tas[:] = (rng.random((n, 2, 3)) * 40 + 250).astype("f4")
        packed = s.createVariable("packed", "i2", ("time", "lon"), fill_value=-32767)
        packed.setncatts({"scale_factor": 0.01, "add_offset": 273.15})
        packed.set_auto_maskandscale(False)
        packed[:] = rng.integers(-3000, 3000, (n, 3)).astype("i2")
        st = s.createGroup("stats")
        st.method = "count"
        st.createDimension("bin", 4)
        st.createVariable("bin", "i4", ("bin",))[:] = [1, 2, 3, 4]
        st.createVariable("hist", "u4", ("time", "bin"))[:] = np.arange(n * 4).reshape(n, 4) + first
        deep = st.createGroup("deep")
        deep.createVariable("flag", "u1", ("time", "bin"))[:] = (np.arange(n * 4) % 3).reshape(n, 4)
        p = ds.createGroup("profile")
        p.createDimension("level", 2)
        lv = p.createVariable("level", "f8", ("level",))
        lv.units = "hPa"
        lv[:] = [1000.0, 500.0]
        p.createVariable("temp", "f8", ("time", "level", "lat"))[:] = \
            rng.random((n, 2, 2)) * 30 + 200
        ds.createGroup("empty").note = "attributes only"


@pytest.fixture(scope="module")
def nested(tmp_path_factory):
    """One nested file and a stack of three (3, 2 and 4 steps: a rectilinear time axis)."""
    d = tmp_path_factory.mktemp("nested")
    one = d / "one" / "single.nc"
    one.parent.mkdir()
    _nested(one, 0, 3)
    stack = []
    first = 0
    for i, n in enumerate((3, 2, 4)):
        f = d / "stack" / f"part_{i}.nc"
        f.parent.mkdir(exist_ok=True)
        _nested(f, first, n)
        stack.append(f)
        first += n
    return one, stack


def _write(files, out):
    report = virtualize.virtualize(files, out)
    assert report.ok, [p.message for p in report.problems]
    return out


def _source_values(files, path: str, name: str, dims) -> np.ndarray:
    """netCDF4-python's raw read (no masking, scaling or time decoding) of `path/name`,
    concatenated along time over the stack."""
    parts = []
    for f in files:
        with netCDF4.Dataset(f) as nc:
            v = nc[f"{path}/{name}".lstrip("/")]
            v.set_auto_maskandscale(False)
            parts.append(np.asarray(v[...]))
    return np.concatenate(parts, axis=dims.index("time")) if "time" in dims else parts[0]


def _source_groups(f) -> list[str]:
    """Every group of a netCDF-4 file ("/", "/surface", ...), as netCDF4-python walks them."""
    out = []

    def walk(g, path):
        out.append(path)
        for name, child in g.groups.items():
            walk(child, f"{path.rstrip('/')}/{name}")
    with netCDF4.Dataset(f) as nc:
        walk(nc, "/")
    return out


def _assert_exact(tree: xr.DataTree, files) -> int:
    """Every variable of every node (raw: opened without masking or decoding) equals
    netCDF4-python's read of the sources bit for bit; the number compared."""
    n = 0
    for node in tree.subtree:
        for name, var in node.to_dataset(inherit=False).variables.items():
            expected = _source_values(files, node.path, name, var.dims)
            assert_same(var.values, expected, f"{node.path}/{name}")
            n += 1
    return n


RAW = dict(mask_and_scale=False, decode_times=False)


@pytest.mark.parametrize("suffix", KINDS)
def test_one_nested_file_opens_as_netcdf4s_datatree(nested, tmp_path, suffix):
    one, _ = nested
    out = _write([one], tmp_path / f"cube{suffix}")
    tree = xr.open_datatree(out, engine="virtualize")
    source = xr.open_datatree(one, engine="netcdf4")
    xr.testing.assert_identical(tree, source)  # structure, dims, attrs, decoded values
    assert sorted(tree.groups) == sorted(_source_groups(one)) == sorted(source.groups)
    for node in tree.subtree:
        assert dict(node.attrs) == dict(source[node.path].attrs), node.path
        assert dict(node.dataset.sizes) == dict(source[node.path].dataset.sizes), node.path
    # the attributes-only group is kept, with its attributes
    assert tree["empty"].attrs == {"note": "attributes only"}
    assert not tree["empty"].to_dataset(inherit=False).variables
    raw = xr.open_datatree(out, engine="virtualize", **RAW)
    assert _assert_exact(raw, [one]) == 11


@pytest.mark.parametrize("suffix", KINDS)
def test_groups_keep_the_sources_order_or_zarrs(nested, tmp_path, suffix):
    one, _ = nested
    out = _write([one], tmp_path / f"cube{suffix}")
    tree = xr.open_datatree(out, engine="virtualize")
    with netCDF4.Dataset(one) as nc:
        for node in tree.subtree:
            children = list(node.children)
            source = list((nc[node.path] if node.path != "/" else nc).groups)
            if suffix == ".icechunk":  # Icechunk lists a group's members in its own order
                assert sorted(children) == sorted(source), node.path
            else:  # the arrays' recorded order: the sources' (attributes alone: last)
                assert children == [g for g in source if g != "empty"] + \
                    (["empty"] if node.path == "/" else []), node.path


@pytest.mark.parametrize("suffix", KINDS)
def test_coordinates_are_inherited_as_xarray_does(nested, tmp_path, suffix):
    one, _ = nested
    tree = xr.open_datatree(_write([one], tmp_path / f"cube{suffix}"), engine="virtualize")
    source = xr.open_datatree(one, engine="netcdf4")
    surface = tree["surface"]
    assert {"time", "lat", "lon"} <= set(surface.coords)  # from the root
    assert not set(surface.to_dataset(inherit=False).coords)  # held by the root only
    deep = tree["surface/stats/deep"]
    assert set(deep.coords) == {"time", "lat", "lon", "bin"} == set(source["surface/stats/deep"].coords)
    assert list(deep["flag"].coords["bin"].values) == [1, 2, 3, 4]
    np.testing.assert_array_equal(surface["tas"].time.values, source["surface"]["tas"].time.values)


@pytest.mark.parametrize("suffix", KINDS)
def test_a_stack_of_nested_files_opens_as_a_datatree(nested, tmp_path, suffix):
    _, stack = nested
    out = _write(stack, tmp_path / f"stack{suffix}")
    tree = xr.open_datatree(out, engine="virtualize")
    sources = [xr.open_datatree(f, engine="netcdf4") for f in stack]
    assert sorted(tree.groups) == sorted(sources[0].groups)
    for node in tree.subtree:
        parts = [s[node.path].to_dataset(inherit=False) for s in sources]
        expected = parts[0]  # no variable along time: the same in every file
        if "time" in expected.dims:
            expected = xr.concat(parts, dim="time", data_vars="minimal", coords="minimal",
                                 compat="identical", combine_attrs="identical")
        xr.testing.assert_identical(node.to_dataset(inherit=False), expected)
        assert node.attrs == sources[0][node.path].attrs, node.path
    assert tree.sizes["time"] == 9
    assert tree["surface/stats"].to_dataset(inherit=False).sizes == {"time": 9, "bin": 4}
    raw = xr.open_datatree(out, engine="virtualize", **RAW)
    assert _assert_exact(raw, stack) == 11
    # the time axis is rectilinear (3, 2, 4): read through it, outside the open
    assert_same(raw["surface/tas"][2:6].values,
                _source_values(stack, "/surface", "tas", ("time", "lat", "lon"))[2:6], "tas[2:6]")


@pytest.mark.parametrize("suffix", KINDS)
def test_open_groups_equals_netcdf4s(nested, tmp_path, suffix):
    _, stack = nested
    out = _write(stack[:1], tmp_path / f"cube{suffix}")
    groups = xr.open_groups(out, engine="virtualize")
    source = xr.open_groups(stack[0], engine="netcdf4")
    assert sorted(groups) == sorted(source)
    for path, ds in groups.items():
        xr.testing.assert_identical(ds, source[path])
    raw = xr.open_groups(out, engine="virtualize", **RAW)
    for path, ds in raw.items():
        for name, var in ds.variables.items():
            assert_same(var.values, _source_values(stack[:1], path, name, var.dims), f"{path}/{name}")


@pytest.mark.parametrize("suffix", KINDS)
@pytest.mark.parametrize("options", [
    dict(group="surface"),
    dict(group="/surface/stats"),
    dict(drop_variables=["tas", "temp"]),
    dict(group="surface", drop_variables="packed", mask_and_scale=False),
    dict(decode_times=False, mask_and_scale=False),
    dict(decode_coords=False, concat_characters=False,
         decode_times=xr.coders.CFDatetimeCoder(use_cftime=True)),
], ids=lambda o: ",".join(o))
def test_group_drop_variables_and_decoding_are_passed_through(nested, tmp_path, suffix, options):
    one, _ = nested
    out = _write([one], tmp_path / f"cube{suffix}")
    xr.testing.assert_identical(xr.open_datatree(out, engine="virtualize", **options),
                                xr.open_datatree(one, engine="netcdf4", **options))
    groups = xr.open_groups(out, engine="virtualize", **options)
    source = xr.open_groups(one, engine="netcdf4", **options)
    assert sorted(groups) == sorted(source)
    for path in groups:
        xr.testing.assert_identical(groups[path], source[path])


def test_the_groups_fixture_case_opens_as_a_datatree(case, tmp_path):
    files = case("groups")
    tree = xr.open_datatree(_write(files, tmp_path / "cube.zarr"), engine="virtualize", **RAW)
    assert sorted(tree.groups) == ["/", "/surface", "/surface/stats"]
    _assert_exact(tree, files)


@pytest.mark.parametrize("suffix", KINDS)
def test_a_changed_source_is_refused_by_open_datatree_too(nested, tmp_path, suffix):
    one, _ = nested
    src = tmp_path / "src" / "single.nc"
    src.parent.mkdir()
    src.write_bytes(one.read_bytes())
    out = _write([src], tmp_path / f"cube{suffix}")
    with open(src, "ab") as f:
        f.write(b"\0" * 16)  # grown: stale
    for opener in (xr.open_datatree, xr.open_groups):
        with pytest.raises(virtualize.VirtualizeError, match="changed|stale"):
            opener(out, engine="virtualize")
    # not checked when asked not to (the caller's risk): it opens
    tree = xr.open_datatree(out, engine="virtualize", check_sources=False)
    assert "surface" in tree.children


def test_confinement_holds_for_open_datatree(nested, tmp_path):
    """A kerchunk JSON not written by virtualize may reach only files under its own
    directory, or under `allow`: open_datatree passes `allow` on."""
    import json

    one, _ = nested
    refs = _write([one], tmp_path / "cube.json")
    doc = json.loads(refs.read_text())
    del doc["virtualize"]  # as another tool would have written it: no roots recorded
    elsewhere = tmp_path / "elsewhere" / "refs.json"
    elsewhere.parent.mkdir()
    elsewhere.write_text(json.dumps(doc))
    with pytest.raises(virtualize.VirtualizeError, match="refused to follow"):
        xr.open_datatree(elsewhere, engine="virtualize")
    tree = xr.open_datatree(elsewhere, engine="virtualize", allow=[os.path.dirname(one)], **RAW)
    _assert_exact(tree, [one])


@pytest.mark.parametrize("suffix", KINDS)
def test_plain_hdf5_groups_open_as_a_datatree(tmp_path, suffix):
    """An HDF5 file (h5py, no netCDF conventions) with nested groups: every group a node
    with its attributes, every dataset equal to h5py's read."""
    import h5py

    src = tmp_path / "plain.h5"
    with h5py.File(src, "w") as f:
        f.attrs["title"] = "plain"
        f["a"] = np.arange(6, dtype="i4").reshape(2, 3)
        g = f.create_group("g1")
        g.attrs["x"] = 1
        g.create_dataset("b", data=np.arange(4.0), chunks=(2,), compression="gzip")
        g.create_group("g2").create_dataset("c", data=np.arange(5, dtype=">u2"), chunks=(3,))
    tree = xr.open_datatree(_write([src], tmp_path / f"cube{suffix}"), engine="virtualize")
    assert sorted(tree.groups) == ["/", "/g1", "/g1/g2"]
    assert tree.attrs == {"title": "plain"} and tree["g1"].attrs == {"x": 1}
    with h5py.File(src, "r") as f:
        for node in tree.subtree:
            for name, var in node.to_dataset(inherit=False).variables.items():
                assert_same(var.values, f[f"{node.path}/{name}"][()], f"{node.path}/{name}")


WITHOUT_VIRTUALIZE = '''
import json, sys
import netCDF4, numpy as np, xarray as xr, zarr
zarr.config.set({"array.rectilinear_chunks": True})
out, kind, files = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
if kind == "kerchunk":  # docs/reading.md: DataTree, without virtualize
    tree = xr.open_datatree("reference://", engine="zarr", zarr_format=3, consolidated=False,
                            storage_options={"fo": out}, mask_and_scale=False, decode_times=False)
else:
    import icechunk as ic
    storage = ic.local_filesystem_storage(out)
    prefixes = ic.Repository.fetch_config(storage).virtual_chunk_containers
    repo = ic.Repository.open(storage, authorize_virtual_chunk_access=ic.containers_credentials(
        {p: ic.Credentials.LocalFileSystemAccess() for p in prefixes}))
    tree = xr.open_datatree(repo.readonly_session("main").store, engine="zarr", zarr_format=3,
                            consolidated=False, mask_and_scale=False, decode_times=False)
n = 0
for node in tree.subtree:
    for name, var in node.to_dataset(inherit=False).variables.items():
        parts = []
        for f in files:
            with netCDF4.Dataset(f) as nc:
                v = nc[f"{node.path}/{name}".lstrip("/")]
                v.set_auto_maskandscale(False)
                parts.append(np.asarray(v[...]))
        want = np.concatenate(parts, var.dims.index("time")) if "time" in var.dims else parts[0]
        got = var.values
        assert got.dtype == want.dtype.newbyteorder("=") and got.shape == want.shape, name
        assert got.tobytes() == want.astype(got.dtype).tobytes(), f"{node.path}/{name}"
        n += 1
assert "virtualize" not in sys.modules
print(n, sorted(tree.groups))
'''


@pytest.mark.parametrize("suffix", [".json", pytest.param(".icechunk", marks=needs("icechunk"))])
def test_datatree_without_virtualize(nested, tmp_path, suffix):
    """The kerchunk JSON and the Icechunk repository open as a DataTree in a process that
    never imports virtualize (xarray's zarr engine, the snippets of docs/reading.md),
    every variable bit for bit netCDF4-python's read."""
    import json
    import sys

    _, stack = nested
    out = _write(stack, tmp_path / f"stack{suffix}")
    kind = "kerchunk" if suffix == ".json" else "icechunk"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", WITHOUT_VIRTUALIZE, str(out), kind,
                        json.dumps([str(f) for f in stack])],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split("\n")[0].startswith("11 "), r.stdout
    assert str(sorted(_source_groups(stack[0]))) in r.stdout


@pytest.mark.parametrize("suffix", [".zarr", pytest.param(".icechunk", marks=needs("icechunk"))])
def test_open_datatree_picks_the_engine_itself(nested, tmp_path, suffix):
    """Without engine=, xarray picks this backend for a cube directory and an Icechunk
    repository (guess_can_open; a `.json` may be claimed by kerchunk's backend first)."""
    one, _ = nested
    out = _write([one], tmp_path / f"cube{suffix}")
    xr.testing.assert_identical(xr.open_datatree(out), xr.open_datatree(one, engine="netcdf4"))


@needs("dask")
def test_dask_chunks_of_a_datatree_follow_the_cubes_grid(nested, tmp_path):
    _, stack = nested
    out = _write(stack, tmp_path / "stack.zarr")
    tree = xr.open_datatree(out, engine="virtualize", chunks={}, **RAW)
    assert tree["surface/tas"].chunks == ((3, 2, 4), (2,), (3,))  # one chunk per file
    assert_same(tree["surface/stats/hist"].compute().values,
                _source_values(stack, "/surface/stats", "hist", ("time", "bin")), "hist (dask)")
