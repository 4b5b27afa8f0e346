"""What the benchmark scripts (bench_hdf5.py, bench_netcdf3.py; the scan comparisons of
bench_fits.py, bench_grib.py, bench_hdf4.py: `compare_scans`) share: running every
(tool, case) in a fresh worker process, timing and measuring it there, and reporting the
environment, a table and the JSON document.

A script supplies ``tool_ops(tool, case, files, out) -> (warmup, run, summarize)`` and the
result fields it reports (`FIELDS`), and runs itself as the worker (``--_worker SPEC``).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import tracemalloc
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator, Sequence

MB = 1024 * 1024

# Every result field a worker can report, in a sensible order; each script picks its own.
FIELDS = ("repeats", "runs", "times_s", "median_s", "py_peak_mb", "rss_delta_mb",
          "rss_peak_exact", "bytes_read", "note")


def log(*a) -> None:
    """Progress, to stderr (stdout is the table or the JSON)."""
    print(*a, file=sys.stderr, flush=True)


# -- input files -------------------------------------------------------------------------

def define_hourly(nc, title: str, ny: int, nx: int, extra_dims: dict[str, int] | None = None,
                  **tas_kw):
    """The header the benchmark inputs share: CF global attributes, dimensions time
    (unlimited), lat, lon (then `extra_dims`), the coordinate variables (hourly time) and
    tas(time, lat, lon) f4 in K, created with `tas_kw` (chunking, filters). Returns
    (time, lat, lon, tas); write the coordinates with `write_coords` once every variable
    is defined (a netCDF classic file would otherwise be laid out again)."""
    import numpy as np

    nc.Conventions = "CF-1.8"
    nc.title = title
    nc.createDimension("time", None)
    nc.createDimension("lat", ny)
    nc.createDimension("lon", nx)
    for name, size in (extra_dims or {}).items():
        nc.createDimension(name, size)
    t = nc.createVariable("time", "f8", ("time",))
    t.units, t.calendar, t.standard_name = "hours since 2000-01-01", "standard", "time"
    lat = nc.createVariable("lat", "f8", ("lat",))
    lat.units, lat.standard_name = "degrees_north", "latitude"
    lon = nc.createVariable("lon", "f8", ("lon",))
    lon.units, lon.standard_name = "degrees_east", "longitude"
    tas = nc.createVariable("tas", "f4", ("time", "lat", "lon"), fill_value=np.float32(1e20),
                            **tas_kw)
    tas.units, tas.standard_name = "K", "air_temperature"
    return t, lat, lon, tas


def write_coords(t, lat, lon, n_time: int) -> None:
    """The coordinate values of a `define_hourly` file of 4 x 4 cells and n_time hours."""
    import numpy as np

    lat[:] = [-67.5, -22.5, 22.5, 67.5]
    lon[:] = [45.0, 135.0, 225.0, 315.0]
    t[:] = np.arange(n_time, dtype="f8")


# -- the command line --------------------------------------------------------------------

def parser(doc: str) -> argparse.ArgumentParser:
    """An argument parser described by the first paragraph of a script's docstring."""
    return argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def add_selection(ap: argparse.ArgumentParser, tools: Sequence[str],
                  cases: Sequence[str]) -> None:
    """--tools and --cases: comma-separated subsets, all by default."""
    ap.add_argument("--tools", default=",".join(tools),
                    help="comma-separated subset of " + ", ".join(tools))
    ap.add_argument("--cases", default=",".join(cases),
                    help="comma-separated subset of " + ", ".join(cases))


def parse_args(ap: argparse.ArgumentParser, argv: list[str] | None, tool_ops: Callable,
               fields: Sequence[str], quick: dict[str, int]) -> argparse.Namespace | None:
    """Add the last options (--timeout per row, the hidden --_worker SPEC) and parse. In
    worker mode run that one row, print its result (`serve`) and return None. With
    --quick: one repeat, and each size option named in `quick` capped at its value."""
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per row before giving up")
    ap.add_argument("--_worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._worker:
        serve(args._worker, tool_ops, fields)
        return None
    if args.quick:
        for name, cap in quick.items():
            setattr(args, name, min(getattr(args, name), cap))
        args.repeats = 1
    return args


def pick(ap: argparse.ArgumentParser, value: str, known: Sequence[str], what: str) -> list[str]:
    """The items of a comma-separated option; an argparse error for an unknown one."""
    items = [v for v in value.split(",") if v]
    for v in items:
        if v not in known:
            ap.error(f"unknown {what} {v!r}")
    return items


@contextlib.contextmanager
def workdir(path: Path | None, prefix: str) -> Iterator[Path]:
    """`path`, or a temporary directory removed afterwards."""
    if path is not None:
        yield path
        return
    tmp = tempfile.mkdtemp(prefix=prefix)
    try:
        yield Path(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- measuring, in a worker process ------------------------------------------------------

def proc_field(path: str, field: str, scale: int = 1) -> int | None:
    """An integer field of a /proc file ("VmRSS" of /proc/self/status ...), times `scale`."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * scale
    except OSError:
        pass
    return None


def _rss(field: str) -> int | None:
    return proc_field("/proc/self/status", field, 1024)


def _rchar() -> int | None:
    return proc_field("/proc/self/io", "rchar")


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current resident set; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def measure(run: Callable, summarize: Callable, repeats: int, budget: float | None = None,
            py_peak: bool = False) -> dict:
    """Time `repeats` calls of `run` (fewer once `budget` seconds have gone, at least one),
    with the bytes each read and the rise of the peak resident set; with `py_peak`, one
    more run under tracemalloc. The note is `summarize` of the first result."""
    hwm_reset = reset_peak_rss()
    rss0 = _rss("VmRSS")
    times, reads, note = [], [], None
    started = time.perf_counter()
    while len(times) < repeats:
        r0 = _rchar()
        t0 = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - t0)
        r1 = _rchar()
        if r0 is not None and r1 is not None:
            reads.append(r1 - r0)
        if note is None:
            note = summarize(result)
        del result
        if budget is not None and time.perf_counter() - started > budget:
            break
    hwm = _rss("VmHWM")
    m = {"times": times, "reads": reads, "note": note, "hwm_reset": hwm_reset,
         "rss_delta_mb": (hwm - rss0) / MB if hwm is not None and rss0 is not None else None}
    if py_peak:
        gc.collect()
        tracemalloc.start()
        result = run()
        m["py_peak"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        del result
    return m


def worker(spec: dict, tool_ops: Callable, fields: Sequence[str]) -> dict:
    """One (tool, case) row: `tool_ops` gives (warmup, run, summarize); warm up, then
    `measure`. Reports `fields` (of `FIELDS`), or why the row was skipped or failed."""
    tool, case = spec["tool"], spec["case"]
    res: dict = {"tool": tool, "case": case}
    try:
        warmup, run, summarize = tool_ops(tool, case, spec["files"], Path(spec["out"]))
    except ImportError as e:
        return res | {"skipped": f"not installed ({e})"}
    try:
        warmup()  # lazy imports, first-call caches; on a small file
        gc.collect()
        m = measure(run, summarize, spec["repeats"], spec.get("budget"), "py_peak_mb" in fields)
    except Exception as e:  # a peer tool failing on these files is a result, not a crash
        tb = traceback.format_exc().strip().splitlines()
        return res | {"failed": f"{type(e).__name__}: {e}"[:400], "traceback": tb[-8:]}
    times, reads = m["times"], m["reads"]
    values = {
        "repeats": spec["repeats"],
        "runs": len(times),
        "times_s": times,
        "median_s": statistics.median(times),
        "py_peak_mb": m["py_peak"] / MB if "py_peak" in m else None,
        "rss_delta_mb": m["rss_delta_mb"],
        "rss_peak_exact": m["hwm_reset"],
        "bytes_read": int(statistics.median(reads)) if reads else None,
        "note": m["note"],
    }
    return res | {k: values[k] for k in fields}


def serve(spec_json: str, tool_ops: Callable, fields: Sequence[str]) -> None:
    """The --_worker mode: run one row and print its result as one line of JSON."""
    print(json.dumps(worker(json.loads(spec_json), tool_ops, fields)))


def run_worker(script: str, spec: dict, timeout: float) -> dict:
    """Run one row in a fresh process (`script` --_worker SPEC) and return its result."""
    cmd = [sys.executable, os.path.abspath(script), "--_worker", json.dumps(spec)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"tool": spec["tool"], "case": spec["case"],
                "failed": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        err = (p.stderr.strip().splitlines() or ["no output"])[-1]
        return {"tool": spec["tool"], "case": spec["case"],
                "failed": f"worker exited {p.returncode}: {err}"[:400]}
    return json.loads(lines[-1])


def run_rows(script: str, workdir: Path, cases: Sequence[str], tools: Sequence[str],
             plan: dict, spec: dict, timeout: float, digits: int) -> list[dict]:
    """Every planned (tool, case) row, case by case, each in its own worker writing its
    outputs under workdir/outputs; progress (the median to `digits` decimals) on stderr.
    `spec` is what every worker gets besides its tool, case and output folder."""
    out = workdir / "outputs"
    out.mkdir(exist_ok=True)
    results = []
    for case in cases:
        for tool in tools:
            if case not in plan[tool]:
                continue
            log(f"  {tool} / {case} ...")
            r = run_worker(script, {"tool": tool, "case": case, **spec, "out": str(out)},
                           timeout)
            log(f"    {r['median_s']:.{digits}f} s" if "median_s" in r else f"    {why(r)}")
            results.append(r)
    return results


# -- reporting ---------------------------------------------------------------------------

def environment(packages: Sequence[str]) -> dict:
    """Date, machine, Python and the installed versions of `packages` (None: not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    vers = {}
    for pkg in packages:
        try:
            vers[pkg] = version(pkg)
        except PackageNotFoundError:
            vers[pkg] = None
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f
                        if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.system()} {platform.machine()}, {cpu}, {os.cpu_count()} cores",
            "python": platform.python_version(), "versions": vers}


def report(doc: dict, as_json: bool, lines: Sequence[str]) -> None:
    """Print the report: two '# ...' lines on the environment (date, machine, Python;
    package versions), then `lines` (the table ...). With `as_json` the report goes to
    stderr and `doc` as JSON to stdout."""
    show = log if as_json else print
    env = doc["environment"]
    show(f"# {env['date']} | {env['machine']} | Python {env['python']}")
    show("# " + ", ".join(f"{k} {v}" for k, v in env["versions"].items() if v))
    for line in lines:
        show(line)
    if as_json:
        print(json.dumps(doc, indent=1))


def why(r: dict) -> str:
    """Why a row has no timings: skipped (not installed) or FAILED."""
    return r.get("skipped") or "FAILED: " + r.get("failed", "?")


def ratios(results: list[dict]) -> dict[str, dict[str, float]]:
    """Per case: each tool's median / virtualize's median."""
    base = {r["case"]: r["median_s"] for r in results
            if r["tool"] == "virtualize" and "median_s" in r}
    out: dict[str, dict[str, float]] = {}
    for r in results:
        if "median_s" in r and base.get(r["case"]):
            out.setdefault(r["case"], {})[r["tool"]] = r["median_s"] / base[r["case"]]
    return out


def human(n: int) -> str:
    """A byte count in B / KB / MB / GB."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


# Table cells: cell(row, ratio to virtualize or None) -> text.
Cell = Callable[[dict, "float | None"], str]


def median_cell(digits: int) -> Cell:
    return lambda r, x: f"{r['median_s']:.{digits}f}"


def rss_cell(r: dict, x: float | None) -> str:
    return f"{r['rss_delta_mb']:.1f}" if r.get("rss_delta_mb") is not None else "-"


def read_cell(r: dict, x: float | None) -> str:
    return human(r["bytes_read"]) if r.get("bytes_read") is not None else "-"


def ratio_cell(r: dict, x: float | None) -> str:
    return f"{x:.1f}x" if x is not None else "-"


def table(results: list[dict], case_width: int, columns: Sequence[tuple[str, int, Cell]]) -> str:
    """One line per row: tool, case, then `columns` (header, width, cell) right-aligned,
    then the note; rows without timings show '-' and why."""
    rel = ratios(results)
    head = (f"{'tool':<20} {'case':<{case_width}} "
            + " ".join(f"{title:>{width}}" for title, width, _ in columns) + "  note")
    lines = [head, "-" * len(head)]
    for r in results:
        lead = f"{r['tool']:<20} {r['case']:<{case_width}} "
        if "median_s" not in r:
            lines.append(lead + " ".join(f"{'-':>{width}}" for _, width, _ in columns)
                         + f"  {why(r)}")
            continue
        x = rel.get(r["case"], {}).get(r["tool"])
        lines.append(lead + " ".join(f"{cell(r, x):>{width}}" for _, width, cell in columns)
                     + f"  {r.get('note') or ''}")
    return "\n".join(lines)


# -- what the peers return ---------------------------------------------------------------

def kerchunk_refs(refs: dict, var: str = "tas") -> int:
    """How many chunk references of `var` a kerchunk reference set holds."""
    r = refs.get("refs", refs)
    return sum(1 for k in r if k.startswith(var + "/") and not k.rsplit("/", 1)[1].startswith("."))


def kerchunk_format(refs: dict) -> str:
    """'zarr v3' or 'zarr v2': the Zarr format of a kerchunk reference set."""
    r = refs.get("refs", refs)
    return "zarr v3" if any(k.endswith("zarr.json") for k in r) else "zarr v2"


def manifest_refs(manifest) -> int:
    """How many chunks a VirtualiZarr ChunkManifest references."""
    return int((manifest._lengths > 0).sum())


def local_registry():
    """A VirtualiZarr object-store registry for local files (file:// URLs); warnings off."""
    import warnings

    from obspec_utils.registry import ObjectStoreRegistry
    from obstore.store import LocalStore

    warnings.filterwarnings("ignore")
    return ObjectStoreRegistry({"file://": LocalStore()})


def store_refs(ms, var: str = "tas") -> int:
    """How many chunks of `var` a VirtualiZarr ManifestStore (a parser's output) references."""
    return manifest_refs(ms._group.arrays[var].manifest)


def dataset_refs(ds, var: str = "tas") -> int:
    """How many chunks of `var` a virtual xarray Dataset references."""
    return manifest_refs(ds[var].data.manifest)


def kerchunk_note(refs: dict) -> str:
    """The note of a kerchunk row: '<n> tas refs, zarr v2'."""
    return f"{kerchunk_refs(refs)} tas refs, {kerchunk_format(refs)}"


# -- the peers' jobs ---------------------------------------------------------------------

def kerchunk_one(translator) -> Callable[[str], dict]:
    """one(path): kerchunk's references of one file by `translator` (SingleHdf5ToZarr,
    NetCDF3ToZarr ...), nothing inlined."""
    def one(path: str) -> dict:
        return translator(path, inline_threshold=0).translate()
    return one


def json_job(make: Callable[[], dict], target: Path) -> Callable[[], dict]:
    """run() of a kerchunk job: make the references, dump them to `target` as JSON (with
    ujson, kerchunk's own writer), return them."""
    import ujson

    def run() -> dict:
        refs = make()
        with open(target, "w") as f:
            ujson.dump(refs, f)
        return refs
    return run


def to_kerchunk_job(open_ds: Callable, target: Path) -> Callable:
    """run() of a VirtualiZarr job: open the virtual dataset, write it to `target` as
    kerchunk JSON, return it."""
    def run():
        ds = open_ds()
        ds.vz.to_kerchunk(str(target), format="json")
        return ds
    return run


# -- the scan comparisons of one format (bench_fits.py, bench_grib.py, bench_hdf4.py) ------

def timed(fn, path: Path, repeats: int) -> tuple[float, str]:
    """The median time of `fn(path)` over `repeats` runs after a warm-up, and a note: a
    tool that fails is reported (NaN and its error), the run goes on."""
    try:
        fn(path)  # warm-up (imports)
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn(path)
            times.append(time.perf_counter() - t)
        return statistics.median(times), ""
    except Exception as e:
        return float("nan"), f"{type(e).__name__}: {str(e)[:80]}"


def compare_scans(doc: str, make: Callable[[Path, int], list[Path]],
                  tools: Sequence[tuple[str, Callable[[Path], object]]], argv=None, *,
                  quick: tuple[int, int] = (30, 1), full: tuple[int, int] = (300, 5)) -> int:
    """A scan benchmark's main: `make(tmp, n)` writes the files, each tool (virtualize
    first) scans each of them; a table of median times, the others as a ratio of
    virtualize's. `quick` / `full`: (n, repeats) with and without --quick."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    n, repeats = quick if args.quick else full
    with tempfile.TemporaryDirectory() as tmp:
        files = make(Path(tmp), n)
        print(f"{'file':12} {'tool':12} {'median s':>10}  note", file=sys.stderr)
        for path in files:
            base = None
            for name, fn in tools:
                t, note = timed(fn, path, repeats)
                base = t if base is None else base
                ratio = f"x{t / base:.2f} of {tools[0][0]}" if fn is not tools[0][1] and t == t \
                    else ""
                print(f"{path.name:12} {name:12} {t:10.4f}  {note or ratio}", file=sys.stderr)
    return 0
