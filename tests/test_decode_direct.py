"""The decode check's own decoding (`checks.decode.decode_direct`, for chains of the codecs
in `DIRECT`: a check of a GRIB, FITS or HDF4 file imports no zarr) gives what zarr-python
reads from the same zarr.json and chunk bytes, values and data type, an edge chunk's
extents included, and fails where zarr fails."""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import numpy as np
import pytest
import zarr

import virtualize
from virtualize import codec_core as cc
from virtualize.checks.decode import DIRECT, decode_direct, direct
from virtualize.outputs.base import rectilinear_enabled
from virtualize.outputs.materialize import chunk_key
from virtualize.outputs.metadata import array_doc

DATA = Path(__file__).parent / "data"
SHAPE, CHUNK = (5, 7), (6, 8)  # one edge chunk: zarr reads its first 5 x 7 values


def _zarr_read(tmp_path: Path, doc: dict, data: bytes, index=(0, 0), extents=None):
    """What zarr reads of the chunk at `index` (its values within the array)."""
    root = tmp_path / "a.zarr"
    (root / chunk_key(index)).parent.mkdir(parents=True, exist_ok=True)
    (root / "zarr.json").write_text(json.dumps(doc))
    (root / chunk_key(index)).write_bytes(data)
    with rectilinear_enabled():
        arr = zarr.open_array(root, mode="r")
        sel = tuple(slice(0, e) for e in extents) if index == (0,) * len(index) else None
        return arr[sel] if sel is not None else arr[...]


def _doc(dtype: str, codecs: list, shape=SHAPE, chunk=CHUNK) -> dict:
    return {"zarr_format": 3, "node_type": "array", "shape": list(shape), "data_type": dtype,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunk)}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0, "codecs": codecs}


def _values(dtype: str) -> np.ndarray:
    return (np.arange(np.prod(CHUNK)) * 37 % 251 - 60).astype(dtype).reshape(CHUNK)


def _chains():
    """(data type, codecs, stored bytes) of each codec in DIRECT."""
    v = _values("int16")
    yield "int16", [{"name": "bytes", "configuration": {"endian": "little"}}], v.astype("<i2").tobytes()
    yield "int16", [{"name": "bytes", "configuration": {"endian": "big"}}], v.astype(">i2").tobytes()
    yield "uint8", [{"name": "bytes"}], _values("uint8").tobytes()
    f = _values("float64")
    big = [{"name": "bytes", "configuration": {"endian": "big"}}]
    yield "float64", [*big, {"name": "numcodecs.zlib", "configuration": {"level": 4}}], \
        zlib.compress(f.astype(">f8").tobytes())
    yield "float64", [*big, {"name": "gzip", "configuration": {"level": 5}}], \
        gzip.compress(f.astype(">f8").tobytes())
    little = [{"name": "bytes", "configuration": {"endian": "little"}}]
    yield "float64", [*little, {"name": "virtualize.lzf"}], cc.lzf_encode(f.astype("<f8").tobytes())
    yield "float64", [*little, {"name": "virtualize.bitshuffle", "configuration": {
        "elementsize": 8, "blocksize": 0, "compression": "lz4"}}], \
        cc.bitshuffle_encode(f.astype("<f8").tobytes(), 8, 0, "lz4")
    yield "int16", [*big, {"name": "virtualize.fitsgzip", "configuration": {
        "bitpix": 16, "shuffle": True}}], cc.fits_gzip_encode(v.astype(">i2").tobytes(), 16, True)
    yield "float32", [{"name": "virtualize.fitsscale", "configuration": {
        "scale": 0.5, "zero": 3.0, "blank": -60, "dtype": "<f4", "astype": "<i2"}}, *big], \
        v.astype(">i2").tobytes()


CHAINS = list(_chains())


def test_every_direct_codec_is_covered():
    # (virtualize.grib: by the GRIB files' arrays below)
    assert {c["name"] for _, codecs, _ in CHAINS for c in codecs} | {cc.GRIB} == DIRECT


@pytest.mark.parametrize("dtype,codecs,data", CHAINS,
                         ids=[f"{d}-{'+'.join(c['name'] for c in cs)}" for d, cs, _ in CHAINS])
def test_direct_decoding_is_zarrs(tmp_path, dtype, codecs, data):
    assert direct(codecs, np.dtype(dtype))
    want = _zarr_read(tmp_path, _doc(dtype, codecs), data, extents=SHAPE)
    got = decode_direct(data, codecs, np.dtype(dtype), CHUNK, SHAPE)
    assert got.dtype == want.dtype and got.shape == want.shape == SHAPE
    assert got.tobytes() == want.tobytes()
    # a damaged chunk (a byte short, or a byte before it): both fail, or both read alike
    for bad in (data[:-1], b"\x00" + data):
        outcomes = []
        for read in (lambda: np.asarray(_zarr_read(tmp_path, _doc(dtype, codecs), bad,
                                                   extents=SHAPE)),
                     lambda: decode_direct(bad, codecs, np.dtype(dtype), CHUNK, SHAPE)):
            try:
                outcomes.append(read().tobytes())
            except Exception:  # noqa: BLE001 - any failure is a failure
                outcomes.append(None)
        assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize("config", [None, {"endian": "middle"}, {"endian": "big", "x": 1}])
def test_a_bytes_codec_zarr_refuses_is_refused(tmp_path, config):
    codecs = [{"name": "bytes", **({"configuration": config} if config else {})}]
    data = _values("int16").astype(">i2").tobytes()
    with pytest.raises(Exception):
        np.asarray(_zarr_read(tmp_path, _doc("int16", codecs), data, extents=SHAPE))
    with pytest.raises(ValueError):
        decode_direct(data, codecs, np.dtype("int16"), CHUNK, SHAPE)


def test_other_chains_are_left_to_zarr():
    assert not direct([{"name": "bytes"}, {"name": "numcodecs.zstd"}], np.dtype("u1"))
    assert not direct([{"name": "transpose", "configuration": {"order": [1, 0]}},
                       {"name": "bytes"}], np.dtype("u1"))
    assert not direct([{"name": "bytes"}, {"name": "bytes"}], np.dtype("u1"))
    assert not direct([{"name": "bytes"}], np.dtype("S4"))


@pytest.mark.parametrize("name", ["cfgrib/regular_ll_sfc.grib", "cfgrib/alternate-scanning.grib",
                                  "cfgrib/fields_with_missing_values.grib", "fits/arange.fits",
                                  "hdf4/SDSfloat2.hdf"])
def test_the_formats_arrays_decode_as_zarr_reads_them(tmp_path, name):
    """Each stored chunk of each array of a one-file plan (GRIB: the ecCodes codec, FITS,
    HDF4) decoded directly equals zarr's read of it through the array's own zarr.json."""
    pytest.importorskip({"grib": "eccodes", "fits": "astropy", "hdf": "pyhdf"}[
        name.rsplit(".", 1)[1]])
    report = virtualize.check(DATA / name, scan_timeout=0)
    assert report.ok, report.problems
    checked = 0
    for a in report.plan.arrays.values():
        if a.refs is None or a.inline is not None or not a.refs.size or \
                not direct(a.codecs, a.dtype):
            continue
        index = tuple(0 for _ in a.shape)
        rec = a.refs[index] if a.shape else a.refs[()]
        if rec["length"] <= 0:
            continue
        path = report.plan.sources[int(rec["path"])].path
        with open(path, "rb") as f:
            f.seek(int(rec["offset"]))
            data = f.read(int(rec["length"]))
        shape = a.chunk_shape(index)
        extents = [min(n, s) for n, s in zip(shape, a.shape)]
        doc = array_doc(a)
        want = np.asarray(_zarr_read(tmp_path / a.name.replace("/", "_"), doc, data, index,
                                     extents))
        got = decode_direct(data, a.codecs, a.dtype, shape, extents)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes(), a.name
        checked += 1
    assert checked
