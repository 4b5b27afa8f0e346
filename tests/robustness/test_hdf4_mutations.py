"""The mutation suite (test_mutations.py: its sources' mutations and `_oracle.judge`'s
rule) over HDF4 and HDF-EOS2 files. pyhdf (the HDF4 C library) can crash on a damaged file,
so the oracle's reads run in a child process (`_oracle.pyhdf_read`): a read that crashes
counts as one the library cannot do (the cube must then fail to read it too, or the scan
refuse the file)."""

from __future__ import annotations

import os

import pytest

from .test_mutations import Source, file_mutant, judge_mutants

pytest.importorskip("pyhdf.SD")
import make_hdf4  # noqa: E402  (fixtures/ is on sys.path: tests/conftest.py)

# (a third of the suite's budget per source: each file costs a child process for pyhdf)
EXAMPLES = max(1, int(os.environ.get("VIRTUALIZE_MUTATIONS", "60")) // 3)


# (plain SD files: every layout; HDF-EOS2 swaths and a grid with its vgroups and
# StructMetadata: the geographic one, whose XDim / YDim coordinates are computed)
@pytest.mark.parametrize("case", ["hdf4_sds", "hdf4_codecs", "hdf4_eos", "hdf4_eos_grids"])
def test_mutated_hdf4_files_are_read_exactly_or_refused(case, tmp_path_factory):
    work = tmp_path_factory.mktemp(f"mut-{case}")
    src = Source(case, make_hdf4.make(case, work)[0])
    judge_mutants(case, EXAMPLES, file_mutant(src, work / "mutated.hdf"), work)
