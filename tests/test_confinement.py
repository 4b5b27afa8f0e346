"""Opening a cube never lets its author make the reader open arbitrary files, never reads
an edited manifest as data, and never reads a stale kerchunk export."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

import virtualize
from virtualize.model import VirtualizeError
from virtualize.outputs.cube.reader import CubeStore

from helpers import assert_same, kerchunk_group, source_values

DIMS = ("time", "lat", "lon")


@pytest.fixture(scope="module")
def made(case, tmp_path_factory):
    """Copies of a small stack (sources may be rewritten here), and a pristine cube,
    kerchunk JSON and foreign kerchunk JSON of them; tests edit their own copies."""
    tmp = tmp_path_factory.mktemp("confine")
    data = tmp / "data"
    data.mkdir()
    files = [Path(shutil.copy2(f, data / Path(f).name)) for f in case("appended_batches")[:3]]
    virtualize.virtualize(files, tmp / "cube.zarr")
    virtualize.virtualize(files, tmp / "cube.json")
    return tmp, files


@pytest.fixture
def cube(made, tmp_path):
    shutil.copytree(made[0] / "cube.zarr", tmp_path / "cube.zarr", symlinks=True)
    return tmp_path / "cube.zarr"


@pytest.fixture
def refs(made, tmp_path):
    shutil.copy2(made[0] / "cube.json", tmp_path / "cube.json")
    return tmp_path / "cube.json"


def kinds(e) -> list[str]:
    return [p.kind for p in e.value.problems]


def edit_json(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def test_pristine_outputs_read_back(made):
    tmp, files = made
    want = source_values(files, "tas", "time", DIMS)
    for out in ("cube.zarr", "cube.json"):
        assert_same(virtualize.open(tmp / out)["tas"][...], want, out)
    # the kerchunk JSON's virtualize section is ignored by plain fsspec + zarr
    assert_same(kerchunk_group(tmp / "cube.json")["tas"][...], want, "plain fsspec")
    section = json.loads((tmp / "cube.json").read_text())["virtualize"]
    assert [s["path"] for s in section["sources"]] == [str(f) for f in files]
    assert section["roots"] == [str(files[0].parent)]
    assert json.loads((tmp / "cube.zarr" / "virtualize.json").read_text())["roots"] == [
        str(files[0].parent)]


# -- the kerchunk export refuses changed sources -------------------------------------------

def test_kerchunk_export_refuses_a_rewritten_source(made, tmp_path):
    _, files = made
    data = tmp_path / "data"
    data.mkdir()
    mine = [Path(shutil.copy2(f, data / f.name)) for f in files]
    out = tmp_path / "cube.json"
    virtualize.virtualize(mine, out)
    # the same values, another layout: the references now point at the wrong bytes
    import netCDF4

    with netCDF4.Dataset(files[1]) as src, netCDF4.Dataset(mine[1], "w") as dst:
        for d in src.dimensions.values():
            dst.createDimension(d.name, None if d.isunlimited() else len(d))
        for v in src.variables.values():
            w = dst.createVariable(v.name, v.dtype, v.dimensions, zlib=True, complevel=9,
                                   fill_value=getattr(v, "_FillValue", None))
            w.setncatts({k: v.getncattr(k) for k in v.ncattrs() if k != "_FillValue"})
            w.set_auto_maskandscale(False)
            v.set_auto_maskandscale(False)
            w[...] = v[...]
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(out)
    assert kinds(e) == ["source-changed"] and e.value.problems[0].loc.file == str(mine[1])
    with pytest.raises(VirtualizeError, match="source-changed"):
        xr.open_dataset(out, engine="virtualize")
    os.unlink(mine[2])
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(out)
    assert kinds(e) == ["source-changed", "source-missing"]
    assert virtualize.open(out, check_sources=False)["tas"].shape[0] == 22  # when asked


# -- edited manifests -------------------------------------------------------------------------

@pytest.mark.parametrize("edit", ["huge-length", "offset-past-end", "overflow", "bad-path",
                                  "lost-record", "garbage", "wrong-dtype"])
def test_edited_manifest_is_refused_with_its_location(cube, edit, made):
    files = made[1]
    p = cube / "tas" / "manifest.npy"
    m = np.load(p)
    if edit == "huge-length":
        m[1, 0, 0]["length"] = 2**40
    elif edit == "offset-past-end":
        m[1, 0, 0]["offset"] = os.path.getsize(files[1]) - 10
    elif edit == "overflow":
        m[1, 0, 0]["offset"] = 2**64 - 8
    elif edit == "bad-path":
        m[1, 0, 0]["path"] = 7
    elif edit == "lost-record":
        m = m[:2]
    elif edit == "wrong-dtype":
        m = np.zeros(m.shape, dtype=[("path", "<u4"), ("offset", "<i8"), ("length", "<f8")])
    if edit == "garbage":
        p.write_bytes(b"\x93NUMPY garbage")
    else:
        np.save(p, m)
    # a manifest's header (shape, dtype) is checked at open, its rows when first read
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(cube)["tas"][...]
    problem = e.value.problems[0]
    assert problem.loc.file == str(cube) and problem.loc.variable == "tas"
    if edit in ("huge-length", "offset-past-end", "overflow", "bad-path"):
        assert kinds(e) == ["invalid-reference"] and problem.loc.block == (1, 0, 0)
        assert "tas/c/1/0/0" in problem.message
        if edit != "bad-path":
            assert str(files[1]) in problem.message
    else:
        assert kinds(e) == ["invalid-cube"]


def test_edited_references_in_the_kerchunk_export_are_refused(refs, made):
    files = made[1]
    edit_json(refs, lambda d: d["refs"].__setitem__("tas/c/1/0/0", [str(files[1]), 0, 2**40]))
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(refs)
    assert kinds(e) == ["invalid-reference"] and "tas/c/1/0/0" in e.value.problems[0].message


@pytest.mark.parametrize("edit", ["not-json", "no-sources", "size-is-text", "arrays-missing"])
def test_edited_cube_documents_are_refused(cube, edit):
    info = cube / "virtualize.json"
    if edit == "not-json":
        info.write_text("{")
    elif edit == "no-sources":
        edit_json(info, lambda d: d.pop("sources"))
    elif edit == "size-is-text":
        edit_json(info, lambda d: d["sources"][0].__setitem__("size", "17"))
    else:
        edit_json(info, lambda d: d.pop("arrays"))
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(cube)
    assert kinds(e) == ["invalid-cube"] and e.value.problems[0].loc.file == str(cube)


def test_edited_array_document_is_refused(cube):
    (cube / "tas" / "zarr.json").write_text("[1, 2")
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(cube)
    assert kinds(e) == ["invalid-cube"]


# -- confinement: cube directories ----------------------------------------------------------

def point_source_at(cube: Path, target: str, roots=None) -> None:
    st = os.stat(target)

    def change(d):
        d["sources"][0] = {"path": target, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
        if roots is not None:
            d["roots"] = roots

    edit_json(cube / "virtualize.json", change)


@pytest.mark.parametrize("roots", [None, ["/etc"], ["/"], ["/etc/../etc"], "missing"])
def test_a_source_in_a_system_location_is_never_opened(cube, roots):
    if roots == "missing":
        edit_json(cube / "virtualize.json", lambda d: d.pop("roots"))
        roots = None
    point_source_at(cube, "/etc/passwd", roots)
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(cube)
    assert kinds(e) == ["reference-not-allowed"]
    assert e.value.problems[0].loc.file == str(cube) and "/etc/passwd" in e.value.problems[0].message
    with pytest.raises(VirtualizeError, match="reference-not-allowed"):
        xr.open_dataset(cube, engine="virtualize")
    with pytest.raises(VirtualizeError, match="reference-not-allowed"):
        virtualize.open(cube, check_sources=False)


def test_a_source_outside_the_roots_needs_allow(cube, tmp_path):
    other = tmp_path / "elsewhere"
    other.mkdir()
    secret = other / "secret.bin"
    secret.write_bytes(os.urandom(64 * 1024))
    point_source_at(cube, str(secret))
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(cube)
    assert kinds(e) == ["reference-not-allowed"] and str(secret) in e.value.problems[0].message
    virtualize.open(cube, allow=[other])  # the caller may
    xr.open_dataset(cube, engine="virtualize", allow=[str(other)])
    # a relative path or one with `..` is normalised first
    point_source_at(cube, str(cube.parent / "elsewhere" / ".." / "elsewhere" / "secret.bin"))
    with pytest.raises(VirtualizeError, match="reference-not-allowed"):
        virtualize.open(cube)


def test_a_system_location_is_opened_only_when_the_caller_allows_it(cube):
    point_source_at(cube, "/etc/passwd")
    with pytest.raises(VirtualizeError, match="system location"):
        virtualize.open(cube)
    virtualize.open(cube, allow=["/etc"], check_sources=True)


@pytest.mark.parametrize("which", ["inline", "document", "manifest", "array-dir"])
def test_the_cubes_own_files_are_read_only_inside_it(cube, which, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    if which == "inline":
        target = cube / "time" / "c" / "0"
        target.unlink()
        target.symlink_to("/etc/passwd")
    elif which == "document":
        (cube / "lat" / "zarr.json").unlink()
        (cube / "lat" / "zarr.json").symlink_to("/etc/passwd")
    elif which == "manifest":
        shutil.copy2(cube / "tas" / "manifest.npy", outside / "manifest.npy")
        (cube / "tas" / "manifest.npy").unlink()
        (cube / "tas" / "manifest.npy").symlink_to(outside / "manifest.npy")
    else:
        shutil.move(cube / "lat", outside / "lat")
        (cube / "lat").symlink_to(outside / "lat")
    if which == "array-dir":  # an array of the cube that is not in it: an invalid cube
        with pytest.raises(VirtualizeError, match="leads outside the cube") as e:
            virtualize.open(cube)
        assert kinds(e) == ["invalid-cube"] and e.value.problems[0].loc.variable == "lat"
        with pytest.raises(VirtualizeError, match="leads outside the cube"):
            CubeStore(cube)._get_bytes("lat/zarr.json")
        return
    with pytest.raises(VirtualizeError) as e:
        g = virtualize.open(cube)
        g["time"][...], g["tas"][...], g["lat"][...]
    assert "reference-not-allowed" in kinds(e), e.value
    assert "leads outside the cube" in e.value.problems[0].message


# -- confinement: kerchunk JSON ---------------------------------------------------------------

EVIL = ["/etc/passwd", "../../../../../../etc/hostname", "file:///etc/shadow",
        "http://169.254.169.254/latest/meta-data/", "s3://bucket/key.nc", "memory://x"]


@pytest.mark.parametrize("url", EVIL)
@pytest.mark.parametrize("ours", [True, False])
def test_kerchunk_references_outside_the_roots_are_refused(refs, url, ours, made):
    def change(d):
        if not ours:
            d.pop("virtualize")
        d["refs"]["tas/c/1/0/0"] = [url, 0, 100]

    edit_json(refs, change)
    data = made[1][0].parent  # a foreign JSON's other references are allowed explicitly
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(refs, allow=None if ours else [data])
    assert kinds(e) == ["reference-not-allowed"]
    assert e.value.problems[0].loc.file == str(refs) and url in e.value.problems[0].message
    with pytest.raises(VirtualizeError, match="reference-not-allowed"):
        xr.open_dataset(refs, engine="virtualize", allow=None if ours else [data])


def test_kerchunk_references_through_templates_are_checked(refs):
    def change(d):
        d.pop("virtualize")
        d["templates"] = {"u": "/etc/passwd"}
        d["refs"]["tas/c/1/0/0"] = ["{{u}}", 0, 100]

    edit_json(refs, change)
    with pytest.raises(VirtualizeError, match="reference-not-allowed"):
        virtualize.open(refs)


def test_foreign_kerchunk_json_may_reach_its_own_directory_or_allow(refs, made):
    _, files = made
    edit_json(refs, lambda d: d.pop("virtualize"))
    # its references are in made/data, not under its own directory
    with pytest.raises(VirtualizeError, match="reference-not-allowed"):
        virtualize.open(refs)
    g = virtualize.open(refs, allow=[files[0].parent])
    assert_same(g["tas"][...], source_values(files, "tas", "time", DIMS), "allowed")
    ds = xr.open_dataset(refs, engine="virtualize", allow=[files[0].parent])
    assert ds["tas"].shape[0] == 22
    # next to it, nothing needs allowing
    local = refs.parent / "data"
    shutil.copytree(files[0].parent, local)
    text = refs.read_text().replace(str(files[0].parent), str(local))
    refs.write_text(text)
    assert_same(virtualize.open(refs)["tas"][...], source_values(files, "tas", "time", DIMS), "own")


def test_a_kerchunk_source_not_in_its_table_is_refused(refs, made):
    _, files = made
    other = files[0].parent / "extra.bin"  # inside the roots, but not a source
    other.write_bytes(b"x" * 1000)
    try:
        edit_json(refs, lambda d: d["refs"].__setitem__("tas/c/1/0/0", [str(other), 0, 100]))
        with pytest.raises(VirtualizeError) as e:
            virtualize.open(refs)
        assert kinds(e) == ["reference-not-allowed"]
        assert "not in its source table" in e.value.problems[0].message
    finally:
        other.unlink()


# -- confinement: Icechunk ---------------------------------------------------------------------

def test_icechunk_containers_outside_the_roots_are_not_authorized(tmp_path, made):
    ic = pytest.importorskip("icechunk")
    _, files = made
    out = tmp_path / "ours.icechunk"
    virtualize.virtualize(files, out)
    assert virtualize.open(out)["tas"].shape[0] == 22  # its recorded roots: authorized

    foreign = tmp_path / "foreign.icechunk"
    config = ic.RepositoryConfig.default()
    config.set_virtual_chunk_container(
        ic.VirtualChunkContainer("file:///etc/", ic.local_filesystem_store("/etc/")))
    repo = ic.Repository.create(ic.local_filesystem_storage(str(foreign)), config)
    repo.save_config()
    session = repo.writable_session("main")
    zarr.create_group(session.store, zarr_format=3)
    session.commit("a root group")
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(foreign)
    assert kinds(e) == ["reference-not-allowed"] and "file:///etc/" in e.value.problems[0].message
    virtualize.open(foreign, allow=["/etc"])  # when the caller says so


def test_a_cube_without_recorded_roots_reaches_only_its_own_directory(cube, made):
    edit_json(cube / "virtualize.json", lambda d: d.pop("roots"))
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(cube)
    assert kinds(e) == ["reference-not-allowed"]
    assert virtualize.open(cube, allow=[made[1][0].parent])["tas"].shape[0] == 22


def test_icechunk_sources_in_several_directories_and_wide_containers(tmp_path, made):
    ic = pytest.importorskip("icechunk")
    _, files = made
    # sources in two directories: the container is their common parent, wider than the roots
    a, b = tmp_path / "src" / "a", tmp_path / "src" / "b"
    a.mkdir(parents=True)
    b.mkdir()
    mine = [Path(shutil.copy2(f, (a if i < 2 else b) / f.name)) for i, f in enumerate(files)]
    out = tmp_path / "two.icechunk"
    virtualize.virtualize(mine, out)
    assert_same(virtualize.open(out)["tas"][...], source_values(files, "tas", "time", DIMS), "two")

    # a repository whose container is wider than its roots: each chunk's location counts
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"secret")
    foreign = tmp_path / "inner" / "wide.icechunk"  # no recorded roots: tmp/inner only
    config = ic.RepositoryConfig.default()
    config.set_virtual_chunk_container(
        ic.VirtualChunkContainer(f"file://{tmp_path}/", ic.local_filesystem_store(str(tmp_path))))
    repo = ic.Repository.create(ic.local_filesystem_storage(str(foreign)), config)
    repo.save_config()
    session = repo.writable_session("main")
    zarr.create_array(session.store, name="a", shape=(4,), chunks=(4,), dtype="u1",
                      compressors=None)
    session.store.set_virtual_ref("a/c/0", f"file://{secret}", offset=0, length=4)
    session.commit("a virtual chunk outside the roots")
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(foreign)
    assert kinds(e) == ["reference-not-allowed"] and str(secret) in e.value.problems[0].message
    g = virtualize.open(foreign, allow=[tmp_path])
    assert bytes(g["a"][...]) == b"secr"


def test_a_missing_chunk_file_of_the_cube_is_an_error_not_fill(case, tmp_path):
    """A chunk the cube itself holds (an inline coordinate, a materialized block) whose
    file was deleted would read as the fill value: it is a located error instead."""
    files = case("tenday_padded")
    out = tmp_path / "cube.zarr"
    virtualize.virtualize(files, out, materialize=True)
    copied = sorted((out / "tas" / "c").rglob("*"))
    copied = [p for p in copied if p.is_file()]
    assert copied
    copied[0].unlink()
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(out)["tas"][...]
    assert e.value.problems[0].kind == "invalid-cube"
    (out / "lat" / "c" / "0").unlink()
    with pytest.raises(VirtualizeError):
        virtualize.open(out)["lat"][...]


def test_an_uncompressed_chunk_of_the_wrong_length_is_refused(case, tmp_path):
    """An uncompressed chunk's reference must be exactly its chunk's bytes: a shorter one
    (edited manifest) is refused, located, instead of failing inside zarr's decoding."""
    files = case("appended_batches")
    out = tmp_path / "cube.zarr"
    virtualize.virtualize(files, out)
    doc = json.loads((out / "tas" / "zarr.json").read_text())
    if [c["name"] for c in doc["codecs"]] != ["bytes"]:
        pytest.skip("this stack's tas is compressed")
    p = out / "tas" / "manifest.npy"
    m = np.load(p)
    m.reshape(-1)[0]["length"] = 10
    np.save(p, m)
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(out)["tas"][...]
    assert e.value.problems[0].kind == "invalid-reference"
    assert "uncompressed" in e.value.problems[0].message


# -- links leading out of a source: refused at check / create, and at open -----------------
#
# A source names a place: a Zarr v2 store (its chunk and metadata files), a directory given
# as input (its files), a kerchunk reference set (each data file, in the directory the set
# names it in). Whatever lies there is followed only if, its links followed (the file
# itself, a chain of links, a directory one passes through), it is still there.

def v2_store(path: Path) -> Path:
    """A Zarr v2 group written by zarr-python: `v` (4, 4) int32 in (2, 2) chunks, uncompressed,
    its chunk files in nested directories (`v/1/0`)."""
    g = zarr.open_group(str(path), mode="w", zarr_format=2)
    a = g.create_array("v", shape=(4, 4), chunks=(2, 2), dtype="<i4", fill_value=-1,
                       compressors=None,
                       chunk_key_encoding={"name": "v2", "separator": "/"})
    a.attrs["_ARRAY_DIMENSIONS"] = ["y", "x"]
    a[...] = np.arange(16, dtype="<i4").reshape(4, 4)
    return path


def zarr_v2(path: Path) -> np.ndarray:
    return zarr.open(str(path), mode="r", zarr_format=2)["v"][...]


def link_out(kind: str, place: Path, name: str, outside: Path) -> Path:
    """Make `place/name` lead to a file or directory of the same name in `outside` (moved
    there): `file` a link to it, `chain` a link to a link to it, `directory` a link to it
    through a directory link (`place/.via` -> `outside`)."""
    target = place / name
    outside.mkdir(exist_ok=True)
    moved = outside / name
    shutil.move(target, moved)
    if kind == "file":
        target.symlink_to(moved)
    elif kind == "chain":
        (place / f".{name}-hop").symlink_to(moved)
        target.symlink_to(place / f".{name}-hop")
    else:
        (place / ".via").symlink_to(outside, target_is_directory=True)
        target.symlink_to(place / ".via" / name)
    return moved


def link_in(kind: str, place: Path, name: str) -> None:
    """The same links, leading to a place inside `place` (`place/.kept`)."""
    kept = place / ".kept"
    kept.mkdir(exist_ok=True)
    moved = kept / name
    shutil.move(place / name, moved)
    if kind == "file":
        (place / name).symlink_to(moved)
    elif kind == "chain":
        (place / f".{name}-hop").symlink_to(moved)
        (place / name).symlink_to(place / f".{name}-hop")
    else:
        (place / ".via").symlink_to(kept, target_is_directory=True)
        (place / name).symlink_to(place / ".via" / name)


def refused_at(problems):
    return [(p.kind, p.loc.file, p.loc.variable, p.loc.block) for p in problems if p.fatal]


LINKS = ["file", "chain", "directory"]


@pytest.mark.parametrize("how", LINKS)
def test_a_store_chunk_leading_out_of_the_store_is_refused(tmp_path, how):
    """A chunk file (or, `directory`, the chunk directory `v/1`) of a Zarr v2 store linked
    to a copy outside it: zarr-python would read the outside bytes; `check` and `create`
    refuse the chunk, naming it and where the link leads."""
    store = v2_store(tmp_path / "s.zarr")
    if how == "directory":  # the directory holding chunks (1, 0) and (1, 1)
        moved = link_out("file", store / "v", "1", tmp_path / "elsewhere")
        where = str(moved / "0")
    else:
        where = str(link_out(how, store / "v" / "1", "0", tmp_path / "elsewhere"))
    np.testing.assert_array_equal(zarr_v2(store), np.arange(16).reshape(4, 4))  # zarr reads it
    report = virtualize.check([store])
    assert refused_at(report.problems) == [("reference-not-allowed", str(store), "v", (1, 0))]
    (p,) = [p for p in report.problems if p.fatal]
    assert "'v/1/0'" in p.message and where in p.message and "outside the store" in p.message
    with pytest.raises(VirtualizeError):
        virtualize.virtualize([store], tmp_path / "c.zarr")
    assert not (tmp_path / "c.zarr").exists()


def test_store_metadata_leading_out_of_the_store_is_refused(tmp_path):
    """`.zattrs` linked to a file outside the store would become the cube's attributes."""
    store = v2_store(tmp_path / "s.zarr")
    link_out("file", store / "v", ".zattrs", tmp_path / "elsewhere")
    (p,) = [p for p in virtualize.check([store]).problems if p.fatal]
    assert (p.kind, p.loc.file, p.loc.variable) == ("reference-not-allowed", str(store), "v")
    assert str(tmp_path / "elsewhere" / ".zattrs") in p.message


@pytest.mark.parametrize("how", LINKS)
def test_store_links_that_stay_inside_are_followed(tmp_path, how):
    store = v2_store(tmp_path / "s.zarr")
    if how == "directory":
        link_in("file", store / "v", "1")
    else:
        link_in(how, store / "v" / "1", "0")
    out = tmp_path / "c.zarr"
    virtualize.virtualize([store], out)
    assert_same(virtualize.open(out)["v"][...], zarr_v2(store), f"store, {how} link inside")
    (tmp_path / "s2.zarr").symlink_to(store, target_is_directory=True)  # the store itself
    virtualize.virtualize([tmp_path / "s2.zarr"], tmp_path / "c2.zarr")
    assert_same(virtualize.open(tmp_path / "c2.zarr")["v"][...], zarr_v2(store), "via link")


def batch_dir(case, tmp_path) -> tuple[Path, list[Path]]:
    d = tmp_path / "in"
    d.mkdir()
    return d, [Path(shutil.copy2(f, d / Path(f).name)) for f in case("appended_batches")[:3]]


@pytest.mark.parametrize("how", LINKS)
def test_a_directorys_file_leading_out_of_it_is_refused(case, tmp_path, how):
    """A directory given as input stands for its files: one that is a link leading out of it
    (to a file the cube would then reference and serve) is refused, located at the link and
    naming where it leads; named itself, the file is taken."""
    d, files = batch_dir(case, tmp_path)
    where = link_out(how, d, files[1].name, tmp_path / "elsewhere")
    report = virtualize.check([d])
    assert refused_at(report.problems) == [("reference-not-allowed", str(files[1]), None, None)]
    assert str(where) in report.problems[0].message
    with pytest.raises(VirtualizeError):
        virtualize.virtualize([d], tmp_path / "c.zarr")
    with pytest.raises(VirtualizeError) as e:  # nor appended
        virtualize.virtualize(files[:1], tmp_path / "a.zarr")
        virtualize.append(tmp_path / "a.zarr", [d])
    assert refused_at(e.value.problems) == [("reference-not-allowed", str(files[1]), None, None)]
    out = tmp_path / "named.zarr"  # the link named itself: the caller's choice
    virtualize.virtualize(files, out)
    assert_same(virtualize.open(out)["tas"][...], source_values(files, "tas", "time", DIMS),
                "the files named")


@pytest.mark.parametrize("how", LINKS)
def test_a_directorys_links_that_stay_inside_are_taken(case, tmp_path, how):
    d, files = batch_dir(case, tmp_path)
    link_in(how, d, files[1].name)
    out = tmp_path / "c.zarr"
    report = virtualize.virtualize([d], out)
    assert [s.path for s in report.plan.sources] == [str(f) for f in files]
    assert_same(virtualize.open(out)["tas"][...], source_values(files, "tas", "time", DIMS),
                f"directory, {how} link inside")


def reference_set(tmp_path, name: str, data: Path) -> Path:
    """kerchunk's own references (SingleHdf5ToZarr) of the netCDF-4 file `data`, naming it
    as `data` (a link, maybe)."""
    import kerchunk.hdf

    refs = kerchunk.hdf.SingleHdf5ToZarr(str(data.resolve())).translate()
    for k, v in refs["refs"].items():
        if isinstance(v, list):
            v[0] = str(data)
    out = tmp_path / name
    out.write_text(json.dumps(refs))
    return out


@pytest.mark.parametrize("how", LINKS)
def test_a_reference_sets_data_file_leading_out_is_refused(case, tmp_path, how):
    """A kerchunk reference set naming `in/x.nc`, which a link makes another file (outside
    `in`): refused, at the set's first chunk referring to it, naming where the link leads
    (the set is where the cube's reader would be told to look)."""
    d, files = batch_dir(case, tmp_path)
    where = link_out(how, d, files[1].name, tmp_path / "elsewhere")
    refs = reference_set(tmp_path, "r.json", files[1])
    report = virtualize.check([refs])
    # (kerchunk inlines tas and the small coordinates: time's chunk is the one reference)
    assert refused_at(report.problems) == [("reference-not-allowed", str(refs), "time", (0,))]
    (p,) = [p for p in report.problems if p.fatal]
    assert str(where) in p.message and str(files[1]) in p.message and "'time/0'" in p.message
    with pytest.raises(VirtualizeError):
        virtualize.virtualize([refs], tmp_path / "c.zarr")


@pytest.mark.parametrize("how", [*LINKS, "named directory"])
def test_a_reference_sets_links_that_stay_inside_are_followed(case, tmp_path, how):
    """Links inside the directory the set names a file in are followed; so is that
    directory itself when it is a link (`named directory`: the set names it)."""
    d, files = batch_dir(case, tmp_path)
    if how == "named directory":
        (tmp_path / "alias").symlink_to(d, target_is_directory=True)
        named = tmp_path / "alias" / files[1].name
    else:
        link_in(how, d, files[1].name)
        named = files[1]
    refs = reference_set(tmp_path, "r.json", named)
    out = tmp_path / "c.zarr"
    virtualize.virtualize([refs], out)  # (time's chunk read through the link, inlined)
    g = virtualize.open(out)
    for name, dims in (("time", ("time",)), ("tas", DIMS)):
        assert_same(g[name][...], source_values(files[1:2], name, "time", dims),
                    f"reference set, {how}: {name}")


OPENED = {"cube": "c.zarr", "kerchunk": "c.json", "parquet": "c.parq",
          "icechunk": "c.icechunk"}


@pytest.mark.parametrize("kind", list(OPENED))
def test_a_chunk_linked_out_after_the_cube_was_written_is_refused_at_open(tmp_path, kind):
    """A store's chunk replaced by a link to an equal copy outside the store, and (as
    virtualize recorded them before links were checked) the copy's directory among the
    recorded roots: every kind refuses to open the cube, naming the chunk file and where
    it leads, even without the staleness check; the caller's `allow` reaches it."""
    if kind == "icechunk":
        pytest.importorskip("icechunk")
    store = v2_store(tmp_path / "s.zarr")
    out = tmp_path / OPENED[kind]
    virtualize.virtualize([store], out)
    want = zarr_v2(store)
    chunk = store / "v" / "1" / "0"
    (tmp_path / "elsewhere").mkdir()
    copy = Path(shutil.copy2(chunk, tmp_path / "elsewhere" / "0"))
    chunk.unlink()
    chunk.symlink_to(copy)
    if kind == "cube":
        edit_json(out / "virtualize.json",
                  lambda d: d["roots"].append(str(tmp_path / "elsewhere")))
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(out, check_sources=False)
    (p,) = e.value.problems
    assert p.kind == "reference-not-allowed" and str(chunk) in p.message
    assert str(copy) in p.message and str(store) in p.message
    with pytest.raises(VirtualizeError, match="reference-not-allowed"):
        virtualize.open(out)
    g = virtualize.open(out, check_sources=False, allow=[tmp_path / "elsewhere"])
    assert_same(g["v"][...], want, "allowed by the caller")


def test_a_data_file_linked_out_after_the_cube_was_written_is_refused_at_open(case, tmp_path):
    d, files = batch_dir(case, tmp_path)
    refs = reference_set(tmp_path, "r.json", files[1])
    out = tmp_path / "c.json"
    virtualize.virtualize([refs], out)
    link_out("file", d, files[1].name, tmp_path / "elsewhere")
    with pytest.raises(VirtualizeError) as e:
        virtualize.open(out, check_sources=False)
    assert kinds(e) == ["reference-not-allowed"]
    assert str(tmp_path / "elsewhere" / files[1].name) in e.value.problems[0].message
