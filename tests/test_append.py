"""Appending batches to a cube: each batch becomes chunks of its own length."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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


def test_append_refuses_files_in_the_middle_and_skips_those_in_the_cube(case, tmp_path):
    files = case("months2024")
    cube = tmp_path / "cube.zarr"
    virtualize.virtualize(files[:1] + files[2:4], cube)
    before = (cube / "tas" / "manifest.npy").read_bytes()
    with pytest.raises(virtualize.VirtualizeError) as e:
        virtualize.append(cube, [files[1]])  # February: between January and March
    assert [p.kind for p in e.value.problems] == ["append-not-at-end"]
    report = virtualize.append(cube, [files[2]])  # already in: nothing to do
    assert report.ok and report.already == [str(files[2])] and not report.plan.arrays
    assert (cube / "tas" / "manifest.npy").read_bytes() == before  # untouched


def test_append_refuses_when_a_source_changed(case, tmp_path):
    import shutil

    (tmp_path / "src").mkdir()
    files = [shutil.copy2(f, tmp_path / "src" / f.name) for f in case("appended_batches")]
    cube = tmp_path / "cube.zarr"
    virtualize.virtualize(files[:2], cube)
    with open(files[0], "ab") as f:  # (only touched would be a note: test_staleness.py)
        f.write(b"\0" * 8)
    with pytest.raises(virtualize.VirtualizeError) as e:
        virtualize.append(cube, files[2:3])
    assert [p.kind for p in e.value.problems] == ["source-changed"]
    with pytest.raises(virtualize.VirtualizeError) as e:  # given again: other content now
        virtualize.append(cube, files[:3])
    assert [(p.kind, p.loc.file) for p in e.value.problems] == [("already-in-cube", str(files[0]))]


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


# -- appending in proportion to the new files ------------------------------------------------

def _scans(monkeypatch):
    """Count the files scanned (in this process: scan_timeout=0)."""
    import virtualize.formats

    seen: list[str] = []
    real = virtualize.formats.scan

    def counting(path, hint=None):
        seen.append(str(path))
        return real(path, hint)

    monkeypatch.setattr(virtualize.formats, "scan", counting)
    return seen


def _same_cube(a, b):
    ga, gb = virtualize.open(a), virtualize.open(b)
    assert sorted(ga.array_keys()) == sorted(gb.array_keys())
    for name in gb.array_keys():
        x, y = ga[name], gb[name]
        assert x.shape == y.shape and x.dtype == y.dtype, name
        assert dict(x.attrs) == dict(y.attrs), name
        assert_same(x[...], y[...], name)


@pytest.mark.parametrize("out", ["cube.zarr", "cube.icechunk", "refs.json"])
@pytest.mark.parametrize("name", ["appended_batches", "nc3_months_classic", "stack_dates",
                                  "kerchunk_months2024"])
def test_append_scans_only_the_new_files(case, tmp_path, monkeypatch, name, out):
    files = case(name)
    cube = tmp_path / out
    kw = {"concat_dim": "time"} if name == "stack_dates" else {}  # (a new axis: dates in names)
    virtualize.virtualize(files[:2], cube, scan_timeout=0, **kw)
    segments = {p: (os.stat(p).st_ino, os.stat(p).st_mtime_ns)
                for p in cube.rglob("manifest*.npy")}
    scanned = _scans(monkeypatch)
    report = virtualize.append(cube, files[2:], scan_timeout=0)
    assert scanned == [str(f) for f in files[2:]]
    assert any("scanning only them" in n for n in report.notes)
    for p, (ino, mtime) in segments.items():  # the old manifests: the same files, untouched
        assert (os.stat(p).st_ino, os.stat(p).st_mtime_ns) == (ino, mtime)
    if out == "cube.zarr":
        assert list(cube.rglob("manifest.1.npy"))
    full = tmp_path / ("full" + cube.suffix)
    virtualize.virtualize(files, full, scan_timeout=0, **kw)
    _same_cube(cube, full)


def test_append_one_at_a_time_keeps_segments(case, tmp_path, monkeypatch):
    files = case("months2024")
    cube = tmp_path / "cube.zarr"
    virtualize.virtualize(files[:9], cube, scan_timeout=0)
    scanned = _scans(monkeypatch)
    for f in files[9:]:
        virtualize.append(cube, [f], scan_timeout=0)
    assert scanned == [str(f) for f in files[9:]]
    doc = json.loads((cube / "tas" / "zarr.json").read_text())
    assert doc["virtualize_manifest"]["segments"] == [[0, "manifest.npy"], [9, "manifest.1.npy"],
                                                      [10, "manifest.2.npy"], [11, "manifest.3.npy"]]
    full = tmp_path / "full.zarr"
    virtualize.virtualize(files, full, scan_timeout=0)
    _same_cube(cube, full)
    grid = json.loads((full / "tas" / "zarr.json").read_text())["chunk_grid"]
    assert doc["chunk_grid"] == grid


@pytest.mark.parametrize("edit", [
    lambda s: [s[0], s[2], s[1], s[3]],  # two segments' files swapped
    lambda s: [s[0], s[1], [s[2][0], s[1][1]], s[3]],  # one file listed twice
    lambda s: [s[0], [s[1][0], "../tas/manifest.1.npy"], s[2], s[3]],
    lambda s: [s[0], [True, s[1][1]], s[2], s[3]],
])
def test_edited_segment_lists_are_invalid_cubes(case, tmp_path, edit):
    """Segment i is manifest.i.npy (manifest.npy first): a list naming them otherwise
    (swapped, repeated, elsewhere) would read chunks in another order: refused."""
    files = case("months2024")
    cube = tmp_path / "cube.zarr"
    virtualize.virtualize(files[:9], cube, scan_timeout=0)
    for f in files[9:]:
        virtualize.append(cube, [f], scan_timeout=0)
    path = cube / "tas" / "zarr.json"
    doc = json.loads(path.read_text())
    field = doc["virtualize_manifest"]
    field["segments"] = edit(field["segments"])
    path.write_text(json.dumps(doc))
    with pytest.raises(virtualize.VirtualizeError) as e:
        virtualize.open(cube)["tas"][...]
    assert [p.kind for p in e.value.problems] == ["invalid-cube"], e.value.problems


def test_concurrent_appends_wait_for_each_other(case, tmp_path):
    """Two `virtualize append` processes on one cube at once: each appends to what the
    other published (or is refused, located, when its file would no longer be at the
    end); the cube always reads as its recorded sources, in order."""
    exe = os.path.join(os.path.dirname(sys.executable), "virtualize")
    files = [str(f) for f in case("appended_batches")]
    for out in ("c.zarr", "c.json", "c.icechunk"):
        cube = str(tmp_path / out)
        virtualize.virtualize(files[:2], cube, scan_timeout=0)
        procs = [subprocess.Popen([exe, "append", "-q", cube, f], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for f in files[2:4]]
        outcomes = [(p.wait(), p.stdout.read() + p.stderr.read()) for p in procs]
        assert 0 in [rc for rc, _ in outcomes], outcomes
        for rc, text in outcomes:
            assert rc == 0 or (rc == 1 and "append-not-at-end" in text), outcomes
        kind = {"c.zarr": "cube", "c.json": "kerchunk", "c.icechunk": "icechunk"}[out]
        sources = [s["path"] for s in virtualize.api.steps.recorded(Path(cube), kind)["sources"]]
        assert sources[:2] == files[:2] and len(sources) == 2 + [rc for rc, _ in outcomes].count(0)
        g = virtualize.open(cube)
        assert_same(g["tas"][...], source_values(sources, "tas", "time", ("time", "lat", "lon")),
                    out)
        assert_same(g["time"][...], source_values(sources, "time", "time", ("time",)), out)


def _flip_orog(src, dst):
    """A copy of a netCDF classic file whose `orog` (no record axis) differs."""
    import shutil

    shutil.copy2(src, dst)
    refs = virtualize.inventory(dst).variables["orog"].blocks.refs.reshape(-1)
    with open(dst, "r+b") as f:
        f.seek(int(refs[0]["offset"]))
        b = f.read(1)
        f.seek(int(refs[0]["offset"]))
        f.write(bytes([b[0] ^ 0xFF]))


def _files_of(out):
    return {p: p.read_bytes() for p in ([out] if out.is_file() else out.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("out", ["cube.zarr", "cube.icechunk", "refs.json"])
def test_append_of_a_disagreeing_file_is_located(case, tmp_path, monkeypatch, out):
    import shutil

    files = case("nc3_months_classic")
    cube = tmp_path / out
    virtualize.virtualize(files[:2], cube, scan_timeout=0)
    before = _files_of(cube)
    bad = tmp_path / "bad" / files[2].name
    bad.parent.mkdir()
    _flip_orog(files[2], bad)
    scanned = _scans(monkeypatch)
    with pytest.raises(virtualize.VirtualizeError) as e:
        virtualize.append(cube, [bad], scan_timeout=0)
    assert [(p.kind, p.loc.file, p.loc.variable) for p in e.value.problems] == \
        [("differs-between-files", str(bad), "orog")]
    # a file with the same steps as the cube's last one (a copy under another name)
    again = tmp_path / "again" / files[1].name
    again.parent.mkdir()
    shutil.copy2(files[1], again)
    with pytest.raises(virtualize.VirtualizeError) as e:
        virtualize.append(cube, [again], scan_timeout=0)
    assert [(p.kind, p.loc.file) for p in e.value.problems] == [("duplicate-coordinate", str(again))]
    assert scanned == [str(bad), str(again)]  # the cube's own files were not read
    assert _files_of(cube) == before


def test_append_to_icechunk_commits_only_the_new_chunks(case, tmp_path, monkeypatch):
    import icechunk as ic

    files = case("appended_batches")
    cube = tmp_path / "c.icechunk"
    virtualize.virtualize(files[:3], cube, scan_timeout=0)
    virtualize.append(cube, files[3:], scan_timeout=0)
    repo = ic.Repository.open(ic.local_filesystem_storage(str(cube)))
    head, parent = list(repo.ancestry(branch="main"))[:2]
    diff = repo.diff(from_snapshot_id=parent.id, to_snapshot_id=head.id)
    # the new files' chunks of tas, and the inline time coordinate (one chunk, rewritten)
    assert {k: sorted(v) for k, v in diff.updated_chunks.items()} == \
        {"/tas": [[3, 0, 0], [4, 0, 0]], "/time": [[0]]}
    assert not diff.new_arrays and not diff.deleted_arrays


def test_append_to_a_relocatable_cube_and_to_one_without_a_recorded_last_step(
        case, tmp_path, monkeypatch):
    import shutil

    files = case("appended_batches")
    data = tmp_path / "data"
    data.mkdir()
    files = [Path(shutil.copy2(f, data / f.name)) for f in files]
    cube = tmp_path / "cube.zarr"
    virtualize.virtualize(files[:3], cube, relative=True, scan_timeout=0)
    scanned = _scans(monkeypatch)
    virtualize.append(cube, files[3:4], scan_timeout=0)
    assert scanned == [str(files[3])]
    info = json.loads((cube / "virtualize.json").read_text())
    assert [s["path"] for s in info["sources"]] == [f"../data/{f.name}" for f in files[:4]]
    # a cube written before the last step was recorded: the whole stack is planned again
    del info["append"]
    (cube / "virtualize.json").write_text(json.dumps(info))
    virtualize.append(cube, files[4:], scan_timeout=0)
    assert scanned == [str(files[3])] + [str(f) for f in files]
    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.move(str(cube), moved / "cube.zarr")
    shutil.move(str(data), moved / "data")
    g = virtualize.open(moved / "cube.zarr")
    assert_same(g["tas"][...], source_values([moved / "data" / f.name for f in files], "tas", "time",
                                             ("time", "lat", "lon")), "relocated")


def test_append_to_a_relocatable_icechunk_repository_is_refused(case, tmp_path):
    pytest.importorskip("icechunk")
    import shutil

    data = tmp_path / "data"
    data.mkdir()
    files = [Path(shutil.copy2(f, data / f.name)) for f in case("appended_batches")]
    repo = tmp_path / "cube.icechunk"
    virtualize.virtualize(files[:3], repo, relative=True, scan_timeout=0)
    with pytest.raises(virtualize.VirtualizeError) as e:
        virtualize.append(repo, files[3:4], scan_timeout=0)
    assert [p.kind for p in e.value.problems] == ["not-appendable"]
    assert "relocatable" in str(e.value.problems[0])
    # the repository is as it was: three files
    assert virtualize.open(repo)["tas"].shape[0] == \
        sum(len(source_values([f], "time", "time", ("time",))) for f in files[:3])


def test_append_verify_export_of_a_url_cube_are_refused_not_mangled(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for call in (lambda: virtualize.append("s3://bkt/cube.zarr", ["x.nc"]),
                 lambda: virtualize.verify_cube("s3://bkt/cube.zarr"),
                 lambda: virtualize.export("s3://bkt/cube.zarr", "out.json")):
        with pytest.raises(virtualize.VirtualizeError) as e:
            call()
        [p] = e.value.problems
        assert p.kind == "remote-cube" and p.loc.file == "s3://bkt/cube.zarr"
    assert list(tmp_path.iterdir()) == []  # nothing written here


def _plain_kerchunk(path, u):
    """A kerchunk JSON opened with fsspec + zarr only, its template `u` overridden."""
    import fsspec
    import zarr
    from zarr.storage import FsspecStore

    from helpers import rectilinear

    fs = fsspec.filesystem("reference", fo=str(path), asynchronous=True,
                           template_overrides={"u": str(u)})
    with rectilinear():
        return zarr.open_group(FsspecStore(fs, read_only=True, path=""), mode="r", zarr_format=3)


def _recorded_paths(out):
    raw = json.loads(out.read_text() if out.is_file() else (out / "virtualize.json").read_text())
    info = raw["virtualize"] if out.is_file() else raw
    last = info["append"]["last"]
    return raw, [s["path"] for s in info["sources"]], info["roots"], \
        [last["path"]] + [d["path"] for d in last["data_files"]]


@pytest.mark.parametrize("out", ["cube.zarr", "refs.json"])
def test_append_after_moving_a_relocatable_output(case, tmp_path, monkeypatch, out):
    import shutil

    names = [f.name for f in case("appended_batches")]
    first = tmp_path / "first"
    (first / "data").mkdir(parents=True)
    for f in case("appended_batches"):
        shutil.copy2(f, first / "data" / f.name)
    virtualize.virtualize([first / "data" / n for n in names[:2]], first / out, relative=True,
                          scan_timeout=0)
    virtualize.append(first / out, [first / "data" / names[2]], scan_timeout=0)  # in place
    # moved together with its files, then appended to there
    second = tmp_path / "second"
    shutil.move(str(first), second)
    data = second / "data"
    scanned = _scans(monkeypatch)
    report = virtualize.append(second / out, [data / names[3]], scan_timeout=0)
    assert scanned == [str(data / names[3])]  # the recorded last step, at its new place
    assert not any("relocatable" in n for n in report.notes)
    up = "../" if out == "cube.zarr" else ""  # (a cube: relative to itself; a JSON: its directory)
    raw, sources, roots, last = _recorded_paths(second / out)
    assert sources == [f"{up}data/{n}" for n in names[:4]]
    assert roots == [f"{up}data"]
    assert last == [f"{up}data/{names[3]}"]
    if out == "refs.json":
        assert raw["templates"] == {"u": str(data)}
        refs = [v[0] for v in raw["refs"].values() if isinstance(v, list)]
        assert refs and all(r.startswith("{{u}}/") for r in refs)
    # moved again: read where it is now, by virtualize and (a JSON) by plain fsspec
    third = tmp_path / "third"
    shutil.move(str(second), third)
    files = [third / "data" / n for n in names[:4]]
    expected = source_values(files, "tas", "time", ("time", "lat", "lon"))
    times = source_values(files, "time", "time", ("time",))
    g = virtualize.open(third / out)
    assert_same(g["tas"][...], expected, "appended after a move")
    assert_same(g["time"][...], times, "time")
    if out == "refs.json":
        p = _plain_kerchunk(third / out, third / "data")
        assert_same(p["tas"][...], expected, "plain fsspec, template overridden")
        assert_same(p["time"][...], times, "plain fsspec time")
    # the whole stack planned again (no recorded last step): still relocatable
    raw, *_ = _recorded_paths(third / out)
    (raw["virtualize"] if out == "refs.json" else raw).pop("append")
    (third / out if out == "refs.json" else third / out / "virtualize.json").write_text(
        json.dumps(raw, separators=(",", ":")))  # (as written: the head marks a JSON as ours)
    virtualize.append(third / out, [third / "data" / names[4]], scan_timeout=0)
    raw, sources, roots, last = _recorded_paths(third / out)
    assert sources == [f"{up}data/{n}" for n in names] and roots == [f"{up}data"]
    assert last == [f"{up}data/{names[4]}"]
    if out == "refs.json":
        assert raw["templates"] == {"u": str(third / "data")}
    fourth = tmp_path / "fourth"
    shutil.move(str(third), fourth)
    files = [fourth / "data" / n for n in names]
    assert_same(virtualize.open(fourth / out)["tas"][...],
                source_values(files, "tas", "time", ("time", "lat", "lon")), "rebuilt, moved")


def test_append_to_a_relocatable_json_of_a_file_outside_its_template(case, tmp_path):
    import shutil

    files = case("appended_batches")
    data = tmp_path / "data"
    data.mkdir()
    for f in files[:2]:
        shutil.copy2(f, data / f.name)
    other = tmp_path / "other" / files[2].name
    other.parent.mkdir()
    shutil.copy2(files[2], other)
    refs = tmp_path / "refs.json"
    virtualize.virtualize([data / f.name for f in files[:2]], refs, relative=True, scan_timeout=0)
    report = virtualize.append(refs, [other], scan_timeout=0)
    assert any("no longer relocatable" in n and str(other) in n for n in report.notes)
    raw, sources, roots, last = _recorded_paths(refs)
    assert raw["templates"] == {"u": str(data)}
    # recorded relative like the rest; referenced by absolute path (outside `u`)
    assert sources == [f"data/{f.name}" for f in files[:2]] + [f"other/{other.name}"]
    assert sorted(roots) == ["data", "other"] and last == [f"other/{other.name}"]
    paths = {v[0] for v in raw["refs"].values() if isinstance(v, list)}
    assert str(other) in paths and {p for p in paths if p != str(other)} == \
        {f"{{{{u}}}}/{f.name}" for f in files[:2]}
    expected = source_values([data / f.name for f in files[:2]] + [other], "tas", "time",
                             ("time", "lat", "lon"))
    assert_same(virtualize.open(refs)["tas"][...], expected, "virtualize.open")
    assert_same(_plain_kerchunk(refs, data)["tas"][...], expected, "plain fsspec")


def test_append_to_an_output_that_is_not_relocatable_records_absolute_paths(case, tmp_path):
    files = case("kerchunk_months2024")  # (reference sets: the last step has data files)
    for out in (tmp_path / "cube.zarr", tmp_path / "refs.json"):
        virtualize.virtualize(files[:2], out, scan_timeout=0)
        virtualize.append(out, files[2:4], scan_timeout=0)
        raw, sources, roots, last = _recorded_paths(out)
        assert "templates" not in raw
        assert all(os.path.isabs(p) for p in sources + roots + last)
        assert last[0] == str(files[3]) and len(last) == 2
