"""Multiple choice: the answer is one option letter."""

from __future__ import annotations

import re
import string
import unicodedata
from typing import Any

from services.reward.errors import InvalidSample
from services.reward.extract.choices import extract_choice, option_text_candidates
from services.reward.registry import ProblemType, ScoreContext, register
from services.reward.sample import RewardSample

_MIN_LETTERS = 4  # without options, A–D are always valid answers
_LETTERED_ANSWER = re.compile(r"^\(?([A-Z])\s*[.):：]\s*\S")


def _written_letter(answer: object) -> str | None:
    """The letter a ground truth is written as: "B", "(B)", "b.", "B. red" → "B"; else None. Read after
    NFKC like the answers are, so a full-width "Ｂ" or "（Ｂ）" is "B" and no invalid sample."""
    raw = unicodedata.normalize("NFKC", str(answer)).strip()
    bare = raw.strip("()[]*.: ").upper()
    if len(bare) == 1 and bare in string.ascii_uppercase:
        return bare
    lettered = _LETTERED_ANSWER.match(raw)
    return lettered.group(1) if lettered else None


def valid_letters(sample: RewardSample) -> str:
    """The options' letters; without options A–D, widened to the truth's letter ("F" → A–F)."""
    if sample.options:
        return "".join(o.letter for o in sample.options)
    truth = _written_letter(sample.answer)
    last = max(string.ascii_uppercase.index(truth) + 1 if truth else 0, _MIN_LETTERS)
    return string.ascii_uppercase[:last]


@register
class MultipleChoice(ProblemType):
    name = "multiple choice"
    aliases = ("multiple_choice", "mcq", "multi choice")
    description = "One option letter; option text accepted when options are given. Exact match."

    def parse_truth(self, sample: RewardSample) -> str:
        raw = str(sample.answer).strip()
        letters = valid_letters(sample)
        written = _written_letter(raw)
        if written is not None and written in letters:
            return written
        if sample.options:
            found = option_text_candidates(raw, sample.options)
            if len(found) == 1:
                return found.pop()
        raise InvalidSample(
            f"{sample.label}: multiple-choice answer {raw[:60]!r} is neither an option letter "
            f"({letters}) nor the text of exactly one option"
        )

    def extract(self, text: str, sample: RewardSample) -> str | None:
        return extract_choice(text, sample.options, valid_letters(sample))

    def accuracy(self, parsed: Any, truth: Any, sample: RewardSample, ctx: ScoreContext) -> float:
        return 1.0 if parsed == truth else 0.0
