"""The command line, run as a user runs it (a subprocess of the installed entry point)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import virtualize


def run(*args, cwd=None):
    exe = os.path.join(os.path.dirname(sys.executable), "virtualize")
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, cwd=cwd)


def test_virtualize_writes_a_cube_and_says_so(case, tmp_path):
    files = case("months2024")
    r = run(*files, "-o", tmp_path / "cube.zarr")
    assert r.returncode == 0, r.stderr
    # quiet success: one line, saying what was written where
    assert r.stdout.startswith("yes: 12 file(s) virtualized into cube ")
    assert r.stdout.count("\n") == 1 and "cube.zarr" in r.stdout
    r = run(*files, "-o", tmp_path / "cube2.zarr", "-v")
    assert "[[31, 29, 31, 30, 31, 30, [31, 2], 30, 31, 30, 31], [3], [4]]" in r.stdout
    assert r.stdout.rstrip().endswith("cube2.zarr")
    assert virtualize.open(tmp_path / "cube.zarr")["tas"].shape == (366, 3, 4)


def test_kerchunk_export_by_suffix(case, tmp_path):
    r = run(*case("appended_batches"), "-o", tmp_path / "refs.json")
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "refs.json").read_text())
    assert doc["version"] == 1 and "tas/zarr.json" in doc["refs"]


def test_refusal_exits_1_prints_every_problem_and_writes_nothing(case, tmp_path):
    r = run(*case("tenday_padded"), "-o", tmp_path / "cube.zarr")
    assert r.returncode == 1
    # every padded block could be copied into the cube (--materialize), which is not enabled
    assert r.stdout.startswith("yes with remedies: 7 problem(s)")
    assert "remedy materialize: 7 block(s)" in r.stdout and "not enabled" in r.stdout
    # the same block of 6 files is listed once, with its file count; -v names the files
    assert r.stdout.count("padded-block") == 2 and "(in 6 files: " in r.stdout
    v = run("check", "-v", *case("tenday_padded"))
    assert all(str(f) in v.stdout for f in case("tenday_padded")[:10] if f.name != "tas_day_202412.nc"
               and f.name not in ("tas_day_202404.nc", "tas_day_202406.nc", "tas_day_202409.nc",
                                  "tas_day_202411.nc"))
    assert "nothing was written" in r.stderr
    assert not (tmp_path / "cube.zarr").exists()


def test_check_exit_codes_and_json(case):
    ok = run("check", *case("months2024"))
    assert ok.returncode == 0 and ok.stdout.startswith("yes")
    bad = run("check", "--json", *case("duplicate"))
    assert bad.returncode == 1
    doc = json.loads(bad.stdout)
    assert doc["ok"] is False and doc["schema"] == "virtualize-report"
    assert [p["kind"] for p in doc["problems"]] == ["duplicate-coordinate"]
    assert doc["problems"][0]["loc"]["variable"] == "time"


def test_usage_errors_exit_2(case, tmp_path):
    assert run().returncode == 2
    assert run(*case("months2024")).returncode == 2  # no -o
    assert run("check").returncode == 2


def test_existing_output_is_refused_then_replaced_with_overwrite(case, tmp_path):
    files = case("appended_batches")
    out = tmp_path / "cube.zarr"
    assert run(*files, "-o", out).returncode == 0
    again = run(*files[:2], "-o", out)
    assert again.returncode == 3 and "exists" in again.stderr
    assert virtualize.open(out)["tas"].shape[0] == 28
    assert run(*files[:2], "-o", out, "--overwrite").returncode == 0
    assert virtualize.open(out)["tas"].shape[0] == 10


def test_verbose_shows_bytes_read(case, tmp_path):
    r = run("check", "-v", *case("months2024")[:2])
    assert "bytes read while scanning" in r.stdout


def test_concat_dim_drop_and_inline_options(case, tmp_path):
    files = case("h5py_plain")
    r = run(*files, "-o", tmp_path / "c.zarr", "--concat-dim", "data_dim0", "--drop", "small")
    assert r.returncode == 0, r.stdout + r.stderr
    r = run(*files, "-o", tmp_path / "d.zarr", "--concat-dim", "data_dim0", "--inline", "small")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "small" in virtualize.open(tmp_path / "d.zarr")


def test_directories_and_file_lists(case, tmp_path):
    files = case("appended_batches")
    listing = tmp_path / "files.txt"
    listing.write_text("\n".join(map(str, files)) + "\n")
    r = run(f"@{listing}", "-o", tmp_path / "a.zarr")
    assert r.returncode == 0, r.stderr
    r = run(files[0].parent, "-o", tmp_path / "b.zarr")
    assert r.returncode == 0, r.stderr
    for out in ("a.zarr", "b.zarr"):
        assert virtualize.open(tmp_path / out)["tas"].shape == (28, 3, 4)


def test_parallel_scan_gives_the_same_report(case, tmp_path):
    files = case("months2024") + case("tenday_padded")[:2] + [tmp_path / "missing.nc"]
    one = virtualize.check(files)
    two = virtualize.check(files, jobs=2)
    assert [str(p) for p in one.problems] == [str(p) for p in two.problems]
    assert one.bytes_read == two.bytes_read
    r = run("check", "-j", "2", *case("months2024"))
    assert r.returncode == 0 and r.stdout.startswith("yes: 12 file(s)")


def test_inline_threshold_option(case, tmp_path):
    """Small data that cannot be referenced (a compact dataset) is inlined by default with
    a note; --inline-threshold 0 refuses it, naming --inline and --drop."""
    files = case("h5py_plain")
    r = run("check", *files, "--concat-dim", "data_dim0", "-v")  # notes: -v
    assert r.returncode == 0, r.stdout + r.stderr
    assert "small: cannot be referenced (compact-layout)" in r.stdout
    r = run("check", *files, "--concat-dim", "data_dim0", "--inline-threshold", "0")
    assert r.returncode == 1 and "compact-layout" in r.stdout
    assert "--inline small" in r.stdout and "--drop small" in r.stdout
