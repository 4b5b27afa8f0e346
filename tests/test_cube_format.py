"""The cube directory: what it holds, who can read it, and how it protects its readers."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import xarray as xr
import zarr

import virtualize
from virtualize.model import VirtualizeError

from helpers import assert_same, rectilinear, source_values


@pytest.fixture
def cube(case, tmp_path):
    files = case("months2024")
    virtualize.virtualize(files, tmp_path / "cube.zarr")
    return tmp_path / "cube.zarr"


def test_manifest_is_twenty_bytes_per_chunk_with_random_access(cube):
    m = np.load(cube / "tas" / "manifest.npy", mmap_mode="r")
    assert m.dtype.itemsize == 20 and m.shape == (12, 1, 1)
    size = os.path.getsize(cube / "tas" / "manifest.npy")
    assert size <= 20 * 12 + 256  # .npy header + records
    info = json.loads((cube / "virtualize.json").read_text())
    assert len(info["sources"]) == 12
    assert all({"path", "size", "mtime_ns"} <= set(s) for s in info["sources"])
    # chunk 5 (June) points into the 6th source
    assert info["sources"][int(m[5, 0, 0]["path"])]["path"].endswith("202406.nc")


def test_plain_zarr_refuses_a_virtual_array(cube):
    """Without virtualize, reading must fail loudly, never return fill values."""
    with rectilinear():
        g = zarr.open_group(cube, mode="r")
        with pytest.raises(Exception, match="virtualize_manifest"):
            g["tas"][...]
        # the inline coordinate is a plain zarr array
        assert g["time"].shape == (366,)


def test_plain_xarray_refuses_the_cube(cube):
    with rectilinear(), pytest.raises(Exception, match="virtualize_manifest"):
        xr.open_zarr(cube, consolidated=False, zarr_format=3).tas.values


def test_changed_source_is_refused(case, cube):
    src = case("months2024")[3]
    st = os.stat(src)
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    try:  # touched only (test_staleness.py has the changed ones): refused when strict
        with pytest.raises(VirtualizeError) as e:
            virtualize.open(cube, strict=True)
        assert [p.kind for p in e.value.problems] == ["source-touched"]
        assert e.value.problems[0].loc.file == str(src)
    finally:
        os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_existing_destination_is_never_overwritten_unless_asked(case, cube):
    files = case("months2024")
    before = (cube / "tas" / "zarr.json").read_text()
    with pytest.raises(FileExistsError):
        virtualize.virtualize(files[:2], cube)
    assert (cube / "tas" / "zarr.json").read_text() == before
    virtualize.virtualize(files[:2], cube, overwrite=True)
    assert virtualize.open(cube)["tas"].shape[0] == 31 + 29
    assert sorted(p.name for p in cube.parent.iterdir()) == ["cube.zarr"]


def test_open_leaves_the_callers_zarr_config_alone(cube):
    assert not zarr.config.get("array.rectilinear_chunks")
    g = virtualize.open(cube)
    assert not zarr.config.get("array.rectilinear_chunks")
    assert g["tas"][59, 0, 0] == g["tas"][...][59, 0, 0]


def test_reads_touch_only_the_chunks_they_need(cube):
    from virtualize.outputs.cube.reader import CubeStore

    store = CubeStore(cube)
    asked = []
    orig = store._chunk
    store._chunk = lambda name, rest: (asked.append((name, rest)), orig(name, rest))[1]
    with rectilinear():
        g = zarr.open_group(store, mode="r")
        g["tas"][31:60]  # February only
    assert asked == [("tas", "1/0/0")]


def test_xarray_engine_opens_the_kerchunk_export_too(case, tmp_path):
    files = case("appended_batches")
    virtualize.virtualize(files, tmp_path / "refs.json")
    virtualize.virtualize(files, tmp_path / "cube.zarr")
    a = xr.open_dataset(tmp_path / "refs.json", engine="virtualize")
    b = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize")
    xr.testing.assert_identical(a, b)
    assert virtualize.open(tmp_path / "refs.json")["tas"].shape == (28, 3, 4)


def test_open_refuses_what_is_not_a_cube(tmp_path):
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(tmp_path)
    assert e.value.problems[0].kind == "not-a-cube"


PLAIN_READER = """
import sys, json, hashlib
import fsspec, zarr, xarray as xr
assert "virtualize" not in sys.modules
zarr.config.set({"array.rectilinear_chunks": True})
fs = fsspec.filesystem("reference", fo=sys.argv[1], asynchronous=True)
g = zarr.open_group(zarr.storage.FsspecStore(fs, read_only=True, path=""), mode="r")
ds = xr.open_dataset("reference://", engine="zarr", zarr_format=3, consolidated=False,
                     storage_options={"fo": sys.argv[1]}, mask_and_scale=False, decode_times=False)
assert "virtualize" not in sys.modules
print(json.dumps({"zarr": hashlib.sha256(g["tas"][...].tobytes()).hexdigest(),
                  "xarray": hashlib.sha256(ds["tas"].values.tobytes()).hexdigest()}))
"""


def test_kerchunk_export_reads_without_virtualize(case, tmp_path):
    """A fresh interpreter that never imports virtualize reads the export (fsspec + zarr,
    and xarray) to the same bytes as the sources."""
    import hashlib
    import subprocess
    import sys

    from helpers import source_values

    files = case("months2024")
    virtualize.virtualize(files, tmp_path / "cube.json")
    r = subprocess.run([sys.executable, "-c", PLAIN_READER, str(tmp_path / "cube.json")],
                       capture_output=True, text=True, check=True)
    got = json.loads(r.stdout)
    want = hashlib.sha256(np.ascontiguousarray(
        source_values(files, "tas", "time", ("time", "lat", "lon"))).tobytes()).hexdigest()
    assert got == {"zarr": want, "xarray": want}


def test_a_cube_keeps_few_source_files_open(case, tmp_path, monkeypatch):
    """Reading a cube of many files whole holds at most MAX_OPEN_SOURCES descriptors (a
    10,000-file cube would otherwise exhaust the process's limit), values unchanged."""
    from virtualize.outputs.cube import reader as read

    monkeypatch.setattr(read, "MAX_OPEN_SOURCES", 2)
    files = case("months2024")
    cube = tmp_path / "c.zarr"
    virtualize.virtualize(files, cube)
    g = virtualize.open(cube)
    for _ in range(2):  # files closed and opened again, in and out of order
        assert_same(g["tas"][...], source_values(files, "tas", "time", ("time", "lat", "lon")),
                    "tas")
        want = source_values(files, "tas", "time", ("time", "lat", "lon"))
        for t in (365, 0, 200, 31):  # out of order
            assert_same(g["tas"][t], want[t], f"step {t}")
    store = g.store._store
    assert 0 < len(store._fds) <= 2


@pytest.mark.parametrize("name", ["zarr.json", "g/zarr.json", "virtualize.json"])
def test_a_cube_directory_refuses_names_of_its_own_files(tmp_path, name):
    """An array named as a file of the cube directory's layout (a group's `zarr.json`, the
    root's `virtualize.json`) collided with it: a bare OSError (exit 3). Refused, located,
    nothing written; the kerchunk JSON holds it."""
    h5py = pytest.importorskip("h5py")
    src = tmp_path / "names.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset(name, data=np.arange(30, dtype="i4").reshape(5, 6) + 1, chunks=(2, 3))
        f.create_dataset("v", data=np.arange(30, dtype="i4").reshape(5, 6), chunks=(2, 3))
    with pytest.raises(VirtualizeError) as e:
        virtualize.virtualize([src], tmp_path / "c.zarr")
    (p,) = e.value.problems
    assert p.kind == "cube-unsupported" and p.loc.variable == name
    assert "-o cube.json" in p.message
    assert [q.name for q in tmp_path.iterdir()] == ["names.h5"]  # nothing, no staging left
    virtualize.virtualize([src], tmp_path / "c.json")
    with h5py.File(src) as f:
        np.testing.assert_array_equal(virtualize.open(tmp_path / "c.json")[name][...], f[name][...])
