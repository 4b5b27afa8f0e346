"""Messages that say what happened, naming the file (small fixes, one class each)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

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


# -- #28: messages and exit codes, as a new user met them --------------------------------

def cli(capsys, *args) -> tuple[int, str, str]:
    """The command line in this process: (exit code, stdout, stderr); a usage error's
    SystemExit is its exit code."""
    capsys.readouterr()
    try:
        code = main([str(a) for a in args])
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def nc_stack(d, n: int = 5, start: int = 0) -> list:
    """n small netCDF-4 files of tas(time, x), two days each, by netCDF4-python."""
    d.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(start, start + n):
        path = d / f"b_{i}.nc"
        with netCDF4.Dataset(path, "w") as nc:
            nc.createDimension("time", None)
            nc.createDimension("x", 3)
            t = nc.createVariable("time", "f8", ("time",))
            t.units = "days since 2000-01-01"
            t[:] = [2 * i, 2 * i + 1]
            nc.createVariable("tas", "f4", ("time", "x"))[:] = np.full((2, 3), i, "f4")
        out.append(path)
    return out


def test_a_foreign_suffix_is_a_usage_error_never_offered_overwrite(tmp_path, capsys):
    """`-o existing.nc` was exit 3 "output-exists ... pass --overwrite" (and --overwrite
    then refused it): a name of a format virtualize does not write is a usage error,
    whatever is there, a source named as one."""
    files = nc_stack(tmp_path / "d")
    other = tmp_path / "existing.nc"
    shutil.copy(files[0], other)
    before = other.read_bytes()
    for target, there in ((other, f"{other} exists, and is left as it is"),
                          (files[0], f"{files[0]} is one of the files given: a source is "
                                     "never written over"),
                          (tmp_path / "new.tif", None)):
        for extra in ((), ("--overwrite",)):
            code, out, err = cli(capsys, *files, "-o", target, *extra)
            assert code == 2, err
            assert "virtualize does not write" in err and (there is None or there in err)
            assert "pass --overwrite" not in err and "overwrite=True" not in err
    assert other.read_bytes() == before and not (tmp_path / "new.tif").exists()
    with pytest.raises(virtualize.UsageError) as e:
        virtualize.virtualize(files, other, overwrite=True)
    assert [(p.kind, p.loc.file) for p in e.value.problems] == [("output-exists", str(other))]
    with pytest.raises(virtualize.UsageError) as e:
        virtualize.virtualize(files, files[0])
    assert [p.kind for p in e.value.problems] == ["output-is-source"]
    # an existing output virtualize did not write is refused (exit 3), never with the
    # advice to pass --overwrite (which would refuse it too); its own is offered it
    foreign = tmp_path / "mine.zarr"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("years of work")
    code, out, err = cli(capsys, *files, "-o", foreign)
    assert code == 3 and "never replaced" in err and "pass --overwrite" not in err, err
    virtualize.virtualize(files, tmp_path / "ours.zarr")
    code, out, err = cli(capsys, *files, "-o", tmp_path / "ours.zarr")
    assert code == 3 and "pass overwrite=True (--overwrite)" in err, err


@pytest.mark.parametrize("command", ["check", "create", "append"])
def test_a_glob_or_directory_naming_no_file_is_a_usage_error(command, tmp_path, capsys):
    files = nc_stack(tmp_path / "d", 2)
    (tmp_path / "empty").mkdir()
    cube = tmp_path / "c.zarr"
    virtualize.virtualize(files, cube)
    for given in (tmp_path / "d" / "*.grib", tmp_path / "empty"):
        args = {"check": ["check", given], "create": [given, "-o", tmp_path / "n.zarr"],
                "append": ["append", cube, given]}[command]
        code, out, err = cli(capsys, *args)
        assert code == 2, out + err
        assert "no-files" in out + err and str(given) in out + err
    # every file left out is still a refusal (exit 1): the files exist, none can be read
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "x.nc").write_bytes(b"CDF\x01" + b"\x00" * 8)
    code, out, err = cli(capsys, "check", "--skip-unreadable", tmp_path / "bad")
    assert code == 1 and "all-left-out" in out, out


def test_every_entry_a_directory_skips_is_noted(tmp_path, capsys):
    """A broken symlink and a subdirectory were skipped silently while notes.txt got a
    note: every entry not taken is named, with why, in one note (check, and append)."""
    d = tmp_path / "d"
    files = nc_stack(d, 3)
    (d / "notes.txt").write_text("read me")
    (d / "gone.nc").symlink_to(d / "nowhere.nc")
    (d / "sub").mkdir()
    (d / ".hidden.nc").write_bytes(files[0].read_bytes())
    report = virtualize.check(d, scan_timeout=None)
    assert report.ok and report.files == [str(f) for f in files]
    [note] = [n for n in report.notes if n.startswith("skipped")]
    assert note == (f"skipped 4 entries in {d}: .hidden.nc (hidden); gone.nc (a broken "
                    "symbolic link); notes.txt (of no format virtualize reads); sub (a "
                    "subdirectory: not read, give it as an input too)")
    code, out, err = cli(capsys, "check", "-v", d)
    assert code == 0 and f"note: {note}" in out
    cube = tmp_path / "c.zarr"
    virtualize.virtualize(files[:1], cube)
    later = tmp_path / "later"
    (later / "sub").mkdir(parents=True)
    for f in files[1:]:
        shutil.move(f, later / f.name)
    grown = virtualize.append(cube, [later], scan_timeout=None)
    assert any(n.startswith(f"skipped 1 entry in {tmp_path / 'later'}: sub (a subdirectory")
               for n in grown.notes), grown.notes


def stray_tiff(path) -> None:
    import tifffile

    tifffile.imwrite(path, np.arange(16, dtype="u1").reshape(4, 4))


@pytest.mark.parametrize("name", ["a_stray.tif", "z_stray.tif"])
def test_the_odd_file_out_is_named_whatever_the_order(name, tmp_path):
    """5 netCDF files and one TIFF: sorted first, the TIFF gave only "no-concat-dim: the
    files have no unlimited dimension" (false for 5 of 6); sorted last it was named. Now
    it is named either way, the rest planned without it (its own problems would show)."""
    files = nc_stack(tmp_path / "d")
    stray_tiff(tmp_path / "d" / name)
    for given in ([tmp_path / "d"], [tmp_path / "d" / name, *files], [*files, tmp_path / "d" / name]):
        report = virtualize.check(given, scan_timeout=None)
        assert not report.ok
        assert [(p.kind, p.loc.file) for p in report.problems] == \
            [("odd-file-out", str(tmp_path / "d" / name))], [str(p) for p in report.problems]
        msg = report.problems[0].message
        assert "TIFF" in msg and "shares no variable with the other 5 file(s)" in msg
        assert "could not be scanned" not in " ".join(report.notes)
        assert report.plan is not None and report.plan.arrays["tas"].shape == (10, 3)
    assert virtualize.check(files, scan_timeout=None).ok
    # one file of each: neither is the odd one; the stack is named as two groups
    r = virtualize.check([tmp_path / "d" / name, files[0]], scan_timeout=None)
    [p] = r.problems
    assert (p.kind, p.loc.file, r.plan) == ("odd-file-out", None, None)
    assert "2 groups that share no variable" in p.message and name in p.message


def test_files_holding_other_variables_on_one_grid_are_not_odd(tmp_path):
    """tas files and pr files with no coordinate variable share no variable but their
    dimensions: a merge for the planner, not an odd file."""
    d = tmp_path / "m"
    d.mkdir()
    for var, n in (("tas", 3), ("pr", 1)):
        for i in range(n):
            with netCDF4.Dataset(d / f"{var}_{i}.nc", "w") as nc:
                nc.createDimension("time", None)
                nc.createDimension("x", 3)
                nc.createVariable(var, "f4", ("time", "x"))[:] = np.ones((2, 3), "f4")
    report = virtualize.check(d, scan_timeout=None)
    assert "odd-file-out" not in {p.kind for p in report.problems}


def gap_pile(d, years):
    import make_models

    return make_models.models(d, names=["MODEL-A"], years=years)


def test_a_gap_is_in_the_summary_line_and_under_the_html_warnings(tmp_path, capsys):
    """A year missing from yearly files showed only as "2 note(s) (-v)": the one-line
    summary of create and append names it, the HTML page lists it as a warning."""
    files = gap_pile(tmp_path / "d", [1850, 1851, 1852, 1854, 1855])
    gap = ("1 gap: 12 step(s) of 30.5 days missing between 1852-12-16T12:00:00 and "
           "1854-01-16T12:00:00")
    code, out, err = cli(capsys, *files[:4], "-o", tmp_path / "c.zarr", "--html",
                         tmp_path / "r.html")
    assert code == 0 and out.count("\n") == 1 and f"; {gap}" in out, out
    page = (tmp_path / "r.html").read_text()
    warnings = page.split('id="warnings"')[1].split("</table>")[0]
    assert 'data-kind="coordinate-gap"' in warnings and 'id="problems"' not in page
    assert page.index("<h2>Warnings</h2>") > page.index("<h2>Problems</h2>")
    # an append that leaves a gap says it too
    virtualize.virtualize(files[:3], tmp_path / "a.zarr")
    code, out, err = cli(capsys, "append", tmp_path / "a.zarr", *files[3:])
    assert code == 0 and out.count("\n") == 1 and f"; {gap}" in out, out
    assert virtualize.open(tmp_path / "a.zarr")["ta"].shape[0] == 60


def test_the_readme_opens_a_cube_naming_the_engine():
    """kerchunk's xarray backend claims any .json (GroupNotFoundError on a cube's): the
    README's first example of opening a cube names the engine."""
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    first = re.search(r"xr\.open_dataset\(([^)]*)\)", readme)
    assert first and 'engine="virtualize"' in first.group(1), first


def _kinds():
    yield ".zarr"
    yield ".json"
    yield pytest.param(".parq", marks=pytest.mark.needs("pyarrow"))
    yield pytest.param(".icechunk", marks=pytest.mark.needs("icechunk"))
    yield ".vrt"


@pytest.mark.parametrize("suffix", list(_kinds()))
def test_engine_virtualize_opens_every_output_kind(suffix, tmp_path):
    """`xr.open_dataset(OUT, engine="virtualize")` for every kind virtualize writes, equal
    to the source library's read (netCDF4; tifffile for the VRT, a stack of TIFFs)."""
    import tifffile
    import xarray as xr

    out = tmp_path / f"cube{suffix}"
    if suffix == ".vrt":  # what a VRT holds: a 2-D TIFF stack
        tiles = []
        for i in range(3):
            tiles.append(tmp_path / f"t{i}.tif")
            tifffile.imwrite(tiles[-1], np.arange(12, dtype="u2").reshape(3, 4) + 100 * i)
        virtualize.virtualize(tiles, out, concat_dims=["time"])
        with xr.open_dataset(out, engine="virtualize") as ds:
            name = next(iter(ds.data_vars))
            want = np.stack([tifffile.imread(t) for t in tiles])
            assert np.array_equal(ds[name].values.reshape(want.shape), want)
        return
    files = nc_stack(tmp_path / "d", 3)
    virtualize.virtualize(files, out)
    with xr.open_dataset(out, engine="virtualize") as ds:
        want = []
        for f in files:
            with netCDF4.Dataset(f) as nc:
                want.append(nc["tas"][...].data)
        assert np.array_equal(ds["tas"].values, np.concatenate(want))
        assert ds["time"].size == 6


def test_create_help_lists_every_format_read(capsys):
    """`create --help` said netCDF-4 / HDF5 / netCDF classic / TIFF: the list comes from
    the formats' registry."""
    from virtualize.formats.registry import formats

    code, out, err = cli(capsys, "create", "--help")
    assert code == 0
    flat = " ".join(out.split())
    for fmt in formats():
        assert fmt.title and " ".join(fmt.title.split()) in flat, fmt
    for word in ("GRIB", "FITS", "HDF4", "Zarr v2"):
        assert word in flat


def test_an_append_of_nothing_new_says_so_in_the_api_too(tmp_path, capsys):
    """The API's append re-run returned a report saying "wrote cube" when nothing was
    added (its repr, -v's last line); the CLI's one line said "nothing to append"."""
    files = nc_stack(tmp_path / "d", 3)
    cube = tmp_path / "c.zarr"
    virtualize.virtualize(files, cube)
    r = virtualize.append(cube, files[1:])
    assert "wrote" not in repr(r) and f"nothing appended to cube {cube}" in repr(r)
    assert r.output == {"path": str(cube), "kind": "cube", "written": False}
    assert r.to_text().startswith(f"yes: nothing to append to cube {cube}: 0 new, 2 already")
    assert r.to_text(verbose=True).startswith(f"yes: nothing to append to cube {cube}")
    assert json.loads(r.to_json())["output"]["written"] is False
    code, out, err = cli(capsys, "append", "-v", cube, *files[1:])
    assert code == 0 and "nothing to append" in out and "wrote" not in out, out
    grown = virtualize.append(cube, nc_stack(tmp_path / "e", 1, start=3))
    assert f"wrote cube {cube}" in repr(grown) and grown.output.get("written", True)
