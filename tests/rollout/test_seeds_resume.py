"""Generation is a function of the step, not of the engine's age or count: a run resumed at step 1
samples step 2's tokens exactly as the uninterrupted run did, on two engines instead of one, and so
logs the same step-2 metrics (the real loop, vLLM on CPU, fp32)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from services.common.synthetic_tasks import make_task_datasets
from services.common.tiny_models import build_tiny_model
from services.trainer.config import load_config
from services.trainer.loop import Trainer
from services.trainer.tracking import read_metrics

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


class RecordingTrainer(Trainer):
    """Keeps every step's sampled token ids (in sample, response order)."""

    def generate(self, step: int):
        samples, groups, metrics = super().generate(step)
        self.tokens[step] = [r.token_ids for g in groups for r in g.responses if not r.offline]
        return samples, groups, metrics

    tokens: dict[int, list[list[int]]]


def train(out: Path, data: dict[str, Path], model: Path, **extra: object) -> RecordingTrainer:
    values = {
        "data.train_files": f"[{data['colour_mix']}]",
        "data.val_files": "[]",
        "data.batch_size": 4,
        "rollout.n": 4,
        "actor.model_path": str(model),
        "trainer.output_dir": str(out),
        "trainer.total_steps": 2,
        "trainer.save_freq": 1,
        "trainer.val_before_train": False,
        "trainer.loggers": "[jsonl]",
        **extra,
    }
    config = load_config(ROOT / "examples" / "tiny_cpu.yaml", [f"{k}={v}" for k, v in values.items()])
    trainer = RecordingTrainer(config)
    trainer.tokens = {}
    trainer.fit()
    return trainer


def test_a_resumed_run_on_two_engines_samples_the_uninterrupted_run_s_next_step(
    reelrl_home: Path, tmp_path: Path
) -> None:
    data = {
        k: Path(v) for k, v in make_task_datasets(tmp_path / "data", train_videos=8, val_videos=2).items()
    }
    model = build_tiny_model("qwen2_5_vl", tmp_path / "tiny", seed=0)
    whole = train(tmp_path / "whole", data, model)
    resumed = train(
        tmp_path / "resumed", data, model, **{
            "trainer.resume": str(tmp_path / "whole" / "checkpoints" / "step_000001"),
            "rollout.placement": "driver", "rollout.engines": 2,
        },
    )  # fmt: skip
    assert sorted(whole.tokens) == [1, 2] and sorted(resumed.tokens) == [2]
    # the sampled tokens differ from step to step (the check could not pass by replaying step 1)
    assert whole.tokens[1] != whole.tokens[2]
    assert resumed.tokens[2] == whole.tokens[2]

    (before,) = [m for m in read_metrics(tmp_path / "whole" / "metrics.jsonl") if m["step"] == 2]
    (after,) = [m for m in read_metrics(tmp_path / "resumed" / "metrics.jsonl") if m["step"] == 2]
    compared = [k for k in before if k.startswith(("reward/", "response_length/", "actor/", "rollout/"))]
    assert "actor/pg_loss" in compared or "actor/loss" in compared or len(compared) > 10
    for key in compared:
        assert math.isclose(before[key], after[key], rel_tol=1e-5, abs_tol=1e-6), (
            key,
            before[key],
            after[key],
        )
