"""Bytes and requests of scanning remote files: virtualize next to kerchunk on the same URLs.

A range-capable HTTP server (tests/servers.py) on 127.0.0.1 serves one file per format
and counts the requests and bytes it sends. For each file: virtualize's scan alone
(`virtualize.inventory(url)`), virtualize's whole job (scan, plan, decode check of a few chunks,
cube written locally) and kerchunk's scanner (`SingleHdf5ToZarr`, `NetCDF3ToZarr`,
`tiff_to_zarr`, default fsspec options) on the same URL.

    python benchmarks/bench_remote.py [--json]
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "fixtures"))
from servers import RangeHTTPServer  # noqa: E402

import virtualize  # noqa: E402

from make_fixtures import daily_netcdf4  # noqa: E402


def make_files(d: Path) -> dict[str, Path]:
    import netCDF4
    import tifffile

    rng = np.random.default_rng(0)
    out = {}
    # netCDF-4, 60 chunks of 64 KB (3.9 MB), uncompressed; the same zlib: 365 chunks
    out["netCDF-4 (3.9 MB, 60 chunks)"] = daily_netcdf4(d / "big4.nc", 60)
    out["netCDF-4 zlib (365 chunks)"] = daily_netcdf4(d / "big4z.nc", 365, zlib=True,
                                                      coords=False, decimals=2)
    p = d / "classic.nc"  # netCDF classic, 2000 records
    with netCDF4.Dataset(p, "w", format="NETCDF3_64BIT_OFFSET") as nc:
        nc.createDimension("time", None)
        nc.createDimension("y", 20)
        nc.createDimension("x", 20)
        t = nc.createVariable("time", "f8", ("time",))
        t.units = "days since 2024-01-01"
        v = nc.createVariable("tas", "f4", ("time", "y", "x"))
        t[:2000] = np.arange(2000)
        v[:2000] = rng.random((2000, 20, 20), dtype=np.float32)
    out["netCDF classic (3.2 MB, 2000 records)"] = p
    p = d / "tiled.tif"  # tiled, deflate
    tifffile.imwrite(p, rng.integers(0, 1000, (2048, 2048), dtype=np.uint16), tile=(256, 256),
                     compression="zlib")
    out["TIFF (2048^2 u2, 64 tiles, zlib)"] = p
    return out


def kerchunk_scan(url: str, fmt: str):
    if fmt.startswith("netCDF-4"):
        from kerchunk.hdf import SingleHdf5ToZarr
        return SingleHdf5ToZarr(url, inline_threshold=0).translate()
    if fmt.startswith("netCDF classic"):
        from kerchunk.netCDF3 import NetCDF3ToZarr
        return NetCDF3ToZarr(url, inline_threshold=0).translate()
    from kerchunk.tiff import tiff_to_zarr
    return tiff_to_zarr(url)


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        files = make_files(d)
        srv = RangeHTTPServer(d)
        try:
            for fmt, path in files.items():
                url = f"{srv.url}/{path.name}"
                size = path.stat().st_size
                for tool in ("virtualize scan", "virtualize job", "kerchunk"):
                    srv.reset()
                    note = ""
                    try:
                        if tool == "virtualize scan":
                            inv = virtualize.inventory(url)
                            note = f"inventory: {inv.requests} requests, {inv.bytes_read} B"
                        elif tool == "virtualize job":
                            virtualize.virtualize(url, d / f"{path.stem}.zarr", overwrite=True,
                                                  scan_timeout=None)
                        else:
                            kerchunk_scan(url, fmt)
                    except Exception as e:  # noqa: BLE001 - a peer that fails is shown
                        note = f"failed: {type(e).__name__}: {str(e)[:60]}"
                    rows.append({"file": fmt, "size": size, "tool": tool,
                                 "requests": srv.requests, "bytes": srv.bytes_sent,
                                 "percent": round(100 * srv.bytes_sent / size, 2), "note": note})
        finally:
            srv.stop()
    if "--json" in sys.argv:
        print(json.dumps(rows, indent=1))
        out = sys.stderr
    else:
        out = sys.stdout
    print(f"{'file':40} {'tool':16} {'requests':>8} {'bytes':>10} {'% of file':>9}  note", file=out)
    for r in rows:
        print(f"{r['file']:40} {r['tool']:16} {r['requests']:>8} {r['bytes']:>10} "
              f"{r['percent']:>8.2f}%  {r['note']}", file=out)


if __name__ == "__main__":
    main()
