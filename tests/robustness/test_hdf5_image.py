"""The HDF5 scanner's fast paths against the ways they replace, which must give the same
inventory, or the same refusal, on every netCDF-4 / HDF5 fixture, every HDF5 regression
input of the mutation suite and mutants of its HDF5 sources (the mutation suite itself
then judges the fast paths against h5py's reading of the file by its path):

- a small local file read whole with one read and opened by HDF5 from that image (its
  core driver: `formats/hdf5/drivers._Image`), and a larger one opened by HDF5 by its path
  (its own driver: `drivers._Native`; here every file, whatever its size), each against
  h5py's file-object driver (one Python call per read of HDF5's, what HDF5 read reused);
- a few chunks' block table made in Python (`index._few_blocks`), against the
  numpy pass of `_blocks`;
- a dataset's shape and maximum shape from its header's dataspace message
  (`header.dataset_extent`), against h5py's;
- an object header read before (the same bytes: `header.AttrReader._header_key`, in
  another file), against reading it again."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_h5meta import HDF5_CASES, _inventory_fields

import virtualize
from virtualize.formats.hdf5 import drivers as hdf5_drivers
from virtualize.formats.hdf5 import header as hdf5_header
from virtualize.formats.hdf5 import walk as hdf5_walk

from .test_mutations import SOURCES, Source, mutate

HERE = Path(__file__).parent / "regressions"
HDF5_SOURCES = [s for s in SOURCES if s[0].startswith(("netcdf4", "hdf5"))]
# (HDF5 spins on this one: judged in a bounded worker by test_regressions)
SPINS = {"hang_hdf5_gcol_bitflip.nc"}
MUTANTS = 40  # per source: the file-object driver's scans make it ~4 s in all


def _outcome(path):
    try:
        return _inventory_fields(virtualize.inventory(path))
    except virtualize.VirtualizeError as e:
        return ("refused", [(p.kind, str(p.loc), p.message) for p in e.problems])


def _counted(m, cls, opened: list) -> None:
    real = cls.open

    def counted(self):
        got = real(self)
        if got is not None:
            opened.append(self)
        return got

    m.setattr(cls, "open", counted)


def _both(path, monkeypatch) -> tuple:
    """(the outcome with the fast paths, without them), and whether the image was used;
    the outcome with HDF5 opening the file by its path (`_Native`) must be the slow one
    too, where HDF5 opens it so."""
    opened, native = [], []
    with monkeypatch.context() as m:
        _counted(m, hdf5_drivers._Image, opened)
        fast = _outcome(path)
    with monkeypatch.context() as m:
        _counted(m, hdf5_drivers._Native, native)
        m.setattr(hdf5_drivers._Image, "LIMIT", 0)
        m.setattr(hdf5_drivers._Native, "MIN", 0)
        by_path = _outcome(path)
    with monkeypatch.context() as m:
        m.setattr(hdf5_drivers._Image, "LIMIT", 0)
        m.setattr(hdf5_drivers._Native, "MIN", 1 << 62)
        m.setattr(hdf5_walk, "_few_blocks", lambda *a: None)
        m.setattr(hdf5_walk, "dataset_extent", lambda messages: None)
        m.setattr(hdf5_header.AttrReader, "_header_key", lambda self, addr: None)
        slow = _outcome(path)
    assert by_path == slow, "opened by its path"
    return fast, slow, bool(opened)


@pytest.mark.parametrize("name", HDF5_CASES)
def test_fixtures_scan_the_same_from_their_image(case, name, monkeypatch):
    for path in case(name):
        fast, slow, used = _both(path, monkeypatch)
        assert used == (0 < path.stat().st_size <= hdf5_drivers._Image.LIMIT)
        assert fast == slow, path


def test_regression_inputs_scan_the_same_from_their_image(monkeypatch):
    paths = [p for p in sorted(HERE.iterdir()) if p.suffix.lower() in (".nc", ".h5", ".hdf5")
             and p.name not in SPINS]
    assert paths
    for path in paths:
        fast, slow, _used = _both(path, monkeypatch)
        assert fast == slow, path.name


@pytest.mark.parametrize("label", [s[0] for s in HDF5_SOURCES])
def test_mutants_scan_the_same_from_their_image(case, label, tmp_path, monkeypatch):
    name, index = next((n, i) for lab, n, i in HDF5_SOURCES if lab == label)
    src = Source(label, case(name)[index])
    path = tmp_path / f"mutated{src.path.suffix}"
    used = []

    @settings(max_examples=MUTANTS, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def run(data):
        mutated, what = mutate(src, data)
        path.write_bytes(mutated)
        fast, slow, image = _both(path, monkeypatch)
        used.append(image)
        assert fast == slow, what

    run()
    assert any(used)


def _large(tmp_path):
    import h5py
    import numpy as np

    p = tmp_path / "big.h5"
    with h5py.File(p, "w") as f:
        f["x"] = np.arange(hdf5_drivers._Image.LIMIT // 8 + 1, dtype="f8")
        f.create_dataset("y", data=np.arange(2000, dtype="i4").reshape(1000, 2), chunks=(1, 2),
                         compression="gzip")
    return p


def test_a_large_file_is_opened_by_hdf5_by_its_path(tmp_path, monkeypatch):
    p = _large(tmp_path)
    seen = []
    real = hdf5_drivers._Native.open
    monkeypatch.setattr(hdf5_drivers._Native, "open", lambda self: seen.append(1) or real(self))
    inv = virtualize.inventory(p)
    assert seen and inv.variables["x"].blocks is not None
    assert 0 < inv.bytes_read < p.stat().st_size  # its data is not read
    assert len(inv.variables["y"].blocks.refs.reshape(-1)) == 1000


def test_a_large_file_open_elsewhere_is_read_through_the_file_object_driver(tmp_path,
                                                                           monkeypatch):
    """HDF5 shares the handle of a file this process has open (here for writing, its
    changes not yet on disk): opened by its path, HDF5 would read that, the direct readers
    the file; the file-object driver reads the file's bytes."""
    import h5py

    p = _large(tmp_path)
    plain = virtualize.inventory(p)
    seen = []
    real = hdf5_drivers._Recorder
    monkeypatch.setattr(hdf5_drivers, "_Recorder", lambda fobj: seen.append(1) or real(fobj))
    with h5py.File(p, "r", locking=False):
        got = virtualize.inventory(p)
    assert seen and _inventory_fields(got) == _inventory_fields(plain)


def test_the_harness_tells_a_wrong_read_by_path(tmp_path, monkeypatch):
    """The comparison above fails where HDF5, opened by the path, reads other than the
    file-object driver (here: another file, whose dataset has an attribute more)."""
    import shutil

    import h5py

    p = _large(tmp_path)
    other = tmp_path / "other.h5"
    shutil.copy(p, other)
    with h5py.File(other, "a") as f:
        f["x"].attrs["units"] = "K"
    monkeypatch.setattr(hdf5_drivers._Native, "open",
                        lambda self: h5py.File(other, "r", locking=False))
    with pytest.raises(AssertionError, match="opened by its path"):
        _both(p, monkeypatch)
