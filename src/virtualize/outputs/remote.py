"""Outputs on object storage (OUT is a URL): an output of any kind written where the
data is.

Object stores have no rename, so publishing is ordered instead: the output is built
locally (by the same writers, in a temporary directory), its objects are uploaded data
first and its kind's root documents last (`OutputKind.root_documents`: `virtualize.json`
then the root `zarr.json` of a cube, `repo` of an Icechunk repository; a file output, a
kerchunk JSON, is one PUT), so a reader finds either no output or a complete one.
Replacing (`overwrite`) an existing OUT is allowed only when it is virtualize's own;
objects of the old output that the new one does not have are deleted after the new root
documents are in place.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from .. import storage
from ..model import Location, OutputExistsError, Problem, UnsafeOutputError, VirtualizeError
from . import registry
from .staging import EXISTS_NOT_OURS, EXISTS_OURS, refuse_sources


def _fs(url: str):
    fs = storage.filesystem(url)
    return fs, fs._strip_protocol(url).rstrip("/")


def unreachable(url: str, e: BaseException, writing: bool = True) -> VirtualizeError:
    """A failed request of object storage for output `url` (being written, or read back)
    as the located problem `output-unreachable` (no credentials, forbidden, no such bucket,
    no connection)."""
    text = f"{type(e).__name__}: {e}"[:300]
    status = getattr(e, "status", None)
    if storage.no_credentials(e):
        what = f"no credentials were found: {storage.credentials_hint(url)}"
    elif status in (401, 403) or isinstance(e, PermissionError) or "AccessDenied" in text \
            or "Forbidden" in text:
        what = f"access is forbidden ({text}): {storage.credentials_hint(url)}"
    else:
        what = f"{text}"
    return VirtualizeError([Problem(Location(url), "output-unreachable",
                                    f"cannot be reached: {what}")],
                           f"{url}: cannot be reached" + ("; nothing was written" if writing else ""))


@contextlib.contextmanager
def reaching(url: str, writing: bool = True):
    """Requests for output `url` inside: their errors as `unreachable` (never a traceback)."""
    try:
        yield
    except VirtualizeError:
        raise
    except Exception as e:
        raise unreachable(url, e, writing) from None


def remote_kind(url: str) -> str | None:
    """The kind's name ("cube", "kerchunk", ...) when `url` holds an output virtualize
    wrote; "other" when it holds something else; None when nothing is there."""
    fs, base = _fs(url)
    with reaching(url):
        return registry.remote_written_kind(fs, base)


def guard_remote(url: str, overwrite: bool, sources=()) -> None:
    refuse_sources(url, sources)
    kind = remote_kind(url)
    if kind is None:
        return
    if not overwrite:  # (--overwrite advised only where it would replace the output)
        raise OutputExistsError(Problem(Location(url), "output-exists", EXISTS_NOT_OURS
                                        if kind == "other" else EXISTS_OURS))
    if kind == "other":
        raise UnsafeOutputError(Problem(
            Location(url), "output-not-ours",
            "exists and was not written by virtualize (not a cube directory, kerchunk JSON "
            "or Icechunk repository it made): not replaced, even with --overwrite"))


def write_remote(write, plan, url: str, kind: str, overwrite: bool) -> str:
    """Build the output with `write(plan, local_path, overwrite)` locally, then upload it
    to `url`, root documents last."""
    guard_remote(url, overwrite, [s.path for s in plan.sources])
    fs, base = _fs(url)
    with tempfile.TemporaryDirectory(prefix="virtualize-out-") as tmp:
        local = Path(tmp) / (os.path.basename(base) or "out")
        write(plan, local, False)
        with reaching(url):
            return _upload(fs, base, local, url, kind, overwrite)


def _upload(fs, base: str, local: Path, url: str, kind: str, overwrite: bool) -> str:
    """Upload the output built at `local` to `base` on `fs`, root documents last."""
    if local.is_file():  # one object: replaced whole by its PUT
        fs.put_file(str(local), base)
        return url
    old = set()
    if overwrite:
        try:
            old = {p for p in fs.find(base)}
        except FileNotFoundError:
            old = set()
    files = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
    rank = {name: i for i, name in enumerate(registry.by_name(kind).root_documents)}
    files.sort(key=lambda f: (rank.get(f, -1), f))  # root documents last, in order
    for f in files:
        fs.put_file(str(local / f), f"{base}/{f}")
    stale = sorted(old - {f"{base}/{f}" for f in files})
    if stale:
        fs.rm(stale)
    return url


def download(url: str, into: str | os.PathLike) -> Path:
    """A copy of a remote output in `into` (for reading): the object, or every object
    under the prefix."""
    fs, base = _fs(url)
    with reaching(url, writing=False):
        return _download(fs, base, url, into)


def _download(fs, base: str, url: str, into: str | os.PathLike) -> Path:
    dest = Path(into) / (os.path.basename(base) or "out")
    if fs.isfile(base):
        fs.get_file(base, str(dest))
        return dest
    found = fs.find(base)
    if not found:
        raise VirtualizeError([Problem(Location(url), "not-a-cube", "nothing is there")],
                              f"{url}: not found")
    for obj in found:
        rel = obj[len(base):].lstrip("/")
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        fs.get_file(obj, str(target))
    return dest
