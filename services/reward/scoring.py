"""Scoring: validate the sample, read the response, combine accuracy and format.

format   = 1   one <answer> block whose content the type can read
         = 0.5 one <answer> block with ill-typed content
         = 0   no block, malformed blocks, or (strict mode) not <think>…</think><answer>…</answer>
accuracy = the type's score of what was read (0 when nothing was read)
overall  = w_acc · accuracy + w_fmt · format
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from services.reward.config import RewardConfig
from services.reward.errors import InvalidSample
from services.reward.extract.tags import answer_text, split_response
from services.reward.metrics.mathcheck import HelperDied, MathTimeout
from services.reward.registry import ProblemType, ScoreContext, canonical_name, get_type
from services.reward.result import RewardResult
from services.reward.sample import RewardSample

SampleLike = RewardSample | Mapping[str, Any]
log = logging.getLogger(__name__)


def as_sample(sample: SampleLike) -> RewardSample:
    """Validate a sample dict; InvalidSample names the sample and the offending field."""
    if isinstance(sample, RewardSample):
        return sample
    if not isinstance(sample, Mapping):
        raise InvalidSample(f"a sample must be a JSON object, got {type(sample).__name__}")
    try:
        return RewardSample.model_validate(dict(sample))
    except ValidationError as exc:
        label = f"sample {sample.get('id')!r}" if sample.get("id") is not None else "sample (no id)"
        problems = "; ".join(
            f"field {'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}" for err in exc.errors()
        )
        raise InvalidSample(f"{label}: {problems}") from None


class _Prepared:
    """A validated sample with its type and parsed ground truth (shared by a group's responses)."""

    __slots__ = ("sample", "truth", "unit")

    def __init__(self, sample: SampleLike) -> None:
        self.sample = as_sample(sample)
        self.unit: ProblemType = get_type(self.sample.problem_type)
        self.truth = self.unit.parse_truth(self.sample)


def _score_prepared(prepared: _Prepared, response: str, config: RewardConfig) -> RewardResult:
    unit, sample = prepared.unit, prepared.sample
    if not isinstance(response, str):
        raise InvalidSample(f"{sample.label}: response must be a string, got {type(response).__name__}")
    if len(response) > config.max_response_chars:
        return RewardResult(
            overall=0.0, accuracy=0.0, format=0.0, problem_type=unit.name,
            note=f"response has {len(response)} characters, over max_response_chars={config.max_response_chars}",
        )  # fmt: skip

    parts = split_response(response)
    text = answer_text(parts, phrases=unit.narrow_phrases)
    parsed = unit.extract(text, sample) if text is not None else None

    if not parts.has_answer_tag or (config.strict_format and not parts.strict_ok):
        fmt = 0.0
    else:
        fmt = 1.0 if parsed is not None else 0.5

    accuracy, note = 0.0, None
    if parsed is not None:
        try:
            accuracy = float(
                unit.accuracy(parsed, prepared.truth, sample, ScoreContext(config.math_timeout_s))
            )
        except MathTimeout as exc:
            note = f"math equivalence check timed out ({exc})"
        except HelperDied as exc:
            note = f"math equivalence check failed: {exc}"
        if not (math.isfinite(accuracy) and 0.0 <= accuracy <= 1.0):
            raise AssertionError(f"{unit.name} accuracy {accuracy!r} for {sample.label} is outside [0, 1]")
    return RewardResult(
        overall=config.w_acc * accuracy + config.w_fmt * fmt,
        accuracy=accuracy,
        format=fmt,
        extracted=unit.jsonable(parsed) if parsed is not None else None,
        problem_type=unit.name,
        note=note,
    )


def score(sample: SampleLike, response: str, config: RewardConfig | None = None) -> RewardResult:
    """Score one response. Raises UnknownProblemType / InvalidSample for an unusable sample."""
    return _score_prepared(_Prepared(sample), response, config or RewardConfig())


def score_batch(
    items: Iterable[tuple[SampleLike, str]], config: RewardConfig | None = None
) -> list[RewardResult]:
    """Score ``(sample, response)`` pairs; the ground truth of a sample object repeated across a group of
    responses is parsed once. Raises on the first unusable sample, naming its index."""
    config = config or RewardConfig()
    prepared: dict[int, _Prepared] = {}
    results = []
    for index, (sample, response) in enumerate(items):
        try:
            if id(sample) not in prepared:
                prepared[id(sample)] = _Prepared(sample)
            results.append(_score_prepared(prepared[id(sample)], response, config))
        except InvalidSample as exc:
            exc.args = (f"item {index}: {exc}",)
            raise
    return results


def score_items(items: Iterable[tuple[Any, Any]], config: RewardConfig | None = None) -> list[RewardResult]:
    """Like ``score_batch`` but an unusable item becomes a result with ``error`` set and scores 0, and
    the other items are still scored (the HTTP service and ``RewardClient`` semantics).

    An unexpected exception while scoring one item (a bug, or a parser giving up on a pathological
    response) is logged with its traceback and fails that item alone, naming its index and the exception
    type: one bad response must not cost a whole GRPO batch its rewards.
    """
    config = config or RewardConfig()
    prepared: dict[int, _Prepared | InvalidSample] = {}
    results = []
    for index, (sample, response) in enumerate(items):
        key = id(sample)
        if key not in prepared:
            try:
                prepared[key] = _Prepared(sample)
            except InvalidSample as exc:  # includes UnknownProblemType
                prepared[key] = exc
            except Exception as exc:
                results.append(_internal_error(index, exc, _type_name(sample), "reading the sample"))
                continue  # not cached: the next item with this sample gets its own error and index
        entry = prepared[key]
        if isinstance(entry, InvalidSample):
            results.append(RewardResult.failed(str(entry), _type_name(sample)))
            continue
        try:
            results.append(_score_prepared(entry, response, config))
        except InvalidSample as exc:
            results.append(RewardResult.failed(str(exc), entry.unit.name))
        except Exception as exc:
            results.append(_internal_error(index, exc, entry.unit.name, "scoring the response"))
    return results


def _internal_error(index: int, exc: Exception, problem_type: str | None, stage: str) -> RewardResult:
    log.exception("reward item %d: unexpected %s while %s", index, type(exc).__name__, stage)
    return RewardResult.failed(
        f"item {index}: internal error while {stage}: {type(exc).__name__}: {str(exc)[:200]}", problem_type
    )


def _type_name(sample: Any) -> str | None:
    raw = sample.get("problem_type") if isinstance(sample, Mapping) else None
    if not isinstance(raw, str):
        return None
    try:
        return canonical_name(raw)
    except InvalidSample:
        return None
