"""Issue 12's remaining classes: compound data as zarr structs, external links, odd types
refused located (docs/coverage.md)."""

from __future__ import annotations

import h5py
import netCDF4
import numpy as np
import pytest
import xarray as xr

import virtualize
from virtualize.model import VirtualizeError


def assert_same_struct(actual, expected, what: str) -> None:
    """A struct read through the cube equals h5py's read: every member (nested ones too)
    bit for bit, NaN payloads included."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, what
    assert actual.dtype.names == expected.dtype.names, f"{what}: members differ"
    for k in actual.dtype.names:
        a, e = actual[k], expected[k]
        if a.dtype.names is not None:
            assert_same_struct(a, e, f"{what}.{k}")
            continue
        assert a.dtype == e.dtype.newbyteorder("="), f"{what}.{k}: {a.dtype} != {e.dtype}"
        bits = f"u{a.dtype.itemsize}" if a.dtype.kind != "c" else f"u{a.dtype.itemsize // 2}"
        assert np.array_equal(np.ascontiguousarray(a).view(bits),
                              np.ascontiguousarray(e.astype(a.dtype)).view(bits)), f"{what}.{k}"


# -- compound data ---------------------------------------------------------------------

PADDED = np.dtype({"names": ["a", "b", "n"],
                   "formats": [">i4", "<f8", [("p", "u1"), ("q", "<c8")]],
                   "offsets": [0, 8, 16], "itemsize": 40})


@pytest.fixture(scope="module")
def compounds(tmp_path_factory):
    """h5py-written compounds: padded members, a big-endian one, a nested one with a
    complex member, NaN, chunked + gzip; a small plain one; one with a string member; a
    large one."""
    path = tmp_path_factory.mktemp("compound") / "c.h5"
    x = np.zeros((3, 4), PADDED)
    x["a"] = np.arange(12).reshape(3, 4)
    x["b"] = np.nan
    x["b"][0, 0] = 1.5
    x["n"]["p"] = 7
    x["n"]["q"] = 1 + 2j
    with h5py.File(path, "w") as f:
        f.create_dataset("rec", data=x, chunks=(2, 2), compression="gzip",
                         fillvalue=np.array((7, 8.0, (1, 2)), PADDED)[()])
        f["small"] = np.array([(1, 2.0)], [("i", "<u2"), ("f", "<f4")])
        f["strs"] = np.zeros(3, [("x", "<i2"), ("s", "S4")])
        f["big"] = np.zeros(20_000, [("x", "<i4"), ("y", "<f8")])
        f["plain"] = np.arange(5.0)
    return path


def test_small_compounds_are_inlined_as_zarr_structs(compounds, tmp_path):
    out = tmp_path / "c.zarr"
    report = virtualize.virtualize([compounds], out, drop=["big"])
    assert report.ok
    assert {(p.loc.variable, p.fatal) for p in report.problems} == {("strs", False)}
    assert any(n.startswith("rec: cannot be referenced") for n in report.notes)
    cube = virtualize.open(out)
    ds = xr.open_dataset(out, engine="virtualize")
    with h5py.File(compounds) as f:
        for name in ("rec", "small"):
            assert_same_struct(cube[name][...], f[name][()], name)
            assert_same_struct(ds[name].values, f[name][()], f"xarray {name}")
    assert "strs" not in ds and "big" not in ds
    # the fill value is h5py's, member by member
    assert cube["rec"].fill_value.tolist() == (7, 8.0, (1, 2 + 0j))


def test_large_compounds_are_refused_naming_inline_and_drop(compounds, tmp_path):
    report = virtualize.check([compounds])
    assert not report.ok
    (p,) = [p for p in report.problems if p.fatal]
    assert (p.loc.file, p.loc.variable, p.kind) == (str(compounds), "big", "unsupported-type")
    assert "--inline big" in p.remedy and "--drop big" in p.remedy
    assert report.refused_variables == {"big": ["--inline big", "--drop big"]}
    report = virtualize.virtualize([compounds], tmp_path / "c.zarr", inline=["big"])
    with h5py.File(compounds) as f:
        assert_same_struct(virtualize.open(tmp_path / "c.zarr")["big"][...], f["big"][()], "big")


def test_compounds_in_a_stack_concatenate_and_compare_with_nan(tmp_path):
    """netCDF4-written compound variables: one along the unlimited dimension (concatenated),
    one without it holding NaN (the same in every file: not a `differs-between-files`)."""
    files = []
    for i in range(3):
        path = tmp_path / f"s{i}.nc"
        with netCDF4.Dataset(path, "w") as nc:
            obs = nc.createCompoundType(np.dtype([("t", "f4"), ("q", "i2")]), "obs_t")
            nc.createDimension("time", None)
            nc.createDimension("site", 2)
            tv = nc.createVariable("time", "f8", ("time",))
            tv.units = "hours since 2000-01-01"
            tv[:] = [2 * i, 2 * i + 1]
            v = nc.createVariable("obs", obs, ("time", "site"))
            data = np.zeros((2, 2), obs.dtype)
            data["t"] = np.arange(4).reshape(2, 2) + 10 * i
            data["q"] = i
            v[:] = data
            s = nc.createVariable("site_info", obs, ("site",))
            s[:] = np.array([(np.nan, 1), (2.5, 2)], obs.dtype)
        files.append(path)
    out = tmp_path / "s.zarr"
    assert virtualize.virtualize(files, out).ok
    cube = virtualize.open(out)
    srcs = [netCDF4.Dataset(p) for p in files]
    try:
        assert_same_struct(cube["obs"][...], np.concatenate([s["obs"][...] for s in srcs]), "obs")
        assert_same_struct(cube["site_info"][...], srcs[0]["site_info"][...], "site_info")
    finally:
        for s in srcs:
            s.close()


# -- external links --------------------------------------------------------------------

@pytest.fixture(scope="module")
def linked(tmp_path_factory):
    """main.h5 links to a dataset and a group of sub/target.h5 (followed), to a missing
    file and to a file outside its directory (refused)."""
    root = tmp_path_factory.mktemp("links")
    (root / "sub").mkdir()
    with h5py.File(root / "sub" / "target.h5", "w") as f:
        f.create_dataset("grp/data", data=np.arange(24.0).reshape(4, 6), chunks=(2, 3),
                         compression="gzip")
        f["grp/small"] = np.arange(3, dtype="i2")
    with h5py.File(root.parent / "outside.h5", "w") as f:
        f["x"] = np.arange(2)
    with h5py.File(root / "main.h5", "w") as f:
        f["own"] = np.arange(3)
        f["lnk"] = h5py.ExternalLink("sub/target.h5", "/grp/data")
        f["g/tree"] = h5py.ExternalLink("sub/target.h5", "/grp")
        f["missing"] = h5py.ExternalLink("missing.h5", "/x")
        f["up"] = h5py.ExternalLink("../outside.h5", "/x")
    return root / "main.h5"


def test_external_links_are_followed_into_files_beside_the_linking_one(linked, tmp_path):
    target = str(linked.parent / "sub" / "target.h5")
    report = virtualize.check([linked])
    assert report.verdict == "no"
    refused = {p.loc.variable: p for p in report.problems if p.fatal}
    assert set(refused) == {"missing", "up"}
    for name, p in refused.items():
        assert p.kind == "external-link" and p.loc.file == str(linked)
        assert f"--drop {name}" in p.message
    assert "missing.h5:/x" in refused["missing"].message
    assert str(linked.parent.parent / "outside.h5") in refused["up"].message
    out = tmp_path / "l.zarr"
    report = virtualize.virtualize([linked], out, drop=["missing", "up"])
    assert report.ok and not any(p.kind == "decode-mismatch" for p in report.problems)
    # the target is a source the cube references, found through the link
    (src,) = [s for s in report.plan.sources if s.path == target]
    assert src.referenced_by == str(linked)
    assert report.plan.arrays["lnk"].refs is not None  # referenced, not copied
    assert (report.plan.arrays["lnk"].refs["path"] == report.plan.sources.index(src)).all()
    cube = virtualize.open(out)
    with h5py.File(linked) as f:  # h5py follows the links
        for name in ("own", "lnk", "g/tree/data", "g/tree/small"):
            np.testing.assert_array_equal(cube[name][...], f[name][()], err_msg=name)
    # the target is checked for staleness like any source
    with h5py.File(target, "a") as f:
        f["grp/data"][0, 0] = -1
    with pytest.raises(VirtualizeError, match="source-changed|changed"):
        virtualize.open(out)


# -- odd types: never a crash ------------------------------------------------------------

@pytest.fixture(scope="module")
def odd(tmp_path_factory):
    """Types and attributes real archives hold (h5py-written) and a netCDF-4 vlen."""
    root = tmp_path_factory.mktemp("odd")
    path = root / "odd.h5"
    et = h5py.enum_dtype({"RED": 0, "GREEN": 1}, basetype="i1")
    seqs = np.empty(2, dtype=object)
    seqs[0], seqs[1] = np.arange(3, dtype="i4"), np.arange(1, dtype="i4")
    with h5py.File(path, "w") as f:
        d = f.create_dataset("ok", data=np.arange(4.0))
        d.attrs.create("enum_attr", np.array([0, 1], dtype=et))
        d.attrs.create("vlen_attr", seqs, dtype=h5py.vlen_dtype(np.int32))
        d.attrs.create("opaque_attr", np.void(b"\x01\x02\x03"))
        d.attrs["ref_attr"] = f["ok"].ref
        d.attrs.create("cmpd_attr", np.array([(1, b"ab", [1, 2])],
                                             dtype=[("a", "i4"), ("s", "S2"), ("v", "i2", (2,))]))
        f.create_dataset("vlen_ints", data=seqs, dtype=h5py.vlen_dtype(np.int32))
        f.create_dataset("regrefs", data=np.array([f["ok"].regionref[1:3]] * 2),
                         dtype=h5py.regionref_dtype)
        f.create_dataset("objrefs", data=np.array([f["ok"].ref] * 2), dtype=h5py.ref_dtype)
        f.create_dataset("opaque", data=np.array([np.void(b"\x01\x02")] * 3))
        sub = f.create_dataset("subarray", data=np.zeros(4, dtype=np.dtype(("f4", (3,)))))
        sub[...] = np.arange(12, dtype="f4").reshape(4, 3)  # an HDF5 array type per element
        f.create_dataset("cmpd_enum", data=np.array([(1, 2.5)], dtype=[("a", et), ("b", "f4")]))
        f.create_dataset("cmpd_arr", data=np.zeros(2, dtype=[("a", "i4"), ("v", "i2", (2,))]))
        f.create_dataset("text", data=np.array(["ab", "c"], dtype=object),
                         dtype=h5py.string_dtype())
    nc = root / "vlen.nc"
    with netCDF4.Dataset(nc, "w") as d:
        vt = d.createVLType(np.int16, "seq_t")
        d.createDimension("n", 2)
        v = d.createVariable("seq", vt, ("n",))
        v[0], v[1] = np.arange(3, dtype="i2"), np.arange(2, dtype="i2")
        d.createVariable("x", "f4", ("n",))[:] = [1, 2]
    return path, nc


def test_odd_types_are_skipped_or_inlined_never_a_crash(odd, tmp_path):
    path, nc = odd
    out = tmp_path / "odd.zarr"
    report = virtualize.virtualize([path], out)
    assert report.ok
    skipped = {p.loc.variable: p.message for p in report.problems if p.kind == "unsupported-type"}
    assert set(skipped) == {"vlen_ints", "regrefs", "objrefs", "opaque", "cmpd_arr"}
    assert "vlen sequence of int32" in skipped["vlen_ints"]
    assert "region reference" in skipped["regrefs"] and "object reference" in skipped["objrefs"]
    assert "opaque (2 bytes)" in skipped["opaque"] and "array member ('v')" in skipped["cmpd_arr"]
    assert [p.message for p in report.problems if p.kind == "attribute-omitted"] == [
        "attribute 'opaque_attr' of ok is left out: its value has no JSON form (a value of type |V3)"]
    text = report.to_text(verbose=True)  # the arrays listing names text and struct types
    assert "struct[a: int8, b: float32]" in text and "text ('text_dim0',) (2,) string" in text
    cube = virtualize.open(out)
    assert cube["ok"].attrs["vlen_attr"] == [[0, 1, 2], [0]]  # a 1-item sequence stays a list
    assert cube["ok"].attrs["enum_attr"] == [0, 1] and cube["ok"].attrs["ref_attr"] == "/ok"
    assert cube["ok"].attrs["cmpd_attr"] == {"a": 1, "s": "ab", "v": [1, 2]}
    with h5py.File(path) as f:
        np.testing.assert_array_equal(cube["subarray"][...], f["subarray"][()])
        assert_same_struct(cube["cmpd_enum"][...], f["cmpd_enum"][()], "cmpd_enum")
    report = virtualize.check([nc])
    # the vlen variable and its named type (a committed datatype) are skipped, named
    assert report.ok and sorted((p.loc.variable, p.kind) for p in report.problems) == [
        ("seq", "unsupported-type"), ("seq_t", "unsupported-object")]


def test_external_link_to_a_large_chunk_index_reads_the_target_files_index(tmp_path, monkeypatch):
    """A linked dataset with a chunk index large enough for the direct index reader: its
    index is the target file's (read by chunk_iter there), never bytes of the linking file
    at the target's addresses, even when both files are laid out alike."""
    (tmp_path / "sub").mkdir()
    data = np.arange(40 * 40, dtype="f4").reshape(40, 40)
    for path, values in ((tmp_path / "sub" / "t.h5", data), (tmp_path / "m.h5", -data)):
        with h5py.File(path, "w", libver="latest") as f:
            f.create_dataset("a", data=values, chunks=(2, 2))  # 400 chunks, a fixed array
    with h5py.File(tmp_path / "m.h5", "a") as f:
        f["lnk"] = h5py.ExternalLink("sub/t.h5", "/a")
    from virtualize.formats.hdf5 import index as hdf5_index
    from virtualize.formats.hdf5 import walk as hdf5_walk

    read_by = []
    real = hdf5_index._native_chunk_index

    def spy(pread, size, dsid, *a):
        read_by.append(h5py.h5f.get_name(dsid).decode())
        return real(pread, size, dsid, *a)

    monkeypatch.setattr(hdf5_walk, "_native_chunk_index", spy)
    out = tmp_path / "m.zarr"
    report = virtualize.virtualize([tmp_path / "m.h5"], out, scan_timeout=None)
    assert report.ok, report.problems
    # "a" of the linking file only (opened through a file object: named by its repr)
    assert len(read_by) == 1 and "m.h5" in read_by[0] and "t.h5" not in read_by[0], read_by
    cube = virtualize.open(out)
    np.testing.assert_array_equal(cube["lnk"][...], data)
    np.testing.assert_array_equal(cube["a"][...], -data)
