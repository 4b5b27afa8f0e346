"""`file://` URLs are the local paths they name, as sources, outputs and cubes (never a
directory called `file:` under the working directory)."""

import json
import os

import netCDF4
import numpy as np
import pytest

import virtualize
from virtualize.cli import main

from helpers import run_virtualize, scaled_month


@pytest.mark.parametrize("form", ["file://", "file://localhost"])
@pytest.mark.parametrize("out", ["x.zarr", "x.json"])
def test_file_urls_are_local_paths(case, tmp_path, monkeypatch, form, out):
    files = case("months2024")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    target = tmp_path / out
    urls = [f"{form}{f}" for f in files]
    assert main([*urls, "-o", f"{form}{target}", "-q"]) == 0
    assert target.exists() and os.listdir(cwd) == []  # no ./file:/...
    g = virtualize.open(f"{form}{target}")
    want = np.concatenate([netCDF4.Dataset(f)["tas"][...].data for f in files])
    np.testing.assert_array_equal(np.asarray(g["tas"][...]), want)
    if out == "x.zarr":  # the sources are recorded as the local paths
        info = json.loads((target / "virtualize.json").read_text())
        assert [s["path"] for s in info["sources"]] == [str(f) for f in files]
        # a cube named by its URL is verified and appended to as the local cube
        assert main(["verify", "-q", f"{form}{target}"]) == 0


def test_file_url_of_a_directory_takes_its_files(case, tmp_path, monkeypatch):
    files = case("months2024")
    monkeypatch.chdir(tmp_path)
    report = virtualize.check(f"file://{files[0].parent}")
    assert report.ok and report.files == [str(f) for f in sorted(files[0].parent.glob("*.nc"))]
    report = virtualize.check([f"file://{files[0].parent}/*.nc"])  # a glob, as a path's
    assert report.ok and len(report.files) == len(list(files[0].parent.glob("*.nc")))


# Found by #20's review: `-o file:relative.zarr` (a file: URL without //) names the relative path, not
# a directory called "file:relative.zarr" (documented: storage.local_path).
def test_file_url_without_slashes_is_the_relative_path(tmp_path):
    f = scaled_month(tmp_path / "m0.nc", 0)
    r = run_virtualize(f, "-o", "file:rel.zarr", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "rel.zarr" / "zarr.json").is_file()
    assert not (tmp_path / "file:rel.zarr").exists()
    assert virtualize.open(tmp_path / "rel.zarr")["tas"].shape == (3, 4, 5)
