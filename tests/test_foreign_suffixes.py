"""An output named with the suffix of a format virtualize does not write (`-o x.nc`,
`x.tif`, `x.h5`, ...) is a usage error naming what it writes, in every command that
writes (create, mosaic, export, append to a path holding no cube) and in the API:
never a cube directory or JSON under that name."""

from __future__ import annotations

import subprocess

import pytest

import virtualize
from virtualize.formats.registry import formats
from virtualize.outputs import registry

from helpers import run_virtualize, scaled_month

# the names of issue 24 and its review: the formats virtualize reads, and others
NAMED = (".nc", ".nc3", ".nc4", ".h5", ".hdf5", ".he5", ".hdf", ".h4", ".he4", ".tif",
         ".tiff", ".gtiff", ".cog", ".grib", ".grib2", ".grb", ".grb2", ".fits", ".fit", ".cdf",
         ".netcdf", ".ncml", ".img", ".asc", ".gpkg", ".jp2", ".zip", ".gz", ".npy", ".csv",
         ".jsonl", ".ndjson", ".ovr", ".tfw")


def cli(capsys, *args):
    from virtualize.cli import main

    capsys.readouterr()
    try:
        code = main([str(a) for a in args])
    except SystemExit as e:  # a usage error: argparse exits
        code = e.code
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, out, err)


@pytest.fixture(scope="module")
def made(case, tmp_path_factory):
    """Two monthly files, four mosaic tiles and a cube of the files."""
    files = case("months2024")[:2]
    cube = tmp_path_factory.mktemp("made") / "c.zarr"
    virtualize.virtualize(files, cube)
    return files, case("mosaic_uneven_2x2"), cube


def _says_what_is_written(message: str, suffix: str) -> None:
    assert f"does not write {suffix} files" in message, message
    for k in registry.kinds():  # every kind, by its name and its suffixes
        assert k.title in message, (k.name, message)
        assert all(f"OUT{s}" in message for s in k.suffixes if s), (k.name, message)


def test_every_input_formats_suffix_is_foreign_and_no_kinds_is():
    foreign = registry.foreign_suffixes()
    written = {s.lower() for k in registry.kinds() for s in k.suffixes}
    read = {s.lower() for f in formats() for s in f.suffixes}
    assert read - written <= foreign  # a new format's suffixes without a change
    assert not foreign & written
    assert set(NAMED) <= foreign
    assert {".parq", ".parquet", ".vrt"} <= written


@pytest.mark.parametrize("suffix", NAMED)
def test_api_refuses_foreign_output_names(made, tmp_path, suffix):
    files, tiles, cube = made
    for name in (f"x{suffix}", f"x{suffix.upper()}", f"x{suffix}/"):
        out = tmp_path / name
        calls = [lambda: virtualize.virtualize(files, out),
                 lambda: virtualize.virtualize(files, out, format="kerchunk"),
                 lambda: virtualize.mosaic(tiles, out),
                 lambda: virtualize.export(cube, out),
                 lambda: virtualize.export(cube, out, format="cube"),
                 lambda: virtualize.append(out, files)]
        for call in calls:
            with pytest.raises(virtualize.UsageError) as e:
                call()
            _says_what_is_written(str(e.value), suffix if name.islower() or name.endswith("/")
                                  else suffix.upper())
        assert not list(tmp_path.iterdir()), name  # nothing written, nothing staged


@pytest.mark.parametrize("suffix", [".nc", ".tif", ".h5", ".grib", ".fits", ".hdf", ".cdf",
                                    ".nc4", ".tiff", ".he5", ".grb2"])
def test_cli_refuses_foreign_output_names_in_every_command(made, tmp_path, capsys, suffix):
    files, tiles, cube = made
    out = tmp_path / f"x{suffix}"
    for args in ((*files, "-o", out),
                 ("create", *files, "-o", out, "--format", "icechunk"),
                 ("mosaic", *tiles, "-o", out),
                 ("export", cube, "-o", out),
                 ("export", cube, "-o", out, "--format", "kerchunk"),
                 ("append", out, *files)):
        r = cli(capsys, *args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        _says_what_is_written(r.stderr, suffix)
        assert r.stdout == "" and not out.exists(), args
    assert not list(tmp_path.iterdir())


def test_the_kinds_names_and_others_are_written(made, tmp_path, capsys):
    files, _, cube = made
    for name, kind in (("a.zarr", "cube"), ("a.json", "kerchunk"), ("plain", "cube"),
                       ("run.v2", "cube"), ("x.nc.zarr", "cube"), ("x.tif.json", "kerchunk")):
        assert cli(capsys, *files, "-o", tmp_path / name).returncode == 0, name
        assert registry.written_kind(tmp_path / name) == kind, name


def test_append_to_a_missing_cube_is_refused_and_creates_nothing(made, tmp_path, capsys):
    files, _, _ = made
    r = cli(capsys, "append", tmp_path / "new.zarr", *files)
    assert r.returncode == 3 and "not-a-cube" in r.stderr and "no such cube" in r.stderr, r.stderr
    assert not list(tmp_path.iterdir())
    with pytest.raises(virtualize.VirtualizeError, match="no such cube") as e:
        virtualize.append(tmp_path / "new.json", files)
    assert not isinstance(e.value, virtualize.UsageError) and e.value.problems[0].kind == "not-a-cube"


def test_an_existing_cube_under_such_a_name_still_grows(case, tmp_path):
    """A cube directory an older virtualize wrote under a foreign name is appended to (it
    exists and is a cube): only new names are refused."""
    files = case("months2024")[:3]
    virtualize.virtualize(files[:2], tmp_path / "old.zarr")
    legacy = tmp_path / "old.nc"
    (tmp_path / "old.zarr").rename(legacy)
    report = virtualize.append(legacy, files[2:])
    assert report.ok and legacy.is_dir()
    assert virtualize.open(legacy)["tas"].shape[0] == 31 + 29 + 31


@pytest.mark.parametrize("name, kind", [("x.json", "parquet"), ("x.json", "cube"),
                                        ("x.zarr", "kerchunk"), ("x.icechunk", "cube"),
                                        ("x.parq", "icechunk"), ("x.zarr", "vrt")])
def test_a_kind_under_another_kinds_name_is_a_usage_error(name, kind):
    """-o x.json --format parquet would be a parquet directory that every reader takes for
    a reference JSON: refused, naming whose name it is; no suffix takes any kind."""
    with pytest.raises(virtualize.UsageError,
                       match=r"name is .*'s; the .* output is not one|promises kerchunk's parquet"):
        registry.kind_of(name, kind)
    assert registry.kind_of("out", kind) == kind


# Found by #20's review (smaller): the output suffix is matched case-sensitively: `-o cube.JSON` writes
# a cube *directory* named cube.JSON (exit 0), where `.json` writes a kerchunk file and
# README says an unknown suffix is a usage error.
@pytest.mark.parametrize("name", ["cube.JSON", "cube.Json"])
def test_output_suffix_case(tmp_path, name):
    f = scaled_month(tmp_path / "m0.nc", 0)
    out = tmp_path / name
    r = run_virtualize(f, "-o", out)
    assert r.returncode == 2 or (r.returncode == 0 and out.is_file()), (r.returncode, out.is_dir())
