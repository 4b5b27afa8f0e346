"""Command line: `virtualize FILES... -o OUT`, `virtualize check FILES...`,
`virtualize mosaic TILES... -o OUT` / `virtualize mosaic --check TILES...` and
`virtualize append CUBE FILES...`.

Exit codes: 0 done (check: the stack can be virtualized), 1 refused (check: it cannot),
2 usage error.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from . import __version__
from .api import DEFAULT_SCAN_TIMEOUT, append, check, check_mosaic, mosaic, virtualize
from .model import VirtualizeError
from .report import format_text, to_html, to_json


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="netCDF-4 / HDF5 / netCDF classic / TIFF files, kerchunk reference sets "
                        "(JSON, parquet directories), directories of them, or "
                        "@LIST (a file naming one path per line)")
    p.add_argument("--concat-dim", metavar="DIM",
                   help="dimension to concatenate along (default: the unlimited dimension, else time)")
    p.add_argument("--inline", metavar="VAR", action="append", default=[],
                   help="store this variable's values in the cube instead of referencing them "
                        "(coordinates are inlined by default); repeatable")
    p.add_argument("--inline-threshold", type=_bytes_arg, metavar="BYTES", default=64 * 1024,
                   help="inline variables that cannot be referenced when they take at most this "
                        "many decoded bytes per file (default 64K; 0: refuse them instead)")
    p.add_argument("--drop", metavar="VAR", action="append", default=[],
                   help="leave this variable out; repeatable")
    p.add_argument("--no-sort", action="store_true",
                   help="keep the files in the order given instead of sorting by coordinate")
    _remedy_options(p)
    _report_options(p)


def _remedy_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--materialize", action="store_true",
                   help="copy blocks that cannot be referenced into the cube (decoded, cut to "
                        "their cell, encoded with the array's codecs)")
    p.add_argument("--materialize-limit", type=_bytes_arg, metavar="BYTES",
                   help="refuse plans that would copy more (e.g. 500M, 2G)")
    p.add_argument("--no-split", action="store_true",
                   help="do not cut uncompressed blocks into exact row ranges")


def _bytes_arg(text: str) -> int:
    units = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    t = text.strip().upper().rstrip("B").rstrip("I")
    unit = t[-1] if t and t[-1] in units else ""
    try:
        return int(float(t[: len(t) - len(unit)]) * units[unit])
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}") from None


def _remedies(args) -> dict:
    """The remedy options, and the scan's worker count and time limit, as keyword arguments."""
    return dict(split=not args.no_split, materialize=args.materialize,
                materialize_limit=args.materialize_limit, jobs=args.jobs,
                scan_timeout=args.scan_timeout)


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}")
    return v


def _report_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-j", "--jobs", type=int, default=1, metavar="N",
                   help="scan files in N worker processes (0: one per core; default 1)")
    p.add_argument("--scan-timeout", type=_seconds, default=DEFAULT_SCAN_TIMEOUT, metavar="SECONDS",
                   help="stop scanning a file after SECONDS and report it (scan-timeout); "
                        f"0: no limit, scan in this process (default {DEFAULT_SCAN_TIMEOUT:g})")
    p.add_argument("--json", action="store_true", help="print the report as JSON (docs/report.md)")
    p.add_argument("--html", metavar="FILE", help="also write the report as one HTML page")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.add_argument("-v", "--verbose", action="store_true", help="show arrays, grids and bytes read")


def _output_options(p: argparse.ArgumentParser, required: bool) -> None:
    p.add_argument("-o", "--output", required=required, metavar="OUT",
                   help="cube directory (e.g. cube.zarr), a kerchunk reference file (*.json) "
                        "or an Icechunk repository (*.icechunk)")
    p.add_argument("--format", choices=["cube", "kerchunk", "icechunk"],
                   help="output kind (default: by OUT's suffix: .json kerchunk, .icechunk "
                        "icechunk, else cube)")
    p.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")


def build_check_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="virtualize check", fromfile_prefix_chars="@",
                                description="Can this stack be virtualized? Writes nothing.")
    _common(p)
    return p


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="virtualize", fromfile_prefix_chars="@",
        description="Turn a stack of netCDF / HDF5 / TIFF files into one virtual Zarr v3 cube "
                    "(chunks are byte ranges in the files). `virtualize check FILES...` "
                    "reports whether a stack can be virtualized without writing anything.")
    _common(p)
    _output_options(p, required=True)
    p.add_argument("--version", action="version", version=f"virtualize {__version__}")
    return p


def build_mosaic_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="virtualize mosaic", fromfile_prefix_chars="@",
        description="Place map tiles (GeoTIFFs, or netCDF/HDF5 with 1-D x/y coordinates) into "
                    "one virtual cube by their georeferencing. The grid is cut at every tile "
                    "edge and block boundary; every cell must be one whole block of one tile.")
    p.add_argument("files", nargs="+", metavar="TILE",
                   help="tiles, directories of them, or @LIST (one path per line)")
    _output_options(p, required=False)
    p.add_argument("--check", action="store_true", help="report only; write nothing")
    p.add_argument("--overlap", choices=["last", "first"],
                   help="settle overlapping tiles block by block: the last (GDAL VRT's rule) "
                        "or the first listed tile wins; default: overlaps are problems")
    p.add_argument("--tolerance", type=float, default=1e-3, metavar="PIXELS",
                   help="how far from whole-pixel alignment tiles may be (default 0.001)")
    p.add_argument("--drop", metavar="VAR", action="append", default=[])
    _remedy_options(p)
    _report_options(p)
    return p


def _mosaic(argv: list[str]) -> int:
    parser = build_mosaic_parser()
    args = parser.parse_args(argv)
    kw = dict(overlap=args.overlap, drop=args.drop, tolerance=args.tolerance,
              progress=_progress(args), **_remedies(args))
    if args.check:
        report = check_mosaic(args.files, **kw)
        _show(report, args)
        return 0 if report.ok else 1
    if not args.output:
        parser.error("-o/--output is required unless --check")
    return _write(args, lambda: mosaic(args.files, args.output, overwrite=args.overwrite,
                                       format=args.format, **kw))


def _write(args, job) -> int:
    """Run a writing job; show its report, or why nothing was written."""
    try:
        report = job()
    except (OSError, ValueError) as e:  # FileExistsError, PermissionError, a full disk, ...
        print(f"virtualize: {e}", file=sys.stderr)
        return 1
    except VirtualizeError as e:
        if e.report is None:
            print(f"virtualize: {e}", file=sys.stderr)
            return 1
        _show(e.report, args)
        print(f"virtualize: nothing was written to {args.output}", file=sys.stderr)
        return 1
    _show(report, args)
    if not args.json:
        print(f"wrote {args.output}")
    return 0


def _show(report, args) -> None:
    if args.html:
        with open(args.html, "w", encoding="utf-8") as f:
            f.write(to_html(report))
    if args.json:
        print(to_json(report))
    else:
        print(format_text(report, args.verbose, color=sys.stdout.isatty()))


class _Progress:
    """files done, bytes read, rate — on stderr, only when it is a terminal."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.bytes = 0

    def __call__(self, done: int, total: int, inv) -> None:
        self.bytes += inv.bytes_read if inv is not None else 0
        rate = done / max(time.monotonic() - self.start, 1e-9)
        width = 30
        fill = int(width * done / max(total, 1))
        sys.stderr.write(f"\rscanning [{'#' * fill}{'.' * (width - fill)}] {done}/{total} files, "
                         f"{self.bytes / 2**20:.1f} MiB read, {rate:.0f} files/s ")
        if done == total:
            sys.stderr.write("\r" + " " * 100 + "\r")
        sys.stderr.flush()


def _progress(args):
    return _Progress() if sys.stderr.isatty() and not args.quiet and not args.json else None


def build_append_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="virtualize append", fromfile_prefix_chars="@",
        description="Add files to the end of a cube directory: the grown stack is planned as "
                    "the cube was, and the cube replaced when complete.")
    p.add_argument("output", metavar="CUBE")
    p.add_argument("files", nargs="+", metavar="FILE")
    _report_options(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """The command line; a reader that stops early (`virtualize check F | head -1`) ends
    it quietly, as Python's documentation recommends for SIGPIPE."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # a broken pipe shows here, not at exit
        return code
    except BrokenPipeError:
        # point stdout at devnull: Python's own flush at exit would fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "mosaic":
        return _mosaic(argv[1:])
    if argv and argv[0] == "append":
        args = build_append_parser().parse_args(argv[1:])
        return _write(args, lambda: append(args.output, args.files, jobs=args.jobs,
                                           progress=_progress(args),
                                           scan_timeout=args.scan_timeout))
    if argv and argv[0] == "check":
        args = build_check_parser().parse_args(argv[1:])
        report = check(args.files, args.concat_dim, inline=args.inline, drop=args.drop,
                       sort=not args.no_sort, progress=_progress(args),
                       inline_threshold=args.inline_threshold, **_remedies(args))
        _show(report, args)
        return 0 if report.ok else 1
    args = build_parser().parse_args(argv)
    return _write(args, lambda: virtualize(
        args.files, args.output, args.concat_dim, overwrite=args.overwrite, inline=args.inline,
        drop=args.drop, sort=not args.no_sort, format=args.format, progress=_progress(args),
        inline_threshold=args.inline_threshold, **_remedies(args)))


if __name__ == "__main__":
    sys.exit(main())
