#!/usr/bin/env python
"""`virtualize catalog` at archive scale (issue 30): a synthetic CMIP6 DRS tree of 10,000 /
30,000 / 100,000 files catalogued in one run, its peak memory as the archive grows
(flat: the inventories are released dataset by dataset), an unchanged re-run, and, in
the same run, a loop of one `virtualize` process per dataset over the first datasets
(the way a user builds an archive today), as a ratio per dataset.

    python benchmarks/bench_catalog.py                       # 10,000 and 30,000 files
    python benchmarks/bench_catalog.py --sizes 10000 30000 100000
    python benchmarks/bench_catalog.py --quick               # 2,000 files, a smoke run
    python benchmarks/bench_catalog.py --json > r.json

The tree (under --workdir, made once per size and grown): datasets of `--per-dataset`
(20) monthly files, a year each (tas(time=12, lat=3, lon=4) f4, netCDF-4 by
netCDF4-python, deflate), in the CMIP6 DRS
`CMIP6/CMIP/INST<k>/MODEL<m>/historical/r<r>i1p1f1/Amon/tas/gn/v20190308/`. Only
`--per-dataset` distinct files are written (the years 2000, 2001, ...); every dataset's
files are hard links to them, so 100,000 files take the disk of 20 and the page cache
holds them (the scans read cached bytes: the figures are the catalog's own costs, not
the disk's). Each measurement runs in a fresh process: `wall s` its time, `main MB` its
peak resident set (ru_maxrss, imports included), `workers MB` the largest of its scan
workers'.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

PER_DATASET = 20
VERSION = "v20190308"


def _template_files(d: Path, n: int) -> list[Path]:
    """`n` yearly monthly files (2000, 2001, ...), written once."""
    import netCDF4
    import numpy as np

    d.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        p = d / f"year{2000 + i}.nc"
        out.append(p)
        if p.exists():
            continue
        with netCDF4.Dataset(p, "w") as ds:
            ds.createDimension("time", None)
            ds.createDimension("lat", 3)
            ds.createDimension("lon", 4)
            t = ds.createVariable("time", "f8", ("time",))
            t.units, t.calendar = "days since 2000-01-01", "noleap"
            t[:] = 365 * i + np.arange(12) * 30 + 15
            ds.createVariable("lat", "f8", ("lat",))[:] = [-30, 0, 30]
            ds.createVariable("lon", "f8", ("lon",))[:] = [0, 90, 180, 270]
            v = ds.createVariable("tas", "f4", ("time", "lat", "lon"), zlib=True,
                                  chunksizes=(12, 3, 4))
            v[:] = np.arange(144, dtype="f4").reshape(12, 3, 4) + 1000 * i
            ds.setncatts({"mip_era": "CMIP6", "table_id": "Amon", "variable_id": "tas",
                          "frequency": "mon", "grid_label": "gn"})
    return out


def dataset_dir(root: Path, k: int) -> Path:
    inst, model, member = k % 10, (k // 10) % 50, k // 500 + 1
    return (root / "CMIP6" / "CMIP" / f"INST{inst}" / f"MODEL{inst}-{model}" / "historical" /
            f"r{member}i1p1f1" / "Amon" / "tas" / "gn" / VERSION)


def grow(root: Path, files: int, per: int) -> int:
    """The tree holding `files` files (datasets added as hard links); its dataset count."""
    templates = _template_files(root.parent / "templates", per)
    n = files // per
    for k in range(n):
        d = dataset_dir(root, k)
        if d.is_dir():
            continue
        d.mkdir(parents=True)
        for i, t in enumerate(templates):
            os.link(t, d / f"tas_Amon_M{k}_historical_r1i1p1f1_gn_{2000 + i}01-{2000 + i}12.nc")
    k = n  # (datasets of a larger tree an earlier run left: removed, else counted)
    while dataset_dir(root, k).is_dir():
        shutil.rmtree(dataset_dir(root, k))
        k += 1
    return n


def _measure(argv: list[str]) -> None:
    """In a fresh process: one catalog run (or one virtualize of a dataset), as JSON."""
    kind, root, out = argv[:3]
    t0 = time.perf_counter()
    import virtualize
    t_import = time.perf_counter() - t0
    t0 = time.perf_counter()
    if kind == "catalog":
        r = virtualize.catalog([root], out, drs="cmip6", jobs=int(argv[3]))
        what = {"counts": r.counts, "scanned": r.scanned}
    else:
        virtualize.virtualize(sorted(str(p) for p in Path(root).glob("*.nc")), out, jobs=1)
        what = {}
    wall = time.perf_counter() - t0
    main_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    # the scan workers are still alive (idle, kept for the next scan): each one's peak from
    # /proc (VmHWM), then, once they are stopped and reaped, the largest child's ru_maxrss
    # (which counts only children that ended: read alone, it missed the live workers)
    from virtualize.run import workers
    peaks = [_hwm_mb(w.proc.proc.pid if hasattr(w.proc, "proc") else w.proc.popen.pid)
             for w in workers._idle if w.proc.is_alive()]
    workers._shutdown()
    ended = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps({"wall_s": wall, "import_s": t_import, "main_mb": main_mb,
                      "workers_mb": max([ended, *peaks]), "worker_peaks_mb": peaks,
                      **what}))


def _hwm_mb(pid: int) -> float:
    """A live process's peak resident set (VmHWM), MB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _run(*args: str) -> dict:
    done = subprocess.run([sys.executable, __file__, "--_measure", *args], capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 30_000])
    ap.add_argument("--per-dataset", type=int, default=PER_DATASET)
    ap.add_argument("--loop", type=int, default=20,
                    help="datasets built by one virtualize process each (default 20)")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--workdir", default="/tmp/bench_catalog")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    if "--_measure" in sys.argv:
        _measure(sys.argv[sys.argv.index("--_measure") + 1:])
        return 0
    a = ap.parse_args()
    sizes = [2000] if a.quick else sorted(a.sizes)
    work = Path(a.workdir)
    root = work / "tree"
    rows = []
    for n in sizes:
        t0 = time.perf_counter()
        datasets = grow(root, n, a.per_dataset)
        made = time.perf_counter() - t0
        out = work / f"catalog-{n}"
        shutil.rmtree(out, ignore_errors=True)
        first = _run("catalog", str(root), str(out), str(a.jobs))
        again = _run("catalog", str(root), str(out), str(a.jobs))
        rows.append({"files": n, "datasets": datasets, "tree_s": made, "build": first,
                     "rerun": again})
        print(f"{n} files, {datasets} datasets: catalog {first['wall_s']:.1f} s, "
              f"main {first['main_mb']:.0f} MB, workers {first['workers_mb']:.0f} MB; "
              f"unchanged re-run {again['wall_s']:.1f} s, main {again['main_mb']:.0f} MB",
              file=sys.stderr, flush=True)
    loop_dir = work / "loop"
    shutil.rmtree(loop_dir, ignore_errors=True)
    loop_dir.mkdir(parents=True)
    t0 = time.perf_counter()
    for k in range(a.loop):
        subprocess.run([sys.executable, "-m", "virtualize.cli", str(dataset_dir(root, k)),
                        "-o", str(loop_dir / f"d{k}.zarr"), "-q", "-j", "1"], check=True)
    loop_per = (time.perf_counter() - t0) / a.loop
    report = {"per_dataset": a.per_dataset, "jobs": a.jobs, "rows": rows,
              "loop": {"datasets": a.loop, "per_dataset_s": loop_per}}
    if a.json:
        print(json.dumps(report, indent=2))
        return 0
    base = rows[0]["build"]["main_mb"]
    print(f"{'files':>8} {'datasets':>8} {'wall s':>8} {'ms/file':>8} {'main MB':>8} "
          f"{'x first':>8} {'workers MB':>10} {'rerun s':>8} {'loop/catalog':>12}")
    for r in rows:
        b = r["build"]
        per = b["wall_s"] / r["datasets"]
        print(f"{r['files']:>8} {r['datasets']:>8} {b['wall_s']:>8.1f} "
              f"{1000 * b['wall_s'] / r['files']:>8.2f} {b['main_mb']:>8.0f} "
              f"{b['main_mb'] / base:>8.2f} {b['workers_mb']:>10.0f} "
              f"{r['rerun']['wall_s']:>8.1f} {loop_per / per:>12.1f}")
    print(f"loop: {a.loop} datasets, one `virtualize DIR -o OUT` process each: "
          f"{loop_per:.2f} s per dataset")
    return 0


if __name__ == "__main__":
    sys.exit(main())
