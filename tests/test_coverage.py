"""Issue 12's remaining classes: compound data as zarr structs, external links, odd types
refused located (docs/coverage.md)."""

from __future__ import annotations

import h5py
import netCDF4
import numpy as np
import pytest
import xarray as xr

import virtualize


def assert_same_struct(actual, expected, what: str) -> None:
    """A struct read through the cube equals h5py's read: every member (nested ones too)
    bit for bit, NaN payloads included."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, what
    assert actual.dtype.names == expected.dtype.names, f"{what}: members differ"
    for k in actual.dtype.names:
        a, e = actual[k], expected[k]
        if a.dtype.names is not None:
            assert_same_struct(a, e, f"{what}.{k}")
            continue
        assert a.dtype == e.dtype.newbyteorder("="), f"{what}.{k}: {a.dtype} != {e.dtype}"
        bits = f"u{a.dtype.itemsize}" if a.dtype.kind != "c" else f"u{a.dtype.itemsize // 2}"
        assert np.array_equal(np.ascontiguousarray(a).view(bits),
                              np.ascontiguousarray(e.astype(a.dtype)).view(bits)), f"{what}.{k}"


# -- compound data ---------------------------------------------------------------------

PADDED = np.dtype({"names": ["a", "b", "n"],
                   "formats": [">i4", "<f8", [("p", "u1"), ("q", "<c8")]],
                   "offsets": [0, 8, 16], "itemsize": 40})


@pytest.fixture(scope="module")
def compounds(tmp_path_factory):
    """h5py-written compounds: padded members, a big-endian one, a nested one with a
    complex member, NaN, chunked + gzip; a small plain one; one with a string member; a
    large one."""
    path = tmp_path_factory.mktemp("compound") / "c.h5"
    x = np.zeros((3, 4), PADDED)
    x["a"] = np.arange(12).reshape(3, 4)
    x["b"] = np.nan
    x["b"][0, 0] = 1.5
    x["n"]["p"] = 7
    x["n"]["q"] = 1 + 2j
    with h5py.File(path, "w") as f:
        f.create_dataset("rec", data=x, chunks=(2, 2), compression="gzip",
                         fillvalue=np.array((7, 8.0, (1, 2)), PADDED)[()])
        f["small"] = np.array([(1, 2.0)], [("i", "<u2"), ("f", "<f4")])
        f["strs"] = np.zeros(3, [("x", "<i2"), ("s", "S4")])
        f["big"] = np.zeros(20_000, [("x", "<i4"), ("y", "<f8")])
        f["plain"] = np.arange(5.0)
    return path


def test_small_compounds_are_inlined_as_zarr_structs(compounds, tmp_path):
    out = tmp_path / "c.zarr"
    report = virtualize.virtualize([compounds], out, drop=["big"])
    assert report.ok
    assert {(p.loc.variable, p.fatal) for p in report.problems} == {("strs", False)}
    assert any(n.startswith("rec: cannot be referenced") for n in report.notes)
    cube = virtualize.open(out)
    ds = xr.open_dataset(out, engine="virtualize")
    with h5py.File(compounds) as f:
        for name in ("rec", "small"):
            assert_same_struct(cube[name][...], f[name][()], name)
            assert_same_struct(ds[name].values, f[name][()], f"xarray {name}")
    assert "strs" not in ds and "big" not in ds
    # the fill value is h5py's, member by member
    assert cube["rec"].fill_value.tolist() == (7, 8.0, (1, 2 + 0j))


def test_large_compounds_are_refused_naming_inline_and_drop(compounds, tmp_path):
    report = virtualize.check([compounds])
    assert not report.ok
    (p,) = [p for p in report.problems if p.fatal]
    assert (p.loc.file, p.loc.variable, p.kind) == (str(compounds), "big", "unsupported-type")
    assert "--inline big" in p.remedy and "--drop big" in p.remedy
    assert report.refused_variables == {"big": ["--inline big", "--drop big"]}
    report = virtualize.virtualize([compounds], tmp_path / "c.zarr", inline=["big"])
    with h5py.File(compounds) as f:
        assert_same_struct(virtualize.open(tmp_path / "c.zarr")["big"][...], f["big"][()], "big")


def test_compounds_in_a_stack_concatenate_and_compare_with_nan(tmp_path):
    """netCDF4-written compound variables: one along the unlimited dimension (concatenated),
    one without it holding NaN (the same in every file: not a `differs-between-files`)."""
    files = []
    for i in range(3):
        path = tmp_path / f"s{i}.nc"
        with netCDF4.Dataset(path, "w") as nc:
            obs = nc.createCompoundType(np.dtype([("t", "f4"), ("q", "i2")]), "obs_t")
            nc.createDimension("time", None)
            nc.createDimension("site", 2)
            tv = nc.createVariable("time", "f8", ("time",))
            tv.units = "hours since 2000-01-01"
            tv[:] = [2 * i, 2 * i + 1]
            v = nc.createVariable("obs", obs, ("time", "site"))
            data = np.zeros((2, 2), obs.dtype)
            data["t"] = np.arange(4).reshape(2, 2) + 10 * i
            data["q"] = i
            v[:] = data
            s = nc.createVariable("site_info", obs, ("site",))
            s[:] = np.array([(np.nan, 1), (2.5, 2)], obs.dtype)
        files.append(path)
    out = tmp_path / "s.zarr"
    assert virtualize.virtualize(files, out).ok
    cube = virtualize.open(out)
    srcs = [netCDF4.Dataset(p) for p in files]
    try:
        assert_same_struct(cube["obs"][...], np.concatenate([s["obs"][...] for s in srcs]), "obs")
        assert_same_struct(cube["site_info"][...], srcs[0]["site_info"][...], "site_info")
    finally:
        for s in srcs:
            s.close()
