"""The Python API: scan -> plan -> check -> write, every problem collected. One module per
job (docs/architecture.md): `checking` (check, check_mosaic, inventory), `create`
(virtualize, mosaic), `appending` (append), `catalog` (an archive into one cube per
dataset and an intake-esm catalog), `cubes` (export, verify_cube, open), each made
of the shared steps in `steps` and planned by a `Recipe` (`recipe`); the worker policy is
`run/policy.py`. Every public name is here, imported from its module on first use (PEP
562): `check` imports the checking job's modules only, not the writers' (zarr) or the
catalog's."""

from __future__ import annotations

import importlib

# name -> the module defining it (relative to this package; ".." for the package's own)
_WHERE = {
    "FileInventory": "..model",
    "DEFAULT_INLINE_THRESHOLD": "..plan",
    "DEFAULT_CHUNK_SIZE": "..plan.cut",
    **dict.fromkeys(("AUTO_SERIAL", "REMOTE_JOBS", "scan_jobs"), "..run.policy"),
    "append": ".appending",
    "catalog": ".catalog",
    **dict.fromkeys(("check", "check_mosaic", "inventories", "inventory"), ".checking"),
    **dict.fromkeys(("mosaic", "virtualize"), ".create"),
    **dict.fromkeys(("export", "open", "verify_cube"), ".cubes"),
    **dict.fromkeys(("DEFAULTS", "Planner", "Recipe"), ".recipe"),
    **dict.fromkeys(("DAMAGED", "DATA_SUFFIXES", "DEFAULT_SCAN_TIMEOUT", "UNSCANNABLE",
                     "PathLike"), ".steps"),
}
_RENAMED = {"CATALOG_KINDS": (".catalog", "KINDS")}

__all__ = sorted([*_WHERE, *_RENAMED])


def __getattr__(name: str):
    if name in _RENAMED:
        module, attr = _RENAMED[name]
    elif name in _WHERE:
        module, attr = _WHERE[name], name
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    found = importlib.import_module(module, __name__)
    # importing `.catalog` binds the submodule as this package's `catalog`: every public
    # name of that module is bound here now, so the function, not the module, is found
    for public, where in _WHERE.items():
        if where == module:
            globals()[public] = getattr(found, public)
    value = getattr(found, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
