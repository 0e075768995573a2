"""``RewardClient``: one interface, scored in-process or by the HTTP service; ``make_reward_client`` picks
by config (``url`` set → HTTP). Both mark an unusable item with ``error`` and score the rest."""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
from pydantic_core import to_jsonable_python

from services.reward.config import RewardConfig
from services.reward.errors import InvalidSample
from services.reward.registry import describe_types
from services.reward.result import RewardResult
from services.reward.sample import RewardSample
from services.reward.scoring import SampleLike, score_items
from services.reward.strictjson import non_finite_locations, non_finite_name

log = logging.getLogger(__name__)
Item = tuple[SampleLike, str]
_RETRY_STATUS = frozenset({502, 503, 504})


class RewardServiceError(RuntimeError):
    """The reward service rejected a request or could not be reached."""


class RewardClient(ABC):
    @abstractmethod
    def score_batch(self, items: Sequence[Item]) -> list[RewardResult]:
        """One result per ``(sample, response)``, in order."""

    @abstractmethod
    def problem_types(self) -> list[dict[str, Any]]:
        """Canonical names, aliases and descriptions of the types the scorer knows."""

    async def ascore_batch(self, items: Sequence[Item]) -> list[RewardResult]:
        return await asyncio.to_thread(self.score_batch, items)

    def score(self, sample: SampleLike, response: str) -> RewardResult:
        return self.score_batch([(sample, response)])[0]

    def builtin(self) -> RewardClient:
        """The client of the problem types' own reward, without a mix's parts (itself, unless mixed):
        what reads accuracy alone, e.g. the rollout's mix gate."""
        return self

    def close(self) -> None:  # noqa: B027 - optional hook: only networked clients hold resources
        """Release connections (nothing to release in-process)."""

    def __enter__(self) -> RewardClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class InProcessRewardClient(RewardClient):
    def __init__(self, config: RewardConfig | None = None) -> None:
        self.config = config or RewardConfig()

    def score_batch(self, items: Sequence[Item]) -> list[RewardResult]:
        return score_items(items, self.config)

    def problem_types(self) -> list[dict[str, Any]]:
        return describe_types()


def sample_payload(sample: SampleLike) -> dict[str, Any]:
    """A sample as JSON-ready data (a validated ``RewardSample`` goes back to the input schema)."""
    if isinstance(sample, RewardSample):
        data = sample.model_dump(mode="json", exclude_none=True)
        data["options"] = [f"{o.letter}. {o.text}" for o in sample.options]
        return data
    return to_jsonable_python(dict(sample) if isinstance(sample, Mapping) else sample, fallback=str)


class HttpRewardClient(RewardClient):
    """Sends batches of ``config.http_batch_size`` to ``POST {url}/v1/score`` with the config's scoring
    options; transport errors and 502/503/504 are retried ``config.http_retries`` times with backoff."""

    def __init__(self, config: RewardConfig, transport: httpx.BaseTransport | None = None) -> None:
        if not config.url:
            raise ValueError("HttpRewardClient needs RewardConfig.url (the reward service base URL)")
        self.config = config
        self._client = httpx.Client(base_url=config.url, timeout=config.http_timeout_s, transport=transport)
        self._async: httpx.AsyncClient | None = None

    def _bodies(self, items: Sequence[Item], reward_function: str | None = None) -> list[dict[str, Any]]:
        """One request body per chunk of ``config.http_batch_size`` items (each naming ``reward_function``
        when the service is to score them with that configured function instead of their problem type).

        JSON has no NaN or Infinity (the service answers such a body 422, and httpx refuses to send one),
        so a non-finite number in any item is refused here, naming the item and field.
        """
        payload = [{"sample": sample_payload(s), "response": r} for s, r in items]
        if reward_function is not None:
            for item in payload:
                item["reward_function"] = reward_function
        found = non_finite_locations(payload, limit=1)
        if found:
            (index, *field), value = found[0]
            raise InvalidSample(
                f"item {index}: {'.'.join(map(str, field))} is {non_finite_name(value)}; JSON has no "
                "non-finite numbers, so the reward service cannot receive it"
            )
        options = self.config.scoring_options().model_dump()
        size = self.config.http_batch_size
        return [{"items": payload[i : i + size], "options": options} for i in range(0, len(payload), size)]

    @staticmethod
    def _results(response: httpx.Response) -> list[RewardResult]:
        if response.status_code != 200:
            raise RewardServiceError(
                f"reward service {response.request.url} answered {response.status_code}: {response.text[:500]}"
            )
        return [RewardResult(**r) for r in response.json()["results"]]

    def _retry_wait(self, attempt: int, problem: str) -> float:
        if attempt >= self.config.http_retries:
            raise RewardServiceError(f"reward service {self.config.url}: {problem} (gave up after retries)")
        wait = 0.2 * 2**attempt
        log.warning("reward service %s: %s; retrying in %.1fs", self.config.url, problem, wait)
        return wait

    def score_batch(self, items: Sequence[Item], reward_function: str | None = None) -> list[RewardResult]:
        results: list[RewardResult] = []
        for body in self._bodies(items, reward_function):
            for attempt in range(self.config.http_retries + 1):
                try:
                    response = self._client.post("/v1/score", json=body)
                except httpx.TransportError as exc:
                    time.sleep(self._retry_wait(attempt, repr(exc)))
                    continue
                if response.status_code in _RETRY_STATUS:
                    time.sleep(self._retry_wait(attempt, f"status {response.status_code}"))
                    continue
                results.extend(self._results(response))
                break
        return results

    async def ascore_batch(
        self, items: Sequence[Item], reward_function: str | None = None
    ) -> list[RewardResult]:
        if self._async is None:
            self._async = httpx.AsyncClient(
                base_url=self.config.url or "", timeout=self.config.http_timeout_s
            )
        results: list[RewardResult] = []
        for body in self._bodies(items, reward_function):
            for attempt in range(self.config.http_retries + 1):
                try:
                    response = await self._async.post("/v1/score", json=body)
                except httpx.TransportError as exc:
                    await asyncio.sleep(self._retry_wait(attempt, repr(exc)))
                    continue
                if response.status_code in _RETRY_STATUS:
                    await asyncio.sleep(self._retry_wait(attempt, f"status {response.status_code}"))
                    continue
                results.extend(self._results(response))
                break
        return results

    def problem_types(self) -> list[dict[str, Any]]:
        response = self._client.get("/v1/problem-types")
        response.raise_for_status()
        return response.json()["problem_types"]

    def close(self) -> None:
        self._client.close()
        if self._async is not None:
            # An AsyncClient must be closed on a loop; callers of ascore_batch should use aclose().
            log.debug("HttpRewardClient closed without aclose(); async connections are dropped")

    async def aclose(self) -> None:
        if self._async is not None:
            await self._async.aclose()
            self._async = None
        self._client.close()


def make_reward_client(config: RewardConfig | None = None) -> RewardClient:
    """HTTP when ``config.url`` is set, in-process otherwise; mixed with ``config.functions`` when any
    are configured (services/reward/mix.py)."""
    from services.reward.mix import mixed_client

    config = config or RewardConfig()
    return mixed_client(HttpRewardClient(config) if config.url else InProcessRewardClient(config), config)
