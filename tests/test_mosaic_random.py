"""Random brick layouts of tiles with random blocks: whatever the planner accepts reads
back exactly, and with the remedies every layout is accepted and reads back exactly."""

from __future__ import annotations

import numpy as np
import pytest
import tifffile

import virtualize

from helpers import assert_same


def brick_layout(rng, height, width, step=1):
    """Rows of random heights, each cut into tiles of random widths (staggered rows);
    edges on multiples of `step`."""
    tiles, row0 = [], 0
    while row0 < height:
        h = min(int(rng.integers(1, 4)) * 16 if step > 1 else int(rng.integers(8, 48)),
                height - row0)
        col0 = 0
        while col0 < width:
            w = min(int(rng.integers(1, 4)) * 16 if step > 1 else int(rng.integers(8, 56)),
                    width - col0)
            tiles.append((row0, col0, h, w))
            col0 += w
        row0 += h
    return tiles


@pytest.mark.parametrize("seed", range(12))
def test_random_bricks(tmp_path, seed):
    check_bricks(tmp_path, seed, aligned=False)


@pytest.mark.parametrize("seed", range(6))
def test_random_bricks_on_block_boundaries(tmp_path, seed):
    """Edges on multiples of 16-pixel tiles: virtualizes without any remedy."""
    assert check_bricks(tmp_path, seed, aligned=True)


def check_bricks(tmp_path, seed, aligned):
    rng = np.random.default_rng(seed)
    height, width = int(rng.integers(40, 90)), int(rng.integers(40, 110))
    if aligned:
        height, width = height // 16 * 16, width // 16 * 16
    gy, gx = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    expected = (gy * 1000 + gx + 1).astype("u4")
    files, offsets = [], []
    compression = ["none", "zlib"][seed % 2]  # one array has one codec pipeline
    for i, (r, c, h, w) in enumerate(brick_layout(rng, height, width, 16 if aligned else 1)):
        path = tmp_path / f"t{i}.tif"
        kw = {"compression": compression}
        if aligned:  # (strips span a tile's width: a neighbour's column edge would cut them)
            kw["tile"] = (16, 16)
        elif rng.random() < 0.5:
            kw["tile"] = (16, 16) if rng.random() < 0.5 else (16, 32)
        else:
            kw["rowsperstrip"] = int(rng.choice([4, 8, 16]))
        tifffile.imwrite(path, expected[r:r + h, c:c + w], **kw)
        files.append(path)
        offsets.append((r, c))
    plain = virtualize.check_mosaic(files, offsets=offsets)
    if plain.ok:  # whatever is accepted as it is must read back exactly
        virtualize.mosaic(files, tmp_path / "plain.zarr", offsets=offsets)
        assert_same(virtualize.open(tmp_path / "plain.zarr")["image"][...], expected, "plain")
    virtualize.mosaic(files, tmp_path / "m.zarr", offsets=offsets, materialize=True)
    assert_same(virtualize.open(tmp_path / "m.zarr")["image"][...], expected, f"seed {seed}")
    return plain.ok
