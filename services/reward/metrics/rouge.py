"""ROUGE-1/2/L F1 (rouge-score) over Unicode tokens, and the normalised exact match used for short answers.

rouge-score's own tokenizer keeps ``[a-z0-9]`` only, so identical Russian or Chinese answers would share no
token and score 0. Ours (``extract.normalise.tokens``) keeps every script, splits CJK into characters and
still Porter-stems ASCII words longer than 3 characters, as rouge-score does.
"""

from __future__ import annotations

from functools import lru_cache

from rouge_score import rouge_scorer, tokenizers

from services.reward.extract.normalise import normalise_text, tokens


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
def _scorer() -> rouge_scorer.RougeScorer:
    return rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], tokenizer=UnicodeTokenizer())


def rouge_f1_mean(pred: str, truth: str) -> float:
    """Mean of the ROUGE-1, ROUGE-2 and ROUGE-L F1 scores in [0, 1] over ``UnicodeTokenizer`` tokens."""
    scores = _scorer().score(truth, pred)
    return (scores["rouge1"].fmeasure + scores["rouge2"].fmeasure + scores["rougeL"].fmeasure) / 3.0


def exact_match(pred: str, truth: str) -> float:
    return 1.0 if normalise_text(pred) == normalise_text(truth) else 0.0
