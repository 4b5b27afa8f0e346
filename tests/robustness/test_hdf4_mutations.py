"""The mutation suite (test_mutations.py: its sources' mutations and `_oracle.judge`'s
rule) over HDF4 files. pyhdf (the HDF4 C library) can crash on a damaged file, so the
oracle's reads run in a child process: a read that crashes counts as one the library
cannot do (the cube must then fail to read it too, or the scan refuse the file)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
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
HDF4_MAGIC = b"\x0e\x03\x13\x01"
READ = """
import sys
import numpy as np
from virtualize.formats.hdf4 import read_hdf4_region
out = {}
for name in sys.argv[3:]:
    try:
        out[name] = read_hdf4_region(sys.argv[1], name)
    except Exception:
        pass
np.savez(sys.argv[2], **out)
"""
_cache: dict = {}


def _read_all(path, names) -> dict | None:
    out = f"{path}.npz"
    proc = subprocess.run([sys.executable, "-c", READ, str(path), out, *names],
                          capture_output=True, timeout=600)
    if proc.returncode:
        return None
    try:
        with np.load(out) as z:
            return {k: z[k] for k in z.files}
    finally:
        os.unlink(out)


def pyhdf_read(path, name: str) -> np.ndarray:
    """`name` as pyhdf reads it, in a child process (raises when it cannot or crashes):
    every array of the file in one child, one child per array when that one crashes."""
    st = os.stat(path)
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _cache:
        _cache.clear()
        _cache[key] = _read_all(path, _oracle_names(path)) or {}
    got = _cache[key]
    if name not in got:
        one = _read_all(path, [name]) or {}
        if name not in one:
            raise RuntimeError(f"pyhdf cannot read {name}")
        return one[name]
    return got[name]


def _oracle_names(path) -> list[str]:
    """The arrays of the cube judged now (written next to the mutated file)."""
    import virtualize

    g = virtualize.open(os.path.join(os.path.dirname(path), "cube.zarr"))
    return [n for n, _ in _oracle.cube_arrays(g)]


@pytest.fixture
def hdf4_oracle(monkeypatch):
    read = _oracle.library_read

    def library_read(path, name):
        with open(path, "rb") as f:
            if f.read(4) == HDF4_MAGIC:
                return pyhdf_read(path, name)
        return read(path, name)

    monkeypatch.setattr(_oracle, "library_read", library_read)


@pytest.mark.parametrize("case", ["hdf4_sds", "hdf4_codecs"])
def test_mutated_hdf4_files_are_read_exactly_or_refused(case, hdf4_oracle, tmp_path_factory):
    work = tmp_path_factory.mktemp(f"mut-{case}")
    (path,) = make_hdf4.make(case, work)
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
