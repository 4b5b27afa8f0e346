"""The netCDF classic scanner (CDF-1, CDF-2, CDF-5) against netCDF4-python's own reads.

Every fixture is written with netCDF4-python (or ncgen) and checked variable by variable:
metadata equals what netCDF4 reports, and the bytes the block references point at rebuild
exactly the array netCDF4 reads.
"""

from __future__ import annotations

import math
import os
import subprocess

import numpy as np
import pytest

netCDF4 = pytest.importorskip("netCDF4")

from virtualize.formats._values import plain  # noqa: E402
from virtualize.formats.netcdf3 import parse_header, read_netcdf3_values, scan_netcdf3  # noqa: E402
from virtualize.model import VirtualizeError  # noqa: E402

FORMATS = {
    "NETCDF3_CLASSIC": "netcdf3-cdf1",
    "NETCDF3_64BIT_OFFSET": "netcdf3-cdf2",
    "NETCDF3_64BIT_DATA": "netcdf3-cdf5",
}
CLASSIC_TYPES = ["i1", "i2", "i4", "f4", "f8"]
CDF5_TYPES = CLASSIC_TYPES + ["u1", "u2", "u4", "i8", "u8"]


def types_for(fmt: str) -> list[str]:
    return CDF5_TYPES if fmt == "NETCDF3_64BIT_DATA" else CLASSIC_TYPES


def sample(dtype: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Distinct values that fit the type (no accidental fill values)."""
    n = math.prod(shape)
    rng = np.random.default_rng(seed)
    if dtype[0] == "f":
        return (rng.standard_normal(n) * 100).astype(dtype).reshape(shape)
    info = np.iinfo(dtype)
    lo, hi = max(info.min + 2, -1000), min(info.max - 2, 1000)
    return rng.integers(lo, hi, n).astype(dtype).reshape(shape)


# -- comparing against netCDF4 --------------------------------------------------------------

def rebuild(path: str, var) -> np.ndarray:
    """The array the block table describes: each ref's bytes placed at its block."""
    out = np.full(var.shape, var.fill_value, dtype=var.dtype)
    bs = var.blocks.block_shape
    with open(path, "rb") as f:
        for idx in np.ndindex(var.blocks.grid_shape):
            ref = var.blocks.refs[idx]
            start = [i * b for i, b in zip(idx, bs)]
            # netCDF classic stores a short last block at its true length (padded=False).
            extent = tuple(min(b, n - s) for b, n, s in zip(bs, var.shape, start))
            if ref["length"] == 0:
                assert math.prod(extent) == 0, f"{var.name}: block {idx} has no bytes"
                continue
            assert ref["path"] == 0
            assert ref["length"] == math.prod(extent) * var.dtype.itemsize
            f.seek(int(ref["offset"]))
            data = f.read(int(ref["length"]))
            assert len(data) == ref["length"]
            block = np.frombuffer(data, dtype=var.dtype).reshape(extent)
            out[tuple(slice(s, s + e) for s, e in zip(start, extent))] = block
    return out


def nc_attrs(obj) -> dict:
    return {k: plain(obj.getncattr(k)) for k in obj.ncattrs()}


def same(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")


def check_against_netcdf4(path: str, fmt: str | None = None):
    """Scan `path` and assert every variable matches netCDF4-python's view of it."""
    inv = scan_netcdf3(path)
    if fmt is not None:
        assert inv.format == FORMATS[fmt]
    assert inv.path == path
    assert 0 < inv.bytes_read
    with netCDF4.Dataset(path) as ds:
        ds.set_auto_maskandscale(False)
        assert inv.groups == {"": nc_attrs(ds)}
        assert set(inv.dimensions) == set(ds.dimensions)
        for name, d in ds.dimensions.items():
            got = inv.dimensions[name]
            assert (got.size, got.unlimited) == (len(d), d.isunlimited()), name
        chars = {n for n, v in ds.variables.items() if v.dtype == np.dtype("S1")}
        assert not [p for p in inv.problems if p.kind == "unsupported-type"]
        assert all(not p.fatal for p in inv.problems), inv.problems
        assert set(inv.variables) == set(ds.variables)
        for name in chars:  # NC_CHAR: text, one string per row, as xarray decodes it
            var, nv = inv.variables[name], ds.variables[name]
            text = netCDF4.chartostring(nv[...], encoding="utf-8") if nv.ndim else \
                np.asarray(nv[...].tobytes().rstrip(b"\x00").decode())
            assert var.dtype.kind == "T" and var.dims == nv.dimensions[:-1], name
            assert var.values.tolist() == np.asarray(text).tolist(), name
        for name, var in inv.variables.items():
            if name in chars:
                continue
            nv = ds.variables[name]
            expected = nv[...]
            assert var.shape == nv.shape, name
            assert var.dtype == np.dtype(nv.dtype).newbyteorder(">"), name
            assert var.dtype.byteorder in (">", "|"), name
            assert var.dims == nv.dimensions, name
            assert var.attrs == nc_attrs(nv), name
            want_fill = (nv.getncattr("_FillValue") if "_FillValue" in nv.ncattrs()
                         else netCDF4.default_fillvals[np.dtype(nv.dtype).str[1:]])
            # numpy scalars are native-endian: same type, any byte order.
            assert var.fill_value.dtype.str[1:] == var.dtype.str[1:]
            assert same(np.asarray(var.fill_value), np.asarray(want_fill, dtype=var.dtype))
            assert var.codecs[0]["name"] == "bytes"
            if var.dtype.itemsize > 1:
                assert var.codecs[0]["configuration"] == {"endian": "big"}
            assert var.blocks.padded is False
            assert same(rebuild(path, var), expected), name
            coord = nv.ndim == 1 and nv.dimensions[0] == name
            assert var.is_coordinate == coord
            if coord:
                assert var.values is not None and same(var.values, expected), name
            else:
                assert var.values is None
            got = read_netcdf3_values(path, name)
            assert got.dtype == var.dtype and same(got, expected), name
    return inv


# -- fixtures -------------------------------------------------------------------------------

def write_everything(path: str, fmt: str) -> None:
    """Every numeric type, fixed and record, 1-D to 3-D, odd sizes, fills, attributes."""
    with netCDF4.Dataset(path, "w", format=fmt) as ds:
        ds.createDimension("time", None)
        ds.createDimension("x", 3)  # odd: byte/short records need padding
        ds.createDimension("y", 5)
        ds.createDimension("z", 2)
        ds.title = "every type"
        ds.history = "trailing NULs\x00\x00"
        ds.empty = ""
        for i, t in enumerate(types_for(fmt)):
            ds.setncattr(f"att_{t}", np.array([1, 2, 3][: 1 + i % 3], dtype=t))
            ds.setncattr(f"one_{t}", np.array(7, dtype=t))
        t = ds.createVariable("time", "f8", ("time",))
        t.units = "days since 2000-01-01"
        t[:] = np.arange(4) * 0.5
        xs = ds.createVariable("x", "i2", ("x",))
        xs[:] = [10, 20, 30]
        ds.createVariable("label", "S1", ("x",))[:] = np.array(list("abc"), "S1")
        ds.createVariable("scalar", "f8", ())[...] = 3.25
        for k, ty in enumerate(types_for(fmt)):
            fill = {} if k % 2 else {"fill_value": sample(ty, (1,), 99)[0]}
            fixed = ds.createVariable(f"fixed_{ty}", ty, ("y", "x"), **fill)
            fixed[:] = sample(ty, (5, 3), k)
            fixed.long_name = f"fixed {ty}"
            fixed.valid_range = np.array([0, 100], dtype=ty)
            cube = ds.createVariable(f"cube_{ty}", ty, ("z", "y", "x"))
            cube[:] = sample(ty, (2, 5, 3), k + 20)
            rec1 = ds.createVariable(f"rec_{ty}", ty, ("time",), **fill)
            rec1[:] = sample(ty, (4,), k + 40)
            rec2 = ds.createVariable(f"rec2_{ty}", ty, ("time", "x"))
            rec2[:] = sample(ty, (4, 3), k + 60)
            rec3 = ds.createVariable(f"rec3_{ty}", ty, ("time", "y", "x"), **fill)
            rec3[:2] = sample(ty, (2, 5, 3), k + 80)  # records 2, 3 read as fill
        ds.createVariable("rec_char", "S1", ("time", "x"))


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_type_and_layout(tmp_path, fmt):
    path = str(tmp_path / "all.nc")
    write_everything(path, fmt)
    inv = check_against_netcdf4(path, fmt)
    assert inv.dimensions["time"].size == 4 and inv.dimensions["time"].unlimited
    # Record variables: one block per record, interleaved (all the same stride).
    rec = inv.variables["rec2_i1"].blocks
    assert rec.block_shape == (1, 3) and rec.grid_shape == (4, 1)
    assert set(rec.refs["length"].ravel()) == {3}  # the data bytes, not the padded vsize
    strides = {int(np.diff(inv.variables[n].blocks.refs["offset"].ravel().astype(np.int64))[0])
               for n, v in inv.variables.items() if n.startswith("rec") and v.blocks is not None}
    assert len(strides) == 1
    fixed = inv.variables["cube_f8"].blocks
    assert fixed.block_shape == (2, 5, 3) and fixed.grid_shape == (1, 1, 1)
    assert fixed.refs["length"].item() == 2 * 5 * 3 * 8
    scalar = inv.variables["scalar"].blocks
    assert scalar.block_shape == () and scalar.refs["length"].item() == 8
    assert inv.variables["rec3_i1"].attrs["_FillValue"] == inv.variables["rec3_i1"].fill_value
    assert inv.variables["rec3_i1"].fill_value != -127  # not the default
    assert inv.variables["rec3_i2"].fill_value == -32767  # the default
    assert inv.groups[""]["history"] == "trailing NULs"
    # Only the header (one first read, doubled when too short), the two coordinates
    # ('time': 4 records of 8 bytes, 'x': 3 shorts) and the text (NC_CHAR) variables, at
    # most their records' span, are read, not the data.
    h = header_of(path)
    text = sum(h.recsize * h.numrecs if v.is_record else v.nbytes
               for v in h.variables if v.nc_type == 2)
    assert inv.bytes_read <= max(2 * h.header_len, 8192) + 4 * 8 + 3 * 2 + text


@pytest.mark.parametrize("fmt", FORMATS)
def test_scan_reads_header_and_coordinates_only(tmp_path, fmt):
    path = str(tmp_path / "big.nc")
    with netCDF4.Dataset(path, "w", format=fmt) as ds:
        ds.createDimension("time", None)
        ds.createDimension("lat", 100)
        ds.createDimension("lon", 100)
        ds.createVariable("lat", "f4", ("lat",))[:] = np.arange(100)
        ds.createVariable("lon", "f4", ("lon",))[:] = np.arange(100)
        ds.createVariable("time", "f8", ("time",))[:] = np.arange(50)
        ds.createVariable("t", "f4", ("time", "lat", "lon"))[:] = sample("f4", (50, 100, 100))
    inv = check_against_netcdf4(path, fmt)
    assert inv.size > 2_000_000
    # One first header read (8 KiB), then exactly the coordinates' bytes: 'time' is
    # gathered record by record (40 KB apart), not read as a span.
    assert inv.bytes_read == 8192 + 100 * 4 * 2 + 50 * 8


@pytest.mark.parametrize("fmt,ty", [(f, t) for f in FORMATS for t in ["i1", "i2", "f8", "u2"]
                                     if t in types_for(f)])
@pytest.mark.parametrize("shape", [(), (3,), (3, 5)])
def test_one_record_variable_is_contiguous(tmp_path, fmt, ty, shape):
    path = str(tmp_path / "one.nc")
    with netCDF4.Dataset(path, "w", format=fmt) as ds:
        ds.createDimension("time", None)
        names = ["a", "b"][: len(shape)]
        for n, size in zip(names, shape):
            ds.createDimension(n, size)
        ds.createVariable("fixed", "i1", tuple(names) or ())[...] = 1
        v = ds.createVariable("v", ty, ("time", *names))
        v[:] = sample(ty, (7, *shape), 5)  # odd record count and odd record sizes
    inv = check_against_netcdf4(path, fmt)
    bt = inv.variables["v"].blocks
    assert bt.block_shape == (7, *shape)
    assert bt.grid_shape == (1,) * (1 + len(shape))
    # No padding between records: one run of exactly the data bytes.
    assert bt.refs["length"].item() == 7 * math.prod(shape) * np.dtype(ty).itemsize


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("nrec_vars", [1, 2])
def test_zero_records(tmp_path, fmt, nrec_vars):
    path = str(tmp_path / "empty.nc")
    with netCDF4.Dataset(path, "w", format=fmt) as ds:
        ds.createDimension("time", None)
        ds.createDimension("x", 3)
        ds.createVariable("fixed", "f4", ("x",))[:] = [1, 2, 3]
        for i in range(nrec_vars):
            ds.createVariable(f"r{i}", "i2", ("time", "x"))
        if nrec_vars == 2:  # a third, 1-D record variable: a record coordinate
            ds.createVariable("time", "f8", ("time",))
    inv = check_against_netcdf4(path, fmt)
    assert inv.dimensions["time"].size == 0
    for name, var in inv.variables.items():
        if name != "fixed":
            assert var.shape[0] == 0
            assert var.blocks.grid_shape[0] == 0
            assert var.blocks.refs.size == 0


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_dimensions_no_attributes(tmp_path, fmt):
    """Absent lists (ZERO ZERO, with a 64-bit count in CDF-5)."""
    path = str(tmp_path / "bare.nc")
    with netCDF4.Dataset(path, "w", format=fmt) as ds:
        ds.createVariable("s", "i4", ())[...] = 42
    inv = check_against_netcdf4(path, fmt)
    assert inv.dimensions == {} and inv.groups == {"": {}}

    path = str(tmp_path / "nothing.nc")
    netCDF4.Dataset(path, "w", format=fmt).close()
    inv = scan_netcdf3(path)
    assert inv.variables == {} and inv.dimensions == {}


# -- ncgen ---------------------------------------------------------------------------------

CDL = """
netcdf small {
dimensions:
    time = UNLIMITED ;
    lat = 3 ;
    lon = 5 ;
variables:
    double time(time) ;
        time:units = "hours since 2001-01-01" ;
    float lat(lat) ;
    short t(time, lat, lon) ;
        t:_FillValue = -999s ;
        t:scale_factor = 0.5f ;
        t:flags = 1b, 2b, 3b ;
    byte b(time, lon) ;
    %(extra_decl)s
    char name(lon) ;
// global attributes:
    :Conventions = "CF-1.8" ;
    :version = 2.5 ;
data:
    time = 0, 6, 12 ;
    lat = -10, 0, 10 ;
    t = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
        16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, _,
        31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45 ;
    b = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, -11, -12, -13, -14, -15 ;
    %(extra_data)s
    name = "abcde" ;
}
"""
CDF5_EXTRA = {
    "extra_decl": "uint64 big(lon) ; ubyte ub(time) ; ushort us(lat) ; int64 i64(time) ;",
    "extra_data": "big = 1, 2, 3, 18446744073709551610, 5 ; ub = 1, 255, 7 ; us = 1, 2, 65000 ;"
                  " i64 = -9000000000, 0, 9000000000 ;",
}


@pytest.mark.needs("ncgen")
@pytest.mark.parametrize("kind,fmt", [("classic", "NETCDF3_CLASSIC"),
                                      ("64-bit-offset", "NETCDF3_64BIT_OFFSET"),
                                      ("64-bit-data", "NETCDF3_64BIT_DATA")])
def test_ncgen_files(tmp_path, kind, fmt):
    extra = CDF5_EXTRA if kind == "64-bit-data" else {"extra_decl": "", "extra_data": ""}
    cdl = tmp_path / "small.cdl"
    cdl.write_text(CDL % extra)
    path = str(tmp_path / "small.nc")
    subprocess.run(["ncgen", "-k", kind, "-o", path, str(cdl)], check=True)
    inv = check_against_netcdf4(path, fmt)
    assert inv.variables["t"].fill_value == -999
    assert inv.variables["t"].attrs["flags"] == [1, 2, 3]
    assert inv.groups[""] == {"Conventions": "CF-1.8", "version": 2.5}
    assert inv.problems == [] and inv.variables["name"].dtype.kind == "T"  # NC_CHAR: text


# -- broken files ----------------------------------------------------------------------------

def header_of(path: str):
    with open(path, "rb") as f:
        return parse_header(f, path, os.path.getsize(path))


def write_simple(path: str, fmt: str) -> None:
    with netCDF4.Dataset(path, "w", format=fmt) as ds:
        ds.createDimension("time", None)
        ds.createDimension("x", 3)
        ds.note = "a header with a bit of everything"
        ds.createVariable("x", "f4", ("x",))[:] = [1, 2, 3]
        v = ds.createVariable("v", "i2", ("time", "x"), fill_value=-5)
        v.units = "K"
        v[:] = np.arange(12).reshape(4, 3)
        ds.createVariable("time", "f8", ("time",))[:] = [0, 1, 2, 3]


def corrupt_problem(excinfo, path: str):
    (p,) = excinfo.value.problems
    assert p.kind == "corrupt" and p.fatal
    assert p.loc.file == path
    assert path in str(excinfo.value)
    return p


@pytest.mark.parametrize("fmt", FORMATS)
def test_truncated_header_names_file_and_offset(tmp_path, fmt):
    full = tmp_path / "full.nc"
    write_simple(str(full), fmt)
    data = full.read_bytes()
    header_len = header_of(str(full)).header_len
    # netCDF-C puts the first variable right after the header.
    assert header_len == min(int(v.blocks.refs["offset"].min())
                             for v in scan_netcdf3(str(full)).variables.values())
    cut = tmp_path / "cut.nc"
    for n in range(header_len):
        cut.write_bytes(data[:n])
        with pytest.raises(VirtualizeError) as ei:
            scan_netcdf3(str(cut))
        p = corrupt_problem(ei, str(cut))
        if n >= 4:  # past the magic number, the message says where the header stops
            assert f"header ends at byte {n}" in p.message, p.message
            assert "byte offset" in p.message
    cut.write_bytes(data[:header_len])  # the header alone parses
    assert header_of(str(cut)).header_len == header_len


def test_truncated_header_message_names_the_field(tmp_path):
    full = tmp_path / "full.nc"
    write_simple(str(full), "NETCDF3_CLASSIC")
    # magic(4) numrecs(4) tag(4) count(4), dimension 0: name length(4) 'time'(4) length(4),
    # dimension 1: name length at 28.
    cut = tmp_path / "cut.nc"
    cut.write_bytes(full.read_bytes()[:30])
    with pytest.raises(VirtualizeError) as ei:
        scan_netcdf3(str(cut))
    p = corrupt_problem(ei, str(cut))
    assert p.message == ("header ends at byte 30 (end of file) while reading the name length "
                         "of dimension 1 at byte offset 28")


@pytest.mark.parametrize("fmt", FORMATS)
def test_truncated_data_is_a_located_problem(tmp_path, fmt):
    path = tmp_path / "t.nc"
    write_simple(str(path), fmt)
    data = path.read_bytes()
    ok = scan_netcdf3(str(path))
    assert ok.problems == []
    # Cut inside the last record (v: 6 bytes + 2 padding, time: 8 bytes): the record
    # variables lose data, 'x' (fixed) does not.
    path.write_bytes(data[:-12])
    inv = scan_netcdf3(str(path))
    bad = {p.loc.variable: p for p in inv.problems}
    assert set(bad) == {"v", "time"}
    for p in bad.values():
        assert p.kind == "truncated" and p.fatal and p.loc.file == str(path)
        assert f"only {len(data) - 12} bytes" in p.message
    assert inv.variables["time"].values is None  # not read past the end
    assert str(len(data) - 12 + 2) in bad["v"].message  # expected size: v's last byte
    assert str(len(data)) in bad["time"].message
    # Cut into the fixed data.
    x = ok.variables["x"].blocks.refs.ravel()[0]
    path.write_bytes(data[: int(x["offset"]) + 2])
    inv = scan_netcdf3(str(path))
    assert {p.loc.variable for p in inv.problems} == {"x", "v", "time"}
    with pytest.raises(VirtualizeError) as ei:
        read_netcdf3_values(str(path), "x")
    assert ei.value.problems[0].kind == "truncated"


@pytest.mark.parametrize("head", [b"CDF\x03", b"CDF\x00", b"\x89HDF\r\n\x1a\n", b"cdf\x01", b"CD"])
def test_bad_magic(tmp_path, head):
    path = tmp_path / "bad.nc"
    path.write_bytes(head + b"\x00" * 40)
    with pytest.raises(VirtualizeError) as ei:
        scan_netcdf3(str(path))
    p = corrupt_problem(ei, str(path))
    assert "magic" in p.message and "byte offset 0" in p.message


def patch(path, offset: int, raw: bytes) -> None:
    data = bytearray(path.read_bytes())
    data[offset:offset + len(raw)] = raw
    path.write_bytes(bytes(data))


def one_var_file(path, fmt: str) -> tuple[int, int, int]:
    """A file whose header ends with the one variable's nc_type, vsize, begin.

    Returns (offset of nc_type, NON_NEG width, OFFSET width)."""
    with netCDF4.Dataset(str(path), "w", format=fmt) as ds:
        ds.createDimension("x", 3)
        ds.createVariable("v", "i4", ("x",))[:] = [1, 2, 3]
    size_w = 8 if fmt == "NETCDF3_64BIT_DATA" else 4
    off_w = 4 if fmt == "NETCDF3_CLASSIC" else 8
    end = header_of(str(path)).header_len
    return end - off_w - size_w - 4, size_w, off_w


@pytest.mark.parametrize("fmt", FORMATS)
def test_unknown_nc_type(tmp_path, fmt):
    path = tmp_path / "t.nc"
    at, _, _ = one_var_file(path, fmt)
    assert check_against_netcdf4(str(path)).variables["v"].dtype == np.dtype(">i4")
    patch(path, at, (99).to_bytes(4, "big"))
    with pytest.raises(VirtualizeError) as ei:
        scan_netcdf3(str(path))
    assert corrupt_problem(ei, str(path)).message == (
        f"unknown nc_type 99 for variable 'v' at byte offset {at}")


@pytest.mark.parametrize("fmt", ["NETCDF3_CLASSIC", "NETCDF3_64BIT_OFFSET"])
def test_cdf5_types_are_rejected_in_older_versions(tmp_path, fmt):
    path = tmp_path / "t.nc"
    at, _, _ = one_var_file(path, fmt)
    patch(path, at, (10).to_bytes(4, "big"))  # NC_INT64
    with pytest.raises(VirtualizeError) as ei:
        scan_netcdf3(str(path))
    assert "only in CDF-5" in corrupt_problem(ei, str(path)).message


def test_negative_sizes_and_bad_ids(tmp_path):
    path = tmp_path / "t.nc"
    fmt = "NETCDF3_64BIT_DATA"
    at, size_w, _ = one_var_file(path, fmt)
    original = path.read_bytes()
    # The begin offset (last 8 header bytes) made negative.
    patch(path, at + 4 + size_w, (-8).to_bytes(8, "big", signed=True))
    with pytest.raises(VirtualizeError) as ei:
        scan_netcdf3(str(path))
    assert corrupt_problem(ei, str(path)).message == (
        f"the begin offset of variable 'v' is negative (-8) at byte offset {at + 4 + size_w}")
    # Dimension length of 'x': magic 4, numrecs 8, tag 4, count 8, name len 8, name 4.
    path.write_bytes(original)
    patch(path, 36, (-3).to_bytes(8, "big", signed=True))
    with pytest.raises(VirtualizeError) as ei:
        scan_netcdf3(str(path))
    msg = corrupt_problem(ei, str(path)).message
    assert "negative" in msg and "dimension 0" in msg and "byte offset 36" in msg
    # The variable's dimension id points past the one dimension.
    path.write_bytes(original)
    h = header_of(str(path))
    # The var entry ends: ... dimid(8), ABSENT attributes: tag(4) count(8), nc_type at `at`.
    dimid_at = at - 8 - 4 - 8
    assert h.variables[0].dimids == (0,)
    patch(path, dimid_at, (5).to_bytes(8, "big"))
    with pytest.raises(VirtualizeError) as ei:
        scan_netcdf3(str(path))
    assert "dimension id 5" in corrupt_problem(ei, str(path)).message


@pytest.mark.parametrize("fmt", FORMATS)
def test_absurd_counts_fail_fast(tmp_path, fmt):
    path = tmp_path / "t.nc"
    one_var_file(path, fmt)
    width = 8 if fmt == "NETCDF3_64BIT_DATA" else 4
    count_at = 4 + width + 4  # magic, numrecs, the dimension list tag
    patch(path, count_at, (2**31 - 1).to_bytes(width, "big"))
    with pytest.raises(VirtualizeError) as ei:
        scan_netcdf3(str(path))
    msg = corrupt_problem(ei, str(path)).message
    assert f"{2**31 - 1} dimensions counted at byte offset {count_at - 4}" in msg


def test_begin_inside_header(tmp_path):
    path = tmp_path / "t.nc"
    at, size_w, off_w = one_var_file(path, "NETCDF3_CLASSIC")
    patch(path, at + 4 + size_w, (8).to_bytes(off_w, "big"))
    with pytest.raises(VirtualizeError) as ei:
        scan_netcdf3(str(path))
    assert "inside the header" in corrupt_problem(ei, str(path)).message


# -- STREAMING numrecs -------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("single", [False, True])
def test_streaming_numrecs(tmp_path, fmt, single):
    path = tmp_path / "s.nc"
    with netCDF4.Dataset(str(path), "w", format=fmt) as ds:
        ds.createDimension("time", None)
        ds.createDimension("x", 3)
        ds.createVariable("fixed", "f4", ("x",))[:] = [1, 2, 3]
        ds.createVariable("a", "i2", ("time", "x"))[:] = sample("i2", (6, 3))
        if not single:
            ds.createVariable("time", "f8", ("time",))[:] = np.arange(6.0)
    with netCDF4.Dataset(str(path)) as ds:
        ds.set_auto_maskandscale(False)
        expected = {n: v[...] for n, v in ds.variables.items()}
    width = 8 if fmt == "NETCDF3_64BIT_DATA" else 4
    assert int.from_bytes(path.read_bytes()[4:4 + width], "big") == 6
    patch(path, 4, b"\xff" * width)
    inv = scan_netcdf3(str(path))
    assert inv.problems == []
    assert inv.dimensions["time"].size == 6
    for name, var in inv.variables.items():
        assert same(rebuild(str(path), var), expected[name]), name
        assert same(read_netcdf3_values(str(path), name), expected[name]), name


def test_streaming_file_cut_inside_a_record(tmp_path):
    path = tmp_path / "s.nc"
    with netCDF4.Dataset(str(path), "w", format="NETCDF3_CLASSIC") as ds:
        ds.createDimension("time", None)
        ds.createDimension("x", 3)
        ds.createVariable("a", "i4", ("time", "x"))[:] = np.arange(18).reshape(6, 3)
        ds.createVariable("time", "f8", ("time",))[:] = np.arange(6.0)
    patch(path, 4, b"\xff" * 4)
    path.write_bytes(path.read_bytes()[:-5])  # the last record is cut short
    inv = scan_netcdf3(str(path))
    assert [(p.kind, p.fatal) for p in inv.problems] == [("partial-record", False)]
    assert inv.dimensions["time"].size == 5


def test_empty_file_says_so(tmp_path):
    from virtualize import check

    path = tmp_path / "empty.nc"
    path.write_bytes(b"")
    (p,) = check([path]).problems
    assert p.kind == "unknown-format" and "empty file" in p.message


def test_read_values_unknown_variable(tmp_path):
    path = tmp_path / "t.nc"
    write_simple(str(path), "NETCDF3_CLASSIC")
    with pytest.raises(KeyError):
        read_netcdf3_values(str(path), "nope")


def test_dispatch_through_scan(tmp_path):
    from virtualize.formats import read_values, scan
    path = tmp_path / "t.nc"
    write_simple(str(path), "NETCDF3_64BIT_OFFSET")
    inv = scan(str(path))
    assert inv.format == "netcdf3-cdf2"
    assert same(read_values(str(path), "v"), np.arange(12).reshape(4, 3))


def test_region_reads(tmp_path):
    from virtualize.formats import SourceReader

    path = str(tmp_path / "r.nc")
    with netCDF4.Dataset(path, "w", format="NETCDF3_64BIT_OFFSET") as ds:
        ds.createDimension("time", None)
        ds.createDimension("x", 5)
        ds.createVariable("a", "i2", ("time", "x"))[:] = np.arange(35).reshape(7, 5)
        ds.createVariable("b", "f8", ("x",))[:] = np.arange(5) * 1.5
    with SourceReader(path) as r:
        assert r.read("a", ((2, 5), (1, 4))).tolist() == (np.arange(35).reshape(7, 5)[2:5, 1:4]).tolist()
        assert r.read("b", ((3, 5),)).tolist() == [4.5, 6.0]


@pytest.mark.parametrize("char,escaped", [(b"/", "ab%2Fcd"), (b"\x00", "ab%00cd"),
                                          (b"\x01", "ab%01cd"), (b"%", "ab%25cd")])
def test_names_a_path_cannot_hold_are_escaped_reversibly(tmp_path, char, escaped):
    """netCDF-C reads classic files whose names hold '/', NUL or control characters
    (the spec forbids them): such names are percent-encoded for the cube path ('%' too,
    so that unquoting gives the name back), the original kept in an attribute."""
    from urllib.parse import unquote

    import virtualize

    src = tmp_path / "n.nc"
    with netCDF4.Dataset(src, "w", format="NETCDF3_CLASSIC") as nc:
        nc.createDimension("x", 2)
        nc.createVariable("abXcd", "f4", ("x",))[:] = [1, 2]
    p = tmp_path / "odd.nc"
    p.write_bytes(src.read_bytes().replace(b"abXcd", b"ab" + char + b"cd"))
    virtualize.virtualize([p], tmp_path / "c.zarr")
    cube = virtualize.open(tmp_path / "c.zarr")
    arr = cube[escaped]
    assert arr[...].tolist() == [1, 2]
    original = arr.attrs["_virtualize_original_name"]
    assert original == "ab" + char.decode() + "cd" == unquote(escaped)
