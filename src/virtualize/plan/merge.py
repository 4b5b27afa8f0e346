"""Merge: files holding different variables (the CMIP/ESGF layout: `tas_*.nc` yearly,
`pr_*.nc` in 5-year files) made one cube along the one concatenation axis.

The files are grouped by the data variables they hold; each group is a stack planned by
`plan_concat` (the one-axis engine: every check of a concatenation runs there), each data
variable on its own grid. The groups' plans are then joined into one: one source table,
references re-indexed; what the groups share (the concat coordinate, its bounds, lat, lon,
scalars) must be the same bit for bit (else a located problem naming both files and the
first differing index); with `join="exact"` every group must cover the same span of the
axis, with `join="outer"` the axis is the union and a variable's steps no file holds are
absent chunks reading as its fill value. Piles whose files all hold the same variables
are exactly `plan_concat`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from ..conventions import default_concat_dim, py
from ..model import (
    MATERIALIZED,
    ArrayPlan,
    Cell,
    FileInventory,
    Layout,
    LayoutAxis,
    LayoutCell,
    Location,
    Plan,
    Problem,
    Source,
)
from ._common import (
    Context,
    calendar_of,
    compare_shared,
    coordinate_like,
    declares_fill,
    figure_of,
    first_difference,
    inline_plan,
)
from .attrs import combine, dropped_note
from .concat import ConcatOptions, _reexpress, plan_concat
from .union import Misfit, as_first, place

JOINS = ("exact", "outer")
# a shared variable no coordinate needs that differs between files (or cells): refused, or
# the first's taken with a note (xarray's compat="override")
COMPATS = ("identical", "override")
# attributes naming the variables a variable needs (CF; formula_terms: a parametric
# vertical coordinate's terms, "p0: p0 a: a b: b ps: ps")
_NAMING_ATTRS = ("coordinates", "bounds", "climatology", "grid_mapping", "ancillary_variables",
                 "cell_measures", "geometry", "node_coordinates", "formula_terms")


def plan_merge(invs: Sequence[FileInventory], opts: ConcatOptions | None = None
               ) -> tuple[Plan, list[Problem]]:
    """Plan one cube from files that may hold different variables (see the module's
    docstring). Returns the plan and every problem found, as `plan_concat` does."""
    opts = opts or ConcatOptions()
    invs = list(invs)
    if opts.join not in JOINS:
        raise ValueError(f"join must be one of {', '.join(JOINS)}, not {opts.join!r}")
    opts = select(invs, opts)
    invs, notes = selected_files(invs, opts)
    groups, dim = _groups(invs, opts)
    if groups is None:
        plan, problems = plan_concat(invs, opts)
    else:
        plan, problems = _Merge(invs, groups, dim, opts).run()
    plan.notes[:0] = notes
    return plan, problems


def selected_files(invs: Sequence[FileInventory], opts: ConcatOptions
                   ) -> tuple[list[FileInventory], list[str]]:
    """The files holding some of the variables `opts.variables` asks for (`opts` as `select`
    made it), and a note naming those left out (pr files, for --variables tas): a full
    build and an append leave out the same files."""
    invs = list(invs)
    if opts.variables is None or len(invs) < 2:
        return invs, []
    dim = opts.concat_dim or default_concat_dim(invs[0])
    if dim is None:
        return invs, []
    held = [bool(_data_variables(inv, dim, opts.drop)) for inv in invs]
    if all(held) or not any(held):
        return invs, []
    out = [inv.path for inv, h in zip(invs, held) if not h]
    return [inv for inv, h in zip(invs, held) if h], [
        f"left out {len(out)} file(s) holding none of the variables asked for (--variables): "
        + ", ".join(out[:5]) + (", ..." if len(out) > 5 else "")]


# -- selection -----------------------------------------------------------------------------

def _all_names(invs: Sequence[FileInventory]) -> set[str]:
    return {n for inv in invs for n in inv.variables}


def select(invs: Sequence[FileInventory], opts: ConcatOptions) -> ConcatOptions:
    """`opts` with every variable `opts.variables` does not need dropped."""
    if opts.variables is None or not invs:
        return opts
    return replace(opts, drop=opts.drop | (_all_names(invs) - needed(invs, opts.variables)))


def needed(invs: Sequence[FileInventory], wanted: frozenset[str] | set[str]) -> set[str]:
    """`wanted` and every variable they need, in any file: their dimensions' coordinates,
    and what their `coordinates`, `bounds`, `grid_mapping`, `ancillary_variables`,
    `cell_measures` ... attributes name (followed through those in turn)."""
    names = _all_names(invs)
    by_base: dict[str, set[str]] = {}
    for n in names:
        by_base.setdefault(n.rpartition("/")[2], set()).add(n)

    def resolve(word: str) -> set[str]:
        word = word.strip("/")
        return {word} if word in names else by_base.get(word, set())

    keep: set[str] = set()
    todo = [n for w in wanted for n in resolve(w)]
    while todo:
        n = todo.pop()
        if n in keep:
            continue
        keep.add(n)
        for inv in invs:
            v = inv.variables.get(n)
            if v is None:
                continue
            words = list(v.dims)
            for key in _NAMING_ATTRS:
                text = v.attrs.get(key)
                if isinstance(text, str):
                    # "area: areacella", "crs: lat lon": the names, not the labels
                    words += [w for w in text.replace(",", " ").split() if not w.endswith(":")]
            for w in words:
                todo.extend(resolve(w) - keep)
    return keep


def unknown_variables(invs: Sequence[FileInventory], wanted) -> list[str]:
    """The names in `wanted` no file has (by full name or basename)."""
    names = _all_names(invs)
    bases = {n.rpartition("/")[2] for n in names}
    return sorted(w for w in wanted if w.strip("/") not in names and w not in bases)


# -- grouping ------------------------------------------------------------------------------

def _data_variables(inv: FileInventory, dim: str, drop: frozenset[str]) -> frozenset[str]:
    """The variables along `dim` that are data: not coordinates, not named by another
    variable's `bounds`, `climatology` or `coordinates`."""
    named = set()
    for v in inv.variables.values():
        for key in ("bounds", "climatology", "coordinates"):
            text = v.attrs.get(key)
            if isinstance(text, str):
                named.update(text.split())
    return frozenset(n for n, v in inv.variables.items()
                     if dim in v.dims and not v.is_coordinate and n not in drop
                     and v.basename not in named and n not in named)


def _groups(invs: list[FileInventory], opts: ConcatOptions
            ) -> tuple[list[list[FileInventory]] | None, str | None]:
    """The files grouped by the data variables they hold (first appearance order), or
    None when this is no merge: one group, or groups whose data variables overlap or are
    empty (a file lacking a variable of a one-variable stack: `plan_concat` refuses it)."""
    if len(invs) < 2:
        return None, None
    dim = opts.concat_dim or default_concat_dim(invs[0])
    if dim is None:
        return None, None
    keyed: dict[frozenset[str], list[FileInventory]] = {}
    for inv in invs:
        keyed.setdefault(_data_variables(inv, dim, opts.drop), []).append(inv)
    if len(keyed) < 2:
        return None, None
    keys = list(keyed)
    if any(not k for k in keys) or \
            any(a & b for i, a in enumerate(keys) for b in keys[i + 1:]):
        return None, None
    return list(keyed.values()), dim


# -- the merge -----------------------------------------------------------------------------

class _Merge:
    def __init__(self, invs, groups, dim: str, opts: ConcatOptions) -> None:
        self.invs, self.groups, self.dim, self.opts = invs, groups, dim, opts
        self.problems: list[Problem] = []
        self.notes: list[str] = []
        self.coords: list[np.ndarray | None] | None = None  # per group, once compared
        self.reexpressed: dict[int, str] = {}  # group -> its units, re-expressed
        self._starts: dict[int, list[int]] = {}

    def problem(self, file, var, kind, msg, axis=None, block=None, remedy=None) -> None:
        self.problems.append(Problem(Location(file, var, axis, block), kind, msg, remedy=remedy))

    def run(self) -> tuple[Plan, list[Problem]]:
        dim, opts = self.dim, self.opts
        self.plans = []
        # per group, whether its axis' coordinate was refused (overlapping or repeated
        # steps: spans are left unchecked; that problem says what is wrong)
        self.refused_axis = []
        for g in self.groups:
            plan, problems = plan_concat(g, opts)
            self.plans.append(plan)
            self.problems.extend(problems)
            self.refused_axis.append(any(p.fatal and p.loc.variable == dim for p in problems))
        # each group's files in its plan's order (plan_concat sorts them)
        self.ordered = []
        for g, plan in zip(self.groups, self.plans):
            by_path = {inv.path: inv for inv in g}
            self.ordered.append([by_path[s.path] for s in plan.sources if s.path in by_path])
        self._order_groups()
        self.held = [sorted(_data_variables(g[0], dim, opts.drop)) for g in self.groups]
        self.notes.append(
            "the files hold different variables: merged along " + repr(dim) + " ("
            + "; ".join(f"{', '.join(h)} in {len(g)} file(s)"
                        for h, g in zip(self.held, self.groups)) + ")")
        if any(p.concat_dim != dim for p in self.plans):
            self.problem(None, None, "merge-axis",
                         f"every group of files must be concatenated along {dim!r}: "
                         + ", ".join(f"{g[0].path} along {p.concat_dim!r}"
                                     for g, p in zip(self.groups, self.plans)))
            return self._plan({}), self.problems
        self.union, self.positions = self._spans()
        sources, remaps = self._sources()
        arrays: dict[str, ArrayPlan] = {}
        names = list(dict.fromkeys(n for p in self.plans for n in p.arrays))
        for name in names:
            owners = [i for i, p in enumerate(self.plans) if name in p.arrays]
            a = self._array(name, owners, remaps)
            if a is not None:
                arrays[name] = a
        plan = self._plan(arrays, sources)
        return plan, self.problems

    def _order_groups(self) -> None:
        """The groups ordered by their first step (then their first file's name), not as
        given: the cube's units of the axis are the first group's, and `override` takes
        the first file's attributes, so a pile given in another order makes the same cube.
        Left as given when the first steps cannot be compared (refused later, located)."""
        keys = []
        ref = None
        for g, plan in enumerate(self.plans):
            c = self._coord(g) if plan.concat_dim == self.dim else None
            if c is None or not c.size or not self.ordered[g]:
                return
            attrs = plan.arrays[self.dim].attrs
            units, cal = attrs.get("units"), calendar_of(attrs)
            if ref is None:
                ref = (units, cal)
            first = c[:1]
            if units != ref[0]:
                if cal != ref[1] or not (isinstance(units, str) and isinstance(ref[0], str)
                                         and " since " in units + ref[0]):
                    return
                first = _reexpress(first, units, ref[0], cal)
                if first is None:
                    return
            try:
                keys.append((float(first[0]), self.ordered[g][0].path, g))
            except (TypeError, ValueError):  # (not numbers)
                return
        order = [g for *_, g in sorted(keys)]
        for name in ("groups", "plans", "refused_axis", "ordered"):
            setattr(self, name, [getattr(self, name)[g] for g in order])

    # -- sources -------------------------------------------------------------------------

    def _sources(self) -> tuple[list[Source], list[np.ndarray]]:
        """One source table: the groups' files ordered by their first step along the axis
        (then group), so that a grown pile keeps its old files first; per group, the map
        from its plan's source index to the merged one."""
        entries = []
        for g, plan in enumerate(self.plans):
            first = {}
            coord = self._coord(g)
            starts = self._file_starts(g)
            for inv, start in zip(self.ordered[g], starts):
                first[inv.path] = start
            owner = None
            for j, s in enumerate(plan.sources):
                if s.path in first:
                    owner = s.path
                key = first.get(owner if s.referenced_by else s.path)
                value = _key_value(coord, key)
                entries.append((value, g, j, s))
        entries.sort(key=lambda e: (e[0], e[1], e[2]))
        sources: list[Source] = []
        index: dict[str, int] = {}
        remaps = [np.zeros(len(p.sources), dtype=np.uint32) for p in self.plans]
        for _, g, j, s in entries:
            k = index.get(s.path)
            if k is None:
                k = index[s.path] = len(sources)
                sources.append(s)
            remaps[g][j] = k
        return sources, remaps

    def _file_starts(self, g: int) -> list[int]:
        """Each file's first step along the axis in group g's array."""
        cached = self._starts.get(g)
        if cached is not None:
            return cached
        out, n = self._starts.setdefault(g, []), 0
        for inv in self.ordered[g]:
            out.append(n)
            v = inv.variables.get(self.dim)
            n += v.shape[0] if v is not None and v.shape else 1
        return out

    def _file_at(self, g: int, step: int) -> str:
        return self._step_in_file(g, step)[0]

    def _step_in_file(self, g: int, step: int) -> tuple[str, int]:
        """The file of group g holding its step `step`, and the step's index in it."""
        starts = self._file_starts(g)
        i = max(0, int(np.searchsorted(np.asarray(starts), step, side="right")) - 1)
        return self.ordered[g][i].path, step - starts[i]

    # -- spans -------------------------------------------------------------------------

    def _coord(self, g: int) -> np.ndarray | None:
        """Group g's values of the axis (in the first group's units, once re-expressed)."""
        if self.coords is not None:
            return self.coords[g]
        a = self.plans[g].arrays.get(self.dim)
        return None if a is None or a.inline is None else np.asarray(a.inline).reshape(-1)

    def _spans(self) -> tuple[np.ndarray | None, list[np.ndarray] | None]:
        """The axis' values over every group (exact: every group's, checked the same;
        outer: their union) and each group's steps' positions in it; None when a group's
        coordinate is not known (refused, located)."""
        dim = self.dim
        if any(self.refused_axis):
            return None, None
        coords = [self._coord(g) for g in range(len(self.plans))]
        missing = [g for g, c in enumerate(coords) if c is None]
        for g in missing:
            self.problem(self.ordered[g][0].path, dim, "not-comparable",
                         f"the {dim!r} values of these files were not recorded, so the spans "
                         f"of {', '.join(self.held[g])} and the other variables cannot be "
                         "compared")
        if missing:
            return None, None
        attrs = [self.plans[g].arrays[dim].attrs for g in range(len(coords))]
        units = [a.get("units") for a in attrs]
        for g in range(1, len(coords)):
            if units[g] == units[0]:
                continue
            # (time counted from another origin: the same instants in the first group's
            # units, when that is exact, as a concatenation does)
            same_calendar = calendar_of(attrs[g]) == calendar_of(attrs[0])
            converted = _reexpress(coords[g], units[g], units[0],
                                   attrs[0].get("calendar", "standard")) \
                if same_calendar and isinstance(units[g], str) and \
                isinstance(units[0], str) and " since " in units[g] + units[0] else None
            if converted is None:
                self.problem(self.ordered[g][0].path, dim, "attribute-drift",
                             f"attribute 'units' of {dim!r} is {units[g]!r} here but "
                             f"{units[0]!r} in {self.ordered[0][0].path}: the values would "
                             "mean different things in one array")
                return None, None
            coords[g] = converted
            self.reexpressed[g] = units[g]
            self.notes.append(f"{', '.join(self.held[g])}: {dim} re-expressed from "
                              f"{units[g]!r} in {units[0]!r} (the cube stores the coordinate "
                              "itself)")
        self.coords = coords
        if self.opts.join == "outer":
            union = coords[0]
            for c in coords[1:]:
                union = np.union1d(union, c)
            # (in the first group's dtype unless that would change a step: whole days in
            # int32 and a group's noon steps in float64 keep float64)
            union = as_first(union, coords[0].dtype)
            positions = [np.searchsorted(union, c) for c in coords]
            return union, positions
        ok = True
        for g in range(1, len(coords)):
            ok &= self._same_span(0, g, coords[0], coords[g])
        return (coords[0], [np.arange(len(coords[0]))] * len(coords)) if ok else (None, None)

    def _same_span(self, g0: int, g: int, c0: np.ndarray, c: np.ndarray) -> bool:
        dim = self.dim
        a, b = ", ".join(self.held[g0]), ", ".join(self.held[g])
        only0, only = np.setdiff1d(c0, c), np.setdiff1d(c, c0)
        if only0.size or only.size:
            for lack, has, extra, hg in ((b, a, only0, g0), (a, b, only, g)):
                if not extra.size:
                    continue
                lg = g if hg == g0 else g0
                steps = np.flatnonzero(np.isin(self._coord(hg), extra))
                at = np.searchsorted(np.asarray(self._file_starts(hg)), steps, side="right") - 1
                files = [self.ordered[hg][int(i)].path for i in np.unique(at)]
                self.problem(self.ordered[lg][0].path, lack.split(", ")[0], "span-differs",
                             f"{lack} {'lacks' if len(self.held[lg]) == 1 else 'lack'} "
                             f"{extra.size} {dim} step(s) that {has} "
                             f"{'has' if len(self.held[hg]) == 1 else 'have'} "
                             f"({self._describe(hg, extra)}, in {', '.join(files[:3])}"
                             + (", ..." if len(files) > 3 else "") + "); every variable must "
                             f"cover the same {dim} span (--join outer: the union, the "
                             "missing steps read as the fill value)", axis=dim)
            return False
        index = first_difference(c, c0)
        if index is not None:  # (the same values, not in one order: cannot happen sorted)
            i = index[0] if index else 0
            self._differs(dim, g0, g, i, i, c0[i], c[i])
            return False
        return True

    def _describe(self, g: int, values: np.ndarray) -> str:
        """Steps named by their values, as dates when the coordinate is CF time."""
        a = self.plans[0 if g in self.reexpressed else g].arrays[self.dim]  # (its units)
        shown = values[:3]
        text = ", ".join(repr(py(v)) for v in shown)
        units, cal = a.attrs.get("units"), a.attrs.get("calendar", "standard")
        if isinstance(units, str) and " since " in units:
            try:
                import cftime
                dates = cftime.num2date(shown, units, cal)
                text = ", ".join(d.isoformat() for d in np.atleast_1d(dates))
            except Exception:
                pass
        return text + (", ..." if values.size > 3 else "")

    def _differs(self, name: str, g0: int, g: int, i0: int, i: int, x0, x) -> None:
        """`name` differs between group g's step i and group g0's step i0 (the same step
        of the axis)."""
        x0, x = np.asarray(x0), np.asarray(x)
        index = first_difference(x, x0) if x.shape == x0.shape else ()
        path, local = self._step_in_file(g, i)
        path0, local0 = self._step_in_file(g0, i0)
        at = (local, *index) if index else (local,)
        there = f" (index {(local0, *index) if index else (local0,)} there)" \
            if local0 != local else ""
        self.problem(path, name, "differs-between-files",
                     f"{name!r} is shared by {', '.join(self.held[g0])} and "
                     f"{', '.join(self.held[g])}, so it must be the same where they share it, "
                     f"but it differs from {path0}, first at index {at} of this file{there} "
                     f"({py(x[index] if index else x.reshape(-1)[0])!r} here, "
                     f"{py(x0[index] if index else x0.reshape(-1)[0])!r} there)",
                     axis=self.dim)

    # -- arrays --------------------------------------------------------------------------

    def _array(self, name: str, owners: list[int], remaps) -> ArrayPlan | None:
        dim = self.dim
        arrays = [self.plans[g].arrays[name] for g in owners]
        along = dim in arrays[0].dims
        if len(owners) > 1:
            attrs = self._shared_attrs(name, owners, arrays)
            if along:
                return self._shared_along(name, owners, arrays, attrs, remaps)
            if not self._shared_off(name, owners):
                return None
            a = _reindexed(arrays[0], remaps[owners[0]])
            a.attrs = attrs
            return a
        g = owners[0]
        a = _reindexed(arrays[0], remaps[g])
        if along and self.opts.join == "outer" and self.union is not None:
            return self._onto_union(a, g)
        if along and self.union is None:
            return None
        return a

    def _shared_attrs(self, name: str, owners: list[int], arrays: list[ArrayPlan]) -> dict:
        dicts = [a.attrs for a in arrays]
        if self.reexpressed and name in self._timelike():
            units0 = self.plans[0].arrays[self.dim].attrs.get("units")
            dicts = [dict(d, units=units0) if g in self.reexpressed and "units" in d else d
                     for g, d in zip(owners, dicts)]
        out, _, problems = combine(dicts, self.opts.combine_attrs, name,
                                         [self.ordered[g][0].path for g in owners])
        self.problems.extend(problems)
        return out

    def _shared_off(self, name: str, owners: list[int]) -> bool:
        """A variable off the axis the groups share (lat, lon, their bounds, a scalar
        height): each group's first file's compared (values, else digests) by
        `compare_shared`, the one place that decides it."""
        firsts = [self.ordered[g][0] for g in owners]
        ctx = Context(firsts, reported=set())
        vs = [inv.variables[name] for inv in firsts]
        ok = compare_shared(ctx, name, vs, "is shared by files holding different variables",
                            override=self.opts.compat == "override" and
                            name not in coordinate_like(firsts[0]))
        self.problems.extend(p if p.remedy else replace(p, remedy=f"--drop {name}")
                             for p in ctx.problems)
        self.notes.extend(ctx.notes)
        return ok

    def _values_along(self, g: int, name: str) -> np.ndarray | None:
        """Group g's values of `name` along the axis: its plan's inline values, else the
        values the scan recorded of every file, joined; None when not known."""
        a = self.plans[g].arrays[name]
        if a.inline is not None:
            values = np.asarray(a.inline)
        else:
            vs = [inv.variables.get(name) for inv in self.ordered[g]]
            if any(v is None or v.values is None for v in vs):
                return None
            k = vs[0].dims.index(self.dim)
            values = np.concatenate([np.asarray(v.values) for v in vs], axis=k)
        if g in self.reexpressed and name in self._timelike():
            coord0 = self.plans[0].arrays[self.dim].attrs
            values = _reexpress(values, self.reexpressed[g], coord0["units"],
                                coord0.get("calendar", "standard"))
        return values

    def _timelike(self) -> set[str]:
        """The axis' coordinate and its bounds (counted in its units)."""
        out = {self.dim}
        for p in self.plans:
            a = p.arrays.get(self.dim)
            for key in ("bounds", "climatology"):
                if a is not None and isinstance(a.attrs.get(key), str):
                    out.add(a.attrs[key])
        return out

    def _shared_along(self, name: str, owners: list[int], arrays: list[ArrayPlan],
                      attrs: dict, remaps) -> ArrayPlan | None:
        """The axis' coordinate and what else the groups share along it (its bounds):
        the same bit for bit where shared; exact: the first group's array; outer: one
        inline array over the union, each step from a group that holds it."""
        if self.union is None:
            return None
        dim = self.dim
        k = arrays[0].dims.index(dim)
        values = [self._values_along(g, name) for g in owners]
        lacking = [g for g, v in zip(owners, values) if v is None]
        if lacking and (self.opts.join == "outer" or len(owners) > 1):
            g = lacking[0]
            self.problem(self.ordered[g][0].path, name, "not-comparable",
                         f"{name!r} is shared by files holding different variables, but the "
                         "scan recorded no values of it to compare", remedy=f"--drop {name}")
            return None
        union = len(self.union)
        shape = list(arrays[0].shape)
        shape[k] = union
        merged = None
        have = np.full(union, -1, dtype=np.int64)  # per step: the group holding it
        for g, v in zip(owners, values):
            v = np.moveaxis(v, k, 0)
            pos = self.positions[g]
            if merged is None:
                merged = np.zeros((union, *v.shape[1:]),
                                  dtype=np.result_type(*[np.asarray(x).dtype for x in values]))
            here = np.flatnonzero(have[pos] >= 0)
            if here.size:
                index = first_difference(v[here], merged[pos[here]])
                if index is not None:
                    i = int(here[index[0] if index else 0])  # group g's step
                    j = int(pos[i])
                    h = int(have[j])
                    i0 = int(np.searchsorted(self.positions[h], j))
                    self._differs(name, h, g, i0, i, merged[j], v[i])
                    return None
            merged[pos] = v
            have[pos] = g
        if self.opts.join == "exact" and arrays[0].inline is None and \
                owners[0] not in self.reexpressed:
            a = _reindexed(arrays[0], remaps[owners[0]])
            a.attrs = attrs
            return a
        data = np.moveaxis(merged, 0, k)
        first = arrays[0]
        return inline_plan(name, as_first(data, first.dtype), first.dims, attrs,
                           first.fill_value)

    def _onto_union(self, a: ArrayPlan, g: int) -> ArrayPlan | None:
        """A group's variable along the axis placed on the union: chunks where its files
        hold steps, absent chunks (the fill value) where none does."""
        dim, union = self.dim, len(self.union)
        pos = self.positions[g]
        k = a.dims.index(dim)
        n = a.shape[k]
        if n == union:
            return a
        path = self.ordered[g][0].path
        if a.fill_value is None or not any(k in a.attrs for k in ("_FillValue", "missing_value")):
            # (a netCDF variable written without one reads as the library's default or 0:
            # readers would not know those steps are missing)
            self.problem(path, a.name, "no-fill-value",
                         f"{a.name} declares no fill value (_FillValue / missing_value), so "
                         f"the {union - n} {dim} step(s) no file of it holds (--join outer) "
                         "cannot read as missing (never silently as 0): give the files a "
                         "_FillValue, or leave --join outer out", axis=dim)
            return None
        if not declares_fill(a.fill_value, a.dtype, a.attrs):
            # (missing_value alone: absent chunks read as the format's default fill, which
            # readers masking missing_value take as data)
            self.problem(path, a.name, "no-fill-value",
                         f"{a.name} declares missing_value "
                         f"{py(a.attrs['missing_value'])!r} but no _FillValue, so the "
                         f"{union - n} {dim} step(s) no file of it holds (--join outer) would "
                         f"read as its default fill value {py(a.fill_value)!r}, which readers "
                         "do not take as missing: give the files a _FillValue, or leave "
                         "--join outer out", axis=dim)
            return None
        placed = place(a, k, pos, union)
        if isinstance(placed, Misfit):
            j, i = placed.chunk, placed.step
            if placed.kind == "span-interleaved":
                self.problem(self._file_at(g, i), a.name, "span-interleaved",
                             f"{dim} steps of other variables fall inside chunk {j} of "
                             f"{a.name} (between its steps {i} and {i + 1}): an absent chunk "
                             "cannot be cut there (--join outer)", axis=dim, block=(j,))
            else:
                self.problem(self._file_at(g, n - 1), a.name, "padded-block",
                             f"the last chunk of {a.name} along {dim!r} is stored padded "
                             f"and other variables' {dim} steps follow it (--join outer)",
                             axis=dim, block=(j,))
            return None
        self.notes.append(f"{a.name}: {union - n} {dim} step(s) no file of it holds read as its "
                          f"fill value {py(a.fill_value)!r} (--join outer)")
        return placed

    # -- the plan --------------------------------------------------------------------------

    def _plan(self, arrays: dict[str, ArrayPlan], sources: list[Source] | None = None) -> Plan:
        plans = self.plans
        notes = [n for p in plans for n in p.notes] + self.notes
        # (the files in the cube's order, so that override takes the first in it)
        rank = {s.path: i for i, s in enumerate(sources or [])}
        invs = sorted(self.invs, key=lambda inv: rank.get(inv.path, len(rank)))
        attrs, dropped, problems = combine([inv.groups.get("", {}) for inv in invs],
                                           self.opts.combine_attrs, "",
                                           [inv.path for inv in invs])
        self.problems.extend(problems)
        groups = {g: dict(a) for p in plans for g, a in p.groups.items()}
        groups[""] = attrs
        # one note for the whole pile, in place of each group's
        drops = {"": dropped}
        for name, a in arrays.items():
            holders = [inv for inv in self.invs if name in inv.variables]
            if len(holders) > 1:
                _, names, _ = combine([inv.variables[name].attrs for inv in holders],
                                      self.opts.combine_attrs, name)
                drops[name] = names
                for key in names:
                    a.attrs.pop(key, None)
        notes = [n for n in notes if not n.startswith("attributes that differ between files "
                                                      "were left out")]
        note = dropped_note(drops)
        if note:
            notes.append(note)
        figures = {}
        for p in plans:
            for name, f in p.figures.items():
                figures.setdefault(name, f)
        for name, a in arrays.items():
            if self.dim in a.dims:
                figures[name] = figure_of(a)
        remedies = {}
        for p in plans:
            for kind, r in p.remedies.items():
                t = remedies.setdefault(kind, replace(r, blocks=0, bytes=0))
                t.blocks += r.blocks
                t.bytes += r.bytes
        plan = Plan(sources=sources or [s for p in plans for s in p.sources], groups=groups,
                    arrays=arrays, concat_dim=self.dim, notes=notes, figures=figures,
                    remedies=remedies)
        plan.layout = self._layout()
        return plan

    def _layout(self) -> Layout:
        """One axis, one cell per file (in the order of its first step), each with the
        variables it holds."""
        files = []
        for g, (group, held) in enumerate(zip(self.ordered, self.held)):
            coord = self._coord(g) if self.plans[g].concat_dim == self.dim else None
            for inv, start in zip(group, self._file_starts(g)):
                v = inv.variables.get(self.dim)
                n = v.shape[0] if v is not None and v.shape else 1
                label = inv.path.rpartition("/")[2]
                if coord is not None and n and start + n <= len(coord):
                    label = (f"{self._describe(g, coord[start:start + 1])} .. "
                             f"{self._describe(g, coord[start + n - 1:start + n])}")
                key = _key_value(coord, start)
                files.append((key, g, label, inv.path, tuple(held)))
        files.sort(key=lambda f: (f[0], f[1]))
        axis = LayoutAxis(self.dim, [f[2] for f in files])
        cells = [LayoutCell((i,), f[3], f[4]) for i, f in enumerate(files)]
        return Layout([axis], cells)


def _key_value(values: np.ndarray | None, start: int | None) -> float:
    if values is None or start is None:
        return 0.0
    try:
        return float(values[start]) if start < len(values) else float("inf")
    except (TypeError, ValueError):  # (not numbers: the groups' order)
        return 0.0


def _reindexed(a: ArrayPlan, remap: np.ndarray) -> ArrayPlan:
    """A group's array with its references into the merged source table."""
    if a.refs is None:
        return replace(a, attrs=dict(a.attrs))
    refs = a.refs.copy()
    stored = refs["path"] != MATERIALIZED
    refs["path"] = np.where(stored, remap[np.where(stored, refs["path"], 0)], MATERIALIZED)
    cells = {key: Cell(int(remap[c.source]), c.variable, c.region)
             for key, c in a.materialize.items()}
    return replace(a, refs=refs, materialize=cells, attrs=dict(a.attrs))
