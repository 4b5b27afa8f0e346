"""The Python API: scan -> plan -> check -> write, every problem collected. One module per
job (docs/architecture.md): `checking` (check, check_mosaic, inventory, the shared steps),
`create` (virtualize, mosaic), `appending` (append), `cubes` (export, verify_cube, open),
`paths` (inputs expanded); the worker policy is `run/policy.py`. Every public name is
here, as `virtualize.api.NAME` was before the split."""

from ..model import FileInventory  # noqa: F401 (as before the split)
from ..plan import DEFAULT_INLINE_THRESHOLD
from ..plan.cut import DEFAULT_CHUNK_SIZE
from ..run.policy import AUTO_SERIAL, REMOTE_JOBS, scan_jobs
from .appending import append
from .checking import (
    DAMAGED,
    DEFAULT_SCAN_TIMEOUT,
    UNSCANNABLE,
    PathLike,
    Planner,
    check,
    check_mosaic,
    inventories,
    inventory,
)
from .create import mosaic, virtualize
from .cubes import export, open, verify_cube
from .paths import DATA_SUFFIXES

__all__ = ["AUTO_SERIAL", "DAMAGED", "DATA_SUFFIXES", "DEFAULT_CHUNK_SIZE", "DEFAULT_INLINE_THRESHOLD",
           "DEFAULT_SCAN_TIMEOUT", "REMOTE_JOBS",
           "UNSCANNABLE", "PathLike", "Planner", "append", "check", "check_mosaic", "export",
           "inventories", "inventory", "mosaic", "open", "scan_jobs", "verify_cube", "virtualize"]
