"""LoRA through the real loop (vLLM on CPU, fp32, KL on): one uninterrupted run of two steps and one
resumed from its step-1 checkpoint, checked for:

- rollouts see the adapters: step 2 is sampled by an engine that received the merged weights after step
  1, and the engine's log-probs of its tokens are the adapted actor's (``rollout_corr/kl`` ≈ 0), while
  the adapters have moved the policy away from the base (``actor/kl_ref`` > 0, KL to the base with the
  adapters bypassed);
- checkpoints hold the adapters, not a model; a resume loads them onto the base and pushes the merged
  weights before sampling, so step 2 repeats: the same tokens, rewards, losses and KL;
- ``reelrl export --merge`` of the step-2 checkpoint loads in vLLM, and vLLM's log-probs of a response
  are what transformers computes on the exported model."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from services.trainer import checkpoints as ckpt
from services.trainer.export import export_checkpoint
from services.trainer.loop import Trainer
from tests.trainer.loop_runs import colour_config, colour_task, step_metrics

pytestmark = [pytest.mark.integration, pytest.mark.slow]


class RecordingTrainer(Trainer):
    """Keeps every step's sampled token ids (in sample, response order)."""

    tokens: dict[int, list[list[int]]]

    def generate(self, step: int):
        samples, groups, metrics = super().generate(step)
        self.tokens[step] = [r.token_ids for g in groups for r in g.responses if not r.offline]
        return samples, groups, metrics


def train(out: Path, data: dict[str, Path], model: Path, **extra: object) -> RecordingTrainer:
    values = {
        "actor.lora": "{rank: 8, alpha: 16}",
        "actor.optim.lr": 1.0e-2,  # adapters start at B = 0: a large step moves the policy visibly
        "algorithm.kl.mode": "loss",
        "algorithm.kl.coef": 0.1,
        "trainer.total_steps": 2,
        "trainer.save_freq": 1,
        **extra,
    }
    trainer = RecordingTrainer(colour_config(out, data, model, **values))
    trainer.tokens = {}
    trainer.fit()
    return trainer


def test_lora_rollouts_see_the_adapters_and_a_resume_repeats_the_step(
    reelrl_home: Path, tmp_path: Path
) -> None:
    data, model = colour_task(tmp_path)
    whole = train(tmp_path / "whole", data, model)
    step1 = ckpt.checkpoint_dir(tmp_path / "whole", 1)
    assert (step1 / ckpt.ADAPTER_DIR / "adapter_model.safetensors").is_file()
    assert not (step1 / ckpt.MODEL_DIR).exists()
    resumed = train(tmp_path / "resumed", data, model, **{"trainer.resume": str(step1)})

    first, before, after = (
        step_metrics(tmp_path / "whole", 1),
        step_metrics(tmp_path / "whole", 2),
        step_metrics(tmp_path / "resumed", 2),
    )
    # step 1: adapters at B = 0, the policy is the base; step 2: moved by step 1's update, and the engine
    # that sampled it scores its tokens as the adapted actor does
    assert first["actor/kl_ref"] == pytest.approx(0.0, abs=1e-7)
    assert before["actor/kl_ref"] > 1e-6
    assert abs(before["rollout_corr/kl"]) < 1e-5, before["rollout_corr/kl"]
    assert abs(after["rollout_corr/kl"]) < 1e-5, after["rollout_corr/kl"]
    # the resumed step is the uninterrupted one
    assert whole.tokens[1] != whole.tokens[2]
    assert resumed.tokens[2] == whole.tokens[2]
    compared = [k for k in before if k.startswith(("reward/", "response_length/", "actor/", "rollout_corr/"))]
    for key in ("actor/kl_ref", "actor/pg_loss", "actor/grad_norm", "rollout_corr/kl"):
        assert key in compared, key
    for key in compared:
        assert math.isclose(before[key], after[key], rel_tol=1e-5, abs_tol=1e-7), (
            key,
            before[key],
            after[key],
        )

    # the step-2 checkpoint, merged, in vLLM and in transformers
    out = tmp_path / "merged"
    assert export_checkpoint(ckpt.checkpoint_dir(tmp_path / "whole", 2), out, merge=True) == "model"
    check_vllm_scores_like_transformers(out, whole)


def check_vllm_scores_like_transformers(folder: Path, trainer: Trainer) -> None:
    """vLLM serves ``folder`` and its log-probs of a sampled response are transformers' on the same
    weights (fp32 both, as the engine loads a bf16 checkpoint at ``engine.dtype: float32``)."""
    from transformers import AutoModelForImageTextToText

    from services.rollout import consistency
    from services.rollout.engine import RolloutEngine
    from services.rollout.media import load_media
    from services.rollout.prompts import render_prompt
    from services.rollout.seeds import SeedKey

    config = trainer.config.effective_rollout()
    sample = trainer.train_samples[0].rollout
    engine = RolloutEngine(folder, config, source=trainer.source)
    try:
        (group,) = engine.rollout([sample], key=SeedKey(3))
        processor = engine.checkpoint.processor
        media = load_media(sample, engine.source, engine.checkpoint.family, None)
        inputs = consistency.processor_inputs(
            processor, render_prompt(processor, sample), media, engine.config
        )
        hf = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
        sampled = [r for r in group.responses if not r.offline]  # not mix_policy's offline answer
        assert sampled
        for response in sampled:
            expected = consistency.response_logprobs(
                hf, processor, inputs, response.token_ids, vllm_rule=True, sample_id=sample.id
            )
            assert (expected - torch.tensor(response.logprobs)).abs().max().item() < 1e-4
    finally:
        engine.shutdown()
