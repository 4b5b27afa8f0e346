"""HDF4 SD datasets: every SDS read through the cube (virtualize.open, xarray's
engine="virtualize", the kerchunk JSON export read with fsspec + zarr) equals pyhdf's
`SD(path).select(name).get()`, bit for bit; what has no exact reference is inlined or
refused, located."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import virtualize
from virtualize.model import VirtualizeError

from helpers import assert_same, kerchunk_group, kerchunk_xarray

SD = pytest.importorskip("pyhdf.SD")
xr = pytest.importorskip("xarray")

import make_hdf4  # noqa: E402  (fixtures/ is on sys.path: tests/conftest.py)


@pytest.fixture(scope="module")
def hdf4_case(tmp_path_factory):
    root = tmp_path_factory.mktemp("hdf4")
    built: dict = {}

    def get(name):
        if name not in built:
            built[name] = make_hdf4.make(f"hdf4_{name}", root)
        return built[name]

    return get


def pyhdf_read(path, name) -> np.ndarray:
    sd = SD.SD(str(path))
    try:
        return np.asarray(sd.select(name).get())
    finally:
        sd.end()


def pyhdf_names(path) -> list[str]:
    sd = SD.SD(str(path))
    try:
        return list(sd.datasets())
    finally:
        sd.end()


def roundtrip(files, tmp_path, **kw):
    cube, refs = tmp_path / "cube.zarr", tmp_path / "cube.json"
    report = virtualize.virtualize(files, cube, **kw)
    virtualize.virtualize(files, refs, **kw)
    return report, virtualize.open(cube), kerchunk_group(refs)


def test_every_sds_reads_like_pyhdf(hdf4_case, tmp_path):
    (path,) = hdf4_case("sds")
    report, g, k = roundtrip([path], tmp_path)
    assert report.ok, report.problems
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize", mask_and_scale=False)
    kx = kerchunk_xarray(tmp_path / "cube.json", mask_and_scale=False)
    names = pyhdf_names(path)
    assert set(report.plan.arrays) == set(names)
    for var in names:
        want = pyhdf_read(path, var)
        assert_same(g[var][...], want, var)
        assert_same(k[var][...], want, f"{var}: kerchunk export")
        assert_same(ds[var].values, want, f"{var}: xarray")
        assert_same(kx[var].values, want, f"{var}: kerchunk via xarray")
    # nothing was inlined: every SDS is references (or fill)
    assert all(a.inline is None for a in report.plan.arrays.values())


def test_layouts_are_referenced_as_stored(hdf4_case):
    from virtualize.formats import scan

    (path,) = hdf4_case("sds")
    inv = scan(path)
    v = inv.variables
    assert v["temperature"].dtype == np.dtype(">f4")  # big-endian as stored
    assert v["chunked"].blocks.block_shape == (4, 5) and v["chunked"].blocks.padded
    assert v["chunked"].blocks.refs.shape == (3, 3)
    assert v["chunked_deflate"].codecs[1]["name"] == "numcodecs.zlib"
    assert v["deflate_whole"].codecs[1] == {"name": "numcodecs.zlib",
                                            "configuration": {"level": 4}}
    # never written: no block at all, read as the fill value
    assert (v["never"].blocks.refs["length"] == 0).all() and v["never"].fill_value == 2.5
    assert (v["never_chunked"].blocks.refs["length"] == 0).all()
    assert v["never_nofill"].fill_value == -2147483647  # the HDF4 library's default
    # partly written chunked: absent chunks, not zeros
    written = v["partial"].blocks.refs["length"] > 0
    assert written.sum() == 2 and v["partial"].fill_value == -999
    assert (v["partial_deflate"].blocks.refs["length"] > 0).sum() == 1
    # unlimited: its real length
    assert v["records"].shape == (5, 4) and v["records"].dims == ("time", "band")
    # the scan reads metadata: far less than the file
    assert inv.bytes_read < inv.size


def test_fill_values_of_never_written_data_are_pyhdfs(hdf4_case, tmp_path):
    (path,) = hdf4_case("sds")
    _, g, _ = roundtrip([path], tmp_path)
    for var, fill in (("never", 2.5), ("never_nofill", -2147483647), ("never_chunked", -1),
                      ("never_deflate", 9.9692099683868690e+36)):
        want = pyhdf_read(path, var)
        assert (want == fill).all()
        assert_same(g[var][...], want, var)
    # a _FillValue set after SDsetchunk: pyhdf reads absent chunks as the chunk header's
    want = pyhdf_read(path, "fill_after_chunking")
    assert want[5, 5] == -32767 and want[0, 0] == 1
    assert_same(g["fill_after_chunking"][...], want, "fill_after_chunking")
    assert (pyhdf_read(path, "partial") == -999).sum() > 0
    assert_same(g["partial"][...], pyhdf_read(path, "partial"), "partial")


def test_dimensions_scales_and_attributes(hdf4_case, tmp_path):
    (path,) = hdf4_case("sds")
    report, g, _ = roundtrip([path], tmp_path)
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize")
    assert ds["temperature"].dims == ("y", "x")
    assert "y" in ds.coords and "x" in ds.coords
    assert_same(ds["y"].values, pyhdf_read(path, "y"), "y scale")
    assert ds["temperature"].attrs["units"] == "K"
    assert ds["temperature"].attrs["valid_range"] == [-10.0, 10.0]
    assert ds["y"].attrs["units"] == "degrees_north"
    assert (ds.attrs["title"], ds.attrs["version"], ds.attrs["ratio"]) == \
        ("an HDF4 fixture", 3, 0.25)
    assert ds["records"].dims == ("time", "band")
    # HDF4 calibration (SDsetcal) is not CF's: kept as stored, said
    (note,) = [p for p in report.problems if p.kind == "hdf4-calibration"]
    assert (note.loc.file, note.loc.variable, note.fatal) == (str(path), "counts", False)
    raw = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize", mask_and_scale=False)
    assert raw["counts"].attrs["add_offset"] == 12.5
    assert_same(raw["counts"].values, pyhdf_read(path, "counts"), "counts, stored")


def test_unexact_compressions_are_inlined_when_small_else_refused(hdf4_case, tmp_path):
    (path,) = hdf4_case("codecs")
    report = virtualize.check([path])
    for var in ("rle", "skphuff", "chunked_rle"):
        assert any(n.startswith(f"{var}: cannot be referenced") for n in report.notes), \
            report.notes
        assert report.plan.arrays[var].inline is not None
    strict = virtualize.check([path], inline_threshold=0)
    got = {(p.loc.file, p.loc.variable, p.kind) for p in strict.problems if p.fatal}
    assert got == {(str(path), "rle", "unsupported-compression"),
                   (str(path), "skphuff", "unsupported-compression"),
                   (str(path), "chunked_rle", "unsupported-compression")}
    report, g, k = roundtrip([path], tmp_path)
    assert report.ok
    for var in pyhdf_names(path):
        assert_same(g[var][...], pyhdf_read(path, var), var)
        assert_same(k[var][...], pyhdf_read(path, var), f"{var}: kerchunk export")
    # linked blocks (a record variable written in pieces) are references: one block, or
    # blocks of whole records (64 of 100 here) as chunks along the record axis
    assert report.plan.arrays["linked"].inline is None
    assert report.plan.arrays["linked_many"].inline is None


def test_linked_blocks_of_whole_records_are_chunks(hdf4_case):
    from virtualize.formats import scan

    (path,) = hdf4_case("codecs")
    v = scan(path).variables["linked_many"]
    assert v.shape == (100, 3) and v.blocks.block_shape == (64, 3) and not v.blocks.padded
    assert v.blocks.refs["length"].reshape(-1).tolist() == [768, 432]


def test_granules_stack_along_their_record_dimension(hdf4_case, tmp_path):
    files = hdf4_case("granules")
    report, g, k = roundtrip(files, tmp_path, concat_dim="time")
    assert report.ok, report.problems
    want = np.concatenate([pyhdf_read(f, "sst") for f in files])
    assert want.shape == (10, 4, 5)
    assert report.plan.arrays["sst"].chunk_lengths[0] == (3, 5, 2)
    assert_same(g["sst"][...], want, "stack")
    assert_same(k["sst"][...], want, "stack: kerchunk export")
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize")
    assert_same(ds["sst"].values, want, "stack via xarray")
    assert list(ds["time"].values) == list(range(10))


@pytest.mark.parametrize("form", ["attr:RangeBeginningDate", "list"])
def test_daily_granules_stack_along_a_new_axis_by_coord(hdf4_case, tmp_path, form):
    files = hdf4_case("daily")
    if form == "list":
        form = "2024-01-01,2024-01-02,2024-01-03"
    cube, refs = tmp_path / "cube.zarr", tmp_path / "cube.json"
    report = virtualize.virtualize(files, cube, concat_dims=["time"], coords={"time": form})
    assert report.ok, report.problems
    virtualize.virtualize(files, refs, concat_dims=["time"], coords={"time": form})
    assert report.plan.arrays["LST"].dims == ("time", "YDim:grid", "XDim:grid")
    want = np.stack([pyhdf_read(f, "LST") for f in files])
    assert_same(virtualize.open(cube)["LST"][...], want, "LST stack")
    assert_same(kerchunk_group(refs)["LST"][...], want, "LST stack: kerchunk export")
    ds = xr.open_dataset(cube, engine="virtualize", mask_and_scale=False)
    assert_same(ds["LST"].values, want, "LST stack via xarray")
    assert [str(t)[:10] for t in ds["time"].values] == ["2024-01-01", "2024-01-02",
                                                          "2024-01-03"]


def test_cli_stacks_granules(hdf4_case, tmp_path):
    from virtualize.cli import main

    files = hdf4_case("granules")
    assert main([*map(str, files), "-o", str(tmp_path / "c.zarr"), "--concat-dim", "time"]) \
        in (0, None)
    assert virtualize.open(tmp_path / "c.zarr")["sst"].shape == (10, 4, 5)


def test_sniff_and_suffixes():
    from virtualize.formats import registry

    fmt = registry.sniff(b"\x0e\x03\x13\x01\x00\x10\x00\x00")
    assert fmt is not None and fmt.name == "hdf4"
    assert ".hdf" in registry.suffixes()


def test_missing_pyhdf_is_a_located_problem_naming_the_extra(hdf4_case, monkeypatch):
    from virtualize.formats import hdf4 as plugin
    from virtualize.formats import scan

    (path,) = hdf4_case("sds")
    monkeypatch.setattr(plugin, "_pyhdf", lambda: None)
    with pytest.raises(VirtualizeError) as e:
        scan(path)
    (p,) = e.value.problems
    assert p.kind == "missing-library" and p.loc.file == str(path)
    assert "virtualize[hdf4]" in p.message


# -- damaged files: clean, located refusals -------------------------------------------------

def _damaged(src, tmp_path, edit, name="bad.hdf"):
    data = bytearray(src.read_bytes())
    data = edit(data)
    out = tmp_path / name
    out.write_bytes(bytes(data))
    return out


def _dd_offset(data: bytes, tag: int) -> int:
    """Byte offset of the first DD of `tag` in the first DD block."""
    import struct

    ndd = struct.unpack(">H", data[4:6])[0]
    for k in range(ndd):
        at = 10 + 12 * k
        if struct.unpack(">H", data[at:at + 2])[0] & 0x3FFF == tag:
            return at
    raise KeyError(tag)


@pytest.mark.parametrize("edit,what", [
    (lambda d: d[:len(d) // 2], "truncated"),
    (lambda d: d[:3000], "truncated"),
    (lambda d: d[:6] + b"\x7f\xff\xff\xf0" + d[10:], "next"),  # a DD block link past the end
    (lambda d: b"\x0e\x03\x13\x01\xff\xff" + d[6:], "count"),  # more DDs than the file holds
])
def test_damaged_files_are_refused_located(hdf4_case, tmp_path, edit, what):
    (path,) = hdf4_case("sds")
    bad = _damaged(path, tmp_path, edit)
    report = virtualize.check([bad])
    assert not report.ok
    fatal = [p for p in report.problems if p.fatal]
    assert fatal and all(p.loc.file == str(bad) for p in fatal)
    assert all(p.kind in ("corrupt", "truncated", "unreadable") for p in fatal), fatal


def test_a_flipped_data_descriptor_is_refused_at_its_sds(hdf4_case, tmp_path):
    import struct

    (path,) = hdf4_case("sds")

    def flip(d):  # the first SD's offset far past the end of the file
        at = _dd_offset(d, 702)
        d[at + 4:at + 8] = struct.pack(">I", 0x7FFFFFF0)
        return d

    bad = _damaged(path, tmp_path, flip)
    report = virtualize.check([bad])
    fatal = [p for p in report.problems if p.fatal]
    assert fatal and fatal[0].loc.file == str(bad)
    assert fatal[0].loc.variable == "temperature"


def test_hdfeos2_grids_and_swaths_from_struct_metadata(hdf4_case, tmp_path):
    (path,) = hdf4_case("eos")
    report, g, k = roundtrip([path], tmp_path)
    assert report.ok, report.problems
    for var in pyhdf_names(path):
        assert_same(g[var][...], pyhdf_read(path, var), var)
        assert_same(k[var][...], pyhdf_read(path, var), f"{var}: kerchunk export")
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize")
    # swath: its DimList names, geolocation fields as coordinates
    t = ds["Temperature"]
    assert t.dims == ("GeoTrack", "GeoXtrack") and t.attrs["HDFEOS_SWATH"] == "Swath1"
    assert {"Latitude", "Longitude"} <= set(t.coords)
    assert_same(t.coords["Latitude"].values, pyhdf_read(path, "Latitude"), "latitude")
    # grids: their definition as attributes; two grids' XDim / YDim stay apart
    p = ds["Pollution"]
    assert p.attrs["HDFEOS_GRID"] == "UTMGrid" and p.attrs["HDFEOS_Projection"] == "GCTP_UTM"
    assert p.attrs["HDFEOS_UpperLeftPointMtrs"] == [210584.50041, 3322395.95445]
    assert p.dims == ("YDim:UTMGrid", "XDim:UTMGrid")
    assert ds["Snow"].dims == ("YDim:Grid2", "XDim:Grid2")
    # the UTM grid's projection x / y (two grids: named as their dimensions); Grid2 has
    # no corners: none (a note, test_hdfeos2_grid_without_separable_coordinates...)
    ulx, uly, lrx, lry = 210584.500410, 3322395.954450, 813931.109590, 2214162.532780
    np.testing.assert_array_equal(ds["XDim:UTMGrid"].values,
                                  ulx + (np.arange(3) + 0.5) * ((lrx - ulx) / 3))
    np.testing.assert_array_equal(ds["YDim:UTMGrid"].values,
                                  uly + (np.arange(4) + 0.5) * ((lry - uly) / 4))
    assert ds["XDim:UTMGrid"].attrs["units"] == "m"
    assert "XDim:Grid2" not in ds.variables
    assert "StructMetadata.0" in ds.attrs


def test_hdfeos2_struct_metadata_parse():
    from virtualize.formats.hdf4 import eos

    (swath, grid, grid2) = eos.parse(make_hdf4.STRUCT)
    assert (swath.kind, swath.name, grid.kind, grid.name, grid2.name) == \
        ("swath", "Swath1", "grid", "UTMGrid", "Grid2")
    assert [(f.name, f.dims, f.geo) for f in swath.fields] == [
        ("Latitude", ("GeoTrack", "GeoXtrack"), True),
        ("Longitude", ("GeoTrack", "GeoXtrack"), True),
        ("Temperature", ("GeoTrack", "GeoXtrack"), False)]
    assert grid.attrs["HDFEOS_ZoneCode"] == 40


def _gdal_geotransform(path, grid, field):
    import json
    import subprocess

    out = subprocess.run(["gdalinfo", "-json", f'HDF4_EOS:EOS_GRID:"{path}":{grid}:{field}'],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["geoTransform"]


@pytest.mark.parametrize("key", ["geo", "sin"])
def test_hdfeos2_grid_coordinates(hdf4_case, tmp_path, key):
    """A GCTP_GEO grid (packed-DMS corners) and a sinusoidal one get XDim / YDim: the
    pixel centres between the corners, as HDF-EOS2's GDij2ll and GDAL's geotransform
    place them; read through virtualize.open and xarray, `sel` by them works."""
    import shutil

    path = next(p for p in hdf4_case("eos_grids") if p.stem == key)
    grid, nx, ny, _ = make_hdf4.EOS_GRIDS[key]
    report, g, k = roundtrip([path], tmp_path)
    assert report.ok and not report.problems, report.problems
    assert_same(g["Band"][...], pyhdf_read(path, "Band"), "Band")
    if key == "geo":  # (-10°30'00", 50°15'30") to (20°, 40°)
        ulx, uly, lrx, lry = -10.5, 50 + 15 / 60 + 30 / 3600, 20.0, 40.0
        std, units = ("longitude", "latitude"), ("degrees_east", "degrees_north")
    else:
        ulx, uly, lrx, lry = -1111950.519667, 5559752.598333, 0.0, 4447802.078667
        std, units = ("projection_x_coordinate", "projection_y_coordinate"), ("m", "m")
    x = ulx + (np.arange(nx) + 0.5) * ((lrx - ulx) / nx)
    y = uly + (np.arange(ny) + 0.5) * ((lry - uly) / ny)
    np.testing.assert_array_equal(g["XDim"][...], x)
    np.testing.assert_array_equal(g["YDim"][...], y)
    np.testing.assert_array_equal(k["XDim"][...], x)
    assert g["XDim"].dtype == np.float64
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize")
    assert ds["Band"].dims == ("YDim", "XDim")
    assert (ds.XDim.attrs["standard_name"], ds.YDim.attrs["standard_name"]) == std
    assert (ds.XDim.attrs["units"], ds.YDim.attrs["units"]) == units
    assert ds.XDim.attrs["HDFEOS_Projection"] == ("GCTP_GEO" if key == "geo" else
                                                 "GCTP_SNSOID")
    np.testing.assert_array_equal(ds["Band"].sel(XDim=x[2], YDim=y[1]).values,
                                  pyhdf_read(path, "Band")[1, 2])
    np.testing.assert_array_equal(ds["Band"].sel(XDim=x[3], method="nearest").values,
                                  pyhdf_read(path, "Band")[:, 3])
    if shutil.which("gdalinfo") is None:
        pytest.skip("gdalinfo is not installed: GDAL's geotransform not compared")
    x0, dx, _, y0, _, dy = _gdal_geotransform(path, grid, "Band")
    np.testing.assert_allclose(ds.XDim.values, x0 + (np.arange(nx) + 0.5) * dx, rtol=1e-12)
    np.testing.assert_allclose(ds.YDim.values, y0 + (np.arange(ny) + 0.5) * dy, rtol=1e-12)


def test_hdfeos2_grid_granules_stack_along_time_with_their_coordinates(hdf4_case, tmp_path):
    import shutil

    src = next(p for p in hdf4_case("eos_grids") if p.stem == "geo")
    files = [tmp_path / f"geo_2020010{k}.hdf" for k in (1, 2)]
    for f in files:
        shutil.copy(src, f)
    report, g, _ = roundtrip(files, tmp_path, concat_dim="time",
                             coords={"time": r"name:_(\d{8})"})
    assert report.ok and not report.problems, report.problems
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize")
    assert ds["Band"].dims == ("time", "YDim", "XDim")
    assert_same(ds["Band"].values, np.stack([pyhdf_read(f, "Band") for f in files]), "stack")
    assert ds.XDim.values[0] == -10.5 + 0.5 * 30.5 / 8 and ds.YDim.dims == ("YDim",)

def test_hdfeos2_grid_without_separable_coordinates_gets_a_note(hdf4_case, tmp_path):
    """A space oblique Mercator grid (blocked: x / y not separable) and a grid without
    corners get no XDim / YDim, a located note, their data read as ever."""
    path = next(p for p in hdf4_case("eos_grids") if p.stem == "som")
    report, g, _ = roundtrip([path], tmp_path)
    assert report.ok
    (note,) = report.problems
    assert (note.kind, note.fatal, note.loc.file) == ("hdfeos-metadata", False, str(path))
    assert "GCTP_SOM" in note.message and "SomGrid" in note.message
    assert "XDim" not in g and "YDim" not in g
    assert_same(g["Band"][...], pyhdf_read(path, "Band"), "Band")
    (path,) = hdf4_case("eos")
    report = virtualize.check([path])
    notes = [p for p in report.problems if p.kind == "hdfeos-metadata"]
    assert len(notes) == 1 and "Grid2" in notes[0].message and not notes[0].fatal


def test_hdfeos2_grid_of_other_lengths_than_its_definition_gets_a_note(tmp_path):
    from virtualize.formats import scan

    (grid, nx, ny, lines) = make_hdf4.EOS_GRIDS["sin"]
    path = tmp_path / "wrong.hdf"
    sd = SD.SD(str(path), SD.SDC.WRITE | SD.SDC.CREATE)
    sd.attr("StructMetadata.0").set(SD.SDC.CHAR8, make_hdf4._grid_struct(
        grid, f"\t\tXDim={nx + 1}\n\t\tYDim={ny}\n{lines}", (("Band", "DFNT_INT16"),)))
    v = sd.create("Band", SD.SDC.INT16, (ny, nx))
    v.dim(0).setname(f"YDim:{grid}")
    v.dim(1).setname(f"XDim:{grid}")
    v[:] = np.ones((ny, nx), "i2")
    v.endaccess()
    sd.end()
    inv = scan(path)
    assert set(inv.variables) == {"Band"} and inv.variables["Band"].dims == ("YDim", "XDim")
    (note,) = inv.problems
    assert note.kind == "hdfeos-metadata" and not note.fatal and "lengths" in note.message


def test_hdfeos2_grid_axes_registration_origin_dms():
    from virtualize.formats.hdf4 import eos

    assert eos.dms_degrees(-10030000.0) == -10.5
    assert eos.dms_degrees(50015030.0) == 50 + 15 / 60 + 30 / 3600
    assert eos.dms_degrees(-180000000.0) == -180.0
    assert eos.dms_degrees(0.0) == 0.0

    def grid(**kw):
        attrs = {"HDFEOS_XDim": 4, "HDFEOS_YDim": 2, "HDFEOS_Projection": "GCTP_PS",
                 "HDFEOS_UpperLeftPointMtrs": [0.0, 100.0],
                 "HDFEOS_LowerRightMtrs": [40.0, 80.0]}
        attrs.update({f"HDFEOS_{k}": v for k, v in kw.items()})
        return eos.grid_axes(eos.Structure("grid", "G", {k: v for k, v in attrs.items()
                                                          if v is not None}))

    x, y, units = grid()
    assert x.tolist() == [5.0, 15.0, 25.0, 35.0] and y.tolist() == [95.0, 85.0]
    assert units == "m"
    # corner registration: the pixel's point is the corner GridOrigin names
    x, y, _ = grid(PixelRegistration="HDFE_CORNER")
    assert x.tolist() == [0.0, 10.0, 20.0, 30.0] and y.tolist() == [100.0, 90.0]
    x, y, _ = grid(PixelRegistration="HDFE_CORNER", GridOrigin="HDFE_GD_LR")
    assert x.tolist() == [10.0, 20.0, 30.0, 40.0] and y.tolist() == [90.0, 80.0]
    x, y, _ = grid(GridOrigin="HDFE_GD_LR")  # (centre registration: the centre)
    assert x.tolist() == [5.0, 15.0, 25.0, 35.0]
    # none rather than wrong ones
    assert isinstance(grid(Projection="GCTP_SOM"), str)
    assert isinstance(grid(Projection="GCTP_BCEA"), str)  # (corners in packed degrees)
    assert isinstance(grid(Projection="GCTP_NEW"), str)
    assert isinstance(grid(Projection=None), str)
    assert isinstance(grid(LowerRightMtrs=None), str)
    assert isinstance(grid(UpperLeftPointMtrs=[1.0]), str)
    assert isinstance(grid(XDim=0), str)
    assert isinstance(grid(PixelRegistration="HDFE_SOMEWHERE"), str)
    # GCTP_GEO: packed DMS corners; plain degrees (seconds >= 60) are not guessed
    x, y, units = grid(Projection="GCTP_GEO", UpperLeftPointMtrs=[-180000000.0, 90000000.0],
                       LowerRightMtrs=[180000000.0, -90000000.0])
    assert x.tolist() == [-135.0, -45.0, 45.0, 135.0] and y.tolist() == [45.0, -45.0]
    assert units == "degrees"
    with pytest.raises(ValueError):
        eos.dms_degrees(-180.0)
    assert "DMS" in grid(Projection="GCTP_GEO", UpperLeftPointMtrs=[-180.0, 90.0],
                         LowerRightMtrs=[180.0, -90.0])
    assert "off the globe" in grid(Projection="GCTP_GEO",
                                   UpperLeftPointMtrs=[0.0, 95000000.0],
                                   LowerRightMtrs=[10000000.0, 80000000.0])


@pytest.mark.parametrize("seed", range(6))
def test_random_sds_read_like_pyhdf(seed, tmp_path):
    """Random types, shapes, chunkings, deflate, fill values set before or after
    chunking, partial and no writes, unlimited dimensions: every SDS (references only,
    `inline_threshold=0`) reads as pyhdf reads it."""
    import random

    rnd = random.Random(seed)
    types = {"f4": SD.SDC.FLOAT32, "f8": SD.SDC.FLOAT64, "i1": SD.SDC.INT8,
             "u1": SD.SDC.UINT8, "i2": SD.SDC.INT16, "u2": SD.SDC.UINT16,
             "i4": SD.SDC.INT32, "u4": SD.SDC.UINT32}
    path = tmp_path / "random.hdf"
    sd = SD.SD(str(path), SD.SDC.WRITE | SD.SDC.CREATE | SD.SDC.TRUNC)
    for j in range(6):
        dt = rnd.choice(list(types))
        shape = [rnd.randint(1, 9) for _ in range(rnd.choice([1, 2, 3]))]
        unlimited = rnd.random() < 0.2
        v = sd.create(f"v{j}", types[dt], [0] + shape[1:] if unlimited else shape)
        mode = "plain" if unlimited else rnd.choice(["plain", "chunk", "chunkz", "z"])
        fill = rnd.randint(1, 100) if dt[0] in "iu" else 1.5
        if rnd.random() < 0.4:
            v.setfillvalue(fill)
        if mode.startswith("chunk"):
            make_hdf4._setchunk(v, [rnd.randint(1, n) for n in shape],
                                4 if mode == "chunkz" else 0, rnd.randint(1, 9))
            if rnd.random() < 0.3:
                v.setfillvalue(fill)
        elif mode == "z":
            v.setcompress(SD.SDC.COMP_DEFLATE, rnd.randint(1, 9))
        data = (np.random.default_rng(seed * 10 + j).random(shape) * 100).astype(dt)
        w = rnd.random()
        if w > 0.15:
            part = tuple(slice(rnd.randint(0, n - 1), None) for n in shape) \
                if w < 0.5 and mode not in ("z", "plain") else ()
            if unlimited:
                v[0:shape[0]] = data
            else:
                v[part or slice(None)] = data[part or slice(None)]
        v.endaccess()
    sd.end()
    report = virtualize.virtualize([path], tmp_path / "c.zarr", inline_threshold=0)
    assert report.ok, report.problems
    g = virtualize.open(tmp_path / "c.zarr")
    for name in pyhdf_names(path):
        if 0 in g[name].shape:  # (an unlimited SDS without records: pyhdf reads none)
            continue
        assert_same(g[name][...], pyhdf_read(path, name), f"seed {seed} {name}")


# -- the HDF Group's own test files -----------------------------------------------------------

HDF4_FILES = Path(__file__).parent / "data" / "hdf4"  # (README.md there: source, licence)
# the files refused, and the kinds of their fatal problems (docs/hdf4.md)
HDF4_REFUSED = {
    "test.cdf": {"corrupt"},  # SDS of ref 0, no NDG (pyhdf cannot read them either)
    "sds_compressed.hdf": {"corrupt"},  # szip: pyhdf's library cannot decode it to inline it
    "sds_szipped.dat": {"corrupt"},  # szip likewise
}
# files holding no SD dataset pyhdf can read (raster images, vdata, annotations only, or
# little-endian SDS): refused as `no-arrays`
HDF4_NO_SDS = {"General_RImages.hdf", "General_Vdatas.hdf", "Tables.hdf", "tdf24.hdf",
               "IMCOMP.hdf", "General_HDFobjects.hdf", "litend.dat"}


def _pyhdf_by_index(path, index: int) -> np.ndarray:
    sd = SD.SD(str(path))
    try:
        v = sd.select(index)
        shape = v.info()[2]
        shape = tuple(shape) if isinstance(shape, list) else (shape,)
        if 0 in shape:  # (pyhdf's SDreaddata fails on an empty record SDS: nothing to read)
            return None
        return np.asarray(v.get())
    finally:
        sd.end()


def _index_of(path, name: str, attrs: dict) -> int:
    import re

    m = re.fullmatch(r"sds(\d+)", name)
    if m and "HDF4_NAME" in attrs:
        return int(m.group(1))
    sd = SD.SD(str(path))
    try:
        return sd.nametoindex(name)
    finally:
        sd.end()


@pytest.mark.parametrize("path", sorted(p for p in HDF4_FILES.iterdir() if p.suffix != ".md"),
                         ids=lambda p: p.name)
def test_the_hdf_groups_test_files_read_like_pyhdf_or_are_refused(path, tmp_path):
    """Each of the HDF Group's test files (hdf4's test suites and examples) virtualizes with
    every SDS equal to pyhdf's `select(index).get()` bit for bit (through virtualize.open,
    xarray and the kerchunk export), or is refused, located, for the reason listed."""
    try:
        report = virtualize.virtualize([path], tmp_path / "cube.zarr")
    except VirtualizeError as e:
        fatal = [p for p in e.problems if p.fatal]
        want = HDF4_REFUSED.get(path.name, {"no-arrays"} if path.name in HDF4_NO_SDS else None)
        assert want is not None, str(e)
        assert {p.kind for p in fatal} == want, str(e)
        assert all(p.loc.file == str(path) for p in fatal)
        if path.name in HDF4_NO_SDS:  # (SDS pyhdf lists are skipped with a note)
            skipped = {p.loc.variable for p in virtualize.check([path]).problems
                       if p.kind == "unsupported-type" and not p.fatal}
            assert set(pyhdf_names(path)) <= skipped
        return
    assert path.name not in HDF4_REFUSED and path.name not in HDF4_NO_SDS
    virtualize.virtualize([path], tmp_path / "cube.json")
    g, k = virtualize.open(tmp_path / "cube.zarr"), kerchunk_group(tmp_path / "cube.json")
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize", mask_and_scale=False)
    sd = SD.SD(str(path))
    try:
        count = sd.info()[0]
    finally:
        sd.end()
    assert len(report.plan.arrays) == count  # (every SDS, coordinate variables included)
    for var in report.plan.arrays:
        index = _index_of(path, var, dict(g[var].attrs))
        got = g[var][...]
        want = _pyhdf_by_index(path, index)
        if want is None:  # an empty record SDS: its real length, 0
            shape = tuple(report.plan.arrays[var].shape)
            assert 0 in shape and got.shape == shape and k[var][...].shape == shape
            continue
        assert_same(got, want, f"{path.name} {var}")
        assert_same(k[var][...], want, f"{path.name} {var}: kerchunk export")
        assert_same(ds[var].values, want, f"{path.name} {var}: xarray")


def test_record_sds_of_their_own_lengths_get_dimensions_of_their_own():
    """`test.hdf`: four SDS share the unlimited dimension `record` at 9, 3, 8 and 1
    records (pyhdf reads each at its own length): the longest keeps `record`."""
    report = virtualize.check([HDF4_FILES / "test.hdf"])
    assert report.ok, report.problems
    dims = {n: a.dims[0] for n, a in report.plan.arrays.items()}
    assert dims == {"Byte": "record", "Short": "record_Short", "Long": "ixx",
                    "Float": "record_Float", "Double": "record_Double"}
    assert report.plan.arrays["Short"].shape == (3, 8)


def test_the_hdf_groups_test_files_stack_along_a_new_axis(tmp_path):
    """Two of the HDF Group's files of one layout (DFSD-written 3-D float32 SDS; their
    dimension coordinate variables inlined and equal) in one cube."""
    files = [HDF4_FILES / "swf32.hdf", HDF4_FILES / "swf32_fileattr.hdf"]
    report, g, k = roundtrip(files, tmp_path, concat_dims=["k"], coords={"k": "a,b"})
    assert report.ok, report.problems
    (var,) = [n for n in report.plan.arrays if n.startswith("Data-Set")]
    assert report.plan.arrays[var].dims[0] == "k"
    want = np.stack([pyhdf_read(f, var) for f in files])
    assert_same(g[var][...], want, f"{var} stack")
    assert_same(k[var][...], want, f"{var} stack: kerchunk export")
    assert_same(g["fakeDim0"][...], pyhdf_read(files[0], "fakeDim0"), "shared coordinate")


def test_a_failed_open_does_not_stand_in_for_the_next_file_at_its_path(tmp_path):
    """The HDF4 library keeps a failed open's record of a file (and its descriptor) and
    hands it to the next open of the same path: after a damaged file (a vdata header's
    sizes edited: SDstart fails), the good file written in place at that path could not be
    read in the same process (a scan worker reused across files read the damaged one's
    structure, and the mutation suite saw values made up). Every open now has a path of its
    own, and the failed open's descriptor is closed."""
    import os

    from virtualize.formats.hdf4 import layout, read_hdf4_region

    good = tmp_path / "good.hdf"
    sd = SD.SD(str(good), SD.SDC.WRITE | SD.SDC.CREATE | SD.SDC.TRUNC)
    v = sd.create("x", SD.SDC.INT32, (4, 3))
    v.dim(0).setname("rows")
    v.dim(0).setscale(SD.SDC.INT32, list(range(4)))
    v[:] = np.arange(12, dtype="i4").reshape(4, 3) + 7
    v.endaccess()
    sd.end()
    raw = good.read_bytes()
    sd = SD.SD(str(good))
    want = sd.select(0).get()
    sd.end()

    class File:
        def pread(self, n, at):
            return raw[at:at + n]

    headers = [off for (tag, _), (_, off, _) in layout.descriptors(File(), len(raw)).items()
               if tag == layout.VH]
    path = tmp_path / "in_place.hdf"
    fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    for off in headers:
        b = bytearray(raw)
        b[off + 6:off + 10] = b"\x7f\xff\xff\xff"  # (its record size and field count)
        path.write_bytes(bytes(b))
        with pytest.raises(VirtualizeError, match="the HDF4 library cannot open it"):
            read_hdf4_region(str(path), "x")
        path.write_bytes(raw)
        assert_same(read_hdf4_region(str(path), "x"), want, f"after a failed open ({off})")
    if fds is not None:
        assert len(os.listdir("/proc/self/fd")) == fds  # (none left open)


# -- MODIS granules (fixtures/make_hdf4.py `hdf4_modis`: HDF-EOS2 swaths and grids in
# their real structure, which GDAL's HDF4_EOS driver, the HDF-EOS2 library, reads) -------

MODIS = {"MOD021KM": "MODIS_SWATH_Type_L1B", "MOD06_L2": "mod06", "MOD04_L2": "mod04",
         "MOD08_D3": "mod08", "MCD43A4": "MOD_Grid_BRDF"}


def modis(hdf4_case, product: str) -> Path:
    return next(p for p in hdf4_case("modis") if p.name.startswith(product + "."))


def _gdal_geolocation(path, swath, field) -> dict:
    import json
    import subprocess

    out = subprocess.run(["gdalinfo", "-json", f'HDF4_EOS:EOS_SWATH:"{path}":{swath}:{field}'],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["metadata"]["GEOLOCATION"]


@pytest.mark.parametrize("product", list(MODIS))
def test_modis_granules_read_like_pyhdf(hdf4_case, tmp_path, product):
    """Every SDS of each MODIS granule (L1B and L2 swaths, L3 grids) equals pyhdf's read,
    through virtualize.open and the kerchunk export; all referenced; each field its
    HDF-EOS2 structure's dimension names and attributes as MODIS writes them."""
    path = modis(hdf4_case, product)
    report, g, k = roundtrip([path], tmp_path)
    assert report.ok, [p.message for p in report.problems if p.fatal]
    names = pyhdf_names(path)
    for var in names:
        want = pyhdf_read(path, var)
        assert_same(g[var][...], want, var)
        assert_same(k[var][...], want, f"{var}: kerchunk export")
        assert report.plan.arrays[var].inline is None, var
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize", mask_and_scale=False)
    kind = "GRID" if product in ("MOD08_D3", "MCD43A4") else "SWATH"
    for var in names:
        if var not in ("XDim", "YDim"):
            assert ds[var].attrs[f"HDFEOS_{kind}"] == MODIS[product], var
        assert not any(":" in d for d in ds[var].dims), (var, ds[var].dims)
    if product == "MOD021KM":
        ev = ds["EV_1KM_RefSB"]
        assert ev.dims == ("Band_1KM_RefSB", "10*nscans", "Max_EV_frames")
        assert ev.attrs["_FillValue"] == 65535 and list(ev.attrs["valid_range"]) == [0, 32767]
        assert len(ev.attrs["radiance_scales"]) == 15
        assert ev.Band_1KM_RefSB.values[6] == 13.5  # (the band numbers: a coordinate)
    if product == "MOD04_L2":  # (geolocation on the data's own dimensions: coordinates)
        assert {"Latitude", "Longitude"} <= set(ds["Optical_Depth_Land_And_Ocean"].coords)
        assert "HDFEOS_DIMENSION_MAP" not in ds["Optical_Depth_Land_And_Ocean"].attrs
    if product == "MOD08_D3":  # (its own XDim / YDim SDS are the coordinates)
        assert_same(ds["Cloud_Fraction_Mean"].XDim.values, pyhdf_read(path, "XDim"), "XDim")
        assert any("an SDS is named 'XDim'" in p.message for p in report.problems)


@pytest.mark.parametrize("product,data,along,across", [
    ("MOD021KM", "EV_1KM_RefSB", ("2*nscans", "10*nscans"), ("1KM_geo_dim", "Max_EV_frames")),
    ("MOD06_L2", "Cloud_Optical_Thickness", ("Cell_Along_Swath_5km", "Cell_Along_Swath_1km"),
     ("Cell_Across_Swath_5km", "Cell_Across_Swath_1km"))])
def test_modis_swath_dimension_maps(hdf4_case, tmp_path, product, data, along, across):
    """Dimension maps (offset 2, increment 5) as the HDF-EOS2 library reads a swath:
    geolocation at its own resolution, never interpolated (pyhdf's values); the maps as
    attributes; each geolocation dimension a coordinate of the data indices its elements
    stand at, equal to GDAL's GEOLOCATION metadata (LINE_ / PIXEL_ OFFSET and STEP, from
    SWinqmaps); `isel` by them picks the data at the geolocation points."""
    import shutil

    path = modis(hdf4_case, product)
    report, g, k = roundtrip([path], tmp_path)
    assert report.ok
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize", mask_and_scale=False)
    lat = ds["Latitude"]
    assert lat.dims == (along[0], across[0])  # (its own resolution)
    assert_same(lat.values, pyhdf_read(path, "Latitude"), "Latitude")
    field = ds[data]
    assert field.attrs["HDFEOS_DIMENSION_MAP"] == [f"{along[0]}/{along[1]}",
                                                   f"{across[0]}/{across[1]}"]
    assert field.attrs["HDFEOS_DIMENSION_MAP_OFFSET"] == [2, 2]
    assert field.attrs["HDFEOS_DIMENSION_MAP_INCREMENT"] == [5, 5]
    assert field.attrs["HDFEOS_GEOLOCATION"] == "Latitude Longitude"
    assert "coordinates" not in field.attrs  # (CF: not on the data's dimensions)
    assert lat.attrs["HDFEOS_DIMENSION_MAP"] == field.attrs["HDFEOS_DIMENSION_MAP"]
    rows, cols = ds[along[0]], ds[across[0]]
    np.testing.assert_array_equal(rows.values, 2 + 5 * np.arange(lat.shape[0]))
    np.testing.assert_array_equal(cols.values, 2 + 5 * np.arange(lat.shape[1]))
    np.testing.assert_array_equal(k[along[0]][...], rows.values)  # (kerchunk export)
    assert rows.attrs["HDFEOS_DATA_DIMENSION"] == along[1] and rows.dtype == np.int32
    at_geo = field.isel({along[1]: rows, across[1]: cols})
    want = pyhdf_read(path, data)
    axis = field.dims.index(along[1])
    want = np.take(np.take(want, rows.values, axis), cols.values, axis + 1)
    assert_same(at_geo.values, want, "the data at the geolocation points")
    if shutil.which("gdalinfo") is None:
        pytest.skip("gdalinfo is not installed: GDAL's geolocation not compared")
    gdal = _gdal_geolocation(path, MODIS[product], data)
    assert gdal["Y_DATASET"].endswith(":Latitude")
    np.testing.assert_array_equal(
        rows.values, int(gdal["LINE_OFFSET"]) + int(gdal["LINE_STEP"]) * np.arange(rows.size))
    np.testing.assert_array_equal(
        cols.values, int(gdal["PIXEL_OFFSET"]) + int(gdal["PIXEL_STEP"]) * np.arange(cols.size))
    # GDAL's geolocation array (the HDF-EOS2 library's SWreadfield): the cube's Latitude
    import subprocess

    import tifffile

    tif = tmp_path / "lat.tif"
    subprocess.run(["gdal_translate", "-q", gdal["Y_DATASET"], str(tif)], check=True)
    assert_same(tifffile.imread(tif), lat.values, "GDAL's Latitude")


def test_modis_sinusoidal_tile_coordinates_are_gdals(hdf4_case, tmp_path):
    """MCD43A4 (a sinusoidal tile, chunked and deflated): projection x / y from its
    corners, equal to GDAL's geotransform (the HDF-EOS2 library's GDij2ll)."""
    import shutil

    path = modis(hdf4_case, "MCD43A4")
    report, g, _ = roundtrip([path], tmp_path)
    assert report.ok and len(report.plan.arrays["Nadir_Reflectance_Band1"].chunk_lengths[0]) == 2
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize")
    assert ds.XDim.attrs["standard_name"] == "projection_x_coordinate"
    if shutil.which("gdalinfo") is None:
        pytest.skip("gdalinfo is not installed: GDAL's geotransform not compared")
    x0, dx, _, y0, _, dy = _gdal_geotransform(path, MODIS["MCD43A4"], "Nadir_Reflectance_Band1")
    np.testing.assert_allclose(ds.XDim.values, x0 + (np.arange(240) + 0.5) * dx, rtol=1e-12)
    np.testing.assert_allclose(ds.YDim.values, y0 + (np.arange(240) + 0.5) * dy, rtol=1e-12)


def test_hdfeos2_dimension_maps_parse_and_the_ones_not_applied():
    """DimensionMap / IndexDimensionMap objects parsed; a negative increment (finer
    geolocation), an index map and an SDS named as the dimension get notes, no index."""
    from virtualize.formats.hdf4 import eos
    from virtualize.model import Variable

    text = make_hdf4.swath_struct("S", {"G": 3, "D": 9, "H": 4, "E": 2, "K": 3},
                                  [("G", "D", 1, 3), ("H", "E", 0, -2), ("K", "D", 0, 2**30)],
                                  [], [])
    text = text.replace("\t\tGROUP=IndexDimensionMap\n", "\t\tGROUP=IndexDimensionMap\n"
                        "\t\t\tOBJECT=IndexDimensionMap_1\n\t\t\t\tGeoDimension=\"G\"\n"
                        "\t\t\t\tDataDimension=\"E\"\n\t\t\tEND_OBJECT=IndexDimensionMap_1\n")
    (s,) = eos.parse(text)
    assert [(m.geo, m.data, m.offset, m.increment) for m in s.maps] == [
        ("G", "D", 1, 3), ("H", "E", 0, -2), ("K", "D", 0, 2**30)]
    assert s.index_maps == [("G", "E")]

    def var(name, dims, shape):
        return Variable(name=name, dtype=np.dtype("i2"), shape=shape, dims=dims,
                        attrs={"HDFEOS_SWATH": "S"}, fill_value=None, codecs=[], blocks=None)

    variables = {"a": var("a", ("G", "H", "K"), (3, 4, 3)), "b": var("b", ("D", "E"), (9, 2))}
    notes = eos.dimension_maps([s], variables, "f.hdf")
    np.testing.assert_array_equal(variables["G"].values, [1, 4, 7])
    assert "H" not in variables and "K" not in variables  # (K: 2**30 past int32)
    assert sorted(n.message.split(": ")[1] for n in notes) == [
        "dimension map H/E (offset 0, increment -2)",
        "dimension map K/D (offset 0, increment 1073741824)",
        "the index map G/E (SWdefidxmap) is not applied"]
