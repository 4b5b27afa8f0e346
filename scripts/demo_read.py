"""Open a cube with xarray and check every variable against netCDF4's reads of the sources."""

import sys

import netCDF4
import numpy as np
import xarray as xr

cube, sources = sys.argv[1], sys.argv[2:]
ds = xr.open_dataset(cube, engine="virtualize")
print(ds)
print()
raw = xr.open_dataset(cube, engine="virtualize", decode_times=False, mask_and_scale=False)
for name in raw.variables:
    parts = []
    for path in sources:
        with netCDF4.Dataset(path) as nc:
            v = nc[name]
            v.set_auto_maskandscale(False)
            parts.append(v[...])
    dim = "time"
    src = np.concatenate(parts, axis=raw[name].dims.index(dim)) if dim in raw[name].dims else parts[0]
    same = np.array_equal(raw[name].values, src) and raw[name].dtype == src.dtype
    print(f"{name:6s} {'bit-identical to netCDF4' if same else 'DIFFERS from netCDF4'}")
    if not same:
        sys.exit(1)
