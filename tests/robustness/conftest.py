"""Counts for the mutation suite's summary line ("N mutated files across M formats")."""

from collections import Counter

# (source label, "accepted" | "refused" | "unreadable-consistent")
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
        "cube can decode")
