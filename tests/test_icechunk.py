"""The Icechunk export, read by Icechunk itself (and by zarr / xarray on its store)."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import xarray as xr
import zarr

import virtualize

import make_mosaic as mm
from helpers import assert_same, rectilinear, source_values

ic = pytest.importorskip("icechunk")


def plain_icechunk_store(path):
    """What an Icechunk user writes: open the repo, authorize its container, read main."""
    storage = ic.local_filesystem_storage(str(path))
    config = ic.Repository.fetch_config(storage)
    (prefix,) = config.virtual_chunk_containers
    repo = ic.Repository.open(storage, authorize_virtual_chunk_access=ic.containers_credentials(
        {prefix: ic.Credentials.LocalFileSystemAccess()}))
    return repo.readonly_session("main").store


def test_months_to_icechunk(case, tmp_path):
    files = case("months2024")
    out = tmp_path / "months.icechunk"
    report = virtualize.virtualize(files, out)
    store = plain_icechunk_store(out)
    with rectilinear():
        g = zarr.open_group(store, mode="r")
        for name, a in report.plan.arrays.items():
            expected = source_values(files, name, "time", a.dims)
            assert_same(g[name][...], expected, f"{name} via icechunk + zarr")
        ds = xr.open_zarr(store, consolidated=False, zarr_format=3, chunks=None,
                          mask_and_scale=False, decode_times=False)
        assert_same(ds.tas.values, source_values(files, "tas", "time", ("time", "lat", "lon")),
                    "tas via icechunk + xarray")
        assert g["tas"].metadata.chunk_grid.chunk_shapes[0] == (31, 29, 31, 30, 31, 30, 31, 31,
                                                                30, 31, 30, 31)
    ds = xr.open_dataset(out, engine="virtualize")  # and through virtualize, decoded
    assert ds.time.dt.year.values.tolist() == [2024] * 366


def test_mosaic_with_materialized_cells_to_icechunk(case, tmp_path):
    files = case("mosaic_staggered_misaligned")
    out = tmp_path / "m.icechunk"
    virtualize.mosaic(files, out, materialize=True)
    g = virtualize.open(out)
    expected = mm.expected("mosaic_staggered_misaligned")
    assert_same(g["image"][...], expected.astype(g["image"].dtype), "mosaic via icechunk")


def test_icechunk_reads_a_touched_source_and_refuses_a_changed_one(case, tmp_path):
    """A touched source (its time alone changed) is read with a note, as for every kind
    (its references carry no time for Icechunk to compare); one whose size changed is
    refused at open."""
    import shutil

    d = tmp_path / "src"
    d.mkdir()
    files = [shutil.copy2(f, d / f.name) for f in case("appended_batches")]
    out = tmp_path / "b.icechunk"
    virtualize.virtualize(files, out)
    want = source_values(files, "tas", "time", ("time", "lat", "lon"))
    st = os.stat(files[2])
    os.utime(files[2], ns=(st.st_atime_ns, st.st_mtime_ns + 5 * 10**9))
    with pytest.warns(virtualize.SourceTouchedWarning):
        g = virtualize.open(out)
    assert_same(g["tas"][...], want, "a touched source")
    with rectilinear():
        assert_same(zarr.open_group(plain_icechunk_store(out), mode="r")["tas"][...], want,
                    "a touched source, by Icechunk alone")
    with open(files[2], "ab") as f:
        f.write(b"x")
    with pytest.raises(virtualize.VirtualizeError, match="source-changed"):
        virtualize.open(out)


def test_an_older_repository_refuses_a_touched_source_until_refreshed(case, tmp_path):
    """A repository written before (its references stamped with their files' times, no
    `checksums` in its record): Icechunk refuses a touched file's chunks, so `open` refuses
    it, saying to run `verify --refresh`, which stamps every reference again without a
    time; a later touch is then read with a note."""
    import datetime
    import shutil

    from virtualize.model import MATERIALIZED

    d = tmp_path / "src"
    d.mkdir()
    files = [shutil.copy2(f, d / f.name) for f in case("appended_batches")]
    out = tmp_path / "old.icechunk"
    report = virtualize.virtualize(files, out)
    want = source_values(files, "tas", "time", ("time", "lat", "lon"))
    storage = ic.local_filesystem_storage(str(out))
    prefixes = list(ic.Repository.fetch_config(storage).virtual_chunk_containers)
    repo = ic.Repository.open(storage, authorize_virtual_chunk_access=ic.containers_credentials(
        {p: ic.Credentials.LocalFileSystemAccess() for p in prefixes}))
    info = next(iter(repo.ancestry(branch="main"))).metadata["virtualize"]
    assert info.pop("checksums") == "etag"
    session = repo.writable_session("main")
    stamped = 0
    for name, a in report.plan.arrays.items():  # as an older virtualize stamped them
        if a.inline is not None or a.refs is None:
            continue
        for idx in zip(*np.nonzero((a.refs["length"] > 0) & (a.refs["path"] != MATERIALIZED))):
            r = a.refs[idx]
            src = report.plan.sources[int(r["path"])]
            when = datetime.datetime.fromtimestamp(-(-src.mtime_ns // 10**9), tz=datetime.UTC)
            session.store.set_virtual_ref(f"{name}/c/" + "/".join(map(str, idx)),
                                          "file://" + src.path, offset=int(r["offset"]),
                                          length=int(r["length"]), checksum=when)
            stamped += 1
    assert stamped
    session.commit("as written by an older virtualize", metadata={"virtualize": info})
    st = os.stat(files[2])
    later = max(time.time_ns(), st.st_mtime_ns) + 5 * 10**9  # (Icechunk compares seconds)
    os.utime(files[2], ns=(st.st_atime_ns, later))
    with pytest.raises(virtualize.VirtualizeError) as e:
        virtualize.open(out)
    assert [p.kind for p in e.value.problems] == ["source-touched"]
    assert "older virtualize" in e.value.problems[0].message
    assert "verify --refresh" in e.value.problems[0].message
    g = virtualize.open(out, check_sources=False)
    with pytest.raises(Exception, match="checksum|changed|modified"):
        g["tas"][...]  # Icechunk itself refuses the chunk
    [p] = virtualize.verify_cube(out, refresh=True)
    assert (p.kind, p.fatal) == ("source-touched", False)
    assert_same(virtualize.open(out, strict=True)["tas"][...], want, "refreshed")
    st = os.stat(files[1])
    os.utime(files[1], ns=(st.st_atime_ns, max(time.time_ns(), st.st_mtime_ns) + 5 * 10**9))
    with pytest.warns(virtualize.SourceTouchedWarning):
        g = virtualize.open(out)
    assert_same(g["tas"][...], want, "touched after the refresh")


def test_existing_icechunk_destination_is_refused(case, tmp_path):
    files = case("appended_batches")
    out = tmp_path / "b.icechunk"
    virtualize.virtualize(files, out)
    with pytest.raises(FileExistsError):
        virtualize.virtualize(files, out)
    virtualize.virtualize(files[:2], out, overwrite=True)
    assert virtualize.open(out)["tas"].shape == (10, 3, 4)


def test_append_to_icechunk_is_a_new_commit(case, tmp_path):
    files = case("appended_batches")
    out = tmp_path / "b.icechunk"
    virtualize.virtualize(files[:2], out)
    virtualize.append(out, files[2:4])
    virtualize.append(out, files[4:])
    g = virtualize.open(out)
    assert_same(g["tas"][...], source_values(files, "tas", "time", ("time", "lat", "lon")),
                "icechunk appended")
    assert g["tas"].metadata.chunk_grid.chunk_shapes[0] == (7, 3, 12, 1, 5)
    storage = ic.local_filesystem_storage(str(out))
    repo = ic.Repository.open(storage)
    messages = [s.message for s in repo.ancestry(branch="main")]
    assert messages[:2] == ["virtualize append: 1 file(s)", "virtualize append: 2 file(s)"]
    report = virtualize.append(out, files[1:2])  # already in: a no-op, no commit
    assert report.ok and report.already == [str(files[1])]
    assert len(list(ic.Repository.open(storage).ancestry(branch="main"))) == len(messages)


def test_append_files_from_another_directory_adds_a_container(case, tmp_path):
    import shutil

    files = case("appended_batches")
    elsewhere = tmp_path / "later"
    elsewhere.mkdir()
    moved = [shutil.copy2(f, elsewhere / f.name) for f in files[3:]]
    out = tmp_path / "b.icechunk"
    virtualize.virtualize(files[:3], out)
    virtualize.append(out, moved)
    storage = ic.local_filesystem_storage(str(out))
    assert len(ic.Repository.fetch_config(storage).virtual_chunk_containers) == 2
    assert_same(plain_icechunk_store_read(out), source_values(files, "tas", "time",
                                                              ("time", "lat", "lon")), "two dirs")


def plain_icechunk_store_read(path):
    storage = ic.local_filesystem_storage(str(path))
    prefixes = ic.Repository.fetch_config(storage).virtual_chunk_containers
    repo = ic.Repository.open(storage, authorize_virtual_chunk_access=ic.containers_credentials(
        {p: ic.Credentials.LocalFileSystemAccess() for p in prefixes}))
    with rectilinear():
        return zarr.open_group(repo.readonly_session("main").store, mode="r")["tas"][...]
