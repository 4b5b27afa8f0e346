"""Remedies: split (exact byte ranges of uncompressed blocks, nothing copied) and
materialize (copy what cannot be referenced, on request), each visible with its cost."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import virtualize
from virtualize.report import verdict

import make_mosaic as mm
from helpers import assert_same, kerchunk_group, source_values

MONTHS_2024 = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


def tenday_grid(n_days):
    return [10] * (n_days // 10) + ([n_days % 10] if n_days % 10 else [])


def test_split_trims_padded_uncompressed_blocks(case, tmp_path):
    files = case("tenday_padded_raw")
    report = virtualize.virtualize(files, tmp_path / "cube.zarr")
    assert verdict(report) == "yes with remedies"
    split = report.plan.remedies["split"]
    assert (split.blocks, split.bytes) == (7, 0)  # the 7 months that end mid-block; nothing copied
    a = report.plan.arrays["tas"]
    expected_lengths = [n for m in MONTHS_2024[:-1] for n in tenday_grid(m)] + [10, 10, 10, 10]
    assert list(a.chunk_lengths[0]) == expected_lengths
    assert not a.materialize
    g = virtualize.open(tmp_path / "cube.zarr")
    assert_same(g["tas"][...], source_values(files, "tas", "time", a.dims), "split stack")
    virtualize.virtualize(files, tmp_path / "cube.json")
    assert_same(kerchunk_group(tmp_path / "cube.json")["tas"][...], g["tas"][...], "kerchunk")


def test_split_can_be_turned_off(case):
    report = virtualize.check(case("tenday_padded_raw"), split=False)
    assert not report.ok and {p.kind for p in report.problems} == {"padded-block"}


def test_compressed_stack_is_refused_without_materialize(case, tmp_path):
    files = case("tenday_padded")
    report = virtualize.check(files)
    assert verdict(report) == "yes with remedies" and not report.ok
    assert all(p.remedy and "materialize" in p.remedy for p in report.problems)
    cost = report.plan.remedies["materialize (not enabled)"]
    assert cost.blocks == 7 and cost.bytes == sum(m % 10 for m in MONTHS_2024[:-1]) * 12 * 4
    with pytest.raises(virtualize.VirtualizeError):
        virtualize.virtualize(files, tmp_path / "cube.zarr")
    assert not (tmp_path / "cube.zarr").exists()


def test_materialize_copies_only_the_boundary_blocks(case, tmp_path):
    files = case("tenday_padded")
    cube = tmp_path / "cube.zarr"
    report = virtualize.virtualize(files, cube, materialize=True)
    a = report.plan.arrays["tas"]
    copied = report.plan.remedies["materialize"]
    assert copied.blocks == 7 == len(a.materialize)
    # the copies are native chunks in the cube; everything else is referenced
    native = sorted(p.relative_to(cube / "tas").as_posix() for p in (cube / "tas" / "c").rglob("*")
                    if p.is_file())
    assert native == sorted("c/" + "/".join(map(str, k)) for k in a.materialize)
    m = np.load(cube / "tas" / "manifest.npy")
    assert (m["length"] > 0).sum() == m.size - 7
    g = virtualize.open(cube)
    assert_same(g["tas"][...], source_values(files, "tas", "time", a.dims), "materialized stack")
    virtualize.virtualize(files, tmp_path / "cube.json", materialize=True)
    assert_same(kerchunk_group(tmp_path / "cube.json")["tas"][...], g["tas"][...], "kerchunk")
    info = json.loads((cube / "virtualize.json").read_text())
    assert info["remedies"] == [{"kind": "materialize", "blocks": 7, "bytes": copied.bytes,
                                 "enabled": True}]


def test_materialize_limit(case, tmp_path):
    files = case("tenday_padded")
    report = virtualize.check(files, materialize=True, materialize_limit=100)
    assert [p.kind for p in report.problems] == ["materialize-limit"]
    assert virtualize.check(files, materialize=True, materialize_limit=10_000).ok


def test_staggered_uncompressed_strips_split_by_rows(case, tmp_path):
    files = case("mosaic_staggered_rows_uncompressed")
    report = virtualize.mosaic(files, tmp_path / "m.zarr")
    assert report.plan.remedies["split"].blocks > 0 and "materialize" not in report.plan.remedies
    g = virtualize.open(tmp_path / "m.zarr")
    expected = mm.expected("mosaic_staggered_rows_uncompressed")
    assert_same(g["image"][...], expected.astype(g["image"].dtype), "split mosaic")


def test_staggered_compressed_tiles_materialize(case, tmp_path):
    files = case("mosaic_staggered_misaligned")
    report = virtualize.check_mosaic(files)
    assert verdict(report) == "yes with remedies"
    report = virtualize.mosaic(files, tmp_path / "m.zarr", materialize=True)
    g = virtualize.open(tmp_path / "m.zarr")
    expected = mm.expected("mosaic_staggered_misaligned")
    assert_same(g["image"][...], expected.astype(g["image"].dtype), "materialized mosaic")
    copied = report.plan.remedies["materialize"]
    assert 0 < copied.blocks < int(np.prod(report.plan.arrays["image"].grid_shape))


def test_overlap_not_block_aligned_resolved_by_materialize(case, tmp_path):
    files = case("mosaic_overlap_misaligned")
    virtualize.mosaic(files, tmp_path / "m.zarr", overlap="last", materialize=True)
    g = virtualize.open(tmp_path / "m.zarr")
    expected = mm.expected("mosaic_overlap_misaligned", "last")
    assert_same(g["image"][...], expected.astype(g["image"].dtype), "overlap materialized")


def test_lossy_blocks_are_never_materialized(case, tmp_path):
    import shutil
    (src,) = case("jpeg_tiles")
    files = []
    for i in range(2):  # two copies of a JPEG-tiled file side by side, offset mid-tile
        dst = tmp_path / f"t{i}.tif"
        shutil.copy(src, dst)
        files.append(dst)
    report = virtualize.check_mosaic(files, offsets=[(0, 0), (0, 40)], overlap="last",
                                     materialize=True)
    assert not report.ok
    assert all(p.remedy is None for p in report.problems if p.kind == "cut-through-block")


def test_cli_shows_remedy_costs(case, tmp_path):
    exe = os.path.join(os.path.dirname(sys.executable), "virtualize")
    files = [str(f) for f in case("tenday_padded")]
    r = subprocess.run([exe, "check", *files], capture_output=True, text=True)
    assert r.returncode == 1 and r.stdout.startswith("yes with remedies")
    assert "remedy materialize: 7 block(s)" in r.stdout and "not enabled" in r.stdout
    r = subprocess.run([exe, "check", "--materialize", *files], capture_output=True, text=True)
    assert r.returncode == 0 and "copied into the cube" in r.stdout
    r = subprocess.run([exe, *files, "-o", str(tmp_path / "c.zarr"), "--materialize",
                        "--materialize-limit", "100"], capture_output=True, text=True)
    assert r.returncode == 1 and "materialize-limit" in r.stdout
    assert not (tmp_path / "c.zarr").exists()


def test_a_piece_cannot_fill_an_overhanging_last_row(tmp_path):
    """Last mosaic row: a padded tile lists the row at its 32 stored rows; an uncompressed
    strip tile beside it, cut at that row, would hold fewer rows than the chunk expects."""
    import tifffile

    tiled = tmp_path / "a.tif"
    strips = tmp_path / "b.tif"
    tifffile.imwrite(tiled, np.arange(40 * 32, dtype="u2").reshape(40, 32), tile=(32, 32))
    tifffile.imwrite(strips, np.arange(40 * 16, dtype="u2").reshape(40, 16) + 5000,
                     rowsperstrip=24)
    offsets = [(0, 0), (0, 32)]
    report = virtualize.check_mosaic([tiled, strips], offsets=offsets)
    assert not report.ok  # strips 24 + 16 vs tiles 32 + 8: the cut at row 32 splits a strip ...
    report = virtualize.check_mosaic([tiled, strips], offsets=offsets, materialize=True)
    assert report.ok  # ... which is copied instead
    virtualize.mosaic([tiled, strips], tmp_path / "m.zarr", offsets=offsets, materialize=True)
    g = virtualize.open(tmp_path / "m.zarr")["image"][...]
    assert_same(g[:, :32], tifffile.imread(tiled), "tiled part")
    assert_same(g[:, 32:], tifffile.imread(strips), "strip part")
