import pytest

from virtualize.plan.grid import axis_spec, block_lengths, is_regular, rle

LEAP = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


def test_rle_leap_year_matches_the_spec_example():
    assert rle(LEAP) == [31, 29, 31, 30, 31, 30, [31, 2], 30, 31, 30, 31]


def test_rle_years_of_days():
    years = [366, 365, 365, 365, 366, 365, 365, 365]
    assert rle(years) == [366, [365, 3], 366, [365, 3]]


def unrle(spec):
    """What a reader does with one axis of chunk_shapes (lengths and [length, count] runs)."""
    out = []
    for item in spec:
        out.extend([item] if isinstance(item, int) else [item[0]] * item[1])
    return out


@pytest.mark.parametrize("lengths", [LEAP, [5], [], [3, 3, 3], [1, 2, 2, 1, 1, 1]])
def test_rle_decodes_back(lengths):
    assert unrle(rle(lengths)) == lengths


def test_block_lengths_padded_and_short():
    assert block_lengths(31, 10, padded=True) == [10, 10, 10, 10]
    assert block_lengths(31, 10, padded=False) == [10, 10, 10, 1]
    assert block_lengths(30, 10, padded=True) == [10, 10, 10]
    assert block_lengths(0, 10, padded=True) == []
    assert block_lengths(31, 1024, padded=True) == [1024]


def test_axis_spec():
    assert axis_spec([4, 4, 4], 12) == [[4, 3]]
    assert axis_spec([32, 32, 32, 32], 100) == [[32, 4]]  # overhang: the last chunk reaches past
    assert axis_spec([3], 3) == [3]
    assert axis_spec([30, 30, 30, 10], 100) == [[30, 3], 10]
    assert axis_spec([], 0) == [1]
    assert is_regular([7]) and not is_regular([7, 6])
