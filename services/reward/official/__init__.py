"""Official answer readers (each benchmark's released scoring rule, re-implemented) and their scores.

``score_official(name, sample, response, prefix)`` reads ``response`` with the named reader and scores
it against the sample's truth (parsed by the robust problem type, so both readers share one notion of
the truth).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from services.reward import types as _types  # noqa: F401 - registers the problem types parse_truth uses
from services.reward.official import choices as _choices  # noqa: F401 - registers the readers
from services.reward.official import values as _values  # noqa: F401
from services.reward.official.registry import (
    OfficialReader,
    Read,
    get_official_reader,
    official_reader,
    official_reader_names,
)
from services.reward.official.values import official_mra
from services.reward.registry import get_type
from services.reward.sample import RewardSample
from services.reward.scoring import as_sample


class OfficialScore(NamedTuple):
    """``accuracy`` in [0, 1] under the official rule; ``readable`` false when the reader found no
    answer; ``random`` when the official code would have guessed (scored 0 here)."""

    accuracy: float
    extracted: Any
    readable: bool
    random: bool


def official_iou(pred: tuple[float, float], truth: tuple[float, float]) -> float:
    """lmms-eval's and TimeChat's 1-D IoU: overlap over the span from the earlier start to the later
    end (0 for an empty span)."""
    span = max(pred[1], truth[1]) - min(pred[0], truth[0])
    overlap = min(pred[1], truth[1]) - max(pred[0], truth[0])
    return 0.0 if span <= 0 else max(overlap, 0.0) / span


def _truth_value(truth: Any) -> Any:
    return getattr(truth, "value", truth)


def score_official(
    name: str, sample: RewardSample | Mapping[str, Any], response: str, prefix: str = ""
) -> OfficialScore:
    """The official reader ``name``'s score of ``response`` (the generated text; ``prefix`` the
    assistant-turn text it continued)."""
    reader = get_official_reader(name)
    view = as_sample(sample)
    read = reader.read(response, prefix, view)
    if read.value is None:
        return OfficialScore(0.0, None, readable=False, random=read.random)
    if reader.compare == "given":
        return OfficialScore(float(read.value), read.value, readable=True, random=False)
    truth = _truth_value(get_type(view.problem_type).parse_truth(view))
    if reader.compare == "exact":
        accuracy = 1.0 if read.value == truth else 0.0
    elif reader.compare == "mra":
        accuracy = official_mra(float(read.value), float(truth))
    else:
        accuracy = official_iou(tuple(read.value), tuple(truth))
    value = list(read.value) if isinstance(read.value, tuple) else read.value
    return OfficialScore(accuracy, value, readable=True, random=False)


__all__ = [
    "OfficialReader",
    "OfficialScore",
    "Read",
    "get_official_reader",
    "official_iou",
    "official_mra",
    "official_reader",
    "official_reader_names",
    "score_official",
]
