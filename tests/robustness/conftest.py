"""Counts for the mutation suite's summary line ("N mutated files across M formats"), and,
in a maintainer's longer run (`VIRTUALIZE_MUTATIONS` set), one line per source."""

import os
from collections import Counter

# (source label, "accepted" | "refused" | "unreadable-consistent"); a wrong, missing,
# invented or written-unreadable array fails the test instead (`_oracle.judge`)
OUTCOMES: list[tuple[str, str]] = []


def pytest_terminal_summary(terminalreporter):
    if not OUTCOMES:
        return
    by = Counter(o for _, o in OUTCOMES)
    labels = {label for label, _ in OUTCOMES}
    terminalreporter.write_line(
        f"robustness: {len(OUTCOMES)} mutated files across {len(labels)} source formats/layouts: "
        f"{by['accepted']} accepted (equal to the library's read), {by['refused']} refused, "
        f"{by['unreadable-consistent']} accepted with damaged blocks neither the library nor the "
        "cube can decode (the rest of the array read)")
    if os.environ.get("VIRTUALIZE_MUTATIONS"):
        for label in sorted(labels):
            c = Counter(o for lab, o in OUTCOMES if lab == label)
            terminalreporter.write_line(
                f"  {label}: {sum(c.values())} files, {c['accepted']} accepted, {c['refused']} "
                f"refused, {c['unreadable-consistent']} unreadable-consistent")
