"""Stacks that cannot be referenced exactly are refused, naming where and why; nothing
is written."""

from __future__ import annotations

import pytest

import virtualize
from virtualize.model import VirtualizeError

from conftest import needs

MONTHS_2024 = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


def kinds(report):
    return sorted({p.kind for p in report.problems if p.fatal})


def assert_refused(files, tmp_path, **kw):
    out = tmp_path / "cube.zarr"
    with pytest.raises(VirtualizeError) as e:
        virtualize.virtualize(files, out, **kw)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []  # no staging left behind
    return e.value


def test_ten_day_chunks_name_every_padded_block(case, tmp_path):
    files = case("tenday_padded")
    report = virtualize.check(files)
    assert not report.ok
    padded = [p for p in report.problems if p.kind == "padded-block"]
    # every file but the last whose length is not a multiple of 10 (April, June, September
    # and November are) ends in a padded block of `days % 10` valid steps
    expected = [(f, n) for f, n in zip(files[:-1], MONTHS_2024[:-1]) if n % 10]
    assert len(expected) == 7
    assert [(p.loc.file, p.loc.variable, p.loc.axis, p.loc.block) for p in padded] == [
        (str(f), "tas", "time", (n // 10,)) for f, n in expected]
    for p, (_, n) in zip(padded, expected):
        assert f"padded to 10 steps but holds {n % 10}" in p.message
    err = assert_refused(files, tmp_path)
    assert {p.kind for p in err.problems} == {"padded-block"}


def test_last_file_may_end_in_a_padded_block(case, tmp_path):
    """Only the last chunk of the cube may overhang: December alone virtualizes."""
    files = case("tenday_padded")
    report = virtualize.virtualize(files[-1:], tmp_path / "dec.zarr")
    assert report.ok
    g = virtualize.open(tmp_path / "dec.zarr")
    assert g["tas"].shape[0] == 31


@needs("nccopy")
def test_nccopy_rechunked_stack_is_refused(case):
    report = virtualize.check(case("nccopy_chunked"))
    assert "padded-block" in kinds(report)


def test_duplicate_file_is_refused(case, tmp_path):
    files = case("duplicate")
    report = virtualize.check(files)
    assert kinds(report) == ["duplicate-coordinate"]
    (p,) = [p for p in report.problems if p.kind == "duplicate-coordinate"]
    assert p.loc.variable == "time" and str(files[0]) in p.message
    assert_refused(files, tmp_path)


def test_scale_factor_drift_is_refused(case):
    files = case("attr_drift")
    report = virtualize.check(files)
    drift = [p for p in report.problems if p.kind == "attribute-drift"]
    assert [(p.loc.file, p.loc.variable) for p in drift] == [(str(files[1]), "tas")]
    assert "scale_factor" in drift[0].message


def test_compact_dataset_is_refused_unless_dropped_or_inlined(case, tmp_path):
    files = case("h5py_plain")
    report = virtualize.check(files, concat_dim="data_dim0", inline_threshold=0)
    compact = [p for p in report.problems if p.kind == "compact-layout"]
    assert [(p.loc.file, p.loc.variable) for p in compact] == [(str(f), "small") for f in files]
    assert all("--inline small" in p.remedy and "--drop small" in p.remedy for p in compact)
    assert_refused(files, tmp_path, concat_dim="data_dim0", inline_threshold=0)
    assert virtualize.check(files, concat_dim="data_dim0", drop=["small"],
                            inline_threshold=0).ok
    # small (a compact dataset is at most 64 KiB): inlined by default, with a note
    report = virtualize.check(files, concat_dim="data_dim0")
    assert report.ok and report.plan.arrays["small"].inline is not None
    assert any(n.startswith("small: ") and "compact-layout" in n for n in report.notes)
    # a threshold below its size keeps the refusal
    assert not virtualize.check(files, concat_dim="data_dim0", inline_threshold=1).ok


def test_missing_concat_dim_is_a_problem(case):
    report = virtualize.check(case("h5py_plain"), drop=["small"])
    assert kinds(report) == ["no-concat-dim"]


def test_a_variable_missing_from_one_file(case, tmp_path):
    files = case("months2024")[:2] + case("dtypes")[:1]
    report = virtualize.check(files)
    # (files holding different variables are merged: the dtypes file then lacks tas's
    # steps, located at it)
    missing = [p for p in report.problems if p.kind in ("missing-variable", "span-differs")]
    assert not report.ok and missing and all(p.loc.file for p in missing)


def test_all_problems_of_all_files_are_collected(case, tmp_path):
    files = case("tenday_padded") + case("attr_drift")
    report = virtualize.check(files)
    assert {"padded-block", "attribute-drift"} <= set(kinds(report))


def test_unreadable_files_are_named(tmp_path):
    bad = tmp_path / "bad.nc"
    bad.write_bytes(b"not a netcdf file at all")
    trunc = tmp_path / "trunc.nc"
    trunc.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 20)
    report = virtualize.check([bad, trunc, tmp_path / "missing.nc"])
    assert not report.ok
    by_file = {p.loc.file: p.kind for p in report.problems}
    assert by_file == {str(bad): "unknown-format", str(trunc): "corrupt",
                       str(tmp_path / "missing.nc"): "unreadable"}
