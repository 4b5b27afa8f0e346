#!/usr/bin/env python
"""Start-up cost: `virtualize --version` and `python -c "import virtualize"`, whole
processes, against the floor `python -c "import numpy"`, measured in the same run,
interleaved (a change of the machine's load hits every case alike).

    python benchmarks/bench_startup.py              # 15 rounds, medians
    python benchmarks/bench_startup.py --rounds 5 --json

Each case is a fresh process started from here (`subprocess.run`, the wall time of the
whole process: interpreter start, imports, exit), with the environment as it is (set
PYTHONDONTWRITEBYTECODE or not alike for all). `x numpy` is a case's median over the
floor's median.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cases() -> dict[str, list[str]]:
    exe = Path(sys.executable).with_name("virtualize")
    return {
        "import numpy (floor)": [sys.executable, "-c", "import numpy"],
        "virtualize --version": [str(exe), "--version"] if exe.exists() else
        [sys.executable, "-m", "virtualize.cli", "--version"],
        "import virtualize": [sys.executable, "-c", "import virtualize"],
        "python (no imports)": [sys.executable, "-c", "pass"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep
               + os.environ.get("PYTHONPATH", ""))
    todo = cases()
    times: dict[str, list[float]] = {name: [] for name in todo}
    for name, cmd in todo.items():  # once each first: the page cache warm for all
        subprocess.run(cmd, env=env, capture_output=True, check=True)
    for _ in range(args.rounds):
        for name, cmd in todo.items():
            t = time.perf_counter()
            subprocess.run(cmd, env=env, capture_output=True, check=True)
            times[name].append(time.perf_counter() - t)
    floor = statistics.median(times["import numpy (floor)"])
    rows = [{"case": name, "median_s": statistics.median(ts), "min_s": min(ts),
             "x_numpy": statistics.median(ts) / floor, "runs": len(ts)}
            for name, ts in times.items()]
    if args.json:
        print(json.dumps({"python": sys.version.split()[0], "cpus": os.cpu_count(),
                          "rows": rows}, indent=1))
    out = sys.stderr if args.json else sys.stdout
    print(f"{'case':<24}{'median s':>10}{'min s':>9}{'x numpy':>9}", file=out)
    for r in rows:
        print(f"{r['case']:<24}{r['median_s']:>10.3f}{r['min_s']:>9.3f}{r['x_numpy']:>8.2f}x",
              file=out)


if __name__ == "__main__":
    main()
