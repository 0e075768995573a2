"""``TrainConfig``: the one typed config tree of a training run (SPEC §5), its defaults, and loading it
from YAML plus dotted ``key=value`` overrides (OmegaConf syntax, as verl and EasyR1 users know).

Every default lives here or in the section it embeds (``RolloutConfig``, ``AlgorithmConfig``,
``RewardConfig``); unknown keys are errors naming their full path; cross-section checks
(``validate_algorithm``, token budgets) run at load time with the fix in the message.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from services.common.frames.params import VideoParams
from services.common.trackers import MlflowConfig, WandbConfig
from services.reward.config import RewardConfig
from services.rollout.config import RolloutConfig, sleep_level
from services.trainer.algorithms.config import AlgorithmConfig, validate_algorithm


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DataConfig(_Section):
    """``data``: which samples, how their videos become frames, and how prompts are built."""

    train_files: list[str] = Field(min_length=1, description="JSON / JSONL / Parquet sample files")
    val_files: list[str] = Field(default_factory=list)
    # Media paths are relative to their dataset file unless REELRL_DATA_ROOTS says otherwise.
    batch_size: int = Field(8, ge=1, description="prompts per step (each gets rollout.n responses)")
    shuffle: bool = True
    seed: int = 0
    prompt_variant: Literal["instruct", "thinking"] = "instruct"
    system_prompt: str | None = None
    max_prompt_tokens: int = Field(3584, gt=0, description="longer prompts (text + vision) are dropped")
    # Frame-store modes: prefer_cached decodes missing clips first (worker pool or inline); cached_only
    # fails at start naming the samples whose clips are missing; realtime_only decodes every step.
    source_mode: Literal["prefer_cached", "cached_only", "realtime_only"] = "prefer_cached"
    preprocess_workers: int = Field(
        1, ge=0, description="local worker processes started for missing clips (0: use running workers)"
    )
    video_fps: float | None = Field(2.0, gt=0)
    video_nframes: int | None = Field(None, ge=2)
    video_min_frames: int = Field(4, ge=1)
    video_max_frames: int = Field(128, ge=2)
    video_min_pixels: int | None = Field(None, gt=0)
    video_max_pixels: int | None = Field(None, gt=0)
    video_total_pixels: int | None = Field(None, gt=0)
    image_min_pixels: int | None = Field(None, gt=0, description="null: rollout.image_min_pixels")
    image_max_pixels: int | None = Field(None, gt=0, description="null: rollout.image_max_pixels")

    def video_params(self, family: str) -> VideoParams:
        """The decode parameters of every clip of the run (a sample's ``video_params`` may override)."""
        return VideoParams(
            family=family,
            fps=None if self.video_nframes is not None else self.video_fps,
            nframes=self.video_nframes,
            min_frames=self.video_min_frames,
            max_frames=self.video_max_frames,
            min_pixels=self.video_min_pixels,
            max_pixels=self.video_max_pixels,
            total_pixels=self.video_total_pixels,
        )


class OptimConfig(_Section):
    lr: float = Field(1e-6, gt=0)
    weight_decay: float = Field(1e-2, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = Field(1e-8, gt=0)
    warmup_steps: int = Field(0, ge=0)
    schedule: Literal["constant", "cosine"] = "constant"
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="cosine: floor as a fraction of lr")
    grad_clip: float | None = Field(1.0, gt=0, description="max global grad norm; null: no clipping")


#: the language model's projections in every Qwen-VL family (attention and MLP), and Qwen3.5's linear
#: attention layers' (three of every four of its layers): LoRA's default targets
LORA_LANGUAGE_TARGETS = (
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "in_proj_qkv", "in_proj_z",
    "out_proj",
)  # fmt: skip


class LoraConfig(_Section):
    """``actor.lora``: train low-rank adapters on a frozen base (peft; docs/training.md, "Training
    adapters"). The base is stored in ``compute_dtype``, the adapters and their AdamW state in
    ``param_dtype``; KL's reference is the same model with the adapters bypassed."""

    rank: int = Field(16, gt=0, description="r: the adapters' inner dimension")
    alpha: float = Field(32.0, gt=0, description="scale alpha / rank on the adapters' output")
    dropout: float = Field(
        0.0, ge=0, lt=1,
        description="dropout on the adapters' input, in the update's passes only (scoring runs without it, "
        "so above 0 the first update's ratio is no longer exactly 1)",
    )  # fmt: skip
    target_modules: list[str] = Field(
        default_factory=lambda: list(LORA_LANGUAGE_TARGETS),
        min_length=1,
        description="module names adapted in the language model (and, with vision, the tower's blocks)",
    )
    vision: bool = Field(
        False, description="adapt the vision tower's blocks too (their attention's qkv/proj and MLP)"
    )
    quantize: Literal["4bit"] | None = Field(
        None,
        description="QLoRA: the language model's frozen linear layers in 4-bit NF4 (bitsandbytes; CUDA or "
        "CPU; actor.world_size 1)",
    )


def qlora_ranks_problem(lora: LoraConfig | None, world_size: int) -> str | None:
    """Why QLoRA cannot run on ``world_size`` ranks (None: it can): checked when the config loads and
    again by the actor against the ranks it really joined."""
    if lora is None or not lora.quantize or world_size <= 1:
        return None
    return (
        f"actor.lora.quantize={lora.quantize} runs on one rank (actor.world_size: 1), not {world_size}: "
        "FSDP2 cannot shard bitsandbytes' packed 4-bit weights with their quantisation state; use plain "
        "LoRA (quantize: null) across ranks"
    )


class ActorConfig(_Section):
    """``actor``: the trained model (and the frozen reference when KL is on)."""

    model_path: str = Field(min_length=1, description="local HF checkpoint folder")
    # Precision (docs/training.md, "Precision"): the weights AdamW steps live in ``param_dtype``; the
    # forwards run in ``compute_dtype`` (FSDP2 MixedPrecisionPolicy, autocast on one rank). A bf16
    # master rounds most lr 1e-6 updates away, so it is refused unless asked for by name.
    param_dtype: Literal["float32", "bfloat16"] = Field("float32", description="master weights + optimizer")
    compute_dtype: Literal["float32", "bfloat16"] = Field("float32", description="forwards (bf16 on GPU)")
    allow_low_precision_master: bool = Field(False, description="let AdamW step non-fp32 weights")
    dtype: Literal["float32", "bfloat16"] | None = Field(
        None, description="deprecated: read as compute_dtype (the master stays in param_dtype)"
    )
    world_size: int = Field(1, ge=1, description="FSDP ranks (gloo on CPU, NCCL on GPU)")
    fsdp_size: int | None = Field(
        None,
        ge=1,
        description="ranks one FSDP group shards over, the groups replicating each other (hybrid "
        "sharding: e.g. a node's 8 GPUs; docs/training.md); null: one group over all world_size ranks",
    )
    gradient_checkpointing: bool = False
    # Offload (docs/training.md, "Offload"): what does not fit a GPU lives in host memory.
    offload_params: bool = Field(
        False,
        description="the policy's shards, gradients and AdamW step on the host, each FSDP unit copied "
        "in for its pass (FSDP2 CPUOffloadPolicy; needs world_size >= 2)",
    )
    offload_optimizer: bool = Field(
        False, description="AdamW's moments on the host between optimizer steps (in for each step)"
    )
    offload_reference: bool = Field(
        False,
        description="the frozen reference's shards on the host, streamed in for its pass (world_size >= 2)",
    )
    offload_during_rollout: bool = Field(
        True,
        description="colocated engines: while a rank's engine generates, its actor's weights, gradients "
        "and AdamW moments and the reference model wait in host memory, and the KV cache is sized without "
        "them (services/trainer/hybrid.py); false keeps them on the device",
    )
    freeze_vision: bool = False
    micro_batch_tokens: int = Field(8192, gt=0, description="token budget of one micro-batch")
    padding_free: bool = Field(
        False,
        description="pack each micro-batch's sequences into one row of real tokens, attention kept "
        "within each sequence (micro_batch_tokens then counts real tokens; docs/training.md)",
    )
    lora: LoraConfig | None = Field(
        None, description="train LoRA adapters on a frozen base instead of every weight (null: full tuning)"
    )
    ulysses_size: Literal[1, 2, 4, 8] = Field(
        1,
        description="ranks that split each packed row's tokens, swapping sequence for heads around "
        "attention (Ulysses sequence parallelism; needs padding_free, divides world_size; the data-"
        "parallel world is world_size / ulysses_size; docs/training.md)",
    )
    # 1,024 rows × Qwen's 152,064-token vocabulary × 4 B ≈ 0.62 GB of fp32 logits a chunk (forward and
    # backward hold about two such buffers at a time), against ≈ 10 GB for 16,384 response tokens at
    # once; a chunk's head matmul is still a large one (2 × 1,024 × 3,584 × 152,064 ≈ 1.1·10¹² FLOPs at
    # 7B's hidden size; its GPU speed not measured here). docs/training.md, "Memory of the log-probs".
    logprob_chunk_tokens: int | None = Field(
        1024,
        gt=0,
        description="response tokens whose fp32 logits exist at once when scoring (null: all of a "
        "micro-batch's, the full [tokens, vocab] logits)",
    )
    mini_batches: int = Field(1, ge=1, description="optimizer updates per step (PPO mini-batches)")
    ppo_epochs: int = Field(1, ge=1)
    entropy_coef: float = Field(0.0, ge=0, description="entropy bonus (exploration)")
    optim: OptimConfig = Field(default_factory=OptimConfig)

    @model_validator(mode="before")
    @classmethod
    def _dtype_alias(cls, data: Any) -> Any:
        """``actor.dtype`` (before the split) named the dtype the model was loaded AND stepped in. It is
        read as the compute dtype only: an old ``dtype: bfloat16`` recipe now trains an fp32 master
        with bf16 forwards instead of silently stepping bf16 weights."""
        if not isinstance(data, dict) or data.get("dtype") is None:
            return data
        data = dict(data)
        alias = data.pop("dtype")
        compute = data.get("compute_dtype")
        if compute is not None and compute != alias:
            raise ValueError(
                f"actor.dtype={alias} (deprecated) contradicts actor.compute_dtype={compute}: drop actor.dtype"
            )
        data["compute_dtype"] = alias
        logging.getLogger(__name__).warning(
            "actor.dtype is deprecated: read as actor.compute_dtype=%s (master weights and optimizer in "
            "actor.param_dtype=%s)", alias, data.get("param_dtype", "float32"),
        )  # fmt: skip
        return data

    @model_validator(mode="after")
    def _offload_needs_fsdp(self) -> ActorConfig:
        host = [k for k in ("offload_params", "offload_reference") if getattr(self, k)]
        if host and self.world_size < 2:
            raise ValueError(
                f"actor.{host[0]} streams FSDP units from the host, which needs actor.world_size >= 2; on one "
                "rank use actor.offload_optimizer (AdamW's moments on the host) or more ranks"
            )
        return self

    @model_validator(mode="after")
    def _fsdp_groups(self) -> ActorConfig:
        if self.fsdp_size is not None and self.world_size % self.fsdp_size:
            raise ValueError(
                f"actor.fsdp_size={self.fsdp_size} must divide actor.world_size={self.world_size} (ranks "
                "per sharding group, e.g. the GPUs of one node); null shards over all ranks"
            )
        return self

    @model_validator(mode="after")
    def _sequence_parallel(self) -> ActorConfig:
        # the model's head counts are checked at load (services/trainer/ulysses.py, check_model)
        u = self.ulysses_size
        if u > 1 and self.world_size % u:
            raise ValueError(
                f"actor.ulysses_size={u} must divide actor.world_size={self.world_size}: each group of {u} "
                f"ranks splits its sequences (set world_size to a multiple of {u}, or a smaller ulysses_size)"
            )
        if u > 1 and not self.padding_free:
            raise ValueError(f"actor.ulysses_size={u} splits packed rows: set actor.padding_free: true")
        return self

    @model_validator(mode="after")
    def _qlora_one_rank(self) -> ActorConfig:
        problem = qlora_ranks_problem(self.lora, self.world_size)
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _master_precision(self) -> ActorConfig:
        if self.param_dtype != "float32" and not self.allow_low_precision_master:
            raise ValueError(
                f"actor.param_dtype={self.param_dtype}: AdamW would step {self.param_dtype} weights, where "
                "most updates at lr ~1e-6 round to nothing; keep param_dtype=float32 (set compute_dtype="
                "bfloat16 for bf16 forwards) or set actor.allow_low_precision_master=true"
            )
        return self


class TrainRolloutConfig(RolloutConfig):
    """``rollout``: the rollout engine's config plus what only training asks of it."""

    greedy_baseline: bool = Field(False, description="also generate a greedy response per prompt (ReMax)")
    val_temperature: float = Field(0.0, ge=0, description="validation sampling (0: greedy)")
    val_max_tokens: int | None = Field(None, gt=0, description="null: max_tokens")
    weight_bucket_mb: float | None = Field(
        512.0,
        gt=0,
        description="weight pushes in buckets of this many MiB, never a full state dict in one process "
        "(null: one full state dict, as before; docs/rollout.md, 'Weight sync')",
    )
    weight_transport: Literal["broadcast", "object_store"] | None = Field(
        None,
        description="how buckets reach disaggregated engines: broadcast (a weight group from the actor's "
        "rank 0 to every engine worker: gloo on the CPU, NCCL between GPUs) or object_store (Ray object "
        "references each engine pulls; ~9x slower on the CPU, docs/benchmarks.md). null: broadcast where "
        "the ranks run on the CPU, object_store on GPUs until the NCCL group has run on one (docs/rollout.md)",
    )
    weight_group_timeout_s: float | None = Field(
        None,
        gt=0,
        description="how long a member of the weight group waits for the others before the push fails; "
        "below rollout.engine_timeout_s (null: 600 s, or half of engine_timeout_s when that is less)",
    )

    @model_validator(mode="after")
    def _group_timeout(self) -> TrainRolloutConfig:
        # an engine still waiting on the group past the fleet's limit would count as lost with the rest
        limit = self.engine_timeout_s
        if self.weight_group_timeout_s is None:
            self.weight_group_timeout_s = 600.0 if limit is None else min(600.0, limit / 2)
        elif limit is not None and self.weight_group_timeout_s >= limit:
            raise ValueError(
                f"rollout.weight_group_timeout_s ({self.weight_group_timeout_s:g}) must be below "
                f"rollout.engine_timeout_s ({limit:g}): an engine waiting on the weight group would count "
                "as failed"
            )
        return self


class MixConfig(_Section):
    """``mix``: how the offline slot of a mixed group is learned from.

    ``likelihood``: the advantage-weighted log-likelihood (ratio exp(logp - sg(logp))), which learns
    from random weights; ``luffy``: LUFFY's shaped term (needs ``algorithm.policy_loss: luffy``), whose
    gradient vanishes when the offline tokens are unlikely (FINDINGS.md); ``schedule``: likelihood for
    ``switch_step`` steps, then LUFFY.

    ``offline_weight`` multiplies the offline responses' advantages in the policy loss. At 1 an offline
    answer counts as one response of the group (LUFFY), so from random weights its likelihood is learned
    at ~1/n of a supervised step's strength; a larger weight speeds the cold start, and the term still
    fades by itself as the sampled answers become right (the offline advantage shrinks with the group's
    mean reward).
    """

    offline_term: Literal["likelihood", "luffy", "schedule"] = "likelihood"
    switch_step: int = Field(0, ge=0)
    offline_weight: float = Field(1.0, gt=0)


class WarmupConfig(_Section):
    """``warmup``: supervised steps on ``offline_output`` before RL (e.g. a format warm start whose
    offline answers are uniformly random letters: the format is learned, the answer is not)."""

    files: list[str] = Field(default_factory=list)
    steps: int = Field(0, ge=0)
    lr: float = Field(3e-4, gt=0)
    batch_size: int = Field(16, ge=1)


class RolloutLogConfig(_Section):
    """``trainer.rollout_log``: every ``every``-th step, the first ``max_groups`` groups of its batch (prompt,
    clips, answer, each response with its rewards and advantage) to ``OUTPUT_DIR/rollouts/step_NNNNNN.jsonl``
    and the trackers (``services/trainer/rollout_log.py``; docs/training.md, "Looking at rollouts")."""

    every: int = Field(0, ge=0, description="write the rollouts of every N-th step (0: never)")
    max_groups: int = Field(4, ge=1, description="groups written per step: the first of the step's batch")


class TrainerConfig(_Section):
    """``trainer``: the loop, its outputs and checkpoints."""

    total_steps: int = Field(100, ge=0)
    output_dir: str = "outputs/run"
    experiment_name: str = "reelrl"
    seed: int = 0
    val_freq: int = Field(0, ge=0, description="validate every N steps (0: only before and after)")
    val_before_train: bool = True
    val_limit: int | None = Field(None, gt=0, description="validate on at most this many samples")
    save_freq: int = Field(0, ge=0, description="checkpoint every N steps (0: only at the end)")
    max_keep: int = Field(2, ge=1, description="checkpoints kept (oldest removed)")
    resume: str = Field("auto", description="auto | none | PATH of a checkpoint folder")
    loggers: list[Literal["console", "jsonl", "db", "tensorboard", "wandb", "mlflow"]] = Field(
        default_factory=lambda: ["console", "jsonl", "db"]
    )
    wandb: WandbConfig = Field(default_factory=WandbConfig, description="with loggers: wandb")
    mlflow: MlflowConfig = Field(default_factory=MlflowConfig, description="with loggers: mlflow")
    rollout_log: RolloutLogConfig = Field(
        default_factory=RolloutLogConfig,
        description="sampled groups of every N-th step, to read (off by default)",
    )
    torch_threads: int | None = Field(
        None,
        gt=0,
        description="intra-op threads of each actor process (null: a CPU Ray rank's share of its node, a GPU "
        "rank's ray_group.cpus_per_rank)",
    )
    ray_address: str | None = Field(None, description="null: RAY_ADDRESS or a local Ray")
    use_ray: bool = Field(False, description="run the actor ranks as Ray actors (placement group, FSDP)")
    rollout_on_ray: bool = Field(
        True,
        description="with use_ray: the vLLM engine as a Ray actor in its own placement group (false: in the driver)",
    )
    ray_cpus_rollout: float = Field(1.0, gt=0, description="CPUs Ray reserves for the rollout engine")
    ray_gpus_rollout: float | None = Field(
        None,
        ge=0,
        description="GPUs for the rollout engine (null: tensor_parallel_size when the cluster has GPUs)",
    )
    off_policy_steps: Literal[0, 1] = Field(
        0,
        description="1: the engines generate the next step's batch during the update, with the weights "
        "before it; the importance ratio then uses vLLM's log-probs of the sampled tokens (docs/algorithms.md, "
        "'One step off-policy'). 0: every batch is generated by the weights it trains",
    )


class RayGroupConfig(_Section):
    """``ray_group``: the actor ranks as Ray actors (``trainer.use_ray``), a STRICT_PACK placement group
    per node (``services.trainer.ray_placement``)."""

    cpus_per_rank: float | None = Field(
        None,
        gt=0,
        description="CPUs Ray reserves for each actor rank; a GPU rank prepares its engine's video inputs "
        "with as many threads (null: 0.5 on a CPU-only cluster; with GPUs the CPUs per GPU of the "
        "poorest GPU node, at most 4)",
    )


class TrainConfig(_Section):
    data: DataConfig
    actor: ActorConfig
    rollout: TrainRolloutConfig = Field(default_factory=TrainRolloutConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    mix: MixConfig = Field(default_factory=MixConfig)
    warmup: WarmupConfig = Field(default_factory=WarmupConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    ray_group: RayGroupConfig = Field(default_factory=RayGroupConfig)

    @model_validator(mode="before")
    @classmethod
    def _ray_cpus_alias(cls, data: Any) -> Any:
        """``trainer.ray_cpus_per_rank``, the key before ``ray_group`` (every earlier run's config.yaml
        holds it), is read as ``ray_group.cpus_per_rank``."""
        trainer = data.get("trainer") if isinstance(data, dict) else None
        if not isinstance(trainer, dict) or "ray_cpus_per_rank" not in trainer:
            return data
        trainer = dict(trainer)
        alias = trainer.pop("ray_cpus_per_rank")
        group = dict(data.get("ray_group") or {})
        if group.get("cpus_per_rank") not in (None, alias):
            raise ValueError(
                f"trainer.ray_cpus_per_rank={alias} (deprecated) contradicts ray_group.cpus_per_rank="
                f"{group['cpus_per_rank']}: drop trainer.ray_cpus_per_rank"
            )
        group["cpus_per_rank"] = alias
        logging.getLogger(__name__).warning(
            "trainer.ray_cpus_per_rank is deprecated: read as ray_group.cpus_per_rank=%s", alias
        )
        return {**data, "trainer": trainer, "ray_group": group}

    @model_validator(mode="after")
    def _cross_checks(self) -> TrainConfig:
        problems = []
        if self.mix.offline_term in ("luffy", "schedule") and self.algorithm.policy_loss.value != "luffy":
            problems.append(
                f"mix.offline_term={self.mix.offline_term} uses LUFFY's shaping: set algorithm.policy_loss=luffy "
                "(or mix.offline_term=likelihood)"
            )
        if self.mix.offline_term == "likelihood" and self.algorithm.policy_loss.value == "luffy":
            problems.append(
                "algorithm.policy_loss=luffy with mix.offline_term=likelihood would never shape: set "
                "mix.offline_term=luffy or schedule, or algorithm.policy_loss=ppo"
            )
        if self.warmup.steps and not self.warmup.files:
            problems.append("warmup.steps > 0 needs warmup.files (samples with offline_output)")
        if self.warmup.steps and self.warmup.batch_size < self.actor.world_size:
            problems.append(
                f"warmup.batch_size={self.warmup.batch_size} gives some of the actor.world_size="
                f"{self.actor.world_size} ranks nothing to learn from; raise it"
            )
        if self.actor.lora is not None and self.warmup.steps and self.algorithm.needs_reference_model:
            # LoRA's reference is the base with the adapters bypassed, not the warmed adapters
            problems.append(
                "actor.lora with warmup.steps and KL (algorithm.kl.mode): KL would anchor to the base model, "
                "not the warm-started one; drop the warm start or KL, or train without actor.lora"
            )
        room = self.rollout.engine.max_model_len - self.rollout.max_tokens
        if self.data.max_prompt_tokens > room:
            problems.append(
                f"data.max_prompt_tokens={self.data.max_prompt_tokens} + rollout.max_tokens="
                f"{self.rollout.max_tokens} exceed rollout.engine.max_model_len="
                f"{self.rollout.engine.max_model_len}: a kept prompt could not be answered in full; "
                f"lower data.max_prompt_tokens to {room} or raise max_model_len"
            )
        problems += fleet_problems(self)
        problems += off_policy_problems(self)
        problems += rollout_correction_problems(self)
        slots = self.actor.world_size // self.actor.ulysses_size  # a sequence-parallel group is one
        if self.data.batch_size % slots and slots > 1:
            ranks = f"actor.world_size={self.actor.world_size} ranks"
            if self.actor.ulysses_size > 1:
                ranks = f"{slots} data-parallel groups (actor.world_size={self.actor.world_size} / ulysses_size={self.actor.ulysses_size})"
            problems.append(f"data.batch_size={self.data.batch_size} must divide among {ranks}")
        if problems:
            raise ValueError("; ".join(problems))
        validate_algorithm(
            self.algorithm,
            rollout_n=self.rollout.n,
            has_offline_data=self.rollout.mix_policy,
            has_greedy_baseline=self.rollout.greedy_baseline,
            max_response_length=self.rollout.max_tokens,
        )
        return self

    def effective_rollout(self) -> RolloutConfig:
        """The engine's config: data's image budgets (when set) wired into the rollout."""
        values = self.rollout.model_dump(
            exclude={
                "greedy_baseline",
                "val_temperature",
                "val_max_tokens",
                "weight_bucket_mb",
                "weight_transport",
                "weight_group_timeout_s",
            }
        )
        if self.data.image_min_pixels is not None:
            values["image_min_pixels"] = self.data.image_min_pixels
        if self.data.image_max_pixels is not None:
            values["image_max_pixels"] = self.data.image_max_pixels
        return RolloutConfig.model_validate(values)


def fleet_problems(config: TrainConfig) -> list[str]:
    """Everything statically wrong with the rollout fleet's settings (the hardware is checked at start,
    ``services.trainer.placement``)."""
    rollout, trainer, world = config.rollout, config.trainer, config.actor.world_size
    tp = rollout.engine.tensor_parallel_size
    problems: list[str] = []
    if rollout.placement == "colocated":
        if world % tp:
            problems.append(
                f"rollout.placement=colocated puts one engine on every rollout.engine.tensor_parallel_size="
                f"{tp} actor ranks: actor.world_size={world} must be a multiple of it"
            )
        elif rollout.engines is not None and rollout.engines != world // tp:
            problems.append(
                f"rollout.engines={rollout.engines} contradicts rollout.placement=colocated, where it follows "
                f"from actor.world_size / tensor_parallel_size = {world} / {tp} = {world // tp}: drop "
                "rollout.engines"
            )
        if not trainer.use_ray and world > 1:
            problems.append(
                f"rollout.placement=colocated with actor.world_size={world} hosts the engines inside the actor "
                "ranks, which run as Ray actors: set trainer.use_ray=true (one rank may run without Ray: its "
                "engine then lives in the trainer's own process)"
            )
        if rollout.engine.enable_sleep_mode is False:
            problems.append(
                "rollout.placement=colocated with rollout.engine.enable_sleep_mode=false: the engines would "
                "keep their weights and KV cache on the actor's GPUs through the update; set "
                "rollout.engine.enable_sleep_mode: true (or leave it null)"
            )
        if rollout.engine.in_process is not None:
            problems.append(
                "rollout.engine.in_process does not apply to rollout.placement=colocated: a colocated shard "
                "always runs in its actor rank's process; drop rollout.engine.in_process"
            )
    if rollout.engine.in_process and rollout.placement == "driver" and (rollout.engines or 1) > 1:
        problems.append(
            f"rollout.engine.in_process=true with rollout.engines={rollout.engines}: engines in one process "
            "generate one at a time (one interpreter), so a fleet gains nothing; drop "
            "rollout.engine.in_process (a fleet's engines run in processes of their own)"
        )
    engine = rollout.engine
    placed = rollout.placement in ("driver", "disaggregated")
    if placed and engine.sleep_level and sleep_level(engine, rollout.placement) is None:
        problems.append(
            f"rollout.engine.sleep_level={engine.sleep_level} with rollout.placement={rollout.placement}: "
            "engines there sleep only with rollout.engine.enable_sleep_mode: true; set it, or drop sleep_level"
        )
    if rollout.placement == "colocated" and trainer.off_policy_steps:
        problems.append(
            "trainer.off_policy_steps=1 generates during the update, but colocated engines sleep through it "
            "on the actor's GPUs: use rollout.placement=disaggregated (engines on GPUs of their own) or "
            "off_policy_steps=0"
        )
    if rollout.placement == "disaggregated":
        if not trainer.use_ray:
            problems.append(
                "rollout.placement=disaggregated runs the engines as Ray actors: set trainer.use_ray=true "
                "(or rollout.placement=driver for engines in this process)"
            )
        if "rollout_on_ray" in trainer.model_fields_set and not trainer.rollout_on_ray:
            problems.append(
                "trainer.rollout_on_ray=false (the engine in the driver) contradicts "
                "rollout.placement=disaggregated (engines as Ray actors): drop one of them"
            )
    return problems


def off_policy_problems(config: TrainConfig) -> list[str]:
    """What ``trainer.off_policy_steps: 1`` cannot work with. Its ratio divides by vLLM's log-probs, so
    they must be of the distribution the actor's forward computes: log-softmax of logits / temperature
    over the whole vocabulary."""
    if not config.trainer.off_policy_steps:
        return []
    rollout, problems = config.rollout, []
    if rollout.engine.enable_sleep_mode:
        problems.append(
            "trainer.off_policy_steps=1 generates during the update: rollout.engine.enable_sleep_mode would "
            "put the engines to sleep under it; set it to false"
        )
    if rollout.greedy_baseline or config.algorithm.advantage_estimator.value == "remax":
        problems.append(
            "trainer.off_policy_steps=1 does not take ReMax's greedy baseline (it would generate on the "
            "engines while they work on the next batch): choose another algorithm.advantage_estimator"
        )
    return problems + behaviour_logprob_problems(config, "trainer.off_policy_steps=1")


def rollout_correction_problems(config: TrainConfig) -> list[str]:
    """What ``algorithm.rollout_correction.enabled`` cannot work with: its ratio divides by the engine's
    log-probs, which must be of the distribution the actor's forward computes."""
    if not config.algorithm.rollout_correction.enabled:
        return []
    problems = behaviour_logprob_problems(config, "algorithm.rollout_correction.enabled")
    if config.trainer.off_policy_steps:
        problems.append(
            "algorithm.rollout_correction.enabled with trainer.off_policy_steps=1: a lagging batch's ratio "
            "already divides by the engine's log-probs (its old log-probs are vLLM's), so the correction "
            "would weigh by 1; turn one of them off"
        )
    return problems


def behaviour_logprob_problems(config: TrainConfig, what: str) -> list[str]:
    """Why the engine's log-probs are not the actor's distribution (log-softmax of logits /
    temperature over the whole vocabulary), for ``what``, which divides by them."""
    rollout, problems = config.rollout, []
    temperature = rollout.temperature or 1.0
    if rollout.engine.logprobs_mode == "raw_logprobs" and temperature != 1.0:
        problems.append(
            f"{what} at rollout.temperature={rollout.temperature:g}: raw_logprobs are "
            "at temperature 1, the actor's at the sampling temperature; set "
            "rollout.engine.logprobs_mode=processed_logprobs (or temperature 1)"
        )
    if rollout.engine.logprobs_mode == "processed_logprobs" and (rollout.top_p < 1.0 or rollout.top_k):
        problems.append(
            f"{what} with processed_logprobs and top_p/top_k: those log-probs are "
            "renormalised over the kept tokens, the actor's over the whole vocabulary; set top_p=1 and "
            "top_k=null, or logprobs_mode=raw_logprobs with temperature 1"
        )
    return problems


def behaviour_logprobs_comparable(config: TrainConfig) -> bool:
    """The engine's log-probs are of the actor's distribution: its mismatch metrics mean something."""
    return not behaviour_logprob_problems(config, "")


def confined_reward(reward: RewardConfig) -> RewardConfig:
    """A job's reward functions resolved inside the operator's ``REELRL_PLUGIN_ROOTS`` (a job runs code
    on the server: only code the operator put there), and its judge one of the operator's
    ``REELRL_JUDGE_URLS`` with a token from one of ``REELRL_JUDGE_KEY_ENVS`` (a job must not make the
    worker send answers, or a secret it holds, anywhere else); a ValueError naming the key otherwise."""
    from services.common.settings import get_settings

    settings = get_settings()
    judge = reward.judge
    if judge is not None:
        if judge.url.rstrip("/") not in settings.judge_urls:
            raise ValueError(
                f"reward.judge.url={judge.url}: not a judge endpoint this service allows; the operator lists "
                f"them in REELRL_JUDGE_URLS (now: {settings.judge_urls or 'unset, so a job may name none'})"
            )
        if judge.api_key_env is not None and judge.api_key_env not in settings.judge_key_envs:
            raise ValueError(
                f"reward.judge.api_key_env={judge.api_key_env}: not a variable a job may send to its judge; "
                f"the operator lists them in REELRL_JUDGE_KEY_ENVS (now: {settings.judge_key_envs or 'unset'})"
            )
    if not any(f.path for f in reward.functions):
        return reward
    from services.reward.functions import confine_all

    functions = confine_all(reward.functions, settings.plugin_roots, "reward.functions")
    return reward.model_copy(update={"functions": functions})


class TrainJobConfig(TrainConfig):
    """A training config submitted as a job over the API. A job names files on the server, so every
    path it reads or writes must lie inside ``REELRL_DATA_ROOTS`` (none is accepted without roots);
    relative paths are taken under the first root and stored resolved."""

    @model_validator(mode="after")
    def _inside_data_roots(self) -> TrainJobConfig:
        from services.common.data_roots import inside_roots, job_roots

        roots = job_roots()

        def inside(value: str, key: str) -> str:
            try:
                return str(inside_roots(value, roots))
            except ValueError as exc:
                raise ValueError(f"{key}={exc}") from None

        data = self.data
        data.train_files = [inside(f, "data.train_files") for f in data.train_files]
        data.val_files = [inside(f, "data.val_files") for f in data.val_files]
        self.warmup.files = [inside(f, "warmup.files") for f in self.warmup.files]
        self.actor.model_path = inside(self.actor.model_path, "actor.model_path")
        # A job's model is a folder on the server (a hub id resolves under a root, to nothing there):
        # refused now rather than by the worker, with Hugging Face's "Repo id must be …".
        if not (Path(self.actor.model_path) / "config.json").is_file():
            raise ValueError(
                f"actor.model_path={self.actor.model_path}: no model there (no config.json); a job names "
                "a checkpoint folder inside the data roots (download hub models into one first)"
            )
        self.trainer.output_dir = inside(self.trainer.output_dir, "trainer.output_dir")
        from services.common.outputs import OutputTaken, check_run_folder
        from services.trainer.checkpoints import RUN_MARKER

        try:
            check_run_folder(Path(self.trainer.output_dir), RUN_MARKER, "training")
        except OutputTaken as exc:
            raise ValueError(f"trainer.output_dir={exc}") from None
        if self.trainer.resume not in ("auto", "none"):
            self.trainer.resume = inside(self.trainer.resume, "trainer.resume")
        self.reward = confined_reward(self.reward)  # reward functions and the judge: the operator's only
        from services.common.job_bounds import check_train_job_bounds
        from services.common.jobs import JobSettings

        # on the resolved paths: one file named two ways is listed twice
        check_train_job_bounds(self, JobSettings())
        return self


class ConfigError(ValueError):
    """A config that cannot run; the message names every offending key by its full path."""


def _format_errors(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            lines.append(f"unknown key {key!r}")
        else:
            lines.append(f"{key or 'config'}: {err['msg']}")
    return "; ".join(lines)


def parse_config(data: dict[str, Any]) -> TrainConfig:
    from services.common.config_files import check_finite_fields

    try:
        config = TrainConfig.model_validate(data)
        check_finite_fields(config)  # "inf" or "1e400" (YAML's string) read as a float
        return config
    except ValidationError as exc:
        raise ConfigError(f"invalid training config: {_format_errors(exc)}") from None


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> TrainConfig:
    """A YAML file (optional) with ``a.b.c=value`` overrides applied on top, validated."""
    from services.common.config_files import ConfigFileError, merge_overrides, read_yaml_mapping

    try:
        base = read_yaml_mapping(path) if path is not None else {}
        data = merge_overrides(base, overrides, "trainer.total_steps=10")
    except ConfigFileError as exc:
        raise ConfigError(str(exc)) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config is a mapping of sections (data, actor, ...)")
    return parse_config(data)


def dump_config(config: TrainConfig) -> str:
    """The resolved tree as YAML (every default filled in): what ``--print-config`` shows and each
    run writes to ``config.yaml``."""
    import yaml

    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
