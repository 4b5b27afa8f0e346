"""Review of #23 (HDF4, GRIB, FITS) as a new user: what it found, each pinned by a test."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import virtualize

from helpers import assert_same

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "fixtures"))


@pytest.mark.parametrize("edition", [1, 2])
@pytest.mark.parametrize("grid", [
    # (Ni, Nj, lat1, lat2, lon1, lon2, di, dj)
    (401, 201, 70.0, 20.0, 350.0, 30.0, 0.1, 0.25),   # a European area across Greenwich
    (360, 3, 1.0, -1.0, -180.0, 179.0, 1.0, 1.0),     # global, -180 .. 179
    (101, 51, 10.0, 5.0, 0.0, 10.0, 0.1, 0.1),        # 0.1 degrees: increments inexact
    (128, 10, 10.0, 1.0, 0.0, 357.1875, 2.8125, 1.0),  # GRIB1 rounds 2.8125 to millidegrees
], ids=["greenwich", "minus180", "tenth", "t42"])
def test_regular_ll_coordinates_are_ecCodes_bit_for_bit(tmp_path, edition, grid):
    """latitude / longitude of a regular_ll grid equal ecCodes' `latitudes` / `longitudes`
    bit for bit: GRIB2 stores longitudes in 0..360, so an area from -10 to 30 has
    lon1 = 350 > lon2 = 30 (ecCodes: -10 .. 30, was 350 .. 390), a global -180 .. 179
    grid lon1 = 180 (was 180 .. 539); ecCodes steps by (lon2 - lon1) / (Ni - 1), adding
    it point after point, and sets the last point to lon2 (was lon1 + k * di: other bits)."""
    ec = pytest.importorskip("eccodes")
    ni, nj, la1, la2, lo1, lo2, di, dj = grid
    h = ec.codes_grib_new_from_samples(f"GRIB{edition}")
    try:
        for k, v in dict(Ni=ni, Nj=nj, latitudeOfFirstGridPointInDegrees=la1,
                         latitudeOfLastGridPointInDegrees=la2,
                         longitudeOfFirstGridPointInDegrees=lo1,
                         longitudeOfLastGridPointInDegrees=lo2,
                         iDirectionIncrementInDegrees=di,
                         jDirectionIncrementInDegrees=dj).items():
            ec.codes_set(h, k, v)
        ec.codes_set_values(h, np.arange(ni * nj, dtype=np.float64))
        path = tmp_path / "area.grib"
        with open(path, "wb") as f:
            ec.codes_write(h, f)
        lats = ec.codes_get_array(h, "latitudes").reshape(nj, ni)[:, 0]
        lons = ec.codes_get_array(h, "longitudes").reshape(nj, ni)[0]
    finally:
        ec.codes_release(h)
    virtualize.virtualize([path], tmp_path / "c.zarr")
    g = virtualize.open(tmp_path / "c.zarr")
    assert_same(g["latitude"][...], lats, "latitude: ecCodes'")
    assert_same(g["longitude"][...], lons, "longitude: ecCodes'")


def test_grib1_regular_gaussian_grid_has_ecCodes_coordinates(tmp_path):
    """ecCodes' GRIB1 regular_gg sample (T42-like: 128 longitudes of 2.8125 degrees,
    coded 2.812): its longitude step is 357.188 / 127, not the coded increment, so the
    coordinates exist (they were refused as `grib-grid`) and equal ecCodes'."""
    ec = pytest.importorskip("eccodes")
    from make_grib import message
    path = tmp_path / "gg.grib1"
    path.write_bytes(message("regular_gg_ml_grib1"))
    with open(path, "rb") as f:
        h = ec.codes_grib_new_from_file(f)
        nj, ni = ec.codes_get(h, "Nj"), ec.codes_get(h, "Ni")
        lats = ec.codes_get_array(h, "latitudes").reshape(nj, ni)[:, 0]
        lons = ec.codes_get_array(h, "longitudes").reshape(nj, ni)[0]
        ec.codes_release(h)
    report = virtualize.check([path])
    assert not [p for p in report.problems if p.kind == "grib-grid"], report.problems
    virtualize.virtualize([path], tmp_path / "c.zarr")
    g = virtualize.open(tmp_path / "c.zarr")
    assert_same(g["latitude"][...], lats, "latitude: ecCodes'")
    assert_same(g["longitude"][...], lons, "longitude: ecCodes'")


def test_rice_tiles_kerchunk_export_reads_with_imagecodecs_registered_as_documented(tmp_path):
    """A kerchunk export naming imagecodecs' codecs (a RICE_1 FITS image) read by plain
    fsspec + zarr in a fresh interpreter that never imports virtualize: zarr finds the codec
    through the entry points virtualize declares (imagecodecs registers them only by a
    call), and imagecodecs' own registration call changes nothing; equal to astropy's."""
    import os
    import subprocess
    import textwrap

    fits = pytest.importorskip("astropy.io.fits")
    pytest.importorskip("imagecodecs")
    data = np.random.default_rng(23).integers(-3000, 3000, (37, 53)).astype(np.int16)
    path, refs = tmp_path / "r.fits", tmp_path / "r.json"
    fits.HDUList([fits.PrimaryHDU(), fits.CompImageHDU(data, compression_type="RICE_1",
                                                       tile_shape=(10, 16), name="IMG")]
                 ).writeto(path)
    virtualize.virtualize([path], refs)
    np.save(tmp_path / "want.npy", fits.getdata(path, 1))
    script = textwrap.dedent("""
        import sys
        import fsspec, numpy as np, zarr
        from zarr.storage import FsspecStore
        if sys.argv[3] == "register":
            import imagecodecs.zarr
            imagecodecs.zarr.register_codecs()
        zarr.config.set({"array.rectilinear_chunks": True})
        fs = fsspec.filesystem("reference", fo=sys.argv[1], asynchronous=True)
        g = zarr.open_group(FsspecStore(fs, read_only=True, path=""), mode="r", zarr_format=3)
        got, want = g["IMG"][...], np.load(sys.argv[2])
        assert np.array_equal(got, want) and got.dtype == want.dtype.newbyteorder("=")
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    run = [sys.executable, "-c", script, str(refs), str(tmp_path / "want.npy")]
    script = script.replace("assert np.array_equal", "assert 'virtualize' not in sys.modules\n"
                            "assert np.array_equal")
    run[2] = script
    bare = subprocess.run(run + ["bare"], env=env, capture_output=True, text=True)
    assert bare.returncode == 0, bare.stderr[-3000:]
    done = subprocess.run(run + ["register"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


def test_date_obs_with_fractional_seconds_are_dates(tmp_path):
    """FITS writes DATE-OBS as `YYYY-MM-DDThh:mm:ss[.sss]` (FITS 4.0, 9.1.1); instruments
    give the fraction. `--coord time=attr:DATE-OBS` made such exposures a text axis (the
    dates were no dates): now they are dates to the microsecond, in time order."""
    fits = pytest.importorskip("astropy.io.fits")
    xr = pytest.importorskip("xarray")
    stamps = ["2024-01-01T06:00:01.250", "2024-01-01T06:00:00.5", "2024-01-01T06:00:00.750"]
    files = []
    for k, stamp in enumerate(stamps):
        hdu = fits.PrimaryHDU(np.full((3, 4), k, dtype=np.int16))
        hdu.header["DATE-OBS"] = stamp
        files.append(tmp_path / f"exp{k}.fits")
        hdu.writeto(files[-1])
    virtualize.virtualize(files, tmp_path / "c.zarr", concat_dims=["time"],
                          coords={"time": "attr:DATE-OBS"})
    ds = xr.open_dataset(tmp_path / "c.zarr", engine="virtualize")
    want = np.array(["2024-01-01T06:00:00.500", "2024-01-01T06:00:00.750",
                     "2024-01-01T06:00:01.250"], dtype="M8[ns]")
    assert_same(ds["time"].values, want, "time: DATE-OBS to the microsecond")
    assert_same(ds["hdu0"].values[:, 0, 0], np.array([1, 2, 0], dtype=np.int16), "order")


def test_grib_messages_behind_wmo_bulletin_headers_are_read(tmp_path):
    """GRIB as the GTS sends it (NOAAPORT, DWD): each message wrapped in a WMO bulletin
    (SOH CR CR LF nnn CR CR LF TTAAii CCCC YYGGgg CR CR LF ... CR CR LF ETX), so the file
    does not start with `GRIB`. ecCodes reads its messages; it was `unknown-format` ("not
    ... a GRIB file"). Now the bytes before, between and after the messages are a
    `trailing-bytes` note and every value is ecCodes'."""
    ec = pytest.importorskip("eccodes")
    from make_grib import message

    m1, m2 = message("GRIB2", level=0), message("GRIB2", shortName="2t")
    path = tmp_path / "gts.grib2"
    path.write_bytes(b"".join(b"\x01\r\r\n%03d\r\r\nHTXA5%d ECMF 010000\r\r\n" % (k, k) + m
                              + b"\r\r\n\x03" for k, m in enumerate([m1, m2])))
    report = virtualize.check([path])
    assert report.ok, report.problems
    assert [p.kind for p in report.problems] == ["trailing-bytes"]
    virtualize.virtualize([path], tmp_path / "c.zarr")
    g = virtualize.open(tmp_path / "c.zarr")
    for m, name in [(m1, "t"), (m2, "2t")]:
        h = ec.codes_new_from_message(m)
        want = ec.codes_get_values(h).reshape(1, ec.codes_get(h, "Nj"), ec.codes_get(h, "Ni"))
        ec.codes_release(h)
        assert_same(g[name][...], want, f"{name}: ecCodes'")


def test_a_text_file_mentioning_grib_is_no_grib_file(tmp_path):
    """The looser sniff (GRIB behind a few ASCII bytes) claims no text that names GRIB."""
    from virtualize.formats import detect

    path = tmp_path / "notes.grib"
    path.write_bytes(b"see the GRIB2 files in ../data\n")
    assert detect(str(path)) is None


def test_an_hdf4_file_holding_grib_bytes_early_stays_hdf4(tmp_path):
    """HDF4's magic (\\x0e\\x03\\x13\\x01) is no bulletin header: a GRIB signature in its first
    bytes does not make it a GRIB file."""
    from virtualize.formats import registry

    head = b"\x0e\x03\x13\x01" + b"\x00" * 20 + b"GRIB\x00\x00\x00\x02" + b"\x00" * 100
    path = tmp_path / "x.hdf"
    path.write_bytes(head)
    with open(path, "rb") as f:
        assert not registry.by_name("grib").sniff(head[:8], f)
