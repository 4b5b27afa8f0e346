"""The command line and API people expect (issue 14): subcommands, exit codes, quiet
success, inputs, inspect / verify / export, the in-memory plan, the report's surface."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import virtualize

from helpers import read_pty


def run(*args, cwd=None, stdin=None, env=None):
    exe = os.path.join(os.path.dirname(sys.executable), "virtualize")
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          input=stdin, env=env)


@pytest.fixture(scope="module")
def months(case, tmp_path_factory):
    """The 2024 months in their own directory, with side-cars that are not data."""
    d = tmp_path_factory.mktemp("months")
    for f in case("months2024"):
        shutil.copy(f, d / f.name)
    (d / "tas_day_202401.nc.aux.xml").write_text("<PAMDataset></PAMDataset>\n")
    (d / "SHA256SUMS.md5").write_text("0123 tas_day_202401.nc\n")
    return d


def data_files(d):
    return sorted(p for p in d.iterdir() if p.suffix == ".nc")


# -- commands and usage -----------------------------------------------------------------

def test_help_lists_every_command():
    r = run("--help")
    assert r.returncode == 0
    for name in ("create", "check", "mosaic", "append", "inspect", "verify", "export", "help"):
        assert f"    {name} " in r.stdout, name
    assert "exit codes" in r.stdout
    h = run("help", "verify")
    assert h.returncode == 0 and "--decode" in h.stdout


def test_help_points_to_guides_an_installed_virtualize_prints(tmp_path):
    """docs/*.md are shipped in the package (virtualize/docs): `virtualize docs` lists and
    prints them, and every guide the help texts name is one it prints (no docs/ path a
    pip install has not got)."""
    import re
    from importlib import resources
    from pathlib import Path

    repo_docs = Path(__file__).resolve().parents[1] / "docs"
    shipped = resources.files("virtualize") / "docs"
    assert sorted(f.name for f in shipped.iterdir() if f.name.endswith(".md")) == \
        sorted(f.name for f in repo_docs.glob("*.md"))
    r = run("docs", cwd=tmp_path)  # not next to the repository's docs/
    assert r.returncode == 0
    listed = dict(line.split(None, 1) for line in r.stdout.splitlines()[1:])
    assert set(listed) == {f.stem for f in repo_docs.glob("*.md")}
    assert listed["report"] == "The preflight report"
    r = run("docs", "report", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == (repo_docs / "report.md").read_text()
    assert run("docs", "reading.md", cwd=tmp_path).stdout == (repo_docs / "reading.md").read_text()
    r = run("docs", "reprot")
    assert r.returncode == 2 and "did you mean 'report'" in r.stderr
    texts = [run("--help").stdout] + [run("help", c).stdout for c in
                                      ("create", "check", "mosaic", "append", "inspect",
                                       "verify", "export", "docs")]
    named = set()
    for text in texts:
        assert "docs/" not in text and ".md" not in text
        named |= set(re.findall(r"virtualize\s+docs\s+([a-z][\w-]+)", text))
    assert {"report", "references"} <= named <= set(listed), named
    from virtualize.outputs.access import not_allowed
    assert "virtualize docs reading" in str(not_allowed("x", "why"))


def test_usage_errors_give_usage_not_a_scan(months, tmp_path):
    for args in (["chek", *data_files(months)], ["help", "nope"], [*data_files(months)],
                 ["check", "-j", "-1", months], ["check", "-j", "x", months], []):
        r = run(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert "usage:" in r.stderr and "Traceback" not in r.stderr
    assert "did you mean 'check'" in run("chek", months).stderr
    # an unwritable --html is refused before anything is scanned
    r = run("check", "--html", tmp_path / "no" / "such" / "dir.html", tmp_path / "missing.nc")
    assert r.returncode == 2 and "--html" in r.stderr and "missing.nc" not in r.stdout


def test_exit_codes_are_distinct(months, tmp_path):
    files = data_files(months)
    out = tmp_path / "c.zarr"
    assert run(*files, "-o", out).returncode == 0
    assert run(*files, "-o", out).returncode == 3  # exists
    assert run("check", *files, tmp_path / "missing.nc").returncode == 1
    assert run("verify", tmp_path).returncode == 3  # not a cube


# -- quiet success ------------------------------------------------------------------------

def test_accepted_stack_prints_one_line_and_groups_skipped_variables(case, tmp_path):
    import h5py

    files = []
    for f in case("months2024"):
        dst = tmp_path / f.name
        shutil.copy(f, dst)
        with h5py.File(dst, "a") as h:
            # a compound with a string member: skipped (unsupported-type) in every file
            h["station_name"] = np.zeros(2, dtype=[("id", "i4"), ("name", "S8")])
        files.append(dst)
    r = run("check", *files)
    assert r.returncode == 0
    assert r.stdout.count("\n") == 1
    assert "station_name (unsupported-type, in 12 files)" in r.stdout
    v = run("check", "-v", *files)
    assert v.stdout.count("unsupported-type") == 1 and "(in 12 files: " in v.stdout
    q = run("check", "-q", *files)
    assert q.returncode == 0 and q.stdout == ""
    # colour only on a terminal, never with NO_COLOR (a pipe here: never)
    env = dict(os.environ, NO_COLOR="1")
    assert "\033[" not in run("check", *files, env=env).stdout + r.stdout


# -- inputs ---------------------------------------------------------------------------

def test_lists_stdin_globs_and_directories(months, tmp_path):
    files = data_files(months)
    listing = tmp_path / "list.txt"
    listing.write_text("# the 2024 months\n\n" + "\n".join(map(str, files[:6])) + "\n\n")
    r = run("check", "--json", f"@{listing}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(json.loads(r.stdout)["files"]) == 6
    r = run("check", "--json", "-", stdin="\n".join(map(str, files[6:])) + "\n# done\n")
    assert r.returncode == 0 and len(json.loads(r.stdout)["files"]) == 6
    r = run("check", "--json", str(months / "tas_day_2024*.nc"))  # quoted: expanded by virtualize
    assert r.returncode == 0 and len(json.loads(r.stdout)["files"]) == 12
    assert len(virtualize.check(str(months / "*.nc")).files) == 12
    # a directory: its data files, the side-cars skipped with one note
    doc = json.loads(run("check", "--json", months).stdout)
    assert doc["ok"] and len(doc["files"]) == 12
    notes = [n for n in doc["notes"] if n.startswith("skipped 2 entries")]
    assert len(notes) == 1 and "SHA256SUMS.md5" in notes[0] and ".aux.xml" in notes[0]


def test_names_no_file_has_are_usage_errors_listing_the_names(months, tmp_path):
    """A name no file has is a usage error (exit 2), with the located message listing the
    names that exist; the API still reports (check) or raises (virtualize) the problem."""
    files = data_files(months)
    for option, name in (("--drop", "orgo"), ("--inline", "orgo"), ("--concat-dim", "tme")):
        r = run("check", "--json", *files, option, name)
        assert r.returncode == 2
        doc = json.loads(r.stdout)
        assert [p["kind"] for p in doc["problems"]] == ["unknown-name"]
        msg = doc["problems"][0]["message"]
        assert name in msg and ("tas" in msg if option != "--concat-dim" else "time" in msg)
        out = tmp_path / f"c{option}.zarr"
        r = run(*files, "-o", out, option, name)
        assert r.returncode == 2 and not out.exists()
        assert name in r.stdout and f"nothing was written to {out}" in r.stderr
    r = run("mosaic", "--check", *files[:1], "--drop", "orgo")
    assert r.returncode == 2 and "'orgo'" in r.stdout
    # a real refusal stays exit 1
    assert run("check", *files, "--concat-dim", "lat").returncode == 1
    report = virtualize.check(files, drop=["orgo"])
    assert not report.ok and [p.kind for p in report.problems] == ["unknown-name"]
    with pytest.raises(virtualize.VirtualizeError) as e:
        virtualize.virtualize(files, tmp_path / "api.zarr", drop=["orgo"])
    assert [p.kind for p in e.value.problems] == ["unknown-name"]


# -- inspect, verify, export --------------------------------------------------------------

def test_inspect_shows_a_files_block_tables(months):
    f = data_files(months)[0]
    r = run("inspect", f)
    assert r.returncode == 0 and "tas" in r.stdout and "padded" in r.stdout
    doc = json.loads(run("inspect", "--json", f).stdout)
    tas = next(v for v in doc["variables"] if v["name"] == "tas")
    assert tas["shape"] == [31, 3, 4] and tas["blocks"]["count"] >= 1
    assert tas["blocks"]["end_offset"] <= doc["size"]
    assert run("inspect", months / "SHA256SUMS.md5").returncode == 1


def test_inspect_shows_padded_only_where_a_last_block_holds_padding(tmp_path):
    """HDF5 stores every chunk at full size, but a block that fits its axis exactly (90 in
    blocks of 90) holds no padding: padded only when the length is no multiple."""
    import h5py

    path = tmp_path / "p.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("lat", data=np.arange(90, dtype="f4"), chunks=(90,))
        f.create_dataset("grid", data=np.zeros((90, 40), "f4"), chunks=(30, 20))
        f.create_dataset("tas", data=np.zeros((31, 90), "f4"), chunks=(10, 90))
    r = run("inspect", path)
    assert r.returncode == 0, r.stderr
    padded = {line.split()[0]: line.split()[6] for line in r.stdout.splitlines()[1:]
              if line.startswith("  ") and not line.split()[0] == "variable"}
    assert padded == {"lat": "no", "grid": "no", "tas": "yes"}, r.stdout
    doc = json.loads(run("inspect", "--json", path).stdout)
    assert {v["name"]: v["blocks"]["padded"] for v in doc["variables"]} == \
        {"lat": False, "grid": False, "tas": True}


def test_verify_names_changed_and_missing_sources(months, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    files = []
    for f in data_files(months)[:3]:
        files.append(shutil.copy(f, src / f.name))
    out = tmp_path / "c.zarr"
    assert run(*files, "-o", out).returncode == 0
    ok = run("verify", out)
    assert ok.returncode == 0 and ok.stdout.startswith("ok")
    d = run("verify", "--decode", out)
    assert d.returncode == 0, d.stdout + d.stderr
    with open(files[1], "ab") as f:  # other content (a touch alone: test_staleness.py)
        f.write(b"\0")
    os.remove(files[2])
    r = run("verify", out)
    assert r.returncode == 1
    assert "source-changed" in r.stdout and os.path.basename(files[1]) in r.stdout
    assert "source-missing" in r.stdout and os.path.basename(files[2]) in r.stdout


def test_export_between_kinds_and_kerchunk_is_a_cube(months, tmp_path):
    files = data_files(months)
    refs = tmp_path / "refs"  # no .json suffix: recognised by its content
    r = run(*files[:6], "-o", refs, "--format", "kerchunk")
    assert r.returncode == 0, r.stderr
    want = virtualize.check(files[:6]).to_zarr()["tas"][...]
    assert np.array_equal(virtualize.open(refs)["tas"][...], want)
    r = run("export", refs, "-o", tmp_path / "c.zarr")
    assert r.returncode == 0, r.stderr
    assert np.array_equal(virtualize.open(tmp_path / "c.zarr")["tas"][...], want)
    r = run("export", tmp_path / "c.zarr", "-o", tmp_path / "back.json")
    assert r.returncode == 0, r.stderr
    assert np.array_equal(virtualize.open(tmp_path / "back.json")["tas"][...], want)
    # a kerchunk JSON virtualize wrote records its recipe: append works on it
    r = run("append", refs, *files[6:])
    assert r.returncode == 0, r.stdout + r.stderr
    assert virtualize.open(refs)["tas"].shape == (366, 3, 4)
    assert run("export", tmp_path / "c.zarr", "-o", tmp_path / "back.json").returncode == 3


def test_output_names_of_formats_not_written_are_usage_errors(months, case, tmp_path):
    """-o x.nc / x.tif ... would be a cube directory (or JSON) under a name promising
    another format, as x.parquet / x.vrt with another --format than theirs: a usage error
    naming the kinds written, before any scan, in create, mosaic, export and the API."""
    files = data_files(months)[:2]
    cube = tmp_path / "c.zarr"
    virtualize.virtualize(files, cube)
    tiles = case("mosaic_uneven_2x2")
    for name, extra in (("x.nc", ()), ("x.TIF", ()), ("x.parquet", ("--format", "kerchunk")),
                        ("x.parq", ("--format", "cube")), ("x.vrt", ("--format", "cube")),
                        ("x.h5", ("--format", "icechunk"))):
        out = tmp_path / name
        for args in ((*files, "-o", out), ("mosaic", *tiles, "-o", out), ("export", cube, "-o", out)):
            r = run(*args, *extra)
            assert r.returncode == 2, (args, r.stdout, r.stderr)
            if out.suffix == ".vrt":
                assert "is a GDAL VRT's" in r.stderr, r.stderr
            else:
                assert f"does not write {out.suffix} files" in r.stderr
            if out.suffix not in (".parq", ".parquet", ".vrt"):
                assert ".zarr" in r.stderr and ".json" in r.stderr and ".icechunk" in r.stderr
            assert r.stdout == "" and not out.exists()
    with pytest.raises(ValueError, match="does not write .nc"):
        virtualize.virtualize(files, tmp_path / "x.nc")
    with pytest.raises(ValueError, match="does not write .parquet"):
        virtualize.virtualize(files, tmp_path / "x.parquet", format="kerchunk")
    with pytest.raises(virtualize.UsageError):
        virtualize.mosaic(tiles, tmp_path / "x.nc")
    with pytest.raises(virtualize.UsageError):
        virtualize.export(cube, tmp_path / "x.parq", format="cube")
    assert not any(tmp_path.glob("x.*"))
    assert run(*files, "-o", tmp_path / "fine.v2").returncode == 0  # any other suffix: a cube


# -- the Python API ---------------------------------------------------------------------

def test_report_surface_and_in_memory_plan(months, tmp_path):
    files = data_files(months)
    report = virtualize.check(files)
    assert report.verdict == "yes"
    assert repr(report).startswith("<virtualize.Report yes: 12 file(s)")
    import html as _html

    shown = report._repr_html_()
    assert shown.startswith("<iframe") and _html.unescape(shown).count("<!DOCTYPE html>") == 1
    assert 'id="verdict">yes</div>' in _html.unescape(shown)
    g = report.to_zarr()
    ds = report.to_xarray()
    virtualize.virtualize(files, tmp_path / "c.zarr")
    on_disk = virtualize.open(tmp_path / "c.zarr")
    assert np.array_equal(g["tas"][...], on_disk["tas"][...])
    assert np.array_equal(ds["tas"].values, on_disk["tas"][...])
    assert not (tmp_path / "c2.zarr").exists()
    store = report.to_store()
    assert store.read_only
    refused = virtualize.check(files + [tmp_path / "missing.nc"])
    with pytest.raises(virtualize.VirtualizeError):
        refused.to_store()


def test_json_states_the_output_after_a_write(months, tmp_path):
    out = tmp_path / "c.json"
    r = run(*data_files(months), "-o", out, "--json")
    doc = json.loads(r.stdout)
    assert doc["output"] == {"path": str(out), "kind": "kerchunk"}
    assert doc["arrays"]["tas"]["status"] == "virtual"


def test_inventory_and_errors_are_virtualize_errors(months, tmp_path):
    f = data_files(months)[0]
    assert virtualize.inventory(f).variables["tas"].shape == (31, 3, 4)
    with pytest.raises(virtualize.UsageError) as e:
        virtualize.virtualize(data_files(months), tmp_path / "x", format="nope")
    assert isinstance(e.value, virtualize.VirtualizeError) and isinstance(e.value, ValueError)
    assert issubclass(virtualize.OutputExistsError, virtualize.VirtualizeError)


def test_xarray_backend_recognises_cubes_without_engine(months, tmp_path):
    xr = pytest.importorskip("xarray")
    from virtualize.xarray_backend import VirtualizeBackendEntrypoint

    out = tmp_path / "c.zarr"
    virtualize.virtualize(data_files(months), out)
    backend = VirtualizeBackendEntrypoint()
    assert backend.guess_can_open(out) and backend.guess_can_open(str(out))
    assert backend.guess_can_open(tmp_path / "x.icechunk")
    assert not backend.guess_can_open(months)
    assert "virtualize docs reading" in backend.url
    ds = xr.open_dataset(out)
    assert ds["tas"].shape == (366, 3, 4)
    virtualize.virtualize(data_files(months), tmp_path / "refs.json")
    assert backend.guess_can_open(tmp_path / "refs.json")
    # (kerchunk's own backend, when installed, claims .json files first)
    assert xr.open_dataset(tmp_path / "refs.json", engine="virtualize")["tas"].shape == (366, 3, 4)


# -- mosaic ------------------------------------------------------------------------------

def test_mosaic_offsets_on_the_command_line_and_remedies_in_json(case, tmp_path):
    import make_mosaic as mm

    files = case("mosaic_offsets_plain")
    offsets = [f"{r},{c}" for r, c, _, _ in mm.LAYOUT["mosaic_offsets_plain"]]
    assert run("mosaic", "--check", *files).returncode == 1
    r = run("mosaic", "--check", *files, "--offsets", *offsets)
    assert r.returncode == 0, r.stdout + r.stderr
    assert run("mosaic", "--check", *files, "--offsets", offsets[0]).returncode == 2
    doc = json.loads(run("mosaic", "--check", "--json", *case("mosaic_staggered_misaligned")).stdout)
    assert doc["remedies"], doc["problems"][:2]
    for rem in doc["remedies"]:
        assert {"kind", "blocks", "bytes", "enabled", "option", "words"} <= set(rem)
        assert rem["kind"] != "materialize" or rem["option"] == "--materialize"


def test_crs_mismatch_is_named_by_epsg_code(case, tmp_path):
    import h5py

    pyproj = pytest.importorskip("pyproj")
    tiles = [shutil.copy(f, tmp_path / f.name) for f in case("mosaic_netcdf")]
    with h5py.File(tiles[1], "a") as h:
        for name, obj in h.items():
            if "crs_wkt" in obj.attrs:
                wkt = pyproj.CRS.from_epsg(32634).to_wkt()
                obj.attrs["crs_wkt"] = wkt
                if "spatial_ref" in obj.attrs:
                    obj.attrs["spatial_ref"] = wkt
                if "epsg_code" in obj.attrs:
                    obj.attrs["epsg_code"] = "EPSG:32634"
    report = virtualize.check_mosaic(tiles)
    (p,) = [p for p in report.problems if p.kind == "needs-warping"]
    assert "EPSG:32634 vs EPSG:32633" in p.message and len(p.message) < 400


# -- the HTML report -------------------------------------------------------------------

def test_html_problems_first_title_and_legend(case, months):
    refused = virtualize.check(case("tenday_padded")).to_html()
    assert refused.index('id="problems"') < refused.index("Chunk grids")
    assert "<title>virtualize: yes with remedies -- 12 file(s) in " in refused
    assert "tas_day_202401.nc ... tas_day_202412.nc" in refused
    ok = virtualize.check(data_files(months)).to_html()
    assert "<title>virtualize: yes -- 12 file(s)" in ok
    legend = ok[ok.index('<div class="legend">'):]
    legend = legend[: legend.index("</div>")]
    assert "refused block" not in legend and "gap (no tile)" not in legend
    # the dashed end line is drawn (and explained) only where a padded block overhangs
    assert ("stroke-dasharray=\"3,2\"" in ok) == ("end of the array" in legend)
    # a short final chunk (December's 31 after 30s and 29) is not drawn as a warning
    assert "#f2a541" not in ok


def test_colour_on_a_terminal_unless_no_color(months):
    import pty

    exe = os.path.join(os.path.dirname(sys.executable), "virtualize")

    def on_tty(env):
        master, slave = pty.openpty()
        p = subprocess.run([exe, "check", str(months)], stdout=slave, stderr=subprocess.DEVNULL,
                           env=env)
        os.close(slave)
        out = read_pty(master)
        os.close(master)
        assert p.returncode == 0
        return out.decode()

    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    assert "\033[32m" in on_tty(env)
    assert "\033[" not in on_tty(dict(env, NO_COLOR="1"))


def test_verify_decode_finds_bytes_changed_behind_the_same_size_and_mtime(months, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    files = [shutil.copy(f, src / f.name) for f in data_files(months)[:3]]
    out = tmp_path / "c.zarr"
    virtualize.virtualize(files, out)
    inv = virtualize.inventory(files[1])
    ref = inv.variables["tas"].blocks.refs.reshape(-1)[0]
    st = os.stat(files[1])
    with open(files[1], "r+b") as f:  # flip the stored bytes of tas's first block
        f.seek(int(ref["offset"]))
        data = bytearray(f.read(int(ref["length"])))
        f.seek(int(ref["offset"]))
        f.write(bytes(b ^ 0x5A for b in data))
    os.utime(files[1], ns=(st.st_atime_ns, st.st_mtime_ns))
    assert run("verify", out).returncode == 0  # size and mtime as recorded
    r = run("verify", "--decode", out)
    assert r.returncode == 1, r.stdout + r.stderr
    assert os.path.basename(files[1]) in r.stdout


def test_export_to_and_from_icechunk(months, tmp_path):
    pytest.importorskip("icechunk")
    files = data_files(months)[:3]
    virtualize.virtualize(files, tmp_path / "c.zarr")
    want = virtualize.open(tmp_path / "c.zarr")["tas"][...]
    r = run("export", tmp_path / "c.zarr", "-o", tmp_path / "c.icechunk")
    assert r.returncode == 0, r.stdout + r.stderr
    assert np.array_equal(virtualize.open(tmp_path / "c.icechunk")["tas"][...], want)
    r = run("export", tmp_path / "c.icechunk", "-o", tmp_path / "c.json", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["output"]["kind"] == "kerchunk"
    assert np.array_equal(virtualize.open(tmp_path / "c.json")["tas"][...], want)
