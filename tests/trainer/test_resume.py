"""A resumed run continues the run it resumes: with a warm start and KL on, the reference is the warmed
model (issue 17: the resumed run rebuilt it from ``actor.model_path``, and step 2's ``actor/kl_ref`` was
22x the uninterrupted run's). Compared on fixed batches, so sampling plays no part: fp32, one process."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from services.trainer import checkpoints as ckpt
from services.trainer.algorithms import make_kl_controller
from services.trainer.config import TrainConfig
from services.trainer.data import StatefulLoader
from services.trainer.group import LocalActorGroup
from services.trainer.loop import Scored, Trainer, step_advantages
from services.trainer.tracking import MetricsLogger
from services.trainer.update import SequenceTargets
from tests.trainer.actor_steps import World, build_world, make_groups

pytestmark = pytest.mark.slow
TOLERANCE = 1e-6


class _Engine:
    """Takes the warm start's weight push (no rollout happens in this test)."""

    def push_weights(self, weights: Any) -> None:
        self.pushed = weights


def kl_config(world: World, output: Path) -> TrainConfig:
    return TrainConfig.model_validate(
        {
            "data": {"train_files": ["unused.jsonl"], "batch_size": 2},
            "actor": {"model_path": str(world.model), "optim": {"lr": 1e-3, "grad_clip": None}},
            "rollout": {"n": 2, "max_tokens": 12, "engine": {"dtype": "float32"}},
            "algorithm": {"kl": {"mode": "loss", "coef": 0.1}},
            "warmup": {"files": ["unused.jsonl"], "steps": 3, "lr": 1e-2, "batch_size": 2},
            "trainer": {"output_dir": str(output), "total_steps": 2, "loggers": ["jsonl"]},
        }
    )


def rl_step(group: LocalActorGroup, config: TrainConfig, world: World, lengths: list[list[int]]) -> dict:
    """One RL step on a fixed batch, as the loop runs it: old and reference log-probs, advantages and
    ``actor/kl_ref`` from ``step_advantages``, the update, the lr schedule."""
    groups = make_groups(world, config.effective_rollout(), lengths)
    group.load_batch(list(world.samples[: len(groups)]), groups)
    old = group.log_probs(temperature=1.0)
    ref = group.log_probs(temperature=1.0, reference=True)
    count = sum(len(r) for r in lengths)
    rewards = [float(i % 2) for i in range(count)]
    scored = Scored(overall=rewards, accuracy=rewards, format=[1.0] * count)
    advantages, metrics = step_advantages(config.algorithm, groups, scored, old, ref, kl_coef=0.1)
    update = group.update(
        [SequenceTargets(a, o, r) for a, o, r in zip(advantages, old, ref, strict=True)],
        kl_coef=0.1, entropy_coef=0.0, temperature=1.0, offline_term="likelihood",
    )  # fmt: skip
    group.scheduler_step()
    return {"kl_ref": metrics["actor/kl_ref"], **update}


def trainer_for(config: TrainConfig, group: LocalActorGroup, world: World) -> Trainer:
    """The Trainer's warm start and checkpoint code around a group built here (no engine, no data)."""
    trainer = Trainer(config)
    trainer.group, trainer.engine, trainer.reference_path = group, _Engine(), None
    trainer.warmup_samples = [SimpleNamespace(rollout=s) for s in world.samples]
    trainer.train_samples = []
    trainer.loader = StatefulLoader(4, 2, seed=0)
    trainer.kl_controller = make_kl_controller(config.algorithm.kl)
    trainer.logger = MetricsLogger(trainer.output_dir, name="t", config={}, loggers=["jsonl"])
    return trainer


STEP1, STEP2 = [[5, 9], [7, 3]], [[6, 4], [8, 5]]


def test_a_resumed_run_keeps_the_warm_started_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = build_world(tmp_path / "world", samples=3)
    config = kl_config(world, tmp_path / "run")
    rollout = config.effective_rollout()
    synced: list[Path] = []
    flush = ckpt.fsync_tree
    monkeypatch.setattr(ckpt, "fsync_tree", lambda folder: (synced.append(Path(folder)), flush(folder)))

    # uninterrupted: warm start, step 1, checkpoint, step 2
    group = LocalActorGroup(config, str(world.model), world.store, rollout)
    try:
        trainer = trainer_for(config, group, world)
        stale = tmp_path / "run" / f".{ckpt.REFERENCE_DIR}.killed"  # an earlier attempt's temp folder
        stale.mkdir(parents=True)
        trainer.warm_start()
        assert not stale.exists()
        # flushed before any checkpoint's state.json names it (a crash must not leave it half-written)
        assert synced == [tmp_path / "run" / ckpt.REFERENCE_DIR]
        first = rl_step(group, config, world, STEP1)
        folder = trainer.save(1)
        second = rl_step(group, config, world, STEP2)
    finally:
        group.shutdown()
    assert first["kl_ref"] < 1e-9  # RL starts where the warm start ended: the anchor is the warmed model

    # resumed from step 1, as Trainer.setup builds it
    state = ckpt.read_state(folder)
    reference = ckpt.reference_source(folder, state, warm_started=True)
    resumed = LocalActorGroup(
        config, str(folder / ckpt.MODEL_DIR), world.store, rollout, reference_path=reference
    )
    try:
        resumed.load_optimizer(folder)
        again = rl_step(resumed, config, world, STEP2)
    finally:
        resumed.shutdown()
    assert again["kl_ref"] == pytest.approx(second["kl_ref"], abs=TOLERANCE)
    for key in ("pg_loss", "kl_loss", "grad_norm"):
        assert again[key] == pytest.approx(second[key], abs=TOLERANCE), key

    # what a resume used to build: the reference from actor.model_path, the un-warmed weights
    unwarmed = LocalActorGroup(config, str(folder / ckpt.MODEL_DIR), world.store, rollout)
    try:
        unwarmed.load_optimizer(folder)
        wrong = rl_step(unwarmed, config, world, STEP2)
    finally:
        unwarmed.shutdown()
    assert abs(wrong["kl_ref"] - second["kl_ref"]) > 100 * TOLERANCE


def test_a_checkpoint_without_the_reference_of_a_warm_started_run_is_refused(tmp_path: Path) -> None:
    folder = ckpt.checkpoint_dir(tmp_path, 3)
    folder.mkdir(parents=True)
    with pytest.raises(ckpt.ResumeMismatch, match="warm-started reference"):
        ckpt.reference_source(folder, {"step": 3}, warm_started=True)
    assert ckpt.reference_source(folder, {"step": 3, "reference": None}, warm_started=False) is None
    with pytest.raises(FileNotFoundError, match="reference model"):
        ckpt.reference_source(folder, {"reference": "../../reference"}, warm_started=True)


def test_the_reference_is_recorded_relative_to_the_checkpoint(tmp_path: Path) -> None:
    folder = ckpt.checkpoint_dir(tmp_path / "run", 2)
    assert ckpt.reference_entry(folder, tmp_path / "run" / "reference") == "../../reference"
    assert ckpt.reference_entry(folder, tmp_path / "models" / "m") == str(
        (tmp_path / "models" / "m").resolve()
    )


def test_without_a_warm_start_the_checkpoint_records_actor_model_path_as_the_anchor(tmp_path: Path) -> None:
    """A resume with another ``actor.model_path`` (the actor loads the checkpoint's weights either way)
    must not move KL's anchor: the checkpoint names the model this run's reference came from."""
    world = build_world(tmp_path / "world", samples=1)
    config = kl_config(world, tmp_path / "run").model_copy(deep=True)
    config.warmup.steps = 0
    group = LocalActorGroup(config, str(world.model), world.store, config.effective_rollout())
    try:
        folder = trainer_for(config, group, world).save(1)
    finally:
        group.shutdown()
    state = ckpt.read_state(folder)
    assert state["reference"] == str(world.model.resolve())
    assert ckpt.reference_source(folder, state, warm_started=False) == str(world.model.resolve())
