"""virtualize: stacks of netCDF / HDF5 files as one virtual Zarr v3 cube.

The Python API (the CLI is a thin layer over it):

- `scan(path) -> FileInventory`: one file's variables and block tables.
- `check(paths, concat_dim=None) -> Report`: can this stack be virtualized? `.ok`,
  `.problems` (every problem of every file, located), `.plan`.
- `virtualize(paths, out, concat_dim=None, overwrite=False) -> Report`: write a cube
  directory (or a kerchunk reference JSON when `out` ends in `.json`); raises
  `VirtualizeError` carrying every problem when the stack cannot be virtualized.
- `check_mosaic(tiles, offsets=None, overlap=None) -> Report` and
  `mosaic(tiles, out, ...)`: map tiles placed side by side by their georeferencing (or
  explicit pixel offsets) into one array, cut at every tile edge and block boundary.
- `append(cube, files)`: add files to the end of a cube directory, planned as before.
- `open(path) -> zarr.Group`: a read-only zarr group over a cube.
"""

__version__ = "0.1.0"

from .api import append, check, check_mosaic, mosaic, open, scan, virtualize  # noqa: E402
from .model import Problem, VirtualizeError  # noqa: E402
from .report import Report  # noqa: E402

__all__ = ["Problem", "Report", "VirtualizeError", "append", "check", "check_mosaic", "mosaic",
           "open", "scan", "virtualize"]
