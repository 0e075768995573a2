"""Preference judgements (LLaVA-Critic style): which of two responses is better, or a score.

Pairwise labels: "first" ("Response 1", "Answer A", "1", "A"), "second", "tie" ("equally good"). A
judgement naming both responses as better is a hedge. Pointwise (the sample has ``score_range`` [lo, hi]):
accuracy = max(0, 1 − |pred − truth| / (hi − lo)); a score outside the range is no answer.
"""

from __future__ import annotations

import re
from typing import Any

from services.reward.errors import InvalidSample
from services.reward.extract.numbers import single_number
from services.reward.registry import ProblemType, ScoreContext, register
from services.reward.sample import RewardSample

_ORDINAL = {"1": "first", "a": "first", "one": "first", "first": "first",
            "2": "second", "b": "second", "two": "second", "second": "second"}  # fmt: skip
_REF = r"(?:response|answer|output|candidate|assistant)\s*\(?([12ab])\)?"
_BETTER = re.compile(
    rf"\b{_REF}\s+(?:is|was)\s+(?:clearly\s+|slightly\s+|much\s+)?(?:better|superior|preferred|more\s+\w+)"
    rf"|\b(?:prefer|choose|select|pick)\s+{_REF}"
    r"|\b(first|second)\s+(?:response|answer|output)\s+is\s+(?:better|superior|preferred)"
    r"|\[\[([12ab])\]\]",
    re.I,
)
_TIE = re.compile(
    r"\b(?:tie|equally|equal(?:ly)?\s+good|both\s+(?:are\s+)?(?:equally|the\s+same))\b|\[\[c\]\]", re.I
)
_BARE = re.compile(rf"^\W*(?:{_REF}|([12ab]|first|second|tie|equal))\W*$", re.I)


def read_label(text: str) -> str | None:
    """ "first" / "second" / "tie" from a verdict, or None (none stated, or both)."""
    bare = _BARE.match(text.strip())
    if bare:
        token = (bare.group(1) or bare.group(2)).casefold()
        return "tie" if token in ("tie", "equal") else _ORDINAL[token]
    labels = {_ORDINAL[next(g for g in m.groups() if g).casefold()] for m in _BETTER.finditer(text)}
    if _TIE.search(text):
        labels.add("tie")
    return labels.pop() if len(labels) == 1 else None


def _score_range(sample: RewardSample) -> tuple[float, float] | None:
    raw = sample.extra_field("score_range")
    if raw is None:
        return None
    if not (isinstance(raw, list | tuple) and len(raw) == 2 and all(isinstance(v, int | float) for v in raw)):
        raise InvalidSample(f"{sample.label}: score_range must be [low, high], got {raw!r}")
    if not raw[1] > raw[0]:
        raise InvalidSample(f"{sample.label}: score_range {raw!r} must have high > low")
    return float(raw[0]), float(raw[1])


@register
class Preference(ProblemType):
    name = "preference"
    aliases = ("llava", "critic", "llava critic", "pairwise")
    description = "Pairwise verdict (first/second/tie) exact match, or a score within score_range."

    def parse_truth(self, sample: RewardSample) -> str | float:
        bounds = _score_range(sample)
        if bounds is not None:
            value = single_number(str(sample.answer))
            if value is None or not bounds[0] <= value <= bounds[1]:
                raise InvalidSample(f"{sample.label}: preference score {sample.answer!r} is not in {bounds}")
            return value
        label = read_label(str(sample.answer))
        if label is None:
            raise InvalidSample(
                f"{sample.label}: preference answer {str(sample.answer)[:60]!r} is no verdict"
            )
        return label

    def extract(self, text: str, sample: RewardSample) -> str | float | None:
        bounds = _score_range(sample)
        if bounds is None:
            return read_label(text)
        value = single_number(text)
        return value if value is not None and bounds[0] <= value <= bounds[1] else None

    def accuracy(self, parsed: Any, truth: Any, sample: RewardSample, ctx: ScoreContext) -> float:
        if isinstance(truth, str):
            return 1.0 if parsed == truth else 0.0
        low, high = _score_range(sample)  # type: ignore[misc]
        return max(0.0, 1.0 - abs(parsed - truth) / (high - low))
