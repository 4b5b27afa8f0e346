"""Scans on an executor (a dask.distributed Client or a concurrent.futures.Executor): files
in batches as tasks, each file bounded where the task runs as locally (`workers.py`)."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable, Iterator

from .. import storage
from ..model import Location, Problem, UsageError
from . import workers
from .workers import Result


def scan_task(paths: list[str], settings: tuple, timeout: float | None) -> list[Result]:
    """One task on an executor: scan `paths` where the task runs, each file bounded as
    locally (a worker process of this one, `timeout`; in this process when None)."""
    storage.set_options(settings[0])
    storage.set_environment(settings[1])
    if not timeout:
        return [workers.scan_or_problems(p, settings[2]) for p in paths]
    return list(workers.scan_bounded(paths, timeout, 1, settings[2]))


def dask_client(address: str | None = None):
    """A dask.distributed Client of the scheduler at `address`, or of a new local cluster
    sized to this machine (one single-threaded worker process a core; closed with the
    client by the caller: `client._virtualize_cluster`)."""
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise UsageError("--executor dask needs dask.distributed: "
                         "pip install 'virtualize[dask]'") from None
    if address:
        try:
            return Client(address, timeout=30)
        except (OSError, TimeoutError) as e:
            raise UsageError(f"--scheduler {address}: cannot connect ({e})") from None
    cluster = LocalCluster(n_workers=os.cpu_count() or 1, threads_per_worker=1,
                           dashboard_address=None)
    client = Client(cluster)
    client._virtualize_cluster = cluster
    return client


def executor_slots(executor) -> int:
    """How many tasks `executor` runs at once (a guess where it does not say)."""
    if _is_dask(executor):
        try:
            return max(1, sum(executor.nthreads().values()))
        except Exception:
            return 4
    return max(1, getattr(executor, "_max_workers", 0) or 4)


def _is_dask(executor) -> bool:
    return type(executor).__module__.startswith("distributed")


def task_failed(path: str, e: BaseException) -> list[Problem]:
    return [Problem(Location(path), "scan-crashed",
                    f"the scan of this file failed on the executor ({type(e).__name__}: {e}); "
                    "its worker died or could not run the task")]


def scan_on(executor, paths: Iterable[str], timeout: float | None,
            batch: int | None = None, hint=None) -> Iterator[Result]:
    """Scan `paths` as tasks of `executor`, `batch` files a task (several so that a task
    costs little next to its files), yielding each file's result in the order given. The
    workers return the inventories (FileInventory pickles compactly: its block tables
    are numpy arrays); the caller plans. A task that fails as a whole (its worker died) is
    run again one file a task, so the file at fault is named (`scan-crashed`)."""
    paths = [storage.normalize(p) for p in paths]
    settings = (storage.get_options(), storage.environment(), hint)
    slots = executor_slots(executor)
    batch = batch or max(1, min(64, len(paths) // (slots * 4)))
    if _is_dask(executor):
        def submit(chunk):
            return executor.submit(scan_task, chunk, settings, timeout, pure=False)
    else:
        def submit(chunk):
            return executor.submit(scan_task, chunk, settings, timeout)
    chunks = [paths[i:i + batch] for i in range(0, len(paths), batch)]
    window = deque()  # at most 2 tasks a slot in flight: results wait on the workers
    nxt = 0
    try:
        for chunk in chunks:
            while nxt < len(chunks) and len(window) < 2 * slots:
                window.append(submit(chunks[nxt]))
                nxt += 1
            future = window.popleft()
            try:
                results = future.result()
            except Exception as e:
                if len(chunk) == 1:
                    results = [task_failed(chunk[0], e)]
                else:  # again, one file a task
                    results = []
                    for f in [submit([p]) for p in chunk]:
                        try:
                            results += f.result()
                        except Exception as e1:
                            results.append(task_failed(chunk[len(results)], e1))
            yield from results
    finally:
        for f in window:
            f.cancel()
