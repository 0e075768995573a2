"""A reward mix: the problem type's own reward and reward functions, weighted, behind ``RewardClient``.

overall = builtin_weight · (the problem type's overall) + Σ weight_f · (function f's score)

``accuracy`` and ``format`` stay the problem type's (what the run's accuracy curves mean); ``parts``
holds every part unweighted (``builtin``, each function by name, a function's extra values as
``<name>/<key>``), which the trainer logs as ``reward/<part>`` and GDPO can normalise one by one.

A function that fails on an item (raises, times out, returns no usable number) scores 0 there and the
item carries ``error`` (counted in ``reward/errors``); the others still score. A function that fails on
every item of a batch is broken, not unlucky: the batch raises ``RewardFunctionError`` with its
traceback rather than train a step on zeros.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from services.reward.client import HttpRewardClient, Item, RewardClient
from services.reward.config import RewardConfig, RewardFunctionConfig
from services.reward.errors import InvalidSample
from services.reward.functions import FunctionRunner, Outcome, RewardFunctionError, load_function
from services.reward.judge import JudgeFunction
from services.reward.result import RewardResult
from services.reward.scoring import as_sample


class PartScorer(Protocol):
    """What the mix asks of one named part: outcomes for validated ``(RewardSample, response)`` items."""

    name: str

    def run(self, items: Sequence[tuple[Any, str]]) -> list[Outcome]: ...

    async def arun(self, items: Sequence[tuple[Any, str]]) -> list[Outcome]: ...

    def close(self) -> None: ...


class RemoteFunction:
    """A function the reward service serves by name (its operator configured it at start)."""

    def __init__(self, client: HttpRewardClient, name: str) -> None:
        self.client = client
        self.name = name

    def _outcomes(self, results: Sequence[RewardResult]) -> list[Outcome]:
        prefix = f"{self.name}/"
        return [
            Outcome(error=r.error)
            if r.error
            else Outcome(
                r.overall, {k[len(prefix) :]: v for k, v in (r.parts or {}).items() if k.startswith(prefix)}
            )
            for r in results
        ]

    def run(self, items: Sequence[tuple[Any, str]]) -> list[Outcome]:
        return self._outcomes(self.client.score_batch(items, reward_function=self.name))

    async def arun(self, items: Sequence[tuple[Any, str]]) -> list[Outcome]:
        return self._outcomes(await self.client.ascore_batch(items, reward_function=self.name))

    def close(self) -> None:
        """The HTTP client is the mix's base client, closed with it."""


def callable_items(items: Sequence[Item]) -> tuple[list[tuple[Any, str]], list[int], dict[int, str]]:
    """The items a reward function can be called on (their samples validated, once per sample object),
    their indices, and why each other item cannot be."""
    samples: dict[int, Any] = {}
    ready, where, refused = [], [], {}
    for index, (sample, response) in enumerate(items):
        key = id(sample)
        if key not in samples:
            try:
                samples[key] = as_sample(sample)
            except InvalidSample as exc:
                samples[key] = exc
        checked = samples[key]
        if isinstance(checked, InvalidSample):
            refused[index] = f"reward functions not called: {checked}"
        elif not isinstance(response, str):
            refused[index] = f"reward functions not called: the response is a {type(response).__name__}"
        else:
            ready.append((checked, response))
            where.append(index)
    return ready, where, refused


def combine(
    builtin: Sequence[RewardResult],
    parts: Sequence[tuple[str, float, Sequence[Outcome]]],
    builtin_weight: float,
) -> list[RewardResult]:
    """Each item's mixed result: the weighted sum, every part unweighted, the errors of its parts joined.
    ``parts``: (name, weight, one outcome per item); a failed part counts 0."""
    mixed = []
    for index, base in enumerate(builtin):
        overall = builtin_weight * base.overall
        values = {"builtin": base.overall}
        errors = [base.error] if base.error else []
        for name, weight, outcomes in parts:
            outcome = outcomes[index]
            if outcome.error is not None:
                errors.append(outcome.error)
                values[name] = 0.0
                continue
            overall += weight * outcome.value
            values.update(outcome.parts(name))
        mixed.append(
            base.model_copy(update={"overall": overall, "parts": values, "error": "; ".join(errors) or None})
        )
    return mixed


def check_not_all_failed(name: str, outcomes: Sequence[Outcome]) -> None:
    """RewardFunctionError, with the first traceback, when ``name`` failed on every item."""
    if outcomes and all(o.error is not None for o in outcomes):
        first = outcomes[0]
        raise RewardFunctionError(
            f"reward function {name} failed on all {len(outcomes)} items of the batch; the first: "
            f"{first.error}" + (f"\n{first.trace}" if first.trace else "")
        )


class MixedRewardClient(RewardClient):
    """The base client's results mixed with named parts (reward functions, a judge)."""

    def __init__(
        self, base: RewardClient, config: RewardConfig, parts: Sequence[tuple[PartScorer, float]]
    ) -> None:
        self.base = base
        self.config = config
        self.parts = list(parts)

    def _spread(
        self, n: int, outcomes: Sequence[Outcome], where: Sequence[int], refused: dict[int, str]
    ) -> list[Outcome]:
        placed = dict(zip(where, outcomes, strict=True))
        return [placed[i] if i in placed else Outcome(error=refused[i]) for i in range(n)]

    def _mix(
        self, items: Sequence[Item], builtin: list[RewardResult], ran: list[list[Outcome]], where, refused
    ):
        parts = []
        for (scorer, weight), outcomes in zip(self.parts, ran, strict=True):
            check_not_all_failed(scorer.name, outcomes)
            parts.append((scorer.name, weight, self._spread(len(items), outcomes, where, refused)))
        return combine(builtin, parts, self.config.builtin_weight)

    def score_batch(self, items: Sequence[Item]) -> list[RewardResult]:
        ready, where, refused = callable_items(items)
        # the parts at once, beside the builtin in this thread: a step waits for the slowest, not the sum
        with ThreadPoolExecutor(len(self.parts), thread_name_prefix="reward-mix") as pool:
            running = [pool.submit(scorer.run, ready) for scorer, _ in self.parts]
            builtin = self.base.score_batch(items)
            ran = [future.result() for future in running]
        return self._mix(items, builtin, ran, where, refused)

    async def ascore_batch(self, items: Sequence[Item]) -> list[RewardResult]:
        ready, where, refused = callable_items(items)
        builtin, *ran = await asyncio.gather(
            self.base.ascore_batch(items), *(scorer.arun(ready) for scorer, _ in self.parts)
        )
        return self._mix(items, builtin, ran, where, refused)

    def builtin(self) -> RewardClient:
        return self.base

    def problem_types(self) -> list[dict[str, Any]]:
        return self.base.problem_types()

    def close(self) -> None:
        for scorer, _ in self.parts:
            scorer.close()
        self.base.close()


def function_part(spec: RewardFunctionConfig, config: RewardConfig, base: RewardClient) -> PartScorer:
    """The scorer of one configured function: loaded here from its file, or asked of the service."""
    if spec.path is not None:
        fn = load_function(spec.path)
        return FunctionRunner(spec.name, fn, config.function_timeout_s, config.function_concurrency)
    if isinstance(base, HttpRewardClient):
        return RemoteFunction(base, spec.name)
    raise RewardFunctionError(
        f"reward.functions {spec.name}: no path, and no reward service (reward.url) to serve it by name"
    )


def mixed_client(base: RewardClient, config: RewardConfig) -> RewardClient:
    """``base`` alone when nothing is mixed in, else the mix of it and every configured part."""
    if not config.functions and config.judge is None:
        return base
    parts: list[tuple[PartScorer, float]] = []
    try:
        for spec in config.functions:
            parts.append((function_part(spec, config, base), spec.weight))
        if config.judge is not None:
            judge = config.judge
            runner = FunctionRunner(judge.name, JudgeFunction(judge), judge.timeout_s, judge.concurrency)
            parts.append((runner, judge.weight))
    except BaseException:
        for scorer, _ in parts:
            scorer.close()
        base.close()
        raise
    return MixedRewardClient(base, config, parts)
