"""Official readers of numbers and time intervals."""

from __future__ import annotations

import math
import re

import numpy as np

from services.reward.metrics.mra import mean_relative_accuracy
from services.reward.official.choices import first_word
from services.reward.official.registry import Read, official_reader
from services.reward.sample import RewardSample

# VSI-Bench's thresholds as its script builds them: int((.95 - .5) / .05 + 2) is 10 points
_VSI_THRESHOLDS = np.linspace(0.5, 0.95, int((0.95 - 0.5) / 0.05 + 2))


def official_mra(pred: float, truth: float) -> float:
    """VSI-Bench's ``mean_relative_accuracy`` in floating point, as the script computes it: an error on a
    threshold can fail it (truth 5, prediction 4: 0.2 ≤ 1 − 0.8 is false in floats), where the robust
    reader's MRA compares exactly. A non-finite prediction passes nothing; a truth ≤ 0, which the script
    would divide by, falls back to the robust MRA."""
    if truth <= 0:
        return mean_relative_accuracy(pred, truth)
    if not math.isfinite(pred):
        return 0.0
    return float(np.mean(abs(pred - truth) / truth <= 1 - _VSI_THRESHOLDS))


@official_reader(
    "vsibench_number",
    rule="float() of fuzzy_matching (the first space-separated word, trailing '.' removed), MRA against the "
    "truth with the script's float thresholds; not a float → 0",
    source="vision-x-nyu/thinking-in-space · lmms_eval/tasks/vsibench/utils.py · to_float(fuzzy_matching(...)) "
    "+ mean_relative_accuracy",
    compare="mra",
)
def vsibench_number(response: str, prefix: str, sample: RewardSample) -> Read:
    try:
        return Read(float(first_word(response)))
    except ValueError:
        return Read(None)


_CLOCK_RANGE = re.compile(r"\b(\d{1,2}:\d{2}(?::\d{2})?)\s*[–-]\s*(\d{1,2}:\d{2}(?::\d{2})?)\b")
_RANGE = re.compile(r"(\d+(?:\.\d+)?)\s*[–-]\s*(\d+(?:\.\d+)?)")
_UNIT_RANGE = re.compile(r"(\d+(?:\.\d+)?)\s*s?\s*[–-]\s*(\d+(?:\.\d+)?)\s*s?")
_CLOCK = re.compile(r"\b(\d{1,2}:\d{2}(?::\d{2})?)\b")
_NUMBER = re.compile(r"\b(\d+(?:\.\d+)?)\b")
_KEYWORDS = ("starts", "ends", "happens in", "start time", "end time", "start", "end", "happen")
_EXAMPLE = "a specific example is : 20.8 - 30.0 seconds"


def _clock_seconds(text: str) -> float:
    parts = [float(p) for p in text.split(":")]
    return sum(p * 60.0**i for i, p in enumerate(reversed(parts)))


def _pairs(times: list[float]) -> list[tuple[float, float]]:
    times = times[: len(times) // 2 * 2]
    return [(times[i], times[i + 1]) for i in range(0, len(times), 2)]


def lmms_intervals(response: str) -> list[tuple[float, float]]:
    """lmms-eval's ``extract_time``, step by step: lowercase, drop the prompt's example, every "to"
    becomes "-"; sentences split at ``! ? \\n``, those with a time keyword kept (all if none); then the
    first rule that finds anything, sentence by sentence: clock ranges, number ranges, clock times
    paired in order, each sentence's first number paired in order, "a s - b s". The first interval, swapped if
    inverted."""
    text = response.lower().replace(_EXAMPLE, "").replace("to", "-")
    sentences = re.split(r"[!?\n]", text)
    candidates = [s for s in sentences if any(k in s for k in _KEYWORDS)] or sentences
    found: list[tuple[float, float]] = []
    for sentence in candidates:
        found = [(_clock_seconds(a), _clock_seconds(b)) for a, b in _CLOCK_RANGE.findall(sentence)]
        if found:
            break
    if not found:
        for sentence in candidates:
            found = [(float(a), float(b)) for a, b in _RANGE.findall(sentence)]
            if found:
                break
    if not found:
        found = _pairs([_clock_seconds(t) for s in candidates for t in _CLOCK.findall(s)])
    if not found:
        found = _pairs([float(m[0]) for s in candidates if (m := _NUMBER.findall(s))])
    if not found:
        for sentence in candidates:
            found = [(float(a), float(b)) for a, b in _UNIT_RANGE.findall(sentence)]
            if found:
                break
    return [(min(s, e), max(s, e)) for s, e in found[:1]]


@official_reader(
    "charades_sta",
    rule="extract_time: time ranges, else times paired in order, from the sentences naming start/end; "
    "the first interval, swapped if inverted; anything but exactly one interval → IoU 0",
    source="EvolvingLMMs-Lab/lmms-eval · lmms_eval/tasks/charades_sta/utils.py · extract_time + "
    "_temporal_grounding_compute_metrics (TimeChat utils/format_tvg.py · extract_time is the original)",
    compare="iou",
)
def charades_sta(response: str, prefix: str, sample: RewardSample) -> Read:
    found = lmms_intervals(response)
    return Read(found[0] if len(found) == 1 else None)
