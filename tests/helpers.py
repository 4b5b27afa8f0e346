"""Reading sources with their own libraries and cubes with real clients, for comparisons."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import fsspec
import h5py
import netCDF4
import numpy as np
import xarray as xr
import zarr
from zarr.storage import FsspecStore


@contextlib.contextmanager
def rectilinear():
    with zarr.config.set({"array.rectilinear_chunks": True}):
        yield


def source_values(files, name: str, dim: str | None, dims: tuple[str, ...]) -> np.ndarray:
    """One variable of a stack, concatenated along `dim` (at its place in `dims`), as the
    files' own library reads it: netCDF4-python (raw: no masking or scaling) for netCDF
    (netCDF-4 and classic), h5py for plain HDF5."""
    parts = []
    for f in files:
        with open(f, "rb") as raw:
            classic = raw.read(3) == b"CDF"  # netCDF classic: not HDF5 at all
        if not classic:
            with h5py.File(f, "r") as h:
                netcdf = "_NCProperties" in h.attrs
                if not netcdf:
                    parts.append(h[name][()])
                    continue
        with netCDF4.Dataset(f) as nc:
            v = nc[name]
            v.set_auto_maskandscale(False)
            parts.append(np.asarray(v[...]))
    if dim is not None and dim in dims:
        return np.concatenate(parts, axis=dims.index(dim))
    return parts[0]


def kerchunk_group(path) -> zarr.Group:
    """A kerchunk export opened with fsspec + zarr only (no virtualize code)."""
    fs = fsspec.filesystem("reference", fo=str(path), asynchronous=True)
    with rectilinear():
        return zarr.open_group(FsspecStore(fs, read_only=True, path=""), mode="r", zarr_format=3)


def kerchunk_xarray(path, **kw) -> xr.Dataset:
    with rectilinear():
        return xr.open_dataset("reference://", engine="zarr", zarr_format=3, consolidated=False,
                               storage_options={"fo": str(path)}, **kw)


def assert_same(actual, expected, what: str) -> None:
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    if actual.dtype.kind == "T" or expected.dtype.kind in "TOSU" and actual.dtype.kind in "TO":
        # text: the cube holds str; a source library may give str or UTF-8 bytes objects
        def text(a):
            return [x.decode("utf-8") if isinstance(x, bytes) else str(x)
                    for x in np.asarray(a, dtype=object).reshape(-1)]
        assert text(actual) == text(expected), f"{what}: text differs"
        return
    assert actual.dtype == expected.dtype.newbyteorder("="), \
        f"{what}: dtype {actual.dtype} != {expected.dtype}"
    if expected.dtype.kind in "fc":
        # bit-exact, NaN payloads included
        a = np.ascontiguousarray(actual).view(f"u{actual.dtype.itemsize}")
        e = np.ascontiguousarray(expected.astype(actual.dtype)).view(f"u{actual.dtype.itemsize}")
        assert np.array_equal(a, e), f"{what}: values differ"
    else:
        assert np.array_equal(actual, expected), f"{what}: values differ"


def read_pty(master: int) -> bytes:
    """Everything written to a pseudo-terminal whose other end is closed (EIO ends it)."""
    import os

    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    return out


def run_virtualize(*args, **kw):
    """The `virtualize` command in a subprocess (text output captured)."""
    exe = os.path.join(os.path.dirname(sys.executable), "virtualize")
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, **kw)


def scaled_month(path, m: int, fmt: str = "NETCDF4") -> str:
    """A monthly-like file: time (unlimited), lat/lon, tas with a scale_factor."""
    with netCDF4.Dataset(path, "w", format=fmt) as ds:
        ds.createDimension("time", None)
        ds.createDimension("lat", 4)
        ds.createDimension("lon", 5)
        t = ds.createVariable("time", "f8", ("time",))
        t.units = "days since 2024-01-01"
        t[:] = np.arange(3) + 3 * m
        ds.createVariable("lat", "f8", ("lat",))[:] = np.arange(4) * 10.0
        ds.createVariable("lon", "f8", ("lon",))[:] = np.arange(5) * 10.0
        v = ds.createVariable("tas", "i2", ("time", "lat", "lon"))
        v.scale_factor = np.float32(2.0)
        v.units = "K"
        v.set_auto_maskandscale(False)
        v[:] = (np.arange(60).reshape(3, 4, 5) + 100 * m).astype("i2")
    return str(path)


def time_series_file(path, var, days, *, tdtype="f8", units="days since 2019-01-01", chunk=1,
          fill: object = np.float32(1e20), missing_value=None, history=None):
    """`var`(time, x) over the given time values (netCDF4-python); data = 100 * step index
    + x (+ 0.5 for pr), so a value shows where it came from."""
    with netCDF4.Dataset(path, "w") as ds:
        ds.createDimension("time", None)
        ds.createDimension("x", 2)
        ds.history = history or f"made {path.name}"
        t = ds.createVariable("time", tdtype, ("time",))
        t.units, t.calendar = units, "standard"
        t[:] = np.asarray(days)
        kw = {"fill_value": fill} if fill is not None else {}
        v = ds.createVariable(var, "f4", ("time", "x"), chunksizes=(chunk, 2), zlib=True, **kw)
        if missing_value is not None:
            v.missing_value = np.float32(missing_value)
        v.units = "K"
        n = len(days)
        v[:] = (np.arange(n)[:, None] * 100 + np.arange(2)[None, :]
                + (0.5 if var == "pr" else 0)).astype("f4")
    return path


def fatal(report):
    return [p for p in report.problems if p.fatal]
