"""Plug-ins of other packages (issue 29, src/virtualize/plugins.py): an input format and an
output kind registered by entry points (`virtualize.formats`, `virtualize.outputs`) of a
distribution found on the path, as xarray finds its backends. The distribution here is
made in the test (a `.dist-info` with its `entry_points.txt`, found by
importlib.metadata as an installed one is); its plug-ins are tests/plugins/. They are
used by the whole job (scan in the workers, plan, write, open, the command line), and
read back equal to numpy's and netCDF4's own reads; a broken plug-in is reported, not
fatal."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import virtualize
from virtualize.cli import main
from virtualize.formats import registry as formats
from virtualize.outputs import registry as outputs
from virtualize.run import workers

from helpers import assert_same, source_values

PLUGINS = Path(__file__).resolve().parent / "plugins"
# (the broken entry points beside the examples are reported in every test: checked in one)
pytestmark = pytest.mark.filterwarnings("ignore:virtualize. the virtualize:RuntimeWarning")


def distribution(where: Path, entry_points: str) -> None:
    """A distribution `where` holds, as pip would install it: its metadata and entry points."""
    info = where / "virtualize_examples-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: virtualize-examples\n"
                                   "Version: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)


def fresh() -> None:
    """The registries and the scan workers start again (they keep what they loaded)."""
    formats.formats.cache_clear()
    outputs.kinds.cache_clear()
    workers._shutdown()


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """The example plug-ins installed (their modules and a distribution naming them), and
    a broken entry point of each group beside them."""
    site = tmp_path / "site"
    site.mkdir()
    distribution(site, "[virtualize.formats]\n"
                       "npy = virtualize_npy:FORMAT\n"
                       "gone = virtualize_no_such_module:FORMAT\n"
                       "[virtualize.outputs]\n"
                       "refs = virtualize_refs:KIND\n"
                       "twice = virtualize_npy:FORMAT\n")
    monkeypatch.syspath_prepend(str(PLUGINS))
    monkeypatch.syspath_prepend(str(site))
    fresh()
    yield tmp_path
    monkeypatch.undo()
    fresh()


def loaded() -> tuple[list[str], list[str]]:
    """The plug-ins loaded now, and what was reported of the broken ones."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        names = [f.name for f in formats.formats()] + [k.name for k in outputs.kinds()]
    return names, [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]


def test_plug_ins_come_after_the_built_ins_and_a_broken_one_is_reported(installed):
    names, reported = loaded()
    assert names[-1] == "refs" and names[names.index("icechunk") + 1] == "refs"
    assert names[names.index("hdf4") + 1] == "npy"
    assert "gone" not in names and "twice" not in names
    assert len(reported) == 2, reported
    assert any("'gone'" in r and "cannot be loaded" in r and "ModuleNotFoundError" in r
               for r in reported), reported
    assert any("'twice'" in r and "is not a virtualize.outputs.base.OutputKind" in r
               for r in reported), reported
    assert outputs.by_name("refs").title in outputs.written_names()


def test_without_them_only_the_built_ins():
    fresh()
    names, reported = loaded()
    assert "npy" not in names and "refs" not in names and reported == []


def arrays(where: Path, lengths=(3, 5, 2)) -> tuple[list[Path], np.ndarray]:
    """.npy files of (n, 4, 6) float32 values, and all of them stacked as numpy reads
    them."""
    files, parts = [], []
    rng = np.random.default_rng(29)
    for i, n in enumerate(lengths):
        values = rng.standard_normal((n, 4, 6)).astype("<f4")
        files.append(where / f"part{i}.npy")
        np.save(files[-1], values)
        parts.append(np.load(files[-1]))
    return files, np.concatenate(parts)


def test_a_format_plug_in_is_scanned_planned_and_read_back(installed):
    """Files of the plug-in's format, of uneven lengths along their first axis: detected,
    scanned in the scan workers, stacked on a rectilinear grid, read back through the cube
    equal to numpy's reads."""
    files, want = arrays(installed)
    assert virtualize.formats.detect_format(str(files[0])) == "npy"
    report = virtualize.virtualize(files, installed / "c.zarr")
    assert report.ok, report.problems
    got = virtualize.open(installed / "c.zarr")["array"]
    assert got.shape == want.shape
    assert_same(got[...], want, "the npy stack")


def test_an_output_kind_plug_in_is_written_found_replaced_and_read(installed, case):
    """A kind of another package: chosen by its suffix, written (staged), told apart by
    the registry (its `detect` asked before kerchunk's, which takes any file; its
    `is_ours`), replaced with --overwrite, read back equal to netCDF4's reads."""
    files = case("months2024")[:2]
    out = installed / "c.refs"
    virtualize.virtualize(files, out)
    assert out.read_bytes().startswith(b'{"version": 1, "virtualize": {"format": "example-refs"')
    assert outputs.kind_of(out) == "refs"
    assert outputs.kind_at(out) == "refs" and outputs.written_kind(out) == "refs"
    want = source_values(files, "tas", "time", ("time", "lat", "lon"))
    assert_same(virtualize.open(out)["tas"][...], want, "two months via the plug-in kind")
    virtualize.virtualize(case("months2024")[:3], out, overwrite=True)  # ours: replaced
    assert virtualize.open(out)["tas"].shape[0] == 31 + 29 + 31
    theirs = installed / "theirs.refs"
    theirs.write_text("years of work")
    with pytest.raises(virtualize.VirtualizeError) as e:
        virtualize.virtualize(files, theirs, overwrite=True)
    assert e.value.problems[0].kind == "output-not-ours"
    assert theirs.read_text() == "years of work"


def test_the_command_line_takes_a_plug_in_kind(installed, case, capsys):
    files = case("months2024")[:2]
    out = installed / "plain"
    assert main([*map(str, files), "-o", str(out), "--format", "refs"]) == 0
    assert outputs.written_kind(out) == "refs"
    assert_same(virtualize.open(out)["tas"][...],
                source_values(files, "tas", "time", ("time", "lat", "lon")), "--format refs")
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["create", "--help"])
    assert "refs" in capsys.readouterr().out
