"""Scoring: validate the sample, read the response, combine accuracy and format.

format   = 1   one <answer> block whose content the type can read
         = 0.5 one <answer> block with ill-typed content
         = 0   no block, malformed blocks, or (strict mode) not <think>…</think><answer>…</answer>
accuracy = the type's score of what was read (0 when nothing was read)
overall  = w_acc · accuracy + w_fmt · format

A batch's math checks run on a bounded pool of helper processes (``math_workers``), a few at a time,
while every other item is scored inline; with ``math_deadline_s`` set (the HTTP service sets it) they
also share one deadline. Everything else of an item (reading its sample and its response, and any
accuracy computed in this thread) runs under ``item_timeout_s`` (services/reward/timelimit.py): an item
past it fails alone.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from pydantic import ValidationError

from services.reward.config import RewardConfig
from services.reward.errors import InvalidSample, ItemTimeout
from services.reward.extract.tags import answer_text, split_response
from services.reward.metrics.mathcheck import ExpressionRefused, HelperDied, MathTimeout, get_math_checker
from services.reward.registry import ProblemType, ScoreContext, canonical_name, get_type
from services.reward.result import RewardResult
from services.reward.sample import RewardSample
from services.reward.timelimit import time_limit

SampleLike = RewardSample | Mapping[str, Any]
log = logging.getLogger(__name__)


def _label(sample: Any) -> str:
    """How errors name a sample before it is validated (an id's first 100 characters)."""
    if isinstance(sample, RewardSample):
        return sample.label
    raw = sample.get("id") if isinstance(sample, Mapping) else None
    if raw is None:
        return "sample (no id)"
    spelled = repr(raw)
    return f"sample {spelled if len(spelled) <= 100 else spelled[:100] + '…'}"


def as_sample(sample: SampleLike) -> RewardSample:
    """Validate a sample dict; InvalidSample names the sample and the offending field."""
    if isinstance(sample, RewardSample):
        return sample
    if not isinstance(sample, Mapping):
        raise InvalidSample(f"a sample must be a JSON object, got {type(sample).__name__}")
    try:
        return RewardSample.model_validate(dict(sample))
    except ValidationError as exc:
        label = _label(sample)
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


def _context(config: RewardConfig) -> ScoreContext:
    deadline = None if config.math_deadline_s is None else time.monotonic() + config.math_deadline_s
    return ScoreContext(config.math_timeout_s, deadline=deadline)


def _read(prepared: _Prepared, response: str, config: RewardConfig) -> RewardResult | tuple[Any, float]:
    """What the response gives and its format score, or the final result when it gives nothing to score."""
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
    return parsed, fmt


def _inline(
    prepared: _Prepared, response: str, config: RewardConfig, ctx: ScoreContext
) -> RewardResult | tuple[Any, float]:
    """What of one item runs in this thread: reading the response, and its accuracy unless that waits on
    a math helper process (then ``(parsed, format)`` is returned for ``_finish`` outside the time limit)."""
    read = _read(prepared, response, config)
    if isinstance(read, RewardResult):
        return read
    parsed, fmt = read
    if parsed is not None and prepared.unit.waits(parsed, prepared.truth):
        return read
    return _finish(prepared, parsed, fmt, config, ctx)


def _finish(
    prepared: _Prepared, parsed: Any, fmt: float, config: RewardConfig, ctx: ScoreContext
) -> RewardResult:
    unit, sample = prepared.unit, prepared.sample
    accuracy, note = 0.0, None
    if parsed is not None:
        try:
            accuracy = float(unit.accuracy(parsed, prepared.truth, sample, ctx))
        except MathTimeout as exc:
            note = f"math equivalence check timed out ({exc})"
        except ExpressionRefused as exc:
            note = f"math equivalence check refused ({exc})"
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
    """Score one response. Raises UnknownProblemType / InvalidSample for an unusable sample, ItemTimeout
    when scoring it takes longer than ``config.item_timeout_s``."""
    config = config or RewardConfig()
    ctx = _context(config)
    try:
        with time_limit(config.item_timeout_s):
            prepared = _Prepared(sample)
            outcome = _inline(prepared, response, config, ctx)
    except ItemTimeout:
        raise ItemTimeout(
            f"{_label(sample)}: scoring took longer than {_limit(config.item_timeout_s)}"
        ) from None
    return outcome if isinstance(outcome, RewardResult) else _finish(prepared, *outcome, config, ctx)


def score_batch(
    items: Iterable[tuple[SampleLike, str]], config: RewardConfig | None = None
) -> list[RewardResult]:
    """Score ``(sample, response)`` pairs; the ground truth of a sample object repeated across a group of
    responses is parsed once. Raises on the first unusable sample, naming its index (ItemTimeout for an
    item past ``config.item_timeout_s``)."""
    return _score_all(items, config or RewardConfig(), fail_alone=False)


def score_items(items: Iterable[tuple[Any, Any]], config: RewardConfig | None = None) -> list[RewardResult]:
    """Like ``score_batch`` but an unusable item becomes a result with ``error`` set and scores 0, and
    the other items are still scored (the HTTP service and ``RewardClient`` semantics).

    An unexpected exception while scoring one item (a bug, or a parser giving up on a pathological
    response) is logged with its traceback and fails that item alone, naming its index and the exception
    type: one bad response must not cost a whole GRPO batch its rewards. So does an item whose scoring
    takes longer than ``config.item_timeout_s`` (stopped there, ``error`` says so).
    """
    return _score_all(items, config or RewardConfig(), fail_alone=True)


class _Overlap:
    """Threads for the items whose accuracy waits on a helper process (``ProblemType.waits``), as many as
    the math checker has helpers: a slow check holds one thread, never the items after it. Every other
    item is scored inline. Leaving the block waits for the submitted items."""

    def __init__(self, threads: int) -> None:
        self._threads = threads
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, fn: Callable[..., RewardResult], *args: Any) -> Future[RewardResult]:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="reward-math")
        return self._pool.submit(fn, *args)

    def __enter__(self) -> _Overlap:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=exc_type is not None)


def _score_all(
    items: Iterable[tuple[Any, Any]], config: RewardConfig, fail_alone: bool
) -> list[RewardResult]:
    """The batch's math checks on a pool of ``math_workers``, under one deadline if ``math_deadline_s``;
    everything else of each item inline, under ``item_timeout_s`` from the item's start (reading a
    sample shared by a group counts against the first of its items)."""
    get_math_checker(config.math_workers)  # the pool's bound follows the config
    ctx = _context(config)
    limit = config.item_timeout_s
    prepared: dict[int, _Prepared | InvalidSample] = {}
    slots: list[RewardResult | Future[RewardResult]] = []
    with _Overlap(config.math_workers) as overlap:
        for index, (sample, response) in enumerate(items):
            started = time.monotonic()
            key = id(sample)
            if key not in prepared:
                try:
                    with time_limit(limit):
                        prepared[key] = _Prepared(sample)
                except InvalidSample as exc:  # includes UnknownProblemType
                    if not fail_alone:
                        raise _at_item(index, exc) from None
                    prepared[key] = exc
                except ItemTimeout:
                    message = f"{_label(sample)}: reading its ground truth took longer than {_limit(limit)}"
                    if not fail_alone:
                        raise ItemTimeout(f"item {index}: {message}") from None
                    log.warning("reward item %d: %s", index, message)
                    # cached: every response to this sample would wait as long again
                    prepared[key] = InvalidSample(message)
                except Exception as exc:
                    # not cached: the next item with this sample gets its own error and index
                    slots.append(_failure(index, exc, _type_name(sample), "reading the sample", fail_alone))
                    continue
            entry = prepared[key]
            if isinstance(entry, InvalidSample):
                slots.append(RewardResult.failed(str(entry), _type_name(sample)))
                continue
            try:
                with time_limit(limit - (time.monotonic() - started)):
                    outcome = _inline(entry, response, config, ctx)
            except ItemTimeout:
                slots.append(_timed_out(index, entry.unit.name, limit, fail_alone))
                continue
            except Exception as exc:
                slots.append(_failure(index, exc, entry.unit.name, "scoring the response", fail_alone))
                continue
            if isinstance(outcome, RewardResult):
                slots.append(outcome)
            else:
                slots.append(overlap.submit(_finish_item, index, entry, *outcome, config, ctx, fail_alone))
    return [slot.result() if isinstance(slot, Future) else slot for slot in slots]


def _limit(seconds: float) -> str:
    return f"item_timeout_s={seconds:g} s"


def _timed_out(index: int, problem_type: str, limit: float, fail_alone: bool) -> RewardResult:
    """An item stopped at its time limit: a result with ``error`` (score_items), or ItemTimeout (score_batch)."""
    message = f"item {index}: scoring took longer than {_limit(limit)}; stopped"
    if not fail_alone:
        raise ItemTimeout(message)
    log.warning("reward %s (%s)", message, problem_type)
    return RewardResult.failed(message, problem_type)


def _finish_item(
    index: int,
    entry: _Prepared,
    parsed: Any,
    fmt: float,
    config: RewardConfig,
    ctx: ScoreContext,
    fail_alone: bool,
) -> RewardResult:
    try:
        return _finish(entry, parsed, fmt, config, ctx)
    except Exception as exc:
        return _failure(index, exc, entry.unit.name, "scoring the response", fail_alone)


def _at_item(index: int, exc: InvalidSample) -> InvalidSample:
    exc.args = (f"item {index}: {exc}",)
    return exc


def _failure(
    index: int, exc: Exception, problem_type: str | None, stage: str, fail_alone: bool
) -> RewardResult:
    """An item that cannot be scored: a result with ``error`` (score_items), or the exception re-raised
    (score_batch; an InvalidSample then names the item's index)."""
    if not fail_alone:
        raise _at_item(index, exc) if isinstance(exc, InvalidSample) else exc
    if isinstance(exc, InvalidSample):
        return RewardResult.failed(str(exc), problem_type)
    return _internal_error(index, exc, problem_type, stage)


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
