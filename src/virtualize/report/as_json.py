"""The report as JSON for pipelines (`to_json`; its schema: docs/report.md and
schemas/report-v1.json)."""

from __future__ import annotations

import json
from typing import Any

from .. import model
from ..outputs.metadata import chunk_grid
from . import layout as _layout
from .facts import refused_variables, remedy_words, summary, verdict

JSON_SCHEMA_VERSION = 1


def to_dict(report: model.Report) -> dict[str, Any]:
    doc: dict[str, Any] = {"schema": "virtualize-report", "version": JSON_SCHEMA_VERSION,
                           "verdict": verdict(report), **report.to_dict(),
                           "summary": summary(report)}
    if report.plan is not None:
        for name, a in report.plan.arrays.items():
            doc["arrays"][name]["chunk_grid"] = chunk_grid(a)
            doc["arrays"][name]["bytes_referenced"] = (
                int(a.refs["length"].sum()) if a.refs is not None else 0)
        for name, fig in report.plan.figures.items():
            if name not in doc["arrays"]:
                doc["arrays"][name] = {"status": "refused", "dims": [ax.dim for ax in fig.axes],
                                       "shape": [int(ax.extent) for ax in fig.axes]}
            elif fig.refused:
                doc["arrays"][name]["status"] = "refused"
        for name, ways in refused_variables(report).items():
            entry = doc["arrays"].setdefault(name, {})
            entry["status"] = "refused"
            entry["ways_through"] = ways
        doc["concat_dim"] = report.plan.concat_dim
        if report.plan.layout is not None:
            doc["layout"].update(_layout.to_dict_extra(report.plan.layout))
        doc["remedies"] = [dict(r.to_dict(), option=model.REMEDY_OPTIONS.get(r.kind),
                                copies=r.kind == "materialize",
                                words=remedy_words(r, getattr(report, "appending", False)))
                           for r in report.plan.remedies.values()]
    for p in report.problems:
        if p.kind == "unsupported-type" and not p.fatal and p.loc.variable \
                and p.loc.variable not in doc["arrays"]:
            doc["arrays"][p.loc.variable] = {"status": "skipped"}
    return doc


def to_json(report: model.Report) -> str:
    return json.dumps(to_dict(report), indent=2, default=_json_default)


def _json_default(o):
    """numpy numbers as JSON numbers (not their str), anything else as its str."""
    v = o.item() if hasattr(o, "item") and getattr(o, "ndim", None) == 0 else o
    return v if isinstance(v, (int, float, bool, str)) else str(v)
