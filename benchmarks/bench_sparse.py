#!/usr/bin/env python
"""Reading a sparse cube whole, against cfgrib reading the same GRIB file, in the same run.

cfgrib's sample `ncep-seasonal-monthly.grib` (89 KB): 372 GRIB1 messages that cfgrib
(and virtualize) lay out as one array of about (number 124, time 124, step 92, 7, 12),
1.4 million chunk cells of which 372 exist. The biggest array of each (whatever it is
named: the layout may change) is read whole, in a fresh process per measurement:

  cfgrib             xr.open_dataset(grib, engine="cfgrib").<var>.values (float32)
  open:<kind>        virtualize.open(output)[var][...] of the cube directory, the kerchunk
                     JSON, the kerchunk parquet set, the Icechunk repository
  xarray:<kind>      xr.open_dataset(output, engine="virtualize")[var].values
  zarr:<kind>        (--plain) zarr-python's own read of the same store, every chunk asked
                     for: what virtualize.open did before (minutes)
  floor              numpy.full(shape, nan, dtype): the output array alone (its pages are
                     first touched here; on a VM that is most of every reader's time)

Timed: open + read (imports done before). `x cfgrib` is the median over cfgrib's median in
the same run; values are checked against cfgrib's (bit for bit, after its float32 cast).

    python benchmarks/bench_sparse.py                          # median of 3 processes
    python benchmarks/bench_sparse.py --grib PATH --repeats 1 --plain
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = "ncep-seasonal-monthly.grib"
KINDS = {"cube": "cube.zarr", "kerchunk": "refs.json", "parquet": "refs.parq",
         "icechunk": "repo.icechunk"}

MEASURE = r"""
import json, sys, time
import numpy as np
how, target, check = sys.argv[1], sys.argv[2], sys.argv[3]

def biggest_zarr(g):
    arrays = []
    def walk(g, prefix=""):
        for name, a in g.arrays():
            arrays.append((a.size, prefix + name))
        for name, sub in g.groups():
            walk(sub, prefix + name + "/")
    walk(g)
    return max(arrays)[1]

if how == "cfgrib":
    import xarray as xr, cfgrib  # noqa: F401
    t0 = time.perf_counter()
    ds = xr.open_dataset(target, engine="cfgrib", backend_kwargs={"indexpath": ""})
    name = max(ds.data_vars, key=lambda v: ds[v].size)
    values = ds[name].values
elif how == "floor":
    shape, dtype = json.loads(target)
    t0 = time.perf_counter()
    values = np.full(shape, np.nan, dtype=dtype)
elif how == "open":
    import virtualize, zarr  # noqa: F401
    t0 = time.perf_counter()
    g = virtualize.open(target)
    values = g[biggest_zarr(g)][...]
elif how == "xarray":
    import virtualize, xarray as xr, zarr  # noqa: F401
    t0 = time.perf_counter()
    ds = xr.open_dataset(target, engine="virtualize")
    name = max(ds.data_vars, key=lambda v: ds[v].size)
    values = ds[name].values
elif how == "zarr":
    import zarr
    from virtualize.open import open_store
    from virtualize.outputs.base import rectilinear_enabled
    t0 = time.perf_counter()
    with rectilinear_enabled(codecs=False):
        g = zarr.open_group(open_store(target), mode="r", zarr_format=3)
    values = g[biggest_zarr(g)][...]
t1 = time.perf_counter()
out = {"s": t1 - t0, "shape": list(values.shape), "dtype": str(values.dtype)}
if check != "-":
    want = np.load(check)
    got = values.astype(want.dtype)
    out["equal"] = bool(got.shape == want.shape and
                        np.array_equal(got, want, equal_nan=True))
    out["present"] = int(np.isfinite(values).sum())
if sys.argv[4] != "-":
    np.save(sys.argv[4], values)
print(json.dumps(out))
"""


def log(*a) -> None:
    print(*a, file=sys.stderr, flush=True)


def run(how: str, target: str, check: str, save: str = "-") -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep
               + os.environ.get("PYTHONPATH", ""))
    env.setdefault("ICECHUNK_LOG", "error")  # (its local-storage warnings)
    r = subprocess.run([sys.executable, "-c", MEASURE, how, target, check, save],
                       capture_output=True, text=True, env=env)
    if r.returncode != 0:
        return {"error": (r.stderr or r.stdout).strip().splitlines()[-1][:200]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grib", default=os.environ.get("CFGRIB_SAMPLES", "/work/cfgrib-samples")
                    + "/" + SAMPLE, help=f"cfgrib's {SAMPLE} (its tests/sample-data)")
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes per case (median)")
    ap.add_argument("--kinds", default="cube,kerchunk,parquet,icechunk")
    ap.add_argument("--xarray", default="cube,kerchunk", help="kinds read through xarray too")
    ap.add_argument("--plain", action="store_true",
                    help="also zarr-python's own read of the cube directory (minutes)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    grib = Path(args.grib)
    if not grib.exists():
        sys.exit(f"{grib}: not found (cfgrib's repository, tests/sample-data/{SAMPLE}; "
                 "--grib PATH)")
    sys.path.insert(0, str(ROOT / "src"))
    os.environ.setdefault("ICECHUNK_LOG", "error")
    import virtualize

    with tempfile.TemporaryDirectory(prefix="bench-sparse-") as tmp:
        work = Path(tmp)
        kinds = [k for k in args.kinds.split(",") if k]
        for kind in kinds:
            t = time.perf_counter()
            virtualize.virtualize([grib], work / KINDS[kind])
            log(f"  {kind}: written in {time.perf_counter() - t:.1f} s")
        want = str(work / "cfgrib.npy")
        first = run("cfgrib", str(grib), "-", want)  # (its values: what the others equal)
        if "error" in first:
            sys.exit(f"cfgrib: {first['error']}")
        cases = [("cfgrib", "cfgrib", str(grib)),
                 ("floor", "floor", json.dumps([first["shape"], "float64"]))]
        cases += [(f"open:{k}", "open", str(work / KINDS[k])) for k in kinds]
        cases += [(f"xarray:{k}", "xarray", str(work / KINDS[k]))
                  for k in args.xarray.split(",") if k in kinds]
        if args.plain:
            cases.append(("zarr:cube", "zarr", str(work / KINDS["cube"])))
        rows = []
        for repeat in range(args.repeats):  # interleaved: a load change hits every case
            for i, (label, how, target) in enumerate(cases):
                if label.startswith("zarr:") and repeat:
                    continue  # (once: minutes)
                r = run(how, target, want if how != "floor" else "-")
                if repeat == 0:
                    rows.append({"case": label, "times_s": [], **r})
                if "error" in r:
                    rows[i]["error"] = r["error"]
                else:
                    rows[i]["times_s"].append(r["s"])
                log(f"  {label}: {r.get('s', r.get('error'))}")
        for r in rows:
            r["median_s"] = statistics.median(r["times_s"]) if r["times_s"] else None
        base = rows[0]["median_s"]
        for r in rows:
            r["x_cfgrib"] = r["median_s"] / base if r["median_s"] and base else None
    doc = {"grib": str(grib), "size_bytes": grib.stat().st_size, "rows": rows,
           "python": sys.version.split()[0], "cpus": os.cpu_count()}
    if args.json:
        print(json.dumps(doc, indent=1))
    out = sys.stderr if args.json else sys.stdout
    print(f"{grib.name}: {grib.stat().st_size / 1024:.0f} KB; array {first['shape']}; "
          f"median of {args.repeats} fresh processes", file=out)
    print(f"{'case':<18}{'median s':>10}{'x cfgrib':>10}  {'dtype':<8} note", file=out)
    for r in rows:
        med = f"{r['median_s']:.3f}" if r["median_s"] else "-"
        x = f"{r['x_cfgrib']:.2f}x" if r["x_cfgrib"] else "-"
        note = r.get("error") or ("" if r["case"] == "floor" else
                                  f"equal to cfgrib: {r.get('equal', True)}, "
                                  f"{r.get('present', '?')} values")
        print(f"{r['case']:<18}{med:>10}{x:>10}  {r.get('dtype', ''):<8} {note}", file=out)


if __name__ == "__main__":
    main()
