"""Which files make one dataset: by a path template (a DRS: CMIP6, CMIP5, CORDEX, or one
given) or by what the files hold (the global attributes that identify a dataset, the data
variables, the grid). Shared by `virtualize catalog` (an archive into one cube per
dataset) and `check` (files given together that are several datasets: said so, with how
to build them). Pure: paths and inventories in, groups out; reads no bytes.
"""

from __future__ import annotations

import hashlib
import re
import sys
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ..model import FileInventory

# -- path templates ------------------------------------------------------------------------

# The data reference syntaxes of the archives users hold, as directory templates: each
# `{facet}` one path segment (`{facet:REGEX}` constrains it), `*` and `?` as in a glob. A
# template matches the last segments of a path, so a DRS tree is found at whatever depth
# under the root it starts (a mirror's `/data/esgf/CMIP6/...`).
DRS = {
    # CMIP6 Data Reference Syntax (ESGF): .../<variable>/<grid>/<version>/<file>
    "cmip6": "{mip_era}/{activity_id}/{institution_id}/{source_id}/{experiment_id}/"
             "{member_id:(?:[a-z0-9]+-)?r\\d+i\\d+p\\d+f\\d+}/{table_id}/{variable_id}/"
             "{grid_label:g[a-z0-9]+}/{version:v\\d+}/*.nc",
    # CMIP5 DRS (Taylor et al., 2012): the version comes before the variable
    "cmip5": "{project}/{product}/{institute}/{model}/{experiment}/{time_frequency}/"
             "{realm}/{cmor_table}/{ensemble:r\\d+i\\d+p\\d+}/{version:v\\d+}/{variable}/*.nc",
    # CORDEX archive specification (ESGF): .../<frequency>/<variable>/<version>/<file>
    "cordex": "{project}/{product}/{domain}/{institute}/{driving_model}/{experiment}/"
              "{ensemble:r\\d+i\\d+p\\d+}/{rcm_model}/{rcm_version:v\\d+}/{time_frequency}/"
              "{variable}/{version:v\\d+}/*.nc",
}
# the facet a template's members are told apart by (stacked by --concat-dim member)
MEMBER_FACETS = ("member_id", "ensemble", "variant_label", "member", "realization")
VERSION_FACET = "version"

_FACET = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::((?:[^{}]|\{[^{}]*\})*))?\}")


@dataclass(frozen=True)
class PathTemplate:
    """A directory template (`DRS`, or given as `--path-template`): `facets` in order,
    one compiled pattern per path segment."""

    text: str
    name: str | None = None  # a built-in DRS's name
    facets: tuple[str, ...] = ()
    segments: tuple[re.Pattern, ...] = ()

    @classmethod
    def parse(cls, text: str, name: str | None = None) -> PathTemplate:
        """Raises ValueError for a template that is none (no facet, a facet twice, a bad
        regular expression)."""
        parts = [p for p in text.strip().strip("/").split("/") if p]
        facets: list[str] = []
        segments = []
        for part in parts:
            out, at = "", 0
            for m in _FACET.finditer(part):
                out += _glob(part[at:m.start()])
                facet, rx = m.group(1), m.group(2) or "[^/]+?"
                if facet in facets:
                    raise ValueError(f"the facet {{{facet}}} is named twice")
                facets.append(facet)
                out += f"(?P<{facet}>{rx})"
                at = m.end()
            out += _glob(part[at:])
            try:
                segments.append(re.compile(out + r"\Z"))
            except re.error as e:
                raise ValueError(f"the segment {part!r} is not a pattern ({e})") from None
        if not facets:
            raise ValueError("a path template names at least one {facet}")
        return cls(text, name, tuple(facets), tuple(segments))

    @property
    def member(self) -> str | None:
        """The facet members are told apart by (`MEMBER_FACETS`), if the template has one."""
        return next((f for f in MEMBER_FACETS if f in self.facets), None)

    @property
    def version(self) -> str | None:
        return VERSION_FACET if VERSION_FACET in self.facets else None

    def match(self, path: str) -> tuple[str, dict[str, str]] | None:
        """(the path's part before the template, its facets) when the path's last segments
        match the template, else None."""
        parts = path.replace("\\", "/").split("/")
        n = len(self.segments)
        if len(parts) < n:
            return None
        facets: dict[str, str] = {}
        for seg, part in zip(self.segments, parts[-n:]):
            m = seg.match(part)
            if m is None:
                return None
            facets.update(m.groupdict())
        return "/".join(parts[:-n]), facets


def _glob(text: str) -> str:
    return "".join("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c) for c in text)


def template(drs: str | None = None, path_template: str | None = None) -> PathTemplate | None:
    """The template `--drs NAME` or `--path-template TEXT` gives (None: by content).
    Raises ValueError naming what is wrong."""
    if drs is not None and path_template is not None:
        raise ValueError("give --drs or --path-template, not both")
    if drs is not None:
        if drs.lower() not in DRS:
            raise ValueError(f"--drs {drs}: not one of {', '.join(DRS)}")
        return PathTemplate.parse(DRS[drs.lower()], drs.lower())
    if path_template is not None:
        return PathTemplate.parse(path_template)
    return None


# -- datasets --------------------------------------------------------------------------------

@dataclass(slots=True)  # (one a dataset of an archive)
class Dataset:
    """One dataset of an archive: its `name` (unique in the catalog), its `facets` (the
    catalog's columns), its files in order and, when its members are stacked, each file's
    member (`members`, aligned with `files`)."""

    name: str
    facets: dict[str, str]
    files: Sequence[str]  # (a list, or `Rows` of an archive's listing)
    members: list[str] | None = None
    version: str | None = None

    @property
    def member_labels(self) -> list[str]:
        return list(dict.fromkeys(self.members or ()))


@dataclass
class Grouping:
    """An archive's files as datasets, and the files none takes (`left_out`: path ->
    why: no match of the template, a version superseded)."""

    datasets: list[Dataset] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)


def _version_key(v: str | None):
    """Versions in their natural order (v20190308 after v20180701, v10 after v9)."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.findall(r"\d+|\D+", v or "")]


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+@=-]", "_", str(text)) or "_"


def dataset_name(values: Iterable[str]) -> str:
    """A dataset's name from its facet values, in order (the ESGF dataset id's form:
    `CMIP6.ScenarioMIP.NCAR.CESM2.ssp585.r1i1p1f1.day.tas.gn`)."""
    return ".".join(_safe(v) for v in values if v not in (None, ""))


def latest(items: Sequence[tuple[str, dict[str, str]]], version: str | None,
           all_versions: bool) -> tuple[list[tuple[str, dict[str, str]]], dict[str, str]]:
    """(path, facets) of the latest version of each dataset only (unless `all_versions`),
    and the paths of the versions superseded, each with why."""
    if version is None or all_versions:
        return list(items), {}
    newest: dict[tuple, str] = {}
    for _, f in items:
        key = tuple(sorted((k, v) for k, v in f.items() if k != version))
        have = newest.get(key)
        if have is None or _version_key(f[version]) > _version_key(have):
            newest[key] = f[version]
    kept, superseded = [], {}
    for path, f in items:
        key = tuple(sorted((k, v) for k, v in f.items() if k != version))
        if f[version] == newest[key]:
            kept.append((path, f))
        else:
            superseded[path] = f"version {f[version]} superseded by {newest[key]}"
    return kept, superseded


class Rows(Sequence[str]):
    """Some of a sequence of paths, by their indexes (`rows`): a dataset's files without a
    string each held for the whole run (an archive's listing is columns: api/archive.py)."""

    __slots__ = ("of", "rows")

    def __init__(self, of: Sequence[str], rows: Iterable[int]) -> None:
        self.of = of
        self.rows = array("i", rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self.of[j] for j in self.rows[i]]
        return self.of[self.rows[i]]

    def __iter__(self):
        of = self.of
        return (of[j] for j in self.rows)

    def __eq__(self, other) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return list(self) == list(other)
        return NotImplemented

    def __repr__(self) -> str:
        return repr(list(self))


def group_paths(paths: Sequence[str], tpl: PathTemplate, *, stack_members: bool = False,
                all_versions: bool = False, relative_to=None) -> Grouping:
    """Datasets by `tpl`: files whose facets are the same but for the file name (and the
    member when `stack_members`: one dataset of several members), the latest version of
    each only unless `all_versions` (then each version is a dataset of its own).
    `relative_to(path)`: the part of a path the template is matched against (default: all
    of it). Each dataset's `files` are `Rows` of `paths`; what is held per file while
    grouping is an integer (a directory's segments are matched once, not once a file)."""
    out = Grouping()
    n = len(tpl.segments)
    head_segments, last = tpl.segments[:-1], tpl.segments[-1]
    dirs: dict[str, tuple[str, dict[str, str]] | None] = {}
    sets: dict[tuple, int] = {}  # (prefix, facet values): its index in `facets`
    facets: list[tuple[str, dict[str, str]]] = []
    of = array("i")  # each matched file's facet set
    matched = array("i")  # and its index in `paths`
    miss = f"does not match the path template {tpl.name or tpl.text}"
    for i, p in enumerate(paths):
        rel = (relative_to(p) if relative_to else p).replace("\\", "/")
        head, slash, name = rel.rpartition("/")
        if head not in dirs:  # the directory's segments: (prefix, facets) or None
            parts = head.split("/") if slash else []
            got: tuple[str, dict[str, str]] | None = None
            if len(parts) >= n - 1:
                f: dict[str, str] = {}
                for seg, part in zip(head_segments, parts[len(parts) - (n - 1):]):
                    m = seg.match(part)
                    if m is None:
                        break
                    f.update(m.groupdict())
                else:  # (values repeated by thousands of directories held once)
                    got = ("/".join(parts[:len(parts) - (n - 1)]),
                           {k: sys.intern(v) if isinstance(v, str) else v
                            for k, v in f.items()})
            dirs[head] = got
        got = dirs[head]
        m = last.match(name) if got is not None else None
        if m is None:
            out.left_out[p] = miss
            continue
        f = {**got[1], **m.groupdict()} if m.groupdict() else got[1]
        key = (got[0], *(f[k] for k in tpl.facets))
        k = sets.get(key)
        if k is None:
            k = sets[key] = len(facets)
            facets.append((got[0], f))
        of.append(k)
        matched.append(i)
    del dirs, sets
    kept_sets, superseded = latest(list(enumerate(f for _, f in facets)), tpl.version,
                                   all_versions)
    kept = {k for k, _ in kept_sets}
    member = tpl.member if stack_members else None
    named = [f for f in tpl.facets if f != member and (all_versions or f != tpl.version)]
    groups: dict[tuple, Dataset] = {}
    rows: dict[tuple, array] = {}  # (each dataset's rows: no int object a file)
    for k, i in zip(of, matched):
        if k not in kept:
            out.left_out[paths[i]] = superseded[k]
            continue
        prefix, f = facets[k]
        key = (prefix, *(f[x] for x in named))
        ds = groups.get(key)
        if ds is None:
            ds = groups[key] = Dataset(dataset_name(f[x] for x in named),
                                       {x: f[x] for x in tpl.facets if x != member}, [],
                                       [] if member else None, f.get(tpl.version or ""))
            rows[key] = array("i")
        rows[key].append(i)
        if member:
            ds.members.append(f[member])
        if tpl.version and _version_key(f[tpl.version]) > _version_key(ds.version):
            ds.version = f[tpl.version]
    for key, ds in groups.items():
        ds.files = Rows(paths, rows[key])
    out.datasets = _named(list(groups.values()), lambda ds: ds.files[0].rsplit("/", 2)[0])
    for ds in out.datasets:
        if tpl.version and member:
            ds.facets[tpl.version] = ds.version or ""
        _ordered(ds)
    return out


def _ordered(ds: Dataset) -> None:
    """A dataset's files sorted (by member, then path)."""
    if isinstance(ds.files, Rows):
        rows, of = ds.files.rows, ds.files.of
        members = ds.members if ds.members is not None else [""] * len(rows)
        order = sorted(range(len(rows)), key=lambda j: (members[j], of[rows[j]]))
        ds.files = Rows(of, [rows[j] for j in order])
        if ds.members is not None:
            ds.members = [members[j] for j in order]
        return
    if ds.members is None:
        ds.files.sort()
        return
    pairs = sorted(zip(ds.members, ds.files))
    ds.members = [m for m, _ in pairs]
    ds.files = [f for _, f in pairs]


def _named(datasets: list[Dataset], where) -> list[Dataset]:
    """Names unique in the catalog: a name two datasets share (the same facets under two
    prefixes, or files of no identifying attribute alike) gets a short digest of where."""
    seen: dict[str, int] = {}
    for ds in datasets:
        seen[ds.name] = seen.get(ds.name, 0) + 1
    for ds in datasets:
        if seen[ds.name] > 1:
            ds.name += "." + hashlib.blake2b(where(ds).encode(), digest_size=4).hexdigest()
    return sorted(datasets, key=lambda d: d.name)


# -- by what the files hold ----------------------------------------------------------------------

# the global attributes that identify a dataset (CMIP6, CMIP5, CORDEX, obs4MIPs, input4MIPs),
# in the order a dataset's name lists them
DATASET_ATTRS = ("mip_era", "project_id", "activity_id", "product", "institution_id",
                 "institute_id", "CORDEX_domain", "driving_model_id", "source_id", "model_id",
                 "experiment_id", "driving_experiment_name", "sub_experiment_id", "member_id",
                 "variant_label", "realization", "initialization_method", "physics_version",
                 "driving_model_ensemble_member", "rcm_version_id", "frequency", "table_id",
                 "modeling_realm", "realm", "variable_id", "grid_label")
# the attributes members are told apart by (those a member-stacked dataset drops from its
# key), and the one of them that labels each member (first found)
MEMBER_ATTRS = ("member_id", "variant_label", "realization", "initialization_method",
                "physics_version", "driving_model_ensemble_member")
MEMBER_LABELS = ("member_id", "variant_label", "driving_model_ensemble_member", "realization")
# what tells separate datasets apart when files given together differ (check's hint)
SPLIT_ATTRS = ("source_id", "model_id", "institution_id", "experiment_id", "table_id",
               "frequency", "grid_label", "CORDEX_domain", "driving_model_id")
GRID, VARIABLES = "grid", "variables"  # the facets that are not attributes


def global_attrs(inv: FileInventory) -> Mapping:
    return inv.groups.get("", {}) if isinstance(inv.groups, Mapping) else {}


def data_variables(inv: FileInventory) -> list[str]:
    """The file's data variables: not a dimension's coordinate, not named by another's
    `bounds`, `coordinates`, `grid_mapping` or `climatology`, and not scalar."""
    named: set[str] = set()
    for v in inv.variables.values():
        for key in ("bounds", "climatology", "coordinates", "grid_mapping",
                    "ancillary_variables"):
            text = v.attrs.get(key)
            if isinstance(text, str):
                named.update(text.replace(":", " ").split())
    return sorted(n for n, v in inv.variables.items()
                  if v.shape and not v.is_coordinate and v.basename not in named)


def grid_signature(inv: FileInventory) -> str:
    """The file's grid as a short text: each non-record dimension of its data variables
    with its size, and the digests of their coordinates (two grids of one shape but other
    latitudes differ)."""
    record = {d.name for d in inv.dimensions.values() if d.unlimited} | {"time"}
    dims: dict[str, int] = {}
    for name in data_variables(inv):
        v = inv.variables[name]
        for d, n in zip(v.dims, v.shape):
            if d not in record:
                dims[d] = int(n)
    parts = []
    for d, n in sorted(dims.items()):
        c = inv.variables.get(d)
        digest = ""
        if c is not None and isinstance(c.digest, bytes):
            digest = c.digest.hex()[:8]
        elif c is not None and c.values is not None:  # (values recorded instead)
            digest = hashlib.blake2b(c.values.tobytes(), digest_size=4).hexdigest()
        parts.append(f"{d}={n}" + (f"@{digest}" if digest else ""))
    return ",".join(parts)


def content_facets(inv: FileInventory, attrs: Sequence[str] = DATASET_ATTRS, *,
                   stack_members: bool = False, variables: bool = True) -> dict[str, str]:
    """What identifies the file's dataset: the `attrs` it has (without the member's when
    `stack_members`), its data variables (`variables`) unless a `variable_id` says them,
    and its grid when no attribute identifies it."""
    g = global_attrs(inv)
    skip = set(MEMBER_ATTRS) if stack_members else set()
    out = {a: _text(g[a]) for a in attrs if a in g and a not in skip and _text(g[a]) != ""}
    if variables and "variable_id" not in out:
        out[VARIABLES] = "+".join(v.rpartition("/")[2] for v in data_variables(inv))
    if not (set(out) - {VARIABLES}):
        out[GRID] = grid_signature(inv)
    return out


def member_label(inv: FileInventory) -> str | None:
    """The file's member, by the first attribute of `MEMBER_LABELS` it has."""
    g = global_attrs(inv)
    for a in MEMBER_LABELS:
        if a in g and _text(g[a]) != "":
            return a
    return None


def _text(value) -> str:
    if isinstance(value, (list, tuple)):
        return " ".join(map(str, value))
    if hasattr(value, "tolist"):
        value = value.tolist()
        return " ".join(map(str, value)) if isinstance(value, list) else str(value)
    return str(value).strip()


def group_facets(items: Iterable[tuple[str, dict[str, str], str | None]],
                 stack_members: bool = False) -> list[Dataset]:
    """Datasets of files by their facets ((path, facets, member or None) each: the
    `content_facets` of the file, or what a catalog's record holds of it)."""
    groups: dict[tuple, Dataset] = {}
    for path, facets, member in items:
        key = tuple(sorted(facets.items()))
        ds = groups.get(key)
        if ds is None:
            ds = groups[key] = Dataset(_content_name(facets), dict(facets), [],
                                       [] if stack_members else None)
        ds.files.append(path)
        if stack_members:
            ds.members.append(member or "")
    out = _named(list(groups.values()), lambda ds: repr(sorted(ds.facets.items())))
    for ds in out:
        _ordered(ds)
    return out


# attributes a dataset's name leaves out when another says the same (CMIP6's member_id is
# its variant_label, or holds it; a table names its frequency and realm)
_SAID_BY = {"variant_label": "member_id", "frequency": "table_id", "realm": "table_id",
            "modeling_realm": "table_id"}


def name_order(keys: Iterable[str]) -> list[str]:
    """The facets a dataset grouped by content is named by, in order, of those it has."""
    keys = set(keys)
    return [a for a in DATASET_ATTRS if a in keys and _SAID_BY.get(a) not in keys] + \
        [k for k in (VARIABLES,) if k in keys]


def _content_name(facets: Mapping[str, str]) -> str:
    name = dataset_name(facets[a] for a in name_order(facets))
    if GRID in facets:  # (a grid's text is no name: its digest)
        name += ("." if name else "") + "grid-" + hashlib.blake2b(
            facets[GRID].encode(), digest_size=4).hexdigest()
    return name


# -- several datasets given together (check's hint) -------------------------------------------

@dataclass
class DatasetSplit:
    """Files given together that are several datasets: `by`, the facets they differ in
    (attributes, or "grid"); `groups`, each dataset's facets and files."""

    by: list[str]
    groups: list[tuple[dict[str, str], list[str]]]

    def line(self) -> str:
        """The report's summary line."""
        return (f"these files are {len(self.groups)} datasets (by {' / '.join(self.by)}): "
                "build each on its own (virtualize catalog DIR -o OUT builds them all)")

    def note(self, limit: int = 4) -> str:
        """How to build them: one command per dataset (the first few), or the catalog."""
        parts = []
        for facets, files in self.groups[:limit]:
            what = ", ".join(f"grid {_sizes(facets[k])}" if k == GRID else
                             f"{k}={facets.get(k, '')}" for k in self.by)
            first = files[0].rsplit("/", 1)[-1]
            parts.append(f"{what}: {len(files)} file(s) ({first}{', ...' if len(files) > 1 else ''})")
        more = f"; and {len(self.groups) - limit} more" if len(self.groups) > limit else ""
        return (f"these files are {len(self.groups)} datasets, differing in "
                f"{' / '.join(self.by)}: " + "; ".join(parts) + more +
                ". Build each with its own `virtualize FILES -o OUT` (the files of one "
                "dataset), or all of them with `virtualize catalog ROOT -o OUT` (one cube "
                "per dataset and an intake-esm catalog; virtualize docs catalog)")


def _sizes(grid: str) -> str:
    """A grid signature's sizes, without its digests: `lat=3,lon=4`."""
    return ",".join(part.split("@")[0] for part in grid.split(","))


def split(invs: Sequence[FileInventory]) -> DatasetSplit | None:
    """When files given together are several datasets (they differ in model, table,
    frequency, grid label or grid: `SPLIT_ATTRS` and `grid_signature`), how; else None.
    Members and variables are no reason: a hypercube stacks members, a merge variables."""
    if len(invs) < 2:
        return None
    keys: dict[tuple, tuple[dict[str, str], list[str]]] = {}
    for inv in invs:
        g = global_attrs(inv)
        facets = {a: _text(g[a]) for a in SPLIT_ATTRS if a in g}
        facets[GRID] = grid_signature(inv)
        keys.setdefault(tuple(sorted(facets.items())), (facets, []))[1].append(inv.path)
    if len(keys) < 2:
        return None
    groups = list(keys.values())
    names = [a for a in (*SPLIT_ATTRS, GRID)
             if len({f.get(a) for f, _ in groups}) > 1]
    if {"source_id", "model_id"} & set(names):  # (a model names its institution)
        names = [a for a in names if a not in ("institution_id", "institute_id")]
    return DatasetSplit(names, groups)
