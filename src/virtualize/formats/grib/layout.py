"""cfgrib's layout of a GRIB file (the default; docs/grib.md, "Layouts").

cfgrib (`cfgrib.open_datasets`) reads a file as one dataset per parameter (paramId) and
whatever else cfgrib keeps unique in a dataset (dataType, level type, step type, grid,
edition, centre), then merges, level type by level type (sorted), each into the first
dataset whose attributes and coordinates agree with it (its `merge_datasets`: the same
members, reference times, steps, levels and grid, no variable of its name), and squeezes
the axes of length 1 into scalar coordinates. The same here: one array per such dataset
member, named by `cfVarName` (`t2m`, `u10`; cfgrib's name), its axes cfgrib's (`number`
where ecCodes defines it, `time`, `step`, the level named after typeOfLevel, then the
grid's), length-1 axes scalar coordinates (unless the stack joins along them: `promote`),
`valid_time` (`time + step`) on the axes of those two, cfgrib's attributes. A file of one
dataset is the cube's root; several are groups named after their level type (`surface`,
`heightAboveGround`), a level type of several datasets `<typeOfLevel>_<what tells them
apart>` (`surface_accum`, `isobaricInhPa_grib1`, else `_2`, `_3` in cfgrib's order).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...model import Dimension, FileInventory, Problem, Variable
from . import scan as _scan
from .scan import AXES, TIME_UNITS, Array, Coords, Field

LAYOUTS = ("cfgrib", "virtualize")
DEFAULT = "cfgrib"
# cfgrib's GRIB_missingValue: it sets every message's missingValue to float32's largest
# (cfgrib.messages.MISSING_VAUE_INDICATOR); the cube's missing points are NaN all the same
MISSING = float(np.finfo(np.float32).max)
# cfgrib's keys (cfgrib.dataset, Apache-2.0): the dataset's attributes, the array's unique
# ones, then the extra ones and its grid type's
GLOBAL_KEYS = ("edition", "centre", "centreDescription", "subCentre")
DATA_KEYS = ("paramId", "dataType", "numberOfPoints", "typeOfLevel", "stepUnits", "stepType",
             "gridType", "uvRelativeToGrid")
EXTRA_KEYS = ("shortName", "units", "name", "cfName", "cfVarName", "missingValue",
              "totalNumber", "numberOfDirections", "numberOfFrequencies", "NV",
              "gridDefinitionDescription")
_LL = ("iScansNegatively", "jPointsAreConsecutive", "jScansPositively",
       "latitudeOfFirstGridPointInDegrees", "latitudeOfLastGridPointInDegrees")
_ROTATED = ("Nx", "Ny", "angleOfRotationInDegrees", "iDirectionIncrementInDegrees",
            "jDirectionIncrementInDegrees", *_LL, "latitudeOfSouthernPoleInDegrees",
            "longitudeOfFirstGridPointInDegrees", "longitudeOfLastGridPointInDegrees",
            "longitudeOfSouthernPoleInDegrees")
GRID_KEYS = {
    "regular_ll": ("Nx", "iDirectionIncrementInDegrees", "longitudeOfFirstGridPointInDegrees",
                   "longitudeOfLastGridPointInDegrees", "Ny", "jDirectionIncrementInDegrees",
                   *_LL),
    "rotated_ll": _ROTATED,
    "reduced_ll": ("Ny", "jDirectionIncrementInDegrees", *_LL[1:]),
    "regular_gg": ("N", "Ni", "Nj", "iDirectionIncrementInDegrees",
                   "longitudeOfFirstGridPointInDegrees", "longitudeOfLastGridPointInDegrees",
                   *_LL),
    "rotated_gg": (*_ROTATED, "N"),
    "lambert": ("LaDInDegrees", "LoVInDegrees", "iScansNegatively", "jPointsAreConsecutive",
                "jScansPositively", "latitudeOfFirstGridPointInDegrees",
                "latitudeOfSouthernPoleInDegrees", "longitudeOfFirstGridPointInDegrees",
                "longitudeOfSouthernPoleInDegrees", "DyInMetres", "DxInMetres",
                "Latin2InDegrees", "Latin1InDegrees", "Ny", "Nx"),
    "reduced_gg": ("N", "pl"),
}
_TIME = {"units": TIME_UNITS, "calendar": "proleptic_gregorian"}
_DOWN = {"positive": "down", "stored_direction": "decreasing", "standard_name": "air_pressure",
         "long_name": "pressure"}
COORD_ATTRS = {  # (cfgrib.dataset.COORD_ATTRS)
    "depthBelowLand": {"units": "m", "positive": "down", "long_name": "soil depth",
                       "standard_name": "depth"},
    "depthBelowLandLayer": {"units": "m", "positive": "down", "long_name": "soil depth",
                            "standard_name": "depth"},
    "hybrid": {"units": "1", "positive": "down", "long_name": "hybrid level",
               "standard_name": "atmosphere_hybrid_sigma_pressure_coordinate"},
    "heightAboveGround": {"units": "m", "positive": "up", "long_name": "height above the surface",
                          "standard_name": "height"},
    "isobaricInhPa": {"units": "hPa", **_DOWN},
    "isobaricInPa": {"units": "Pa", **_DOWN},
    "isobaricLayer": {"units": "Pa", "positive": "down", "standard_name": "air_pressure",
                      "long_name": "pressure"},
    "number": {"units": "1", "standard_name": "realization",
               "long_name": "ensemble member numerical id"},
    "step": {"units": "hours", "standard_name": "forecast_period",
             "long_name": "time since forecast_reference_time", "dtype": "timedelta64[ns]"},
    "time": {**_TIME, "standard_name": "forecast_reference_time",
             "long_name": "initial time of forecast"},
    "valid_time": {**_TIME, "standard_name": "time", "long_name": "time"},
}
# the grids cfgrib gives 2-D latitude / longitude (y, x) of (other grids not regular_ll /
# regular_gg: one `values` axis, latitude / longitude per value; cfgrib.dataset)
GRIDS_2D = ("rotated_ll", "rotated_gg", "lambert", "lambert_azimuthal_equal_area", "albers",
            "polar_stereographic")
# what tells datasets of one level type apart, tried in turn for their groups' names
NAMED_BY = ("stepType", "dataType", "edition", "centre", "gridType")


def key(f: Field, k: str):
    """Key `k` of a message as cfgrib reads it (None: ecCodes defines none)."""
    if k == "edition":
        return f.message.edition
    if k == "numberOfPoints":
        return int(np.prod(f.shape))
    if k == "stepUnits":
        return 1  # (cfgrib indexes steps in hours: its stepUnits is 1 whatever the message's)
    if k == "missingValue":
        return MISSING
    if k in f.keys:
        return f.keys[k]
    v = f.geo.get(k)
    return v.tolist() if isinstance(v, np.ndarray) else v


def _known(v) -> bool:
    return v is not None and v not in ("undef", "unknown")


def _name(f: Field) -> str:
    """cfgrib's name: cfVarName, else shortName, else paramId_<id>."""
    for k in ("cfVarName", "shortName"):
        if _known(f.keys.get(k)):
            return f.keys[k]
    return f"paramId_{f.keys['paramId']}"


@dataclass
class _Dataset:
    level: str
    attrs: dict
    arrays: list[Array] = field(default_factory=list)
    axes: dict[str, np.ndarray] = field(default_factory=dict)
    grid: tuple = ()

    def takes(self, a: Array, attrs: dict, grid: tuple) -> bool:
        """cfgrib's merge (join="exact", combine_attrs="identical"): the same attributes,
        grid and values of every axis both have, no variable of its name."""
        return attrs == self.attrs and grid == self.grid and \
            all(b.name != a.name for b in self.arrays) and \
            all(np.array_equal(v, self.axes[k]) for k, v in a.axes.items() if k in self.axes)

    def add(self, a: Array) -> None:
        self.arrays.append(a)
        for k, v in a.axes.items():
            self.axes.setdefault(k, v)


def arrays(fs: list[Field]) -> list[Array]:
    """The messages as cfgrib's per-parameter datasets (each one array), in cfgrib's order
    (by paramId, then as the file first holds them)."""
    groups: dict[tuple, list[Field]] = {}
    for f in fs:
        k = (f.keys["paramId"], f.keys["shortName"], f.keys["dataType"], f.shape,
             f.keys["typeOfLevel"], f.keys["stepType"], f.keys["gridType"],
             f.keys.get("uvRelativeToGrid"), f.message.edition, f.keys["centre"],
             f.keys.get("subCentre"), f.message.grid, f.keys.get("number") is None)
        groups.setdefault(k, []).append(f)
    out = []
    for k in sorted(groups, key=lambda k: (k[0], groups[k][0].message.index)):
        group = groups[k]
        axes = {a: np.unique(np.array([getattr(f, a) for f in group]))
                for a in AXES if a != "number" or not k[-1]}
        level = group[0].keys["typeOfLevel"] or "level"
        if COORD_ATTRS.get(level, {}).get("stored_direction") == "decreasing":
            axes["level"] = axes["level"][::-1]  # (cfgrib's order: 1000 hPa first)
        out.append(Array(_name(group[0]), group, axes, level))
    return out


def datasets(fs: list[Field]) -> list[_Dataset]:
    """cfgrib's datasets (`open_datasets`): level type by level type, each array merged
    into the first dataset that takes it."""
    by_level: dict[str, list[_Dataset]] = {}
    for a in arrays(fs):
        f0 = a.fields[0]
        attrs = {k: v for k in GLOBAL_KEYS if _known(v := key(f0, k))}
        grid = (f0.message.grid, f0.shape)
        level = f0.keys["typeOfLevel"] or "undef"
        found = by_level.setdefault(level, [])
        ds = next((d for d in found if d.takes(a, attrs, grid)), None)
        if ds is None:
            ds = _Dataset(level, attrs, grid=grid)
            found.append(ds)
        ds.add(a)
    return [d for level in sorted(by_level) for d in by_level[level]]


def group_names(dss: list[_Dataset]) -> list[str]:
    """'' for a file of one dataset; else each dataset's level type, where one level type
    has several: `_<value>` of the first of NAMED_BY its datasets each hold one value of
    and not all the same (`surface_accum`; an edition `_grib1`), then `_<k>`."""
    if len(dss) == 1:
        return [""]
    names = []
    for ds in dss:
        same = [d for d in dss if d.level == ds.level]
        name = ds.level
        for k in NAMED_BY if len(same) > 1 else ():
            values = [{key(a.fields[0], k) for a in d.arrays} for d in same]
            if all(len(v) == 1 for v in values) and len({next(iter(v)) for v in values}) > 1:
                v = next(iter({key(a.fields[0], k) for a in ds.arrays}))
                name = f"{name}_{'grib' if k == 'edition' else ''}{v}"
                break
        base, n = name, 2
        while name in names:
            name, n = f"{base}_{n}", n + 1
        names.append(name)
    return names


def inventory(path: str, st, fs: list[Field], notes: list[Problem],
              promote: frozenset[str] = frozenset()) -> FileInventory:
    """The file's arrays in cfgrib's layout. `promote`: the axes (`time`, `step`,
    `number`, a level's name) kept as axes of length 1 where a dataset holds one value (a
    stack joins along them), not squeezed into scalar coordinates."""
    problems = list(notes)
    dss = datasets(fs)
    names = group_names(dss)
    variables: dict[str, Variable] = {}
    dimensions: dict[str, Dimension] = {}
    groups: dict[str, dict] = {}
    for ds, g in zip(dss, names):
        coords = Coords()
        mine: dict[str, Variable] = {}
        for a in ds.arrays:
            v = _variable(path, a, g, coords, problems, promote)
            if v is not None:
                mine[v.name] = v
        prefix = f"{g}/" if g else ""
        for c in coords.vars.values():
            c.name = prefix + c.name
            mine.setdefault(c.name, c)
        for v in mine.values():
            for d, n in zip(v.dims, v.shape):
                dimensions[prefix + d] = Dimension(prefix + d, n)
        variables.update(mine)
        groups[g] = {**{f"GRIB_{k}": v for k, v in ds.attrs.items()}, "Conventions": "CF-1.7",
                     **({"institution": ds.attrs["centreDescription"]}
                        if "centreDescription" in ds.attrs else {})}
    if "" not in groups:  # (several datasets: the root holds what they all say)
        shared = [set(a.items()) for a in groups.values()]
        groups = {"": dict(sorted(set.intersection(*shared))), **groups}
    inv = FileInventory(path, "grib", st.st_size, st.st_mtime_ns, groups, dimensions,
                        variables, problems)
    inv.etag = st.etag
    return inv


def _variable(path: str, a: Array, group: str, coords: Coords, problems: list[Problem],
              promote: frozenset[str]) -> Variable | None:
    f0 = a.fields[0]
    name = f"{group}/{a.name}" if group else a.name
    if _scan.rejected(path, a, name, problems):
        return None
    listed: list[str] = []  # its coordinates, in cfgrib's order
    axes: list[str] = []  # the keys of its axes (not squeezed)
    lead_dims: list[str] = []
    steps, step_units = _scan.step_values(a.axes["step"])
    values = {"number": a.axes["number"].astype(np.int64) if "number" in a.axes else None,
              "time": a.axes["time"].astype(np.int64), "step": steps,
              "level": a.axes["level"].astype(np.float64)}
    for k in AXES:
        if values[k] is None:
            continue
        cname = a.level_name if k == "level" else k
        attrs = dict(COORD_ATTRS.get(cname, {})) if k != "level" else {
            "long_name": f"original GRIB coordinate for key: level({cname})", "units": "1",
            **COORD_ATTRS.get(cname, {})}
        if k == "step":
            attrs["units"] = step_units
        if len(values[k]) > 1 or cname in promote:
            got = coords.add(cname, (cname,), values[k], attrs, {})
            axes.append(k)
            lead_dims.append(got)
        else:
            got = coords.add(cname, (), values[k].reshape(()), attrs, {})
        listed.append(got)
    grid_dims, grid_coords = _scan.grid_coords(f0, path, name, problems)
    shape = f0.shape
    if grid_dims == ("y", "x") and f0.keys["gridType"] in _scan.REGULAR:
        grid_dims = ("latitude", "longitude")  # (its increments inconsistent: no coordinates)
    elif grid_dims == ("y", "x") and f0.keys["gridType"] not in GRIDS_2D:  # (cfgrib's `values`)
        grid_dims, shape = ("values",), (int(np.prod(f0.shape)),)
        grid_coords = [(c, grid_dims if d else d, v.reshape(-1) if d else v, attrs)
                       for c, d, v, attrs in grid_coords if d in (("y", "x"), ())]
    mapping = None
    for cname, dims, v, attrs in grid_coords:
        attrs = dict(attrs)
        if dims == ("latitude",) and len(v) > 1 and v[0] > v[-1]:
            attrs["stored_direction"] = "decreasing"
        listed.append(coords.add(cname, dims, v, attrs, {}))
        if "grid_mapping_name" in attrs:
            mapping = listed[-1]
    # valid_time: time + step on the axes of those two (cfgrib's build_valid_time)
    seconds = steps * (3600 if step_units == "hours" else 60)
    t, s = values["time"], seconds
    valid = (t[:, None] + s[None, :]) if "time" in axes and "step" in axes else \
        (t + s[0] if "time" in axes else t[0] + s if "step" in axes else t.reshape(()) + s[0])
    vdims = tuple(d for d, k in zip(lead_dims, axes) if k in ("time", "step"))
    listed.append(coords.add("valid_time", vdims, np.asarray(valid, dtype=np.int64),
                             dict(COORD_ATTRS["valid_time"]), {}))
    placed = _scan.place(path, a, name, axes, problems)
    if placed is None:
        return None
    cells, refs = placed
    refs = refs.reshape(cells + (1,) * len(shape))
    attrs = {f"GRIB_{k}": v for k in DATA_KEYS if _known(v := key(f0, k))}
    extra = sorted((*EXTRA_KEYS, *GRID_KEYS.get(f0.keys["gridType"], ())))
    attrs.update((f"GRIB_{k}", _scan.plain_attr(v)) for k in extra
                 if (v := key(f0, k)) is not None)
    attrs.update(long_name=f"original GRIB paramId: {f0.keys['paramId']}", units="1")
    if "GRIB_cfName" in attrs:
        attrs["standard_name"] = attrs["GRIB_cfName"]
    if "GRIB_name" in attrs:
        attrs["long_name"] = attrs["GRIB_name"]
    if "GRIB_units" in attrs:
        attrs["units"] = attrs["GRIB_units"]
    attrs["coordinates"] = " ".join(listed)
    if mapping is not None:  # (and a coordinate: xarray keeps it with the array)
        attrs["grid_mapping"] = mapping
    return _scan.array(name, f0, cells, refs, tuple(lead_dims) + grid_dims, attrs, shape)
