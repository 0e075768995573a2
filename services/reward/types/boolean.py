"""Yes/no answers."""

from __future__ import annotations

import re
from typing import Any

from services.reward.errors import InvalidSample
from services.reward.registry import ProblemType, ScoreContext, register
from services.reward.sample import RewardSample

_WORDS = {"yes": True, "true": True, "no": False, "false": False}
_WORD = re.compile(r"\b(yes|no|true|false)\b", re.I)
_SINGLE = {"y": True, "n": False, "1": True, "0": False}
# "No, that's not true" / "Yes, there is no dog": a leading yes/no closed by punctuation is the verdict…
_LEADING = re.compile(r"[\s*_\"'(\[]*(yes|no)\b[*_\"')\]]*\s*(?:[,.!;:—–-]|$)", re.I)
# …unless the rest states the opposite answer on its own ("Yes, no.", "No, yes"), not as a word in a
# sentence ("no dog").
_BARE_ANSWER = re.compile(r"\b(yes|no)\b(?=[*_\"')\]]*\s*(?:[,.!?;:/]|$))", re.I)
# …or a true/false that is a clause of its own ("Yes. False.", "No; true"), not a word of a sentence ("No,
# that's not true"): reading yes/no alone let "Yes. False." answer both ways.
_BARE_TRUTH_VALUE = re.compile(
    r"(?:^|[,.!?;:/])[\s*_\"'(\[]*(true|false)\b(?=[*_\"')\]]*\s*(?:[,.!?;:/]|$))", re.I
)


def read_bool(text: str) -> bool | None:
    """The one truth value ``text`` states ("Yes.", "**No**", "Y", "true", "No, that's not true");
    both → None (a hedge)."""
    stripped = text.strip().strip("()[]*.:!\"' ").casefold()
    if stripped in _SINGLE:
        return _SINGLE[stripped]
    leading = _LEADING.match(text)
    if leading:
        verdict = _WORDS[leading.group(1).casefold()]
        rest = text[leading.end() :]
        stated = [*_BARE_ANSWER.finditer(rest), *_BARE_TRUTH_VALUE.finditer(rest)]
        return verdict if {_WORDS[m.group(1).casefold()] for m in stated} <= {verdict} else None
    values = {_WORDS[m.group(1).casefold()] for m in _WORD.finditer(text)}
    return values.pop() if len(values) == 1 else None


@register
class Boolean(ProblemType):
    name = "boolean"
    aliases = ("binary classification", "yes/no", "yes no", "binary")
    description = "Yes or no (true/false, Y/N); exact match; an answer containing both scores 0."

    def parse_truth(self, sample: RewardSample) -> bool:
        raw = sample.answer
        value = raw if isinstance(raw, bool) else read_bool(str(raw))
        if value is None:
            raise InvalidSample(f"{sample.label}: boolean answer {str(raw)[:60]!r} is not yes/no")
        return value

    def extract(self, text: str, sample: RewardSample) -> bool | None:
        return read_bool(text)

    def accuracy(self, parsed: Any, truth: Any, sample: RewardSample, ctx: ScoreContext) -> float:
        return 1.0 if parsed == truth else 0.0

    def jsonable(self, parsed: Any) -> Any:
        return "yes" if parsed else "no"
