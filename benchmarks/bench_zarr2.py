#!/usr/bin/env python
"""Scan speed of a Zarr v2 store as a source, against kerchunk's scanner of the same store
and the floor, measured in one process on the same store (warm page cache).

    python benchmarks/bench_zarr2.py               # 20,000 chunk files, median of 5
    python benchmarks/bench_zarr2.py --quick       # 2,000 chunk files, 1 run (smoke test)
    python benchmarks/bench_zarr2.py --json        # machine-readable (table on stderr)

The store: a zarr v2 group written by zarr-python, one array `v` (N, 8, 8) float32 in
chunks of (1, 8, 8), zstd, every 10th chunk never written (absent: reads as the fill), plus
a `time` coordinate. Tools:

  virtualize   virtualize.formats.scan(store): the inventory (metadata, every chunk file
               stat'ed, the time values read)
  kerchunk     kerchunk.zarr.single_zarr(store, inline_threshold=0): its reference dict
  floor        zarr-python's own metadata read (zarr.open(store, zarr_format=2) and the
               arrays' metadata) plus one os.scandir + stat of every chunk file: what any
               scanner of a store must do
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def write_store(path: Path, n: int) -> None:
    import numcodecs
    import numpy as np
    import zarr

    g = zarr.open_group(str(path), mode="w", zarr_format=2)
    a = g.create_array("v", shape=(n, 8, 8), chunks=(1, 8, 8), dtype="f4",
                       compressors=numcodecs.Zstd(), fill_value=np.nan)
    data = np.random.default_rng(0).random((n, 8, 8), dtype="f4")
    keep = np.arange(n) % 10 != 9
    for i in range(0, n, 1000):  # whole slabs, then the absent chunks removed
        a[i:i + 1000] = data[i:i + 1000]
    for i in np.flatnonzero(~keep):
        os.unlink(path / "v" / f"{i}.0.0")
    a.attrs["_ARRAY_DIMENSIONS"] = ["time", "y", "x"]
    t = g.create_array("time", shape=(n,), chunks=(n,), dtype="i8", fill_value=None)
    t[...] = np.arange(n)
    t.attrs.update({"_ARRAY_DIMENSIONS": ["time"], "units": "hours since 2000-01-01"})


def tools(store: str):
    def virtualize_scan():
        from virtualize.formats import scan

        inv = scan(store)
        return f"{int((inv.variables['v'].blocks.refs['length'] > 0).sum())} v refs"

    def kerchunk_scan():
        from kerchunk.zarr import single_zarr

        refs = single_zarr(store, inline_threshold=0)
        refs = refs.get("refs", refs)
        return f"{sum(1 for k in refs if k.startswith('v/') and not k.startswith('v/.'))} v refs"

    def floor():
        import zarr

        g = zarr.open(store, mode="r", zarr_format=2)
        [a.metadata for _, a in g.arrays()]
        n = 0
        for name in ("v", "time"):
            with os.scandir(os.path.join(store, name)) as it:
                n += sum(1 for e in it if not e.name.startswith(".") and e.stat().st_size >= 0)
        return f"{n} chunk files"

    return {"virtualize": virtualize_scan, "kerchunk": kerchunk_scan, "floor": floor}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--chunks", type=int)
    ap.add_argument("--repeats", type=int)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    n = args.chunks or (2000 if args.quick else 20000)
    repeats = args.repeats or (1 if args.quick else 5)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-zarr2-") as d:
        store = Path(d) / "store.zarr"
        write_store(store, n)
        for tool, run in tools(str(store)).items():
            try:
                run()  # warm-up: imports, page cache
                times = []
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    note = run()
                    times.append(time.perf_counter() - t0)
                rows.append({"tool": tool, "median_s": statistics.median(times),
                             "runs": len(times), "note": note})
            except Exception as e:  # a peer that is missing or fails is a result
                rows.append({"tool": tool, "failed": f"{type(e).__name__}: {e}"[:200]})
    floor = next((r["median_s"] for r in rows if r["tool"] == "floor" and "median_s" in r), None)
    lines = [f"store: {n} chunks of (1, 8, 8) float32, zstd, 10% absent",
             f"{'tool':12} {'median s':>9} {'runs':>4} {'x floor':>8}  note"]
    for r in rows:
        if "failed" in r:
            lines.append(f"{r['tool']:12} {'-':>9} {'-':>4} {'-':>8}  failed: {r['failed']}")
            continue
        x = f"{r['median_s'] / floor:.1f}x" if floor else "-"
        lines.append(f"{r['tool']:12} {r['median_s']:9.4f} {r['runs']:4d} {x:>8}  {r['note']}")
    out = sys.stderr if args.json else sys.stdout
    print("\n".join(lines), file=out)
    if args.json:
        print(json.dumps({"chunks": n, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
