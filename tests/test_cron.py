"""Jobs that run again and again: `append` skips the files already in the cube, gaps in a
regular concatenation coordinate are a note (`--no-gaps`: fatal), and `--skip-unreadable`
leaves out a file that cannot be scanned instead of stopping the job."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

import virtualize
from virtualize import VirtualizeError

import make_fixtures as mf
from helpers import assert_same, scaled_month, source_values

KINDS = {"cube": "c.zarr", "kerchunk": "c.json", "icechunk": "c.icechunk"}


def run(*args):
    exe = os.path.join(os.path.dirname(sys.executable), "virtualize")
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True)


def tas(files):
    return source_values(files, "tas", "time", ("time", "lat", "lon"))


@pytest.fixture
def months(tmp_path):
    """Daily data in monthly files: November and December 2024, then February and March
    2025 (January missing)."""
    names, spans = mf._monthly(2024, [11, 12])
    names2, spans2 = mf._monthly(2025, [2, 3])
    d = tmp_path / "src"
    d.mkdir()
    return mf._write_tas_stack(d, "gaps", names + names2, spans + spans2, compression="zlib")


def test_a_gap_in_the_time_coordinate_is_a_note_or_fatal(months):
    report = virtualize.check(months)
    assert report.ok
    [gap] = [p for p in report.problems if p.kind == "coordinate-gap"]
    assert not gap.fatal and gap.loc.file == str(months[2]) and gap.loc.variable == "time"
    assert "31 days missing between 2024-12-31 and 2025-02-01" in gap.message
    refused = virtualize.check(months, no_gaps=True)
    assert not refused.ok
    assert [(p.kind, p.fatal) for p in refused.problems] == [("coordinate-gap", True)]
    r = run("check", "--no-gaps", *months)
    assert r.returncode == 1 and "coordinate-gap" in r.stdout
    assert "time (add the missing files, or leave out --no-gaps)" in r.stdout  # not --drop
    r = run("check", "-v", *months)
    assert r.returncode == 0 and "31 days missing" in r.stdout
    assert not [p for p in virtualize.check(months[:2]).problems if p.kind == "coordinate-gap"]


def test_a_gap_in_a_coordinate_without_time_units_is_a_count_of_steps(tmp_path):
    import netCDF4
    import numpy as np

    files = []
    for i, start in enumerate([0, 10, 40]):  # steps of 1; 20 steps missing before 40
        f = tmp_path / f"x{i}.nc"
        with netCDF4.Dataset(f, "w") as ds:
            ds.createDimension("x", None)
            x = ds.createVariable("x", "f8", ("x",))
            x[:] = np.arange(start, start + 10, dtype="f8")
            v = ds.createVariable("v", "f4", ("x",))
            v[:] = np.arange(10, dtype="f4")
        files.append(f)
    [gap] = [p for p in virtualize.check(files).problems if p.kind == "coordinate-gap"]
    assert "20 step(s) of 1 missing between 19 and 40" in gap.message
    assert gap.loc.file == str(files[2])


@pytest.mark.parametrize("kind", list(KINDS))
def test_rerunning_an_append_is_a_no_op(months, tmp_path, kind):
    if kind == "icechunk":
        pytest.importorskip("icechunk")
    out = tmp_path / KINDS[kind]
    virtualize.virtualize(months[:1], out)
    report = virtualize.append(out, months[:2])  # yesterday's file, and today's
    assert report.ok and report.already == [str(months[0])]
    assert any("1 new, 1 already in the cube" in n for n in report.notes)
    before = sorted(os.listdir(out)) if out.is_dir() else out.read_bytes()
    report = virtualize.append(out, months[:2])  # the same job again
    assert report.ok and report.already == [str(months[0]), str(months[1])]
    assert report.notes == ["nothing to append: 0 new, 2 already in the cube"]
    assert (sorted(os.listdir(out)) if out.is_dir() else out.read_bytes()) == before
    r = run("append", out, *months[:2])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "nothing to append" in r.stdout and "0 new, 2 already in the cube" in r.stdout
    assert_same(virtualize.open(out)["tas"][...], tas(months[:2]), f"{kind} after re-runs")


def test_append_of_a_file_in_the_cube_with_other_content_is_refused(months, tmp_path):
    out = tmp_path / "c.zarr"
    virtualize.virtualize(months[:2], out)
    with open(months[1], "ab") as f:
        f.write(b"\0" * 16)
    with pytest.raises(VirtualizeError) as e:
        virtualize.append(out, months[1:3])
    assert [(p.kind, p.loc.file) for p in e.value.problems] == [("already-in-cube",
                                                                 str(months[1]))]
    assert "other content" in e.value.problems[0].message


def test_append_leaving_a_gap_is_a_note_or_refused(months, tmp_path):
    out = tmp_path / "c.zarr"
    virtualize.virtualize(months[:2], out)
    before = (out / "virtualize.json").read_bytes()
    with pytest.raises(VirtualizeError) as e:
        virtualize.append(out, months[2:3], no_gaps=True)
    assert [p.kind for p in e.value.problems] == ["coordinate-gap"]
    assert "31 days missing between 2024-12-31 and 2025-02-01" in e.value.problems[0].message
    assert (out / "virtualize.json").read_bytes() == before  # nothing appended
    r = run("append", "--no-gaps", out, months[2])
    assert r.returncode == 1 and "coordinate-gap" in r.stdout
    report = virtualize.append(out, months[2:3])
    assert [p.kind for p in report.problems if p.kind == "coordinate-gap"] == ["coordinate-gap"]
    assert_same(virtualize.open(out)["tas"][...], tas(months[:3]), "appended after a gap")


# -- --skip-unreadable ------------------------------------------------------------------

@pytest.fixture
def with_truncated(case, tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    files = [shutil.copy2(f, d / f.name) for f in case("months2024")[:4]]
    data = files[2].read_bytes()
    files[2].write_bytes(data[: len(data) // 2])  # cut in half
    return files


def test_check_leaves_out_a_truncated_file_when_asked(with_truncated):
    files = with_truncated
    refused = virtualize.check(files)
    assert not refused.ok and any(p.loc.file == str(files[2]) for p in refused.problems)
    report = virtualize.check(files, skip_unreadable=True)
    assert report.ok
    [out] = report.left_out
    assert out["path"] == str(files[2]) and out["kind"] in ("corrupt", "truncated",
                                                            "unreadable")
    assert str(files[2]) not in report.files and len(report.files) == 3
    assert [s.path for s in report.plan.sources] == [str(f) for i, f in enumerate(files)
                                                    if i != 2]
    doc = json.loads(report.to_json())
    assert doc["left_out"] == report.left_out and doc["ok"]
    assert "Left out" in report.to_html() and files[2].name in report.to_html()
    r = run("check", "--skip-unreadable", *files)
    assert r.returncode == 0 and "1 file(s) left out" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("kind", list(KINDS))
def test_create_records_the_files_left_out(with_truncated, tmp_path, kind):
    if kind == "icechunk":
        pytest.importorskip("icechunk")
    files = with_truncated
    out = tmp_path / KINDS[kind]
    with pytest.raises(VirtualizeError):
        virtualize.virtualize(files, out)
    assert not out.exists()
    report = virtualize.virtualize(files, out, skip_unreadable=True)
    assert report.ok and [d["path"] for d in report.left_out] == [str(files[2])]
    info = virtualize.api.steps.recorded(out, kind)
    assert [d["path"] for d in info["left_out"]] == [str(files[2])]
    assert info["left_out"][0]["kind"] == report.left_out[0]["kind"]
    good = [f for i, f in enumerate(files) if i != 2]
    assert_same(virtualize.open(out)["tas"][...], tas(good), f"{kind} without the bad file")


def test_cli_create_names_how_many_were_left_out(with_truncated, tmp_path):
    out = tmp_path / "c.zarr"
    r = run(*with_truncated, "-o", out)
    assert r.returncode == 1 and not out.exists()
    r = run(*with_truncated, "-o", out, "--skip-unreadable")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 file(s) left out" in r.stdout
    r = run("check", "--skip-unreadable", "--json", *with_truncated)
    assert [d["path"] for d in json.loads(r.stdout)["left_out"]] == [str(with_truncated[2])]


def test_every_file_left_out_is_refused(with_truncated, tmp_path):
    bad = with_truncated[2]
    with pytest.raises(VirtualizeError) as e:
        virtualize.virtualize([bad], tmp_path / "c.zarr", skip_unreadable=True)
    assert [p.kind for p in e.value.problems] == ["all-left-out"]
    assert str(bad) in e.value.problems[0].message


def test_append_leaves_out_a_truncated_file(with_truncated, tmp_path):
    files = with_truncated
    out = tmp_path / "c.zarr"
    virtualize.virtualize(files[:2], out)
    with pytest.raises(VirtualizeError):
        virtualize.append(out, files[2:])
    report = virtualize.append(out, files[2:], skip_unreadable=True)
    assert report.ok and [d["path"] for d in report.left_out] == [str(files[2])]
    info = json.loads((out / "virtualize.json").read_text())
    assert [d["path"] for d in info["left_out"]] == [str(files[2])]
    assert [s["path"] for s in info["sources"]] == [str(f) for f in (files[0], files[1],
                                                                     files[3])]
    # the missing month is a gap now: a note
    assert any(p.kind == "coordinate-gap" for p in report.problems)
    assert_same(virtualize.open(out)["tas"][...], tas([files[0], files[1], files[3]]),
                "appended without the bad file")


def test_a_file_with_damaged_variables_is_left_out_whole(tmp_path):
    """A file that scans but whose variables are damaged (here netCDF classic records
    past its end: `truncated` at the variables) is left out whole, not in part."""
    import netCDF4
    import numpy as np

    files = []
    for i in range(3):
        f = tmp_path / f"n{i}.nc"
        with netCDF4.Dataset(f, "w", format="NETCDF3_CLASSIC") as ds:
            ds.createDimension("time", None)
            ds.createDimension("x", 50)
            ds.createVariable("time", "f8", ("time",))[:] = np.arange(i * 10, i * 10 + 10)
            ds.createVariable("v", "f4", ("time", "x"))[:] = np.full((10, 50), i, "f4")
        files.append(f)
    data = files[1].read_bytes()
    files[1].write_bytes(data[:-900])
    refused = virtualize.check(files)
    assert {(p.kind, p.loc.file) for p in refused.problems if p.fatal} == {
        ("truncated", str(files[1]))}
    assert all(p.loc.variable for p in refused.problems)  # located at its variables
    report = virtualize.check(files, skip_unreadable=True)
    assert report.ok and [(d["path"], d["kind"]) for d in report.left_out] == [
        (str(files[1]), "truncated")]
    out = tmp_path / "c.zarr"
    virtualize.virtualize(files, out, skip_unreadable=True)
    g = virtualize.open(out)
    with netCDF4.Dataset(files[0]) as a, netCDF4.Dataset(files[2]) as b:
        expected = np.concatenate([a["v"][...], b["v"][...]])
    assert_same(g["v"][...], expected, "the stack without the damaged file")


def test_mosaic_leaves_out_an_unreadable_tile(case, tmp_path):
    tiles = [shutil.copy2(f, tmp_path / f.name) for f in case("mosaic_staggered_misaligned")]
    bad = tmp_path / "broken.tif"
    bad.write_bytes(b"II*\0" + b"\xff" * 4)  # a TIFF header pointing nowhere
    with pytest.raises(VirtualizeError):
        virtualize.mosaic([*tiles, bad], tmp_path / "m.zarr", materialize=True)
    report = virtualize.mosaic([*tiles, bad], tmp_path / "m.zarr", materialize=True,
                               skip_unreadable=True)
    assert report.ok and [d["path"] for d in report.left_out] == [str(bad)]
    assert virtualize.check_mosaic([*tiles, bad], materialize=True,
                                   skip_unreadable=True).left_out == report.left_out
    info = json.loads((tmp_path / "m.zarr" / "virtualize.json").read_text())
    assert [d["path"] for d in info["left_out"]] == [str(bad)]


def _time_files(tmp_path, starts, n, units, name="t"):
    import netCDF4
    import numpy as np

    files = []
    for i, start in enumerate(starts):
        f = tmp_path / f"{name}{i:02d}.nc"
        with netCDF4.Dataset(f, "w") as ds:
            ds.createDimension("time", None)
            t = ds.createVariable("time", "f8", ("time",))
            t.units = units
            t[:] = start + np.arange(n[i] if isinstance(n, list) else n) * \
                (1 if isinstance(n, list) else 6)
            ds.createVariable("v", "f4", ("time",))[:] = np.zeros(len(t[:]), "f4")
        files.append(f)
    return files


def test_gaps_of_six_hourly_data_and_of_monthly_means(tmp_path):
    import datetime

    # 6-hourly, 4 steps a file (0-18 h, 24-42 h): the third starts at 72 h, 4 steps late
    files = _time_files(tmp_path, [0, 24, 72], 4, "hours since 2024-01-01 00:00:00")
    [gap] = [p for p in virtualize.check(files).problems if p.kind == "coordinate-gap"]
    assert "4 step(s) of 6 hours missing between 2024-01-02T18:00:00 and " \
           "2024-01-04T00:00:00" in gap.message and gap.loc.file == str(files[2])
    # monthly means, one step a file (28-31 days apart): March missing
    months = [1, 2, 4, 5, 6, 7, 8]
    days = [(datetime.date(2024, m, 15) - datetime.date(2024, 1, 1)).days for m in months]
    files = _time_files(tmp_path, days, [1] * len(days), "days since 2024-01-01", "m")
    gaps = [p for p in virtualize.check(files).problems if p.kind == "coordinate-gap"]
    assert [p.loc.file for p in gaps] == [str(files[2])]
    assert "missing between 2024-02-15 and 2024-04-15" in gaps[0].message


# Found by #20's review (smaller): `--skip-unreadable` leaves out a missing local file ("unreadable"),
# but a missing remote source (HTTP 404) stops the job with a fatal `source-missing`.
def test_skip_unreadable_leaves_out_missing_url(tmp_path):
    sys.path.insert(0, os.path.dirname(__file__))
    from servers import RangeHTTPServer
    d = tmp_path / "srv"
    d.mkdir()
    files = [scaled_month(d / f"m{m}.nc", m) for m in range(2)]
    srv = RangeHTTPServer(d)
    try:
        urls = [f"{srv.url}/{os.path.basename(f)}" for f in files] + [f"{srv.url}/gone.nc"]
        r = run("check", "--skip-unreadable", *urls)
    finally:
        srv.stop()
    assert r.returncode == 0, r.stdout
    assert "left out" in r.stdout


# Found by #20's review (cron jobs): re-running `append --skip-unreadable` with yesterday's batch (one
# file already in the cube, one still unreadable) is not a no-op: exit 1, "all-left-out: every
# file was left out", since the file already in is set aside before the left-out one is
# counted. And each run that leaves a file out adds it to the cube's `left_out` record
# again (the same path twice).
def test_rerun_append_with_left_out_file_is_noop(tmp_path):
    files = [scaled_month(tmp_path / f"m{m}.nc", m) for m in range(3)]
    data = open(files[1], "rb").read()
    with open(files[1], "wb") as fh:
        fh.write(data[: len(data) // 2])  # truncated
    cube = tmp_path / "c.zarr"
    virtualize.virtualize(files[:1], cube)
    first = run("append", "--skip-unreadable", cube, files[1], files[2])
    assert first.returncode == 0, first.stdout
    again = run("append", "--skip-unreadable", cube, files[1], files[2])
    assert again.returncode == 0, again.stdout + again.stderr
    assert "left out" in again.stdout and "nothing to append" in again.stdout, again.stdout


# Found by #20's review: each append that leaves the same file out adds it to `left_out` again.
def test_left_out_record_names_a_file_once(tmp_path):
    import json
    files = [scaled_month(tmp_path / f"m{m}.nc", m) for m in range(4)]
    data = open(files[1], "rb").read()
    with open(files[1], "wb") as fh:
        fh.write(data[: len(data) // 2])  # truncated
    cube = tmp_path / "c.zarr"
    virtualize.virtualize(files[:1], cube)
    assert run("append", "--skip-unreadable", cube, files[1], files[2]).returncode == 0
    assert run("append", "--skip-unreadable", cube, files[1], files[3]).returncode == 0
    left = [x["path"] for x in json.loads((cube / "virtualize.json").read_text()).get("left_out", [])]
    assert len(left) == len(set(left)), left
