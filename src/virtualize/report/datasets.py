"""The report's line when the files given are several datasets (plan/datasets.py `split`:
they differ in model, table, frequency or grid): one line under the verdict; the note
saying how to build them is among the report's notes."""

from __future__ import annotations


def several_datasets(report) -> list[str]:
    """The summary line (a list: none when the files are one dataset)."""
    split = getattr(report, "datasets", None)
    return [split.line()] if split is not None else []
