"""Word error rate: word-level Levenshtein distance divided by the number of reference words."""

from __future__ import annotations

from collections.abc import Sequence

from services.reward.metrics.bitparallel import levenshtein


def edit_distance(ref: Sequence[str], hyp: Sequence[str]) -> int:
    """Minimum substitutions + deletions + insertions turning ``hyp`` into ``ref`` (bit-parallel:
    O(len·⌈len/64⌉) machine-word steps, services/reward/metrics/bitparallel.py)."""
    return levenshtein(ref, hyp)


def word_error_rate(ref: Sequence[str], hyp: Sequence[str]) -> float:
    """WER = edits / len(ref) (≥ 0, may exceed 1 when ``hyp`` is longer). An empty ``ref`` has WER 0 for
    an empty ``hyp`` and 1 otherwise."""
    if not ref:
        return 0.0 if not hyp else 1.0
    return edit_distance(ref, hyp) / len(ref)


def wer_accuracy(ref: Sequence[str], hyp: Sequence[str]) -> float:
    """``max(0, 1 − WER)`` in [0, 1].

    A hypothesis at least twice as long as the reference needs at least ``len(hyp) − len(ref) ≥
    len(ref)`` insertions, so its WER is ≥ 1 and it scores 0 without computing the distance: exact, and a
    padded answer of any length costs nothing.
    """
    if ref and len(hyp) >= 2 * len(ref):
        return 0.0
    return max(0.0, 1.0 - word_error_rate(ref, hyp))
