"""The streaming rollout engine over ``vllm.AsyncLLM``: concurrent requests, token deltas as they come,
and weight pushes that pause generation without losing in-flight requests.

Construct it inside the event loop that will use it (vLLM binds its output handler to that loop).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from services.rollout.config import RolloutConfig
from services.rollout.engine_base import EngineBase
from services.rollout.groups import assemble_groups, online_counts
from services.rollout.prompts import EngineInput, check_feature_count, prepare_inputs
from services.rollout.samples import (
    RolloutGroup,
    RolloutResponse,
    RolloutSample,
    StreamDelta,
    VersionSpans,
)
from services.rollout.seeds import SeedKey, group_seeds
from services.rollout.vllm_bridge import (
    delta_from,
    engine_kwargs,
    free_cached_device_memory,
    on_cpu,
    sampling_params,
    seedable_kwargs,
    seeds_supported,
)
from services.rollout.weight_sync import ReloadCall, Weights, check_reload_results, reload_call

_request_ids = itertools.count()


@dataclass
class _Accumulator:
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    weight_versions: VersionSpans | None = None

    def add(self, delta: StreamDelta) -> None:
        self.token_ids += delta.token_ids
        self.logprobs += delta.logprobs
        self.text.append(delta.text)
        self.finish_reason = delta.finish_reason or self.finish_reason
        self.weight_versions = delta.weight_versions or self.weight_versions

    def response(self, index: int) -> RolloutResponse:
        if self.finish_reason is None or self.weight_versions is None:
            raise RuntimeError(f"the stream of response {index} ended before its last delta")
        return RolloutResponse(
            token_ids=self.token_ids,
            logprobs=self.logprobs,
            text="".join(self.text),
            finish_reason=self.finish_reason,
            weight_version=self.weight_versions[0][1],
            weight_versions=self.weight_versions,
        )


def collect_responses(deltas: Iterable[StreamDelta], n: int) -> list[RolloutResponse]:
    """The ``n`` whole responses of one request from its deltas (what ``rollout`` returns; also for
    consumers of :meth:`AsyncRolloutEngine.stream`), with the weight versions of the last deltas."""
    responses = [_Accumulator() for _ in range(n)]
    for delta in deltas:
        responses[delta.index].add(delta)
    return [r.response(i) for i, r in enumerate(responses)]


class AsyncRolloutEngine(EngineBase):
    """Streaming rollouts with ``AsyncLLM``; close with ``await aclose()`` from the same loop."""

    can_run_in_process = False  # vLLM's AsyncLLM runs its engine core in a process of its own

    def _launch(self) -> None:
        from vllm import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        if self.config.engine.in_process:
            raise ValueError(
                "engine.in_process: true is for the batch engine: the streaming engine (vLLM's AsyncLLM) "
                "always runs its engine core in a process of its own"
            )
        kwargs = seedable_kwargs(engine_kwargs(self.checkpoint.path, self.config), on_cpu())
        #: whether requests may carry seeds (see ``vllm_bridge.seedable_kwargs``)
        self.seedable = seeds_supported(kwargs, on_cpu())
        args = AsyncEngineArgs(**kwargs)
        self.engine = self._start(lambda: AsyncLLM.from_engine_args(args))

    async def prepare(
        self, samples: Sequence[RolloutSample], config: RolloutConfig | None = None
    ) -> list[EngineInput]:
        """Media loading off the event loop (frames are read from the store)."""
        return await asyncio.to_thread(
            prepare_inputs, samples, self.checkpoint, self.source, config or self.config
        )

    async def _deltas(
        self, item: EngineInput, n: int, **overrides: Any
    ) -> AsyncIterator[tuple[list[int], StreamDelta]]:
        """(prompt token ids, delta) pairs for ``n`` responses to one prepared input."""
        from vllm.exceptions import VLLMValidationError
        from vllm.sampling_params import RequestOutputKind

        self._check_ready("generate")
        if overrides.get("seed") is not None and not self.seedable:
            raise ValueError(
                "seeded requests need whole prefills on vLLM's CPU backend: leave "
                "rollout.engine.enable_chunked_prefill unset (or false)"
            )
        params = sampling_params(
            self.config,
            n,
            self.checkpoint.placeholder_token_ids,
            output_kind=RequestOutputKind.DELTA,
            **overrides,
        )
        request_id = f"{item.sample.id}-{next(_request_ids)}"
        prompt_ids: list[int] = []
        outputs = self.engine.generate(item.prompt, params, request_id)
        while True:
            try:
                output = await anext(outputs)
            except StopAsyncIteration:
                return
            except VLLMValidationError as exc:
                # vLLM's refusal of this one input (e.g. longer than max_model_len) is not a ValueError;
                # callers treat refused inputs as the sample's own error, never the engine's
                raise ValueError(f"sample {item.sample.id!r}: the engine refused its input: {exc}") from exc
            if not prompt_ids and output.prompt_token_ids is not None:
                prompt_ids = list(output.prompt_token_ids)
                check_feature_count(item, prompt_ids, self.checkpoint.video_token_id)
            for completion in output.outputs:
                yield prompt_ids, delta_from(item.sample.id, completion, self.weight_version)

    async def stream(
        self, sample: RolloutSample, n: int | None = None, **overrides: Any
    ) -> AsyncIterator[StreamDelta]:
        """Deltas of ``n`` (default ``config.n``) responses to ``sample`` as vLLM produces them."""
        (item,) = await self.prepare([sample])
        async for _, delta in self._deltas(item, n or self.config.n, **overrides):
            yield delta

    async def generate(
        self, item: EngineInput, n: int | None = None, **overrides: Any
    ) -> tuple[list[int], list[RolloutResponse]]:
        """``n`` (default ``config.n``) whole responses to an input prepared elsewhere, and the prompt's
        token ids as the engine expanded them (vision placeholders included).

        For callers that prepare inputs on their own schedule, e.g. evaluation's IO thread pool
        (``services.rollout.prompts.prepare_inputs`` with this engine's checkpoint, source and config).
        ``overrides`` are sampling parameters for this request only. No mix gate, no offline responses:
        that is :meth:`rollout`. A prompt the engine refuses (too long) raises ValueError.
        """
        n = self.config.n if n is None else n
        deltas: list[StreamDelta] = []
        prompt_ids: list[int] = []
        async for ids, delta in self._deltas(item, n, **overrides):
            prompt_ids = ids
            deltas.append(delta)
        return prompt_ids, collect_responses(deltas, n)

    async def rollout(
        self,
        samples: Sequence[RolloutSample],
        n: int | None = None,
        *,
        mix_policy: bool | None = None,
        key: SeedKey | None = None,
        **overrides: Any,
    ) -> list[RolloutGroup]:
        """Like ``RolloutEngine.rollout`` (``key`` seeds each sample's request the same way), with every
        sample's request in flight at once; if one request fails, the others are cancelled (vLLM aborts
        them) and the error propagates."""
        config = self._call_config(n, mix_policy)
        inputs = await self.prepare(samples, config)
        counts = online_counts(samples, config)
        seeds = group_seeds(config.seed, key, samples)
        async with asyncio.TaskGroup() as group:
            tasks = [
                group.create_task(
                    self.generate(item, k, **overrides, **({} if seed is None else {"seed": seed}))
                )
                for item, k, seed in zip(inputs, counts, seeds, strict=True)
            ]
        generated = [task.result() for task in tasks]
        gate = self._gate_client(config)
        return await asyncio.to_thread(assemble_groups, samples, generated, self.checkpoint, config, gate)

    async def push_weights(self, weights: Weights, *, transport: str = "file") -> float:
        """Check and serialise the weights (in a thread, generation running), then pause (in-flight
        requests kept), load them, reset caches and resume; returns seconds.

        Requests in flight continue under the new weights after the push, recomputed from their prompt
        and tokens so far (the pause drops their KV cache); the version is bumped while generation is
        paused, so each response's ``weight_versions`` say which tokens came from which weights. Wrong
        tensor names raise
        ValueError before the pause, leaving the engine as it was. If the load RPC or a cache reset
        fails, generation is resumed and the error re-raised: the workers' weights are then undefined
        (old, new or a mix) and the caches may hold stale entries; push again before trusting rollouts.
        """
        self._check_ready("push weights")
        started = time.perf_counter()
        payload = ExitStack()

        def serialise() -> ReloadCall:
            # parameter_names builds a meta-device model on first use: off the event loop as well
            return payload.enter_context(reload_call(weights, transport, self.checkpoint.parameter_names))

        call = await asyncio.to_thread(serialise)
        try:
            await self.engine.pause_generation(mode="keep")
            try:
                try:
                    results = await self.engine.collective_rpc(
                        call.method, args=call.args, kwargs=call.kwargs
                    )
                    check_reload_results(call, results)
                finally:
                    # before resuming: vLLM labels every later step's tokens with the new version (the
                    # workers may hold new or mixed weights even when the RPC failed)
                    self.weight_version += 1
                    await self.engine.update_weight_version(str(self.weight_version))
                self._weights_discarded = False
                await self.engine.reset_encoder_cache()
                if not await self.engine.reset_prefix_cache():
                    raise RuntimeError("vLLM refused to reset its prefix cache after a weight push")
            finally:
                await self.engine.resume_generation()
        finally:
            # the payload's folder (file transport) is removed off the event loop too
            await asyncio.to_thread(payload.close)
        return time.perf_counter() - started

    async def sleep(self, level: int = 1) -> bool:
        """Like ``RolloutEngine.sleep``. Requests in flight are kept and continue after
        :meth:`wake_up` at level 1; at level 2 they are aborted (the weights they would resume with are
        gone). Returns False, doing nothing, where vLLM cannot sleep (its CPU backend; logged)."""
        if not self._begin_sleep(level):
            return False
        await self.engine.sleep(level=level, mode="keep" if level == 1 else "abort")
        self._end_sleep(level)
        return True

    async def wake_up(self) -> bool:
        """Bring back what :meth:`sleep` released; False when the engine was not asleep (nothing to do)."""
        waking = self._to_wake(None)
        if not waking:
            return False
        free_cached_device_memory()
        if not await self.engine.wake_up():
            raise RuntimeError("vLLM did not wake up fully")
        self._woke(waking)
        return True

    async def aclose(self) -> None:
        """Shut down from inside the engine's event loop, letting its output handler task finish."""
        handler = getattr(self.engine, "output_handler", None) if self._open else None
        self.shutdown()
        if handler is not None:
            await asyncio.wait([handler])

    def shutdown(self) -> None:
        """Stop the engine's processes and remove the files they left behind (idempotent)."""
        if not self._begin_shutdown():
            return
        self.engine.shutdown()
        # AsyncLLM.__del__ calls shutdown again; dropping it now runs that while the interpreter is
        # whole, instead of at exit, where it fails on half-torn-down modules (a noisy TypeError).
        self.engine = None
        self._end_shutdown()
