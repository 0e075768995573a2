"""ROUGE-1/2/L F1 (rouge-score) over Unicode tokens, and the normalised exact match used for short answers.

rouge-score's own tokenizer keeps ``[a-z0-9]`` only, so identical Russian or Chinese answers would share no
token and score 0. Ours (``extract.normalise.tokens``) keeps every script, splits CJK into characters and
still Porter-stems ASCII words longer than 3 characters, as rouge-score does.

The scores are rouge-score's formulas (``_score_ngrams``, ``_score_lcs``), computed here on one
tokenisation: ROUGE-L's longest common subsequence comes from ``metrics.bitparallel.lcs_length`` instead
of rouge-score's O(n·m) Python table (seconds to minutes, and n·m list cells of memory, for long texts).
Same numbers (tests compare them with rouge-score's ``RougeScorer``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

from rouge_score import tokenizers

from services.reward.extract.normalise import normalise_text, tokens
from services.reward.metrics.bitparallel import lcs_length


class UnicodeTokenizer(tokenizers.Tokenizer):
    """``tokens(text)`` with ASCII words stemmed by rouge-score's own (Porter) tokenizer."""

    def __init__(self) -> None:
        self._ascii = tokenizers.DefaultTokenizer(use_stemmer=True)

    @lru_cache(maxsize=8192)  # noqa: B019 - one long-lived instance; answers repeat words a lot
    def _stem(self, token: str) -> str:
        if not token.isascii():
            return token
        stemmed = self._ascii.tokenize(token)
        return stemmed[0] if len(stemmed) == 1 else token

    def tokenize(self, text: str) -> list[str]:
        return [self._stem(token) for token in tokens(text)]


@lru_cache(maxsize=1)
def _tokenizer() -> UnicodeTokenizer:
    return UnicodeTokenizer()


def f1(overlap: int, pred_count: int, truth_count: int) -> float:
    """F1 of precision ``overlap / pred_count`` and recall ``overlap / truth_count`` (0 when either count
    is 0), as rouge-score computes it."""
    precision, recall = overlap / max(pred_count, 1), overlap / max(truth_count, 1)
    return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


def ngram_f1(pred: Sequence[str], truth: Sequence[str], n: int) -> float:
    """ROUGE-N F1: overlap = Σ over n-grams of min(count in pred, count in truth)."""
    pred_grams = Counter(tuple(pred[i : i + n]) for i in range(len(pred) - n + 1))
    truth_grams = Counter(tuple(truth[i : i + n]) for i in range(len(truth) - n + 1))
    overlap = sum((pred_grams & truth_grams).values())
    return f1(overlap, pred_grams.total(), truth_grams.total())


def lcs_f1(pred: Sequence[str], truth: Sequence[str]) -> float:
    """ROUGE-L F1: P = LCS / len(pred), R = LCS / len(truth)."""
    if not pred or not truth:
        return 0.0
    return f1(lcs_length(pred, truth), len(pred), len(truth))


def rouge_f1_mean(pred: str, truth: str) -> float:
    """Mean of the ROUGE-1, ROUGE-2 and ROUGE-L F1 scores in [0, 1] over ``UnicodeTokenizer`` tokens."""
    pred_tokens, truth_tokens = _tokenizer().tokenize(pred), _tokenizer().tokenize(truth)
    return (
        ngram_f1(pred_tokens, truth_tokens, 1)
        + ngram_f1(pred_tokens, truth_tokens, 2)
        + lcs_f1(pred_tokens, truth_tokens)
    ) / 3.0


def exact_match(pred: str, truth: str) -> float:
    return 1.0 if normalise_text(pred) == normalise_text(truth) else 0.0
