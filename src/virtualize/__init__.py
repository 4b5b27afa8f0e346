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

from ._version import __version__  # noqa: F401 - re-exported
from .api import (
    append,
    catalog,
    check,
    check_mosaic,
    export,
    inventories,
    inventory,
    mosaic,
    open,
    verify_cube,
    virtualize,
)
from .model import (
    OutputExistsError,
    Problem,
    SourceTouchedWarning,
    UnsafeOutputError,
    UsageError,
    VirtualizeError,
)
from .report import Report

__all__ = ["OutputExistsError", "Problem", "Report", "SourceTouchedWarning", "UnsafeOutputError",
           "UsageError",
           "VirtualizeError", "append", "catalog", "check", "check_mosaic", "export", "inventories",
           "inventory",
           "mosaic",
           "open", "verify_cube", "virtualize"]
