"""The Python API: scan -> plan -> check -> write, every problem collected. One module per
job (docs/architecture.md): `checking` (check, check_mosaic, inventory), `create`
(virtualize, mosaic), `appending` (append), `catalog` (an archive into one cube per
dataset and an intake-esm catalog), `cubes` (export, verify_cube, open), each made
of the shared steps in `steps` and planned by a `Recipe` (`recipe`); the worker policy is
`run/policy.py`. Every public name is here."""

from ..model import FileInventory
from ..plan import DEFAULT_INLINE_THRESHOLD
from ..plan.cut import DEFAULT_CHUNK_SIZE
from ..run.policy import AUTO_SERIAL, REMOTE_JOBS, scan_jobs
from .appending import append
from .catalog import KINDS as CATALOG_KINDS
from .catalog import catalog
from .checking import check, check_mosaic, inventories, inventory
from .create import mosaic, virtualize
from .cubes import export, open, verify_cube
from .recipe import DEFAULTS, Planner, Recipe
from .steps import DAMAGED, DATA_SUFFIXES, DEFAULT_SCAN_TIMEOUT, UNSCANNABLE, PathLike

__all__ = ["AUTO_SERIAL", "CATALOG_KINDS", "DAMAGED", "DATA_SUFFIXES", "DEFAULTS", "DEFAULT_CHUNK_SIZE",
           "DEFAULT_INLINE_THRESHOLD", "DEFAULT_SCAN_TIMEOUT", "REMOTE_JOBS", "UNSCANNABLE",
           "FileInventory", "PathLike", "Planner", "Recipe", "append", "catalog", "check",
           "check_mosaic",
           "export", "inventories", "inventory", "mosaic", "open", "scan_jobs", "verify_cube",
           "virtualize"]
