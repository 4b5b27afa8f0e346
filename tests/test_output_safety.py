"""Outputs never lose data: --overwrite replaces only virtualize's own outputs, never a
source or anything holding one; a killed run leaves the old or the new output whole and
the next run cleans up; published outputs follow the umask."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import virtualize
from virtualize.model import OutputExistsError, UnsafeOutputError, VirtualizeError
from virtualize.outputs import staging as _staging
from virtualize.outputs.kerchunk import KERCHUNK_HEAD

from helpers import assert_same, source_values


def run(*args, cwd=None):
    exe = os.path.join(os.path.dirname(sys.executable), "virtualize")
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, cwd=cwd)


def digest(paths) -> dict:
    return {str(p): hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths}


@pytest.fixture
def tree(case, tmp_path):
    """Copies of a small stack in tmp/data/nc (never the session's fixtures: a failing
    guard must not destroy them), with symlinks pointing at it."""
    nc = tmp_path / "data" / "nc"
    nc.mkdir(parents=True)
    files = [Path(shutil.copy2(f, nc / Path(f).name)) for f in case("appended_batches")]
    (tmp_path / "link_dir").symlink_to(nc)
    (tmp_path / "link_file").symlink_to(files[0])
    (tmp_path / "link_parent").symlink_to(tmp_path / "data")
    (nc / "up").symlink_to("..")  # inside the source directory, pointing at its parent
    return tmp_path, files


# OUT, relative to tmp: the source directory, a source file, a directory holding the
# sources deeper down, a symlink inside the source directory to its parent, and
# symlinks to each of them
UNSAFE = ["data/nc", "data/nc/{first}", "data", "data/nc/up", "link_dir", "link_file",
          "link_parent", "link_parent/nc"]


def cli(capsys, *args):
    """The command line in this process (the subprocess runs are few: they are slow)."""
    from virtualize.cli import main

    capsys.readouterr()
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, out, err)


def usage(capsys, *args):
    """`cli` of a usage error (argparse's exit 2)."""
    with pytest.raises(SystemExit) as e:
        cli(capsys, *args)
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(args, e.value.code, out, err)


@pytest.mark.parametrize("out", UNSAFE)
def test_overwrite_never_touches_a_source_cli(tree, out, capsys):
    tmp, files = tree
    before = digest(files)
    target = tmp / out.format(first=files[0].name)
    # (a source's own name, data/nc/x.nc, is a usage error: virtualize writes no .nc)
    foreign = target.suffix == ".nc"
    for args in ([*files[:3], "-o", target, "--overwrite"],
                 [*files[:3], "-o", target, "--overwrite", "--format", "kerchunk"],
                 [tmp / "data" / "nc", "-o", target, "--overwrite"],
                 ["mosaic", *files[:3], "-o", target, "--overwrite"]):
        r = cli(capsys, *args) if not foreign else usage(capsys, *args)
        assert r.returncode == (2 if foreign else 3), r.stdout + r.stderr
        assert ("is one of the files given: a source is never written over" if foreign else
                "output-is-source") in r.stderr and "Traceback" not in r.stderr
        assert "--overwrite" not in r.stderr.splitlines()[-1].partition(";")[2], r.stderr
        assert len(r.stderr.strip().splitlines()) == (2 if foreign else 1), r.stderr
    assert digest(files) == before
    assert sorted(p.name for p in (tmp / "data" / "nc").iterdir()) == sorted(
        [f.name for f in files] + ["up"])


def test_the_issue_command_line_deletes_nothing(tree):
    """`virtualize DIR/*.nc -o DIR --overwrite`, as a user runs it."""
    tmp, files = tree
    before = digest(files)
    r = run(*files, "-o", tmp / "data" / "nc", "--overwrite")
    assert r.returncode == 3 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        f"virtualize: {tmp / 'data' / 'nc'}: output-is-source: contains the source {files[0]}; "
        "choose another output path"]
    r = run(*files, "-o", files[1], "--overwrite")  # a .nc: a usage error, and a source
    assert r.returncode == 2 and f"{files[1]} is one of the files given" in r.stderr
    assert digest(files) == before


@pytest.mark.parametrize("out", UNSAFE)
@pytest.mark.parametrize("fmt", ["cube", "kerchunk", "icechunk"])
def test_overwrite_never_touches_a_source_api(tree, out, fmt):
    if fmt == "icechunk":
        pytest.importorskip("icechunk")
    tmp, files = tree
    before = digest(files)
    target = tmp / out.format(first=files[0].name)
    # (a source's own name, x.nc, is a usage error first: virtualize writes no .nc)
    refused = virtualize.UsageError if target.suffix == ".nc" else UnsafeOutputError
    with pytest.raises(refused) as e:
        virtualize.virtualize(files[:3], target, overwrite=True, format=fmt)
    assert [p.kind for p in e.value.problems] == ["output-is-source"]
    # given as an iterator, the check happens at writing, before anything is replaced
    with pytest.raises(refused):
        virtualize.virtualize(iter(files[:3]), target, overwrite=True, format=fmt)
    assert digest(files) == before


def test_output_inside_the_source_directory_is_fine(tree):
    tmp, files = tree
    out = tmp / "data" / "nc" / "cube.zarr"
    virtualize.virtualize(files, out)
    virtualize.virtualize(files[:2], out, overwrite=True)
    assert virtualize.open(out)["tas"].shape[0] == 10


@pytest.mark.parametrize("what", ["dir", "empty-dir", "file", "kerchunk-like", "cube-plus",
                                  "link-to-dir"])
def test_foreign_outputs_are_never_replaced(tree, what, capsys):
    tmp, files = tree
    foreign = tmp / "foreign"
    if what == "dir":
        foreign.mkdir()
        (foreign / "thesis.tex").write_text("years of work")
    elif what == "empty-dir":
        foreign.mkdir()
    elif what == "file":
        foreign.write_text("years of work")
    elif what == "kerchunk-like":  # a kerchunk JSON virtualize did not write
        foreign.write_text('{"version": 1, "refs": {}}')
    elif what == "cube-plus":  # a cube with a foreign file in it
        virtualize.virtualize(files[:2], foreign)
        (foreign / "thesis.tex").write_text("years of work")
    else:
        (tmp / "elsewhere").mkdir()
        (tmp / "elsewhere" / "thesis.tex").write_text("years of work")
        foreign.symlink_to(tmp / "elsewhere")
    snapshot = sorted(str(p) for p in tmp.rglob("*"))
    for fmt in ("cube", "kerchunk"):
        with pytest.raises(UnsafeOutputError) as e:
            virtualize.virtualize(files[:2], foreign, overwrite=True, format=fmt)
        assert e.value.problems[0].kind == "output-not-ours"
        r = cli(capsys, *files[:2], "-o", foreign, "--overwrite", "--format", fmt)
        assert r.returncode == 3 and "output-not-ours" in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert sorted(str(p) for p in tmp.rglob("*")) == snapshot


def test_existing_output_error_is_both_kinds(tree):
    tmp, files = tree
    out = tmp / "cube.json"
    virtualize.virtualize(files[:2], out)
    with pytest.raises(OutputExistsError) as e:
        virtualize.virtualize(files[:2], out)
    assert isinstance(e.value, FileExistsError) and isinstance(e.value, VirtualizeError)
    assert e.value.problems[0].kind == "output-exists"
    assert "\n" not in str(e.value)
    # its own kerchunk JSON, and a cube of its own in place of it, are replaced
    virtualize.virtualize(files[:3], out, overwrite=True)
    assert virtualize.open(out)["tas"].shape[0] == 22
    # a cube directory under a kerchunk JSON's name would mislead every reader
    with pytest.raises(virtualize.UsageError, match="kerchunk reference file's"):
        virtualize.virtualize(files[:2], out, overwrite=True, format="cube")
    assert virtualize.open(out)["tas"].shape[0] == 22
    assert sorted(p.name for p in tmp.iterdir() if p.name.startswith(".")) == []


def test_append_still_replaces_its_cube(tree):
    tmp, files = tree
    out = tmp / "cube.zarr"
    virtualize.virtualize(files[:2], out)
    virtualize.append(out, files[2:])
    assert virtualize.open(out)["tas"].shape[0] == 28


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_published_outputs_follow_the_umask(tree, mask):
    tmp, files = tree
    old = os.umask(mask)
    try:
        virtualize.virtualize(files[:2], tmp / "cube.zarr")
        virtualize.virtualize(files[:2], tmp / "cube.json")
        virtualize.virtualize(files[:2], tmp / "cube.zarr", overwrite=True)
    finally:
        os.umask(old)
    assert (tmp / "cube.zarr").stat().st_mode & 0o777 == 0o777 & ~mask
    assert (tmp / "cube.zarr" / "tas").stat().st_mode & 0o777 == 0o777 & ~mask
    assert (tmp / "cube.zarr" / "virtualize.json").stat().st_mode & 0o777 == 0o666 & ~mask
    assert (tmp / "cube.json").stat().st_mode & 0o777 == 0o666 & ~mask


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_leftovers_of_killed_runs_are_cleaned_up(tree):
    tmp, files = tree
    out = tmp / "cube.zarr"
    virtualize.virtualize(files[:2], out)
    pid = dead_pid()
    (tmp / f".cube.zarr.staging-{pid}-abc_123").mkdir()  # a cube being written: its mark
    (tmp / f".cube.zarr.staging-{pid}-abc_123" / "zarr.json").write_text("{}")
    (tmp / f".cube.zarr.staging-{pid}-abc_123" / _staging.STAGING_MARK).write_text(
        json.dumps({"host": socket.gethostname(), "pid": pid}))
    (tmp / f".cube.zarr.staging-{pid}-x1y2z3").write_bytes(  # half a kerchunk JSON of ours
        KERCHUNK_HEAD + b', "sources": [')
    (tmp / f".cube.zarr.staging-{pid}-empty0").write_bytes(b"")  # killed before writing
    shutil.copytree(out, tmp / f".cube.zarr.replaced-{pid}")
    alive = tmp / f".cube.zarr.staging-{os.getppid()}-running"  # a run still going
    alive.mkdir()
    other = tmp / f".other.zarr.staging-{pid}-abc_123"  # another output's
    other.mkdir()
    virtualize.virtualize(files[:3], out, overwrite=True)
    assert sorted(p.name for p in tmp.iterdir() if p.name.startswith(".")) == sorted(
        [alive.name, other.name])
    assert virtualize.open(out)["tas"].shape[0] == 22


def test_files_named_like_leftovers_are_never_touched(tree):
    """Only what virtualize left is cleaned up: a user's file (here: sources) named like a
    staging or replaced leftover of OUT, a staging directory without virtualize's mark or
    with another host's, are neither removed nor moved into OUT's place."""
    tmp, files = tree
    pid = dead_pid()
    staged = Path(shutil.copy2(files[0], tmp / f".out.zarr.staging-{pid}-x"))
    replaced = Path(shutil.copy2(files[1], tmp / f".out.zarr.replaced-{pid + 1}"))
    foreign = tmp / f".out.zarr.staging-{pid}-dir"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    elsewhere = tmp / f".out.zarr.staging-{pid}-host"
    elsewhere.mkdir()
    (elsewhere / _staging.STAGING_MARK).write_text(json.dumps({"host": "another-host", "pid": pid}))
    before = digest([staged, replaced, foreign / "notes.txt"])
    virtualize.virtualize([staged, replaced], tmp / "out.zarr")
    assert digest([staged, replaced, foreign / "notes.txt"]) == before
    assert elsewhere.is_dir()
    assert virtualize.open(tmp / "out.zarr")["tas"].shape[0] == 10


def test_a_replaced_output_whose_successor_never_came_is_restored(tree):
    tmp, files = tree
    out = tmp / "cube.zarr"
    virtualize.virtualize(files[:2], out)
    old = tmp / f".cube.zarr.replaced-{dead_pid()}"
    out.rename(old)
    # the next run, even one that may not overwrite, puts it back first
    with pytest.raises(OutputExistsError):
        virtualize.virtualize(files[:3], out)
    assert not old.exists()
    assert virtualize.open(out)["tas"].shape[0] == 10


KILLER = """
import os, signal, sys
import virtualize
from virtualize.outputs import staging as s

mode, out, files = sys.argv[1], sys.argv[2], sys.argv[3:]


def die(*_):
    os.kill(os.getpid(), signal.SIGKILL)


if mode == "before-publish":
    s._publish = die
elif mode == "after-exchange":
    real = s._exchange
    s._exchange = lambda a, b: (real(a, b), die())
elif mode == "between-renames":  # a system without renameat2: two renames
    s._exchange = lambda a, b: False
    real_rename = os.rename

    def rename(a, b):
        real_rename(a, b)
        if ".replaced-" in os.fspath(b):
            die()

    os.rename = rename
virtualize.virtualize(files, out, overwrite=True, format=os.environ.get("FMT"))
"""


@pytest.mark.parametrize("fmt", ["cube", "kerchunk"])
@pytest.mark.parametrize("mode", ["before-publish", "after-exchange", "between-renames"])
def test_kill_9_at_publish_leaves_a_whole_output(tree, mode, fmt):
    if mode == "after-exchange" and _staging._libc_renameat2() is None:
        pytest.skip("no renameat2 here")
    tmp, files = tree
    out = tmp / ("cube.zarr" if fmt == "cube" else "cube.json")
    virtualize.virtualize(files[:3], out)  # old: 22 days
    r = subprocess.run([sys.executable, "-c", KILLER, mode, str(out), *map(str, files[:2])],
                       env=dict(os.environ, FMT=fmt), capture_output=True, text=True)
    assert r.returncode == -signal.SIGKILL, r.stderr
    leftovers = [p.name for p in tmp.iterdir() if p.name.startswith(".")]
    assert leftovers  # the killed run could not clean up
    if mode == "between-renames":
        assert not out.exists()  # the window: only the next run can repair it
        _staging.recover(out)
    n = virtualize.open(out)["tas"].shape[0]
    expected = {"before-publish": 22, "after-exchange": 10, "between-renames": 22}[mode]
    assert n == expected
    assert_same(virtualize.open(out)["tas"][...],
                source_values(files[: 3 if n == 22 else 2], "tas", "time", ("time", "lat", "lon")),
                mode)
    # the next run cleans up every leftover of the killed one
    virtualize.virtualize(files, out, overwrite=True)
    assert [p.name for p in tmp.iterdir() if p.name.startswith(".")] == []
    assert virtualize.open(out)["tas"].shape[0] == 28
