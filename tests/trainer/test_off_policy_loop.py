"""``trainer.off_policy_steps: 1`` through the real loop (vLLM on CPU, fp32): the next step's batch is
generated during the update, by the weights before it, its ratio is taken against vLLM's log-probs, and
a run resumed from a checkpoint trains on the batch the uninterrupted one generated ahead."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest

from services.trainer import checkpoints as ckpt
from services.trainer.ahead import PENDING_FILE
from services.trainer.config import load_config
from services.trainer.loop import Trainer
from services.trainer.tracking import read_metrics
from tests.trainer.loop_runs import colour_task

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


class RecordingTrainer(Trainer):
    """Keeps, per generated step: the thread that generated it, the fleet's weight version then, and
    the sampled responses' tokens and weight versions."""

    def generate(self, step: int):
        samples, groups, metrics = super().generate(step)
        online = [r for g in groups for r in g.responses if not r.offline]
        self.seen[step] = {
            "thread": threading.current_thread().name,
            "tokens": [r.token_ids for r in online],
            "versions": {r.weight_version for r in online},
        }
        return samples, groups, metrics


def train(out: Path, data: dict[str, Path], model: Path, **extra: object) -> RecordingTrainer:
    values = {
        "data.train_files": f"[{data['colour_mix']}]",
        "data.val_files": "[]",
        "data.batch_size": 2,
        "rollout.n": 4,  # three sampled responses and the offline answer (tiny_cpu's mix_policy)
        "actor.model_path": str(model),
        "actor.optim.lr": 1.0e-2,  # moves the weights far enough in one step for the lag to show
        "trainer.output_dir": str(out),
        "trainer.total_steps": 3,
        "trainer.save_freq": 1,
        "trainer.max_keep": 3,
        "trainer.val_before_train": "false",
        "trainer.loggers": "[jsonl]",
        "trainer.off_policy_steps": 1,
        **extra,
    }
    config = load_config(ROOT / "examples" / "tiny_cpu.yaml", [f"{k}={v}" for k, v in values.items()])
    trainer = RecordingTrainer(config)
    trainer.seen = {}
    trainer.fit()
    return trainer


def by_step(out: Path) -> dict[int, dict[str, float]]:
    return {m["step"]: m for m in read_metrics(out / "metrics.jsonl")}


def test_one_step_off_policy_generates_during_the_update_and_resumes_exactly(
    reelrl_home: Path, tmp_path: Path
) -> None:
    data, model = colour_task(tmp_path)
    whole = train(tmp_path / "whole", data, model)
    # step 1 is generated at its start; steps 2 and 3 each during the update before them ...
    assert whole.seen[1]["thread"] == threading.main_thread().name
    assert [whole.seen[s]["thread"].startswith("rollout-ahead") for s in (2, 3)] == [True, True]
    # ... with the weights before that update: step 2's batch by the initial weights (version 0, as
    # step 1's), step 3's by those after step 1's update (version 1), never by newer ones
    assert [whole.seen[s]["versions"] for s in (1, 2, 3)] == [{0}, {0}, {1}]
    metrics = by_step(tmp_path / "whole")
    assert [metrics[s]["rollout/off_policy_lag"] for s in (1, 2, 3)] == [0.0, 1.0, 1.0]
    # Step 1 is on-policy: its ratio is exactly 1 (old = current, detached). A lagging step's ratio is
    # against vLLM's log-probs of the weights one update back: KL(behaviour || current) well above the
    # train/infer gap (~1e-6 in fp32, tests/rollout/test_consistency.py).
    assert metrics[1]["actor/ppo_kl"] == 0.0
    assert metrics[2]["actor/ppo_kl"] > 1e-4 and metrics[3]["actor/ppo_kl"] > 1e-4, metrics
    # every checkpoint but the last holds the batch generated ahead
    holds = [(ckpt.checkpoint_dir(tmp_path / "whole", s) / PENDING_FILE).is_file() for s in (1, 2, 3)]
    assert holds == [True, True, False]

    step1 = ckpt.checkpoint_dir(tmp_path / "whole", 1)
    resumed = train(tmp_path / "resumed", data, model, **{"trainer.resume": str(step1)})
    # step 2 trains on the checkpoint's batch (the resumed run does not generate it again); step 3's is
    # generated during step 2's update by the checkpoint's weights, as in the uninterrupted run
    assert sorted(resumed.seen) == [3] and resumed.seen[3]["thread"].startswith("rollout-ahead")
    assert resumed.seen[3]["tokens"] == whole.seen[3]["tokens"]
    assert whole.seen[3]["tokens"] != whole.seen[2]["tokens"]  # not a replay of one step
    after = by_step(tmp_path / "resumed")
    assert sorted(after) == [2, 3]
    for step in (2, 3):
        compared = [
            k for k in metrics[step] if k.startswith(("reward/", "response_length/", "actor/", "rollout/"))
        ]
        for key in ("actor/ppo_kl", "actor/pg_loss", "actor/grad_norm", "rollout/off_policy_lag"):
            assert key in compared, key
        for key in compared:
            assert math.isclose(metrics[step][key], after[step][key], rel_tol=1e-5, abs_tol=1e-7), (
                step,
                key,
                metrics[step][key],
                after[step][key],
            )
