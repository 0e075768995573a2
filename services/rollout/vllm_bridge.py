"""Translation between ReelRL's rollout types and vLLM's: engine arguments, sampling, outputs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from services.rollout.config import GiB, RolloutConfig
from services.rollout.samples import RolloutResponse, StreamDelta
from services.rollout.weight_sync import EXTENSION

BANNED_BIAS = -100.0  # vLLM clamps logit biases to [-100, 100]


def engine_kwargs(model: str, config: RolloutConfig) -> dict[str, Any]:
    """Arguments for ``vllm.LLM`` and ``vllm.AsyncEngineArgs`` from the rollout config."""
    engine = config.engine
    kwargs: dict[str, Any] = {
        "model": model,
        "dtype": engine.dtype,
        "max_model_len": engine.max_model_len,
        "enforce_eager": engine.enforce_eager,
        "enable_prefix_caching": engine.enable_prefix_caching,
        "tensor_parallel_size": engine.tensor_parallel_size,
        "limit_mm_per_prompt": dict(engine.limit_mm_per_prompt),
        "gpu_memory_utilization": engine.gpu_memory_utilization,
        "seed": config.seed,
        "logprobs_mode": engine.logprobs_mode,
        "worker_extension_cls": EXTENSION,
    }
    if engine.kv_cache_gib is not None:
        kwargs["kv_cache_memory_bytes"] = int(engine.kv_cache_gib * GiB)
    optional = ("max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill", "mm_processor_cache_gb")
    for name in optional:
        value = getattr(engine, name)
        if value is not None:
            kwargs[name] = value
    if engine.enable_sleep_mode:
        kwargs["enable_sleep_mode"] = True
    return kwargs


def sampling_params(
    config: RolloutConfig, n: int, banned_token_ids: Sequence[int] = (), **overrides: Any
) -> Any:
    """vLLM sampling parameters for ``n`` responses; ``logprobs=0`` returns the sampled token's logprob.

    ``banned_token_ids`` are never sampled (bias -100): a response holding an image/video placeholder
    token would not match the vision features when the trainer re-reads prompt + response. The reported
    logprobs are vLLM's raw ones (before the bias), i.e. the model's own.
    """
    from vllm import SamplingParams

    values: dict[str, Any] = {
        "n": n,
        "temperature": config.temperature,
        "top_p": config.top_p,
        "top_k": config.top_k or 0,
        "max_tokens": config.max_tokens,
        "logprobs": 0,
    }
    if banned_token_ids:
        values["logit_bias"] = {int(t): BANNED_BIAS for t in banned_token_ids}
    values.update(overrides)
    return SamplingParams(**values)


def sampled_logprobs(logprobs: Any, token_ids: Sequence[int]) -> list[float]:
    """The logprob of each sampled token from vLLM's per-position logprob maps."""
    return [float(position[token].logprob) for position, token in zip(logprobs, token_ids, strict=True)]


def response_from(completion: Any) -> RolloutResponse:
    """A finished vLLM ``CompletionOutput`` (token ids include the end token when it stopped on it)."""
    ids = list(completion.token_ids)
    logprobs = None if completion.logprobs is None else sampled_logprobs(completion.logprobs, ids)
    return RolloutResponse(
        token_ids=ids, logprobs=logprobs, text=completion.text, finish_reason=str(completion.finish_reason)
    )


def delta_from(sample_id: str, completion: Any) -> StreamDelta:
    """A ``CompletionOutput`` of a DELTA-kind request: the tokens since the previous one."""
    ids = list(completion.token_ids)
    return StreamDelta(
        sample_id=sample_id,
        index=completion.index,
        token_ids=ids,
        logprobs=[] if completion.logprobs is None else sampled_logprobs(completion.logprobs, ids),
        text=completion.text,
        finish_reason=None if completion.finish_reason is None else str(completion.finish_reason),
    )
