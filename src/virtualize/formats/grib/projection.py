"""x / y coordinates and a CF grid mapping of projected and rotated GRIB grids (docs/grib.md,
"Projected and rotated grids"), as GDAL's GRIB driver georeferences them.

The grid's projection is built from its keys as a PROJ definition (Lambert conformal,
polar stereographic, Mercator: the earth of `shapeOfTheEarth`, a sphere of ecCodes'
`radius` or the WGS84 / GRS80 ellipsoid); its first point projected by pyproj is the
origin, each next point `Dx` / `Dy` metres on in the scanning directions. A rotated
lat/lon grid's x / y are its rotated longitudes and latitudes (degrees, as ecCodes steps
them). The grid mapping variable (named after its `grid_mapping_name`) holds pyproj's CF
description (`CRS.to_cf()`: the projection's parameters and `crs_wkt`). Without pyproj (the
`[geo]` extra) a projected grid has its latitude / longitude only.
"""

from __future__ import annotations

import numpy as np

# the earth of shapeOfTheEarth (GRIB2 code table 3.2) where it is an ellipsoid
ELLIPSOIDS = {2: "+a=6378160 +b=6356775", 4: "+ellps=GRS80", 5: "+ellps=WGS84"}
TOLERANCE = 1e-3  # metres: ecCodes' points against PROJ's projection of the grid's steps
X_ATTRS = {"standard_name": "projection_x_coordinate", "long_name": "x coordinate of projection",
           "units": "m"}
Y_ATTRS = {"standard_name": "projection_y_coordinate", "long_name": "y coordinate of projection",
           "units": "m"}


def _pyproj():
    try:
        import pyproj
    except ImportError:  # (the [geo] extra)
        return None
    return pyproj


EARTHS_CF = {2: {"semi_major_axis": 6378160.0, "semi_minor_axis": 6356775.0},
             4: {"semi_major_axis": 6378137.0, "inverse_flattening": 298.257222101},
             5: {"semi_major_axis": 6378137.0, "inverse_flattening": 298.257223563}}


def _earth_cf(keys: dict) -> dict | None:
    shape = keys.get("shapeOfTheEarth")
    if shape in EARTHS_CF:
        return dict(EARTHS_CF[shape])
    if not keys.get("earthIsOblate") and keys.get("radius"):
        return {"earth_radius": float(keys["radius"])}
    return None


def _earth(keys: dict) -> str | None:
    shape = keys.get("shapeOfTheEarth")
    if shape in ELLIPSOIDS:
        return ELLIPSOIDS[shape]
    if not keys.get("earthIsOblate") and keys.get("radius"):
        return f"+R={float(keys['radius'])!r}"
    return None  # (an ellipsoid of its own axes: not given)


def definition(gt: str, g: dict, keys: dict) -> str | None:
    """The grid's projection as a PROJ string (None: not one of those read)."""
    earth = _earth(keys)
    if earth is None:
        return None
    south = bool(int(g.get("projectionCentreFlag", 0) or 0) & 0x80)
    if gt == "lambert":
        return (f"+proj=lcc +lat_1={g['Latin1InDegrees']!r} +lat_2={g['Latin2InDegrees']!r} "
                f"+lat_0={g['LaDInDegrees']!r} +lon_0={g['LoVInDegrees']!r} {earth} +no_defs")
    if gt == "polar_stereographic":
        lad = g.get("LaDInDegrees", -60.0 if south else 60.0)  # (GRIB1: at 60 degrees)
        return (f"+proj=stere +lat_0={-90.0 if south else 90.0} +lat_ts={lad!r} "
                f"+lon_0={g['orientationOfTheGridInDegrees']!r} {earth} +no_defs")
    if gt == "mercator":
        return f"+proj=merc +lat_ts={g['LaDInDegrees']!r} +lon_0=0 {earth} +no_defs"
    return None


def coordinates(f, shape: tuple[int, ...], stepped) -> list[tuple] | None:
    """x, y (1-D, along the grid's axes) and the grid mapping variable of field `f`'s grid,
    as (name, dims, values, attrs); None when its projection is not known (or pyproj is
    missing, or they do not lead to ecCodes' points). `stepped(ni, nj)`: a rotated grid's
    rotated longitudes and latitudes, as ecCodes steps them."""
    g, gt = f.geo, f.keys["gridType"]
    if len(shape) != 2:
        return None
    pyproj = _pyproj()
    if pyproj is None:
        return None
    nj, ni = shape
    try:
        if gt in ("rotated_ll",):
            return _rotated(pyproj, f, g, ni, nj, stepped)
        proj = definition(gt, g, f.keys)
        if proj is None:
            return None
        crs = pyproj.CRS.from_proj4(proj)
        dx = g.get("DxInMetres", g.get("DiInMetres"))
        dy = g.get("DyInMetres", g.get("DjInMetres"))
        lat, lon = f.points
        X, Y = pyproj.Transformer.from_crs(crs.geodetic_crs, crs, always_xy=True).transform(
            lon, lat)
    except (KeyError, TypeError, ValueError, pyproj.exceptions.CRSError):
        return None
    if not dx or not dy or not np.isfinite(X).all() or not np.isfinite(Y).all() or \
            min(shape) < 2:
        return None
    # the directions ecCodes' points run in (its iterator's, whatever the scanning flags
    # say), each point Dx / Dy on: the grid must be that rectilinear one, to PROJ's
    # precision against ecCodes' arithmetic (a millimetre), else no x / y are given
    x = X[0, 0] + np.arange(ni) * np.copysign(dx, X[0, 1] - X[0, 0])
    y = Y[0, 0] + np.arange(nj) * np.copysign(dy, Y[1, 0] - Y[0, 0])
    if np.abs(X - x[None, :]).max() > TOLERANCE or np.abs(Y - y[:, None]).max() > TOLERANCE:
        return None
    cf = crs.to_cf()
    return [("y", ("y",), y, dict(Y_ATTRS)), ("x", ("x",), x, dict(X_ATTRS)),
            (cf["grid_mapping_name"], (), np.array(0, dtype=np.int32), _plain(cf))]


def _rotated(pyproj, f, g, ni, nj, stepped):
    lat_sp, lon_sp = g["latitudeOfSouthernPoleInDegrees"], g["longitudeOfSouthernPoleInDegrees"]
    angle = g.get("angleOfRotationInDegrees", 0.0) or 0.0
    x, y = stepped(ni, nj)
    if x is None or y is None:
        return None
    # (the rotation must take x / y to ecCodes' points: PROJ's ob_tran, to the 1e-5 degree;
    # ecCodes rounds its rotated grids' latitudes and longitudes to 1e-6)
    lat, lon = f.points
    rotation = (f"+proj=pipeline +step +proj=unitconvert +xy_in=deg +xy_out=rad +step +inv "
                f"+proj=ob_tran +o_proj=longlat +o_lat_p={-lat_sp!r} +o_lon_p={-angle!r} "
                f"+lon_0={lon_sp!r} +R=1 +step +proj=unitconvert +xy_in=rad +xy_out=deg")
    X, Y = np.meshgrid(x, y)
    got_lon, got_lat = pyproj.Transformer.from_pipeline(rotation).transform(X, Y)
    if np.abs(got_lat - lat).max() > 1e-5 or \
            np.abs((got_lon - lon + 180.0) % 360.0 - 180.0).max() > 1e-5:
        return None
    cf = {"grid_mapping_name": "rotated_latitude_longitude",
          "grid_north_pole_latitude": -lat_sp,
          "grid_north_pole_longitude": (lon_sp + 180.0 + 180.0) % 360.0 - 180.0,
          "north_pole_grid_longitude": -angle}
    earth = _earth_cf(f.keys)
    if earth is None:
        return None
    cf.update(earth)
    try:
        cf["crs_wkt"] = pyproj.CRS.from_cf(cf).to_wkt()
    except pyproj.exceptions.CRSError:
        return None
    return [("y", ("y",), y, {"standard_name": "grid_latitude", "long_name": "rotated latitude",
                             "units": "degrees"}),
            ("x", ("x",), x, {"standard_name": "grid_longitude",
                             "long_name": "rotated longitude", "units": "degrees"}),
            ("rotated_latitude_longitude", (), np.array(0, dtype=np.int32), _plain(cf))]


def _plain(cf: dict) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in cf.items()
            if v is not None}
