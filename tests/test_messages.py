"""Messages that say what happened, naming the file (small fixes, one class each)."""

from __future__ import annotations

import json
import os
import re
import shutil

import netCDF4
import numpy as np
import pytest

import virtualize
from virtualize.cli import main
from virtualize.model import VirtualizeError


@pytest.fixture(scope="module")
def tiff_bytes(case) -> bytes:
    return case("strips_short_last")[0].read_bytes()


@pytest.mark.parametrize("cut, what", [(6, "inside its TIFF header: 6 byte(s)"),
                                       (40, "image directory (IFD) 0 at byte")])
def test_tiff_cut_in_its_header_or_first_ifd_is_truncated(tiff_bytes, cut, what, tmp_path):
    path = tmp_path / f"cut{cut}.tif"
    path.write_bytes(tiff_bytes[:cut])
    report = virtualize.check([path], scan_timeout=None)
    [p] = report.problems
    assert (p.kind, p.loc.file) == ("truncated", str(path))
    assert what in p.message and "unpack" not in p.message
    assert "past the end of the file" in p.message or cut == 6


def test_missing_relative_data_file_says_it_was_resolved_against_the_cwd(case, tmp_path,
                                                                         monkeypatch):
    src = case("months2024")[0]
    virtualize.virtualize([src], tmp_path / "refs.json")
    doc = json.loads((tmp_path / "refs.json").read_text())
    del doc["virtualize"]  # a reference set virtualize did not write
    for v in doc["refs"].values():
        if isinstance(v, list):
            v[0] = "data/" + src.name  # relative: fsspec takes it from the current directory
    (tmp_path / "refs.json").write_text(json.dumps(doc))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    report = virtualize.check([tmp_path / "refs.json"], scan_timeout=None)
    missing = [p for p in report.problems if p.kind == "missing-data-file"]
    assert missing
    msg = missing[0].message
    assert "relative path, resolved against the current directory" in msg
    assert str(tmp_path / "elsewhere") in msg and str(tmp_path / "elsewhere" / "data") in msg


def test_source_changed_shows_sizes_and_utc_times(case, tmp_path):
    f = tmp_path / "a.nc"
    shutil.copy2(case("months2024")[0], f)
    virtualize.virtualize([f], tmp_path / "cube")
    rec = tmp_path / "cube" / "virtualize.json"  # a cube recording no fingerprint (older):
    info = json.loads(rec.read_text())  # a touched source is stale there
    info["sources"][0].pop("fingerprint")
    rec.write_text(json.dumps(info))
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # one nanosecond later
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(tmp_path / "cube")
    [p] = e.value.problems
    assert p.kind == "source-changed" and p.loc.file == str(f)
    assert f"size {st.st_size:,} bytes (recorded {st.st_size:,})" in p.message
    stamps = re.findall(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.(\d{9}) UTC", p.message)
    assert len(stamps) == 2 and int(stamps[0]) - int(stamps[1]) in (1, 1 - 10**9)
    assert str(st.st_mtime_ns) not in p.message


@pytest.mark.parametrize("content", ["", "# only comments\n\n   \n"])
def test_empty_list_file_is_named(content, tmp_path, capsys):
    lst = tmp_path / "list.txt"
    lst.write_text(content)
    with pytest.raises(SystemExit) as e:
        main([f"@{lst}", "-o", str(tmp_path / "c.zarr")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"@{lst} names no file" in err and "required: FILE" not in err
    assert not (tmp_path / "c.zarr").exists()


@pytest.mark.parametrize("attr, values", [
    ("flag_meanings", ["good suspect bad", "good bad suspect"]),
    ("flag_values", [np.array([0, 1, 2], "i1"), np.array([0, 2, 1], "i1")]),
])
def test_flag_drift_between_files_is_refused(attr, values, tmp_path):
    files = []
    for i, value in enumerate(values):
        path = tmp_path / f"qc{i}.nc"
        with netCDF4.Dataset(path, "w") as nc:
            nc.createDimension("time", None)
            nc.createDimension("x", 2)
            t = nc.createVariable("time", "f8", ("time",))
            t.units = "days since 2000-01-01"
            t[:] = [2 * i, 2 * i + 1]
            q = nc.createVariable("qc", "i1", ("time", "x"))
            q.flag_values = np.array([0, 1, 2], "i1")
            q.flag_meanings = "good suspect bad"
            q.setncattr(attr, value)
            q[:] = [[0, 1], [2, 0]]
        files.append(path)
    report = virtualize.check(files, scan_timeout=None)
    drift = [p for p in report.problems if p.kind == "attribute-drift"]
    assert [(p.loc.file, p.loc.variable) for p in drift] == [(str(files[1]), "qc")]
    assert attr in drift[0].message
