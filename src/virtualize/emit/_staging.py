"""Publish outputs only when complete; never replace an existing one unless asked."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


def refuse_existing(dest: Path, overwrite: bool) -> None:
    if dest.exists() and not overwrite:
        raise FileExistsError(f"{dest} exists; pass overwrite=True (--overwrite) to replace it")


@contextlib.contextmanager
def staged_dir(dest: Path, overwrite: bool) -> Iterator[Path]:
    """Yield a fresh directory beside `dest`; on success it replaces `dest` in one rename
    (the old one, if replacing, is removed only after the new one is in place); on any
    error the staging directory is removed and `dest` is untouched."""
    refuse_existing(dest, overwrite)
    dest.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{dest.name}.staging-", dir=dest.parent))
    try:
        yield stage
        _publish(stage, dest, overwrite)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


@contextlib.contextmanager
def staged_file(dest: Path, overwrite: bool) -> Iterator[Path]:
    """Like `staged_dir` for one file."""
    refuse_existing(dest, overwrite)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{dest.name}.staging-", dir=dest.parent)
    os.close(fd)
    stage = Path(name)
    try:
        yield stage
        _publish(stage, dest, overwrite)
    except BaseException:
        stage.unlink(missing_ok=True)
        raise


def _publish(stage: Path, dest: Path, overwrite: bool) -> None:
    if not dest.exists():
        os.rename(stage, dest)
        return
    if not overwrite:  # appeared while we worked
        raise FileExistsError(f"{dest} appeared while writing; nothing was replaced")
    old = dest.with_name(f".{dest.name}.replaced-{os.getpid()}")
    os.rename(dest, old)
    try:
        os.rename(stage, dest)
    except BaseException:
        os.rename(old, dest)
        raise
    if old.is_dir() and not old.is_symlink():
        shutil.rmtree(old)
    else:
        old.unlink()
