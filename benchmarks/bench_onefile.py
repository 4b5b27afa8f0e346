#!/usr/bin/env python
"""One file, whole processes: `virtualize check FILE` against kerchunk's scanner run as a
process on the same file, as a scientist runs either from a shell (start-up, imports,
the scan, and for virtualize the plan and the decode check, all included).

    python benchmarks/bench_onefile.py              # GRIB2, FITS, HDF4 from tests/data; 7 pairs
    python benchmarks/bench_onefile.py -n 3 FILE... # other files (their format by suffix)

Per file the two commands run in turn (virtualize, kerchunk, virtualize, ...), each in a
fresh process; `wall` and `cpu` (user + system of the process and its children: scan
workers included) are medians, `x kerchunk` virtualize's median over kerchunk's, and the
ratio of each pair (the median of those) is given too: on a shared machine the pairs keep
the ratio meaningful when the machine's speed drifts. Both run as installed packages run:
with their compiled .pyc files (PYTHONDONTWRITEBYTECODE is dropped from the environment,
so that the warm-up run writes virtualize's, as kerchunk's were written when installed).

kerchunk's scanners: GRIB `kerchunk.grib2.scan_grib(path)`, FITS
`kerchunk.fits.process_file(path)`, HDF4 `kerchunk.hdf4.HDF4ToZarr(path).translate()`.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
FILES = (DATA / "cfgrib" / "regular_ll_sfc.grib", DATA / "fits" / "arange.fits",
         DATA / "hdf4" / "SDSfloat2.hdf")
PEERS = {
    ".grib": "from kerchunk.grib2 import scan_grib; scan_grib(sys.argv[1])",
    ".grib2": "from kerchunk.grib2 import scan_grib; scan_grib(sys.argv[1])",
    ".fits": "from kerchunk.fits import process_file; process_file(sys.argv[1])",
    ".hdf": "from kerchunk.hdf4 import HDF4ToZarr; HDF4ToZarr(sys.argv[1]).translate()",
}


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run(argv: list[str]) -> tuple[float, float, int]:
    """Wall and CPU seconds of one process (its children included) and its exit code."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    code = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          env=ENV).returncode
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, code


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path, default=list(FILES))
    ap.add_argument("-n", "--runs", type=int, default=7, help="pairs of runs per file")
    args = ap.parse_args(argv)
    exe = Path(sys.executable)
    virtualize = [str(exe.with_name("virtualize"))] if exe.with_name("virtualize").exists() \
        else [str(exe), "-m", "virtualize.cli"]
    print(f"{'file':28s} {'tool':10s} {'wall s':>8s} {'cpu s':>8s} {'x kerchunk':>10s} "
          f"{'(pairs)':>8s}  note")
    for path in args.files:
        peer = PEERS.get(path.suffix.lower())
        cmds = {"virtualize": virtualize + ["check", str(path)]}
        if peer is not None:
            cmds["kerchunk"] = [str(exe), "-c", f"import sys; {peer}", str(path)]
        for argv_ in cmds.values():  # warm-up: the page cache, the .pyc files
            run(argv_)
        got: dict[str, list[tuple[float, float, int]]] = {k: [] for k in cmds}
        for _ in range(args.runs):
            for k, argv_ in cmds.items():
                got[k].append(run(argv_))
        med = {k: (statistics.median(w for w, _c, _x in v), statistics.median(c for _w, c, _x in v))
               for k, v in got.items()}
        for k, v in got.items():
            codes = {x for _w, _c, x in v}
            note = "" if codes == {0} else f"exit codes {sorted(codes)}"
            ratio = pairs = ""
            if k == "virtualize" and "kerchunk" in med:
                ratio = f"{med[k][1] / med['kerchunk'][1]:.2f}x"
                pairs = f"{statistics.median(a[1] / b[1] for a, b in zip(v, got['kerchunk'])):.2f}x"
            print(f"{path.name:28s} {k:10s} {med[k][0]:8.3f} {med[k][1]:8.3f} {ratio:>10s} "
                  f"{pairs:>8s}  {note}", flush=True)
    print(f"# cpu: user + system, children included; median of {args.runs}; "
          f"load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
