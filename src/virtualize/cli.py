"""Command line: `virtualize COMMAND ...` (`virtualize --help` lists the commands);
`virtualize FILES... -o OUT` is short for `virtualize create FILES... -o OUT`.

Exit codes (docs/report.md, `virtualize docs report`): 0 done (check: the stack can be
virtualized), 1 refused (problems; check: it cannot; verify: a source changed), 2 usage
error (also a --drop/--inline/--concat-dim name no file has), 3 any other error (I/O, an
existing or unsafe output, not a cube).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import os
import sys
import time
from typing import TYPE_CHECKING

from ._version import __version__

# The rest of the package is imported where a command needs it (`virtualize --version`
# imports nothing more; the parser only the defaults and the output kinds).
if TYPE_CHECKING:
    from .api import Recipe

DONE, REFUSED, USAGE, ERROR = 0, 1, 2, 3
# problems that mean the arguments were wrong, not the files: a usage error (exit 2); a
# glob or directory that names no file is one (`no-files`), every file left out is not
USAGE_KINDS = {"unknown-name", "usage", "no-files"}

COMMANDS = {
    "create": "write a cube from FILES (the short form: virtualize FILES -o OUT)",
    "check": "can FILES be virtualized? writes nothing (exit 0 yes, 1 no)",
    "mosaic": "place map tiles side by side into one cube (--check: report only)",
    "append": "add FILES to the end of a cube",
    "inspect": "one file's variables, dimensions and block tables",
    "verify": "have a cube's sources changed? (--decode: decode one chunk per source)",
    "export": "write a cube as another kind: directory, kerchunk JSON or parquet, Icechunk",
    "catalog": "an archive's trees into one cube per dataset and an intake-esm catalog",
    "docs": "print a guide shipped with virtualize (virtualize docs: the list)",
    "help": "help on a command",
}


# stands for the formats read in help texts until help is shown (`_Parser.format_help`)
FORMATS_READ = "\x00formats-read\x00"


class _Parser(argparse.ArgumentParser):
    """@LIST files: one argument a line; blank lines and lines starting with # are skipped."""

    def __init__(self, *a, **kw):
        kw.setdefault("fromfile_prefix_chars", "@")
        super().__init__(*a, **kw)

    empty_lists: list[str] = []  # @LIST files that named nothing (shared by subparsers)

    def convert_arg_line_to_args(self, arg_line: str) -> list[str]:
        line = arg_line.strip()
        return [] if not line or line.startswith("#") else [line]

    def _read_args_from_files(self, arg_strings: list[str]) -> list[str]:
        out: list[str] = []
        for arg in arg_strings:
            got = super()._read_args_from_files([arg])
            if arg[:1] == "@" and not got and arg[1:] not in _Parser.empty_lists:
                _Parser.empty_lists.append(arg[1:])
            out += got
        return out

    def format_help(self) -> str:
        # the formats read are named when help is shown (the registry's entry points are
        # read then, not by every run: formats/registry.py)
        if self.description and FORMATS_READ in self.description:
            self.description = self.description.replace(FORMATS_READ, _formats_read())
        for action in self._actions:
            if action.help and FORMATS_READ in action.help:
                action.help = action.help.replace(FORMATS_READ, _formats_read())
        return super().format_help()

    def error(self, message: str):
        if "required: FILE" in message or "required: TILE" in message:
            if _Parser.empty_lists:
                message = ", ".join(f"@{f}" for f in _Parser.empty_lists) + \
                    " names no file (the list is empty, or holds only blank lines and # " \
                    "comments); give at least one FILE"
        super().error(message)


# -- option builders -------------------------------------------------------------------

def _files(p: argparse.ArgumentParser, metavar: str = "FILE") -> None:
    p.add_argument("files", nargs="+", metavar=metavar,
                   help=f"files of the formats read ({FORMATS_READ}), directories of them "
                        "(other entries skipped, each named in a note), quoted globs "
                        "('data/*.nc'), @LIST (a file naming one path per line; blank lines "
                        "and # comments skipped) or - (paths read from stdin)")


def _formats_read() -> str:
    """The formats read, from the formats' registry (a plug-in's too): "netCDF-4 / HDF5,
    netCDF classic, ..."."""
    from .formats.registry import titles

    return ", ".join(titles())


def _concat_options(p: argparse.ArgumentParser) -> None:
    from .api.recipe import DEFAULTS

    p.add_argument("--concat-dim", metavar="DIM", action="append",
                   help="dimension to concatenate along (default: the unlimited dimension, else "
                        "time); repeated: the axes of a hypercube, outermost first")
    p.add_argument("--coord", metavar="DIM=FORM", action="append", default=[],
                   help="a new axis' value of each file: attr:NAME (a global attribute), "
                        "var:NAME (a scalar variable), name:REGEX (the regex's first group on "
                        "the file's name; dates become dates) or v1,v2,... (in file order); "
                        "repeatable")
    p.add_argument("--inline", metavar="VAR", action="append", default=[],
                   help="store this variable's values in the cube instead of referencing them "
                        "(coordinates are inlined by default); repeatable")
    p.add_argument("--inline-threshold", type=_bytes_arg, metavar="BYTES",
                   default=DEFAULTS.inline_threshold,
                   help="inline variables that cannot be referenced when they take at most this "
                        "many decoded bytes per file (default 64K; 0: refuse them instead)")
    p.add_argument("--drop", metavar="VAR", action="append", default=[],
                   help="leave this variable out; repeatable")
    p.add_argument("--no-sort", action="store_true",
                   help="keep the files in the order given instead of sorting by coordinate")
    p.add_argument("--join", choices=("exact", "outer"), default=DEFAULTS.join,
                   help="files holding different variables, and a hypercube's cells: every "
                        "variable must cover the same span of the concatenation axis and every "
                        "cell be filled (exact, the default), or the union is taken and the "
                        "steps and cells no file holds read as the fill value (outer)")
    p.add_argument("--combine-attrs", choices=("drop_conflicts", "override", "identical"),
                   default=DEFAULTS.combine_attrs,
                   help="attributes that differ between files: left out and named "
                        "(drop_conflicts, the default), the first file's (override) or refused "
                        "(identical); units, scale_factor, _FillValue ... must agree whatever")
    p.add_argument("--compat", choices=("identical", "override"), default=DEFAULTS.compat,
                   help="a variable without the concatenation axes that no coordinate needs "
                        "(a grid's area, a constant, a label) and that differs between files "
                        "or cells: refused (identical, the default) or the first's taken, "
                        "named in a note (override, as xarray's compat='override')")
    p.add_argument("--grib-layout", choices=("cfgrib", "virtualize"),
                   default=DEFAULTS.grib_layout,
                   help="GRIB files' arrays as cfgrib lays them out (cfgrib, the default: "
                        "cfgrib's names such as t2m, length-1 axes as scalar coordinates, "
                        "valid_time, its datasets as groups) or virtualize's (shortName, "
                        "time always an axis, one group)")
    p.add_argument("--variables", metavar="A,B", type=_names_arg, default=None,
                   help="keep only these variables and the coordinates they need (their "
                        "dimensions' coordinates, bounds, coordinates / grid_mapping / "
                        "ancillary_variables attributes)")


def _job_options(p: argparse.ArgumentParser, gaps: bool) -> None:
    p.add_argument("--skip-unreadable", action="store_true",
                   help="leave out files that cannot be scanned (unreadable, truncated, corrupt, "
                        "timed out), listed in the report and the cube's record, instead of "
                        "stopping")
    if gaps:
        p.add_argument("--no-gaps", action="store_true",
                       help="refuse a gap in a regular concatenation coordinate (steps missing "
                            "between two files; otherwise a note)")


def _strict_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--strict", action="store_true",
                   help="refuse a touched source too (modification time changed, blocks as "
                        "recorded), not only a changed one")


def _remedy_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--materialize", action="store_true",
                   help="copy blocks that cannot be referenced into the cube (decoded, cut to "
                        "their cell, encoded with the array's codecs)")
    p.add_argument("--materialize-limit", type=_bytes_arg, metavar="BYTES",
                   help="refuse plans that would copy more (e.g. 500M, 2G)")
    p.add_argument("--no-split", action="store_true",
                   help="do not cut uncompressed blocks into exact row ranges")
    _chunk_size_option(p)


def _chunk_size_option(p: argparse.ArgumentParser) -> None:
    from .api.recipe import DEFAULTS

    p.add_argument("--chunk-size", type=_bytes_arg, metavar="SIZE", default=DEFAULTS.chunk_size,
                   help="cut uncompressed blocks larger than SIZE (contiguous datasets, netCDF "
                        "classic variables, single-strip TIFFs) into chunks of at most SIZE at "
                        "whole rows (e.g. 16M, 16MiB, 1048576; default 16M; 0: never)")


def _scan_options(p: argparse.ArgumentParser) -> None:
    """Options of the scan itself (the one place to add another)."""
    from .api.steps import DEFAULT_SCAN_TIMEOUT

    p.add_argument("-j", "--jobs", type=_jobs_arg, default="auto", metavar="N",
                   help="scan files in N worker processes (default auto: 1 for fewer than "
                        "200 local files, else one per core; up to 8 for remote files; "
                        "0: one per core)")
    p.add_argument("--executor", choices=["local", "dask"], default="local",
                   help="where files are scanned: local worker processes (default), or the "
                        "workers of a dask.distributed cluster (--scheduler; without it a "
                        "local cluster sized to this machine); the plan is made here")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="the dask scheduler to scan on (e.g. tcp://host:8786; implies "
                        "--executor dask)")
    p.add_argument("--scan-timeout", type=_seconds, default=DEFAULT_SCAN_TIMEOUT, metavar="SECONDS",
                   help="stop scanning a file after SECONDS and report it (scan-timeout); "
                        f"0: no limit, scan in this process (default {DEFAULT_SCAN_TIMEOUT:g})")
    p.add_argument("--storage-option", action=_StorageOption, default=[], metavar="[PROTO.]KEY=VALUE",
                   help="an option of remote storage (s3://, https://, ...): KEY=VALUE for every "
                        "protocol or PROTOCOL.KEY=VALUE (s3.endpoint_url=http://...); repeatable")


def _report_options(p: argparse.ArgumentParser, html: bool = True) -> None:
    _scan_options(p)
    p.add_argument("--json", action="store_true",
                   help="print the report as JSON (its schema: virtualize docs report)")
    if html:
        p.add_argument("--html", metavar="FILE", help="also write the report as one HTML page")
    _verbosity(p)


def _verbosity(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("-q", "--quiet", action="store_true",
                   help="print nothing but errors (and no progress bar)")
    g.add_argument("-v", "--verbose", action="store_true",
                   help="the whole report: arrays, grids, every problem's files, bytes read")


def _output_options(p: argparse.ArgumentParser, required: bool) -> None:
    from .outputs import registry as outputs

    kinds, default = outputs.kinds(), outputs.default()
    by_suffix = ", ".join(f"{' / '.join(s for s in k.suffixes if s)} {k.name}" for k in kinds
                          if k is not default and any(k.suffixes))
    p.add_argument("-o", "--output", required=required, metavar="OUT",
                   help=outputs.written_names())
    p.add_argument("--format", choices=outputs.names(),
                   help=f"output kind (default: by OUT's suffix: {by_suffix}, else "
                        f"{default.name}; a suffix of another format, such as .nc or .tif, is "
                        "refused)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace OUT if it exists (only an output virtualize wrote)")
    p.add_argument("--relative", action="store_true",
                   help="record the sources relative to OUT, so that OUT and its files can be "
                        "moved or mirrored together (virtualize docs references)")


def _bytes_arg(text: str) -> int:
    units = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    t = text.strip().upper().rstrip("B").rstrip("I")
    unit = t[-1] if t and t[-1] in units else ""
    try:
        return int(float(t[: len(t) - len(unit)]) * units[unit])
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}") from None


def _jobs_arg(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number or 'auto': {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be a number of processes >= 1 (0: one per core), "
                                         f"not {n}")
    return n


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}")
    return v


def _offset_arg(text: str) -> tuple[int, int]:
    try:
        r, c = (int(x) for x in text.replace(":", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not ROW,COL: {text!r}") from None
    return r, c


class _StorageOption(argparse.Action):
    """--storage-option KEY=VALUE: collected, and in effect for this run (storage.py)."""

    def __call__(self, parser, namespace, value, option_string=None):
        from . import storage

        pairs = [*getattr(namespace, self.dest, []), value]
        try:
            storage.set_options(storage.options_from_pairs(pairs))
        except ValueError as e:
            parser.error(str(e))
        setattr(namespace, self.dest, pairs)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line's parser; `command`: only that command's options are built
    (every command is listed still), so that a run imports what its own options need (a
    `check` not the output kinds' writers, which `create`'s --format lists; "": none's)."""
    from .api.recipe import DEFAULTS
    from .api.steps import DEFAULT_SCAN_TIMEOUT

    top = _Parser(
        prog="virtualize",
        description=f"Turn a stack of files ({FORMATS_READ}) into one virtual Zarr v3 "
                    "cube (chunks are byte ranges in the files). `virtualize FILES -o OUT` is "
                    "short for `virtualize create FILES -o OUT`.",
        epilog="exit codes: 0 done, 1 refused (problems; check: cannot be virtualized; "
               "verify: a source changed), 2 usage error, 3 other error (I/O, existing output, "
               "not a cube). The guides (the report, reading a cube, every problem kind, "
               "...) are shipped with virtualize: `virtualize docs` lists them, `virtualize "
               "docs report` prints one.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--version", action="version", version=f"virtualize {__version__}")
    sub = top.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    def cmd(name: str, description: str) -> argparse.ArgumentParser | None:
        p = sub.add_parser(name, help=COMMANDS[name], description=description)
        return p if command is None or name == command else None

    p = cmd("create", "Write a cube from a stack of files (nothing is written unless every "
                      "file can be referenced exactly).")
    if p is not None:
        _files(p)
        _output_options(p, required=True)
        _concat_options(p)
        _remedy_options(p)
        _job_options(p, gaps=True)
        _report_options(p)

    p = cmd("check", "Can this stack be virtualized? Writes nothing.")
    if p is not None:
        _files(p)
        _concat_options(p)
        _remedy_options(p)
        _job_options(p, gaps=True)
        _report_options(p)

    p = cmd("mosaic", "Place map tiles (GeoTIFFs, or netCDF/HDF5 with 1-D x/y coordinates) into "
                      "one virtual cube by their georeferencing (or --offsets). The grid is cut "
                      "at every tile edge and block boundary; every cell must be one whole "
                      "block of one tile.")
    if p is not None:
        _files(p, "TILE")
        _output_options(p, required=False)
        p.add_argument("--check", action="store_true", help="report only; write nothing")
        p.add_argument("--offsets", nargs="+", type=_offset_arg, metavar="ROW,COL",
                       help="each tile's pixel offset (row, column of its top-left pixel), in the "
                            "order of the tiles, instead of their georeferencing")
        p.add_argument("--overlap", choices=["last", "first"],
                       help="settle overlapping tiles block by block: the last (GDAL VRT's rule) "
                            "or the first listed tile wins; default: overlaps are problems")
        p.add_argument("--tolerance", type=float, default=DEFAULTS.tolerance, metavar="PIXELS",
                       help="how far from whole-pixel alignment tiles may be (default 0.001)")
        p.add_argument("--drop", metavar="VAR", action="append", default=[])
        p.add_argument("--concat-dim", metavar="DIM",
                       help="a mosaic over time: each tile is one date's, the dates stacked along "
                            "DIM (e.g. time); each date from --coord, the tile's own DIM "
                            "variable, or the date in its name")
        p.add_argument("--coord", metavar="DIM=SPEC", action="append", default=[],
                       help="each tile's DIM value: attr:NAME (a global attribute), var:NAME (a "
                            "scalar variable), name:REGEX (the first group on the file's name) or "
                            "v1,v2,... (one per tile, in order); dates become dates")
        p.add_argument("--combine-attrs", choices=("drop_conflicts", "override", "identical"),
                       default=DEFAULTS.combine_attrs,
                       help="attributes that differ between tiles: left out and named "
                            "(drop_conflicts, the default), the first tile's (override) or refused "
                            "(identical); units, scale_factor, _FillValue ... must agree whatever")
        _remedy_options(p)
        _job_options(p, gaps=False)
        _report_options(p)

    p = cmd("append", "Add files to the end of a cube (directory, kerchunk JSON or parquet, "
                      "or Icechunk repository written by virtualize): the grown stack is planned as the "
                      "cube was, and the cube replaced when complete.")
    if p is not None:
        p.add_argument("output", metavar="CUBE")
        _files(p)
        p.add_argument("--coord", metavar="DIM=V1,V2,...", action="append", default=[],
                       help="a hypercube's new axis whose values were listed: the new files' "
                            "values, in the order given")
        _job_options(p, gaps=True)
        _strict_option(p)
        _report_options(p)

    p = cmd("inspect", "One file's variables, dimensions and block tables (block shape and "
                       "count, padded: a last block stored padded past the axis' end, "
                       "codecs, byte ranges). Writes nothing.")
    if p is not None:
        p.add_argument("file", metavar="FILE")
        p.add_argument("--json", action="store_true", help="as JSON")
        _chunk_size_option(p)
        p.add_argument("--scan-timeout", type=_seconds, default=DEFAULT_SCAN_TIMEOUT, metavar="SECONDS",
                       help="stop scanning after SECONDS and report it (scan-timeout), as check "
                            f"does; 0: no limit, scan in this process (default {DEFAULT_SCAN_TIMEOUT:g})")
        p.add_argument("--storage-option", action=_StorageOption, default=[], metavar="[PROTO.]KEY=VALUE",
                       help="an option of remote storage, as for check; repeatable")

    p = cmd("verify", "Re-check a cube's sources (size, identity; a file whose time alone "
                      "changed is re-scanned: touched, its blocks as recorded, is a note, "
                      "--refresh records its new time): exit 1 naming each changed or missing "
                      "source. --decode also scans and plans the "
                      "sources again with the cube's recipe and decodes one chunk per source "
                      "through the cube's codecs, compared with the source library's read.")
    if p is not None:
        p.add_argument("cube", metavar="CUBE")
        p.add_argument("--decode", action="store_true",
                       help="also decode one chunk per source and compare with the source")
        p.add_argument("--refresh", action="store_true",
                       help="record the new modification times of touched sources (their blocks "
                            "re-scanned and found as recorded), so that later opens are silent")
        _strict_option(p)
        p.add_argument("--json", action="store_true", help="the problems as JSON")
        _scan_options(p)
        _verbosity(p)

    p = cmd("export", "Write a cube as another kind: cube directory, kerchunk JSON or "
                      "parquet, or Icechunk repository (its sources are planned again with its recipe).")
    if p is not None:
        p.add_argument("cube", metavar="CUBE")
        _output_options(p, required=True)
        _strict_option(p)
        _report_options(p, html=False)

    p = cmd("catalog", "Walk the archive's trees (local directories, s3:// or http(s):// "
                       "prefixes), group the files into datasets (by a path template, or by "
                       "what they hold), and write one cube per dataset under OUT plus an "
                       "intake-esm catalog of them (OUT/catalog.json, catalog.csv). Run again "
                       "over a grown tree: new files are appended, new datasets built, changed "
                       "ones (a new version) rebuilt, the rest skipped. A dataset that cannot "
                       "be built is reported, never a stop (exit 1 when one is refused).")
    if p is not None:
        from .api import CATALOG_KINDS
        from .outputs import registry as outputs

        p.add_argument("roots", nargs="+", metavar="ROOT")
        p.add_argument("-o", "--output", required=True, metavar="OUT",
                       help="the catalog's directory (made if missing)")
        g = p.add_mutually_exclusive_group()
        g.add_argument("--drs", choices=("cmip6", "cmip5", "cordex"),
                       help="group by that data reference syntax (found at any depth under ROOT)")
        g.add_argument("--path-template", metavar="TEMPLATE",
                       help="group by this directory template: {facet} one path segment "
                            "({facet:REGEX} constrained), * and ? as in a glob, e.g. "
                            "'{source_id}/{experiment_id}/{member_id}/{table_id}/{variable_id}/"
                            "{grid_label}/{version}/*.nc'; without --drs or one: by what the files "
                            "hold")
        p.add_argument("--group-by", metavar="A,B", type=_names_arg,
                       help="without a template: the global attributes that identify a dataset "
                            "(default: source_id, experiment_id, table_id, variable_id, grid_label, "
                            "frequency, variant_label ... as the files have them)")
        p.add_argument("--concat-dim", metavar="DIM", action="append",
                       help="member: stack a dataset's members (the template's member facet, or "
                            "the member attribute) along a new axis before time, labelled by them")
        p.add_argument("--all-versions", action="store_true",
                       help="every version a dataset of its own (default: the latest only)")
        p.add_argument("--format", choices=CATALOG_KINDS,
                       help=f"each dataset's output kind (default {outputs.default().name})")
        p.add_argument("--overwrite", action="store_true",
                       help="OUT holds other things, or a catalog grouped otherwise: build again "
                            "(only outputs virtualize wrote are replaced)")
        p.add_argument("--drop", metavar="VAR", action="append", default=[],
                       help="leave this variable out of every dataset; repeatable")
        p.add_argument("--join", choices=("exact", "outer"), default=DEFAULTS.join,
                       help="as for create")
        p.add_argument("--combine-attrs", choices=("drop_conflicts", "override", "identical"),
                       default=DEFAULTS.combine_attrs, help="as for create")
        _remedy_options(p)
        _job_options(p, gaps=False)
        _report_options(p)

    p = cmd("docs", "Print one of the guides shipped with virtualize (Markdown: the "
                    "report, reading a cube, problem kinds, ...); without TOPIC, list them.")
    if p is not None:
        p.add_argument("topic", nargs="?", metavar="TOPIC")

    p = cmd("help", "Help on a command.")
    if p is not None:
        p.add_argument("topic", nargs="?", metavar="COMMAND")
    return top


# -- running ---------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    """The command line; a reader that stops early (`virtualize check F | head -1`) ends
    it quietly, as Python's documentation recommends for SIGPIPE."""
    _OUTCOME.clear()
    # Icechunk's warnings (its local storage and concurrent commits: appends take a lock,
    # outputs/staging.py `locked`) are not the user's business; ICECHUNK_LOG set wins
    os.environ.setdefault("ICECHUNK_LOG", "error")
    try:
        code = _main(argv)
        sys.stdout.flush()  # a broken pipe shows here, not at exit
        return code
    except BrokenPipeError:
        # point stdout at devnull: Python's own flush at exit would fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        # the job's own outcome when it was decided before its report was cut short (a
        # cube written, a check answered "yes"), not a failure
        return _OUTCOME[-1] if _OUTCOME else REFUSED
    except KeyboardInterrupt:
        print("virtualize: interrupted", file=sys.stderr)
        return 130


def _main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    _Parser.empty_lists.clear()
    if argv == ["--version"]:  # (nothing more imported, no parser built)
        print(f"virtualize {__version__}")
        return DONE
    from .model import OutputExistsError, UnsafeOutputError, UsageError, VirtualizeError

    parser = build_parser(_command_of(argv))
    if not argv:
        parser.print_usage(sys.stderr)
        print("virtualize: error: no command or files given (virtualize --help lists the "
              "commands)", file=sys.stderr)
        return USAGE
    first = argv[0]
    if first not in COMMANDS and first not in ("-h", "--help", "--version"):
        if _looks_like_command(first):
            close = difflib.get_close_matches(first, list(COMMANDS), n=1)
            parser.print_usage(sys.stderr)
            print(f"virtualize: error: unknown command {first!r}"
                  + (f" (did you mean {close[0]!r}?)" if close else "")
                  + "; virtualize --help lists the commands", file=sys.stderr)
            return USAGE
        argv.insert(0, "create")  # the short form: virtualize FILES -o OUT
    args = parser.parse_args(argv)
    if args.command == "help":
        if args.topic and args.topic not in COMMANDS:
            parser.error(f"unknown command {args.topic!r}")
        parser.parse_args([args.topic, "--help"] if args.topic else ["--help"])
        return DONE
    if hasattr(args, "files"):
        args.files = _stdin_paths(args.files)
    html = getattr(args, "html", None)
    if html:
        why = _unwritable(html)
        if why:  # before any scanning
            parser.error(f"--html {html}: {why}")
    try:
        with _executor(args):
            return COMMAND_RUNNERS[args.command](args)
    except UsageError as e:
        parser.error(str(e))
    except (OutputExistsError, UnsafeOutputError) as e:
        _err(str(e))
        return ERROR
    except VirtualizeError as e:
        _err(str(e))
        kinds = {p.kind for p in e.problems if p.fatal}
        if kinds and kinds <= USAGE_KINDS - {"usage"}:  # (append: a glob that names no file)
            return USAGE
        # (an output that cannot be reached is an I/O error, as a full disk is)
        return ERROR if {p.kind for p in e.problems} <= {"not-a-cube", "usage",
                                                          "output-unreachable"} else REFUSED
    except BrokenPipeError:  # the reader stopped: main() ends quietly
        raise
    except OSError as e:  # PermissionError, a full disk, ...
        _err(str(e))
        return ERROR


def _command_of(argv: list[str]) -> str | None:
    """The command `argv` runs; "" for the top-level help (no command's options); None
    when that is not plain (an option first, an unknown word, `help`): then every
    command is built."""
    first = argv[0] if argv else None
    if first is None or first in ("-h", "--help"):
        return ""  # (the commands' list: none's options)
    if first == "help":  # (help and its topic: every command)
        return None
    if first in COMMANDS:
        return first
    if first.startswith("-") or _looks_like_command(first):
        return None
    return "create"  # the short form


def _looks_like_command(word: str) -> bool:
    """A first word that is no existing path and looks like no path: a mistyped command."""
    return (word.isidentifier() and not os.path.exists(word)
            and not any(c in word for c in "*?[@."))


def _stdin_paths(files: list[str]) -> list[str]:
    """`-` stands for the paths read from stdin, one a line (blank lines and # comments
    skipped)."""
    if "-" not in files:
        return files
    read = [line.strip() for line in sys.stdin]
    read = [line for line in read if line and not line.startswith("#")]
    out: list[str] = []
    for f in files:
        out += read if f == "-" else [f]
    return out


def _unwritable(path: str) -> str | None:
    if os.path.isdir(path):
        return "is a directory"
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        return f"its directory {parent} does not exist"
    if os.path.exists(path) and not os.access(path, os.W_OK) or \
            not os.path.exists(path) and not os.access(parent, os.W_OK):
        return "cannot be written (permission denied)"
    return None


def _err(text: str) -> None:
    print(f"virtualize: {text}", file=sys.stderr)


def _color() -> bool:
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


@contextlib.contextmanager
def _executor(args):
    """--executor dask / --scheduler: a dask.distributed client for the run (args.client)."""
    if getattr(args, "executor", "local") != "dask" and not getattr(args, "scheduler", None):
        yield
        return
    from .run.executors import dask_client
    client = dask_client(args.scheduler)
    args.client = client
    try:
        yield
    finally:
        client.close()
        cluster = getattr(client, "_virtualize_cluster", None)
        if cluster is not None:
            cluster.close()


def _kw(args) -> dict:
    """The job's options (the scan's, --skip-unreadable, --strict), as keyword arguments."""
    kw = dict(jobs=args.jobs, scan_timeout=args.scan_timeout, progress=_progress(args),
              executor=getattr(args, "client", None))
    for name in ("skip_unreadable", "strict"):
        if hasattr(args, name):
            kw[name] = getattr(args, name)
    return kw


def recipe_options(args) -> dict:
    """The recipe the options give (`_concat_options`, or mosaic's, and `_remedy_options`),
    as the keyword arguments of `check` / `virtualize`, or `check_mosaic` / `mosaic` for
    the mosaic command (`Recipe.from_options` takes them too)."""
    from .model import UsageError

    kw = dict(drop=args.drop, split=not args.no_split, materialize=args.materialize,
              materialize_limit=args.materialize_limit, chunk_size=args.chunk_size,
              combine_attrs=args.combine_attrs)
    if args.command == "mosaic":
        coords = {}
        for text in args.coord:
            dim, eq, spec = text.partition("=")
            if not eq or not dim or not spec:
                raise UsageError(f"--coord {text}: give DIM=SPEC (e.g. time=name:(\\d{{8}}))")
            coords[dim] = spec
        kw.update(offsets=args.offsets, overlap=args.overlap, tolerance=args.tolerance,
                  concat_dim=args.concat_dim, coords=coords or None)
    else:
        kw.update(inline=args.inline, sort=not args.no_sort,
                  inline_threshold=args.inline_threshold, join=args.join,
                  variables=args.variables, concat_dims=args.concat_dim, coords=args.coord,
                  no_gaps=args.no_gaps, compat=args.compat, grib_layout=args.grib_layout)
    return kw


def recipe_from_args(args) -> Recipe:
    """The `Recipe` the command line's options give (see `recipe_options`)."""
    from .api import Recipe

    return Recipe.from_options("mosaic" if args.command == "mosaic" else "concat",
                               **recipe_options(args))


def _names_arg(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give one or more variable names, comma-separated")
    return names


def _create(args) -> int:
    from .api import virtualize

    return _write(args, lambda: virtualize(args.files, args.output, None,
                                           overwrite=args.overwrite, format=args.format,
                                           relative=args.relative,
                                           **recipe_options(args), **_kw(args)))


def _check(args) -> int:
    from .api import check

    report = check(args.files, None, **recipe_options(args), **_kw(args))
    _show(report, args)
    return _outcome(report)


def _mosaic(args) -> int:
    from .api import check_mosaic, mosaic
    from .model import UsageError

    kw = dict(recipe_options(args), **_kw(args))
    if args.offsets is not None and len(args.offsets) != len(args.files):
        raise UsageError(f"--offsets: {len(args.offsets)} offset(s) for {len(args.files)} "
                         "tile(s); give one ROW,COL per tile, in their order")
    if args.check:
        report = check_mosaic(args.files, **kw)
        _show(report, args)
        return _outcome(report)
    if not args.output:
        raise UsageError("-o/--output is required unless --check")
    return _write(args, lambda: mosaic(args.files, args.output, overwrite=args.overwrite,
                                       format=args.format, relative=args.relative, **kw))


def _append(args) -> int:
    from .api import append

    return _write(args, lambda: append(args.output, args.files, coords=args.coord or None,
                                       no_gaps=args.no_gaps, **_kw(args)))


def _export(args) -> int:
    from .api import export

    return _write(args, lambda: export(args.cube, args.output, format=args.format,
                                       overwrite=args.overwrite, relative=args.relative,
                                       **_kw(args)))


def _verify(args) -> int:
    from .api import verify_cube

    problems = verify_cube(args.cube, decode=args.decode, refresh=args.refresh, **_kw(args))
    fatal = [p for p in problems if p.fatal]
    if args.json:
        print(json.dumps({"cube": os.path.abspath(args.cube), "ok": not fatal,
                          "decode": args.decode, "refresh": args.refresh,
                          "problems": [p.to_dict() for p in problems]}, indent=2))
    elif fatal:
        for p in problems:
            print(str(p))
    elif not args.quiet:
        for p in problems:  # touched sources: notes
            print(str(p))
        touched = len(problems)
        print(f"ok: the sources of {args.cube} are as recorded"
              + (f" ({touched} touched, blocks unchanged"
                 + ("; new times recorded)" if args.refresh else
                    "; `verify --refresh` records their new times)") if touched else "")
              + ("; one chunk per source decodes as the source library reads it"
                 if args.decode else ""))
    return REFUSED if fatal else DONE


def _inspect(args) -> int:
    from .api import inventory
    from .plan.cut import cut_stack

    # the block tables as a cube would cut them (--chunk-size), said in a note; scanned in
    # a bounded worker, as check scans (a damaged heap can make libhdf5 loop forever)
    (inv,), notes, cut_problems = cut_stack([inventory(args.file, scan_timeout=args.scan_timeout)],
                                            args.chunk_size)
    inv.problems = [*inv.problems, *cut_problems]
    doc = _inventory_dict(inv)
    doc["notes"] = notes
    if args.json:
        print(json.dumps(doc, indent=2, default=str))
        return DONE
    print(f"{doc['path']}: {doc['format']}, {doc['size']} bytes")
    if doc["dimensions"]:
        print("dimensions: " + ", ".join(
            f"{d['name']}={d['size']}" + (" (unlimited)" if d["unlimited"] else "")
            for d in doc["dimensions"]))
    rows = [("variable", "dims", "shape", "dtype", "blocks", "block shape", "padded", "codecs",
             "bytes")]
    for v in doc["variables"]:
        b = v["blocks"]
        rows.append((v["name"], ",".join(v["dims"]), "x".join(map(str, v["shape"])) or "-",
                     v["dtype"], f"{b['stored']}/{b['count']}" if b else "-",
                     "x".join(map(str, b["block_shape"])) if b else "-",
                     ("yes" if b["padded"] else "no") if b else "-",
                     "+".join(v["codecs"]) or "-",
                     f"{b['bytes']} @ {b['first_offset']}..{b['end_offset']}" if b and b["stored"]
                     else "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
    for note in notes:
        print(f"note: {note}")
    for p in inv.problems:
        print(f"problem: {p}")
    return DONE


def _inventory_dict(inv) -> dict:
    out = {"path": inv.path, "format": inv.format, "size": inv.size,
           "dimensions": [{"name": d.name, "size": d.size, "unlimited": d.unlimited}
                          for d in inv.dimensions.values()],
           "variables": [], "problems": [p.to_dict() for p in inv.problems],
           "data_files": [s.path for s in inv.data_files]}
    for v in inv.variables.values():
        b = None
        if v.blocks is not None:
            refs = v.blocks.refs.reshape(-1)
            stored = refs[refs["length"] > 0]
            b = {"block_shape": list(v.blocks.block_shape), "grid": list(v.blocks.grid_shape),
                 "count": int(refs.size), "stored": int(stored.size),
                 # padding only where a last block is stored padded and holds less than a
                 # block (an axis of 90 in blocks of 90 has none)
                 "padded": bool(v.blocks.padded and any(
                     size and n % size for n, size in zip(v.shape, v.blocks.block_shape))),
                 "bytes": int(stored["length"].sum()),
                 "first_offset": int(stored["offset"].min()) if stored.size else None,
                 "end_offset": int((stored["offset"] + stored["length"]).max())
                 if stored.size else None}
        out["variables"].append({"name": v.name, "dims": list(v.dims), "shape": list(v.shape),
                                 "dtype": str(v.dtype), "fill_value": v.fill_value,
                                 "codecs": [c.get("name", "?") for c in v.codecs],
                                 "coordinate": v.is_coordinate, "blocks": b})
    return out


def _guides() -> dict[str, object]:
    """topic -> the guide's file (docs/*.md, shipped in the package as virtualize/docs)."""
    from importlib import resources

    root = resources.files("virtualize") / "docs"
    return {f.name[:-3]: f for f in sorted(root.iterdir(), key=lambda f: f.name)
            if f.name.endswith(".md")} if root.is_dir() else {}


def _docs(args) -> int:
    from .model import UsageError

    guides = _guides()
    topic = args.topic[:-3] if args.topic and args.topic.endswith(".md") else args.topic
    if topic is None:
        print("guides (virtualize docs TOPIC prints one):")
        for name, f in guides.items():
            title = f.read_text(encoding="utf-8").partition("\n")[0].lstrip("# ")
            print(f"  {name:<12}  {title}")
        return DONE
    if topic not in guides:
        close = difflib.get_close_matches(topic, list(guides), n=1)
        raise UsageError(f"no guide {topic!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                         + "; virtualize docs lists them")
    print(guides[topic].read_text(encoding="utf-8"), end="")
    return DONE


def _catalog(args) -> int:
    """`virtualize catalog`: the archive's report (text, --json, --html); exit 1 when a
    dataset is refused or a root cannot be walked."""
    from .api import catalog

    report = catalog(args.roots, args.output, drs=args.drs, path_template=args.path_template,
                     group_by=args.group_by, concat_dims=args.concat_dim,
                     all_versions=args.all_versions, format=args.format,
                     overwrite=args.overwrite, drop=args.drop, join=args.join,
                     combine_attrs=args.combine_attrs, split=not args.no_split,
                     materialize=args.materialize, materialize_limit=args.materialize_limit,
                     chunk_size=args.chunk_size, **_kw(args))
    _OUTCOME.append(DONE if report.ok else REFUSED)
    if args.html:
        with open(args.html, "w", encoding="utf-8") as f:
            f.write(report.to_html())
    if args.json:
        print(report.to_json())
    elif not args.quiet or not report.ok:
        print(report.to_text(verbose=args.verbose))
    return DONE if report.ok else REFUSED


COMMAND_RUNNERS = {"create": _create, "check": _check, "mosaic": _mosaic, "append": _append,
                   "inspect": _inspect, "verify": _verify, "export": _export,
                   "catalog": _catalog, "docs": _docs}


def _write(args, job) -> int:
    """Run a writing job; show its report, or why nothing was written."""
    from .model import OutputExistsError, UnsafeOutputError, UsageError, VirtualizeError

    try:
        report = job()
    except VirtualizeError as e:
        if e.report is None or isinstance(e, (OutputExistsError, UnsafeOutputError, UsageError)):
            raise
        _show(e.report, args, failed=True)
        _err(f"nothing was written to {args.output}")
        return _outcome(e.report, failed=True)
    _show(report, args, wrote=report.output)
    return DONE


# the exit code of the job whose report is being printed (for a reader that stops early)
_OUTCOME: list[int] = []


def _outcome(report, failed: bool = False) -> int:
    """A report's exit code: done, refused, or a usage error when a fatal problem says the
    arguments were wrong (a --drop / --inline / --concat-dim name no file has)."""
    if report.ok and not failed:
        return DONE
    return USAGE if any(p.fatal and p.kind in USAGE_KINDS for p in report.problems) else REFUSED


def _show(report, args, wrote: dict | None = None, failed: bool = False) -> None:
    """The report: JSON, or text (accepted: one line unless -v; -q: only a refusal's
    problems); and the HTML page when asked."""
    from .report import format_text, to_html, to_json

    _OUTCOME.append(_outcome(report, failed))
    if getattr(args, "html", None):
        with open(args.html, "w", encoding="utf-8") as f:
            f.write(to_html(report))
    if getattr(args, "json", False):
        print(to_json(report))
        return
    if report.ok and args.quiet:
        return
    if report.ok and not args.verbose:
        print(format_text(report, color=_color()))
        return
    text = format_text(report, args.verbose, color=_color())
    if args.quiet:  # nothing but the problems that keep it from being written
        text = "\n".join(line for line in text.splitlines() if line)
    print(text)
    if wrote and wrote.get("written", True) is not False:  # (not an append of nothing new)
        print(f"wrote {wrote['kind']} {args.output}")


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
    quiet = args.quiet or getattr(args, "json", False)
    return _Progress() if sys.stderr.isatty() and not quiet else None


if __name__ == "__main__":
    sys.exit(main())
