"""Preflight reports: a verdict, counts, every located problem, and pictures of the grids.

Three forms of one `Report` (the value, here), one module each: a terminal table
(`as_text.py`: `format_text`, colour only on a TTY), JSON for pipelines (`as_json.py`:
`to_json`, schema in docs/report.md) and one self-contained HTML page (`as_html.py`:
`to_html`, inline SVG, no network) that draws each variable's cuts as bands, a mosaic's
tiles as a map and a hypercube's file grid (`layout.py`, in all three) as a grid of
cells. What all three say (the verdict, the counts, the refused variables) is `facts.py`.
"""

from __future__ import annotations

from html import escape

from .. import model
from .as_html import (
    BAND_WIDTH,
    CSS,
    MARK_COLORS,
    MARK_NAMES,
    MAX_PADDED_DRAWN,
    MAX_RUNS,
    PAD_FILL,
    to_html,
)
from .as_json import JSON_SCHEMA_VERSION, to_dict, to_json
from .as_text import COLORS, format_text, summary_line
from .facts import NO, REMEDIES, YES, refused_variables, summary, verdict, wrote

__all__ = ["BAND_WIDTH", "COLORS", "CSS", "JSON_SCHEMA_VERSION", "MARK_COLORS", "MARK_NAMES",
           "MAX_PADDED_DRAWN", "MAX_RUNS", "NO", "PAD_FILL", "REMEDIES", "YES", "Report",
           "format_text", "refused_variables", "summary", "summary_line", "to_dict", "to_html",
           "to_json", "verdict"]


class Report(model.Report):
    """`model.Report` with its presentations (`.to_json()`, `.to_html()`, `.to_text()`,
    `_repr_html_` for notebooks), its `.verdict`, and its plan opened in memory
    (`.to_store()`, `.to_xarray()`) without writing anything."""

    appending = False  # a report of `append`: its ways through are re-runs of `virtualize`
    datasets = None  # files that are several datasets: plan/datasets.py DatasetSplit

    @property
    def verdict(self) -> str:
        """"yes", "yes with remedies" or "no" (docs/report.md)."""
        return verdict(self)

    @property
    def refused_variables(self) -> dict[str, list[str]]:
        """Each refused variable with its ways through (remedy options, `--drop VAR`)."""
        return refused_variables(self)

    def __repr__(self) -> str:
        s = summary(self)
        out = f", wrote {self.output['kind']} {self.output['path']}" if wrote(self) else ""
        if self.output and not wrote(self):
            out = (f", nothing appended to {self.output['kind']} {self.output['path']} "
                   f"({len(self.already)} file(s) already in it)")
        return (f"<virtualize.Report {verdict(self)}: {s['files']} file(s), {s['variables']} "
                f"variable(s), {s['problems']} problem(s), {s['warnings']} warning(s){out}>")

    def _repr_html_(self) -> str:
        """The HTML report in a notebook, in an iframe so that its styles stay its own."""
        return (f'<iframe class="virtualize-report" srcdoc="{escape(to_html(self))}" '
                'style="width:100%;height:640px;border:1px solid #ddd"></iframe>')

    def to_store(self, *, allow=None):
        """The plan as a read-only in-memory zarr store (metadata and inline values in
        memory, chunks read from the sources by byte range); nothing is written. Raises
        `VirtualizeError` with the problems when the stack cannot be virtualized."""
        from ..open import plan_store

        if not self.ok:
            raise model.VirtualizeError([p for p in self.problems if p.fatal] or
                                        [model.Problem(model.Location(), "no-files",
                                                       "nothing to open")],
                                        "the plan cannot be opened: the stack cannot be "
                                        "virtualized", report=self)
        return plan_store(self.plan, allow=allow)

    def to_zarr(self, *, allow=None):
        """The plan as a read-only zarr group (see `to_store`)."""
        import zarr

        from ..outputs.base import rectilinear_enabled

        with rectilinear_enabled():
            return zarr.open_group(self.to_store(allow=allow), mode="r", zarr_format=3)

    def to_xarray(self, *, allow=None, **kwargs):
        """The plan as an xarray Dataset read lazily from the sources (needs the `xarray`
        extra); `kwargs` go to `xarray.open_dataset`."""
        import xarray as xr

        from ..outputs.base import rectilinear_enabled

        store = self.to_store(allow=allow)
        with rectilinear_enabled():
            return xr.open_dataset(store, engine="zarr", zarr_format=3, consolidated=False,
                                   **kwargs)

    def to_json(self) -> str:
        return to_json(self)

    def to_html(self) -> str:
        return to_html(self)

    def to_text(self, verbose: bool = False, color: bool = False) -> str:
        return format_text(self, verbose, color)
