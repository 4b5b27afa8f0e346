"""A page's image directory damaged so that tifffile reads past it (found by the mutation
suite: `tiff-multipage`, byte 16 ^= 0x1, the count of page 0's ImageWidth entry).

tifffile drops a tag it cannot read (a damaged count, data type or value offset: it logs
an error) and reads the page with the tag's default; a page left without width or length
has no pixels, and tifffile (2026.11.8 and later) leaves such pages out of its series. The
cube's `image` follows tifffile's series 0, so the damaged page silently fell out of it and
the pages after it moved up one place (the suite's oracle noticed only for page 0: a
middle page dropped the same way also falls out of its page-by-page reading). Such files
are refused, naming the page and the tag; a damaged tag the layout does not depend on stays
a non-fatal `tiff-warning`. Kin: a full-size page whose NewSubfileType says reduced or mask
stays in tifffile's series 0 but fell out of the cube's image (refused too).
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
import tifffile

from virtualize.formats import scan

from ._oracle import judge


@pytest.fixture(scope="module")
def sources(case, tmp_path_factory):
    """label -> (bytes, IFD offsets): the 4-page tiled fixture and 3 pages of strips."""
    strips = tmp_path_factory.mktemp("damaged-pages") / "strips.tif"
    with tifffile.TiffWriter(strips) as tw:
        for i in range(3):
            tw.write(np.arange(40 * 30, dtype="<u2").reshape(40, 30) + i * 1000,
                     rowsperstrip=16, subfiletype=0, metadata=None)  # NewSubfileType 0
    out = {}
    for label, path in (("tiles", case("multipage")[0]), ("strips", strips)):
        with tifffile.TiffFile(path) as tif:
            out[label] = (path.read_bytes(), [p.offset for p in tif.pages])
    return out


def _entry(b: bytes, ifd: int, code: int) -> int:
    """Byte offset of the IFD entry of tag `code` (little-endian classic TIFF)."""
    for i in range(struct.unpack_from("<H", b, ifd)[0]):
        at = ifd + 2 + 12 * i
        if struct.unpack_from("<H", b, at)[0] == code:
            return at
    raise LookupError(code)


def _damaged(sources, tmp_path, label: str, page: int, code: int, how: str):
    data, ifds = sources[label]
    b = bytearray(data)
    at = _entry(b, ifds[page], code)
    if how == "count":  # a value that no longer fits the entry: its "offset" is past the end
        struct.pack_into("<I", b, at + 4, struct.unpack_from("<I", b, at + 4)[0] + 0x10000)
    elif how == "type":  # no TIFF data type
        struct.pack_into("<H", b, at + 2, 99)
    elif how.startswith("value "):
        struct.pack_into("<I", b, at + 8, int(how.split()[1]))
    elif how == "code":  # the entry renamed to the next code (ImageWidth -> ImageLength)
        struct.pack_into("<H", b, at, code + 1)
    path = tmp_path / f"{label}.tif"
    path.write_bytes(bytes(b))
    return path


def _fatal(path) -> list:
    return [p for p in scan(path).problems if p.fatal]


LAYOUT = [(256, "ImageWidth"), (257, "ImageLength"), (258, "BitsPerSample"),
          (259, "Compression"), (262, "PhotometricInterpretation"), (277, "SamplesPerPixel")]


@pytest.mark.parametrize("label", ["tiles", "strips"])
@pytest.mark.parametrize("page", [0, 1])
@pytest.mark.parametrize("code,name", LAYOUT)
def test_a_layout_tag_tifffile_cannot_read_is_refused(sources, tmp_path, label, page, code, name):
    """Any page, any tag the layout depends on, its data type damaged: tifffile skips the
    tag and reads the page otherwise (often as a series of its own, or none)."""
    path = _damaged(sources, tmp_path, label, page, code, "type")
    with tifffile.TiffFile(path) as tif:
        assert code not in tif.pages[page].tags  # tifffile did drop it
    problems = _fatal(path)
    assert problems and all(p.loc.file == str(path) for p in problems)
    [p] = [p for p in problems if name in p.message]
    assert p.kind == "corrupt" and f"page {page} " in p.message and "could not read" in p.message


@pytest.mark.parametrize("label,code,name", [("tiles", 256, "ImageWidth"),
                                             ("tiles", 324, "TileOffsets"),
                                             ("strips", 273, "StripOffsets"),
                                             ("strips", 278, "RowsPerStrip")])
def test_a_damaged_count_is_refused(sources, tmp_path, label, code, name):
    """The mutation suite's case and its kin: an entry's count so large that its values
    would lie past the end of the file (tifffile: "invalid value offset")."""
    path = _damaged(sources, tmp_path, label, 0, code, "count")
    problems = _fatal(path)
    assert any(p.kind == "corrupt" and name in p.message and "page 0 " in p.message
               for p in problems), problems
    assert judge(path, tmp_path / "cube.zarr") == "refused"


@pytest.mark.parametrize("label", ["tiles", "strips"])
@pytest.mark.parametrize("page", [0, 1])
@pytest.mark.parametrize("code,how", [(256, "value 0"), (257, "value 0"), (256, "code")])
def test_a_page_without_pixels_is_refused(sources, tmp_path, label, page, code, how):
    """ImageWidth or ImageLength 0, or the ImageWidth entry renamed: tifffile reads the page
    as zero-size and leaves it (with its strips or tiles) out of its series."""
    path = _damaged(sources, tmp_path, label, page, code, how)
    with tifffile.TiffFile(path) as tif:
        assert 0 in tif.pages[page].shape
        assert all(p.index != page for s in tif.series for p in s.pages)
    problems = _fatal(path)
    assert any(p.kind == "corrupt" and p.message.startswith(f"page {page} ")
               and "has no pixels" in p.message for p in problems), problems
    assert all(p.loc.file == str(path) for p in problems)


def test_a_damaged_tag_the_layout_does_not_need_is_a_note(sources, tmp_path):
    """ResolutionUnit of page 1 unreadable: the pages still agree, the cube holds all of
    them and reads like tifffile (the tag is a non-fatal tiff-warning)."""
    path = _damaged(sources, tmp_path, "tiles", 1, 296, "type")
    inv = scan(path)
    assert not [p for p in inv.problems if p.fatal]
    assert [p.kind for p in inv.problems] == ["tiff-warning"]
    assert inv.variables["image"].shape == (4, 70, 100)
    assert judge(path, tmp_path / "cube.zarr") == "accepted"


@pytest.mark.parametrize("page", [0, 1, 2])
@pytest.mark.parametrize("flag", [1, 4])
def test_a_full_size_page_marked_reduced_or_mask_is_refused(sources, tmp_path, page, flag):
    """NewSubfileType of one page damaged to 1 (reduced resolution) or 4 (mask): tifffile
    groups pages by layout and still reads it as part of series 0 (imread gives 3 pages),
    while the flag takes it out of the full-resolution pages (the cube's image had 2, a
    non-fatal note said so). Which pages form the image is ambiguous: refused."""
    path = _damaged(sources, tmp_path, "strips", page, 254, f"value {flag}")
    with tifffile.TiffFile(path) as tif:
        assert tif.pages[page].subfiletype == flag
        assert [p.index for p in tif.series[0].pages] == [0, 1, 2]
    problems = _fatal(path)
    assert [p.kind for p in problems] == ["corrupt"] and problems[0].loc.file == str(path)
    assert f"page(s) {page} (NewSubfileType {flag})" in problems[0].message


def test_a_missing_photometric_tag_reads_as_tifffile_reads_it(tmp_path):
    """No PhotometricInterpretation entry at all (its code changed to a private tag's):
    tifffile keeps the default as a plain int, not an enumeration member; the scan used to
    stop at its `.name` ("AttributeError: 'int' object has no attribute 'name'")."""
    path = tmp_path / "nophotometric.tif"
    tifffile.imwrite(path, np.arange(600, dtype="<u2").reshape(20, 30), photometric="minisblack",
                     metadata=None)
    b = bytearray(path.read_bytes())
    struct.pack_into("<H", b, _entry(b, struct.unpack_from("<I", b, 4)[0], 262), 65000)
    path.write_bytes(bytes(b))
    with tifffile.TiffFile(path) as tif:
        assert 262 not in tif.pages[0].tags and type(tif.pages[0].photometric) is int
    inv = scan(path)
    assert not inv.problems and inv.variables["image"].attrs["tiff_photometric"] == "0"
    assert judge(path, tmp_path / "cube.zarr") == "accepted"


# -- series made by the file's ImageJ / tifffile "shaped" metadata ------------------------
# tifffile reads such a series with its first page's layout (the other pages are frames
# of it; an ImageJ hyperstack's data as one contiguous block from the first page's data),
# while the cube referred to each page's own directory: a damaged tag in another page made
# the two differ (found by the mutation suite over these fixtures: the cube's image lost the
# page, or merged pages of another series, or read where tifffile reads something else).


def _page_entry(path, page: int, code: int) -> tuple[bytearray, int]:
    b = bytearray(path.read_bytes())
    with tifffile.TiffFile(path, is_shaped=False, is_imagej=False) as tif:
        ifd = tif.pages[page].offset
    return b, _entry(b, ifd, code)


@pytest.mark.parametrize("name,page,code,value,differs", [
    ("multipage_shaped", 1, 322, 48, "chunks"),  # TileWidth
    ("multipage_shaped", 3, 259, 1, "compression"),  # Compression
    ("shaped_series", 4, 258, 8, "dtype"),  # BitsPerSample, in series 0 of four
    ("imagej_hyperstack", 4, 259, 5, "compression"),
    ("imagej_hyperstack", 2, 257, 35, "shape"),  # ImageLength
])
def test_a_series_page_whose_own_tags_disagree_is_refused(case, tmp_path, name, page, code,
                                                          value, differs):
    src = case(name)[0]
    b, at = _page_entry(src, page, code)
    struct.pack_into("<H", b, at + 8, value)
    path = tmp_path / src.name
    path.write_bytes(bytes(b))
    with tifffile.TiffFile(path) as tif:  # tifffile still reads the page as part of series 0
        assert tif.series[0].kind in ("shaped", "imagej")
        assert page in [p.index for p in tif.series[0].pages]
    problems = _fatal(path)
    assert [p.kind for p in problems] == ["corrupt"] and problems[0].loc.file == str(path)
    assert f"page {page}'s own directory differs ({differs} " in problems[0].message
    assert judge(path, tmp_path / "cube.zarr") == "refused"


@pytest.mark.parametrize("page,delta,block", [(1, -100, True), (3, 200, True), (5, 2, True),
                                              (0, -100, True), (0, 200, False)])
def test_an_imagej_page_whose_data_offset_moved_is_refused(case, tmp_path, page, delta, block):
    """tifffile reads the hyperstack as one block from page 0's data offset (when the
    frames fit between it and page 1's directory): page k's own StripOffsets pointing
    elsewhere, or page 0's moving the block, cannot both be read. When page 0's data no
    longer end before page 1's directory, tifffile reads each page from its own offset, as
    the cube does."""
    src = case("imagej_hyperstack")[0]
    b, at = _page_entry(src, page, 273)
    struct.pack_into("<I", b, at + 8, struct.unpack_from("<I", b, at + 8)[0] + delta)
    path = tmp_path / src.name
    path.write_bytes(bytes(b))
    with tifffile.TiffFile(path) as tif:
        assert (tif.series[0].dataoffset is not None) == block
    problems = _fatal(path)
    if not block:
        assert not problems and judge(path, tmp_path / "cube.zarr") == "accepted"
        return
    assert [p.kind for p in problems] == ["corrupt"] and problems[0].loc.file == str(path)
    assert "one contiguous block" in problems[0].message
    assert judge(path, tmp_path / "cube.zarr") == "refused"


def test_metadata_series_tifffile_cannot_build_are_refused(case, tmp_path):
    """Page 1's ImageWidth in a shaped series changed: tifffile's series (and imread) fail
    ("incompatible keyframe"); the cube stacked the pages that agree with page 0 instead,
    those of series 3 included."""
    src = case("shaped_series")[0]
    b, at = _page_entry(src, 1, 256)
    struct.pack_into("<H", b, at + 8, 101)
    path = tmp_path / src.name
    path.write_bytes(bytes(b))
    with pytest.raises(RuntimeError):
        tifffile.imread(path)
    problems = _fatal(path)
    assert [p.kind for p in problems] == ["corrupt"] and problems[0].loc.file == str(path)
    assert "cannot build the series" in problems[0].message and "shaped" in problems[0].message
