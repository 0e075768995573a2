"""It learns: the short version of `python -m bench.bench_learning`, through the real loop.

Pure RL on the direction task (which needs the order of frames): a format warm start whose offline
answers are uniformly random letters, then GRPO on data holding no correct answer anywhere. Only the
reward can teach which letter is right, so a clear rise of held-out accuracy over chance (0.25) shows
the loop learns from rewards: rollouts, scoring, advantages, the update and the weight push all work.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.common.synthetic_tasks import make_task_datasets
from services.common.tiny_models import build_tiny_model
from services.trainer.tracking import read_metrics

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(2400)  # ~6 min on a quiet 2-core machine; a shared one is slower
def test_pure_rl_lifts_heldout_accuracy_over_chance(reelrl_home: Path, tmp_path: Path) -> None:
    data = tmp_path / "reelrl-data"
    make_task_datasets(data, train_videos=64, val_videos=32)
    build_tiny_model("qwen2_5_vl", data / "tiny-qwen2_5_vl", seed=0)
    out = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "services.cli", "train", str(ROOT / "examples" / "tiny_cpu_rl.yaml"),
        "trainer.total_steps=500", "trainer.val_freq=50", "trainer.save_freq=0",
        f"trainer.output_dir={out}", "trainer.loggers=[jsonl]",
    ]  # fmt: skip
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"}
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=2200)
    assert proc.returncode == 0, proc.stderr[-4000:]

    val = [(r["step"], r["val/accuracy"]) for r in read_metrics(out / "metrics.jsonl") if "val/accuracy" in r]
    assert [s for s, _ in val] == list(range(0, 501, 50))
    # After the random-letter warm start the model answers in format but at chance.
    assert val[0][1] <= 0.4, val
    # The reward teaches the letter in one jump once the policy starts to use the video: measured at
    # steps 140-170 in three runs, ~320 in a fourth and after 200 in a fifth (docs/benchmarks.md), so
    # the budget leaves room. 0.5 on 32 held-out videos is 16 right where chance gives 8.
    assert max(a for _, a in val[1:]) >= 0.5, val
    first = read_metrics(out / "metrics.jsonl")[1]
    assert first["reward/format"] > 0.5 and first["actor/groups_with_signal"] > 0.5
