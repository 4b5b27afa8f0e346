"""Planning reads no source bytes: what it needs from a file's data (digests of variables
that must agree across files, values it stores in the cube) is recorded when the file is
scanned (scan/_planning.py). A stack planned with every source moved away and the value
readers patched to fail gives the same plan."""

from __future__ import annotations

import copy
import json
import shutil

import numpy as np
import pytest

import virtualize
import virtualize.formats
import virtualize.formats._io
from virtualize.plan import ConcatOptions, plan_concat

CASES = ["nc3_months_classic", "nc3_mixed", "months2024", "dtypes", "groups", "bigendian",
         "h5py_plain", "stack_dates", "kerchunk"]


def _same_plan(a, b):
    assert [s.to_dict() for s in a.sources] == [s.to_dict() for s in b.sources]
    assert a.concat_dim == b.concat_dim and a.groups == b.groups and a.notes == b.notes
    assert list(a.arrays) == list(b.arrays)
    for name, x in a.arrays.items():
        y = b.arrays[name]
        assert (x.dtype, x.shape, x.dims, x.chunk_lengths, x.codecs) == \
            (y.dtype, y.shape, y.dims, y.chunk_lengths, y.codecs), name
        assert json.dumps(x.attrs, default=str) == json.dumps(y.attrs, default=str), name
        assert (x.refs is None) == (y.refs is None) and (x.inline is None) == (y.inline is None)
        if x.refs is not None:
            assert np.array_equal(x.refs, y.refs), name
        if x.inline is not None:
            assert x.inline.tobytes() == y.inline.tobytes(), name
        assert x.materialize == y.materialize, name


def _stack(case, name, d):
    if name == "kerchunk":  # reference sets made here, pointing at copies of netCDF-4 files
        from kerchunk.hdf import SingleHdf5ToZarr

        out = []
        for f in case("months2024")[:3]:
            nc = shutil.copy2(f, d / f.name)
            ref = d / (f.stem + ".json")
            ref.write_text(json.dumps(SingleHdf5ToZarr(str(nc)).translate()))
            out.append(ref)
        return out
    return [shutil.copy2(f, d / f.name) for f in case(name)]


@pytest.mark.parametrize("name", CASES)
def test_planning_with_every_source_gone_gives_the_same_plan(case, tmp_path, monkeypatch, name):
    src = tmp_path / "src"
    src.mkdir()
    files = _stack(case, name, src)
    invs = [virtualize.inventory(f) for f in files]
    opts = ConcatOptions(concat_dim="band" if name == "h5py_plain" else None)
    here, here_problems = plan_concat(copy.deepcopy(invs), opts)
    src.rename(tmp_path / "gone")  # every source (and data file) unreadable

    def refuse(*args, **kw):
        raise AssertionError("planning read a source")

    monkeypatch.setattr(virtualize.formats, "read_values", refuse)
    monkeypatch.setattr(virtualize.formats._io, "digest_blocks", refuse)
    gone, gone_problems = plan_concat(copy.deepcopy(invs), opts)
    assert [str(p) for p in gone_problems] == [str(p) for p in here_problems]
    _same_plan(here, gone)


def test_shared_variables_carry_digests_from_the_scan(case):
    """netCDF classic `orog` (no record axis) is compared across files by its digest; a
    file whose copy differs is still refused, with no source read at planning."""
    files = case("nc3_months_classic")
    invs = [virtualize.inventory(f) for f in files]
    assert all(inv.variables["orog"].digest for inv in invs)
    assert all(inv.variables["tas"].digest is None for inv in invs)  # along the record dim
    invs[1].variables["orog"].digest = "0" * 64
    _plan, problems = plan_concat(invs)
    assert [(p.kind, p.loc.file, p.loc.variable) for p in problems] == \
        [("differs-between-files", str(files[1]), "orog")]
