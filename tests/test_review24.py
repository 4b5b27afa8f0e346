"""Review of issue 24's outputs (kerchunk parquet, GDAL VRT, DataTree) as a new user
tries them: each test is a case found to fail, read back through GDAL / virtualize and
compared with tifffile's read of the tiles."""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest
import tifffile

import virtualize
from virtualize.model import VirtualizeError

from make_tiff import geotags

needs_gdal = pytest.mark.skipif(shutil.which("gdal_translate") is None,
                                reason="gdal_translate not installed (Debian: apt-get install "
                                       "gdal-bin)")


def gdal_read(vrt, tmp_path) -> np.ndarray:
    """The VRT as gdal_translate reads it ((y, x, band) for several bands)."""
    out = tmp_path / "gdal.tif"
    r = subprocess.run(["gdal_translate", "-q", "-of", "GTiff", str(vrt), str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    data = tifffile.imread(out)
    out.unlink()
    return data


def overlapping_dates(tmp_path, dates=("2024-01-01", "2024-01-02")):
    """Two 32 x 32 tiles (16 x 16 blocks) overlapping by 16 columns, on each date: the
    tile grid of a mosaic over time whose tiles overlap."""
    rng = np.random.default_rng(7)
    files, data = [], {}
    for date in dates:
        for j, col0 in enumerate((0, 16)):
            a = rng.integers(0, 60000, (32, 32)).astype("u2")
            p = tmp_path / f"t{j}_{date}.tif"
            tifffile.imwrite(p, a, tile=(16, 16),
                             extratags=geotags(32633, (500000 + col0 * 10.0, 4000000), 10.0))
            files.append(p)
            data[p] = (col0, a)
    return files, data


@needs_gdal
@pytest.mark.parametrize("overlap", ["last", "first"])
def test_a_mosaic_over_time_with_overlaps_is_a_vrt_gdal_reads_exactly(tmp_path, overlap):
    """docs/reading.md: `--overlap last` is GDAL's order itself, `first` written in
    reverse, also for a mosaic over time (each date's tiles placed as the grid's, not by
    the blocks they win)."""
    files, data = overlapping_dates(tmp_path)
    vrt = tmp_path / "t.vrt"
    virtualize.mosaic(files, vrt, concat_dim="time", overlap=overlap)
    want = np.zeros((2, 32, 48), "u2")
    for d, date in enumerate(("2024-01-01", "2024-01-02")):
        order = [f for f in files if date in f.name]
        for p in (order if overlap == "last" else order[::-1]):
            col0, a = data[p]
            want[d, :, col0:col0 + 32] = a
    cube = virtualize.open(vrt)["image"][...]
    np.testing.assert_array_equal(cube, want)
    np.testing.assert_array_equal(np.moveaxis(gdal_read(vrt, tmp_path), -1, 0), want)


@pytest.mark.skipif(shutil.which("gdalbuildvrt") is None,
                    reason="gdalbuildvrt not installed (Debian: apt-get install gdal-bin)")
def test_verify_export_append_of_a_foreign_vrt_say_what_it_is(tmp_path):
    """A VRT (or parquet set) virtualize did not write, given to verify / export / append:
    `not-a-cube`, the message naming every kind virtualize writes (it named three) and,
    for a VRT, that GDAL opens it (docs/reading.md)."""
    tile = tmp_path / "t.tif"
    tifffile.imwrite(tile, np.arange(64, dtype="u1").reshape(8, 8),
                     extratags=geotags(32633, (500000.0, 4000000.0), 10.0))
    vrt = tmp_path / "foreign.vrt"
    subprocess.run(["gdalbuildvrt", "-q", str(vrt), str(tile)], check=True)
    pq = tmp_path / "foreign.parq"
    pq.mkdir()
    (pq / ".zmetadata").write_text('{"metadata": {}, "record_size": 10}')
    for cube in (vrt, pq):
        for call in (lambda: virtualize.verify_cube(cube),
                     lambda: virtualize.export(cube, tmp_path / "x.zarr"),
                     lambda: virtualize.append(cube, [tile])):
            with pytest.raises(VirtualizeError) as e:
                call()
            (p,) = e.value.problems
            assert p.kind == "not-a-cube"
            assert "GDAL VRT" in p.message and "parquet" in p.message
            assert ("with GDAL" in p.message) == (cube == vrt)
        assert not (tmp_path / "x.zarr").exists()


def gdal_metadata(scale, offset, sample=0) -> tuple:
    """tifffile extratag GDAL_METADATA (42112): the band's scale and offset, as GDAL
    writes them (gdal_translate -a_scale / -a_offset)."""
    xml = (f'<GDALMetadata><Item name="SCALE" sample="{sample}" role="scale">{scale}</Item>'
           f'<Item name="OFFSET" sample="{sample}" role="offset">{offset}</Item>'
           "</GDALMetadata>")
    return (42112, "s", 0, xml, True)


@needs_gdal
def test_a_vrt_keeps_the_tiles_gdal_scale_and_offset(tmp_path):
    """GDAL shows a tile's band with the scale and offset its GDAL_METADATA declares (a
    reader unscales by them: rasterio's `scales`, QGIS); the VRT of such tiles declares
    them too, else GDAL users would read other physical values through it. Tiles that
    disagree are refused, never shown with one tile's scaling."""
    import json

    files = []
    for j in range(2):
        p = tmp_path / f"t{j}.tif"
        tifffile.imwrite(p, np.arange(256, dtype="i2").reshape(16, 16) + j, tile=(16, 16),
                         extratags=geotags(32633, (500000 + j * 160.0, 4000000), 10.0)
                         + [gdal_metadata(0.01, 5)])
        files.append(p)

    def band(path):
        r = subprocess.run(["gdalinfo", "-json", str(path)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        b = json.loads(r.stdout)["bands"][0]
        return b.get("scale", 1.0), b.get("offset", 0.0)

    assert band(files[0]) == (0.01, 5.0)
    vrt = tmp_path / "m.vrt"
    virtualize.mosaic(files, vrt)
    assert band(vrt) == band(files[0])
    np.testing.assert_array_equal(gdal_read(vrt, tmp_path), virtualize.open(vrt)["image"][...])
    # a tile scaled otherwise (or not at all): GDAL's one band cannot show both
    tifffile.imwrite(files[1], np.arange(256, dtype="i2").reshape(16, 16), tile=(16, 16),
                     extratags=geotags(32633, (500000 + 160.0, 4000000), 10.0))
    with pytest.raises(VirtualizeError) as e:
        virtualize.mosaic(files, tmp_path / "n.vrt")
    assert {p.kind for p in e.value.problems} == {"vrt-unsupported"}
    assert "scale" in str(e.value) and str(files[1]) in str(e.value)
    assert not (tmp_path / "n.vrt").exists()


@pytest.mark.parametrize("name", [".zarray", ".zeta", "g/.zattrs", ".zmetadata", ".zgrp/t"])
def test_parquet_refuses_names_fsspec_takes_for_metadata(tmp_path, name):
    """fsspec's LazyReferenceMapper takes every key with a component beginning `.z` for
    Zarr v2 metadata (`_is_meta`) and serves no chunk under it: such an array would read
    as its fill value without virtualize (and `.zmetadata` collided with the set's own
    file: a bare OSError). Refused, located, before anything is written; the kerchunk
    JSON and the cube directory hold it."""
    h5py = pytest.importorskip("h5py")
    src = tmp_path / "names.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset(name, data=np.arange(30, dtype="i4").reshape(5, 6) + 1, chunks=(2, 3))
        f.create_dataset("v", data=np.arange(30, dtype="i4").reshape(5, 6), chunks=(2, 3))
    with pytest.raises(VirtualizeError) as e:
        virtualize.virtualize([src], tmp_path / "c.parq")
    (p,) = e.value.problems
    assert p.kind == "parquet-unsupported" and p.loc.variable == name
    assert "-o cube.json" in p.message
    assert not (tmp_path / "c.parq").exists()
    assert [q.name for q in tmp_path.iterdir()] == ["names.h5"]  # no staging left
    virtualize.virtualize([src], tmp_path / "c.json")
    with h5py.File(src) as f:
        np.testing.assert_array_equal(virtualize.open(tmp_path / "c.json")[name][...], f[name][...])


@pytest.mark.parametrize("name", ["zarr.json", "g/zarr.json", "virtualize.json"])
def test_a_cube_directory_refuses_names_of_its_own_files(tmp_path, name):
    """An array named as a file of the cube directory's layout (a group's `zarr.json`, the
    root's `virtualize.json`) collided with it: a bare OSError (exit 3). Refused, located,
    nothing written; the kerchunk JSON holds it."""
    h5py = pytest.importorskip("h5py")
    src = tmp_path / "names.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset(name, data=np.arange(30, dtype="i4").reshape(5, 6) + 1, chunks=(2, 3))
        f.create_dataset("v", data=np.arange(30, dtype="i4").reshape(5, 6), chunks=(2, 3))
    with pytest.raises(VirtualizeError) as e:
        virtualize.virtualize([src], tmp_path / "c.zarr")
    (p,) = e.value.problems
    assert p.kind == "cube-unsupported" and p.loc.variable == name
    assert "-o cube.json" in p.message
    assert [q.name for q in tmp_path.iterdir()] == ["names.h5"]  # nothing, no staging left
    virtualize.virtualize([src], tmp_path / "c.json")
    with h5py.File(src) as f:
        np.testing.assert_array_equal(virtualize.open(tmp_path / "c.json")[name][...], f[name][...])


@needs_gdal
def test_a_vrt_keeps_the_scale_gdal_takes_from_a_pam_sidecar(tmp_path):
    """GDAL shows a tile's band with the Scale / Offset of its `.aux.xml` when the TIFF
    declares none itself (the tag wins when it does): the VRT declares what GDAL shows."""
    import json

    files = []
    for j, internal in enumerate((False, True)):
        p = tmp_path / f"t{j}.tif"
        tags = geotags(32633, (500000 + j * 80.0, 4000000), 10.0)
        tifffile.imwrite(p, np.arange(64, dtype="i2").reshape(8, 8),
                         extratags=tags + ([gdal_metadata(0.5, 3)] if internal else []))
        pam = 2 if not internal else 9  # (the tag's 0.5 wins over the sidecar's 9)
        (tmp_path / f"t{j}.tif.aux.xml").write_text(
            f'<PAMDataset><PAMRasterBand band="1"><Offset>3</Offset><Scale>{pam}</Scale>'
            "</PAMRasterBand></PAMDataset>")
        files.append(p)

    def band(path):
        r = subprocess.run(["gdalinfo", "-json", str(path)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        b = json.loads(r.stdout)["bands"][0]
        return b.get("scale", 1.0), b.get("offset", 0.0)

    assert band(files[0]) == (2.0, 3.0) and band(files[1]) == (0.5, 3.0)
    with pytest.raises(VirtualizeError) as e:  # GDAL shows the two with other scales
        virtualize.mosaic(files, tmp_path / "m.vrt")
    assert "scale 0.5" in str(e.value) and "scale 2.0" in str(e.value)
    (tmp_path / "t1.tif.aux.xml").unlink()
    files[1].unlink()
    tifffile.imwrite(files[1], np.arange(64, dtype="i2").reshape(8, 8),
                     extratags=geotags(32633, (500000 + 80.0, 4000000), 10.0)
                     + [gdal_metadata(2, 3)])
    vrt = tmp_path / "m.vrt"
    virtualize.mosaic(files, vrt)
    assert band(vrt) == (2.0, 3.0) == band(files[1])


@pytest.mark.skipif(os.name != "posix", reason="a file name of undecodable bytes (POSIX)")
def test_a_source_path_that_is_not_utf8_is_refused_by_parquet_and_vrt(tmp_path):
    """A file name of bytes that are not UTF-8 (undecodable, held as surrogates) cannot be
    a parquet string or VRT XML text: a located refusal, not a UnicodeEncodeError
    traceback; a cube directory and a kerchunk JSON hold it."""
    src = tmp_path / os.fsdecode(b"t\xff.tif")
    tifffile.imwrite(src, np.arange(64, dtype="u1").reshape(8, 8))
    for out in ("c.parq", "c.vrt"):
        with pytest.raises(VirtualizeError) as e:
            virtualize.virtualize([src], tmp_path / out)
        (p,) = e.value.problems
        assert p.kind in ("parquet-unsupported", "vrt-unsupported") and p.loc.file == str(src)
        assert "UTF-8" in p.message
        assert not (tmp_path / out).exists()
    virtualize.virtualize([src], tmp_path / "c.json")
    np.testing.assert_array_equal(virtualize.open(tmp_path / "c.json")["image"][...],
                                  tifffile.imread(src))
