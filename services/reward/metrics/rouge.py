"""ROUGE-1/2/L F1 (rouge-score, Porter stemming) and the normalised exact match used for short answers."""

from __future__ import annotations

from functools import lru_cache

from rouge_score import rouge_scorer

from services.reward.extract.normalise import normalise_text


@lru_cache(maxsize=1)
def _scorer() -> rouge_scorer.RougeScorer:
    return rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)


def rouge_f1_mean(pred: str, truth: str) -> float:
    """Mean of the ROUGE-1, ROUGE-2 and ROUGE-L F1 scores in [0, 1] (rouge-score's tokenizer keeps
    lowercase ASCII letters and digits only)."""
    scores = _scorer().score(truth, pred)
    return (scores["rouge1"].fmeasure + scores["rouge2"].fmeasure + scores["rougeL"].fmeasure) / 3.0


def exact_match(pred: str, truth: str) -> float:
    return 1.0 if normalise_text(pred) == normalise_text(truth) else 0.0
