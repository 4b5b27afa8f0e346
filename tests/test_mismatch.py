"""Files that disagree on a non-concatenated axis (block length, length, dimensions), a
repeated or overlapping concatenation coordinate, a dtype change: located problems whose
ways through work (never a traceback), also under `append` (which takes no options)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import virtualize
from virtualize.model import UsageError, VirtualizeError

netCDF4 = pytest.importorskip("netCDF4")


def _nc(path, chunks, ny=4, t0=0, dtype="f4", dims=("time", "y", "x")):
    with netCDF4.Dataset(path, "w") as d:
        d.createDimension("time", None)
        d.createDimension("y", ny)
        d.createDimension("x", 5)
        t = d.createVariable("time", "f8", ("time",))
        t.units = "days since 2000-01-01"
        t[:] = np.arange(t0, t0 + 3)
        v = d.createVariable("tas", dtype, dims, chunksizes=chunks, zlib=True, shuffle=True)
        v[:] = np.arange(np.prod(v.shape)).reshape(v.shape)
    return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("mismatch")
    return {
        "a": _nc(root / "a.nc", (1, 4, 5)),
        "y": _nc(root / "b_y.nc", (1, 2, 5), t0=3),  # blocks differ along y
        "x": _nc(root / "b_x.nc", (1, 4, 2), t0=3),  # blocks differ along x
        "long": _nc(root / "b_long.nc", (1, 4, 5), ny=8, t0=3),  # y 8 (two blocks), not 4
        "dims": _nc(root / "b_dims.nc", (1, 5, 4), t0=3, dims=("time", "x", "y")),
        "f8": _nc(root / "b_f8.nc", (1, 4, 5), t0=3, dtype="f8"),
        "same": _nc(root / "b_same.nc", (1, 4, 5), t0=0),  # a's time steps again
        "overlap": _nc(root / "b_overlap.nc", (1, 4, 5), t0=2),  # starts at a's last step
        "next": _nc(root / "c.nc", (1, 4, 5), t0=6),
    }


def _fatal(report):
    return [p for p in report.problems if p.fatal]


@pytest.mark.parametrize("which, axis, here, there", [("y", "y", 2, 4), ("x", "x", 2, 5)])
def test_blocks_differing_along_a_non_concat_axis_are_located(files, tmp_path, which, axis,
                                                              here, there):
    report = virtualize.check([files["a"], files[which]])
    assert not report.ok
    (p,) = _fatal(report)
    assert (p.kind, p.loc.file, p.loc.variable, p.loc.axis) == ("blocks-differ", files[which],
                                                                 "tas", axis)
    assert f"block length {here} along {axis!r} differs from {there}" in p.message
    assert "re-chunk this file like it" in p.message
    # tas is the only data variable: dropping it is no way through (#30)
    assert report.refused_variables == {"tas": []} and report.data_variables == ["tas"]
    with pytest.raises(VirtualizeError) as e:
        virtualize.virtualize([files["a"], files[which]], tmp_path / "c.zarr")
    assert [q.kind for q in e.value.problems] == ["blocks-differ"]
    assert not (tmp_path / "c.zarr").exists()
    # (the rest of the stack without tas: coordinates alone, no data)
    out = virtualize.virtualize([files["a"], files[which]], tmp_path / "d.zarr", drop=["tas"])
    assert out.ok and "tas" not in virtualize.open(tmp_path / "d.zarr")
    # appended to a cube of the first file: the same located refusal, the cube unchanged
    virtualize.virtualize([files["a"]], tmp_path / "e.zarr")
    with pytest.raises(VirtualizeError) as e:
        virtualize.append(tmp_path / "e.zarr", [files[which]])
    assert [(q.kind, q.loc.axis) for q in e.value.problems] == [("blocks-differ", axis)]
    assert virtualize.open(tmp_path / "e.zarr")["tas"].shape == (3, 4, 5)


@pytest.mark.parametrize("which, kind", [("long", "shape-differs"), ("dims", "dims-differ")])
def test_other_mismatches_of_non_concat_axes_are_located(files, which, kind):
    report = virtualize.check([files["a"], files[which]])
    assert [(p.kind, p.loc.file, p.loc.variable) for p in _fatal(report)] == [
        (kind, files[which], "tas")]
    if kind == "shape-differs":
        assert _fatal(report)[0].loc.axis == "y"


def test_cli_check_of_differently_chunked_files_has_no_traceback(files):
    exe = os.path.join(os.path.dirname(sys.executable), "virtualize")
    r = subprocess.run([exe, "check", files["a"], files["y"]], capture_output=True, text=True)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr and "blocks-differ" in r.stdout
    assert "refused: tas (the only data variable: dropping it leaves no data)" in r.stdout
    assert "--drop tas" not in r.stdout


def test_append_names_ways_through_it_can_take(files, tmp_path):
    cube = tmp_path / "c.zarr"
    virtualize.virtualize([files["a"]], cube)
    with pytest.raises(VirtualizeError) as e:
        virtualize.append(cube, [files["y"]])
    # (tas, the only data variable: no --drop is a way through, #30)
    assert e.value.report.refused_variables == {"tas": []}
    exe = os.path.join(os.path.dirname(sys.executable), "virtualize")
    r = subprocess.run([exe, "append", cube, files["y"]], capture_output=True, text=True)
    assert r.returncode == 1
    assert "refused: tas (the only data variable: dropping it leaves no data)" in r.stdout
    assert "--drop tas" not in r.stdout


def test_append_names_materialize_as_a_rerun(case, tmp_path):
    files = case("tenday_padded")
    cube = tmp_path / "c.zarr"
    virtualize.virtualize(files[:1], cube)  # January ends in a padded block: fine alone
    with pytest.raises(VirtualizeError) as e:
        virtualize.append(cube, files[1:2])
    text = e.value.report.to_text()
    assert "not enabled: re-run virtualize with all the files and --materialize" in text
    assert "pass --materialize" not in text
    assert "(--materialize), by re-running virtualize with all the files]" in text
    assert "re-run virtualize with all the files and --materialize" in e.value.report.to_html()
    assert e.value.report.refused_variables["tas"] == [  # (no --drop: the only data variable)
        "re-run virtualize with all the files and --materialize"]
    # the re-run named works
    assert virtualize.virtualize(files[:2], tmp_path / "d.zarr", materialize=True).ok


@pytest.mark.parametrize("which, kind, way", [
    ("same", "duplicate-coordinate", "leave out the file given twice"),
    ("overlap", "coordinate-not-increasing", "leave out the file(s) whose time steps overlap"),
])
def test_a_repeated_or_overlapping_coordinate_does_not_suggest_dropping_it(files, tmp_path,
                                                                           which, kind, way):
    stack = [files["a"], files[which]]
    report = virtualize.check(stack)
    assert [p.kind for p in _fatal(report)] == [kind]
    ways = report.refused_variables["time"]
    assert "--drop time" not in ways and any(w.startswith(way) for w in ways)
    # (dropping it would not help: the same refusal comes back)
    assert [p.kind for p in _fatal(virtualize.check(stack, drop=["time"]))] == [kind]
    # leaving out the file does
    assert virtualize.check([files["a"], files["next"]]).ok


def test_a_dtype_change_shows_how_the_codecs_differ(files):
    report = virtualize.check([files["a"], files["f8"]])
    by_kind = {p.kind: p for p in _fatal(report)}
    assert set(by_kind) == {"dtype-differs", "codecs-differ"}
    msg = by_kind["codecs-differ"].message
    assert "numcodecs.shuffle has elementsize=8, not elementsize=4" in msg


def test_jobs_zero_is_one_per_core(files):
    assert virtualize.check([files["a"], files["next"]], jobs=0).ok
    exe = os.path.join(os.path.dirname(sys.executable), "virtualize")
    r = subprocess.run([exe, "check", "-j", "0", files["a"], files["next"]], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([exe, "check", "-j", "-1", files["a"]], capture_output=True, text=True)
    assert r.returncode == 2 and "0: one per core" in r.stderr
    with pytest.raises(UsageError, match="0: one per core"):
        virtualize.check([files["a"]], jobs=-1)
