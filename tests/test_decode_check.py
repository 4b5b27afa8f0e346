"""The decode check: before a cube is published, a few stored chunks of each array are
decoded through the cube's own codecs and compared with the source library's read; a
failure or a difference is a located `decode-mismatch`, and nothing is written."""

from __future__ import annotations

import subprocess
import sys

import imagecodecs
import numpy as np
import pytest
import tifffile

import virtualize
from virtualize.checks import decode as decode_module
from virtualize.checks.decode import decode_check
from virtualize.formats.hdf5 import codecs as hdf5_codecs
from virtualize.formats.hdf5 import walk as hdf5_walk
from virtualize.formats.tiff import scan as scan_tiff
from virtualize.model import MATERIALIZED, VirtualizeError

H, W, RPS = 70, 90, 16


def full_height_last_strip(path, data, compression="lzw", encode=imagecodecs.lzw_encode):
    """A TIFF whose last strip is stored at full RowsPerStrip height (padding rows encoded
    too), as some writers do: tifffile reads it (it drops the extra rows), but the strip
    decodes to more bytes than the cube's short last chunk holds."""
    tifffile.imwrite(path, data, compression=compression, rowsperstrip=RPS,
                     photometric="minisblack")
    last = (H - 1) // RPS
    padded = np.zeros((RPS, *data.shape[1:]), data.dtype)
    padded[: H - last * RPS] = data[last * RPS:]
    blob = encode(padded.tobytes())
    with open(path, "r+b") as fh:
        fh.seek(0, 2)
        offset = fh.tell()
        fh.write(blob)
    with tifffile.TiffFile(path, mode="r+b") as tif:
        page = tif.pages[0]
        offsets = list(page.tags["StripOffsets"].value)
        counts = list(page.tags["StripByteCounts"].value)
        offsets[-1], counts[-1] = offset, len(blob)
        page.tags["StripOffsets"].overwrite(offsets)
        page.tags["StripByteCounts"].overwrite(counts)
    return path


@pytest.fixture(scope="module")
def full_strip(tmp_path_factory):
    data = np.arange(H * W, dtype="u2").reshape(H, W)
    path = full_height_last_strip(tmp_path_factory.mktemp("strip") / "lzw_full_strip.tif", data)
    np.testing.assert_array_equal(tifffile.imread(path), data)  # the source library reads it
    return path


def test_a_chunk_that_does_not_decode_is_refused_where_it_is(full_strip, tmp_path):
    report = virtualize.check([full_strip])
    assert not report.ok
    (p,) = report.problems
    assert (p.kind, p.fatal) == ("decode-mismatch", True)
    assert (p.loc.file, p.loc.variable, p.loc.block) == (str(full_strip), "image", (4, 0))
    assert "imagecodecs_lzw" in p.message and "decodes to 1440 values, the chunk holds 540" \
        in p.message
    for out in (tmp_path / "c.zarr", tmp_path / "c.json"):
        with pytest.raises(virtualize.VirtualizeError) as e:
            virtualize.virtualize([full_strip], out)
        assert [q.kind for q in e.value.problems] == ["decode-mismatch"]
        assert not out.exists()


def test_check_on_the_command_line_reports_it(full_strip):
    r = subprocess.run([sys.executable, "-m", "virtualize.cli", "check", str(full_strip)],
                       capture_output=True, text=True)
    assert r.returncode == 1, r.stderr
    assert "decode-mismatch" in r.stdout


@pytest.fixture(scope="module")
def rgba_opaque(tmp_path_factory):
    y, x = np.mgrid[0:H, 0:W]
    img = np.stack([y % 251, x % 251, (x + y) % 251, np.full_like(x, 255)], -1).astype("u1")
    img[3:6, 3:6, 3] = 0  # tile (0, 0) keeps its alpha; the all-opaque ones lose it
    path = tmp_path_factory.mktemp("webp") / "rgba.tif"
    tifffile.imwrite(path, img, photometric="rgb", compression="webp", tile=(32, 32),
                     compressionargs={"lossless": True})
    return path


def test_a_wrong_codec_mapping_is_caught(rgba_opaque, monkeypatch):
    """Without `hasalpha` (the mapping this project had) an all-opaque WebP tile decodes to
    3 samples: the check decodes an interior tile as well as the first and edge ones."""
    assert virtualize.check([rgba_opaque]).ok
    right = scan_tiff.tiff_codecs

    def without_alpha(page, dtype):
        codecs, why = right(page, dtype)
        return [dict(c, configuration={}) for c in codecs], why

    monkeypatch.setattr(scan_tiff, "tiff_codecs", without_alpha)
    report = virtualize.check([rgba_opaque], scan_timeout=None)  # in-process: patched
    assert {p.kind for p in report.problems} == {"decode-mismatch"}
    assert all(p.loc.variable == "image" and p.loc.block is not None for p in report.problems)
    assert any("fails" in p.message for p in report.problems)


def test_values_that_differ_are_caught(case, monkeypatch):
    """A mapping that decodes without error but to other values (shuffle with the wrong
    element size) is a mismatch too, named with the first differing value."""
    files = case("filters_gzip_shuffle")
    assert virtualize.check(files).ok
    right = hdf5_codecs.hdf5_filter_codec

    def wrong_shuffle(code, values, dtype):
        codec = right(code, values, dtype)
        if codec and codec["name"] == "numcodecs.shuffle":
            return {"name": "numcodecs.shuffle", "configuration": {"elementsize": 1}}
        return codec

    monkeypatch.setattr(hdf5_walk, "hdf5_filter_codec", wrong_shuffle)
    report = virtualize.check(files, scan_timeout=None)
    bad = [p for p in report.problems if p.kind == "decode-mismatch"]
    assert bad and not report.ok
    assert any("differs in" in p.message for p in bad)


# -- which chunks are checked ---------------------------------------------------------

def _stored(a):
    return int(((a.refs["length"] > 0) & (a.refs["path"] != MATERIALIZED)).sum())


def test_a_handful_per_stack_not_one_per_file(case, monkeypatch):
    # (as a large stack is sampled: a small array has every chunk decoded, below)
    monkeypatch.setattr(decode_module, "EVERY_CHUNKS", 0)
    files = case("months2024")  # 12 monthly files: chunk lengths 29, 30, 31 along time
    report = virtualize.check(files)
    assert report.ok
    invs = [virtualize.inventory(f) for f in files]
    groups = decode_check(report.plan, invs)
    stored = sum(_stored(a) for a in report.plan.arrays.values() if a.refs is not None)
    assert groups.problems == [] and 0 < groups.chunks < stored
    # one chunk shape per distinct month length and edge, two of each: not per file
    tas = report.plan.arrays["tas"]
    lengths = {n for n in tas.chunk_lengths[0]}
    assert groups.chunks <= 2 * len(lengths) * sum(1 for a in report.plan.arrays.values()
                                                   if a.refs is not None)
    every = decode_check(report.plan, invs, select="all")
    assert every.problems == [] and every.chunks == stored
    per_source = decode_check(report.plan, invs, select="sources", arrays=["tas"])
    assert per_source.chunks >= len(files)


@pytest.mark.parametrize("name,kind", [
    ("tenday_padded_raw", "concat split"),         # padded uncompressed blocks trimmed
    ("mosaic_staggered_rows_uncompressed", "mosaic split"),  # row ranges inside blocks
    ("stack_dates", "new axis"),                   # TIFFs stacked along a new time axis
    ("multipage", "pages"),
    ("appended_batches", "rectilinear"),
    ("dtypes", "every numeric type, both byte orders"),
    ("groups", "groups"),
    ("contiguous", "contiguous datasets"),
    ("nc3_months_classic", "netCDF classic records"),
])
def test_every_chunk_is_located_in_its_source(case, name, kind):
    files = case(name)
    report = (virtualize.check_mosaic(files) if name.startswith("mosaic") else
              virtualize.check(files, concat_dim="time" if name == "stack_dates" else None))
    assert report.ok, report.problems
    invs = [virtualize.inventory(f) for f in files]
    every = decode_check(report.plan, invs, select="all")
    assert every.problems == [], every.problems
    assert every.chunks == sum(_stored(a) for a in report.plan.arrays.values()
                               if a.refs is not None and a.inline is None)


def test_materialized_chunks_are_left_to_the_writer(case):
    files = case("tenday_padded")  # compressed, padded: materialized boundary blocks
    report = virtualize.check(files, materialize=True)
    assert report.ok
    a = report.plan.arrays["tas"]
    assert a.materialize
    every = decode_check(report.plan, [virtualize.inventory(f) for f in files], select="all")
    assert every.problems == [] and every.chunks == _stored(a) + sum(
        _stored(b) for n, b in report.plan.arrays.items()
        if n != "tas" and b.refs is not None and b.inline is None)


def test_select_is_checked(case):
    files = case("months2024")
    report = virtualize.check(files)
    with pytest.raises(ValueError):
        decode_check(report.plan, [], select="some")


def test_large_chunks_are_checked_on_their_leading_rows(case, monkeypatch):
    """An uncompressed chunk over the limit is decoded as its first rows (an array of its
    own); a compressed one is not decoded at all, and a note says so."""
    from virtualize.checks import decode as verify

    monkeypatch.setattr(verify, "DECODE_LIMIT", 64)
    files = case("contiguous")
    report = virtualize.check(files, scan_timeout=None)
    assert report.ok
    invs = [virtualize.inventory(f) for f in files]
    every = decode_check(report.plan, invs, select="all")
    assert every.problems == [] and every.chunks > 0
    assert every.bytes_read <= 64 * every.chunks
    files = case("filters_gzip_shuffle")
    report = virtualize.check(files)
    assert report.ok and any("not decode-checked" in n for n in report.notes)


def test_every_chunk_in_bounded_batches(case, monkeypatch):
    """select="all" (for `verify --decode`) decodes in batches, not all chunks at once."""
    from virtualize.checks import decode as verify

    calls = []
    real = verify._decode
    monkeypatch.setattr(verify, "BATCH_CHUNKS", 2)
    monkeypatch.setattr(verify, "_decode", lambda jobs: (calls.append(len(jobs)), real(jobs)))
    files = case("appended_batches")
    report = virtualize.check(files, scan_timeout=None)
    calls.clear()
    every = decode_check(report.plan, [virtualize.inventory(f) for f in files], select="all")
    assert every.problems == [] and every.chunks == sum(calls) > 2
    assert max(calls) <= 2


def _stack(d, bad_day: int) -> list:
    d.mkdir()
    data = np.arange(H * W, dtype="u2").reshape(H, W)
    files = []
    for day in (1, 2, 3):
        path = d / f"2024-01-0{day}.tif"
        if day == bad_day:
            full_height_last_strip(path, data + day)
        else:
            tifffile.imwrite(path, data + day, compression="lzw", rowsperstrip=RPS,
                             photometric="minisblack")
        files.append(path)
    return files


def test_in_a_stack_the_problem_names_the_file(tmp_path):
    """Three files along a new time axis, the last one written with a full-height last
    strip: the array's last chunk (from another file than its first) is checked, and the
    problem names that file and its own block."""
    files = _stack(tmp_path / "last", bad_day=3)
    report = virtualize.check(files, concat_dim="time")
    assert [(p.kind, p.loc.file, p.loc.block) for p in report.problems] == [
        ("decode-mismatch", str(files[2]), (4, 0))]
    assert report.plan.figures["image"].refused


def test_a_file_in_the_middle_needs_a_check_per_source(tmp_path, monkeypatch):
    """The sample of a large stack is a handful, not one per file: a bad file in the middle
    is found by `select="sources"` (what `virtualize verify --decode` is for)."""
    monkeypatch.setattr(decode_module, "EVERY_CHUNKS", 0)  # (sampled as a large stack is)
    files = _stack(tmp_path / "middle", bad_day=2)
    report = virtualize.check(files, concat_dim="time")
    assert report.ok
    per_source = decode_check(report.plan, [virtualize.inventory(f) for f in files],
                              select="sources")
    assert [(p.loc.file, p.loc.block) for p in per_source.problems] == [(str(files[1]), (4, 0))]


def test_a_small_array_has_every_chunk_decoded(tmp_path):
    """An array of few stored chunks (`EVERY_CHUNKS`, `EVERY_BYTES`) has each decoded before
    anything is written: the bad file in the middle of a small stack is refused by `check`
    and `virtualize` alike, located (round 4: a damaged LZW tile in the middle of one file,
    decoding to 1,025 bytes for 1,024, was written, and every read of it failed)."""
    files = _stack(tmp_path / "middle", bad_day=2)
    report = virtualize.check(files, concat_dim="time")
    assert [(p.kind, p.loc.file, p.loc.block) for p in report.problems if p.fatal] == [
        ("decode-mismatch", str(files[1]), (4, 0))]
    with pytest.raises(VirtualizeError) as e:
        virtualize.virtualize(files, tmp_path / "c.zarr", concat_dim="time")
    assert [(p.kind, p.loc.file) for p in e.value.problems] == [
        ("decode-mismatch", str(files[1]))]
    assert not (tmp_path / "c.zarr").exists()


def test_the_smallest_chunk_proves_an_array_whose_others_are_too_large(tmp_path, monkeypatch):
    """An array whose chunks the groups take are all too large to decode is proven on its
    smallest stored chunk. Three LZW TIFFs along a new axis, the limits made small so that a
    strip is over the decode limit and one shape group is taken: the first
    and third files' short last strips are sparse, so the groups take full strips only; the
    second's (stored at full height: it decodes to more than its chunk) is the smallest stored
    chunk, decoded and refused, where before the array was written unchecked (a note)."""
    monkeypatch.setattr(decode_module, "EVERY_CHUNKS", 0)
    monkeypatch.setattr(decode_module, "MAX_GROUPS", 1)
    monkeypatch.setattr(decode_module, "DECODE_LIMIT", 2000)  # a strip: 2880, the last 1080
    data = np.arange(H * W, dtype="u2").reshape(H, W)
    files = [tmp_path / f"2024-01-0{day}.tif" for day in (1, 2, 3)]
    for path in files[::2]:
        tifffile.imwrite(path, data, compression="lzw", rowsperstrip=RPS,
                         photometric="minisblack")
        with tifffile.TiffFile(path, mode="r+b") as tif:  # its last strip never written
            page = tif.pages[0]
            page.tags["StripOffsets"].overwrite([*page.tags["StripOffsets"].value[:-1], 0])
            page.tags["StripByteCounts"].overwrite([*page.tags["StripByteCounts"].value[:-1], 0])
    full_height_last_strip(files[1], data + 1)
    report = virtualize.check(files, concat_dim="time")
    assert [(p.kind, p.loc.file, p.loc.block) for p in report.problems if p.fatal] == [
        ("decode-mismatch", str(files[1]), ((H - 1) // RPS, 0))]
