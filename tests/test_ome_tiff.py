"""OME-TIFF series keep their axes (issue 23): each series reads back from the cube as
`tifffile.TiffFile(path).series[k].asarray()`, shape and axes included, through
`virtualize.open`, xarray (engine="virtualize") and the kerchunk export; series whose
planes are not a regular grid of the file's own pages are flat stacks with a located note."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import tifffile
import xarray as xr

import virtualize
from virtualize.formats.tiff.read import read_tiff_region

from helpers import assert_same, kerchunk_group, kerchunk_xarray

RNG = np.random.default_rng(23)
# tifffile's axis letters -> the cube's dims: leading axes page_<letter>, then the page's
DIMS = {"Y": "y", "X": "x", "S": "band"}


def _dims(axes: str, page_ndim: int) -> tuple[str, ...]:
    lead, page = axes[:len(axes) - page_ndim], axes[len(axes) - page_ndim:]
    return tuple(f"page_{c.lower()}" for c in lead) + tuple(DIMS[c] for c in page)


def _ome(path, data, axes, **kw):
    tifffile.imwrite(path, data, ome=True, metadata={"axes": axes}, **kw)
    return path


def make_ome(tmp_path, name):
    p = tmp_path / f"{name}.ome.tif"
    u16 = RNG.integers(0, 65535, (3, 2, 4, 67, 45), dtype=np.uint16)
    if name == "tzcyx_tiled_zlib":
        return _ome(p, u16, "TZCYX", tile=(32, 16), compression="zlib")
    if name == "tzyx_strips":  # the issue's (7, 5, y, x) shape, uncompressed strips
        return _ome(p, RNG.random((7, 5, 37, 43)).astype("f4"), "TZYX", rowsperstrip=8)
    if name == "tzyx_strips_zlib":
        return _ome(p, RNG.integers(0, 255, (7, 5, 37, 43), dtype=np.uint8), "TZYX",
                    rowsperstrip=5, compression="zlib")
    if name == "zyx_one_axis":
        return _ome(p, u16[0, 0], "ZYX", tile=(16, 16))
    if name == "rgb_yxs":
        return _ome(p, RNG.integers(0, 255, (50, 40, 3), dtype=np.uint8), "YXS",
                    photometric="rgb", compression="zlib")
    if name == "rgb_tyxs_tiled":
        return _ome(p, RNG.integers(0, 255, (4, 50, 40, 3), dtype=np.uint8), "TYXS",
                    photometric="rgb", tile=(32, 32))
    if name == "rgb_tsyx_planar":  # planar-separate samples: pages (band, y, x)
        return _ome(p, RNG.integers(0, 255, (2, 3, 20, 30), dtype=np.uint8), "TSYX",
                    photometric="rgb", planarconfig="separate", compression="zlib")
    if name == "uuid_own_file":  # TiffData naming this very file (as Bio-Formats writes)
        _ome(p, u16[:, 0, :2], "TCYX")
        with tifffile.TiffFile(p) as tif:
            desc = tif.pages.first.description
        uuid = re.search(r' UUID="([^"]+)"', desc).group(1)
        desc = re.sub(r"<TiffData[^>]*/>", f'<TiffData IFD="0" PlaneCount="6"><UUID FileName='
                      f'"{p.name}">{uuid}</UUID></TiffData>', desc).replace(f' UUID="{uuid}"', "")
        tifffile.tiffcomment(p, desc.encode())
        return p
    if name == "several_series":
        with tifffile.TiffWriter(p, ome=True) as tw:
            tw.write(u16[:, 0], metadata={"axes": "TCYX"}, tile=(32, 32), compression="zlib")
            tw.write(RNG.random((5, 20, 30)).astype("f8"), metadata={"axes": "ZYX"})
            tw.write(RNG.integers(0, 255, (30, 20, 3), dtype=np.uint8), photometric="rgb",
                     metadata={"axes": "YXS"})
        return p
    raise KeyError(name)


def _rewrite_tiffdata(path, new: str, **sizes) -> None:
    """Replace the OME-XML's TiffData elements (the planes' places) with `new` (and
    Pixels' SizeZ=... with `sizes`)."""
    with tifffile.TiffFile(path) as tif:
        desc = tif.pages.first.description
    for key, n in sizes.items():
        desc = re.sub(rf'{key}="\d+"', f'{key}="{n}"', desc, count=1)
    desc = re.sub(r"<TiffData[^>]*/>", "", desc).replace("</Pixels>", new + "</Pixels>", 1)
    tifffile.tiffcomment(path, desc.encode())


def roundtrip(path, tmp_path):
    cube, refs = tmp_path / "cube.zarr", tmp_path / "cube.json"
    report = virtualize.virtualize([path], cube)
    virtualize.virtualize([path], refs)
    g, k = virtualize.open(cube), kerchunk_group(refs)
    for name in report.plan.arrays:
        doc = json.loads((cube / name / "zarr.json").read_text())
        assert doc["shape"] == list(g[name].shape)
        assert_same(k[name][...], g[name][...], f"{name}: kerchunk export vs cube")
    return report, g


OME_CASES = ["tzcyx_tiled_zlib", "tzyx_strips", "tzyx_strips_zlib", "zyx_one_axis",
             "rgb_yxs", "rgb_tyxs_tiled", "rgb_tsyx_planar", "uuid_own_file", "several_series"]


@pytest.mark.parametrize("name", OME_CASES)
def test_ome_series_keep_their_axes(tmp_path, name):
    path = make_ome(tmp_path, name)
    report, g = roundtrip(path, tmp_path)
    assert report.ok, report.problems
    assert not [p for p in report.problems if p.kind == "tiff-series"], report.problems
    ds = xr.open_dataset(tmp_path / "cube.zarr", engine="virtualize", mask_and_scale=False)
    kx = kerchunk_xarray(tmp_path / "cube.json", mask_and_scale=False, decode_times=False)
    with tifffile.TiffFile(path) as tif:
        assert [s.kind for s in tif.series] == ["ome"] * len(tif.series)
        for k, s in enumerate(tif.series):
            key = f"series/{k}/image" if k else "image"
            want = s.asarray()
            assert want.shape == s.shape
            assert_same(want, tifffile.imread(path, series=k), f"{name} {key} imread")
            assert_same(g[key][...], want, f"{name} {key}")
            dims = _dims(s.axes, len(s.keyframe.shape))
            assert report.plan.arrays[key].dims == dims
            if k == 0:
                assert ds["image"].dims == dims
                assert_same(ds["image"].values, want, f"{name} via xarray")
                assert_same(kx["image"].values, want, f"{name} kerchunk via xarray")
            # the region reader (decode check, materialize) agrees
            region = tuple((min(1, n - 1), min(n, 3)) for n in want.shape)
            assert_same(read_tiff_region(str(path), key, region),
                        want[tuple(slice(a, b) for a, b in region)], f"{name} {key} region")


def test_the_issue_shape_is_no_longer_flattened(tmp_path):
    path = make_ome(tmp_path, "tzyx_strips")
    a = virtualize.check(path).plan.arrays["image"]
    assert a.shape == (7, 5, 37, 43) and a.dims == ("page_t", "page_z", "y", "x")


def test_pages_out_of_ifd_order_are_placed_as_tifffile_places_them(tmp_path):
    """TiffData may map planes to IFDs in any order: tifffile's series keeps its own
    order (C order over the series' axes), and so does the cube."""
    path = _ome(tmp_path / "perm.ome.tif", RNG.integers(0, 9999, (2, 3, 20, 30), "u2"), "TZYX",
                compression="zlib")
    order = [4, 0, 5, 2, 1, 3]  # plane i (C order over T, Z) is IFD order[i]
    _rewrite_tiffdata(path, "".join(
        f'<TiffData FirstT="{i // 3}" FirstZ="{i % 3}" IFD="{ifd}" PlaneCount="1"/>'
        for i, ifd in enumerate(order)))
    with tifffile.TiffFile(path) as tif:
        want = tif.series[0].asarray()
        assert tif.series[0].kind == "ome"
        assert_same(want[0, 0], tif.pages[4].asarray(), "tifffile follows TiffData")
    report, g = roundtrip(path, tmp_path)
    assert report.ok
    assert_same(g["image"][...], want, "permuted planes")


def test_missing_planes_are_a_flat_stack_with_a_located_note(tmp_path):
    data = RNG.integers(0, 9999, (2, 3, 20, 30), "u2")
    path = _ome(tmp_path / "holes.ome.tif", data, "TZYX")
    _rewrite_tiffdata(path, '<TiffData IFD="0" PlaneCount="5"/>')  # the 6th plane: none
    with tifffile.TiffFile(path) as tif:
        assert tif.series[0].shape == (2, 3, 20, 30)  # tifffile zero-fills the missing one
    report, g = roundtrip(path, tmp_path)
    assert g["image"].shape == (6, 20, 30)  # the file's own pages, never a guessed grid
    assert_same(g["image"][...], data.reshape(6, 20, 30), "flat stack")
    notes = [p for p in report.problems if p.kind == "tiff-series"]
    assert any("1 of its 6 planes are in no page" in p.message and
               p.loc.variable == "image" and not p.fatal for p in notes), notes


def test_multi_file_ome_is_this_files_pages_with_a_located_note(tmp_path):
    """Planes in other files (tifffile's is_multifile): the cube holds this file's pages
    only, flat, and says why; tifffile is never sent into the other files."""
    data = RNG.integers(0, 9999, (2, 20, 30), "u2")
    path = _ome(tmp_path / "part0.ome.tif", data, "ZYX")
    uuid = "urn:uuid:00000000-0000-0000-0000-000000000001"
    _rewrite_tiffdata(path, '<TiffData FirstZ="0" IFD="0" PlaneCount="2"/>'
                      f'<TiffData FirstZ="2" IFD="0" PlaneCount="2"><UUID FileName='
                      f'"part1.ome.tif">{uuid}</UUID></TiffData>', SizeZ=4)
    with tifffile.TiffFile(path) as tif, tifffile.TiffFile(path, _multifile=False) as solo:
        assert tif.series[0].kind == "ome" and tif.series[0].shape[0] == 4
        assert solo.series[0].kind != "ome"
    report, g = roundtrip(path, tmp_path)
    assert_same(g["image"][...], data, "this file's pages")
    assert report.plan.arrays["image"].dims == ("page", "y", "x")
    notes = [p for p in report.problems if p.kind == "tiff-series"]
    assert any("multi-file OME" in p.message and "part1.ome.tif" in p.message and
               p.loc.variable == "image" for p in notes), notes


def test_a_stack_of_ome_files_joins_along_a_new_axis(tmp_path):
    datas = [RNG.integers(0, 9999, (2, 3, 20, 30), "u2") for _ in range(3)]
    files = [_ome(tmp_path / f"t{i}.ome.tif", d, "TZYX", tile=(16, 16), compression="zlib")
             for i, d in enumerate(datas)]
    cube = tmp_path / "stack.zarr"
    report = virtualize.virtualize(files, cube, concat_dim="run")
    assert report.ok, report.problems
    g = virtualize.open(cube)
    assert report.plan.arrays["image"].dims == ("run", "page_t", "page_z", "y", "x")
    assert_same(g["image"][...], np.stack([tifffile.imread(f) for f in files]), "stack")


def test_an_ome_page_whose_own_tags_disagree_is_refused(tmp_path):
    """tifffile reads an OME series' pages with the first page's layout; a page whose own
    directory says otherwise (a damaged tag) is refused, located, never guessed."""
    path = tmp_path / "mixed.ome.tif"
    with tifffile.TiffWriter(path, ome=True) as tw:
        tw.write(RNG.integers(0, 9999, (2, 20, 30), "u2"), metadata={"axes": "ZYX"})
    with tifffile.TiffFile(path) as tif:  # page 1's Compression tag: say LZW instead of none
        tag = tif.pages[1].tags[259]
        at = tag.valueoffset
    raw = bytearray(path.read_bytes())
    raw[at:at + 2] = (5).to_bytes(2, "little")
    path.write_bytes(bytes(raw))
    report = virtualize.check(path)
    assert not report.ok
    assert any(p.kind == "corrupt" and "OME metadata" in p.message for p in report.problems), \
        report.problems
