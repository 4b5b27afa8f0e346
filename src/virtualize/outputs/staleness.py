"""Are a cube's sources as the cube recorded them? The one check every reader and
command runs (`virtualize.open` of each output kind, `append`, `export`, `verify`).

A source is *stale* when its blocks may differ from what the cube references:
- missing (`source-missing`), or its size changed, or its recorded identity (a remote
  object's ETag) changed: `source-changed`;
- its modification time alone changed: the file is scanned again (bounded, as every
  scan) and its fingerprint (scan/_fingerprint.py: its block tables and recorded
  digests) compared with the one the cube recorded. Equal: the source is *touched*, not
  stale (`source-touched`, a note; fatal when `strict`), and `verify --refresh` records
  its new time. Different, or not re-scannable: `source-changed`. A cube written before
  fingerprints were recorded (or a data file named by a kerchunk reference set, whose
  rows say nothing of its bytes) cannot prove a touched file unchanged: `source-changed`,
  saying so.

A rewrite that keeps the size and the modification time is not seen here (only
`verify --decode` compares values): docs/reading.md, Staleness.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from typing import Any

from ..model import FileInventory, Location, Problem, SourceTouchedWarning, VirtualizeError
from ..storage import is_url
from ..storage import stat as source_stat

TOUCHED = "source-touched"
RESCAN_TIMEOUT = 60.0  # seconds a touched file's re-scan may take (as a scan's default)


@dataclass
class Touched:
    """A source whose modification time alone changed, its blocks as recorded."""

    index: int  # in the source table checked
    path: str
    mtime_ns: int  # now


@dataclass
class SourceCheck:
    """The verdict on a source table: `problems` (stale: fatal `source-changed` /
    `source-missing`; touched: `source-touched`, fatal only when strict) and the
    touched sources (to refresh)."""

    problems: list[Problem] = field(default_factory=list)
    touched: list[Touched] = field(default_factory=list)

    @property
    def stale(self) -> list[Problem]:
        return [p for p in self.problems if p.kind != TOUCHED]


def check_sources(sources: list[dict[str, Any]], *, strict: bool = False,
                  scan_timeout: float | None = RESCAN_TIMEOUT) -> SourceCheck:
    """Each recorded source ({path, size, mtime_ns[, etag, fingerprint, referenced_by]},
    paths resolved) checked against the file as it is now (see the module's docstring)."""
    from ..storage import forget

    forget()  # nothing remembered from a scan: ask the servers now
    out = SourceCheck()
    suspects: list[tuple[int, dict, int]] = []
    for i, s in enumerate(sources):
        if is_url(s["path"]):
            try:
                st = source_stat(s["path"])
            except VirtualizeError as e:
                out.problems.extend(e.problems)
                continue
            if st.st_size != s["size"] or (s.get("etag") is not None and st.etag != s["etag"]):
                out.problems.append(Problem(
                    Location(s["path"]), "source-changed",
                    f"changed since it was recorded: size {st.st_size:,} bytes (recorded "
                    f"{s['size']:,}), ETag {st.etag} (recorded {s.get('etag')})"))
            continue
        try:
            st = os.stat(s["path"])
        except OSError as e:
            out.problems.append(Problem(Location(s["path"]), "source-missing",
                                        f"cannot be opened: {e.strerror}"))
            continue
        if st.st_size != s["size"]:
            out.problems.append(Problem(Location(s["path"]), "source-changed",
                                        _changed(s, st.st_size, st.st_mtime_ns)))
        elif st.st_mtime_ns != s["mtime_ns"]:
            suspects.append((i, s, st.st_mtime_ns))
    if suspects:
        _rescan(suspects, out, strict, scan_timeout)
    return out


def _changed(s: dict, size: int, mtime_ns: int) -> str:
    return (f"changed since it was recorded: size {size:,} bytes (recorded {s['size']:,}), "
            f"modified {_when(mtime_ns)} (recorded {_when(s['mtime_ns'])})")


def _rescan(suspects: list[tuple[int, dict, int]], out: SourceCheck, strict: bool,
            scan_timeout: float | None) -> None:
    """The sources whose modification time alone changed: touched when a re-scan of the
    file whose scan read their block tables (itself, or the file that links to it) gives
    the fingerprint recorded, else stale."""
    from ..formats import hint_of
    from ..run.workers import scan_bounded

    # by file and by how the cube scanned it (a fingerprint names its scan's hint)
    todo: dict[tuple[str, str], list[tuple[int, dict, int]]] = {}
    for i, s, mtime in suspects:
        why = None
        if not isinstance(s.get("fingerprint"), str):
            why = ("the cube records no fingerprint of its blocks (written before virtualize "
                   "recorded them, or a data file named by a reference set), so it cannot be "
                   "told unchanged")
        elif s.get("copied"):
            why = ("the cube holds chunks copied from it (--materialize), whose bytes no "
                   "re-scan of its block tables proves unchanged")
        if why is not None:
            out.problems.append(Problem(
                Location(s["path"]), "source-changed",
                _changed(s, s["size"], mtime) + "; only its modification time changed, but "
                + why + " (verify --refresh cannot prove it): re-run virtualize"))
            continue
        tag = s["fingerprint"].rsplit(":", 1)[0]
        todo.setdefault((s.get("referenced_by") or s["path"], tag), []).append((i, s, mtime))
    results = []
    for tag in dict.fromkeys(t for _, t in todo):
        files = [f for f, t in todo if t == tag]
        hint = hint_of(tag + ":")
        results += zip(((f, tag) for f in files), scan_bounded(files, scan_timeout or None, 1, hint))
    for f, result in results:
        found: dict[str, str | None] = {}
        why = "its block tables differ from what the cube recorded"
        if isinstance(result, FileInventory):
            found = {src.path: src.fingerprint for src in result.sources()}
        else:
            why = "it cannot be scanned again: " + "; ".join(p.message for p in result[:2])
        for i, s, mtime in todo[f]:
            if found.get(s["path"]) == s["fingerprint"]:
                out.touched.append(Touched(i, s["path"], mtime))
                out.problems.append(Problem(
                    Location(s["path"]), TOUCHED,
                    f"touched, unchanged: modified {_when(mtime)} (recorded "
                    f"{_when(s['mtime_ns'])}), its size and block tables as recorded; "
                    "`virtualize verify --refresh CUBE` records the new time",
                    fatal=strict))
            else:
                out.problems.append(Problem(Location(s["path"]), "source-changed",
                                            _changed(s, s["size"], mtime) + f": {why}"))


def refuse_stale(sources: list[dict[str, Any]], what, *, strict: bool = False,
                 touched_fatal: str | None = None) -> SourceCheck:
    """`check_sources`, raising `VirtualizeError` on a stale source (or a touched one when
    `strict`, or with `touched_fatal`: why this kind cannot read it); a touched source
    is otherwise a `SourceTouchedWarning`."""
    check = check_sources(sources, strict=strict or touched_fatal is not None)
    if touched_fatal is not None:
        check.problems = [p if p.kind != TOUCHED else
                          Problem(p.loc, p.kind, f"{p.message}; {touched_fatal}")
                          for p in check.problems]
    fatal = [p for p in check.problems if p.fatal]
    if fatal:
        touched = all(p.kind == TOUCHED for p in fatal)
        raise VirtualizeError(fatal, f"{what}: " + (
            "source files were touched (blocks unchanged): run `virtualize verify --refresh`"
            if touched else "its source files changed since it was written; re-run virtualize"))
    for p in check.problems:
        warnings.warn(f"{what}: {p}", SourceTouchedWarning, stacklevel=3)
    return check


def _when(ns: int) -> str:
    """A modification time in ns as UTC, to the nanosecond (a rewrite may keep the second)."""
    import datetime

    try:
        t = datetime.datetime.fromtimestamp(ns // 10**9, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return f"{ns} ns"
    return f"{t:%Y-%m-%d %H:%M:%S}.{ns % 10**9:09d} UTC"
