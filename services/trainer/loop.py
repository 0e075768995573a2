"""The RL loop, top to bottom (SPEC §5): batch of samples (clip keys only) → vLLM rollouts (groups of n,
mixed with offline trajectories) → rewards by problem type → old (and reference) log-probs from the
actor → advantages → actor update → weight push into the rollout engine → metrics → validation and
checkpoints. :class:`Trainer` reads as its named setup steps and one visible loop in :meth:`fit`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from services.common.frames import FrameStore
from services.common.jobs import JobCancelled
from services.common.trackers import require as require_trackers
from services.reward import RewardResult, make_reward_client
from services.reward.client import RewardServiceError
from services.rollout.samples import RolloutGroup, continued_response
from services.rollout.seeds import SeedKey
from services.rollout.sources import ImageFiles, RealtimeSource, WithImages
from services.trainer import checkpoints as ckpt
from services.trainer import lora
from services.trainer.ahead import BatchSchedule, behaviour_log_probs, load_pending, save_pending
from services.trainer.algorithms import (
    KLMode,
    compute_advantages,
    dynamic_sampling_keep,
    make_kl_controller,
    outcome_token_rewards,
    overlong_penalty,
)
from services.trainer.algorithms.kl import apply_kl_reward_penalty, kl_penalty
from services.trainer.batch import pad_rows
from services.trainer.config import TrainConfig, dump_config
from services.trainer.data import DataError, StatefulLoader, TrainSample, prepare_splits
from services.trainer.group import LocalActorGroup
from services.trainer.rollout_log import RolloutLog
from services.trainer.tracking import MetricsLogger
from services.trainer.update import SequenceTargets

log = logging.getLogger(__name__)


class RewardStepError(RuntimeError):
    """The reward service failed for a whole step (after its retries): never trained on as zeros."""


class Timer:
    """``with timer("gen"): ...`` accumulates seconds per phase into ``timing/<phase>_s``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - started

    def metrics(self) -> dict[str, float]:
        out = {f"timing/{k}_s": v for k, v in self.seconds.items()}
        out["timing/step_s"] = sum(self.seconds.values())
        return out


@dataclass
class Hooks:
    """How a job runner watches and steers a run: called after every step; ``stop`` polled per step,
    and during setup between its phases and inside data preparation, where it ends the run at once
    (JobCancelled: nothing to checkpoint yet)."""

    on_step: list[Callable[[int, dict[str, float]], None]] = field(default_factory=list)
    stop: Callable[[], bool] = lambda: False
    on_progress: Callable[[int, int], None] | None = None


@dataclass
class Scored:
    """Rewards of a step's responses, flattened in (sample, response) order."""

    overall: list[float]
    accuracy: list[float]
    format: list[float]
    # the named parts of a reward mix (``reward.functions``): name -> one value per response
    parts: dict[str, list[float]] = field(default_factory=dict)
    # per response, why the reward library could not score it (None: scored)
    item_errors: list[str | None] = field(default_factory=list)

    @property
    def errors(self) -> int:
        """Responses the reward library could not score (wholly, or a part of their mix)."""
        return sum(error is not None for error in self.item_errors)


@dataclass
class RunResult:
    output_dir: Path
    steps: int
    stopped: bool
    last_val: dict[str, float]
    checkpoint: Path | None


def reward_item(sample: TrainSample, response: Any) -> tuple[Any, str]:
    """What the reward library scores for one response: the sample's reward spec and the answer as the
    model gave it, i.e. the response after the sample's assistant prefix (a prompt ending in "Best
    option:(" leaves the letter's context in the prefix). Every scoring path (training groups,
    validation, ReMax's greedy baseline) goes through here."""
    return sample.reward, continued_response(sample.rollout.assistant_prefix, response.text)


def score_groups(
    client: Any, step: int, samples: Sequence[TrainSample], groups: Sequence[RolloutGroup]
) -> Scored:
    """Every response scored by the reward library (in-process or the HTTP service, per config). A
    service that stays down after its client's retries fails the step by name: training on zeros
    instead would teach the model nothing while looking like a run. An item the library cannot score
    scores 0, is counted (``reward/errors``) and logged."""
    items = [reward_item(s, r) for s, g in zip(samples, groups, strict=True) for r in g.responses]
    try:
        results: list[RewardResult] = client.score_batch(items)
    except (RewardServiceError, OSError) as exc:
        raise RewardStepError(f"step {step}: the reward service failed after its retries: {exc}") from exc
    item_errors = [r.error for r in results]
    for message in [e for e in item_errors if e][:3]:
        log.warning(
            "step %d: an item, or a part of its reward mix, could not be scored (0): %s", step, message
        )
    names = sorted({name for r in results for name in r.parts or {}})
    return Scored(
        overall=[r.overall for r in results],
        accuracy=[r.accuracy for r in results],
        format=[r.format for r in results],
        # a part missing from an item (it failed before that part was scored) counts 0, as in its overall
        parts={name: [(r.parts or {}).get(name, 0.0) for r in results] for name in names},
        item_errors=item_errors,
    )


def step_advantages(
    algo: Any,
    groups: Sequence[RolloutGroup],
    scored: Scored,
    old: Sequence[torch.Tensor] | None,
    ref: Sequence[torch.Tensor] | None,
    kl_coef: float,
    baseline: torch.Tensor | None = None,
) -> tuple[list[torch.Tensor], dict[str, float]]:
    """Token-level advantages per response (in (sample, response) order) from the estimator named in
    ``algo`` (an AlgorithmConfig): the outcome reward plus DAPO's overlong penalty when enabled, and,
    with KL in the reward, the per-token penalty whose penalised return reaches every estimator."""
    lengths = [len(r.token_ids) for g in groups for r in g.responses]
    width = max(lengths)
    mask = pad_rows([[1.0] * n for n in lengths], width)
    scores = torch.tensor(scored.overall, dtype=torch.float32)
    metrics: dict[str, float] = {}
    overlong = algo.overlong_penalty
    if overlong.enabled:
        penalty = overlong_penalty(
            torch.tensor(lengths, dtype=torch.float32), max_length=overlong.max_length,
            buffer_length=overlong.buffer_length, factor=overlong.factor,
        )  # fmt: skip
        metrics["reward/overlong_penalty"] = float(penalty.mean())
    # The penalty enters the token rewards (so the return of every estimator), not ``scores``: GDPO
    # reads its components from the scores and takes whatever the return adds as a penalty term.
    token_rewards = outcome_token_rewards(scores + penalty if overlong.enabled else scores, mask)
    if ref is not None:
        if old is None:
            raise ValueError("KL to the reference needs the old log-probs")
        old_t = pad_rows([o.tolist() for o in old], width)
        ref_t = pad_rows([r.tolist() for r in ref], width)
        kl_tokens = kl_penalty(old_t, ref_t, algo.kl.estimator) * mask
        metrics["actor/kl_ref"] = float(kl_tokens.sum() / mask.sum().clamp(min=1))
        if algo.kl.mode is KLMode.REWARD:
            token_rewards, kl_metrics = apply_kl_reward_penalty(
                token_rewards, old_t, ref_t, mask, coef=kl_coef, estimator=algo.kl.estimator
            )
            metrics.update({f"actor/{k}": v for k, v in kl_metrics.items()})
    group_ids = torch.tensor([i for i, g in enumerate(groups) for _ in g.responses])
    inputs: dict[str, Any] = {"group_ids": group_ids}
    if baseline is not None:
        inputs["baseline_scores"] = baseline
    if algo.advantage_estimator.value == "gdpo":
        inputs["reward_components"] = {
            "accuracy": torch.tensor(scored.accuracy),
            "format": torch.tensor(scored.format),
            **{name: torch.tensor(values) for name, values in scored.parts.items()},
        }
    advantages = compute_advantages(
        algo.advantage_estimator, scores=scores, token_rewards=token_rewards, response_mask=mask,
        **inputs, **algo.advantage_params(),
    )  # fmt: skip
    metrics["actor/advantage_mean"] = float((advantages * mask).sum() / mask.sum().clamp(min=1))
    metrics["actor/advantage_abs_mean"] = float((advantages.abs() * mask).sum() / mask.sum().clamp(min=1))
    nonzero = [bool((advantages[group_ids == i].abs() > 1e-8).any()) for i in range(len(groups))]
    metrics["actor/groups_with_signal"] = sum(nonzero) / max(len(nonzero), 1)
    return [advantages[i, :n] for i, n in enumerate(lengths)], metrics


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


class Trainer:
    def __init__(self, config: TrainConfig, *, hooks: Hooks | None = None, job_id: str | None = None) -> None:
        self.config = config
        self.hooks = hooks or Hooks()
        self.job_id = job_id
        self.output_dir = Path(config.trainer.output_dir)
        # each step's batch, generated at its start or during the previous update (trainer.off_policy_steps)
        self.batches = BatchSchedule(
            self.generate,
            off_policy_steps=config.trainer.off_policy_steps,
            last_step=config.trainer.total_steps,
        )

    # ------------------------------------------------------------------ setup (named steps) -----------

    def setup(self) -> None:
        cfg = self.config
        if cfg.trainer.torch_threads:
            torch.set_num_threads(cfg.trainer.torch_threads)
        seed_everything(cfg.trainer.seed)
        require_trackers(cfg.trainer.loggers)  # before minutes of setup, not after
        self._lock = ckpt.lock_output_dir(self.output_dir)  # refuses a folder no run made
        self.resume_from = ckpt.resolve_resume(self.output_dir, cfg.trainer.resume)
        if self.resume_from is not None:  # before config.yaml records a model the run would not train
            ckpt.check_resume_model(self.resume_from, cfg.actor.model_path)
            ckpt.check_resume_lora(self.resume_from, lora.run_identity(self.config.actor))
        (self.output_dir / "config.yaml").write_text(dump_config(cfg))
        # a checkpoint's model/, or with actor.lora the base and the checkpoint's adapter/
        model_path, self.adapter_path = ckpt.start_weights(
            self.resume_from, cfg.actor.model_path, lora=cfg.actor.lora is not None
        )
        # KL's anchor: the run's model, or the warm-started weights its checkpoint names when resuming
        self.reference_path: str | None = None
        if self.resume_from is not None and cfg.algorithm.needs_reference_model:
            self.reference_path = ckpt.reference_source(
                self.resume_from, ckpt.read_state(self.resume_from), warm_started=cfg.warmup.steps > 0
            )
        self._stop_if_asked("data preparation")
        self._setup_data(model_path)
        self._stop_if_asked("actor start")
        self._setup_models(model_path)
        self._stop_if_asked("engine start")
        self._setup_rollout(model_path)
        self._stop_if_asked("setup")
        from services.common.observability import serve_trainer_metrics

        prometheus = serve_trainer_metrics()  # on REELRL_METRICS_PORT, when set
        self.logger = MetricsLogger(
            self.output_dir,
            name=cfg.trainer.experiment_name,
            config=cfg.model_dump(mode="json"),
            loggers=cfg.trainer.loggers,
            job_id=self.job_id,
            hooks=[*self.hooks.on_step, *([prometheus.observe_step] if prometheus else [])],
            wandb=cfg.trainer.wandb,
            mlflow=cfg.trainer.mlflow,
            # the tracker runs the checkpoint continues (None: a fresh start)
            resume=ckpt.read_state(self.resume_from).get("trackers", {}) if self.resume_from else None,
        )
        self.start_step = 0
        if self.resume_from is not None:
            self._load_checkpoint(self.resume_from)
        # Without a checkpoint nothing earlier counts (step 0's validation included); with one, the
        # steps after it are recomputed, and so are newer checkpoints of the history being replaced.
        self.logger.truncate_after(self.start_step if self.resume_from is not None else -1)
        self.rollout_log = RolloutLog(
            self.output_dir, cfg.trainer.rollout_log, store=self.store, tokenizer=self.checkpoint.tokenizer,
            sinks=[self.logger.log_rollouts],
        )  # fmt: skip
        self.rollout_log.discard_after(self.start_step)
        for step in ckpt.discard_after(self.output_dir, self.start_step):
            log.warning("removed checkpoint step %d: newer than the step this run resumes from", step)
        # the engine started from the checkpoint's files: where the actor computes something else (a
        # resumed LoRA run's adapters, QLoRA's NF4-rounded base), it gets the actor's weights first
        if self.adapter_path is not None or lora.rounds_the_base(cfg.actor.lora):
            self._push_weights()

    def _stop_if_asked(self, phase: str) -> None:
        if self.hooks.stop():
            raise JobCancelled(f"stopped during {phase}, before any training step")

    def _setup_data(self, model_path: str) -> None:
        from transformers import AutoTokenizer

        cfg = self.config
        from services.rollout.checkpoint import Checkpoint

        self.checkpoint = Checkpoint.load(model_path)
        family = self.checkpoint.family.name.value
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.store = FrameStore.from_settings()
        self.realtime = (
            RealtimeSource({}, self.store.decoders, self.store.threads)
            if cfg.data.source_mode == "realtime_only"
            else None
        )
        rollout = cfg.effective_rollout()
        self.images = ImageFiles(
            {}, factor=self.checkpoint.family.factor, min_pixels=rollout.image_min_pixels,
            max_pixels=rollout.image_max_pixels,
        )  # fmt: skip
        work = self.output_dir / "data"
        common = dict(
            cfg=cfg.data, family=family, tokenizer=tokenizer, store=self.store, work_dir=work,
            realtime=self.realtime, system_prompt=cfg.data.system_prompt, images=self.images,
            media_limits=rollout.engine.limit_mm_per_prompt,
            check_stop=lambda: self._stop_if_asked("data preparation"),
        )  # fmt: skip
        # the splits this run reads, prepared together: one worker pool decodes what any of them lacks
        splits = {"train": cfg.data.train_files}
        if cfg.data.val_files:
            splits["val"] = cfg.data.val_files
        if cfg.warmup.steps:
            splits["warmup"] = cfg.warmup.files
        prepared = prepare_splits(splits, **common)
        self.train_samples, self.train_report = prepared["train"]
        self.val_samples, self.val_report = prepared.get("val", ([], None))
        if cfg.trainer.val_limit is not None:
            self.val_samples = self.val_samples[: cfg.trainer.val_limit]
        self.warmup_samples = prepared["warmup"][0] if "warmup" in prepared else []
        lacking = [s.sample.id for s in self.warmup_samples if not s.sample.offline_output]
        if lacking:
            raise DataError(
                f"warm-up samples need an offline_output to learn from; {len(lacking)} have none, e.g. "
                f"{lacking[:5]}"
            )
        self.loader = StatefulLoader(
            len(self.train_samples), cfg.data.batch_size, seed=cfg.data.seed, shuffle=cfg.data.shuffle
        )
        report = self.train_report
        log.info(
            "data: %d train samples (%d dropped: %d undecodable, %d overlong, %d over the media limit), %d val",
            len(self.train_samples),
            report.dropped_decode + report.dropped_overlong + report.dropped_media,
            report.dropped_decode,
            report.dropped_overlong,
            report.dropped_media,
            len(self.val_samples),
        )

    @property
    def source(self) -> WithImages:
        """Where the engine and the actor read frames: the store (or, realtime_only, the decoder) and the
        run's still images."""
        return WithImages(self.realtime if self.realtime is not None else self.store, self.images)

    def _setup_models(self, model_path: str) -> None:
        cfg = self.config
        source = self.source
        if cfg.trainer.use_ray:
            from services.trainer.ray_group import RayActorGroup

            self.group = RayActorGroup(
                cfg, model_path, self.store.root, cfg.effective_rollout(), realtime=self.realtime,
                images=self.images, cpus_per_rank=cfg.ray_group.cpus_per_rank,
                reference_path=self.reference_path, adapter_path=self.adapter_path,
            )  # fmt: skip
        else:
            self.group = LocalActorGroup(
                cfg, model_path, source, cfg.effective_rollout(), reference_path=self.reference_path,
                adapter_path=self.adapter_path,
            )  # fmt: skip
        self.kl_controller = make_kl_controller(cfg.algorithm.kl)
        self.reward_client = make_reward_client(cfg.reward)

    def _setup_rollout(self, model_path: str) -> None:
        """The rollout fleet, per ``rollout.placement`` (``services.trainer.placement``): engines in this
        process (their workers are processes of their own), Ray actors in placement groups of their
        own, or shards inside the actor ranks; the loop drives it like one engine."""
        from services.trainer.placement import start_fleet

        self.engine = start_fleet(
            # the mix gate reads accuracy alone: a reward mix's functions and judge stay with the trainer
            self.config,
            model_path,
            source=self.source,
            reward_client=self.reward_client.builtin(),
            group=self.group,
        )

    # ------------------------------------------------------------------ the loop -----------------------

    def fit(self) -> RunResult:
        cfg = self.config.trainer
        try:
            self.setup()
        except BaseException:
            self.shutdown()
            raise
        stopped, last_val, saved, done = False, {}, None, self.start_step
        try:
            if self.start_step == 0 and self.config.warmup.steps:
                self._stop_if_asked("the warm start")
                self.warm_start()
            if self.start_step == 0 and cfg.val_before_train and self.val_samples:
                self._stop_if_asked("validation")
                last_val = self.validate()
                self.logger.log(0, last_val)
            self._stop_if_asked("setup")  # a cancel seen only now (setup was quick) trains nothing
            started, validating = time.perf_counter(), 0.0
            for step in range(self.start_step + 1, cfg.total_steps + 1):
                metrics = self.train_step(step)
                done = step
                last_step_val = step == cfg.total_steps or (cfg.val_freq and step % cfg.val_freq == 0)
                if last_step_val and self.val_samples:
                    last_val = self.validate(step)
                    metrics.update(last_val)
                    validating += last_val["perf/val_s"]
                # wall time of this process's training so far (validation included, setup not), and
                # the same without validation: what a comparison of training speed counts
                metrics["perf/elapsed_s"] = time.perf_counter() - started
                metrics["perf/train_s"] = metrics["perf/elapsed_s"] - validating
                self.logger.log(step, metrics, samples=self._batch_ids)
                self._console(step, metrics)
                if self.hooks.on_progress is not None:
                    self.hooks.on_progress(step, cfg.total_steps)
                stopped = self.hooks.stop()
                if step == cfg.total_steps or stopped or (cfg.save_freq and step % cfg.save_freq == 0):
                    saved = self.save(step)
                if stopped:
                    log.info("stop requested: saved step %d and stopped", step)
                    break
            self.logger.finish("stopped" if stopped else "finished")
        except JobCancelled:
            self.logger.finish("stopped")
            raise
        except BaseException as exc:
            self.logger.finish("failed", f"{type(exc).__name__}: {exc}")
            raise
        finally:
            self.shutdown()
        return RunResult(self.output_dir, done, stopped, last_val, saved)

    def train_step(self, step: int) -> dict[str, float]:
        cfg = self.config
        self._step = step
        timer = Timer()
        metrics: dict[str, float] = {}

        with timer("gen"):
            batch = self.batches.take(step)  # off_policy_steps 1: mostly generated during the last update
        samples, groups, lag = batch.samples, batch.groups, batch.lag
        metrics.update(batch.metrics)
        metrics["rollout/off_policy_lag"] = float(lag)
        self._batch_ids = [s.sample.id for s in samples]
        with timer("reward"):
            scored = self.score(step, samples, groups)
            # ReMax's greedy responses, while the engines are still awake (they sleep for the update)
            baseline = (
                self._greedy_baseline(samples) if cfg.algorithm.advantage_estimator.value == "remax" else None
            )
        # Engines on the actor's GPUs give the update their memory back (rollout.engine.sleep_level), and
        # a colocated rank takes its actor back from the host, until the weights are pushed after it.
        sleeping = self.engine.sleep()
        with timer("prepare"):
            self.group.load_batch([s.rollout for s in samples], groups)
        temperature = cfg.rollout.temperature or 1.0
        # Old log-probs need their own pass only when the weights move before the last update reads
        # them (several mini-batches or epochs) or when KL or MIS needs them before the update.
        single_update = cfg.actor.mini_batches * cfg.actor.ppo_epochs == 1
        old: list[torch.Tensor] | None = None
        if not single_update or self.config.algorithm.needs_old_log_probs:
            with timer("old_log_prob"):
                old = self.group.log_probs(temperature=temperature)
        # A lagging batch's ratio is pi_current / pi_behaviour: vLLM's log-probs of what it sampled.
        ratio_old = behaviour_log_probs(groups, old) if lag else old
        ref = None
        if self.config.algorithm.needs_reference_model:
            with timer("ref"):
                ref = self.group.log_probs(temperature=temperature, reference=True)

        with timer("adv"):
            advantages, adv_metrics = self.advantages(samples, groups, scored, old, ref, baseline)
        metrics.update(adv_metrics)
        # trainer.rollout_log: every N-th step's first groups to rollouts/ and the trackers
        self.rollout_log.write(step, samples, groups, scored, advantages, timer=timer)

        with timer("update"):
            update = self.group.update(
                [
                    SequenceTargets(a, o, r)
                    for a, o, r in zip(
                        advantages,
                        ratio_old or [None] * len(advantages),
                        ref or [None] * len(advantages),
                        strict=True,
                    )
                ],
                kl_coef=self.kl_controller.coef,
                entropy_coef=cfg.actor.entropy_coef,
                temperature=temperature,
                offline_term=self._offline_term(step),
                offline_weight=cfg.mix.offline_weight,
                lagging=bool(lag),
            )
        metrics["actor/lr"] = self.group.scheduler_step()
        with timer("gen_ahead_wait"):
            self.batches.settle()  # the engines finish the next batch on the weights they hold
        with timer("weight_sync"):
            if sleeping:
                self.engine.wake_up()
            self._push_weights()

        # a metric with its own namespace (rollout_corr/...) keeps it
        metrics.update({(k if "/" in k else f"actor/{k}"): v for k, v in update.items()})
        metrics.update(self.step_metrics(samples, groups, scored))
        metrics.update(self.engine.pop_metrics())  # rollout/engine_failures (engines dropped, re-sent)
        metrics.update(timer.metrics())
        tokens = sum(len(g.prompt_token_ids) + len(r.token_ids) for g in groups for r in g.responses)
        metrics["perf/tokens"] = float(tokens)
        metrics["perf/tokens_per_s"] = tokens / max(metrics["timing/step_s"], 1e-9)
        return metrics

    # ------------------------------------------------------------------ phases -------------------------

    def generate(self, step: int) -> tuple[list[TrainSample], list[RolloutGroup], dict[str, float]]:
        """A batch of groups; with DAPO dynamic sampling, groups whose rewards are all equal are dropped
        and more prompts are drawn until the batch is full (at most ``max_rounds`` rounds)."""
        cfg = self.config
        batch = [self.train_samples[i] for i in self.loader.next_batch()]
        # every request seeded from (rollout.seed, step, sample id): a resumed run samples as the
        # uninterrupted one, on any number of engines (services/rollout/seeds.py)
        groups = self.engine.rollout(
            [s.rollout for s in batch], key=SeedKey(step), prompt_tokens=[s.prompt_tokens for s in batch]
        )
        metrics: dict[str, float] = {"rollout/offline_slots": 0.0}
        ds = cfg.algorithm.dynamic_sampling
        if ds.enabled:
            kept_s, kept_g, rounds = [], [], 0
            while True:
                rounds += 1
                scored = self.score(step, batch, groups)
                values = getattr(scored, ds.metric)
                ids = torch.tensor([i for i, g in enumerate(groups) for _ in g.responses])
                keep, _ = dynamic_sampling_keep(torch.tensor(values), ids)
                for i, (s, g) in enumerate(zip(batch, groups, strict=True)):
                    if bool(keep[ids == i].all()) and len(kept_s) < cfg.data.batch_size:
                        kept_s.append(s)
                        kept_g.append(g)
                if len(kept_s) >= cfg.data.batch_size or rounds >= ds.max_rounds:
                    break
                batch = [self.train_samples[i] for i in self.loader.next_batch()]
                groups = self.engine.rollout(
                    [s.rollout for s in batch], key=SeedKey(step, f"train/round{rounds + 1}"),
                    prompt_tokens=[s.prompt_tokens for s in batch],
                )  # fmt: skip
            metrics["rollout/dynamic_sampling_rounds"] = float(rounds)
            if not kept_s:
                log.warning(
                    "step %d: dynamic sampling kept no group in %d rounds; training on the last", step, rounds
                )
                kept_s, kept_g = batch, groups
            elif len(kept_s) < cfg.data.batch_size:
                log.warning(
                    "step %d: dynamic sampling filled %d of %d groups in %d rounds",
                    step, len(kept_s), cfg.data.batch_size, rounds,
                )  # fmt: skip
            batch, groups = kept_s, kept_g
            metrics["rollout/groups_kept"] = float(len(kept_s))
        offline = sum(1 for g in groups for r in g.responses if r.offline)
        metrics["rollout/offline_slots"] = float(offline)
        if cfg.rollout.mix_accuracy_threshold is not None:
            gated = [g for g in groups if g.online_accuracy is not None]
            metrics["rollout/gate_decisions"] = float(len(gated))
            metrics["rollout/gate_injected"] = float(
                sum(1 for g in gated if any(r.offline for r in g.responses))
            )
        return batch, groups, metrics

    def score(self, step: int, samples: Sequence[TrainSample], groups: Sequence[RolloutGroup]) -> Scored:
        return score_groups(self.reward_client, step, samples, groups)

    def advantages(
        self, samples, groups, scored: Scored, old, ref, baseline=None
    ) -> tuple[list[torch.Tensor], dict]:
        """``baseline``: ReMax's greedy rewards per response (``_greedy_baseline``), None otherwise."""
        algo = self.config.algorithm
        advantages, metrics = step_advantages(
            algo, groups, scored, old, ref, self.kl_controller.coef, baseline
        )
        if "actor/kl_ref" in metrics:
            self.kl_controller.update(metrics["actor/kl_ref"], len(samples))
        return advantages, metrics

    def _greedy_baseline(self, samples: Sequence[TrainSample]) -> torch.Tensor:
        """ReMax: the reward of one greedy response per prompt, repeated over its group."""
        groups = self.engine.rollout(
            [s.rollout for s in samples], n=1, mix_policy=False, temperature=0.0,
            key=SeedKey(self._step, "greedy"), prompt_tokens=[s.prompt_tokens for s in samples],
        )  # fmt: skip
        results = self.reward_client.score_batch(
            [reward_item(s, g.responses[0]) for s, g in zip(samples, groups, strict=True)]
        )
        n = self.config.rollout.n
        return torch.tensor([r.overall for r in results for _ in range(n)], dtype=torch.float32)

    def _offline_term(self, step: int) -> str:
        mix = self.config.mix
        if mix.offline_term == "schedule":
            return "likelihood" if step <= mix.switch_step else "luffy"
        return mix.offline_term

    # ------------------------------------------------------------------ metrics ------------------------

    def step_metrics(self, samples, groups, scored: Scored) -> dict[str, float]:
        m: dict[str, float] = {}
        responses = [r for g in groups for r in g.responses]
        online = [i for i, r in enumerate(responses) if not r.offline]
        for name, values in (
            ("overall", scored.overall),
            ("accuracy", scored.accuracy),
            ("format", scored.format),
            *scored.parts.items(),
        ):
            m[f"reward/{name}"] = _mean([values[i] for i in online]) if online else _mean(values)
        by_type: dict[str, list[int]] = defaultdict(list)
        index = 0
        for sample, group in zip(samples, groups, strict=True):
            for r in group.responses:
                if not r.offline:
                    by_type[sample.problem_type.replace(" ", "_")].append(index)
                index += 1
        for ptype, rows in by_type.items():
            m[f"reward/accuracy/{ptype}"] = _mean([scored.accuracy[i] for i in rows])
            m[f"reward/overall/{ptype}"] = _mean([scored.overall[i] for i in rows])
        m["reward/errors"] = float(scored.errors)
        lengths = [len(responses[i].token_ids) for i in online] or [0]
        max_tokens = self.config.rollout.max_tokens
        m["response_length/mean"] = _mean(lengths)
        m["response_length/max"] = float(max(lengths))
        m["response_length/clip_ratio"] = _mean([float(n >= max_tokens) for n in lengths])
        return m

    def _console(self, step: int, metrics: dict[str, float]) -> None:
        if "console" not in self.config.trainer.loggers:
            return
        keys = ("reward/accuracy", "reward/format", "val/accuracy", "actor/entropy", "timing/step_s")
        shown = " ".join(f"{k}={metrics[k]:.3f}" for k in keys if k in metrics and metrics[k] is not None)
        log.info("step %d/%d %s", step, self.config.trainer.total_steps, shown)

    # ------------------------------------------------------------------ validation ---------------------

    def validate(self, step: int = 0) -> dict[str, float]:
        """Greedy (``rollout.val_temperature``) answers to every validation sample, scored by the reward
        library: accuracy and format in total and per problem type. Sharded across the fleet's engines;
        sampled (val_temperature > 0) answers are seeded by ``step``."""
        began = time.perf_counter()
        cfg = self.config.rollout
        overrides: dict[str, Any] = {"temperature": cfg.val_temperature}
        if cfg.val_max_tokens:
            overrides["max_tokens"] = cfg.val_max_tokens
        groups = self.engine.rollout(
            [s.rollout for s in self.val_samples], n=1, mix_policy=False, key=SeedKey(step, "val"),
            prompt_tokens=[s.prompt_tokens for s in self.val_samples], **overrides,
        )  # fmt: skip
        results = self.reward_client.score_batch(
            [reward_item(s, g.responses[0]) for s, g in zip(self.val_samples, groups, strict=True)]
        )
        m = {
            "val/accuracy": _mean([r.accuracy for r in results]),
            "val/format": _mean([r.format for r in results]),
            "val/overall": _mean([r.overall for r in results]),
        }
        by_type: dict[str, list[float]] = defaultdict(list)
        for s, r in zip(self.val_samples, results, strict=True):
            by_type[s.problem_type.replace(" ", "_")].append(r.accuracy)
        for ptype, values in by_type.items():
            m[f"val/accuracy/{ptype}"] = _mean(values)
        m["perf/val_s"] = time.perf_counter() - began
        return m

    # ------------------------------------------------------------------ warm start ---------------------

    def warm_start(self) -> None:
        """``warmup.steps`` supervised steps on the warm-up samples' ``offline_output``, then a push."""
        cfg = self.config.warmup
        self.group.warm_start(
            [s.rollout for s in self.warmup_samples], steps=cfg.steps, lr=cfg.lr, batch_size=cfg.batch_size,
            seed=self.config.trainer.seed,
        )  # fmt: skip
        if self.config.algorithm.needs_reference_model:
            # the group's reference now holds the warmed weights; a resumed run (which skips the warm
            # start) loads them from here, named by every checkpoint
            folder = self.output_dir / ckpt.REFERENCE_DIR
            self.group.save_model(folder)
            ckpt.fsync_tree(folder)  # on disk before a checkpoint's state.json names it
            self.reference_path = str(folder)
        self._push_weights()

    # ------------------------------------------------------------------ checkpoints --------------------

    def save(self, step: int) -> Path:
        """Model, optimizer states, data position, RNG and KL coefficient, atomically (a temp folder
        flushed and renamed into place; ``state.json`` last, as the completion marker)."""
        import shutil

        folder = ckpt.checkpoint_dir(self.output_dir, step)
        tmp = folder.with_name(f".{folder.name}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        self.group.save(tmp)
        # the next step's batch when it was generated ahead: the resumed run trains on this very batch
        save_pending(tmp, self.batches.pending(), self.train_samples)
        ckpt.fsync_tree(tmp)
        if folder.exists():  # the same step saved again: swap, never a moment without a checkpoint
            old = folder.with_name(f".{folder.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            folder.rename(old)
            tmp.rename(folder)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(folder)
        # KL's anchor: the warm-started weights, else actor.model_path, recorded so that a resume with
        # another actor.model_path still anchors where this run did (null: no reference model)
        anchor = self.reference_path or (
            self.config.actor.model_path if self.config.algorithm.needs_reference_model else None
        )
        ckpt.write_state(
            folder,
            {
                "step": step,
                "loader": self.loader.state_dict(),
                "rng": ckpt.rng_state(),
                "kl_coef": self.kl_controller.coef,
                # ckpt.reference_source reads it back on resume
                "reference": anchor and ckpt.reference_entry(folder, anchor),
                "run": self._run_identity(),
                # Not part of the identity (another run may resume from it on purpose): tells a job's
                # retry whether the folder's newest checkpoint is its own.
                "job_id": self.job_id,
                # the wandb / MLflow runs a resume continues
                "trackers": self.logger.tracker_state(),
            },
        )
        ckpt.prune(self.output_dir, self.config.trainer.max_keep, step)
        self.logger.log_checkpoint(step, folder)
        return folder

    def _run_identity(self) -> dict[str, Any]:
        """What must not change between a checkpoint and the run resuming from it."""
        import hashlib

        ids = "\n".join(s.sample.id for s in self.train_samples)
        cfg = self.config
        return {
            "samples_sha256": hashlib.sha256(ids.encode()).hexdigest(),
            "batch_size": cfg.data.batch_size,
            "shuffle": cfg.data.shuffle,
            "world_size": cfg.actor.world_size,
            "rollout_n": cfg.rollout.n,
            "off_policy_steps": cfg.trainer.off_policy_steps,  # a lagging batch's ratio differs
            "model": ckpt.model_identity(cfg.actor.model_path),  # resuming trains the checkpoint's model
            # adapters of another shape cannot be loaded, nor full weights continued as adapters
            "lora": lora.run_identity(self.config.actor),
        }

    def _load_checkpoint(self, folder: Path) -> None:
        state = ckpt.read_state(folder)
        saved, now = state.get("run", {}), self._run_identity()
        changed = ckpt.identity_changes(saved, now)
        if changed:
            detail = ", ".join(f"{k}: checkpoint {a!r}, now {b!r}" for k, (a, b) in changed.items())
            raise ckpt.ResumeMismatch(
                f"cannot resume from {folder}: the run changed ({detail}); use another trainer.output_dir "
                "or trainer.resume=none"
            )
        self.group.load_optimizer(folder)
        self.loader.load_state_dict(state["loader"])
        ckpt.set_rng_state(state["rng"])
        self.kl_controller.coef = float(state["kl_coef"])
        self.start_step = int(state["step"])
        pending = load_pending(folder, self.train_samples)
        if pending is not None:
            if pending[0] != self.start_step + 1:
                raise ckpt.ResumeMismatch(
                    f"{folder}: its batch generated ahead is for step {pending[0]}, not {self.start_step + 1}"
                )
            self.batches.restore(*pending)
        log.info("resumed from %s at step %d", folder, self.start_step)

    def _push_weights(self) -> None:
        """The actor's new weights into the engine, in buckets of ``rollout.weight_bucket_mb`` (never a
        second full copy of the model): from an unsharded actor to in-process engines as a stream, from
        Ray ranks to Ray engines as object references to rank 0's buckets, made one at a time and not
        through the driver (with ``weight_bucket_mb: null``, rank 0's full state dict by reference)."""
        if getattr(self.engine, "loads_from_ranks", False):
            self.engine.push_weights(None)  # colocated: each rank loads its own shard from its parameters
            return
        bucket_mb = self.config.rollout.weight_bucket_mb
        buckets = getattr(self.group, "weight_buckets", None)
        stream = None if bucket_mb is None or buckets is None else buckets(bucket_mb)
        refs = getattr(self.engine, "accepts_refs", False)
        if stream is not None and not refs:
            self.engine.push_weights(stream)
        elif refs and bucket_mb is not None and hasattr(self.group, "bucket_refs"):
            from services.trainer.placement import bucket_push  # by rollout.weight_transport

            self.engine.push_weights(bucket_push(self.group, self.config.rollout, bucket_mb))  # one at a time
        elif refs and hasattr(self.group, "state_dict_ref"):
            self.engine.push_weights(self.group.state_dict_ref())
        else:
            self.engine.push_weights(self.group.state_dict())

    def shutdown(self) -> None:
        """Engine, then actor ranks (which stop a Ray they started), then the reward client, then a batch
        still being generated ahead (Ray engines end it when stopped; an in-process engine's shutdown
        waits for its call), then the output folder's lock (no other run takes the folder while this
        one still runs): each even when an earlier one fails."""
        # An ExitStack runs every callback even when one raises, last pushed first.
        with contextlib.ExitStack() as stack:
            for name, stop in (
                ("_lock", "close"), ("batches", "close"), ("reward_client", "close"), ("group", "shutdown"),
                ("engine", "shutdown"),
            ):  # fmt: skip
                part = getattr(self, name, None)
                if part is not None:
                    stack.callback(getattr(part, stop))


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else math.nan


def run(config: TrainConfig, *, hooks: Hooks | None = None, job_id: str | None = None) -> RunResult:
    """Train per ``config`` (the Python entry point of ``reelrl train``)."""
    return Trainer(config, hooks=hooks, job_id=job_id).fit()
