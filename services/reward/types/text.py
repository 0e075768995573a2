"""Free-text answers: OCR (1 − WER) and open-ended (ROUGE, or exact match for short answers)."""

from __future__ import annotations

from typing import Any

from services.reward.errors import InvalidSample
from services.reward.extract.normalise import ARTICLES, tokens, words
from services.reward.extract.tags import after_final_phrase
from services.reward.metrics.rouge import exact_match, rouge_f1_mean
from services.reward.metrics.wer import wer_accuracy
from services.reward.registry import ProblemType, ScoreContext, register
from services.reward.sample import RewardSample

# Ground truths of at most this many words are scored by exact match: ROUGE on 1–3 words is noise.
SHORT_ANSWER_WORDS = 3


def text_truth(sample: RewardSample, kind: str) -> str:
    """The reference text; one without a single word ("!!!", "…") would make every answer of punctuation
    an exact match, so it is refused."""
    if not isinstance(sample.answer, str | int | float) or not str(sample.answer).strip():
        raise InvalidSample(f"{sample.label}: {kind} answer must be non-empty text")
    truth = str(sample.answer).strip()
    if not tokens(truth):
        raise InvalidSample(f"{sample.label}: {kind} answer {truth[:60]!r} has no words, only punctuation")
    return truth


class _FreeText(ProblemType):
    """Shared by the free-text types: the whole answer text is the prediction."""

    narrow_phrases = False

    def parse_truth(self, sample: RewardSample) -> str:
        return text_truth(sample, self.name)

    def extract(self, text: str, sample: RewardSample) -> str | None:
        return text.strip() or None


@register
class Ocr(_FreeText):
    name = "ocr"
    description = (
        "Text read from the video; accuracy 1 − WER (casefolded, punctuation dropped), floored at 0."
    )

    def accuracy(self, parsed: Any, truth: Any, sample: RewardSample, ctx: ScoreContext) -> float:
        return wer_accuracy(words(truth), words(parsed))


@register
class OpenEnded(_FreeText):
    name = "open-ended"
    aliases = ("free-form", "free form", "open ended", "video qa", "video description", "open")
    description = (
        f"Free text; mean ROUGE-1/2/L F1, or normalised exact match when the truth has ≤ "
        f"{SHORT_ANSWER_WORDS} words."
    )

    def accuracy(self, parsed: Any, truth: Any, sample: RewardSample, ctx: ScoreContext) -> float:
        # Counted with ROUGE's tokens, so "一个男人骑着红色的自行车" is 12 tokens, not one "word".
        if sum(token not in ARTICLES for token in tokens(truth)) <= SHORT_ANSWER_WORDS:
            return exact_match(after_final_phrase(parsed) or parsed, truth)
        return rouge_f1_mean(parsed, truth)
