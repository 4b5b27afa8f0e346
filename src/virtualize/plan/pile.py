"""What a pile of scanned files is before it is planned (pure: inventories only): the
files that do not belong to it (`odd_files`: a stray TIFF among netCDF files, a file
sharing no variable and no dimension with the rest), found whatever order the files
come in, and its data variables (`data_variables`: what a `--drop` must leave one of).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..model import FileInventory, Location, Problem

# attributes naming the variables a variable needs (CF): those are not data
NAMING_ATTRS = ("coordinates", "bounds", "climatology", "grid_mapping", "ancillary_variables",
                "cell_measures", "geometry", "node_coordinates")
SHOWN = 4  # names listed of a group's variables


def held(inv: FileInventory) -> set[str]:
    """The variables a file holds: scanned, or named by a problem of its scan (a variable
    skipped as unsupported is still the file's)."""
    return set(inv.variables) | {p.loc.variable for p in inv.problems if p.loc.variable}


def _dims(inv: FileInventory) -> set[str]:
    return set(inv.dimensions) | {d for v in inv.variables.values() for d in v.dims}


def _format(inv: FileInventory) -> str:
    """The format's name as users know it ("netCDF-4 / HDF5"), else the inventory's."""
    from ..formats.registry import of_inventory

    fmt = of_inventory(inv.format)
    return (fmt.title or fmt.name) if fmt is not None else inv.format


def _groups(invs: Sequence[FileInventory]) -> list[list[int]]:
    """The files as groups linked by a shared variable name (union-find), each in file
    order, largest first (ties in file order)."""
    parent = list(range(len(invs)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[str, int] = {}
    for i, inv in enumerate(invs):
        for name in held(inv):
            j = first.setdefault(name, i)
            parent[root(i)] = root(j)
    groups: dict[int, list[int]] = {}
    for i in range(len(invs)):
        groups.setdefault(root(i), []).append(i)
    return sorted(groups.values(), key=lambda g: (-len(g), g[0]))


def _words(invs: Sequence[FileInventory], group: list[int]) -> str:
    """"5 file(s) of netCDF-4 / HDF5 holding tas, time, x"."""
    formats = sorted({_format(invs[i]) for i in group})
    names = sorted(set().union(*(held(invs[i]) for i in group)))
    what = (", ".join(names[:SHOWN]) + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN
                                        else "")) if names else "no variable"
    return f"{len(group)} file(s) of {' and '.join(formats)} holding {what}"


def odd_files(invs: Sequence[FileInventory]) -> tuple[list[Problem], set[str]]:
    """The files that do not belong with the others: those of a group of files sharing no
    variable with the largest group, when they are of another format than it or share no
    dimension name with it either (files holding different variables on one grid, tas
    and pr with no coordinate variables, are a merge: left to the planner). Each is a
    fatal `odd-file-out` located at it (a file with a fatal problem of its own is left to
    it); when no group is the largest, one problem of the stack names the groups.
    Returns the problems and the paths not to plan (every file, for a tie)."""
    if len(invs) < 2:
        return [], set()
    groups = _groups(invs)
    if len(groups) < 2:
        return [], set()
    main = groups[0]
    main_formats = {_format(invs[i]) for i in main}
    main_dims = set().union(*(_dims(invs[i]) for i in main))
    # (a file whose scan failed is its problems' to explain, not an odd one)
    apart = [g for g in groups[1:]
             if not any(p.fatal for i in g for p in invs[i].problems)
             and (not {_format(invs[i]) for i in g} & main_formats
                  or not set().union(*(_dims(invs[i]) for i in g)) & main_dims)]
    if not apart:
        return [], set()
    if len(groups[1]) == len(main) and groups[1] in apart:  # no group is the stack
        listed = "; ".join(f"{_words(invs, g)} ({invs[g[0]].path}"
                           + (f" ... {invs[g[-1]].path}" if len(g) > 1 else "") + ")"
                           for g in groups)
        return [Problem(Location(), "odd-file-out",
                        f"the files fall into {len(groups)} groups that share no variable, "
                        f"none of them the larger: {listed}; give each group as a stack "
                        "of its own")], {inv.path for inv in invs}
    rest = _words(invs, main)
    out: list[Problem] = []
    for g in apart:
        for i in g:
            inv = invs[i]
            mine = sorted(held(inv))
            out.append(Problem(
                Location(inv.path), "odd-file-out",
                f"this {_format(inv)} file, holding "
                + (", ".join(mine[:SHOWN]) + (" ..." if len(mine) > SHOWN else "")
                   if mine else "no variable")
                + f", shares no variable with the other {rest} (first: {invs[main[0]].path})"
                  ": leave it out of this stack"))
    return out, {invs[i].path for g in apart for i in g}


def data_variables(invs: Sequence[FileInventory]) -> list[str]:
    """The data variables of the pile: variables with a dimension that are not a
    coordinate (named like a dimension) and that no variable names as its bounds,
    coordinates, grid mapping, ... (`NAMING_ATTRS`), in first-seen order."""
    named: set[str] = set()
    dims: set[str] = set()
    for inv in invs:
        dims |= _dims(inv)
        for v in inv.variables.values():
            for key in NAMING_ATTRS:
                text = v.attrs.get(key)
                if isinstance(text, str):  # "area: areacella", "crs: lat lon": the names
                    named |= {w for w in text.replace(",", " ").split() if not w.endswith(":")}
    out: dict[str, None] = {}
    for inv in invs:
        for name, v in inv.variables.items():
            base = v.basename
            if v.dims and not v.is_coordinate and name not in dims and base not in dims \
                    and name not in named and base not in named:
                out.setdefault(name)
    return list(out)
