"""Counts for the mutation suite's summary line ("N mutated files across M formats"), and,
in a maintainer's longer run (`VIRTUALIZE_MUTATIONS` set), one line per source: printed by
tests/conftest.py (which gathers them from every pytest-xdist worker)."""

# (source label, "accepted" | "refused" | "unreadable-consistent"); a wrong, missing,
# invented or written-unreadable array fails the test instead (`_oracle.judge`)
OUTCOMES: list[tuple[str, str]] = []
