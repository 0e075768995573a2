"""Translation between ReelRL's rollout types and vLLM's: engine arguments, sampling, outputs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from services.rollout.config import GiB, RolloutConfig
from services.rollout.samples import RolloutResponse, StreamDelta, VersionSpans
from services.rollout.weight_sync import EXTENSION

BANNED_BIAS = -100.0  # vLLM clamps logit biases to [-100, 100]
INITIAL_VERSION_LABEL = "default"  # vLLM's weight-version label until one is set


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
    optional = (
        "max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill", "mm_processor_cache_gb",
        "distributed_executor_backend",
    )  # fmt: skip
    for name in optional:
        value = getattr(engine, name)
        if value is not None:
            kwargs[name] = value
    if engine.enable_sleep_mode:
        kwargs["enable_sleep_mode"] = True
    if engine.in_process:
        kwargs["distributed_executor_backend"] = "uni"  # the worker in the engine core's (this) process
    return kwargs


def sleep_mode_available() -> bool:
    """Whether this vLLM build can release the KV cache and weights (CUDA, ROCm, XPU; not its CPU backend)."""
    from vllm.platforms import current_platform

    return current_platform.is_sleep_mode_available()


def check_platform(config: RolloutConfig) -> None:
    """Refuse, before anything starts, engine settings this vLLM build cannot honour. Checked here and
    not when the config loads: a config written on a laptop for a GPU cluster is valid."""
    if config.engine.enable_sleep_mode and not sleep_mode_available():
        from vllm.platforms import current_platform

        raise ValueError(
            f"engine.enable_sleep_mode: vLLM's sleep mode needs a CUDA, ROCm or XPU device, but this vLLM "
            f"runs on {current_platform.device_type}; leave enable_sleep_mode null (sleep() and wake_up() "
            "are then no-ops that keep the KV cache and weights in memory; false too, except for colocated "
            "engines, which refuse it)"
        )


def free_cached_device_memory() -> None:
    """Hand this process's cached, unused CUDA blocks back to the device before an engine wakes: the
    update's freed activations stay reserved by PyTorch's caching allocator, which vLLM's sleep-mode pool
    (an allocator of its own) cannot reuse, so a colocated wake-up would otherwise run out of memory
    beside them (verl empties the cache before it wakes its engines too). A no-op without CUDA."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def on_cpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def seedable_kwargs(kwargs: dict[str, Any], cpu: bool) -> dict[str, Any]:
    """Engine arguments under which seeded requests can run. vLLM 0.32 rewinds a seeded request's
    generator after each partial prefill chunk, which its CPU sampler cannot do ("CPU Generator does
    not use offset": the engine dies). On CPU, where ``enable_chunked_prefill`` is left unset, prefills
    are therefore kept whole: chunking off and a token budget of at least one full sequence. An explicit
    ``enable_chunked_prefill: true`` is kept (the engine then refuses seeded requests, see
    :func:`seeds_supported`)."""
    if not cpu or "enable_chunked_prefill" in kwargs:
        return kwargs
    budget = max(kwargs["max_model_len"], kwargs.get("max_num_batched_tokens", 0))
    whole = {**kwargs, "enable_chunked_prefill": False, "max_num_batched_tokens": budget}
    if kwargs.get("model") and hybrid_attention(kwargs["model"]):
        # A model with linear-attention (mamba-like) layers caches prefixes only in vLLM's "align" mode,
        # which needs chunked prefill: whole prefills then cost the prefix cache, not the seeds.
        whole["enable_prefix_caching"] = False
    return whole


def hybrid_attention(model: str | Path) -> bool:
    """Whether a checkpoint mixes linear-attention layers into its language model (Qwen3.5)."""
    try:
        config = json.loads((Path(model) / "config.json").read_text())
    except (OSError, ValueError):
        return False
    text = config.get("text_config") or config
    return "linear_attention" in (text.get("layer_types") or ())


def seeds_supported(kwargs: dict[str, Any], cpu: bool) -> bool:
    """Whether an engine started with ``kwargs`` can serve seeded requests (see :func:`seedable_kwargs`)."""
    return not cpu or kwargs.get("enable_chunked_prefill") is False


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


def version_number(label: str) -> int:
    """The engine's weight version from vLLM's label: the engines set ``str(version)`` at each push;
    before the first one vLLM's engine core labels outputs "default" (the checkpoint's weights, 0)."""
    if label == INITIAL_VERSION_LABEL:
        return 0
    try:
        return int(label)
    except ValueError:
        raise ValueError(f"vLLM reported weight version {label!r}, which no ReelRL engine set") from None


def version_spans(spans: Sequence[Any] | None, current: int) -> VersionSpans:
    """(first token index, version) per run of tokens, from a finished output's ``weight_versions``
    (vLLM's engine core labels every step's tokens with the version set when they were sampled; it
    reports ``[]`` for a response without tokens, which gets the ``current`` version, and None for
    tokens it has no label for)."""
    if spans is None:
        raise RuntimeError("vLLM reported no weight versions for a finished response")
    if not spans:
        return ((0, current),)
    return tuple((int(span.start), version_number(span.version)) for span in spans)


def response_from(completion: Any, current_version: int) -> RolloutResponse:
    """A finished vLLM ``CompletionOutput`` (token ids include the end token when it stopped on it)."""
    ids = list(completion.token_ids)
    logprobs = None if completion.logprobs is None else sampled_logprobs(completion.logprobs, ids)
    spans = version_spans(completion.weight_versions, current_version)
    return RolloutResponse(
        token_ids=ids,
        logprobs=logprobs,
        text=completion.text,
        finish_reason=str(completion.finish_reason),
        weight_version=spans[0][1],
        weight_versions=spans,
    )


def delta_from(sample_id: str, completion: Any, current_version: int) -> StreamDelta:
    """A ``CompletionOutput`` of a DELTA-kind request: the tokens since the previous one; the last delta
    carries the whole response's weight-version spans."""
    ids = list(completion.token_ids)
    finished = completion.finish_reason is not None
    return StreamDelta(
        sample_id=sample_id,
        index=completion.index,
        token_ids=ids,
        logprobs=[] if completion.logprobs is None else sampled_logprobs(completion.logprobs, ids),
        text=completion.text,
        finish_reason=str(completion.finish_reason) if finished else None,
        weight_versions=version_spans(completion.weight_versions, current_version) if finished else None,
    )
