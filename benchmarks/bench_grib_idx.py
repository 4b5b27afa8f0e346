#!/usr/bin/env python
"""Remote GRIB scans with and without a `.idx` inventory sidecar (NOAA's GFS / HRRR
buckets publish one next to every file), against kerchunk's `scan_grib` and its `.idx`
path, in bytes and requests a range-capable HTTP server on 127.0.0.1 (tests/servers.py)
counts, and time as a ratio to virtualize's scan with the sidecar, in the same run.

    python benchmarks/bench_grib_idx.py            # 240 messages (31 MB); median of 3
    python benchmarks/bench_grib_idx.py --quick    # 24 messages, 1 repeat (smoke test)
    python benchmarks/bench_grib_idx.py --json

The input, written by ecCodes from its GRIB2 sample: a GFS-like file on a 1-degree global
grid (65,160 points, 16-bit simple packing: 130 kB a field), t and gh as single-field
messages and u / v of each level as one message of two fields (as NCEP packs them), on
20 pressure levels x N/60 steps; its inventory `<file>.idx` in wgrib2's format
(`n[.k]:offset:d=YYYYMMDDHH:VAR:level:forecast:`), written from the messages' offsets.

Cases:

  virtualize              virtualize.formats.scan(url), no sidecar: the length walk by
                          ranged reads (64 KiB blocks), keys from sections 1-4
  virtualize .idx         the same with the sidecar: every message's headers and last 4
                          bytes fetched in one batch of exact ranges, each checked (GRIB at
                          the offset, sections adding up to a 7777 where they say, ending
                          where the next entry begins) before it is used
  kerchunk scan_grib      kerchunk.grib2.scan_grib(url): every message read and decoded
  kerchunk .idx           kerchunk's `parse_grib_idx(url)`: the sidecar only (its
                          `map_from_index` then needs a mapping `build_idx_grib_mapping`
                          made by a `scan_grib` of another file of the same layout; nothing
                          of the GRIB file itself is read or checked)
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from servers import RangeHTTPServer  # noqa: E402

LEVELS = (1000, 975, 950, 925, 900, 850, 800, 750, 700, 650, 600, 550, 500, 450, 400, 350,
          300, 250, 200, 100)


def make(d: Path, n: int, multi: bool = True) -> Path:
    """The GFS-like file and its wgrib2 inventory (see the module's docstring); `multi`
    False: u and v as messages of their own (GFS's pgrb2 files), else in one (NAM's)."""
    from virtualize.codecs import load_eccodes

    ec = load_eccodes()  # (after pyproj: docs/grib.md, "Known issue")
    h = ec.codes_grib_new_from_samples("GRIB2")
    for key, v in (("Ni", 360), ("Nj", 181), ("numberOfDataPoints", 65160),
                   ("latitudeOfFirstGridPointInDegrees", 90.0),
                   ("latitudeOfLastGridPointInDegrees", -90.0),
                   ("longitudeOfFirstGridPointInDegrees", 0.0),
                   ("longitudeOfLastGridPointInDegrees", 359.0),
                   ("iDirectionIncrementInDegrees", 1.0), ("jDirectionIncrementInDegrees", 1.0)):
        ec.codes_set(h, key, v)
    points = ec.codes_get(h, "numberOfPoints")
    assert points == 65160, points
    rng = np.random.default_rng(0)
    path = d / "gfs.t00z.pgrb2.1p00"
    lines, k, at = [], 0, 0
    with open(path, "wb") as f:
        for step in range(0, 3 * (n // 60 + 1), 3):
            for level in LEVELS:
                for names in (("t",), ("gh",), *((("u", "v"),) if multi else (("u",), ("v",)))):
                    if k >= n:
                        break
                    handles = []
                    for short in names:
                        g = ec.codes_clone(h)
                        ec.codes_set(g, "typeOfFirstFixedSurface", 100)
                        for key, v in (("shortName", short), ("level", level), ("step", step),
                                       ("bitsPerValue", 16)):
                            ec.codes_set(g, key, v)
                        ec.codes_set_values(g, rng.normal(280, 10, points))
                        handles.append(g)
                    if len(handles) == 1:
                        data = ec.codes_get_message(handles[0])
                    else:
                        multi = ec.codes_grib_multi_new()
                        for g in handles:
                            ec.codes_grib_multi_append(g, 4, multi)
                        with tempfile.TemporaryFile() as t:
                            ec.codes_grib_multi_write(multi, t)
                            t.seek(0)
                            data = t.read()
                        ec.codes_grib_multi_release(multi)
                    for g in handles:
                        ec.codes_release(g)
                    number = len({ln.split(":")[0].split(".")[0] for ln in lines}) + 1
                    for j, short in enumerate(names):
                        sub = f".{j + 1}" if len(names) > 1 else ""
                        lines.append(f"{number}{sub}:{at}:d=2024010100:{short.upper()}:"
                                     f"{level} mb:{step} hour fcst:")
                    f.write(data)
                    at += len(data)
                    k += len(names)
    ec.codes_release(h)
    (d / (path.name + ".idx")).write_text("\n".join(lines) + "\n")
    return path


def main() -> None:
    quick = "--quick" in sys.argv
    n, repeats = (24, 1) if quick else (240, 3)
    out = {}
    for layout, multi in (("u / v in one message (NAM)", True), ("every field a message (GFS)", False)):
        out[layout] = run_layout(n, repeats, multi)
    if "--json" in sys.argv:
        print(json.dumps(out, indent=2))
        return
    for layout, (size, rows) in out.items():
        print(f"{layout}: {n} fields, {size / 1e6:.1f} MB, {repeats} repeat(s)")
        print(f"{'case':22} {'requests':>9} {'bytes':>12} {'% of file':>10} {'time ratio':>11}  note")
        for name, r in rows.items():
            print(f"{name:22} {r['requests']:9d} {r['bytes']:12d} {r['percent']:10.2f} "
                  f"{r['time_ratio']:11.2f}  {r['note']}")


def run_layout(n: int, repeats: int, multi: bool):
    import virtualize.formats as formats

    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        with_idx, without = d / "with", d / "without"
        with_idx.mkdir()
        without.mkdir()
        path = make(with_idx, n, multi)
        shutil.copy2(path, without / path.name)
        size = path.stat().st_size
        servers = {"with": RangeHTTPServer(with_idx), "without": RangeHTTPServer(without)}
        try:
            def url(which):
                return f"{servers[which].url}/{path.name}"

            def kerchunk_scan():
                from kerchunk.grib2 import scan_grib

                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    return scan_grib(url("without"))

            def kerchunk_idx():
                from kerchunk._grib_idx import parse_grib_idx

                return parse_grib_idx(url("with"))

            cases = {
                "virtualize": ("without", lambda: formats.scan(url("without"))),
                "virtualize .idx": ("with", lambda: formats.scan(url("with"))),
                "kerchunk scan_grib": ("without", kerchunk_scan),
                "kerchunk .idx": ("with", kerchunk_idx),
            }
            rows = {}
            for name, (which, run) in cases.items():
                srv = servers[which]
                times = []
                note = ""
                for _ in range(repeats):
                    srv.reset()
                    t0 = time.perf_counter()
                    try:
                        got = run()
                    except Exception as e:  # noqa: BLE001 - a peer's failure is a result
                        note = f"fails: {type(e).__name__}: {str(e)[:80]}"
                        got = None
                    times.append(time.perf_counter() - t0)
                if name.startswith("virtualize"):
                    kinds = [p.kind for p in got.problems]
                    assert "grib-index-ignored" not in kinds, kinds
                    note = f"{len(got.variables)} variables"
                elif got is not None and not note:
                    note = f"{len(got)} " + ("reference sets" if isinstance(got, list) else "rows")
                rows[name] = {"requests": srv.requests, "bytes": srv.bytes_sent,
                              "percent": round(100 * srv.bytes_sent / size, 2),
                              "seconds": statistics.median(times), "note": note}
        finally:
            for srv in servers.values():
                srv.stop()
    base = rows["virtualize .idx"]["seconds"]
    for r in rows.values():
        r["time_ratio"] = round(r["seconds"] / base, 2)
    return size, rows


if __name__ == "__main__":
    main()
