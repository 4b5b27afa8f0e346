"""Opening cubes at scale: `virtualize.open` + one chunk read, and xarray, of 10,000- and
1,000,000-chunk cubes as a cube directory (local, and over HTTP), an Icechunk repository,
a kerchunk JSON and kerchunk parquet references; the last two also by fsspec + zarr +
xarray alone, in a process that never imports virtualize.

The input is real: one HDF5 file written by h5py, `v` of shape (N, 4) int16 in N chunks of
one row (uncompressed, 8 bytes each), plus a 4-value coordinate. It is scanned and planned
once (`virtualize.check`), and the plan written as each output. Every measurement runs in
a fresh Python process: `import virtualize, xarray, zarr` first (RSS baseline), then the
timed steps: `virtualize.open` (the first in the process, so with what it imports lazily),
one chunk read (the last), `xr.open_dataset(engine="virtualize")` and a read of the same
row through it, then open + chunk read again (`again`: the one-time costs paid); peak RSS
is the process's high-water mark (VmHWM) minus the baseline. The cube directory is also
read over HTTP (the range server of tests/servers.py on 127.0.0.1), counting its requests
and bytes.

    python benchmarks/bench_open.py                 # 10,000 and 1,000,000 chunks
    python benchmarks/bench_open.py --sizes 10000,100000 --json
    python benchmarks/bench_open.py --work /tmp/bench-open   # keep (and reuse) the inputs
    python benchmarks/bench_open.py --sizes 1000000 --outputs kerchunk,parquet,plain
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MB = 1024 * 1024

MEASURE = r"""
import json, sys, time
import numpy as np, xarray as xr, zarr
import virtualize

def rss_mb(field="VmRSS"):  # VmHWM: this process's peak (ru_maxrss counts the parent's)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field)) / 1024

target, n = sys.argv[1], int(sys.argv[2])
base = rss_mb()
t0 = time.perf_counter()
g = virtualize.open(target)
t1 = time.perf_counter()
row = g["v"][n - 1]
t2 = time.perf_counter()
ds = xr.open_dataset(target, engine="virtualize")
t3 = time.perf_counter()
xrow = ds["v"][n - 1].values
t4 = time.perf_counter()
g2 = virtualize.open(target)  # again, in the same process: one-time imports done
row2 = g2["v"][n - 1]
t5 = time.perf_counter()
want = (np.arange((n - 1) * 4, n * 4) % 30000).astype("<i2")
assert (row == want).all() and (xrow == want).all() and (row2 == want).all(), (row, xrow)
peak = rss_mb("VmHWM")
print(json.dumps({"open_s": t1 - t0, "chunk_s": t2 - t1, "xr_open_s": t3 - t2,
                  "xr_chunk_s": t4 - t3, "again_s": t5 - t4, "rss_base_mb": base, "rss_mb": rss_mb() - base,
                  "peak_mb": peak - base}))
"""

# fsspec's reference filesystem + zarr + xarray, without virtualize: a kerchunk JSON, or
# parquet references (LazyReferenceMapper, pyarrow engine)
MEASURE_PLAIN = r"""
import json, sys, time
import numpy as np, xarray as xr, zarr, fsspec
from fsspec.implementations.reference import LazyReferenceMapper

def rss_mb(field="VmRSS"):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field)) / 1024

target, n = sys.argv[1], int(sys.argv[2])
zarr.config.set({"array.rectilinear_chunks": True})

def options():
    if target.endswith(".parq"):
        return {"fo": LazyReferenceMapper(target, engine="pyarrow"), "remote_protocol": "file"}
    return {"fo": target}

def group():
    fs = fsspec.filesystem("reference", asynchronous=True, skip_instance_cache=True,
                           **options())
    return zarr.open_group(zarr.storage.FsspecStore(fs, read_only=True), mode="r")

base = rss_mb()
t0 = time.perf_counter()
g = group()
t1 = time.perf_counter()
row = g["v"][n - 1]
t2 = time.perf_counter()
ds = xr.open_dataset("reference://", engine="zarr", storage_options=options())
t3 = time.perf_counter()
xrow = ds["v"][n - 1].values
t4 = time.perf_counter()
row2 = group()["v"][n - 1]
t5 = time.perf_counter()
want = (np.arange((n - 1) * 4, n * 4) % 30000).astype("<i2")
assert (row == want).all() and (xrow == want).all() and (row2 == want).all(), (row, xrow)
assert "virtualize" not in sys.modules
peak = rss_mb("VmHWM")
print(json.dumps({"open_s": t1 - t0, "chunk_s": t2 - t1, "xr_open_s": t3 - t2,
                  "xr_chunk_s": t4 - t3, "again_s": t5 - t4, "rss_base_mb": base,
                  "rss_mb": rss_mb() - base, "peak_mb": peak - base}))
"""


def log(*a) -> None:
    print(*a, file=sys.stderr, flush=True)


def build(work: Path, n: int, kinds=("cube", "icechunk", "kerchunk", "parquet")
          ) -> dict[str, Path]:
    """The HDF5 file of n chunks and the outputs `kinds` of its plan (reused when
    present)."""
    import h5py
    import numpy as np

    d = work / f"n{n}"
    out = {"h5": d / "data" / "big.h5", "cube": d / "cube.zarr",
           "icechunk": d / "repo.icechunk", "kerchunk": d / "refs.json",
           "parquet": d / "refs.parq"}
    if all(out[k].exists() for k in ("h5", *kinds)):
        return out
    if not out["h5"].exists():
        shutil.rmtree(d, ignore_errors=True)
        (d / "data").mkdir(parents=True)
        t = time.perf_counter()
        with h5py.File(out["h5"], "w") as f:
            v = f.create_dataset("v", shape=(n, 4), chunks=(1, 4), dtype="<i2")
            step = 100_000
            for a in range(0, n, step):
                b = min(n, a + step)
                v[a:b] = (np.arange(a * 4, b * 4) % 30000).astype("<i2").reshape(b - a, 4)
            f.create_dataset("x", data=np.arange(4, dtype="<f8"))
        log(f"  n={n}: HDF5 written in {time.perf_counter() - t:.1f} s "
            f"({out['h5'].stat().st_size / MB:.1f} MB)")
    sys.path.insert(0, str(ROOT / "src"))
    import virtualize
    from virtualize.outputs.cube.writer import write_cube
    from virtualize.outputs.icechunk.writer import write_icechunk
    from virtualize.outputs.kerchunk.writer import write_kerchunk
    from virtualize.outputs.parquet.writer import write_parquet

    t = time.perf_counter()
    report = virtualize.check([out["h5"]], scan_timeout=None)
    assert report.ok, report.problems
    log(f"  n={n}: scanned and planned in {time.perf_counter() - t:.1f} s")
    for kind, write in (("cube", write_cube), ("icechunk", write_icechunk),
                        ("kerchunk", write_kerchunk), ("parquet", write_parquet)):
        if kind not in kinds or out[kind].exists():  # (kept from an earlier run: --work)
            continue
        t = time.perf_counter()
        write(report.plan, out[kind])
        log(f"  n={n}: {kind} written in {time.perf_counter() - t:.1f} s")
    return out


def size_of(p: Path) -> int:
    if p.is_file():
        return p.stat().st_size
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def measure(target: str, n: int, repeats: int, script: str = MEASURE) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep
               + os.environ.get("PYTHONPATH", ""))
    if script is MEASURE_PLAIN:  # (nothing of virtualize on the path)
        env.pop("PYTHONPATH", None)
    runs = []
    for _ in range(repeats):
        r = subprocess.run([sys.executable, "-c", script, target, str(n)],
                           capture_output=True, text=True, env=env)
        if r.returncode != 0:
            return {"error": (r.stderr or r.stdout).strip().splitlines()[-1][:200]}
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    best = min(runs, key=lambda x: x["open_s"] + x["chunk_s"])
    return {**best, "runs": len(runs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,1000000")
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes per case (best)")
    ap.add_argument("--work", help="where the inputs are built (kept); default a temp dir")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--outputs", default="cube,http,icechunk,kerchunk,parquet,plain",
                    help="which cases: cube, http (the cube over HTTP), icechunk, kerchunk, "
                         "parquet, plain (the kerchunk JSON and parquet without virtualize)")
    args = ap.parse_args()
    chosen = set(args.outputs.split(","))
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="bench-open-"))
    work.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT / "tests"))
    from servers import RangeHTTPServer

    srv = RangeHTTPServer(work)
    results = []
    try:
        for n in sizes:
            log(f"building n={n} in {work}")
            kinds = [k for k in ("cube", "icechunk", "kerchunk", "parquet")
                     if k in chosen or (k == "cube" and "http" in chosen)
                     or (k in ("kerchunk", "parquet") and "plain" in chosen)]
            out = build(work, n, kinds)
            rel = out["cube"].relative_to(work).as_posix()
            cases = [(k, label, target, p, script) for k, label, target, p, script in (
                ("cube", "cube directory", str(out["cube"]), out["cube"], MEASURE),
                ("http", "cube directory over HTTP", f"{srv.url}/{rel}", out["cube"], MEASURE),
                ("icechunk", "Icechunk repository", str(out["icechunk"]), out["icechunk"],
                 MEASURE),
                ("kerchunk", "kerchunk JSON", str(out["kerchunk"]), out["kerchunk"], MEASURE),
                ("parquet", "kerchunk parquet", str(out["parquet"]), out["parquet"], MEASURE),
                ("plain", "JSON, fsspec alone", str(out["kerchunk"]), out["kerchunk"],
                 MEASURE_PLAIN),
                ("plain", "parquet, fsspec alone", str(out["parquet"]), out["parquet"],
                 MEASURE_PLAIN)) if k in chosen]
            for _, label, target, path, script in cases:
                nbytes = size_of(path)
                srv.reset()
                r = measure(target, n, args.repeats, script)
                r.update(chunks=n, output=label, output_mb=nbytes / MB)
                if "HTTP" in label:  # one process: open + chunk, then xarray's open + chunk
                    r["http_requests"] = srv.requests // max(r.get("runs", 1), 1)
                    r["http_kb"] = srv.bytes_sent / 1024 / max(r.get("runs", 1), 1)
                log(f"  {label}: {r}")
                results.append(r)
    finally:
        srv.stop()
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    env = {"python": platform.python_version(), "machine": platform.machine(),
           "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d")}
    if args.json:
        print(json.dumps({"environment": env, "results": results}, indent=1))
    head = (f"{'chunks':>9} {'output':<26} {'size MB':>8} {'open s':>7} {'chunk s':>8} "
            f"{'xr open s':>9} {'again s':>8} {'peak MB':>8} {'HTTP req':>8} {'HTTP KB':>8}")
    lines = [f"python {env['python']}, {env['cpus']} cpus, {env['date']}", head]
    for r in results:
        if "error" in r:
            lines.append(f"{r['chunks']:>9} {r['output']:<26} error: {r['error']}")
            continue
        lines.append(f"{r['chunks']:>9,} {r['output']:<26} {r['output_mb']:>8.1f} "
                     f"{r['open_s']:>7.3f} {r['chunk_s']:>8.3f} {r['xr_open_s']:>9.3f} {r['again_s']:>8.3f} "
                     f"{r['peak_mb']:>8.1f} {r.get('http_requests', ''):>8} "
                     f"{(format(r['http_kb'], '.0f') if 'http_kb' in r else ''):>8}")
    print("\n".join(lines), file=sys.stderr if args.json else sys.stdout)


if __name__ == "__main__":
    main()
