"""Strings: netCDF char arrays, netCDF-4 `string`, HDF5 fixed- and variable-length strings
are stored in the cube as zarr `string` (text), as xarray decodes them."""

from __future__ import annotations

import h5py
import netCDF4
import numpy as np
import pytest
import xarray as xr

import virtualize


def _text(a) -> list:
    """xarray's decoded values as text (bytes decoded as UTF-8, as the cube holds them)."""
    return [x.decode("utf-8") if isinstance(x, bytes) else str(x)
            for x in np.asarray(a, dtype=object).reshape(-1)]


def _write_nc(path, fmt, names, t0):
    with netCDF4.Dataset(path, "w", format=fmt) as nc:
        nc.createDimension("time", None)
        nc.createDimension("station", 3)
        nc.createDimension("strlen", 6)
        nc.createVariable("time", "f8", ("time",))[:] = [t0, t0 + 1]
        v = nc.createVariable("name", "S1", ("station", "strlen"))
        v[:] = netCDF4.stringtochar(np.array(names, "S6"))
        w = nc.createVariable("flag", "S1", ("time", "strlen"))
        w._Encoding = "utf-8"
        w[:] = np.array(["ok", "bad é"][:: 1 if t0 else -1])
        if fmt == "NETCDF4":
            s = nc.createVariable("label", str, ("station",))
            s[:] = np.array(["x", "yy", "zzé"], dtype=object)
        nc.createVariable("t", "f4", ("time", "station"))[:] = np.arange(6).reshape(2, 3) + t0


@pytest.mark.parametrize("fmt", ["NETCDF4", "NETCDF3_CLASSIC"])
def test_netcdf_strings_read_as_xarray_decodes_them(tmp_path, fmt):
    files = [tmp_path / f"{i}.nc" for i in range(2)]
    for i, p in enumerate(files):
        _write_nc(p, fmt, ["abc", "de", "fghij"], 10.0 * i)
    out = tmp_path / "c.zarr"
    report = virtualize.virtualize(files, out)
    assert not [p for p in report.problems if p.kind == "unsupported-type"]
    cube = xr.open_dataset(out, engine="virtualize")
    with xr.open_mfdataset(files, engine="netcdf4", combine="nested", concat_dim="time",
                           data_vars="minimal", coords="minimal", compat="override") as src:
        names = ["name", "flag"] + (["label"] if fmt == "NETCDF4" else [])
        for name in names:
            assert cube[name].dims == src[name].dims, name
            assert _text(cube[name].values) == _text(src[name].values), name
    assert _text(cube["flag"].values) == ["bad é", "ok", "ok", "bad é"]
    # zarr itself reads the arrays as text
    arr = virtualize.open(out)["name"]
    assert arr.dtype.kind == "T" and arr[...].tolist() == ["abc", "de", "fghij"]


def test_hdf5_fixed_and_variable_length_strings(tmp_path):
    p = tmp_path / "s.h5"
    with h5py.File(p, "w") as f:
        f["fixed"] = np.array([b"ab", b"cde", b""], "S3")
        f["vlen"] = np.array(["p", "qq", "é"], dtype=h5py.string_dtype())
        f["grid"] = np.array([["a", "b"], ["c", "d"]], dtype=h5py.string_dtype(length=None))
    virtualize.virtualize([p], tmp_path / "c.zarr")
    cube = virtualize.open(tmp_path / "c.zarr")
    with h5py.File(p) as f:
        for name in ("fixed", "vlen", "grid"):
            assert cube[name].shape == f[name].shape
            assert _text(cube[name][...]) == _text(f[name][()]), name


def test_undecodable_char_data_is_skipped_located(tmp_path):
    p = tmp_path / "bad.nc"
    with netCDF4.Dataset(p, "w", format="NETCDF3_CLASSIC") as nc:
        nc.createDimension("n", 2)
        v = nc.createVariable("c", "S1", ("n",))
        v[:] = np.array([b"\xff", b"a"], "S1")
        nc.createVariable("x", "f4", ("n",))[:] = [1, 2]
    report = virtualize.check([p])
    (prob,) = [q for q in report.problems if q.kind == "unsupported-type"]
    assert (prob.loc.file, prob.loc.variable, prob.fatal) == (str(p), "c", False)
    assert "utf-8" in prob.message and report.ok
