"""The mutation suite (`_oracle.judge`'s rule: test_mutations.py) over Zarr v2 stores: a store
written by zarr-python is copied and damaged where a store breaks. Its metadata documents
(`.zarray`, `.zattrs`, `.zgroup`, `.zmetadata`) get a byte flipped, a number replaced by an
absurd one (0, -1, 2**31 - 1, 2**62, a float), are cut short or removed; its chunk files are
cut short, emptied, removed, given extra bytes, or get a byte flipped. The damaged store is
virtualized alone; every outcome must be refused (naming the store) or a cube whose every
array reads as zarr-python reads it, none of them missing, invented or unreadable.

Budget: a third of `VIRTUALIZE_MUTATIONS` per source (a store is many small files)."""

from __future__ import annotations

import os
import re
import shutil

import numcodecs
import numpy as np
import pytest
import zarr
from hypothesis import strategies as st

from . import _oracle
from .test_mutations import judge_mutants

EXAMPLES = max(1, int(os.environ.get("VIRTUALIZE_MUTATIONS", "60")) // 3)
ABSURD = ("0", "-1", "2147483647", "4611686018427387904", "1e308", "0.5")

pytestmark = pytest.mark.filterwarnings("ignore::zarr.errors.ZarrUserWarning",
                                        "ignore::UserWarning", "ignore::RuntimeWarning")


def _store(path, consolidated: bool):
    """A v2 group as zarr-python writes it: compressed, uncompressed order F with "/" keys
    and a fill value of its own, a coordinate, a delta filter, a partly written array, a
    subgroup."""
    g = zarr.open_group(str(path), mode="w", zarr_format=2)
    g.attrs["title"] = "mutation source"
    rng = np.random.default_rng(28)

    def add(name, data, dims, **kw):
        a = g.create_array(name, shape=data.shape, dtype=data.dtype, **kw)
        a.attrs["_ARRAY_DIMENSIONS"] = dims
        return a

    add("temp", rng.normal(280, 5, (6, 10)).astype("f4"), ["y", "x"], chunks=(4, 4),
        compressors=numcodecs.Zlib(level=3), fill_value=np.nan)[...] = \
        rng.normal(280, 5, (6, 10)).astype("f4")
    c = add("counts", np.zeros((5, 7), "<i2"), ["y5", "x7"], chunks=(2, 3), order="F",
            compressors=None, fill_value=-1, chunk_key_encoding={"name": "v2", "separator": "/"})
    c[...] = np.arange(35, dtype="<i2").reshape(5, 7)
    add("x", np.zeros(10), ["x"], chunks=(10,), compressors=None, fill_value=0)[...] = \
        np.linspace(0, 9, 10)
    p = add("partial", np.zeros((8, 8), ">u2"), ["p", "q"], chunks=(4, 4),
            filters=[numcodecs.Delta(dtype=">u2")], compressors=numcodecs.Zlib(level=1),
            fill_value=7)
    p[:4, :4] = np.arange(16, dtype=">u2").reshape(4, 4)
    sub = g.create_group("sub")
    s = sub.create_array("b", shape=(3, 4), dtype="u1", chunks=(2, 2), fill_value=0,
                         compressors=numcodecs.Zlib(level=1))
    s.attrs["_ARRAY_DIMENSIONS"] = ["r", "s"]
    s[...] = np.arange(12, dtype="u1").reshape(3, 4)
    if consolidated:
        zarr.consolidate_metadata(str(path), zarr_format=2)
    return path


def _files(root) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, _, fs in os.walk(root) for f in fs)


def mutate_store(src, dst, data) -> str:
    """Copy `src` to `dst` and damage one of its files; what was done."""
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    files = _files(dst)
    meta = [f for f in files if os.path.basename(f).startswith(".")]
    chunks = [f for f in files if f not in meta]
    kind = data.draw(st.sampled_from(["flip", "number", "cut", "remove", "chunk-cut",
                                      "chunk-remove", "chunk-extra", "chunk-flip"]), label="kind")
    name = data.draw(st.sampled_from(chunks if kind.startswith("chunk") else meta),
                     label="file")
    path = os.path.join(dst, name)
    raw = bytearray(open(path, "rb").read())
    if kind in ("remove", "chunk-remove"):
        os.unlink(path)
        return f"{name} removed"
    if kind == "number":
        text = raw.decode("utf-8", "replace")
        numbers = list(re.finditer(r"-?\d+(\.\d+)?", text))
        if numbers:
            m = numbers[data.draw(st.integers(0, len(numbers) - 1), label="number")]
            value = data.draw(st.sampled_from(ABSURD), label="value")
            raw = bytearray((text[:m.start()] + value + text[m.end():]).encode())
            what = f"{name}: {m.group()} -> {value} at {m.start()}"
        else:
            what = f"{name}: no number"
    elif kind in ("cut", "chunk-cut"):
        at = data.draw(st.integers(0, max(len(raw) - 1, 0)), label="cut at")
        raw, what = raw[:at], f"{name} cut at {at}"
    elif kind == "chunk-extra":
        raw, what = raw + b"\x00\x01\x02\x03", f"{name}: 4 bytes added"
    elif raw:  # flip, chunk-flip
        at = data.draw(st.integers(0, len(raw) - 1), label="byte")
        x = data.draw(st.integers(1, 255), label="xor")
        raw[at] ^= x
        what = f"{name}: byte {at} ^= {x:#x}"
    else:
        what = f"{name}: empty"
    with open(path, "wb") as f:
        f.write(bytes(raw))
    return what


@pytest.mark.parametrize("consolidated", [False, True], ids=["walked", "consolidated"])
def test_mutated_zarr2_stores_are_read_exactly_or_refused(consolidated, tmp_path_factory):
    work = tmp_path_factory.mktemp("mut-zarr2")
    src = _store(work / "src.zarr", consolidated)
    label = f"zarr2-{'consolidated' if consolidated else 'walked'}"
    assert _oracle.judge(src, work / "cube.zarr") == "accepted"  # (the source itself)

    def mutant(data):
        return work / "mutated.zarr", mutate_store(src, work / "mutated.zarr", data)

    judge_mutants(label, EXAMPLES, mutant, work)
