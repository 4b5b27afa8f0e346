"""An input format as another package adds one (tests/test_plugins.py, docs/architecture.md
"Adding a format"): NumPy's `.npy` files, one array each, referenced in place. The whole
array is one block (C order, uncompressed: its bytes follow the header); its values are
read back with numpy, the format's own library. Registered by the entry point
`virtualize.formats: npy = virtualize_npy:FORMAT`."""

from __future__ import annotations

import os

import numpy as np

from virtualize.conventions import bytes_codec
from virtualize.formats._planning import finish
from virtualize.formats.base import Format
from virtualize.model import REF_DTYPE, BlockTable, Dimension, FileInventory, Variable

MAGIC = b"\x93NUMPY"
DIMS = ("time", "y", "x")  # a stack of 1-, 2- or 3-D arrays along their first axis


def scan_npy(path: str) -> FileInventory:
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        header = {(1, 0): np.lib.format.read_array_header_1_0,
                  (2, 0): np.lib.format.read_array_header_2_0}.get(version)
        if header is None:
            raise ValueError(f"a .npy file of version {version}")
        shape, fortran, dtype = header(f)
        offset = f.tell()
    if fortran or dtype.hasobject or not 1 <= len(shape) <= len(DIMS):
        raise ValueError("only C-ordered arrays of plain values, 1 to 3 axes")
    dims = DIMS[:len(shape)]
    refs = np.array([(0, offset, int(np.prod(shape)) * dtype.itemsize)],
                    dtype=REF_DTYPE).reshape((1,) * len(shape))
    array = Variable(name="array", dtype=dtype, shape=tuple(shape), dims=dims, attrs={},
                     fill_value=None, codecs=[bytes_codec(dtype)],
                     blocks=BlockTable(tuple(shape), padded=False, refs=refs))
    st = os.stat(path)
    return FileInventory(path, "npy", st.st_size, st.st_mtime_ns, {"": {}},
                         {d: Dimension(d, n) for d, n in zip(dims, shape)}, {"array": array})


class Npy(Format):
    name = "npy"
    suffixes = (".npy",)
    inventory_formats = ("npy",)
    modules = (__name__,)

    def sniff(self, head: bytes, f=None) -> bool:
        return head[:6] == MAGIC

    def scan(self, path: str, hint=None) -> FileInventory:
        return finish(scan_npy(path), hint)

    def read_region(self, path: str, name: str, region=None):
        values = np.load(path, mmap_mode="r")
        if region is not None:
            values = values[tuple(slice(a, b) for a, b in region)]
        return np.array(values)


FORMAT = Npy()
