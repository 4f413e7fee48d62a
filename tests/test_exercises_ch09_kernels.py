"""Chapter 9's split-K kernel exercises: each wrong kernel is told what is wrong (the checker of chapter 8).

pagedlib is imported before triton.language is used: Triton decides at import whether its library
functions (tl.max, tl.cdiv) are interpreted.
"""
import pytest

import pagedlib  # noqa: F401  (sets TRITON_INTERPRET first)
from pagedlib.exercises import INCORRECT, ch09


@pytest.mark.parametrize("exercise,wrong,words", [
    ("split_partial", 0, ["NaN leaked", "loaded without the mask"]),           # loads without the mask
    ("split_partial", 1, ["Split 2 has no tokens", "0 / 0"]),                   # acc / l of an empty split
    ("split_partial", 2, ["Every split stored the same m and l"]),              # each split walks it all
    ("merge_splits", 0, ["plain average"]),
    ("merge_splits", 1, ["onto one max"]),
    ("merge_splits", 2, ["overflows", "scores in the hundreds"]),
    ("merge_splits", 3, ["mask the loads", "SPLITS_PAD = 4"]),
])
def test_each_wrong_split_k_kernel_is_told_what_is_wrong(exercise, wrong, words):
    ex = getattr(ch09, exercise)
    result = ex.check(ex.wrong[wrong])
    assert result.state == INCORRECT
    for word in words:
        assert word in result.message, f"{word!r} not in {result.message}"
    if "0 / 0" in result.message or "overflows" in result.message:     # no cache was read: no blame on loads
        assert "some tl.load read one" not in result.message


def test_split_k_shares_are_whole_pages_and_cover_the_sequence():
    for n in range(1, 40):
        for s in range(1, 6):
            share = ch09.split_share(n, s)
            assert share % ch09.SPLIT_BLOCK == 0 and share * s >= n
