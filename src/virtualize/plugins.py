"""Plug-ins of other packages, found by their entry points as xarray finds its backends.

A distribution adds an input format under the entry-point group `virtualize.formats` and
an output kind under `virtualize.outputs`, each entry point naming the plug-in object (or
its class) in the package's `pyproject.toml`:

    [project.entry-points."virtualize.formats"]
    raw = "virtualize_raw:FORMAT"

The registries (formats/registry.py, outputs/registry.py) ask for them on first use,
after their built-ins, and key each by its `name`. A plug-in that cannot be loaded, that
is not of its group's type, or whose name is taken already is reported (a
RuntimeWarning naming its entry point) and left out: never fatal.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable

FORMATS = "virtualize.formats"
OUTPUTS = "virtualize.outputs"


def load(group: str, base: type, taken: Iterable[str]) -> list:
    """The plug-ins of entry-point group `group`: each entry point's object, an instance
    of `base` (a subclass of it is instantiated), in the order the entry points are
    listed; `taken`: the names already in the registry (its built-ins')."""
    import importlib.metadata  # (its import alone is 0.05 s: where plug-ins are asked for)

    names = set(taken)
    found = []
    seen = set()
    for ep in importlib.metadata.entry_points(group=group):
        if (ep.name, ep.value) in seen:  # (a distribution found twice on the path)
            continue
        seen.add((ep.name, ep.value))
        try:
            obj = ep.load()
            if isinstance(obj, type) and issubclass(obj, base):
                obj = obj()
        except Exception as e:  # noqa: BLE001 - any failure of another package's code
            _report(group, ep, f"cannot be loaded: {type(e).__name__}: {e}")
            continue
        name = getattr(obj, "name", None)
        if not isinstance(obj, base):
            _report(group, ep, f"is not a {base.__module__}.{base.__qualname__}")
        elif not isinstance(name, str) or not name:
            _report(group, ep, "has no name")
        elif name in names:
            _report(group, ep, f"is named {name!r}, which is taken")
        else:
            names.add(name)
            found.append(obj)
    return found


def _report(group: str, ep, why: str) -> None:
    warnings.warn(f"virtualize: the {group} plug-in {ep.name!r} ({ep.value}) {why}; it is "
                  "left out", RuntimeWarning, stacklevel=3)
