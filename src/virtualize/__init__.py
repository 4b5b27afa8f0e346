"""virtualize: stacks of netCDF / HDF5 / TIFF files as one virtual Zarr v3 cube.

The Python API (the CLI is a thin layer over it):

- `inventory(path) -> FileInventory`: one file's variables and block tables (the
  `virtualize.formats` subpackage holds the scanners, one plug-in per format).
- `inventories(paths, executor=None)`: many files' inventories (or their problems), in
  order, scanned in worker processes or on an executor (dask.distributed, concurrent.futures).
- `check(paths, concat_dim=None) -> Report`: can this stack be virtualized? `.ok`,
  `.verdict`, `.problems` (every problem of every file, located), `.plan`;
  `.to_store()` / `.to_xarray()` open the plan in memory without writing anything.
- `virtualize(paths, out, concat_dim=None, overwrite=False) -> Report`: write a cube
  directory (or a kerchunk reference JSON when `out` ends in `.json`, or an Icechunk
  repository for `.icechunk`); raises `VirtualizeError` carrying every problem when the
  stack cannot be virtualized.
- `check_mosaic(tiles, offsets=None, overlap=None) -> Report` and
  `mosaic(tiles, out, ...)`: map tiles placed side by side by their georeferencing (or
  explicit pixel offsets) into one array, cut at every tile edge and block boundary.
- `append(cube, files)`: add files to the end of a cube, planned as before.
- `catalog(roots, out, drs="cmip6")`: an archive's trees into one cube per dataset and an
  intake-esm catalog of them (`out/catalog.json`), kept current by re-runs; returns a
  `CatalogReport` (docs/catalog.md).
- `verify_cube(cube, decode=False) -> [Problem]`: have the cube's sources changed?
- `export(cube, out)`: the same cube as another kind (directory, kerchunk, Icechunk).
- `open(path) -> zarr.Group`: a read-only zarr group over a cube.

`jobs` / `executor`: every function that scans takes `jobs=` (worker processes; "auto")
and `executor=` (a `dask.distributed.Client` or `concurrent.futures.Executor`: files are
scanned on its workers, the plan is made here; docs/scale.md).
`progress`: every function that scans takes `progress=callable(done, total, inventory)`,
called in the calling process after each file (`inventory` is None for a file that could
not be scanned). Every exception raised on purpose is a `VirtualizeError`.
"""

from . import open as _open_module  # noqa: F401 - the submodule (light), before the function
from ._version import __version__  # noqa: F401 - re-exported

# `import virtualize` loads nothing else: each public name is imported on first use (PEP
# 562), and with it only what it needs (zarr, h5py, ecCodes, ... where first used).
_PUBLIC = {
    "api": ("append", "catalog", "check", "check_mosaic", "export", "inventories",
            "inventory", "mosaic", "open", "verify_cube", "virtualize"),
    "model": ("OutputExistsError", "Problem", "SourceTouchedWarning", "UnsafeOutputError",
              "UsageError", "VirtualizeError"),
    "report": ("Report",),
}
_WHERE = {name: module for module, names in _PUBLIC.items() for name in names}
# (the submodule `virtualize.open`, imported above, bound its name here: the name is the
# function's, found by __getattr__ like every other)
del open

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
