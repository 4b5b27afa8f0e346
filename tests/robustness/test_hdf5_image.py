"""The HDF5 scanner's fast paths against the ways they replace, which must give the same
inventory, or the same refusal, on every netCDF-4 / HDF5 fixture, every HDF5 regression
input of the mutation suite and mutants of its HDF5 sources (the mutation suite itself
then judges the fast paths against h5py's reading of the file by its path):

- a small local file read whole with one read and opened by HDF5 from that image (its
  core driver: `formats/hdf5/index._Image`), against h5py's file-object driver (one
  Python call per read of HDF5's);
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
from virtualize.formats.hdf5 import header as hdf5_header
from virtualize.formats.hdf5 import index as hdf5_index
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


def _both(path, monkeypatch) -> tuple:
    """(the outcome with the fast paths, without them), and whether the image was used."""
    opened = []
    real = hdf5_index._Image.open

    def counted(self):
        opened.append(self)
        return real(self)

    with monkeypatch.context() as m:
        m.setattr(hdf5_index._Image, "open", counted)
        fast = _outcome(path)
    with monkeypatch.context() as m:
        m.setattr(hdf5_index._Image, "LIMIT", 0)
        m.setattr(hdf5_walk, "_few_blocks", lambda *a: None)
        m.setattr(hdf5_walk, "dataset_extent", lambda messages: None)
        m.setattr(hdf5_header.AttrReader, "_header_key", lambda self, addr: None)
        slow = _outcome(path)
    return fast, slow, bool(opened)


@pytest.mark.parametrize("name", HDF5_CASES)
def test_fixtures_scan_the_same_from_their_image(case, name, monkeypatch):
    for path in case(name):
        fast, slow, used = _both(path, monkeypatch)
        assert used == (0 < path.stat().st_size <= hdf5_index._Image.LIMIT)
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


def test_a_large_file_is_read_through_the_file_object_driver(tmp_path, monkeypatch):
    import h5py
    import numpy as np

    p = tmp_path / "big.h5"
    with h5py.File(p, "w") as f:
        f["x"] = np.arange(hdf5_index._Image.LIMIT // 8 + 1, dtype="f8")
    seen = []
    real = hdf5_walk._Recorder
    monkeypatch.setattr(hdf5_walk, "_Recorder", lambda fobj: seen.append(1) or real(fobj))
    inv = virtualize.inventory(p)
    assert seen and inv.variables["x"].blocks is not None
    assert inv.bytes_read < p.stat().st_size  # its data is not read


def _with_continuation(path, last: str) -> None:
    """A dataset whose object header (version 1: no checksum) continues in another block,
    where its last attribute, `last`, lies; its attributes in its messages alone."""
    import h5py
    import numpy as np

    with h5py.File(path, "w", libver="earliest") as f:
        d = f.create_dataset("x", data=np.arange(4, dtype="f4"))
        for i in range(12):
            d.attrs[f"a{i:02d}"] = np.bytes_(f"attribute {i} " * 8)  # (fixed-length: no heap)
        d.attrs["last"] = np.bytes_(last)


def test_a_header_read_before_is_reused_only_with_its_other_blocks(tmp_path):
    """Two files whose dataset headers differ only in their continuation block: the
    second's attributes are its own, though its first block is the first's."""
    import h5py

    one, two = tmp_path / "one.h5", tmp_path / "two.h5"
    _with_continuation(one, "first file")
    _with_continuation(two, "other file")
    a, b = one.read_bytes(), two.read_bytes()
    differ = [i for i in range(len(a)) if a[i] != b[i]]
    with h5py.File(one, "r") as f:
        addr = h5py.h5g.get_objinfo(f["x"].id, b".").objno[0]
        first_block = 16 + int.from_bytes(a[addr + 8:addr + 12], "little")
    assert differ and all(not addr <= i < addr + first_block for i in differ)
    assert virtualize.inventory(one).variables["x"].attrs["last"] == "first file"
    assert virtualize.inventory(two).variables["x"].attrs["last"] == "other file"
