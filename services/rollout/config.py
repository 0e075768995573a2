"""Rollout configuration: sampling, engine arguments, mix-policy and per-modality pixel budgets.

The one place where rollout defaults live; the trainer's config tree embeds :class:`RolloutConfig`.
Defaults suit a CPU laptop with a tiny model; a GPU cluster overrides ``engine`` (see docs/rollout.md).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

GiB = 1 << 30


class EngineConfig(BaseModel):
    """Arguments of the vLLM engine (``vllm.LLM`` / ``AsyncLLM``)."""

    model_config = ConfigDict(extra="forbid")

    # "auto" lets vLLM pick (it downcasts fp32 checkpoints to 16-bit); train/infer parity tests use float32.
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    max_model_len: int = Field(4096, gt=0)
    # KV cache size; null sizes it from gpu_memory_utilization (GPU only). VLLM_CPU_KVCACHE_SPACE, if set
    # in the environment, takes precedence on CPU (vLLM's legacy setting).
    kv_cache_gib: float | None = Field(1.0, gt=0)
    gpu_memory_utilization: float = Field(0.6, gt=0, le=1)
    enforce_eager: bool = True
    enable_prefix_caching: bool = True
    tensor_parallel_size: int = Field(1, ge=1)
    # null: vLLM's choice. Inside a Ray actor vLLM would pick its Ray executor, which cannot start
    # tensor-parallel workers in the actor's own GPU bundle: the trainer's Ray engine asks for "mp".
    distributed_executor_backend: Literal["mp", "ray", "uni"] | None = None
    max_num_seqs: int | None = Field(None, gt=0)
    # Throughput settings for GPU runs; null leaves vLLM's own default.
    max_num_batched_tokens: int | None = Field(None, gt=0)
    enable_chunked_prefill: bool | None = None
    mm_processor_cache_gb: float | None = Field(None, ge=0)
    # Frees the KV cache and weights during the update (engines on the actor's GPUs). null: on for
    # colocated engines where vLLM can sleep (CUDA), off otherwise; false with colocated is refused.
    enable_sleep_mode: bool | None = None
    # How the engines sleep through the update: 2 drops the weights with the KV cache (every push
    # replaces them all, so keeping them would copy every weight to host memory and back for nothing),
    # 1 keeps the weights in host memory. null: 2 for colocated engines, 1 for others (sleep_level()).
    sleep_level: Literal[1, 2] | None = None
    limit_mm_per_prompt: dict[Literal["image", "video"], int] = Field(
        default_factory=lambda: {"image": 1, "video": 1}
    )
    # The engine core and its worker inside the calling process (vLLM's VLLM_ENABLE_V1_MULTIPROCESSING=0
    # with its single-process executor) instead of two processes of their own. null: in process where
    # the engine is alone in its process on vLLM's CPU backend (tensor parallel 1): one driver engine,
    # or a disaggregated engine's Ray actor; else separate processes (docs/rollout.md, "In-process
    # engines"). Batch engine only; the streaming engine's core is always a process.
    in_process: bool | None = None
    # raw: log-softmax of the model's logits (temperature 1), what the trainer's teacher-forced forward
    # computes and what the consistency tests compare. processed: the distribution actually sampled
    # (after temperature, top-k/top-p and logit biases).
    logprobs_mode: Literal["raw_logprobs", "processed_logprobs"] = "raw_logprobs"

    @model_validator(mode="after")
    def _check(self) -> EngineConfig:
        if self.sleep_level is not None and self.enable_sleep_mode is False:
            raise ValueError(
                f"engine.sleep_level={self.sleep_level} with enable_sleep_mode: false: an engine without "
                "sleep mode keeps its memory through the update; drop sleep_level or enable sleep mode"
            )
        if self.in_process:
            if self.tensor_parallel_size > 1:
                raise ValueError(
                    "engine.in_process: true runs one worker in this process; tensor_parallel_size="
                    f"{self.tensor_parallel_size} needs one process per rank: drop engine.in_process"
                )
            if self.distributed_executor_backend not in (None, "uni"):
                raise ValueError(
                    f"engine.in_process: true contradicts distributed_executor_backend="
                    f"{self.distributed_executor_backend!r} (workers in processes of their own)"
                )
        return self


def sleep_level(engine: EngineConfig, placement: str) -> int | None:
    """The level engines at ``placement`` sleep at through the update (None: they keep their memory):
    ``engine.sleep_level`` when set; else 2 for colocated engines, whose push replaces every weight (a
    failed push fails the step, so the old weights are never needed again: verl sleeps at level 2 on
    vLLM >= 0.8.5), and 1 for engines that sleep elsewhere (``enable_sleep_mode``), which keep serving
    after a failed push."""
    if placement == "colocated":
        return engine.sleep_level or 2
    if engine.enable_sleep_mode:
        return engine.sleep_level or 1
    return None


def in_process_resolved(engine: EngineConfig, *, alone: bool, cpu: bool) -> EngineConfig:
    """``engine`` with a null ``in_process`` decided: in the calling process when the engine is ``alone``
    in it on vLLM's CPU backend (``cpu``), with tensor parallel 1 and no executor asked for by name (in
    process means vLLM's single-process one); else in processes of its own. A set value stays."""
    if engine.in_process is not None:
        return engine
    value = alone and cpu and engine.tensor_parallel_size == 1
    value = value and engine.distributed_executor_backend in (None, "uni")
    return engine.model_copy(update={"in_process": value})


class RolloutConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    n: int = Field(8, ge=1, description="responses per prompt (GRPO group size)")
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int | None = Field(None, gt=0, description="null: no top-k truncation")
    max_tokens: int = Field(512, gt=0, description="response length limit in tokens")
    seed: int = Field(
        0,
        description="the run's sampling seed: each request is seeded from (seed, step, sample id), "
        "responses by their index (services/rollout/seeds.py); also the engine's own seed",
    )
    engine: EngineConfig = Field(default_factory=EngineConfig)

    # The fleet (docs/rollout.md, "Placements"): where the engines run and how many there are.
    # colocated: an engine shard on every group of tensor_parallel_size actor ranks (same processes and
    # GPUs, asleep during the update); disaggregated: Ray actors on GPUs of their own; driver: engines in
    # the trainer's process (one-GPU and CPU runs). null: colocated where CUDA is and trainer.use_ray,
    # else disaggregated with trainer.use_ray and trainer.rollout_on_ray, else driver.
    placement: Literal["colocated", "disaggregated", "driver"] | None = None
    engines: int | None = Field(
        None,
        ge=1,
        description="data-parallel engines (null: actor.world_size / tensor_parallel_size when "
        "colocated, else 1)",
    )
    engine_timeout_s: float | None = Field(
        1800.0, gt=0, description="an engine that takes longer for its share of a call counts as failed"
    )

    # Mixed offline/online groups (SPEC §5): n-1 generated responses + the sample's offline_output.
    mix_policy: bool = False
    # With a threshold, n responses are generated and the last is replaced by the offline one only when
    # the online mean accuracy is below it; null always injects (generating n-1).
    mix_accuracy_threshold: float | None = Field(None, ge=0.0, le=1.0)

    # Per-modality pixel budgets. Images are resized by the processor into [min, max]; videos arrive
    # resized by the frame store and a frame above video_max_pixels is an error naming the sample.
    image_min_pixels: int = Field(4 * 28 * 28, gt=0)
    image_max_pixels: int = Field(1280 * 28 * 28, gt=0)
    video_max_pixels: int | None = Field(768 * 32 * 32, gt=0)

    @model_validator(mode="after")
    def _check(self) -> RolloutConfig:
        if self.image_min_pixels > self.image_max_pixels:
            raise ValueError(
                f"image_min_pixels ({self.image_min_pixels}) exceeds image_max_pixels ({self.image_max_pixels})"
            )
        if self.mix_policy and self.n < 2:
            raise ValueError("mix_policy needs n >= 2 (n-1 generated responses plus the offline one)")
        if self.mix_accuracy_threshold is not None and not self.mix_policy:
            raise ValueError("mix_accuracy_threshold is set but mix_policy is off; set mix_policy: true")
        return self


def call_config(config: RolloutConfig, n: int | None = None, mix_policy: bool | None = None) -> RolloutConfig:
    """The config of one rollout call, re-validated: ``n`` replaces the group size and ``mix_policy=False``
    turns mixing (and its gate) off for the call, e.g. for greedy n=1 baselines of a mixing config.
    ``mix_policy=True`` needs the config to mix already (it holds the gate settings)."""
    if n is None and mix_policy is None:
        return config
    values = config.model_dump()
    if n is not None:
        values["n"] = n
    if mix_policy is False:
        values.update(mix_policy=False, mix_accuracy_threshold=None)
    elif mix_policy and not config.mix_policy:
        raise ValueError("mix_policy=True for one call needs a config with mix_policy: true")
    return RolloutConfig.model_validate(values)
