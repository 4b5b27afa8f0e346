"""Appending batches to a cube: each batch becomes chunks of its own length."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import virtualize

from helpers import assert_same, source_values


def test_append_batches_one_at_a_time(case, tmp_path):
    files = case("appended_batches")  # 7, 3, 12, 1, 5 days
    cube = tmp_path / "cube.zarr"
    virtualize.virtualize(files[:2], cube)
    for f in files[2:]:
        report = virtualize.append(cube, [f])
        assert report.ok
    doc = json.loads((cube / "tas" / "zarr.json").read_text())
    assert doc["chunk_grid"]["configuration"]["chunk_shapes"][0] == [7, 3, 12, 1, 5]
    g = virtualize.open(cube)
    assert_same(g["tas"][...], source_values(files, "tas", "time", ("time", "lat", "lon")), "appended")
    assert_same(g["time"][...], source_values(files, "time", "time", ("time",)), "time")


def test_append_refuses_files_in_the_middle_or_twice(case, tmp_path):
    files = case("months2024")
    cube = tmp_path / "cube.zarr"
    virtualize.virtualize(files[:1] + files[2:4], cube)
    before = (cube / "tas" / "manifest.npy").read_bytes()
    with pytest.raises(virtualize.VirtualizeError) as e:
        virtualize.append(cube, [files[1]])  # February: between January and March
    assert [p.kind for p in e.value.problems] == ["append-not-at-end"]
    with pytest.raises(virtualize.VirtualizeError) as e:
        virtualize.append(cube, [files[2]])
    assert [p.kind for p in e.value.problems] == ["already-in-cube"]
    assert (cube / "tas" / "manifest.npy").read_bytes() == before  # untouched


def test_append_refuses_when_a_source_changed(case, tmp_path):
    files = case("appended_batches")
    cube = tmp_path / "cube.zarr"
    virtualize.virtualize(files[:2], cube)
    st = os.stat(files[0])
    os.utime(files[0], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    try:
        with pytest.raises(virtualize.VirtualizeError) as e:
            virtualize.append(cube, files[2:3])
        assert [p.kind for p in e.value.problems] == ["source-changed"]
    finally:
        os.utime(files[0], ns=(st.st_atime_ns, st.st_mtime_ns))


def test_append_keeps_the_recipe(case, tmp_path):
    files = case("tenday_padded")
    cube = tmp_path / "cube.zarr"
    virtualize.virtualize(files[:2], cube, materialize=True)
    report = virtualize.append(cube, files[2:4])
    assert report.plan.remedies["materialize"].blocks == 3  # Jan, Feb, Mar end mid-block
    g = virtualize.open(cube)
    assert_same(g["tas"][...], source_values(files[:4], "tas", "time", ("time", "lat", "lon")),
                "appended with materialized blocks")


def test_cli_append(case, tmp_path):
    exe = os.path.join(os.path.dirname(sys.executable), "virtualize")
    files = [str(f) for f in case("appended_batches")]
    cube = str(tmp_path / "c.zarr")
    assert subprocess.run([exe, *files[:3], "-o", cube], capture_output=True).returncode == 0
    r = subprocess.run([exe, "append", cube, *files[3:]], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert virtualize.open(cube)["tas"].shape == (28, 3, 4)
