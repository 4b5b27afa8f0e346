"""The bytes a fingerprint digests (`formats/_fingerprint._canon`) are those earlier
versions made: a cube's recorded fingerprints then still say "unchanged" for a file that
is (a change would make every source of every cube stale). Pinned per value, from the
recursive version of before 2026-12-02."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from virtualize.formats._fingerprint import _canon


class _Text(str):
    pass


class _Attrs(dict):
    pass


VALUES = [
    1, True, None, "K", 1.5, -0.0, float("nan"), 10**30, b"raw", [], {}, (1, 2),
    np.float32(2), np.int64(-3), np.array([1, 2], "i2"), np.array([[0.5]], ">f8"),
    np.array(["a", None], dtype=object), np.dtype("<f4"), _Text("s"), _Attrs(a=1, b=[2]),
    {"units": "K", "valid_range": [0.0, 1.5], "flag": True, 2: None, "nested": {"x": [1, {}]}},
    [{"name": "bytes", "configuration": {"endian": "little"}},
     {"name": "zlib", "configuration": {"level": 1}}],
    [{"a": 1}, -0.0, [np.arange(3)], ("t", 2.5)],
]
PINNED = [
    "84a42d1a6b498e0d", "ca5f56dfe76f1b18", "e7763f201d3eb6f5", "80eb72c8976842aa",
    "2e84daa386a0265b", "e5039db04621b2d0", "5ca54ae561b5afe9", "3cb2fbebed2881ce",
    "bbb95d0e0de1378c", "d27cbf07d603f889", "ad1dc21dfec58caf", "654c5f68971faed2",
    "6eec4736fdad56d2", "86ecef3b94fd8028", "8357605317de2234", "adc323b46f230944",
    "cd512d018321d556", "b12f628c4b41bbdf", "c0d56fc70cbb7600", "4f78280cc1c42f1d",
    "d6af807911ebf4eb", "8d9361a79787a158", "f50beb0b05e078dc",
]


@pytest.mark.parametrize("i", range(len(VALUES)))
def test_canonical_bytes_are_pinned(i):
    assert hashlib.sha256(_canon(VALUES[i])).hexdigest()[:16] == PINNED[i]
