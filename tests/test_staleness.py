"""A source is stale when its blocks are: a touched file (modification time only) is
re-scanned and, its block tables as recorded, read with a note (refused when strict);
`verify --refresh` records the new time, for every output kind (docs/reading.md)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import warnings

import netCDF4
import numpy as np
import pytest

import virtualize
from virtualize import SourceTouchedWarning, VirtualizeError

from helpers import assert_same, scaled_month, source_values

KINDS = {"cube": "c.zarr", "kerchunk": "c.json", "parquet": "c.parq", "icechunk": "c.icechunk"}
# every output kind, each writing a TIFF stack (a VRT is written for TIFF stacks and mosaics)
EVERY_KIND = {"cube": "s.zarr", "vrt": "s.vrt", "kerchunk": "s.json", "parquet": "s.parq",
              "icechunk": "s.icechunk"}


def run(*args):
    exe = os.path.join(os.path.dirname(sys.executable), "virtualize")
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True)


def later(f, seconds: int = 5) -> None:
    st = os.stat(f)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + seconds * 10**9))


def kinds(e) -> list[str]:
    return [p.kind for p in e.value.problems]


def copies(case, tmp_path, name: str, n: int | None = None) -> list:
    """Copies of a fixture case's files in `tmp_path/src` (the tests touch and rewrite
    them)."""
    d = tmp_path / "src"
    d.mkdir()
    return [shutil.copy2(f, d / f.name) for f in case(name)[:n]]


@pytest.fixture
def stack(case, tmp_path):
    return copies(case, tmp_path, "months2024", 3)


@pytest.fixture(params=list(KINDS))
def built(request, stack, tmp_path):
    if request.param == "icechunk":
        pytest.importorskip("icechunk")
    out = tmp_path / KINDS[request.param]
    virtualize.virtualize(stack, out)
    return request.param, out, stack


def tas(files):
    return source_values(files, "tas", "time", ("time", "lat", "lon"))


def opens_silently(out, files) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no SourceTouchedWarning
        g = virtualize.open(out, strict=True)
        assert_same(g["tas"][...], tas(files), "read after the refresh")


def test_touched_source_is_read_with_a_note_and_refreshed(built):
    kind, out, files = built
    later(files[1])
    with pytest.warns(SourceTouchedWarning, match="touched, unchanged"):
        g = virtualize.open(out)
    assert_same(g["tas"][...], tas(files), f"{kind} with a touched source")
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(out, strict=True)
    assert kinds(e) == ["source-touched"] and e.value.problems[0].loc.file == str(files[1])
    [p] = virtualize.verify_cube(out)
    assert (p.kind, p.fatal, p.loc.file) == ("source-touched", False, str(files[1]))
    assert [p.fatal for p in virtualize.verify_cube(out, strict=True)] == [True]
    # --decode goes on past a touched source (a note), re-scanning and decoding
    assert [(p.kind, p.fatal) for p in virtualize.verify_cube(out, decode=True)] == [
        ("source-touched", False)]
    [p] = virtualize.verify_cube(out, refresh=True)
    assert (p.kind, p.fatal) == ("source-touched", False) and "now recorded" in p.message
    assert virtualize.verify_cube(out) == []
    opens_silently(out, files)
    import xarray as xr  # the xarray engine takes `strict` too

    later(files[1])
    with pytest.raises(VirtualizeError, match="source-touched"):
        xr.open_dataset(out, engine="virtualize", strict=True)
    with pytest.warns(SourceTouchedWarning):
        ds = xr.open_dataset(out, engine="virtualize", mask_and_scale=False)
    assert_same(ds["tas"].values, tas(files), "xarray with a touched source")


def test_every_kind_is_in_the_touched_test():
    from virtualize.outputs.registry import BUILTIN

    assert sorted(EVERY_KIND) == sorted(k.name for k in BUILTIN)


@pytest.mark.parametrize("kind", list(EVERY_KIND))
def test_a_touched_source_is_one_behaviour_for_every_kind(case, tmp_path, kind):
    """One behaviour on a touched source (its time alone changed, its blocks as recorded),
    whatever the output kind: read with a `source-touched` note (a SourceTouchedWarning),
    by `virtualize.open` and the xarray engine, equal to tifffile's read; refused with
    `strict`; silent once `verify --refresh` recorded the new time. (An Icechunk repository
    refused to open until `verify --refresh`: its references carried the files' times.)"""
    import tifffile
    import xarray as xr

    if kind == "icechunk":
        pytest.importorskip("icechunk")
    files = copies(case, tmp_path, "stack_dates")
    out = tmp_path / EVERY_KIND[kind]
    virtualize.virtualize(files, out, concat_dim="time", format=kind)
    want = np.stack([tifffile.imread(f) for f in files])
    later(files[1])
    with pytest.warns(SourceTouchedWarning, match="touched, unchanged") as w:
        g = virtualize.open(out)
    assert_same(g["image"][...], want, f"{kind} with a touched source")
    assert {str(files[1]) in str(m.message) for m in w} == {True}
    with pytest.warns(SourceTouchedWarning):
        ds = xr.open_dataset(out, engine="virtualize", mask_and_scale=False)
    assert_same(ds["image"].values, want, f"{kind} through xarray with a touched source")
    for refused in (lambda: virtualize.open(out, strict=True),
                    lambda: xr.open_dataset(out, engine="virtualize", strict=True)):
        with pytest.raises(VirtualizeError) as e:
            refused()
        assert [(p.kind, p.loc.file) for p in e.value.problems] == [
            ("source-touched", str(files[1]))]
    [p] = virtualize.verify_cube(out)
    assert (p.kind, p.fatal) == ("source-touched", False)
    [p] = virtualize.verify_cube(out, refresh=True)
    assert (p.kind, p.fatal) == ("source-touched", False) and "now recorded" in p.message
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no SourceTouchedWarning
        assert_same(virtualize.open(out, strict=True)["image"][...], want, "refreshed")


def test_copy_without_p_is_touched_and_the_cli_refreshes(built, tmp_path):
    kind, out, files = built
    keep = tmp_path / "keep.nc"
    shutil.copyfile(files[0], keep)
    shutil.copyfile(keep, files[0])  # cp without -p: the same bytes, a new time
    later(files[0], 1)  # (a new time whatever the clock's resolution)
    r = run("verify", out)
    assert r.returncode == 0 and "source-touched" in r.stdout and "1 touched" in r.stdout
    r = run("verify", "--strict", out)
    assert r.returncode == 1 and "source-touched" in r.stdout
    r = run("verify", "--refresh", "--json", out)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["ok"] and [p["kind"] for p in doc["problems"]] == ["source-touched"]
    r = run("verify", out)
    assert r.returncode == 0 and r.stdout.startswith("ok") and "source-touched" not in r.stdout
    assert "1 touched" not in r.stdout
    opens_silently(out, files)


def rewrite_tas(f, values) -> None:
    """The file written again from scratch, its tas replaced by `values` (compressed: the
    chunks' lengths change)."""
    tmp = f.with_suffix(".tmp")
    with netCDF4.Dataset(f) as src, netCDF4.Dataset(tmp, "w") as dst:
        for d in src.dimensions.values():
            dst.createDimension(d.name, None if d.isunlimited() else len(d))
        for v in src.variables.values():
            w = dst.createVariable(v.name, v.dtype, v.dimensions, zlib=True, shuffle=True,
                                   fill_value=getattr(v, "_FillValue", None),
                                   chunksizes=v.chunking() if v.chunking() != "contiguous"
                                   else None)
            w.setncatts({k: v.getncattr(k) for k in v.ncattrs() if k != "_FillValue"})
            w.set_auto_maskandscale(False)
            v.set_auto_maskandscale(False)
            w[...] = values if v.name == "tas" else v[...]
    os.replace(tmp, f)


def test_rewrite_with_other_data_and_a_new_time_is_stale(built):
    kind, out, files = built
    rng = np.random.default_rng(1)
    with netCDF4.Dataset(files[2]) as ds:
        shape = ds["tas"].shape
    rewrite_tas(files[2], rng.normal(280, 20, shape).astype("f4"))
    later(files[2], 1)
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(out)
    assert kinds(e) == ["source-changed"] and e.value.problems[0].loc.file == str(files[2])
    with pytest.raises(VirtualizeError):
        virtualize.open(out, strict=True)
    [p] = virtualize.verify_cube(out, refresh=True)  # nothing to refresh: stale
    assert p.kind == "source-changed" and p.fatal
    assert run("verify", "--refresh", out).returncode == 1
    with pytest.raises(VirtualizeError, match="source-changed"):
        virtualize.open(out)


def test_same_size_same_time_rewrite_is_seen_only_by_verify_decode(case, tmp_path):
    """A rewrite in place that keeps the size and the time restored is not detected at
    open (documented); `verify --decode` re-scans every source and finds its block tables
    (here a shared coordinate's values) unlike the recorded ones."""
    files = copies(case, tmp_path, "appended_batches", 3)
    for kind, name in KINDS.items():
        if kind == "icechunk" and importlib.util.find_spec("icechunk") is None:
            continue
        out = tmp_path / name
        virtualize.virtualize(files, out)
        st = os.stat(files[1])
        with netCDF4.Dataset(files[1], "r+") as ds:
            ds["lat"][0] = ds["lat"][0] + 0.5
        os.utime(files[1], ns=(st.st_atime_ns, st.st_mtime_ns))
        assert os.stat(files[1]).st_size == st.st_size
        assert virtualize.verify_cube(out) == []  # not detected: size and time as recorded
        problems = virtualize.verify_cube(out, decode=True)
        assert ("source-changed", str(files[1])) in [(p.kind, p.loc.file) for p in problems], \
            (kind, problems)
        with netCDF4.Dataset(files[1], "r+") as ds:
            ds["lat"][0] = ds["lat"][0] - 0.5
        os.utime(files[1], ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_cube_without_fingerprints_keeps_a_touched_source_stale(stack, tmp_path):
    out = tmp_path / "old.zarr"
    virtualize.virtualize(stack, out)
    rec = out / "virtualize.json"
    info = json.loads(rec.read_text())
    for s in info["sources"]:  # as written before fingerprints were recorded
        s.pop("fingerprint")
    rec.write_text(json.dumps(info))
    later(stack[0])
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(out)
    assert kinds(e) == ["source-changed"]
    assert "no fingerprint" in e.value.problems[0].message
    assert "re-run virtualize" in e.value.problems[0].message
    [p] = virtualize.verify_cube(out, refresh=True)
    assert p.kind == "source-changed" and p.fatal


def test_fingerprints_are_recorded_for_every_source(built):
    kind, out, files = built
    info = virtualize.api.steps.recorded(*virtualize.api.steps.existing_output(out, "verify"))
    assert [s["path"] for s in info["sources"]] == [str(f) for f in files]
    fps = [s.get("fingerprint") for s in info["sources"]]
    assert all(isinstance(f, str) and f.startswith("v1:") for f in fps) and len(set(fps)) == 3


@pytest.mark.parametrize("kind", list(KINDS))
def test_appended_sources_get_fingerprints_and_can_be_touched(case, tmp_path, kind):
    if kind == "icechunk":
        pytest.importorskip("icechunk")
    files = copies(case, tmp_path, "appended_batches")
    out = tmp_path / KINDS[kind]
    virtualize.virtualize(files[:2], out)
    virtualize.append(out, files[2:4])
    info = virtualize.api.steps.recorded(out, kind)
    assert all(str(s.get("fingerprint", "")).startswith("v1:") for s in info["sources"])
    later(files[3])
    [p] = virtualize.verify_cube(out, refresh=True)
    assert p.kind == "source-touched" and p.loc.file == str(files[3])
    opens_silently(out, files[:4])
    later(files[3])
    report = virtualize.append(out, files[3:])  # a touched file given again: skipped
    assert report.already == [str(files[3])]
    assert [p.kind for p in report.problems if p.kind.startswith("source")] == ["source-touched"]
    virtualize.verify_cube(out, refresh=True)
    opens_silently(out, files)


def test_append_and_export_accept_a_touched_source_unless_strict(case, tmp_path):
    files = copies(case, tmp_path, "appended_batches")
    cube = tmp_path / "c.zarr"
    virtualize.virtualize(files[:2], cube)
    later(files[0])
    with pytest.raises(VirtualizeError) as e:
        virtualize.append(cube, files[2:3], strict=True)
    assert kinds(e) == ["source-touched"]
    report = virtualize.append(cube, files[2:3])
    assert [p.kind for p in report.problems if p.kind.startswith("source")] == ["source-touched"]
    with pytest.warns(SourceTouchedWarning):
        g = virtualize.open(cube)
    assert_same(g["tas"][...], tas(files[:3]), "appended with a touched source")
    with pytest.raises(VirtualizeError):
        virtualize.export(cube, tmp_path / "e.json", strict=True)
    virtualize.export(cube, tmp_path / "e.json")


def test_a_touched_external_link_target_is_proved_through_the_linking_file(tmp_path):
    import h5py

    target = tmp_path / "target.h5"
    with h5py.File(target, "w") as f:
        f.create_dataset("data", data=np.arange(24, dtype="f4").reshape(4, 6), chunks=(2, 6))
    linked = tmp_path / "linked.h5"
    with h5py.File(linked, "w") as f:
        f.create_dataset("own", data=np.arange(5, dtype="i4"))
        f["lnk"] = h5py.ExternalLink("target.h5", "/data")
    out = tmp_path / "c.zarr"
    report = virtualize.virtualize([linked], out)
    (src,) = [s for s in report.plan.sources if s.path == str(target)]
    assert src.referenced_by == str(linked) and src.fingerprint.startswith("v1:")
    later(target)
    with pytest.warns(SourceTouchedWarning):
        g = virtualize.open(out)
    np.testing.assert_array_equal(g["lnk"][...], np.arange(24, dtype="f4").reshape(4, 6))
    [p] = virtualize.verify_cube(out, refresh=True)
    assert (p.kind, p.loc.file) == ("source-touched", str(target))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        virtualize.open(out, strict=True)
    with h5py.File(target, "a") as f:  # other chunks: a new dataset layout, same name
        del f["data"]
        f.create_dataset("data", data=np.arange(24, dtype="f4").reshape(4, 6), chunks=(4, 3))
    with pytest.raises(VirtualizeError, match="source-changed"):
        virtualize.open(out)


@pytest.mark.parametrize("how", ["one file", "another concat dim"])
def test_a_touched_file_is_rescanned_as_the_cube_scanned_it(tmp_path, how):
    """Which variables carry digests depends on how a file was scanned (alone; along which
    dimension): the re-scan that proves a touched file unchanged scans it the same way, so
    a cube of one file, or one concatenated along a dimension the scanner would not have
    chosen, reads a touched source with a note, not as changed."""
    files = []
    for i in range(2):
        f = tmp_path / f"f{i}.nc"
        with netCDF4.Dataset(f, "w") as ds:
            ds.createDimension("time", None)
            ds.createDimension("member", 1)
            ds.createDimension("y", 4)
            ds.createVariable("time", "f8", ("time",))[:] = np.arange(3.0)
            ds.createVariable("member", "i4", ("member",))[:] = [i]
            ds.createVariable("orog", "f4", ("y",))[:] = np.arange(4.0)
            v = ds.createVariable("v", "f4", ("member", "time", "y"))
            v[:] = np.full((1, 3, 4), i, "f4")
        files.append(f)
    out = tmp_path / "c.zarr"
    if how == "one file":
        virtualize.virtualize(files[:1], out)
    else:
        virtualize.virtualize(files, out, concat_dim="member")
    later(files[0])
    with pytest.warns(SourceTouchedWarning):
        g = virtualize.open(out)
    with netCDF4.Dataset(files[0]) as ds:
        np.testing.assert_array_equal(g["v"][0:1], ds["v"][:])
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(out, strict=True)
    assert kinds(e) == ["source-touched"]


# Found by #20's review (wrong data, exit 0): the staleness fingerprint (scan/_fingerprint.py) covers
# block tables, digests and values but no attributes: a file whose `scale_factor` (or its
# time `units`, or `_FillValue`) is changed in place keeps its size, so it is "touched,
# unchanged"; `verify --refresh` records it and the cube then decodes with the old
# attributes while netCDF4 reads the new ones.
@pytest.mark.parametrize("fmt", ["NETCDF4", "NETCDF3_64BIT_OFFSET"])
@pytest.mark.parametrize("out", ["c.zarr", "c.json"])
def test_meaning_attribute_rewritten_in_place_is_not_touched(tmp_path, fmt, out):
    files = [scaled_month(tmp_path / f"m{m}.nc", m, fmt) for m in range(2)]
    cube = tmp_path / out
    virtualize.virtualize(files, cube)
    size = os.path.getsize(files[1])
    with netCDF4.Dataset(files[1], "a") as ds:
        ds["tas"].scale_factor = np.float32(3.0)  # same type, same size: rewritten in place
    later(files[1])
    assert os.path.getsize(files[1]) == size
    kinds = [p.kind for p in virtualize.verify_cube(cube)]
    assert "source-changed" in kinds, kinds


# Found by #20's review (wrong data, exit 0): a variable inlined with `--inline VAR` (its values read
# while planning and stored in the cube) is not in the source's fingerprint: rewritten in
# place (same layout, new values) the file is "touched, unchanged", `verify --refresh`
# records it, and the cube serves the old copy while netCDF4 reads the new values. The
# documented exemption ("the cube reads what the file now holds at the recorded byte
# ranges") does not hold for a copy.
def test_inlined_variable_rewritten_in_place_is_not_touched(tmp_path):
    files = [scaled_month(tmp_path / f"m{m}.nc", m) for m in range(2)]
    cube = tmp_path / "c.zarr"
    virtualize.virtualize(files, cube, inline=["tas"])
    with netCDF4.Dataset(files[1], "a") as ds:
        ds["tas"].set_auto_maskandscale(False)
        ds["tas"][0, 0, 0] = 4242
    later(files[1])
    kinds = [p.kind for p in virtualize.verify_cube(cube)]
    assert "source-changed" in kinds, kinds


# Found by #20's review: chunks copied into the cube (`--materialize`) are held by value: a re-scan of
# the source's block tables cannot prove their bytes unchanged, so a touched source the
# cube copies from is refused (`source-changed`, located, saying why) and not refreshed.
def test_materialized_source_touched_is_not_refreshed(case, tmp_path):
    import json
    import shutil
    (tmp_path / "src").mkdir()
    files = [shutil.copy2(f, tmp_path / "src" / f.name) for f in case("tenday_padded")[:2]]
    cube = tmp_path / "c.zarr"
    report = virtualize.virtualize(files, cube, materialize=True)
    assert report.plan.remedies["materialize"].blocks > 0
    sources = json.loads((cube / "virtualize.json").read_text())["sources"]
    copied = [s["path"] for s in sources if s.get("copied")]
    assert copied and len(copied) < len(sources) + 1
    later(copied[0])
    problems = virtualize.verify_cube(cube, refresh=True)
    mine = [p for p in problems if p.loc.file == copied[0]]
    assert [p.kind for p in mine] == ["source-changed"] and "--materialize" in mine[0].message
    assert "source-changed" in [p.kind for p in virtualize.verify_cube(cube)]  # not refreshed


# Found by #20's review: `verify --refresh` takes the output lock `append` takes: while another holds
# it, the refresh waits (and then records the touched time).
def test_refresh_waits_for_the_output_lock(tmp_path):
    import threading
    import time

    from virtualize.outputs.staging import locked
    files = [scaled_month(tmp_path / f"m{m}.nc", m) for m in range(2)]
    cube = tmp_path / "c.zarr"
    virtualize.virtualize(files, cube)
    later(files[1])
    done = []
    with locked(cube):
        t = threading.Thread(target=lambda: done.append(virtualize.verify_cube(cube, refresh=True)))
        t.start()
        time.sleep(1.0)
        assert not done  # waiting for the lock
    t.join(600)  # (generous: a loaded machine)
    assert done and [p.kind for p in done[0]] == ["source-touched"]
    assert virtualize.verify_cube(cube) == []  # refreshed
