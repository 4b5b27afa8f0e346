"""Publish outputs only when complete; never replace anything virtualize did not write.

An output is staged beside its destination (`.OUT.staging-PID-xxxx`) and published in
one step. Replacing an existing output (`overwrite`) is allowed only when it is one of
virtualize's own (what an output kind's `is_ours` claims: a cube directory, a kerchunk
JSON with its `virtualize` section, an Icechunk repository, ...) and when the destination
neither is, contains, nor sits inside a source of the new output. On Linux the new
output and the old one are swapped with one `renameat2(RENAME_EXCHANGE)`: the
destination is always a complete output, old or new. Elsewhere the old output is first
renamed to `.OUT.replaced-PID`; a run killed between the two renames leaves it there, and
the next run for the same destination puts it back.
Leftovers of killed runs (their process is gone) are recognised by name and removed.

Published outputs follow the umask like any other file (staging dirs start private).
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import errno
import json
import os
import re
import shutil
import socket
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ..model import Location, OutputExistsError, Problem, UnsafeOutputError

STAGING_MARK = ".virtualize-staging"  # inside a staging directory until it is published

# What virtualize writes: each output kind's strict test (`OutputKind.is_ours`), given by
# the registry as it loads the kinds (staging imports none of them)
_OURS: list[Callable[[Path], bool]] = []


def recognise(is_ours: Callable[[Path], bool]) -> None:
    """Take an output kind's `is_ours`: what it claims may be replaced (--overwrite) and
    is removed as a killed run's leftover."""
    if is_ours not in _OURS:
        _OURS.append(is_ours)


def written(path: str | os.PathLike) -> bool:
    """Whether `path` (following a symlink) is an output virtualize wrote: one an output
    kind claims."""
    p = Path(path)
    try:
        return any(is_ours(p) for is_ours in _OURS)
    except OSError:
        return False


# -- the guards ---------------------------------------------------------------------------

def _real(p: str | os.PathLike) -> str:
    return os.path.realpath(os.path.abspath(os.fspath(p)))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def refuse_sources(dest: str | os.PathLike, sources: Iterable[str | os.PathLike]) -> None:
    """The destination may never be a source, contain one, or sit inside one (a source
    directory), whichever way symlinks point."""
    from ..storage import is_url

    if is_url(dest):
        d = os.fspath(dest).rstrip("/")
        for s in map(os.fspath, sources):
            if s == d or s.startswith(d + "/"):
                raise UnsafeOutputError(Problem(Location(d), "output-is-source",
                                                f"is or contains the source {s}; choose another "
                                                "output location"))
        return
    d_abs = os.path.abspath(os.fspath(dest))
    d_real = _real(dest)
    for s in sources:
        if is_url(s):  # an object is never a local output's file
            continue
        s_abs = os.path.abspath(os.fspath(s))
        s_real = _real(s)
        for d in {d_abs, d_real}:
            for src in {s_abs, s_real}:
                if d == src:
                    why = "is a source file of this output"
                elif _under(src, d):
                    why = f"contains the source {s_abs}"
                elif _under(d, src):
                    why = f"lies inside the source {s_abs}"
                else:
                    continue
                raise UnsafeOutputError(Problem(Location(str(dest)), "output-is-source",
                                                f"{why}; choose another output path"))


EXISTS_OURS = "exists; pass overwrite=True (--overwrite) to replace it"
EXISTS_NOT_OURS = ("exists and was not written by virtualize: it is never replaced, not even "
                   "with --overwrite; choose another output path")


def guard_output(dest: str | os.PathLike, overwrite: bool,
                 sources: Iterable[str | os.PathLike] = ()) -> None:
    """Raise unless writing `dest` is safe: it must not exist, or (with `overwrite`) be an
    output virtualize wrote; and it must not be, contain or sit in a source."""
    dest = Path(os.path.abspath(os.fspath(dest)))
    sources = list(sources)
    recover(dest, sources)
    refuse_sources(dest, sources)
    if not os.path.lexists(dest):
        return
    ours = written(dest)
    if not overwrite:  # (--overwrite advised only where it would replace the output)
        raise OutputExistsError(Problem(Location(str(dest)), "output-exists", EXISTS_OURS
                                        if ours else EXISTS_NOT_OURS))
    if not ours:
        raise UnsafeOutputError(Problem(
            Location(str(dest)), "output-not-ours",
            "exists and was not written by virtualize (not a cube directory, kerchunk JSON, "
            "Icechunk repository or VRT it made): not replaced, even with --overwrite"))


# -- staging ------------------------------------------------------------------------------

@contextlib.contextmanager
def locked(dest: str | os.PathLike) -> Iterator[None]:
    """An exclusive lock on the existing output `dest` (its directory or file) for a
    read-modify-write such as `append`: other virtualize processes doing the same wait
    until this one has published. Taken on the output itself, and taken again when the
    output was replaced (published by another appender) while waiting for it."""
    import fcntl

    dest = Path(dest)
    while True:
        fd = os.open(dest, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            now, held = os.stat(dest), os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise
        if (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
            break
        os.close(fd)  # replaced while we waited: lock the new one
    try:
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def staged_dir(dest: str | os.PathLike, overwrite: bool,
               sources: Iterable[str | os.PathLike] = (), mark: bool = True) -> Iterator[Path]:
    """Yield a fresh directory beside `dest`; on success it replaces `dest` in one step
    (the old one, if replacing, is removed only after the new one is in place); on any
    error the staging directory is removed and `dest` is untouched. `mark`: it holds
    virtualize's mark until published (not for writers that need it empty, Icechunk: a
    leftover of theirs is recognised by its layout)."""
    dest = Path(os.path.abspath(os.fspath(dest)))
    sources = list(sources)
    guard_output(dest, overwrite, sources)
    dest.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=_stage_prefix(dest), dir=dest.parent))
    try:
        # what tells a later run that this directory is a leftover of ours (and of which
        # host: a process id means nothing on another machine sharing the directory)
        if mark:
            (stage / STAGING_MARK).write_text(json.dumps({"host": socket.gethostname(),
                                                          "pid": os.getpid()}))
        yield stage
        if mark:
            (stage / STAGING_MARK).unlink()
        os.chmod(stage, 0o777 & ~_umask())
        _publish(stage, dest, overwrite, sources)
    except BaseException:
        _remove(stage)
        raise


@contextlib.contextmanager
def staged_file(dest: str | os.PathLike, overwrite: bool,
                sources: Iterable[str | os.PathLike] = ()) -> Iterator[Path]:
    """Like `staged_dir` for one file."""
    dest = Path(os.path.abspath(os.fspath(dest)))
    sources = list(sources)
    guard_output(dest, overwrite, sources)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=_stage_prefix(dest), dir=dest.parent)
    os.close(fd)
    stage = Path(name)
    try:
        yield stage
        os.chmod(stage, 0o666 & ~_umask())
        _publish(stage, dest, overwrite, sources)
    except BaseException:
        _remove(stage)
        raise


def _stage_prefix(dest: Path) -> str:
    return f".{dest.name}.staging-{os.getpid()}-"


def _replaced_name(dest: Path) -> Path:
    return dest.with_name(f".{dest.name}.replaced-{os.getpid()}")


def _publish(stage: Path, dest: Path, overwrite: bool, sources: list) -> None:
    if not os.path.lexists(dest):
        if _rename_noreplace(stage, dest):
            return
    # there is something at dest (or it appeared while we worked): check it again
    guard_output(dest, overwrite, sources)
    if not os.path.lexists(dest):  # recovered or gone meanwhile
        if _rename_noreplace(stage, dest):
            return
        guard_output(dest, overwrite, sources)
    if _exchange(stage, dest):
        _remove(stage)  # now the old output
        return
    old = _replaced_name(dest)
    os.rename(dest, old)
    try:
        os.rename(stage, dest)
    except BaseException:
        os.rename(old, dest)
        raise
    _remove(old)


def _remove(p: Path) -> None:
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(p, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)


# -- renameat2 (Linux): atomic exchange, and rename that never replaces -----------------

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2


def _renameat2(src: Path, dst: Path, flags: int) -> bool | None:
    """True when done, None when renameat2 or the flag is unavailable here; raises
    OSError for real errors."""
    fn = _libc_renameat2()
    if fn is None:
        return None
    r = fn(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags)
    if r == 0:
        return True
    e = ctypes.get_errno()
    if e in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return None
    raise OSError(e, os.strerror(e), str(dst))


_LIBC: list = []


def _libc_renameat2():
    if not _LIBC:
        try:
            fn = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
        except OSError:
            fn = None
        if fn is not None:
            fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                           ctypes.c_uint]
            fn.restype = ctypes.c_int
        _LIBC.append(fn)
    return _LIBC[0]


def _exchange(stage: Path, dest: Path) -> bool:
    """Swap the two in one step, if the system can."""
    return bool(_renameat2(stage, dest, _RENAME_EXCHANGE))


def _rename_noreplace(stage: Path, dest: Path) -> bool:
    """Rename unless something appeared at dest (False then)."""
    try:
        done = _renameat2(stage, dest, _RENAME_NOREPLACE)
    except FileExistsError:
        return False
    if done:
        return True
    if os.path.lexists(dest):
        return False
    os.rename(stage, dest)
    return True


# -- leftovers of killed runs -------------------------------------------------------------

def recover(dest: str | os.PathLike, sources: Iterable[str | os.PathLike] = ()) -> list[str]:
    """Clean up after runs for `dest` that were killed (their process is gone): put back
    an old output whose replacement never arrived (`.OUT.replaced-PID` while OUT is
    missing), remove replaced outputs and staging leftovers. Only what virtualize itself
    left is touched: a replaced output is one of its outputs, a staging directory holds
    its mark (written by this host) or is a whole output, a staging file is empty or
    begins as an output of its own (a kerchunk JSON, a VRT); a file merely named like a
    leftover, or a source of this run, is never moved or removed. Returns what was done."""
    dest = Path(os.path.abspath(os.fspath(dest)))
    if str(dest.parent) in _RECOVERED.get():
        return []
    keep = {_real(s) for s in sources}
    try:
        mine = "." + dest.name + "."  # (a directory of 10^4 outputs: no pattern per name)
        names = [n for n in os.listdir(dest.parent) if n.startswith(mine)]
    except OSError:
        return []
    name = re.escape(dest.name)
    staging = re.compile(rf"\.{name}\.staging-(\d+)-[A-Za-z0-9_]+")
    replaced = re.compile(rf"\.{name}\.replaced-(\d+)")
    done = []
    for n in sorted(names):
        m = replaced.fullmatch(n)
        p = dest.parent / n
        if m and not _alive(int(m.group(1))) and _real(p) not in keep and written(p):
            if not os.path.lexists(dest):
                if _rename_noreplace(p, dest):
                    done.append(f"restored {dest} from {p}")
                    continue
            _remove(p)
            done.append(f"removed {p}")
    for n in sorted(names):
        m = staging.fullmatch(n)
        p = dest.parent / n
        if m and not _alive(int(m.group(1))) and _real(p) not in keep and _our_stage(p):
            _remove(p)
            done.append(f"removed {p}")
    return done


# directories whose leftovers were all cleaned up (`recovered`): `recover` lists none again
_RECOVERED: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "recovered", default=frozenset())
_LEFTOVER = re.compile(r"\.(.+)\.(?:staging-\d+-[A-Za-z0-9_]+|replaced-\d+)")


@contextlib.contextmanager
def recovered(directory: str | os.PathLike, sources: Iterable[str | os.PathLike] = ()
              ) -> Iterator[list[str]]:
    """Every output's leftovers in `directory` cleaned up at once (`recover` of each name a
    leftover is of: one listing), and, within it, `recover` of an output there lists the
    directory no more: a job writing thousands of outputs into one directory under its
    own lock (`catalog`) pays one listing, not one per output (each an O(outputs) listing).
    Yields what was done."""
    d = os.path.abspath(os.fspath(directory))
    try:
        names = os.listdir(d)
    except OSError:
        names = []
    sources = list(sources)
    done: list[str] = []
    for dest in sorted({m.group(1) for m in map(_LEFTOVER.fullmatch, names) if m}):
        done += recover(os.path.join(d, dest), sources)
    token = _RECOVERED.set(_RECOVERED.get() | {d})
    try:
        yield done
    finally:
        _RECOVERED.reset(token)


def _our_stage(p: Path) -> bool:
    """A staging leftover virtualize made on this host (see `recover`)."""
    try:
        if os.path.islink(p):
            return False
        if p.is_dir():
            mark = p / STAGING_MARK
            if mark.is_file():
                return json.loads(mark.read_text()).get("host") == socket.gethostname()
            return written(p)
        if p.is_file():  # (a file output's, killed before its end: begun as one of ours)
            return os.path.getsize(p) == 0 or written(p)
    except (OSError, ValueError, AttributeError):
        return False
    return False


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _umask() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def replace_atomically(path: Path, data: bytes | Iterable[bytes]) -> None:
    """`path` replaced by `data` (bytes, or pieces of them written in turn) in one rename
    (a file beside it, then os.replace)."""
    tmp = path.with_name(f".{path.name}.refresh-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            if isinstance(data, (bytes, bytearray, memoryview)):
                f.write(data)
            else:
                f.writelines(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
