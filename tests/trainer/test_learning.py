"""It learns: the short version of `python -m bench.bench_learning`, through the real loop.

Pure RL on the direction task (which needs the order of frames): a format warm start whose offline
answers are uniformly random letters, then GRPO on data holding no correct answer anywhere. Only the
reward can teach which letter is right, so a clear rise of held-out accuracy over chance (0.25) shows
the loop learns from rewards: rollouts, scoring, advantages, the update and the weight push all work,
on a fleet of two disaggregated engines.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from services.common.synthetic_tasks import make_task_datasets
from services.common.tiny_models import build_tiny_model
from services.trainer.config import load_config
from services.trainer.loop import Hooks, Trainer
from services.trainer.tracking import read_metrics

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
STEPS, VAL_FREQ, TARGET = 500, 10, 0.5


@pytest.mark.timeout(2400)  # ~2-3 min on a quiet 2-core machine when the jump comes early; 500 steps ~7
def test_pure_rl_lifts_heldout_accuracy_over_chance(
    reelrl_home: Path, tmp_path: Path, monkeypatch, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="services.rollout.fleet")
    monkeypatch.chdir(tmp_path)  # the config's paths are relative (reelrl-data/...)
    data = tmp_path / "reelrl-data"
    make_task_datasets(data, train_videos=64, val_videos=32)
    build_tiny_model("qwen2_5_vl", data / "tiny-qwen2_5_vl", seed=0)
    out = tmp_path / "run"
    overrides = [
        f"trainer.total_steps={STEPS}", f"trainer.val_freq={VAL_FREQ}", "trainer.save_freq=0",
        f"trainer.output_dir={out}", "trainer.loggers=[jsonl]",
        # on a fleet of two engines (issue 16): Ray actors, each on a core of its own with its engine
        # core and worker in the actor's process, so none polls beside the update
        "rollout.engines=2", "rollout.placement=disaggregated", "trainer.use_ray=true",
        # one thread for the update: in the suite the other session keeps both cores busy, and a team
        # of 2 OpenMP threads waits at every barrier for whichever one was descheduled (its update took
        # 5.1 s a step there, against 0.72 s alone with 2 threads and 0.93 s alone with 1)
        "trainer.torch_threads=1",
    ]  # fmt: skip
    config = load_config(ROOT / "examples" / "tiny_cpu_rl.yaml", overrides)
    # The run stops at the first validation that reaches the target (the loop's stop hook, as a job's
    # cancel uses it): what is left of the 500 steps could only confirm it.
    reached: list[int] = []

    def watch(step: int, metrics: dict[str, float]) -> None:
        if step > 0 and (metrics.get("val/accuracy") or 0.0) >= TARGET:  # None: not finite
            reached.append(step)

    result = Trainer(config, hooks=Hooks(on_step=[watch], stop=lambda: bool(reached))).fit()

    val = [(r["step"], r["val/accuracy"]) for r in read_metrics(out / "metrics.jsonl") if "val/accuracy" in r]
    last = result.steps
    assert last == (reached[0] if reached else STEPS) and last % VAL_FREQ == 0, (last, reached)
    assert [s for s, _ in val] == list(range(0, last + 1, VAL_FREQ))
    # After the random-letter warm start the model answers in format but at chance.
    assert val[0][1] <= 0.4, val
    # The reward teaches the letter in one jump once the policy starts to use the video: measured at
    # steps 140-170 in three runs, ~320 in a fourth and after 200 in a fifth (docs/benchmarks.md), so
    # the budget leaves room. 0.5 on 32 held-out videos is 16 right where chance gives 8.
    assert max(a for _, a in val[1:]) >= TARGET, val
    first = read_metrics(out / "metrics.jsonl")[1]
    assert first["reward/format"] > 0.5 and first["actor/groups_with_signal"] > 0.5
    assert {r["rollout/engines_alive"] for r in read_metrics(out / "metrics.jsonl")[1:]} == {2.0}
    # every push went over one weight-broadcast group from rank 0 to both engines, formed once
    formed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("weight group formed")]
    assert len(formed) == 1 and "2 engine workers" in formed[0], formed
