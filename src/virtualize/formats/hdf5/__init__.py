"""HDF5 and netCDF-4 files: block tables from each dataset's chunk index, via h5py.

A chunked dataset's index is read in one pass: a v1 B-tree (netCDF-C's default, and any
file written for every library version), a fixed array, an extensible array, a v2 B-tree
or an implicit index in a local file directly from the file's bytes, one `np.frombuffer`
per B-tree node or array block or page (`_native_chunk_index`), checked against HDF5's own
count of the index (whose walk also checks the arrays' checksums; through the file-object
driver the direct reader reuses its reads, else it reads the same bytes of the file
again); every other index, a remote
file, and anything the direct reader does not expect, with one `chunk_iter` pass (never
`get_chunk_info(i)` in a loop, which is O(N) per call), whose chunks of an extensible
array with its unlimited axis not the first HDF5 misplaces (`_chunk_iter_swizzles`): the
scan puts them at their places. Groups are walked with `keys()`; data is read only for
small 1-D coordinate variables, whose values the planner checks and inlines.

A local file of at most 256 KiB is read whole with one read and HDF5 opens that image
(`drivers._Image`: its core driver, no Python call per read of HDF5's); a larger one HDF5
opens by its path (`drivers._Native`: its own driver), the direct readers reading the file;
one HDF5 cannot open so, or has open elsewhere in the process, through h5py's file-object
driver, what HDF5 reads kept (`drivers._Recorder`). Per object:
attributes, and a dataset's layout, filters, fill value, stored type and extent, are
read from the object header's bytes HDF5 has just read and checked (`header.py`; h5py's
calls cost ~20-50 us each, which made a small netCDF-4 file's scan mostly attribute
reads), h5py being asked for whatever that reader leaves (`ASK_H5PY`, `Unexpected`);
every attribute is read at most once (`_Attrs`); a group's links are listed in one HDF5
iteration and objects behind hard links opened with `h5o.open` (h5py's `Group.get`
builds a `File` per dataset); a variable's dimension scales are found by object
identity (header addresses), from one read of its `DIMENSION_LIST`, never by naming the
referenced object (which searches the file).

This package is split by job: `walk.py` (groups, links, variables, dimension scales),
`index.py` (chunk-index readers), `drivers.py` (how HDF5 and the direct readers read
the file), `codecs.py` (filters as codecs, data types, fill
values), `attrs.py` (objects and attributes), `header.py` (object headers read directly),
`vds.py` (virtual datasets); this module is the plug-in (`FORMAT`), importing them (and
h5py) on first use.
"""

from __future__ import annotations

from ... import storage
from .._planning import finish
from ..base import Format, Reader

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def find_hdf5_signature(f) -> bool:
    """True when an HDF5 superblock signature sits at 512 * 2**k bytes (a user block)."""
    from ...storage import file_size

    size = file_size(f)
    pos = 512
    while pos + 8 <= size:
        f.seek(pos)
        if f.read(8) == HDF5_SIGNATURE:
            return True
        pos *= 2
    return False


def _h5py():
    """h5py, with hdf5plugin's filters registered: h5py (the decode check's reference,
    `--inline`) can then read data that plugin filters wrote."""
    from .walk import h5py

    return h5py


class Hdf5(Format):
    name = "hdf5"
    title = "netCDF-4 / HDF5"
    suffixes = (".h5", ".hdf5", ".he5", ".hdf", ".nc4")
    modules = (f"{__name__}.walk",)
    inventory_formats = ("hdf5", "netcdf4")
    reads_linked_data = True

    def sniff(self, head: bytes, f=None) -> bool:
        # HDF5 allows a user block before the signature, at 512, 1024, 2048, ... bytes
        return head.startswith(HDF5_SIGNATURE) or (f is not None and find_hdf5_signature(f))

    def scan(self, path: str, hint=None):
        from .walk import scan_hdf5

        # planning data added while the scanner's file is open (`read`: its values;
        # `pread`: its bytes, those HDF5 has read from memory)
        return scan_hdf5(path, lambda inv, read, pread: finish(inv, hint, read, pread=pread))

    def read_region(self, path: str, name: str, region=None):
        h5py = _h5py()
        sel = () if region is None else tuple(slice(a, b) for a, b in region)
        if not storage.is_url(path):
            with h5py.File(path, "r") as f:
                return f[name][sel]
        with storage.open_source(path) as fobj, h5py.File(fobj, "r") as f:
            return f[name][sel]

    def reader(self, path: str) -> Reader:
        return _Hdf5Reader(self, path)


class _Hdf5Reader(Reader):
    """One h5py.File open across reads."""

    _h5 = _fobj = None

    def __enter__(self) -> "_Hdf5Reader":
        h5py = _h5py()
        if storage.is_url(self.path):
            self._fobj = storage.open_source(self.path)
        self._h5 = h5py.File(self._fobj or self.path, "r")
        return self

    def __exit__(self, *_exc) -> None:
        if self._h5 is not None:
            self._h5.close()
        if self._fobj is not None:
            self._fobj.close()

    def read(self, name: str, region: tuple[tuple[int, int], ...]):
        return self._h5[name][tuple(slice(a, b) for a, b in region)]


FORMAT = Hdf5()
