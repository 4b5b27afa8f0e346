"""A GDAL VRT of a mosaic or a TIFF stack: one raster, one VRTRasterBand per band (a
tile's sample or a stacked file), its sources the original files (SimpleSource, placed
by SrcRect/DstRect), NoDataValue, SRS and GeoTransform; readable by gdalinfo,
gdal_translate and QGIS. What GDAL would read differently from the cube is refused
(layout.py). The provenance (kerchunk references of the same plan, with the source
table and roots) rides along in `<Metadata domain="virtualize">`, with a digest of the
raster part, for virtualize to read the VRT back exactly (reader.py). Chunks no stored
block fits (a mosaic's padded or cut blocks, or --materialize's cells) are recorded as
windows of their source (file, variable, region), which virtualize decodes from it when it
reads the VRT: GDAL reads the files whole, so nothing is copied into the VRT."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import zlib
from dataclasses import replace
from pathlib import Path
from xml.sax.saxutils import escape

from ...model import Location, Plan, Problem, VirtualizeError
from ...storage import is_url, protocol
from ..references import record_section, reference_set
from ..staging import staged_file
from .layout import INSTEAD, KIND, SAMPLES, VrtLayout, vrt_layout

VRT_FORMAT = "virtualize-vrt"
VRT_VERSION = 1
# a VRT recording windows: its digest covers them too, so a virtualize that does not know
# windows (it would read those chunks as the fill value) refuses it as edited
WINDOWS_VERSION = 2
# a VRT written by virtualize begins with its first line, then this
VRT_HEAD = '  <Metadata domain="virtualize">\n    <MDI key="format">virtualize-vrt</MDI>\n'
META_END = "  </Metadata>\n"
TIFF_MAGIC = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")
TIFF_SUFFIXES = (".tif", ".tiff", ".gtiff", ".cog")
# object storage GDAL reads through its virtual file systems (credentials and endpoints
# from GDAL's own configuration: AWS_*, GS_*, ...)
VSI = {"http": "/vsicurl/", "https": "/vsicurl/", "s3": "/vsis3/", "gs": "/vsigs/",
       "gcs": "/vsigs/"}


def write_vrt(plan: Plan, dest: str | Path, overwrite: bool = False, *,
              relative_to: str | None = None) -> Path:
    """The VRT of `plan` at `dest` (staged, published when complete); `relative_to`: its
    final location, to name local sources relative to it (relativeToVRT="1")."""
    dest = Path(dest)
    text = vrt_text(plan, relative_to)
    with staged_file(dest, overwrite, [s.path for s in plan.sources]) as stage:
        stage.write_text(text, encoding="utf-8")
    return dest


def vrt_text(plan: Plan, relative_to: str | None = None) -> str:
    """The VRT document of `plan` (raises VirtualizeError with every problem found)."""
    layout = vrt_layout(plan)
    names = _source_names(plan, layout, relative_to)
    first, body = _raster(plan, layout, names, _scaling(plan, layout))
    _readable_windows(plan)
    plan, windows = _windows(plan)
    version = WINDOWS_VERSION if windows else VRT_VERSION
    refs = reference_set(plan, record_section(plan, VRT_FORMAT, version), relative_to)
    held = pack(windows) if windows else None
    meta = [VRT_HEAD,
            f'    <MDI key="version">{version}</MDI>\n',
            f"    <MDI key=\"array\">{escape(layout.name)}</MDI>\n",
            f'    <MDI key="digest">{digest(first, body, held)}</MDI>\n',
            f'    <MDI key="references">{pack(refs)}</MDI>\n',
            *([f'    <MDI key="windows">{held}</MDI>\n'] if held else ()),
            META_END]
    return first + "".join(meta) + body


def pack(doc) -> str:
    """A JSON document as the VRT's metadata holds it: compressed, base64."""
    return base64.b64encode(zlib.compress(
        json.dumps(doc, allow_nan=False, separators=(",", ":")).encode(), 6)).decode()


def _readable_windows(plan: Plan) -> None:
    """One window of each array decoded from its source and encoded again with the array's
    codecs, as virtualize's read of the VRT does it: what cannot be is refused here, not
    met when the VRT is read."""
    from ..materialize import materialized_chunks

    problems: list[Problem] = []
    for name, a in plan.arrays.items():
        if not a.materialize:
            continue
        index, cell = min(a.materialize.items())
        try:
            list(materialized_chunks(plan, replace(a, materialize={index: cell})))
        except VirtualizeError as e:
            problems.extend(e.problems)
        except Exception as e:  # noqa: BLE001 - a codec that decodes but cannot encode
            problems.append(Problem(
                Location(plan.sources[cell.source].path, name, None, index), KIND,
                "its chunks that are windows of its tiles cannot be encoded again with its "
                f"codecs ({type(e).__name__}: {e}), as virtualize's read of the VRT needs: "
                + INSTEAD))
    if problems:
        raise VirtualizeError(problems, f"cannot write a GDAL VRT: {len(problems)} problem(s); "
                              "nothing was written")


def _windows(plan: Plan) -> tuple[Plan, dict[str, list]]:
    """The plan with no chunk to copy, and the chunks it would copy as windows of their
    sources: per array, [chunk key, source index, variable, region, chunk shape] each. The
    sources are recorded as not copied from (a touched one is re-scanned as any other)."""
    from ..materialize import chunk_key

    windows = {name: [[chunk_key(index), c.source, c.variable, [list(r) for r in c.region],
                       list(a.chunk_shape(index))]
                      for index, c in sorted(a.materialize.items())]
               for name, a in plan.arrays.items() if a.materialize}
    if not windows and not any(s.copied for s in plan.sources):
        return plan, {}
    return replace(plan, sources=[replace(s, copied=False) for s in plan.sources],
                   arrays={n: replace(a, materialize={}) if a.materialize else a
                           for n, a in plan.arrays.items()}), windows


def digest(first: str, body: str, windows: str | None = None) -> str:
    """What a reader checks the VRT's raster part (all but the virtualize metadata) by,
    and its recorded windows (packed) when it has them."""
    return "sha256:" + hashlib.sha256((first + body + (windows or "")).encode()).hexdigest()


def _raster(plan: Plan, layout: VrtLayout, names: list[str],
            scaling: list[tuple[float, float]] | None = None) -> tuple[str, str]:
    first = f'<VRTDataset rasterXSize="{layout.width}" rasterYSize="{layout.height}">\n'
    out: list[str] = []
    srs, transform = _georef(plan, layout)
    if srs:
        # (no dataAxisToSRSAxisMapping: GDAL then takes the traditional GIS order, x =
        # easting / longitude first, as its GeoTIFF driver does)
        out.append(f"  <SRS>{escape(srs)}</SRS>\n")
    if transform:
        out.append(f"  <GeoTransform>{', '.join(transform)}</GeoTransform>\n")
    # RGB tiles shown as colour (what GDAL says of an RGB TIFF's bands; values unchanged)
    rgb = layout.array.attrs.get("tiff_photometric") == "rgb" and SAMPLES in layout.array.dims
    for b, sources in enumerate(layout.bands, start=1):
        out.append(f'  <VRTRasterBand dataType="{layout.gdal_type}" band="{b}">\n')
        label, step = _label(plan, layout, b - 1, sources)
        if label:
            out.append(f"    <Description>{escape(label)}</Description>\n")
        if step:  # (GDAL's band metadata: gdalinfo, rasterio's tags(b), QGIS' band info)
            out.append("    <Metadata>\n" + "".join(
                f'      <MDI key="{escape(k)}">{escape(v)}</MDI>\n' for k, v in step.items())
                + "    </Metadata>\n")
        if rgb and b <= 3:
            out.append(f"    <ColorInterp>{('Red', 'Green', 'Blue')[b - 1]}</ColorInterp>\n")
        if layout.nodata is not None:
            out.append(f"    <NoDataValue>{_number(layout.nodata)}</NoDataValue>\n")
        if scaling and scaling[b - 1] != (1.0, 0.0):
            scale, offset = scaling[b - 1]
            out.append(f"    <Offset>{offset!r}</Offset>\n    <Scale>{scale!r}</Scale>\n")
        for p in sources:
            rel, name = names[p.source]
            out.append(
                "    <SimpleSource>\n"
                f'      <SourceFilename relativeToVRT="{int(rel)}">{escape(name)}</SourceFilename>\n'
                f"      <SourceBand>{p.band}</SourceBand>\n"
                f'      <SrcRect xOff="0" yOff="0" xSize="{p.width}" ySize="{p.height}"/>\n'
                f'      <DstRect xOff="{p.col0}" yOff="{p.row0}" xSize="{p.width}" '
                f'ySize="{p.height}"/>\n'
                "    </SimpleSource>\n")
        out.append("  </VRTRasterBand>\n")
    out.append("</VRTDataset>\n")
    return first, "".join(out)


def _scaling(plan: Plan, layout: VrtLayout) -> list[tuple[float, float]]:
    """Per band, the (scale, offset) GDAL shows its tiles' band with (their GDAL_METADATA;
    (1, 0) without), for the VRT's band to declare as well; refuses a band whose tiles
    disagree (GDAL's band has one). A URL's header is not read here: taken as (1, 0)."""
    out: list[tuple[float, float]] = []
    problems: list[Problem] = []
    for sources in layout.bands:
        seen: dict[tuple[float, float], str] = {}
        for p in sources:
            path = plan.sources[p.source].path
            seen.setdefault(_tile_scaling(path, p.band), path)
        if len(seen) > 1:
            (a, pa), (b, pb) = list(seen.items())[:2]
            problems.append(Problem(Location(pb, layout.name), KIND, (
                f"GDAL shows its band {sources[0].band} with scale {b[0]!r} and offset "
                f"{b[1]!r} (its GDAL_METADATA), {pa} with scale {a[0]!r} and offset {a[1]!r}: "
                f"one VRT band has one scaling; {INSTEAD}")))
        out.append(next(iter(seen), (1.0, 0.0)))
    if problems:
        raise VirtualizeError(problems, f"cannot write a GDAL VRT: {len(problems)} problem(s); "
                              "nothing was written")
    return out


def _tile_scaling(path: str, band: int) -> tuple[float, float]:
    """(scale, offset) of band `band` (1-based) of a local TIFF's first image as GDAL shows
    them: its GDAL_METADATA tag (42112; items role="scale" / "offset" of sample band - 1),
    else its PAM sidecar (`PATH.aux.xml`, PAMRasterBand `band`'s Scale / Offset)."""
    if is_url(path):
        return 1.0, 0.0
    import tifffile

    try:
        with tifffile.TiffFile(path) as tif:
            tag = tif.pages.first.tags.get(42112)
            text = tag.value if tag is not None else None
    except Exception:  # noqa: BLE001 - the header check names an unreadable file
        text = None
    found: dict[str, float] = {}
    for item in _xml(text):
        role, sample = item.get("role"), item.get("sample")
        if role in ("scale", "offset") and (sample or "").strip() == str(band - 1):
            _number_into(found, role, item.text)
    if not found and os.path.isfile(path + ".aux.xml"):
        try:
            with open(path + ".aux.xml", encoding="utf-8", errors="replace") as f:
                pam = f.read(1 << 20)
        except OSError:
            pam = None
        for b in _xml(pam):
            if b.tag == "PAMRasterBand" and (b.get("band") or "").strip() == str(band):
                for role, name in (("scale", "Scale"), ("offset", "Offset")):
                    el = b.find(name)
                    if el is not None:
                        _number_into(found, role, el.text)
    return found.get("scale", 1.0), found.get("offset", 0.0)


def _xml(text):
    """The children of an XML document's root ([] when there is none or it cannot be
    parsed: GDAL ignores it too)."""
    import xml.etree.ElementTree as ET

    if not isinstance(text, str):
        return []
    try:
        return list(ET.fromstring(text))
    except ET.ParseError:
        return []


def _number_into(found: dict, role: str, text) -> None:
    try:
        found[role] = float((text or "").strip())
    except ValueError:
        pass


def _label(plan: Plan, layout: VrtLayout, b: int, sources) -> tuple[str | None, dict]:
    """(its description, its metadata items) of band `b` of a stack or of a mosaic over
    time: named by its step of the band axis' coordinate, a date as a date ("time=
    2024-01-02", items {"time": "2024-01-02", "time_value": "1", "time_units": "days
    since 2024-01-01"}), else its value with its units; without a coordinate, when one
    file makes it, by the file's name. A tile's samples are not named."""
    a = layout.array
    dims = [d for d in a.dims if d not in ("y", "x", "lat", "lon", "latitude", "longitude")]
    if len(dims) != 1 or dims[0] == SAMPLES:
        return None, {}
    dim = dims[0]
    c = plan.arrays.get(dim)
    values = c.inline if c is not None else None
    if values is not None and values.ndim == 1 and values.size == len(layout.bands):
        units = c.attrs.get("units")
        v = values[b]
        v = v.item() if hasattr(v, "item") else v
        units = units if isinstance(units, str) else None
        when = _date(v, units, c.attrs.get("calendar"))
        items = {dim: when or str(v)}
        if when is not None or units:
            items.update({f"{dim}_value": str(v), f"{dim}_units": units or ""})
        return f"{dim}={when or v}" + ("" if when or not units else f" {units}"), items
    if len(sources) == 1:
        return os.path.basename(plan.sources[sources[0].source].path), {}
    return None, {}


def _date(value, units: str | None, calendar) -> str | None:
    """A CF time value as an ISO date ("2024-01-02", "2024-01-02T06:00:00"), or None."""
    if not units or " since " not in units or isinstance(value, (str, bool)):
        return None
    try:
        import cftime

        d = cftime.num2date(value, units, calendar if isinstance(calendar, str) else "standard")
    except (ValueError, TypeError, OverflowError):
        return None
    text = d.isoformat()
    return text[:-len("T00:00:00")] if text.endswith("T00:00:00") else text


def _number(v) -> str:
    if isinstance(v, (bool,)) or v is None:
        return str(int(bool(v)))
    try:
        if float(v).is_integer() and not isinstance(v, float):
            return str(int(v))
    except (TypeError, ValueError, OverflowError):
        pass
    return repr(float(v))


def _grid_mapping(plan: Plan, layout: VrtLayout):
    gm = layout.array.attrs.get("grid_mapping")
    a = plan.arrays.get(gm) if isinstance(gm, str) else None
    return a.attrs if a is not None else {}


def _georef(plan: Plan, layout: VrtLayout) -> tuple[str | None, list[str] | None]:
    """(the CRS as GDAL takes it, the six GeoTransform numbers) from the cube's grid
    mapping (the mosaic's: its union's transform), where it has them."""
    attrs = _grid_mapping(plan, layout)
    # an EPSG code first: GDAL resolves it with its own PROJ database, as it does the
    # GeoTIFF's key (a WKT from pyproj's newer database would differ in its text)
    epsg = attrs.get("epsg")
    if isinstance(epsg, int) and not isinstance(epsg, bool):
        srs = f"EPSG:{epsg}"
    else:
        srs = attrs.get("crs_wkt") or attrs.get("spatial_ref")
        srs = srs if isinstance(srs, str) and srs else None
    t = attrs.get("GeoTransform")
    transform = None
    if isinstance(t, str):
        try:
            values = [float(v) for v in t.replace(",", " ").split()]
        except ValueError:
            values = []
        if len(values) == 6:
            transform = [repr(v) for v in values]
    return srs, transform


def _source_names(plan: Plan, layout: VrtLayout, relative_to: str | None
                  ) -> list[tuple[bool, str]]:
    """Per source: (relativeToVRT, the name GDAL opens it by); refuses sources GDAL would
    not read as the cube does (not TIFF) or could not reach (an unknown URL scheme)."""
    used = sorted({p.source for band in layout.bands for p in band})
    base = os.path.dirname(os.path.abspath(relative_to)) \
        if relative_to is not None and not is_url(relative_to) else None
    names: list[tuple[bool, str]] = [(False, "")] * len(plan.sources)
    problems: list[Problem] = []
    need = {}
    for band in layout.bands:
        for p in band:
            h, w, b, d = need.get(p.source, (p.height, p.width, 0, False))
            need[p.source] = (h, w, max(b, p.band), d or p.derived)
    for i in used:
        path = plan.sources[i].path
        why = _not_text(path) or _not_tiff(path) or _not_as_placed(path, layout, *need[i])
        if why:
            problems.append(Problem(Location(path, layout.name), KIND, why))
            continue
        if is_url(path):
            vsi = VSI.get(protocol(path) or "")
            if vsi is None:
                problems.append(Problem(Location(path, layout.name), KIND,
                                        f"GDAL has no simple way to open {protocol(path)}:// "
                                        f"URLs (a /vsi file system): {INSTEAD}"))
                continue
            rest = path if vsi == "/vsicurl/" else path.split("://", 1)[1]
            names[i] = (False, vsi + rest)
        elif base is not None:
            names[i] = (True, os.path.relpath(os.path.abspath(path), base))
        else:
            names[i] = (False, os.path.abspath(path))
    if problems:
        raise VirtualizeError(problems, f"cannot write a GDAL VRT: {len(problems)} problem(s); "
                              "nothing was written")
    return names


def _not_text(path: str) -> str | None:
    """Why the path cannot be named in the VRT's XML (UTF-8 text), or None."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:  # (a file name's undecodable bytes, as surrogates)
        return f"its path is not UTF-8 text, which the VRT's XML holds only: rename it, or {INSTEAD}"
    return None


def _not_tiff(path: str) -> str | None:
    """Why GDAL would not read the file as the cube does (None: a TIFF, read by GDAL's
    GTiff driver as its first image's bands)."""
    reason = ("is not a TIFF: GDAL would read it through another driver, whose reads are "
              "not those of the cube (GDAL's netCDF driver decides the row order by its own "
              "heuristics: a variable whose y coordinate lacks the CF attributes it looks for "
              "is read bottom-up, flipped, even when y decreases; it reads _Unsigned integers "
              "as unsigned); the VRT output references TIFF files only: " + INSTEAD)
    if is_url(path):
        return None if path.lower().endswith(TIFF_SUFFIXES) else reason
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as e:
        return f"cannot be read: {e.strerror}"
    return None if head in TIFF_MAGIC else reason


def _not_as_placed(path: str, layout: VrtLayout, height: int, width: int, bands: int,
                   derived: bool = False) -> str | None:
    """Why GDAL's dataset of the (local) TIFF, its first image (IFD 0), is not the image the
    cube places there (None: its size, type and samples are); read from its header only.
    `derived`: its place was found from its chunks (a mosaic over time), so its header
    must confirm it is the whole file."""
    if is_url(path):
        if derived:
            return ("a tile of a mosaic over time is placed where its blocks are, which its "
                    "header must confirm; a URL's is not read here: " + INSTEAD)
        return None  # (not opened here: the cube's scan of it stands)
    import tifffile

    try:
        with tifffile.TiffFile(path) as tif:
            page = tif.pages.first
            size, samples, dtype = (page.imagelength, page.imagewidth), page.samplesperpixel, \
                page.dtype
            tag = page.tags.get(274)  # Orientation
            orientation = int(tag.value) if tag is not None else 1
    except Exception as e:  # noqa: BLE001 - any header tifffile cannot read
        return f"its first image cannot be read: {e}"
    if orientation != 1:  # (GDAL 3.6 ignores it as the cube does; a reader may not)
        return (f"its Orientation is {orientation}, not top-left: the cube reads the rows as "
                f"stored, a GDAL-based reader may turn them; {INSTEAD}")
    want = layout.array.dtype
    if size != (height, width) or samples < bands or dtype is None \
            or dtype.newbyteorder("=") != want.newbyteorder("="):
        return (f"GDAL reads its first image (IFD 0: {size[1]} x {size[0]} pixels, {samples} "
                f"sample(s) of {dtype}), not the {width} x {height} image of {bands} band(s) of "
                f"{want} the cube places there: {INSTEAD}")
    return None


def is_ours(head: str) -> bool:
    """A VRT's first bytes say virtualize wrote it."""
    first, _, rest = head.partition("\n")
    return first.startswith("<VRTDataset ") and rest.startswith(VRT_HEAD)
