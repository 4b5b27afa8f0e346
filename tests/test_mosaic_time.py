"""Mosaics over time (`virtualize mosaic --concat-dim time`): a tile grid re-observed on
many dates reads back as `(time, y, x)`, every pixel equal to its date's tile, through
virtualize.open, xarray and the kerchunk export; what cannot be placed is refused, located."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tifffile
import xarray as xr

import virtualize

import make_mosaic as mm
from helpers import assert_same, kerchunk_group, kerchunk_xarray
from make_tiff import geotags

UNEVEN = mm.LAYOUT["mosaic_uneven_2x2"]  # rows 64 + 40, columns 96 + 50
DATES = [datetime.datetime(2024, 1, d) for d in (1, 2, 3, 5, 8)]


def value(d: int, gy, gx) -> np.ndarray:
    """Date d's pixel (union row gy, column gx): never 0 (the fill), unique per date."""
    return mm.value(gy, gx) + np.uint32((d + 1) * 1_000_000)


def layouts(missing=(2, 3), short=(4, 1)):
    """Per date, the tiles (index, row0, col0, height, width): date 2 has no tile 3; on
    date 4 tile 1 covers only its upper 32 rows (its footprint changes)."""
    out = []
    for d in range(len(DATES)):
        tiles = []
        for i, (r, c, h, w) in enumerate(UNEVEN):
            if (d, i) == missing:
                continue
            if (d, i) == short:
                h = 32
            tiles.append((i, r, c, h, w))
        out.append(tiles)
    return out


def write_tiles(tmp_path, lay, epsg=None, **kw):
    """GeoTIFFs by tifffile (32x32 deflate tiles), one per (date, tile), named by date."""
    kw = kw or {"tile": (32, 32), "compression": "zlib"}
    files = []
    for d, tiles in enumerate(lay):
        for i, r, c, h, w in tiles:
            gy = np.arange(r, r + h)[:, None]
            gx = np.arange(c, c + w)[None, :]
            x0, y0 = mm.ORIGIN[0] + c * mm.PIXEL, mm.ORIGIN[1] - r * mm.PIXEL
            path = tmp_path / f"tile_{i}_{DATES[d]:%Y-%m-%d}.tif"
            code = (epsg or {}).get((d, i), mm.EPSG)
            tifffile.imwrite(path, value(d, gy, gx), extratags=geotags(code, (x0, y0), mm.PIXEL),
                             **kw)
            files.append(path)
    return files


def expected(lay) -> np.ndarray:
    rows, cols = mm.union_shape("mosaic_uneven_2x2")
    out = np.zeros((len(lay), rows, cols), np.uint32)
    for d, tiles in enumerate(lay):
        for _, r, c, h, w in tiles:
            out[d, r:r + h, c:c + w] = value(d, np.arange(r, r + h)[:, None],
                                             np.arange(c, c + w)[None, :])
    return out


def build(files, tmp_path, **kw):
    kw.setdefault("concat_dim", "time")
    cube, refs = tmp_path / "cube.zarr", tmp_path / "cube.json"
    report = virtualize.mosaic(files, cube, **kw)
    virtualize.mosaic(files, refs, **kw)
    return report, cube, refs


def test_tile_grid_over_five_dates_reads_back_as_time_y_x(tmp_path):
    lay = layouts()
    files = write_tiles(tmp_path, lay)
    files = files[::-1]  # given in no order: the dates are sorted
    report, cube, refs = build(files, tmp_path)
    want = expected(lay)
    g = virtualize.open(cube)
    assert g["image"].shape == want.shape
    assert_same(g["image"][...], want, "via virtualize.open")
    assert_same(kerchunk_group(refs)["image"][...], want, "via the kerchunk export")
    ds = xr.open_dataset(cube, engine="virtualize")
    assert ds.image.dims == ("time", "y", "x")
    assert_same(ds.image.values, want, "via xarray")
    np.testing.assert_array_equal(ds.time.values, np.array(DATES, dtype="datetime64[ns]"))
    assert ds.indexes["time"].is_monotonic_increasing
    k = kerchunk_xarray(refs)
    np.testing.assert_array_equal(k.time.values, np.array(DATES, dtype="datetime64[ns]"))
    assert_same(k.image.sel(time="2024-01-03").values, want[2], "one date via kerchunk+xarray")
    # one spatial grid for every date, one chunk per date
    # (rows 32, 32, 32, 8 listed at the padded 32; columns 32 x 4, 18 listed at 32)
    doc = json.loads((cube / "image" / "zarr.json").read_text())
    assert doc["chunk_grid"]["configuration"] == {"chunk_shape": [1, 32, 32]}
    # the date missing a tile is said (it reads as fill there), and the dates listed
    notes = " ".join(report.notes)
    assert "2024-01-03 has no tile at mosaic rows 64..103, columns 96..145" in notes
    assert "2024-01-08 has no tile at mosaic rows 0..63, columns 96..145" in notes
    assert "2024-01-01 has no tile" not in notes  # (date 4's smaller tile 1 is covered)
    assert "2024-01-01, 2024-01-02, 2024-01-03, 2024-01-05, 2024-01-08" in notes
    assert report.plan.mosaic is not None and report.plan.mosaic.tiles  # the map of one date
    # the file grid: dates x tile places, the missing tile a missing cell
    layout = report.to_dict()["layout"]
    assert [a["dim"] for a in layout["axes"]] == ["time", "tile"]
    assert layout["axes"][0]["labels"][2] == "2024-01-03"
    assert layout["axes"][1]["labels"][3] == "row 64, column 96"
    assert layout["missing"] == [[2, 3]]
    cell = next(c for c in layout["cells"] if c["index"] == [4, 1])
    assert cell["path"].endswith("tile_1_2024-01-08.tif")
    # the georeferencing of the union, as a mosaic of one date has it
    np.testing.assert_array_equal(g["x"][...], mm.ORIGIN[0] + (np.arange(146) + 0.5) * mm.PIXEL)


def test_uncompressed_strips_over_time(tmp_path):
    """Strips of 16 rows (40-row tiles: 16, 16, 8): exact by byte ranges on every date."""
    lay = layouts()
    files = write_tiles(tmp_path, lay, rowsperstrip=16)
    report, cube, refs = build(files, tmp_path)
    want = expected(lay)
    assert_same(virtualize.open(cube)["image"][...], want, "strips via virtualize.open")
    assert_same(kerchunk_group(refs)["image"][...], want, "strips via kerchunk")


def test_a_cut_inside_a_compressed_block_of_another_date_is_refused(tmp_path):
    # on date 1, tile 1 is 40 wide (cols 96..135): its edge at column 136 would cut the
    # deflate block 128..145 of tile 1 and tile 3 on the other dates
    lay = layouts(missing=(-1, -1), short=(-1, -1))
    lay[1] = [(i, r, c, h, 40 if i == 1 else w) for i, r, c, h, w in lay[1]]
    files = write_tiles(tmp_path, lay)
    report = virtualize.check_mosaic(files, concat_dim="time")
    cuts = [p for p in report.problems if p.kind == "cut-through-block"]
    assert cuts and not report.ok
    assert all(p.loc.axis == "x" and p.loc.variable == "image" for p in cuts)
    assert any("is cut at mosaic column 136" in p.message for p in cuts)
    assert "(the edge of" in cuts[0].message  # named even when made by another date's tile
    assert "tile_1_2024-01-02.tif" in " ".join(p.message for p in cuts)
    with pytest.raises(virtualize.VirtualizeError):
        virtualize.mosaic(files, tmp_path / "cube.zarr", concat_dim="time")
    assert not (tmp_path / "cube.zarr").exists()


def test_the_same_tile_twice_on_one_date_is_refused_naming_both(tmp_path):
    files = write_tiles(tmp_path, layouts()[:2])
    twin = tmp_path / "copy_of_tile_0_2024-01-02.tif"
    shutil.copy(files[4], twin)  # (files[4]: tile 0 of date 2024-01-02)
    report = virtualize.check_mosaic([*files, twin], concat_dim="time")
    (p,) = [p for p in report.problems if p.kind == "repeated-date"]
    assert p.loc.file == str(twin) and str(files[4]) in p.message
    assert "2024-01-02" in p.message and "rows 0..63, columns 0..95" in p.message


def test_an_overlap_within_one_date_is_refused_and_union_gaps_noted(tmp_path):
    # date 0: tile 1 moved 32 columns west (over tile 0); date 1: the plain grid
    lay = [[(0, 0, 0, 64, 96), (1, 0, 64, 64, 50)], [(0, 0, 0, 64, 96)]]
    files = write_tiles(tmp_path, lay)
    report = virtualize.check_mosaic(files, concat_dim="time")
    (p,) = [p for p in report.problems if p.kind == "overlap"]
    assert p.loc.file == str(files[1]) and str(files[0]) in p.message
    assert "rows 0..63, columns 64..95" in p.message
    lay[0][1] = (1, 0, 96, 32, 50)  # no overlap: a gap below tile 1 on date 0
    files = write_tiles(tmp_path, lay)
    report, cube, _ = build(files, tmp_path)
    assert_same(virtualize.open(cube)["image"][...], expected(lay)[:, :64], "gaps")
    assert any("the tiles leave gaps on 1 date(s) (2024-01-01)" in n for n in report.notes)


def test_crs_must_agree_across_dates(tmp_path):
    files = write_tiles(tmp_path, layouts(), epsg={(3, 2): 32634})
    report = virtualize.check_mosaic(files, concat_dim="time")
    (p,) = [p for p in report.problems if p.kind == "needs-warping"]
    assert p.loc.file.endswith("tile_2_2024-01-05.tif") and "CRS differs" in p.message


def test_tiles_without_a_date_are_refused(tmp_path):
    files = write_tiles(tmp_path, layouts()[:1])
    plain = [f.rename(tmp_path / f"t{i}.tif") for i, f in enumerate(files)]
    report = virtualize.check_mosaic(plain, concat_dim="time")
    (p,) = [p for p in report.problems if p.kind == "no-date"]
    assert p.loc.file == str(plain[0]) and "--coord time=" in p.message


def test_coord_forms_give_the_dates(tmp_path):
    lay = layouts()
    files = write_tiles(tmp_path, lay)
    names = [f.rename(tmp_path / f.name.replace("-", "").replace("tile", "T"))
             for f in files]  # T_0_20240101.tif: still a date in the name
    report, cube, _ = build(names, tmp_path, coords={"time": r"name:_(\d{8})\.tif"})
    ds = xr.open_dataset(cube, engine="virtualize")
    np.testing.assert_array_equal(ds.time.values, np.array(DATES, dtype="datetime64[ns]"))
    assert_same(ds.image.values, expected(lay), "dates by --coord time=name:")
    with pytest.raises(virtualize.UsageError, match="unknown form 'bogus'"):
        virtualize.check_mosaic(names, concat_dim="time", coords={"time": "bogus:x"})
    with pytest.raises(virtualize.UsageError, match="not a regular expression"):
        virtualize.check_mosaic(names, concat_dim="time", coords={"time": "name:(x"})
    # listed values (plan/coords.py's forms): one date per tile, in file order
    listed = ",".join(f"{DATES[d]:%Y-%m-%d}" for d, tiles in enumerate(lay) for _ in tiles)
    (tmp_path / "listed").mkdir()
    report, cube, _ = build(names, tmp_path / "listed", coords={"time": listed})
    assert_same(virtualize.open(cube)["image"][...], expected(lay), "dates listed")
    np.testing.assert_array_equal(xr.open_dataset(cube, engine="virtualize").time.values,
                                  np.array(DATES, dtype="datetime64[ns]"))
    # one value is a list of one: not one per tile, refused (not a usage error)
    report = virtualize.check_mosaic(names, concat_dim="time", coords={"time": "bogus"})
    assert [p.kind for p in report.problems if p.fatal] == ["coord-unresolved"]
    with pytest.raises(virtualize.UsageError):
        virtualize.check_mosaic(names, coords={"time": "name:(x)"})  # no concat_dim


def netcdf_tiles(tmp_path, scalar=False, attr=False):
    """netCDF-4 tiles elev(time, y, x) (or (y, x) with a scalar time, or a date attribute),
    zlib 32x32 chunks, CF x/y and crs; 3 dates, the second missing tile 3."""
    import netCDF4

    crs_attrs = mm._nc_crs_attrs()
    files, lay = [], []
    for d in range(3):
        tiles = [(i, *t) for i, t in enumerate(UNEVEN) if (d, i) != (1, 3)]
        lay.append(tiles)
        for i, r, c, h, w in tiles:
            path = tmp_path / f"elev_{d}_{i}.nc"
            with netCDF4.Dataset(path, "w") as ds:
                ds.createDimension("y", h)
                ds.createDimension("x", w)
                x = ds.createVariable("x", "f8", ("x",))
                x[:] = mm.ORIGIN[0] + (c + np.arange(w) + 0.5) * mm.PIXEL
                y = ds.createVariable("y", "f8", ("y",))
                y[:] = mm.ORIGIN[1] - (r + np.arange(h) + 0.5) * mm.PIXEL
                crs = ds.createVariable("crs", "i4", ())
                crs.setncatts(crs_attrs)
                data = value(d, np.arange(r, r + h)[:, None],
                             np.arange(c, c + w)[None, :]).astype("f4")
                if attr:
                    ds.setncattr("observed", f"{DATES[d]:%Y-%m-%d}")
                    dims = ("y", "x")
                elif scalar:
                    t = ds.createVariable("time", "f8", ())
                    t.units, t.calendar = "days since 2024-01-01", "standard"
                    t.assignValue((DATES[d] - DATES[0]).days)
                    dims = ("y", "x")
                else:
                    ds.createDimension("time", 1)
                    t = ds.createVariable("time", "i4", ("time",))
                    # each tile counts from its own date: re-expressed in the first's units
                    t.units = f"hours since {DATES[d]:%Y-%m-%d}" if d else \
                        "hours since 2024-01-01"
                    t[:] = [0]
                    dims = ("time", "y", "x")
                v = ds.createVariable("elev", "f4", dims, compression="zlib",
                                      chunksizes=(1,) * (len(dims) - 2) + (32, 32),
                                      fill_value=mm.NC_FILL)
                v.grid_mapping = "crs"
                v[:] = data[None] if len(dims) == 3 else data
            files.append(path)
    return files, lay


@pytest.mark.parametrize("form", ["coordinate", "scalar", "attr"])
def test_netcdf_tiles_over_time(tmp_path, form):
    files, lay = netcdf_tiles(tmp_path, scalar=form == "scalar", attr=form == "attr")
    kw = {"coords": {"time": "attr:observed"}} if form == "attr" else {}
    report, cube, refs = build(files, tmp_path, **kw)
    want = expected(lay).astype("f4")
    want[1, 64:, 96:] = mm.NC_FILL  # the missing tile reads as the fill value
    g = virtualize.open(cube)
    assert_same(g["elev"][...], want, f"netCDF ({form}) via virtualize.open")
    assert_same(kerchunk_group(refs)["elev"][...], want, f"netCDF ({form}) via kerchunk")
    ds = xr.open_dataset(cube, engine="virtualize", mask_and_scale=False)
    assert ds.elev.dims == ("time", "y", "x") and ds.elev.attrs["grid_mapping"] == "crs"
    np.testing.assert_array_equal(ds.time.values, np.array(DATES[:3], dtype="datetime64[ns]"))
    if form == "coordinate":  # the tiles' own values, in the first tile's units
        assert g["time"].attrs["units"] == "hours since 2024-01-01"
        np.testing.assert_array_equal(g["time"][...], [0, 24, 48])
        assert g["time"].dtype == np.float64  # (re-expressed: the other tiles' origin differs)


def test_a_tile_of_several_dates_is_refused(tmp_path):
    import netCDF4

    files, _ = netcdf_tiles(tmp_path, attr=True)
    for k, f in enumerate(files):  # a variable along a time axis, of 3 steps in the first
        with netCDF4.Dataset(f, "a") as ds:
            ds.createDimension("time", 3 if k == 0 else 1)
            ds.createVariable("band", "f4", ("time", "y", "x"))[:] = 1
    report = virtualize.check_mosaic(files, concat_dim="time", coords={"time": "attr:observed"})
    bad = [p for p in report.problems if p.kind == "no-date"]
    assert len(bad) == 1 and bad[0].loc.file == str(files[0]) and bad[0].loc.variable == "band"
    assert "holds 3 steps along 'time'" in bad[0].message and not report.ok


def test_a_tile_without_the_coord_value_is_refused(tmp_path):
    files = write_tiles(tmp_path, layouts()[:2])
    report = virtualize.check_mosaic(files, concat_dim="time", coords={"time": "attr:observed"})
    bad = [p for p in report.problems if p.kind == "coord-unresolved"]
    assert len(bad) == len(files) and bad[0].loc.file == str(files[0])
    assert "no global attribute 'observed'" in bad[0].message
    report = virtualize.check_mosaic(files, concat_dim="time",
                                     coords={"time": r"name:(\d{4}-\d\d-\d\d)_x"})
    assert {p.kind for p in report.problems if p.fatal} == {"coord-unresolved"}


def test_cli_mosaic_over_time(tmp_path):
    exe = os.path.join(os.path.dirname(sys.executable), "virtualize")
    lay = layouts()
    files = [str(f) for f in write_tiles(tmp_path, lay)]
    r = subprocess.run([exe, "mosaic", "--check", "-v", "--concat-dim", "time", *files],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "a mosaic over 'time': 5 date(s)" in r.stdout
    out = tmp_path / "m.zarr"
    r = subprocess.run([exe, "mosaic", "--concat-dim", "time", "--coord",
                        r"time=name:(\d{4}-\d\d-\d\d)", *files, "-o", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert_same(virtualize.open(out)["image"][...], expected(lay), "via the CLI")
    r = subprocess.run([exe, "mosaic", "--check", "--concat-dim", "time", "--coord", "time",
                        *files], capture_output=True, text=True)
    assert r.returncode != 0 and "--coord time" in r.stderr + r.stdout
    # append: a mosaic cube does not grow by a date (a clear refusal, no traceback)
    r = subprocess.run([exe, "append", str(out), files[0]], capture_output=True, text=True)
    assert r.returncode != 0 and "not-appendable" in r.stdout + r.stderr
    assert "Traceback" not in r.stderr


def test_mosaic_over_time_to_icechunk(tmp_path):
    ic = pytest.importorskip("icechunk")
    lay = layouts()
    files = write_tiles(tmp_path, lay)
    out = tmp_path / "m.icechunk"
    virtualize.mosaic(files, out, concat_dim="time")
    assert_same(virtualize.open(out)["image"][...], expected(lay), "via icechunk")
    storage = ic.local_filesystem_storage(str(out))
    (prefix,) = ic.Repository.fetch_config(storage).virtual_chunk_containers
    repo = ic.Repository.open(storage, authorize_virtual_chunk_access=ic.containers_credentials(
        {prefix: ic.Credentials.LocalFileSystemAccess()}))
    ds = xr.open_zarr(repo.readonly_session("main").store, consolidated=False, zarr_format=3,
                      chunks=None)
    assert_same(ds.image.values, expected(lay), "via icechunk + xarray")
    np.testing.assert_array_equal(ds.time.values, np.array(DATES, dtype="datetime64[ns]"))


def test_gdal_cut_tiles_over_time(tmp_path):
    """Each date one GeoTIFF (tifffile) cut into a 2 x 2 grid by gdal_translate -srcwin."""
    exe = shutil.which("gdal_translate")
    if exe is None:
        pytest.skip("gdal_translate not installed (Debian: apt-get install gdal-bin)")
    rows, cols = mm.union_shape("mosaic_uneven_2x2")
    files, lay = [], []
    for d in range(3):
        whole = tmp_path / f"whole_{d}.tif"
        tifffile.imwrite(whole, value(d, np.arange(rows)[:, None], np.arange(cols)[None, :]),
                         extratags=geotags(mm.EPSG, mm.ORIGIN, mm.PIXEL))
        tiles = [(i, *t) for i, t in enumerate(UNEVEN) if (d, i) != (2, 0)]
        lay.append(tiles)
        for i, r, c, h, w in tiles:
            out = tmp_path / f"S2_{DATES[d]:%Y%m%d}_tile{i}.tif"
            subprocess.run([exe, "-q", "-srcwin", str(c), str(r), str(w), str(h), "-co",
                            "TILED=YES", "-co", "BLOCKXSIZE=32", "-co", "BLOCKYSIZE=32", "-co",
                            "COMPRESS=DEFLATE", str(whole), str(out)], check=True)
            files.append(out)
    report, cube, refs = build(files, tmp_path)
    want = expected(lay)
    assert_same(virtualize.open(cube)["image"][...], want, "gdal tiles via virtualize.open")
    assert_same(kerchunk_group(refs)["image"][...], want, "gdal tiles via kerchunk")
    assert any("2024-01-03 has no tile at mosaic rows 0..63, columns 0..95" in n
               for n in report.notes)


def test_materialize_is_refused_over_time(tmp_path):
    files = write_tiles(tmp_path, layouts()[:1])
    with pytest.raises(virtualize.UsageError, match="--materialize"):
        virtualize.check_mosaic(files, concat_dim="time", materialize=True)


@pytest.mark.parametrize("seed", range(8))
def test_random_layouts_over_time(tmp_path, seed):
    """Each date its own random brick layout (tiles and blocks), some tiles left out:
    whatever is accepted reads back exactly; what is not is a located block refusal."""
    from test_mosaic_random import brick_layout

    rng = np.random.default_rng(100 + seed)
    height, width = int(rng.integers(40, 80)), int(rng.integers(40, 90))
    aligned = seed % 2 == 0
    if aligned:
        height, width = height // 16 * 16, width // 16 * 16
    compression = ["none", "zlib"][seed % 4 // 2]
    files, offsets = [], []
    want = np.zeros((3, height, width), "u4")
    for d in range(3):
        tiles = brick_layout(rng, height, width, 16 if aligned else 1)
        keep = [t for t in tiles if rng.random() > 0.2] or tiles[:1]
        for i, (r, c, h, w) in enumerate(keep):
            data = value(d, np.arange(r, r + h)[:, None], np.arange(c, c + w)[None, :])
            kw = {"compression": compression}
            if aligned or rng.random() < 0.5:
                kw["tile"] = (16, 16)
            else:
                kw["rowsperstrip"] = int(rng.choice([4, 8, 16]))
            path = tmp_path / f"t{i}_{DATES[d]:%Y%m%d}.tif"
            tifffile.imwrite(path, data, **kw)
            files.append(path)
            offsets.append((r, c))
            want[d, r:r + h, c:c + w] = data
    # (the union of the dates' tiles starts at 0, 0 only if some date covers it)
    r0 = min(r for r, _ in offsets)
    c0 = min(c for _, c in offsets)
    want = want[:, r0:, c0:]
    want = want[:, :max(r + h for (r, c), f in zip(offsets, files)
                        for h in [tifffile.imread(f).shape[0]]) - r0,
                :max(c + w for (r, c), f in zip(offsets, files)
                     for w in [tifffile.imread(f).shape[1]]) - c0]
    report = virtualize.check_mosaic(files, offsets=offsets, concat_dim="time")
    if report.ok:
        virtualize.mosaic(files, tmp_path / "m.zarr", offsets=offsets, concat_dim="time")
        virtualize.mosaic(files, tmp_path / "m.json", offsets=offsets, concat_dim="time")
        assert_same(virtualize.open(tmp_path / "m.zarr")["image"][...], want, f"seed {seed}")
        assert_same(kerchunk_group(tmp_path / "m.json")["image"][...], want, f"seed {seed}")
    else:
        fatal = [p for p in report.problems if p.fatal]
        assert {p.kind for p in fatal} <= {"cut-through-block", "padded-block"}, fatal
        assert all(p.loc.file and p.loc.axis and p.loc.block is not None for p in fatal)
    if aligned:
        assert report.ok, [p.message for p in report.problems if p.fatal][:3]


def test_time_units_that_cannot_be_converted_are_refused(tmp_path):
    import netCDF4

    files, _ = netcdf_tiles(tmp_path)
    with netCDF4.Dataset(files[5], "a") as ds:
        ds["time"].units = "orbits"
    report = virtualize.check_mosaic(files, concat_dim="time")
    (p,) = [p for p in report.problems if p.kind == "units-differ"]
    assert p.loc.file == str(files[5]) and p.loc.variable == "time"
    assert "'orbits'" in p.message and str(files[0]) in p.message


def _stamp_tiles(files, **per_tile):
    """Set attributes per tile: name -> function(k) of the tile's index (None: leave)."""
    import netCDF4

    for k, f in enumerate(files):
        with netCDF4.Dataset(f, "a") as ds:
            for key, fn in per_tile.items():
                where, _, name = key.rpartition("__")
                value = fn(k)
                if value is not None:
                    (ds[where] if where else ds).setncattr(name, value)


@pytest.mark.parametrize("over_time", [False, True])
def test_tile_attributes_are_combined_not_taken_from_the_first(tmp_path, over_time):
    """Attributes that differ between tiles (`history`, a variable's `comment`): left out
    and named by default (drop_conflicts), the first tile's with override, refused with
    identical; `units` differing is refused whatever (the values would mean different
    things)."""
    files, _ = netcdf_tiles(tmp_path, attr=True)
    if not over_time:
        files = [f for f in files if f.name.startswith("elev_0_")]
    kw = dict(concat_dim="time", coords={"time": "attr:observed"}) if over_time else {}
    _stamp_tiles(files, history=lambda k: f"made tile {k}", source=lambda k: "DEM v2",
                 elev__comment=lambda k: f"tile {k}")
    cube = tmp_path / "m.zarr"
    report = virtualize.mosaic(files, cube, **kw)
    ds = xr.open_dataset(cube, engine="virtualize")
    assert "history" not in ds.attrs and ds.attrs["source"] == "DEM v2"
    # the date attribute: the time coordinate holds it over time; one date: the same
    assert ("observed" in ds.attrs) is not over_time
    assert "comment" not in ds.elev.attrs and ds.elev.attrs["grid_mapping"] == "crs"
    note = next(n for n in report.notes if "differ between tiles" in n)
    assert "global: history" in note and "elev: comment" in note
    report = virtualize.mosaic(files, tmp_path / "o.zarr", combine_attrs="override", **kw)
    o = xr.open_dataset(tmp_path / "o.zarr", engine="virtualize")
    assert o.attrs["history"] == "made tile 0" and o.elev.attrs["comment"] == "tile 0"
    report = virtualize.check_mosaic(files, combine_attrs="identical", **kw)
    bad = [p for p in report.problems if p.kind == "attribute-conflict"]
    assert not report.ok and {p.loc.variable for p in bad} == {None, "elev"}
    assert any(p.loc.file == str(files[1]) and "'history'" in p.message for p in bad)
    _stamp_tiles(files, elev__units=lambda k: "m" if k != 2 else "ft")
    report = virtualize.check_mosaic(files, **kw)
    drift = [p for p in report.problems if p.kind == "attribute-drift"]
    assert not report.ok and len(drift) == 1
    assert drift[0].loc.file == str(files[2]) and drift[0].loc.variable == "elev"
    with pytest.raises(virtualize.UsageError, match="combine_attrs"):
        virtualize.check_mosaic(files, combine_attrs="first", **kw)


def test_cli_mosaic_combine_attrs(tmp_path):
    exe = os.path.join(os.path.dirname(sys.executable), "virtualize")
    files, _ = netcdf_tiles(tmp_path, attr=True)
    _stamp_tiles(files, history=lambda k: f"made tile {k}")
    r = subprocess.run([exe, "mosaic", "--check", "--concat-dim", "time", "--coord",
                        "time=attr:observed", "--combine-attrs", "identical",
                        *map(str, files)], capture_output=True, text=True)
    assert r.returncode != 0 and "attribute-conflict" in r.stdout + r.stderr
    out = tmp_path / "m.zarr"
    r = subprocess.run([exe, "mosaic", "--concat-dim", "time", "--coord", "time=attr:observed",
                        "--combine-attrs", "override", "-o", str(out), *map(str, files)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert xr.open_dataset(out, engine="virtualize").attrs["history"] == "made tile 0"


def test_verify_decode_and_export_replan_a_mosaic_over_time(tmp_path):
    """verify --decode and export plan the cube again from its recipe: as a mosaic over
    time (its concat_dim and --coord), not as one mosaic of every tile (overlaps)."""
    lay = layouts()
    files = write_tiles(tmp_path, lay)
    cube = tmp_path / "m.zarr"
    virtualize.mosaic(files, cube, concat_dim="time", coords={"time": r"name:_(\d{4}-\d\d-\d\d)"},
                      combine_attrs="override")
    assert virtualize.verify_cube(cube, decode=True) == []
    virtualize.export(cube, tmp_path / "again.json")
    assert_same(kerchunk_group(tmp_path / "again.json")["image"][...], expected(lay),
                "a mosaic over time exported")
