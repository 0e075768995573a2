"""Bit-parallel Levenshtein and LCS: by hand, against the textbook tables, and on long texts."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.reward.metrics import bitparallel
from services.reward.metrics.bitparallel import lcs_length, levenshtein
from services.reward.timelimit import time_limit


def table_levenshtein(a, b):
    """The O(len·len) table, one cell at a time: the reference."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        current = [i]
        for j, y in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def table_lcs(a, b):
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b, start=1):
            current.append(previous[j - 1] + 1 if x == y else max(previous[j], current[j - 1]))
        previous = current
    return previous[-1]


@pytest.mark.parametrize(
    ("a", "b", "distance", "lcs"),
    [
        ("", "", 0, 0),
        ("a b c", "", 3, 0),
        ("a b c", "a b c", 0, 3),
        ("a b c", "a x c d", 2, 2),  # substitute b→x, insert d; common a c
        ("kitten sat on mat", "sitting sat mat", 2, 2),  # substitute kitten→sitting, delete on
        ("a b a b", "b a b a", 2, 3),  # delete the first a, insert a at the end; common b a b
    ],
)
def test_by_hand(a, b, distance, lcs):
    a, b = a.split(), b.split()
    assert levenshtein(a, b) == levenshtein(b, a) == distance
    assert lcs_length(a, b) == lcs_length(b, a) == lcs


tokens = st.lists(st.sampled_from("abcde"), max_size=80) | st.lists(st.integers(0, 40), max_size=80)


@settings(max_examples=300, deadline=None)
@given(tokens, tokens)
def test_equal_to_the_tables(a, b):
    assert levenshtein(a, b) == table_levenshtein(a, b)
    assert lcs_length(a, b) == table_lcs(a, b)


def test_kept_and_rebuilt_masks_agree(monkeypatch):
    # "a" repeats ≥ 64 times (a kept mask); with no memo budget every other mask is rebuilt on each use
    monkeypatch.setattr(bitparallel, "_MEMO_BYTES", 0)
    a = ["a", "b", "c", "a", "d"] * 40
    b = ["a", "c", "b", "e"] * 30
    assert levenshtein(a, b) == table_levenshtein(a, b)
    assert lcs_length(a, b) == table_lcs(a, b)


def test_long_texts_are_exact_within_a_bounded_time():
    # 12,000 distinct words, every 10th replaced by one no reference word equals: each replaced word
    # costs one edit (a substitution) and no alignment does better, so distance = 1,200, LCS = 10,800.
    # The tables need 144 million Python steps here (42 s for the distance on a loaded 2-core machine,
    # where these take 0.1 s): the limit is a generous bound.
    reference = [f"w{i}" for i in range(12_000)]
    hyp = ["zz" if i % 10 == 5 else word for i, word in enumerate(reference)]
    with time_limit(10):
        assert levenshtein(reference, hyp) == 1_200
        assert lcs_length(reference, hyp) == 10_800
