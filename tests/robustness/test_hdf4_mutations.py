"""The mutation suite (test_mutations.py: its sources' mutations and `_oracle.judge`'s
rule) over HDF4 and HDF-EOS2 files. pyhdf (the HDF4 C library) can crash on a damaged file,
so the oracle's reads run in a child process (`_oracle.pyhdf_read`): a read that crashes
counts as one the library cannot do (the cube must then fail to read it too, or the scan
refuse the file)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from . import _oracle
from .conftest import OUTCOMES
from .test_mutations import SEED, Source, mutate

pytest.importorskip("pyhdf.SD")
import make_hdf4  # noqa: E402  (fixtures/ is on sys.path: tests/conftest.py)

# (a third of the suite's budget per source: each file costs a child process for pyhdf)
EXAMPLES = max(1, int(os.environ.get("VIRTUALIZE_MUTATIONS", "60")) // 3)


# (plain SD files: every layout; HDF-EOS2 swaths and a grid with its vgroups and
# StructMetadata: the geographic one, whose XDim / YDim coordinates are computed)
@pytest.mark.parametrize("case", ["hdf4_sds", "hdf4_codecs", "hdf4_eos", "hdf4_eos_grids"])
def test_mutated_hdf4_files_are_read_exactly_or_refused(case, tmp_path_factory):
    work = tmp_path_factory.mktemp(f"mut-{case}")
    path = make_hdf4.make(case, work)[0]
    src = Source(case, path)

    @settings(max_examples=EXAMPLES, derandomize=SEED is None, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @seed(int(SEED or 0))
    @given(st.data())
    def run(data):
        mutated, what = mutate(src, data)
        target = work / "mutated.hdf"
        target.write_bytes(mutated)
        try:
            outcome = _oracle.judge(target, work / "cube.zarr")
        except AssertionError as e:
            raise AssertionError(f"{case} {what}: {e}") from None
        OUTCOMES.append((case, outcome))

    run()
