"""The GDAL VRT output read by rasterio (its wheels carry their own, newer GDAL than the
gdal-bin tests/test_vrt.py runs): the mosaics, overlaps, nodata gaps, dates and stacks
read equal to the tiles read by tifffile, band names and metadata as written."""

from __future__ import annotations

import numpy as np
import pytest
import tifffile

import virtualize

import make_mosaic as mm

pytestmark = pytest.mark.needs("rasterio")


def rio_read(vrt) -> tuple[np.ndarray, dict]:
    """(rasterio's read, (band, y, x); its nodata, descriptions and band tags)."""
    import rasterio

    with rasterio.open(vrt) as src:
        return src.read(), {"nodata": src.nodata, "descriptions": src.descriptions,
                            "tags": [src.tags(b) for b in src.indexes]}


def bands_first(a: np.ndarray) -> np.ndarray:
    """A (y, x) or (y, x, band) array as rasterio reads it: (band, y, x)."""
    return a[None] if a.ndim == 2 else np.moveaxis(a, -1, 0)


@pytest.mark.parametrize("name,overlap", [
    ("mosaic_blocks128_2x2", None), ("mosaic_blocks128_staggered", None),
    ("mosaic_blocks128_overlap", "last"), ("mosaic_blocks128_overlap", "first"),
    ("mosaic_uneven_2x2", None), ("mosaic_gap", None), ("mosaic_bands", None)])
def test_rasterio_reads_the_mosaic_as_the_tiles(case, tmp_path, name, overlap):
    files = case(name)
    vrt = tmp_path / "m.vrt"
    virtualize.mosaic(files, vrt, overlap=overlap)
    got, src = rio_read(vrt)
    want = mm.expected(name, overlap=overlap)
    np.testing.assert_array_equal(got, bands_first(want))
    np.testing.assert_array_equal(bands_first(virtualize.open(vrt)["image"][...]), got)
    if name in mm.NODATA:
        assert src["nodata"] == float(mm.NODATA[name][0])
    for path, (row0, col0, h, w) in zip(files, mm.LAYOUT[name]):
        if name not in mm.OVERLAPPING:
            np.testing.assert_array_equal(got[:, row0:row0 + h, col0:col0 + w],
                                          bands_first(tifffile.imread(path)))


def test_rasterio_reads_a_mosaic_over_dates_band_by_date(case, tmp_path):
    name = "mosaic_dates_blocks128"
    files = case(name)
    vrt = tmp_path / "t.vrt"
    virtualize.mosaic(files, vrt, concat_dim="time")
    got, src = rio_read(vrt)
    np.testing.assert_array_equal(got, mm.expected_dates(name))
    assert src["descriptions"] == ("time=2024-01-01", "time=2024-01-02", "time=2024-01-03")
    assert src["tags"][1] == {"time": "2024-01-02", "time_value": "1",
                              "time_units": "days since 2024-01-01"}


def test_rasterio_keeps_a_winners_nodata_opaque(tmp_path):
    """The VRT's SimpleSources are opaque in this GDAL too: the winner's nodata pixels
    show over the tile below, as the cube reads them."""
    from test_vrt import winner_with_nodata

    vrt = tmp_path / "m.vrt"
    virtualize.mosaic(winner_with_nodata(tmp_path), vrt, overlap="last")
    got, _ = rio_read(vrt)
    cube = virtualize.open(vrt)["image"][...]
    assert (cube[:, 32:64] == 0).all()
    np.testing.assert_array_equal(got[0], cube)
