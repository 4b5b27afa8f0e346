"""How many scan workers a `jobs` value means (docs/scale.md), and its checks."""

from __future__ import annotations

import os
from collections.abc import Sequence

from .. import storage
from ..model import UsageError

# `jobs="auto"`: local files are scanned by one worker below this many files (starting
# more costs more than they save), else by one a core; remote files, whose scans wait on
# requests, by up to REMOTE_JOBS at once
AUTO_SERIAL = 200
REMOTE_JOBS = 8


def check_jobs(jobs, executor) -> None:
    if jobs not in ("auto", None) and (isinstance(jobs, bool) or not isinstance(jobs, int)
                                       or jobs < 0):
        raise UsageError(f"jobs must be a whole number >= 0 (0: one per core) or 'auto', "
                         f"not {jobs!r}")
    if executor is not None and not callable(getattr(executor, "submit", None)):
        raise UsageError(f"executor must be a dask.distributed Client or a "
                         f"concurrent.futures.Executor, not {type(executor).__name__}")


def scan_jobs(jobs: int | str | None, files: Sequence[str]) -> int:
    """The number of scan workers `jobs` means for `files` (docs/scale.md)."""
    if jobs in ("auto", None):
        if any(storage.is_url(f) for f in files):
            return max(1, min(REMOTE_JOBS, len(files)))
        return 1 if len(files) < AUTO_SERIAL else os.cpu_count() or 1
    return min(jobs or os.cpu_count() or 1, max(1, len(files)))
