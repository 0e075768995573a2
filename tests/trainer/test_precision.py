"""Precision: the optimizer steps fp32 master weights while the forwards compute in bf16. An lr 1e-6
AdamW step moves a weight of size ~0.02 by ~5e-5 of itself, below bf16's resolution (2^-8): stepping
bf16 weights rounds ~98 % of such updates away (issue 17), an fp32 master keeps them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from services.trainer.algorithms import KLMode
from services.trainer.config import ConfigError, TrainConfig, parse_config
from services.trainer.group import LocalActorGroup
from services.trainer.update import SequenceTargets
from tests.trainer.actor_steps import UPDATE, World, build_world, make_groups

MINIMAL = {"data": {"train_files": ["t.jsonl"]}, "actor": {"model_path": "m"}}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return build_world(tmp_path_factory.mktemp("precision"), samples=2)


def recipe_config(world: World, **actor: Any) -> TrainConfig:
    """A large recipe's optimizer (lr 1e-6, AdamW defaults, clip 1) on the tiny model, whose weights
    are drawn with std 0.02 like a real checkpoint's."""
    return TrainConfig.model_validate(
        {
            "data": {"train_files": ["unused.jsonl"], "batch_size": 2},
            "actor": {"model_path": str(world.model), "optim": {"lr": 1e-6}, **actor},
            "rollout": {"n": 2, "max_tokens": 12, "engine": {"dtype": "bfloat16"}},
            "trainer": {"output_dir": str(world.output), "total_steps": 4},
        }
    )


def one_update(world: World, config: TrainConfig) -> dict[str, Any]:
    """One update with advantages +1 / -1; the stored weights before and after, which elements had a
    gradient, and the weights as they would be pushed to the engine."""
    group = LocalActorGroup(config, str(world.model), world.store, config.effective_rollout())
    try:
        actor = group.actor
        initial = {k: v.clone() for k, v in actor.model.named_parameters()}
        groups = make_groups(world, config.effective_rollout(), [[6, 9], [8, 5]])
        group.load_batch(list(world.samples[:2]), groups)
        carrying: dict[str, torch.Tensor] = {}
        step = actor.step_optimizer

        def observed_step() -> float:  # which elements the update has a gradient for
            for name, p in actor.model.named_parameters():
                if p.grad is not None:
                    carrying[name] = p.grad != 0
            return step()

        actor.step_optimizer = observed_step
        targets = [
            SequenceTargets(torch.full((len(s.response_ids),), 1.0 if i % 2 == 0 else -1.0), None)
            for i, s in enumerate(group.sequences)
        ]
        metrics = group.update(targets, **UPDATE)
        final = {k: v.detach().clone() for k, v in actor.model.named_parameters()}
        pushed = group.state_dict()
        streamed = dict(actor.full_tensors(group.push_dtype))  # what a bucketed sender reads
    finally:
        group.shutdown()
    return {
        "initial": initial, "final": final, "carrying": carrying, "metrics": metrics, "pushed": pushed,
        "streamed": streamed,
    }  # fmt: skip


def changed_fraction(run: dict[str, Any]) -> float:
    moved = total = 0
    for name, mask in run["carrying"].items():
        moved += int(((run["final"][name] != run["initial"][name]) & mask).sum())
        total += int(mask.sum())
    assert total > 0
    return moved / total


@pytest.mark.slow
def test_bf16_compute_update_at_lr_1e6_changes_every_weight_with_a_gradient(world: World) -> None:
    # the shipped large recipes' old spelling: actor.dtype bfloat16 now means bf16 forwards only
    run = one_update(world, recipe_config(world, dtype="bfloat16"))
    assert {v.dtype for v in run["final"].values()} == {torch.float32}  # the master the optimizer steps
    assert run["metrics"]["grad_norm"] > 0
    assert changed_fraction(run) >= 0.99
    # the engine (rollout.engine.dtype bfloat16) receives bf16 weights
    assert {v.dtype for v in run["pushed"].values() if v.is_floating_point()} == {torch.bfloat16}
    assert run["streamed"].keys() == run["pushed"].keys()
    assert all(torch.equal(run["streamed"][k], v) for k, v in run["pushed"].items())


@pytest.mark.slow
def test_the_forwards_compute_in_bf16(world: World) -> None:
    """The same step in fp32 compute differs: the bf16 setting is not ignored (autocast on one rank)."""
    bf16 = one_update(world, recipe_config(world, compute_dtype="bfloat16"))
    fp32 = one_update(world, recipe_config(world))
    assert changed_fraction(fp32) >= 0.99
    assert bf16["metrics"]["grad_norm"] != pytest.approx(fp32["metrics"]["grad_norm"], rel=1e-5)
    assert bf16["metrics"]["grad_norm"] == pytest.approx(fp32["metrics"]["grad_norm"], rel=0.05)


def test_a_low_precision_master_is_refused_unless_asked_for() -> None:
    with pytest.raises(ConfigError, match="allow_low_precision_master"):
        parse_config({**MINIMAL, "actor": {"model_path": "m", "param_dtype": "bfloat16"}})
    allowed = parse_config(
        {
            **MINIMAL,
            "actor": {"model_path": "m", "param_dtype": "bfloat16", "allow_low_precision_master": True},
        }
    )
    assert allowed.actor.param_dtype == "bfloat16"


def test_the_old_dtype_key_means_the_compute_dtype() -> None:
    actor = parse_config({**MINIMAL, "actor": {"model_path": "m", "dtype": "bfloat16"}}).actor
    assert (actor.param_dtype, actor.compute_dtype, actor.dtype) == ("float32", "bfloat16", None)
    with pytest.raises(ConfigError, match="contradicts actor"):
        parse_config(
            {**MINIMAL, "actor": {"model_path": "m", "dtype": "bfloat16", "compute_dtype": "float32"}}
        )
    defaults = parse_config(MINIMAL).actor
    assert (defaults.param_dtype, defaults.compute_dtype) == ("float32", "float32")


@pytest.mark.parametrize("name", ["qwen2_5_vl_7b_dapo", "qwen2_5_vl_7b_luffy", "qwen3_vl_8b_grpo"])
def test_the_large_recipes_train_an_fp32_master_with_bf16_forwards(name: str) -> None:
    from services.trainer.config import load_config

    actor = load_config(Path(__file__).resolve().parents[2] / "examples" / f"{name}.yaml").actor
    assert (actor.param_dtype, actor.compute_dtype, actor.allow_low_precision_master) == (
        "float32",
        "bfloat16",
        False,
    )


@pytest.mark.slow
def test_the_reference_is_stored_and_run_in_the_compute_dtype(world: World) -> None:
    config = recipe_config(world, compute_dtype="bfloat16").model_copy(deep=True)
    config.algorithm.kl.mode = KLMode.LOSS
    group = LocalActorGroup(config, str(world.model), world.store, config.effective_rollout())
    try:
        assert {p.dtype for p in group.reference.model.parameters()} == {torch.bfloat16}
        assert {p.dtype for p in group.actor.model.parameters()} == {torch.float32}
        groups = make_groups(world, config.effective_rollout(), [[6, 9]])
        group.load_batch(list(world.samples[:1]), groups)
        actor, reference = group.log_probs(temperature=1.0), group.log_probs(temperature=1.0, reference=True)
    finally:
        group.shutdown()
    # the same weights before any update: equal up to the rounding of the stored bf16 copy
    gap = max(float((a - r).abs().max()) for a, r in zip(actor, reference, strict=True))
    assert 0 < gap < 0.05


def test_one_rule_names_the_push_dtype_for_every_sender() -> None:
    """``LocalActorGroup.push_dtype`` (full and bucketed pushes, colocated loads) is
    ``weight_buckets.push_dtype`` of the engine's checkpoint: with ``auto`` the checkpoint's declared
    dtype, never the actor's compute dtype (an fp16 checkpoint's engine runs fp16; bf16 first would
    round every weight twice)."""
    from types import SimpleNamespace

    from transformers import PretrainedConfig

    from services.trainer.weight_buckets import checkpoint_dtype, push_dtype

    def group_dtype(engine: str, declared: str | None, compute: torch.dtype) -> torch.dtype | None:
        group = SimpleNamespace(
            rollout=SimpleNamespace(engine=SimpleNamespace(dtype=engine)),
            checkpoint=SimpleNamespace(hf_config=PretrainedConfig(dtype=declared)),
            actor=SimpleNamespace(compute_dtype=compute),
        )
        return LocalActorGroup.push_dtype.fget(group)

    assert group_dtype("auto", "float16", torch.bfloat16) is torch.float16
    assert group_dtype("auto", "bfloat16", torch.float32) is torch.bfloat16
    assert group_dtype("auto", "float32", torch.bfloat16) is torch.float32  # the engine rounds once
    assert group_dtype("auto", None, torch.bfloat16) is None  # as stored
    assert group_dtype("bfloat16", "float32", torch.float32) is torch.bfloat16
    assert push_dtype("auto", checkpoint_dtype(PretrainedConfig(dtype="float16"))) is torch.float16
    # a VL config that declares its dtype on the text model only
    nested = PretrainedConfig()
    nested.dtype, nested.text_config = None, PretrainedConfig(dtype="bfloat16")
    assert checkpoint_dtype(nested) is torch.bfloat16
