"""Which pages of a TIFF form which image, as tifffile's series present them (ImageJ
hyperstacks, tifffile's shaped series, OME-TIFF series), with their leading shape and axis
names; and the series whose pages tifffile reads otherwise than their own tags say."""

from __future__ import annotations

import math
import os
import re
from typing import NamedTuple

import numpy as np
import tifffile


def _reopener(source):
    """A function opening `source` again as tifffile opens it by default (shaped, ImageJ
    and OME metadata honoured), for `tiff_images`. Never following an OME-XML into other
    files (`_multifile=False`: tifffile then falls back to its generic series)."""
    def reopen() -> tifffile.TiffFile:
        if not isinstance(source, (str, os.PathLike)):
            source.seek(0)
        return tifffile.TiffFile(source, _multifile=False)
    return reopen


class _Series(NamedTuple):
    shape: tuple[int, ...]
    axes: str
    offsets: list  # of its pages' IFDs (None for a frame that is not an IFD)
    kind: str  # 'shaped', 'imagej', 'generic', ...
    # (page, its first data offset, where tifffile reads that page's data) of the first
    # page tifffile does not read from its own offset (it reads the series as one block)
    misplaced: tuple[int, int, int] | None = None


def _misplaced(s) -> tuple[int, int, int] | None:
    """tifffile reads a series whose data it takes for one contiguous block (`dataoffset`:
    an ImageJ hyperstack's frames after the first page's data, consecutive uncompressed
    pages) as `size` values from that offset, whatever the other pages' own offsets say.
    The first IFD page whose own data offset is not where that block puts it, else None."""
    start = s.dataoffset
    if start is None:
        return None
    pages = list(s.pages)
    step = pages[0].nbytes if pages and pages[0] is not None else 0
    for k, p in enumerate(pages):
        if p is None or getattr(p, "offset", None) is None:
            continue
        own = int(p.dataoffsets[0]) if len(p.dataoffsets) else -1
        if own != start + k * step:
            return (k, own, start + k * step)
    return None


def _series(tif: tifffile.TiffFile, reopen) -> tuple[list[_Series], str | None]:
    """tifffile's series as `tifffile.imread` presents them (the file's ImageJ or tifffile
    "shaped" metadata honoured), as `_Series`. Also what went wrong when tifffile cannot
    build the series the file's ImageJ or shaped metadata describe (`tifffile.imread`
    fails alike), else None."""
    first = tif.pages.first
    other = reopen() if reopen is not None and (first.is_shaped or first.is_imagej
                                                or first.is_ome) else None
    try:
        series = (other or tif).series
        return [_Series(tuple(int(n) for n in s.shape), s.axes,
                        [getattr(p, "offset", None) for p in s.pages], s.kind, _misplaced(s))
                for s in series], None
    except Exception as e:  # metadata tifffile cannot follow
        if other is not None and not first.is_ome:
            return [], f"{type(e).__name__}: {e}"
        return [], None  # the generic view: the pages that agree
    finally:
        if other is not None:
            other.close()


def _fits(shape: tuple[int, ...], page_shape: tuple[int, ...], npages: int) -> tuple | None:
    """The leading shape when `shape` is `npages` pages of `page_shape`, else None."""
    k = len(shape) - len(page_shape)
    if k < 0 or tuple(shape[k:]) != tuple(page_shape) or math.prod(shape[:k]) != npages:
        return None
    return tuple(shape[:k])


def _lead_dims(axes: str, lead: tuple[int, ...], named: bool = False) -> tuple[str, ...]:
    """Names of the leading axes: 'page' for one; page_<tifffile axis letter> for more
    (page_t, page_z, page_c for an ImageJ hyperstack), numbered where letters repeat.
    `named` (OME series, whose letters always mean T, Z, C, ...): page_<letter> for one too."""
    if len(lead) <= 1 and not (named and lead and axes[:1].isalpha()):
        return ("page",) * len(lead)
    letters = [c.lower() for c in axes[:len(lead)]]
    if len(letters) != len(lead) or len(set(letters)) != len(letters):
        return tuple(f"page_{c}{i}" for i, c in enumerate(letters or "q" * len(lead)))
    return tuple(f"page_{c}" for c in letters)


def tiff_images(tif: tifffile.TiffFile, reopen=None, pages: list | None = None):
    """The images of a TIFF as the cube holds them: `image` (the full-resolution pages
    that agree with page 0) and `series/<k>/image` (tifffile's series k, when its pages
    are full-resolution pages outside `image` that agree with each other), each as
    (pages, leading shape, leading dims) -- the leading shape tifffile's series gives
    (an ImageJ hyperstack's (T, Z, C)), so that each reads as `series[k].asarray()`.
    Also returns the main pages left out (index, page), notes where tifffile presents
    series 0 otherwise (e.g. an ImageJ file whose frames are not all IFDs), and conflicts:
    series in which tifffile reads pages the file marks reduced-resolution or mask together
    with full-resolution pages (which pages form the image is ambiguous). `pages`: the
    file's pages (`_pages`) when the caller has them."""
    pages = _pages(tif) if pages is None else pages
    main = [p for p in pages if not (p.subfiletype & 0b101)]  # not reduced, not a mask
    if not main:
        raise ValueError("no full-resolution image in the file")
    by_offset = {p.offset: p for p in main}
    covered: set[int] = set()
    images: dict[str, tuple] = {}

    def one(offsets, shape, axes, kind=""):
        """The pages of a series when they are full-resolution pages outside the images
        so far that agree with each other, with its leading shape; else None. The pages
        keep the series' order (tifffile's: C order over its leading axes, whatever the
        IFDs' order in the file), so reshaping them to the leading shape places each."""
        ps = [by_offset.get(o) for o in offsets]
        if not ps or any(p is None or p.offset in covered for p in ps) or \
                any(_signature(p) != _signature(ps[0]) for p in ps):
            return None
        lead = _fits(shape, ps[0].shape, len(ps))
        return None if lead is None else (ps, lead, _lead_dims(axes, lead, kind == "ome"))

    series, failed = _series(tif, reopen)
    notes: list[tuple[str, str]] = []  # (variable, message)
    if main[0].is_ome and not any(s.kind == "ome" for s in series):
        notes.append(("image", _ome_unbuilt(main[0])))
    image = one(series[0].offsets, series[0].shape, series[0].axes, series[0].kind) \
        if series else None
    if image is None and series and series[0].kind == "ome":
        notes.append(("image", f"OME series 0 {series[0].shape} ({series[0].axes}) is read as "
                      f"the file's flat stack of pages: {_ome_why(series[0], by_offset)}"))
    if image is None:  # the pages that agree with the first full-resolution page
        first = main[0]
        stack = [p for p in main if _signature(p) == _signature(first)]
        lead = (len(stack),) if len(stack) > 1 else ()
        image = (stack, lead, _lead_dims("", lead))
        if series and series[0].shape != (*lead, *first.shape):
            notes.append(("image", f"tifffile presents series 0 as {series[0].shape} "
                          f"({series[0].axes}) from the file's metadata; the cube's image is the "
                          f"file's {len(stack)} agreeing page(s) of {first.shape}"))
    images["image"] = image
    covered |= {p.offset for p in image[0]}
    for k, s in enumerate(series[1:], start=1):
        found = one(s.offsets, s.shape, s.axes, s.kind)
        if found is not None:
            images[f"series/{k}/image"] = found
            covered |= set(s.offsets)
        elif s.kind == "ome":
            notes.append((f"series/{k}/image", f"OME series {k} {s.shape} ({s.axes}) is not "
                          f"virtualized: {_ome_why(s, by_offset, covered)}"))
    skipped = [(i, p) for i, p in enumerate(main) if p.offset not in covered]
    conflicts = _conflicts(pages, series) + _disagreeing(by_offset, series)
    if failed:
        conflicts.append(f"tifffile cannot build the series the file's "
                         f"{'ImageJ' if main[0].is_imagej else 'shaped'} metadata describe "
                         f"({failed}; tifffile.imread fails alike): which pages form the image "
                         "is unknown")
    return images, skipped, notes, conflicts


def _ome_unbuilt(first) -> str:
    """Why tifffile (never following the OME-XML into other files) gives no OME series."""
    desc = first.description or ""
    own = str(getattr(first.parent, "filename", "") or "").lower()
    names = sorted(n for n in set(re.findall(r'FileName\s*=\s*"([^"]*)"', desc))
                   if n.lower() != own)
    if names:
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        return (f"the file's OME-XML places planes in other files ({shown}): a multi-file OME "
                "dataset, which tifffile.imread assembles from those files; the cube holds "
                "only this file's own pages, as a flat stack, not the OME series")
    return ("tifffile builds no OME series from the file's OME-XML (see its warnings): the "
            "cube holds the file's pages as a flat stack")


def _ome_why(s, by_offset: dict, covered: set | None = None) -> str:
    """Why an OME series' pages are no regular grid of this file's pages."""
    missing = sum(o is None for o in s.offsets)
    if missing:
        return (f"{missing} of its {len(s.offsets)} planes are in no page of the file (the "
                "OME-XML's TiffData leave them out or place them in another file; tifffile "
                "reads them as zeros)")
    if any(o not in by_offset for o in s.offsets):
        return "some of its planes are pages marked reduced-resolution or mask"
    if covered and any(o in covered for o in s.offsets):
        return "some of its pages are already part of another image (or repeated)"
    ps = [by_offset[o] for o in s.offsets]
    if len(set(s.offsets)) != len(s.offsets):
        return "the OME-XML maps one page to several planes"
    if any(_signature(p) != _signature(ps[0]) for p in ps):
        return "its pages differ in layout (shape, type, blocks or compression)"
    return f"its shape is not whole pages of {ps[0].shape}"


def _conflicts(pages: list, series) -> list[str]:
    """Series whose pages the file marks partly full-resolution, partly reduced or mask
    (NewSubfileType): tifffile groups pages by their layout, not by that flag, so a page
    whose flag is damaged stays in the image for tifffile while the flag takes it out (a
    page of full size marked reduced-resolution is no overview either)."""
    by_offset = {p.offset: p for p in pages}
    out = []
    for k, (_shape, _axes, offsets, *_) in enumerate(series):
        ps = [by_offset[o] for o in offsets if o in by_offset]
        flagged = [p for p in ps if p.subfiletype & 0b101]
        if flagged and len(flagged) < len(ps):
            which = ", ".join(f"{p.index} (NewSubfileType {int(p.subfiletype)})"
                              for p in flagged[:5]) + (", ..." if len(flagged) > 5 else "")
            out.append(f"tifffile reads page(s) {which} as part of series {k} with "
                       f"{len(ps) - len(flagged)} full-resolution page(s) of the same shape and "
                       "layout, but the file marks them reduced-resolution or mask: which "
                       "pages form the image is ambiguous (a damaged NewSubfileType?)")
    return out


def _disagreeing(main: dict, series) -> list[str]:
    """Series the file's ImageJ or shaped metadata make of IFDs (full-resolution pages)
    whose own tags disagree on the layout: tifffile reads every page of such a series with
    its first page's layout (the others are frames of it), or cannot read it at all, while
    a page's own directory says otherwise (a damaged tag). Neither reading is exact. Also
    series tifffile reads as one contiguous block (`_misplaced`) where a page's own data
    offset is elsewhere: the cube would refer to the page's own bytes."""
    out = []
    for k, (_shape, _axes, offsets, kind, misplaced) in enumerate(series):
        if misplaced is not None and all(o in main for o in offsets if o is not None):
            k_page, own, read = misplaced
            page = main[offsets[k_page]].index if offsets[k_page] in main else k_page
            out.append(f"tifffile reads series {k} as one contiguous block from its first "
                       f"page's data offset on, the data of page {page} from byte {read}, but "
                       f"that page's own directory puts them "
                       f"at byte {own} (a damaged offset?): which bytes are the page is "
                       "ambiguous")
            continue
        if kind not in ("shaped", "imagej", "ome") or not offsets or \
                any(o is None or o not in main for o in offsets):
            continue
        ps = [main[o] for o in offsets]
        other = next((p for p in ps if _signature(p) != _signature(ps[0])), None)
        if other is not None:
            fields = ("shape", "dtype", "chunks", "chunked", "compression", "predictor",
                      "planarconfig", "is_tiled", "photometric", "jpegtables")
            diff = "; ".join(f"{f} {_shown(a)} vs {_shown(b)}" for f, a, b in
                             zip(fields, _signature(ps[0]), _signature(other)) if a != b)
            meta = {"imagej": "ImageJ", "ome": "OME"}.get(kind, "shaped")
            out.append(f"the file's {meta} metadata make pages {ps[0].index}..{ps[-1].index} "
                       f"series {k}, read with page {ps[0].index}'s layout, but page "
                       f"{other.index}'s own directory differs ({diff}): a damaged tag?")
    return out


def _shown(value) -> str:
    """A tag-derived value for a message: enumerations by name, bytes by length."""
    if isinstance(value, (bytes, bytearray)):
        return f"{len(value)} bytes"
    if isinstance(value, np.dtype):
        return str(value)
    return getattr(value, "name", None) or str(value)


def _pages(tif: tifffile.TiffFile) -> list:
    """The pages of the file's IFD chain (TiffPage objects; not SubIFDs)."""
    return [p for p in tif.pages if isinstance(p, tifffile.TiffPage)]


def _signature(p) -> tuple:
    return (p.shape, p.dtype, p.chunks, p.chunked, p.compression, p.predictor, p.planarconfig,
            p.is_tiled, p.photometric, bytes(p.jpegtables or b""))
