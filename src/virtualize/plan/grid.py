"""Grid arithmetic: block lengths along an axis, run-length encoding. Pure."""

from __future__ import annotations

from collections.abc import Sequence


def block_lengths(n: int, block: int, padded: bool) -> list[int]:
    """The chunk lengths one file's blocks give along an axis of length `n`.

    Blocks are `block` long; the last is short when `block` does not divide `n`. A padded
    last block (HDF5 chunks, TIFF tiles) is stored at the full `block` size, so it can only
    be described as a chunk of `block` that overhangs the end; an unpadded one (TIFF
    strips, netCDF classic) is stored at its true length.
    """
    if n == 0:
        return []
    full, rest = divmod(n, block)
    out = [block] * full
    if rest:
        out.append(block if padded else rest)
    return out


def rle(lengths: Sequence[int]) -> list[int | list[int]]:
    """Run-length encode chunk lengths the way the rectilinear grid spells them:
    [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31] → [31, 29, 31, 30, 31, 30, [31, 2], 30,
    31, 30, 31]. Runs of one stay bare integers."""
    out: list[int | list[int]] = []
    i = 0
    n = len(lengths)
    while i < n:
        j = i
        while j + 1 < n and lengths[j + 1] == lengths[i]:
            j += 1
        count = j - i + 1
        out.append(int(lengths[i]) if count == 1 else [int(lengths[i]), count])
        i = j + 1
    return out


def is_regular(lengths: Sequence[int]) -> bool:
    """True when every chunk along the axis has the same length (only the last may
    overhang, which a regular grid allows)."""
    return len(set(lengths)) <= 1


def axis_spec(lengths: Sequence[int], extent: int) -> list[int | list[int]]:
    """One axis of a rectilinear `chunk_shapes`, always as a list of lengths and runs:
    the spec also allows a bare integer for a regular axis, but Icechunk (2.3) does not
    read that form, and a list means the same (`[[32, 4]]` for 100 steps in 32s)."""
    if not lengths:
        return [max(extent, 1)]
    return rle(lengths)
