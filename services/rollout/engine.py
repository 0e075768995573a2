"""The batch rollout engine: samples with frame-store keys in, groups of responses with logprobs out.

One ``vllm.LLM`` per engine. The same class serves a tiny CPU checkpoint in tests and a real Qwen-VL
checkpoint on a GPU cluster; only :class:`~services.rollout.config.EngineConfig` changes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from services.rollout.config import RolloutConfig
from services.rollout.engine_base import EngineBase
from services.rollout.groups import Generated, assemble_groups, online_counts
from services.rollout.prompts import EngineInput, check_feature_count, prepare_inputs
from services.rollout.samples import RolloutGroup, RolloutSample
from services.rollout.seeds import SeedKey, group_seeds
from services.rollout.vllm_bridge import (
    engine_kwargs,
    free_cached_device_memory,
    on_cpu,
    response_from,
    sampling_params,
    seedable_kwargs,
    seeds_supported,
)
from services.rollout.weight_sync import (
    BucketLoad,
    WeightBuckets,
    Weights,
    check_announced,
    check_reload_results,
    checkpoint_shapes,
    raise_statuses,
    reload_call,
)


class RolloutEngine(EngineBase):
    """Batch rollouts with ``vllm.LLM``; use as a context manager or call :meth:`shutdown`."""

    _bucket_load: BucketLoad | None = None  # the bucketed push open on this engine, if any

    def _launch(self) -> None:
        from vllm import LLM

        kwargs = seedable_kwargs(engine_kwargs(self.checkpoint.path, self.config), on_cpu())
        #: whether requests may carry seeds (see ``vllm_bridge.seedable_kwargs``)
        self.seedable = seeds_supported(kwargs, on_cpu())
        self.llm = self._start(lambda: LLM(**kwargs))

    def prepare(
        self, samples: Sequence[RolloutSample], config: RolloutConfig | None = None
    ) -> list[EngineInput]:
        """Check offline outputs, load and check each sample's media and render its prompt (errors name
        the sample); ``config`` defaults to the engine's."""
        return prepare_inputs(samples, self.checkpoint, self.source, config or self.config)

    def generate(
        self,
        inputs: Sequence[EngineInput],
        counts: Sequence[int],
        seeds: Sequence[int | None] | None = None,
        **overrides: Any,
    ) -> list[Generated]:
        """``counts[i]`` responses to ``inputs[i]``, seeded ``seeds[i]`` (None: the engine's own random
        stream): (prompt token ids, responses) per input."""
        self._check_ready("generate")
        if self._bucket_load is not None:
            raise RuntimeError("cannot generate: a bucketed weight push is open (end_weight_buckets)")
        seeds = seeds or [None] * len(inputs)
        if any(s is not None for s in seeds) and not self.seedable:
            raise ValueError(
                "seeded requests need whole prefills on vLLM's CPU backend: leave "
                "rollout.engine.enable_chunked_prefill unset (or false)"
            )
        banned = self.checkpoint.placeholder_token_ids
        params = [
            sampling_params(self.config, n, banned, **overrides, **({} if seed is None else {"seed": seed}))
            for n, seed in zip(counts, seeds, strict=True)
        ]
        outputs = self._run_requests([item.prompt for item in inputs], params)
        results = []
        for item, output in zip(inputs, outputs, strict=True):
            prompt_ids = list(output.prompt_token_ids)
            check_feature_count(item, prompt_ids, self.checkpoint.video_token_id)
            results.append((prompt_ids, [response_from(c, self.weight_version) for c in output.outputs]))
        return results

    def _run_requests(self, prompts: list[Any], params: list[Any]) -> list[Any]:
        """vLLM's outputs for ``prompts`` (one sampling parameter set each), in order."""
        with self._calling():
            return self.llm.generate(prompts, params, use_tqdm=False)

    def rollout(
        self,
        samples: Sequence[RolloutSample],
        n: int | None = None,
        *,
        mix_policy: bool | None = None,
        key: SeedKey | None = None,
        **overrides: Any,
    ) -> list[RolloutGroup]:
        """A group of ``n`` (default ``config.n``) responses per sample, offline responses mixed in per
        the config (``mix_policy=False``: not in this call). ``key``: where in the run the call belongs;
        each sample's request is then seeded from (``config.seed``, key, sample id) (see
        ``services.rollout.seeds``). ``overrides`` replace sampling parameters for this call (e.g.
        ``temperature=0``)."""
        config = self._call_config(n, mix_policy)
        if not samples:
            return []
        inputs = self.prepare(samples, config)
        seeds = group_seeds(config.seed, key, samples)
        generated = self.generate(inputs, online_counts(samples, config), seeds, **overrides)
        return assemble_groups(samples, generated, self.checkpoint, config, self._gate_client(config))

    def push_weights(self, weights: Weights, *, transport: str = "file") -> float:
        """Load new weights into the running engine; returns the seconds it took.

        ``weights``: a state dict (checkpoint names, as the HF model's ``state_dict()``), the bytes of a
        safetensors file, a folder of safetensors files, or ``WeightBuckets`` (loaded bucket by bucket,
        :meth:`push_weight_buckets`). A state dict travels by ``transport``
        "file" (a safetensors file, see ``weight_sync.weights_dir``) or "bytes" (inside the RPC).
        Tensor names are checked against the checkpoint's first: a ValueError leaves the engine as it
        was. If the RPC itself fails, the workers' weights are undefined (push again).
        """
        if isinstance(weights, WeightBuckets):
            return self.push_weight_buckets(weights.announced, weights.open())
        self._check_ready("push weights")
        started = time.perf_counter()
        with reload_call(weights, transport, self.checkpoint.parameter_names) as call, self._calling():
            try:
                results = self.llm.collective_rpc(call.method, args=call.args, kwargs=call.kwargs)
                check_reload_results(call, results)
            finally:
                self._next_weight_version()  # the workers may hold new (or mixed) weights even when it failed
        self._weights_pushed()
        return time.perf_counter() - started

    def push_weight_buckets(
        self, announced: Sequence[tuple[str, tuple[int, ...]]], buckets: Iterable[Mapping[str, Any]]
    ) -> float:
        """Load new weights bucket by bucket (names and shapes checked first, one bucket held at a time);
        returns the seconds it took."""
        started = time.perf_counter()
        self.begin_weight_buckets(announced)
        try:
            for bucket in buckets:
                self.load_weight_bucket(bucket)
        except BaseException:
            self.end_weight_buckets(failed=True)
            raise
        self.end_weight_buckets()
        return time.perf_counter() - started

    # -- the same push, one call per step: a remote driver hands the buckets over as they are made -----

    def begin_weight_buckets(self, announced: Sequence[tuple[str, tuple[int, ...]]]) -> None:
        """Open a bucketed push of ``announced`` (every (name, full shape), in push order): refused, with
        the engine as it was, if a name or shape is not the checkpoint's. Generation waits until
        :meth:`end_weight_buckets`."""
        self._check_ready("push weights")
        if self._bucket_load is not None:
            raise RuntimeError("a bucketed push is already open on this engine")
        check_announced(announced, self.checkpoint.parameter_names, checkpoint_shapes(self.checkpoint))
        load = BucketLoad(self._rpc, announced)
        load.begin()
        self._bucket_load = load

    def load_weight_bucket(self, bucket: Mapping[str, Any]) -> int:
        """Load the next bucket of the open push; returns how many tensors it held."""
        if self._bucket_load is None:
            raise RuntimeError("no bucketed push is open: call begin_weight_buckets first")
        self._bucket_load.load(bucket)
        return len(bucket)

    def receive_weight_bucket(self, index: int, slots: Sequence[tuple[str, tuple[int, ...], str]]) -> int:
        """Receive bucket ``index`` of the open push over the weight group (see
        :meth:`join_weight_group`) into every worker; returns how many tensors it held."""
        if self._bucket_load is None:
            raise RuntimeError("no bucketed push is open: call begin_weight_buckets first")
        self._bucket_load.receive(index, slots)
        return len(slots)

    @property
    def group_ranks(self) -> int:
        """How many members this engine adds to a weight group: one per worker."""
        return self.config.engine.tensor_parallel_size

    def join_weight_group(
        self, address: str, first_rank: int, world: int, timeout_s: float, backend: str
    ) -> None:
        """Every worker joins the weight-broadcast group at ``address`` (``services.rollout.weight_group``),
        as ranks ``first_rank`` on; blocks until the whole group has joined."""
        self._check_ready("join a weight group")
        raise_statuses(
            self._rpc("reelrl_join_weight_group", args=(address, first_rank, world, timeout_s, backend))
        )

    def end_weight_buckets(self, *, failed: bool = False) -> int:
        """Finish the open push (raising if a tensor was not loaded); ``failed``: after an error, finish
        the reload without its checks. Either way the weight version moves on. Returns the buckets."""
        load, self._bucket_load = self._bucket_load, None
        if load is None:
            raise RuntimeError("no bucketed push is open")
        try:
            if failed:
                load.abort()
                return load.count
            count = load.end()
        finally:
            self._next_weight_version()
        self._weights_pushed()
        return count

    def _rpc(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        with self._calling():
            return self.llm.collective_rpc(method, *args, **kwargs)

    def _next_weight_version(self) -> None:
        self.weight_version += 1
        if not self._open:  # runs in a push's finally: a stopped engine has no version to set
            return
        with self._calls:
            if self._open:
                self.llm.llm_engine.set_weight_version(str(self.weight_version))

    def _weights_pushed(self) -> None:
        self._weights_discarded = False
        # Encoder outputs and prefix KV blocks cached under the old weights: a repeated clip would hit a
        # stale entry, or a missing one that kills the engine ("Encoder cache miss").
        self.reset_caches(processed_inputs=False)

    def sleep(self, level: int = 1) -> bool:
        """Release the engine's memory for a colocated trainer (``engine.enable_sleep_mode: true``):
        level 1 drops the KV cache and offloads the weights to CPU memory, level 2 drops both (push
        weights after :meth:`wake_up`, before generating). Generating or pushing while asleep raises.
        Returns False, doing nothing, where vLLM cannot sleep (its CPU backend; logged)."""
        if not self._begin_sleep(level):
            return False
        with self._calling():
            self.llm.sleep(level=level)
        self._end_sleep(level)
        return True

    def wake_up(self, tags: Sequence[str] | None = None) -> bool:
        """Bring back what :meth:`sleep` released: ``tags`` of it (``weights``, ``kv_cache``), None: all.
        False when none of them was asleep (nothing to do)."""
        waking = self._to_wake(tags)
        if not waking:
            return False
        free_cached_device_memory()
        with self._calling():
            awake = self.llm.wake_up(tags=None if tags is None else waking)
        self._woke(waking)
        if not self._asleep and not awake:
            raise RuntimeError("vLLM did not wake up fully")
        return True

    def reset_caches(self, processed_inputs: bool = True) -> None:
        """Forget cached encoder outputs and prefix KV blocks (and, with ``processed_inputs``, the
        processed pixel values of recent media): the next request computes everything afresh."""
        with self._calling():
            self.llm.llm_engine.reset_encoder_cache()
            if not self.llm.reset_prefix_cache():
                # vLLM refuses while requests hold blocks; stale KV would then serve a repeated prompt
                raise RuntimeError("vLLM refused to reset its prefix cache (requests still running?)")
            if processed_inputs:
                self.llm.llm_engine.reset_mm_cache()

    def worker_runtime(self) -> list[dict[str, Any]]:
        """Facts each worker process reports (``WeightSyncExtension.reelrl_runtime``)."""
        return self._rpc("reelrl_runtime")

    def shutdown(self) -> None:
        """Stop the engine's processes and remove the files they left behind (idempotent)."""
        if not self._begin_shutdown():
            return
        try:
            engine = self.llm.llm_engine
            if (renderer := getattr(engine, "renderer", None)) is not None:
                renderer.shutdown()
            engine.engine_core.shutdown()
        finally:
            self._end_shutdown()

    def __enter__(self) -> RolloutEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
