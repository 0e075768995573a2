"""Word error rate: word-level Levenshtein distance divided by the number of reference words."""

from __future__ import annotations

from collections.abc import Sequence


def edit_distance(ref: Sequence[str], hyp: Sequence[str]) -> int:
    """Minimum substitutions + deletions + insertions turning ``hyp`` into ``ref`` (O(len·len) time)."""
    previous = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, start=1):
        current = [i]
        for j, h in enumerate(hyp, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (r != h)))
        previous = current
    return previous[-1]


def word_error_rate(ref: Sequence[str], hyp: Sequence[str]) -> float:
    """WER = edits / len(ref) (≥ 0, may exceed 1 when ``hyp`` is longer). An empty ``ref`` has WER 0 for
    an empty ``hyp`` and 1 otherwise."""
    if not ref:
        return 0.0 if not hyp else 1.0
    return edit_distance(ref, hyp) / len(ref)
