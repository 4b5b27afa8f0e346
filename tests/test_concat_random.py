"""Random stacks: random file lengths and chunkings along time. Whatever is accepted reads
back exactly; with the remedies every stack is accepted and reads back exactly."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

import virtualize

from helpers import assert_same


@pytest.mark.parametrize("seed", range(10))
def test_random_stacks(tmp_path, seed):
    rng = np.random.default_rng(100 + seed)
    compression = [None, "gzip"][seed % 2]
    files, parts, t0 = [], [], 0
    for i in range(int(rng.integers(2, 7))):
        n = int(rng.integers(1, 40))
        chunk = int(rng.choice([1, 5, 10, n, 64]))
        data = np.arange(t0, t0 + n, dtype="f8")[:, None] * 100 + np.arange(3)
        path = tmp_path / f"f{i}.h5"
        with h5py.File(path, "w") as f:
            f.create_dataset("v", data=data, chunks=(min(chunk, 64), 3),
                             maxshape=(None, 3), compression=compression)
        files.append(path)
        parts.append(data)
        t0 += n
    expected = np.concatenate(parts)
    plain = virtualize.check(files, concat_dim="v_dim0")
    if plain.ok:
        virtualize.virtualize(files, tmp_path / "plain.zarr", concat_dim="v_dim0")
        assert_same(virtualize.open(tmp_path / "plain.zarr")["v"][...], expected, "plain")
    else:  # what blocks it: padded blocks only, each with a remedy
        assert {p.kind for p in plain.problems} == {"padded-block"}
    virtualize.virtualize(files, tmp_path / "m.zarr", concat_dim="v_dim0", materialize=True)
    assert_same(virtualize.open(tmp_path / "m.zarr")["v"][...], expected, f"seed {seed}")
