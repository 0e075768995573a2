"""An exact resume through the real loop (vLLM on CPU, fp32), one run checked for two things:

- The warm-started reference: ``Trainer.setup`` reads the checkpoint's ``reference`` record and builds
  the KL anchor from it, so step 2 of a run resumed at step 1 (in another output folder, so the
  record's relative path is followed) logs the same ``actor/kl_ref`` and losses as the uninterrupted
  run. Before the record, the resumed anchor was ``actor.model_path``, the un-warmed model (issue 17).
- Generation is a function of the step, not of the engine's age or count: the resumed run samples on
  two engines (processes of their own) where the uninterrupted one had one (in the trainer's process),
  and step 2's tokens are the same.

One pair of runs proves both (each run starts a trainer and its engines, the suite's dearest part)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from services.trainer import checkpoints as ckpt
from services.trainer.config import load_config
from services.trainer.loop import Trainer
from tests.trainer.loop_runs import colour_task, step_metrics

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


class RecordingTrainer(Trainer):
    """Keeps every step's sampled token ids (in sample, response order), the engines that served each
    step, and the cores each engine's vLLM worker was bound to."""

    tokens: dict[int, list[list[int]]]
    served: dict[int, set[int]]
    worker_cores: list[str]

    def generate(self, step: int):
        samples, groups, metrics = super().generate(step)
        self.tokens[step] = [r.token_ids for g in groups for r in g.responses if not r.offline]
        self.served[step] = set(self.engine.last_engines)
        # (an engine in this process, as one driver engine on the CPU is, has no worker process)
        self.worker_cores = [
            worker_cores(m.engine) for m in self.engine.members if m.engine.footprint.processes
        ]
        return samples, groups, metrics


def worker_cores(engine) -> str:
    """The cores the engine's vLLM worker (its OpenMP master thread) is bound to, as /proc lists them."""
    (worker,) = [p for p in engine.footprint.processes if "VLLM::Worker" in " ".join(p.cmdline())]
    for line in Path(f"/proc/{worker.pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split()[1]
    raise AssertionError(f"no Cpus_allowed_list for {worker.pid}")


def train(out: Path, data: dict[str, Path], model: Path, **extra: object) -> RecordingTrainer:
    values = {
        "data.train_files": f"[{data['colour_mix']}]",
        "data.val_files": "[]",
        "data.batch_size": 2,
        "rollout.n": 4,  # three sampled responses and the offline answer (tiny_cpu's mix_policy): the
        # rewards differ within each group, so step 1 moves the actor away from the anchor, and each
        # group's responses are seeded in turn (seed + i) on whichever engine serves it
        "actor.model_path": str(model),
        "algorithm.kl.mode": "loss",
        "algorithm.kl.coef": 0.1,
        # a warm start that moves the weights far: an un-warmed anchor would be far from the actor
        "warmup.files": f"[{data['colour_mix']}]",
        "warmup.steps": 2,
        "warmup.lr": 1.0e-2,
        "warmup.batch_size": 2,
        "trainer.output_dir": str(out),
        "trainer.total_steps": 2,
        "trainer.save_freq": 1,
        "trainer.val_before_train": "false",
        "trainer.loggers": "[jsonl]",
        **extra,
    }
    config = load_config(ROOT / "examples" / "tiny_cpu.yaml", [f"{k}={v}" for k, v in values.items()])
    trainer = RecordingTrainer(config)
    trainer.tokens, trainer.served = {}, {}
    trainer.fit()
    return trainer


def test_a_warm_started_kl_run_resumed_on_two_engines_repeats_the_uninterrupted_step(
    reelrl_home: Path, tmp_path: Path
) -> None:
    data, model = colour_task(tmp_path)
    whole = train(tmp_path / "whole", data, model)
    step1 = ckpt.checkpoint_dir(tmp_path / "whole", 1)
    assert ckpt.read_state(step1)["reference"] == "../../reference"
    resumed = train(
        tmp_path / "resumed", data, model,
        **{"trainer.resume": str(step1), "rollout.placement": "driver", "rollout.engines": 2},
    )  # fmt: skip
    # the resumed step was served by both engines, each on a core of its own (vLLM's own binding would
    # have put both on the same one)
    assert whole.served == {1: {0}, 2: {0}} and resumed.served == {2: {0, 1}}
    assert len(resumed.worker_cores) == 2 and len(set(resumed.worker_cores)) == 2, resumed.worker_cores
    assert whole.worker_cores == []  # one driver engine on the CPU runs in the trainer's process
    assert sorted(whole.tokens) == [1, 2] and sorted(resumed.tokens) == [2]
    # the sampled tokens differ from step to step (the check could not pass by replaying step 1)
    assert whole.tokens[1] != whole.tokens[2]
    assert resumed.reference_path == str((tmp_path / "whole" / ckpt.REFERENCE_DIR).resolve())
    # the resumed run's own checkpoint names the same reference (outside its folder: absolute)
    state = ckpt.read_state(ckpt.checkpoint_dir(tmp_path / "resumed", 2))
    assert state["reference"] == resumed.reference_path

    first, before, after = (
        step_metrics(tmp_path / "whole", 1),
        step_metrics(tmp_path / "whole", 2),
        (step_metrics(tmp_path / "resumed", 2)),
    )
    # RL starts where the warm start ended (the anchor is the warmed model, not the random one) ...
    assert first["actor/kl_ref"] == pytest.approx(0.0, abs=1e-7)
    assert before["actor/kl_ref"] > 1e-6
    # ... and the resumed step is the uninterrupted one: the same tokens on two engines, KL to the same
    # anchor, the same rewards and losses
    assert resumed.tokens[2] == whole.tokens[2]
    compared = [k for k in before if k.startswith(("reward/", "response_length/", "actor/", "rollout/"))]
    compared.remove("rollout/engines_alive")  # the fleets differ on purpose (1.0 and 2.0)
    assert (before["rollout/engines_alive"], after["rollout/engines_alive"]) == (1.0, 2.0)
    for key in ("actor/kl_ref", "actor/kl_loss", "actor/pg_loss", "actor/grad_norm"):
        assert key in compared, key
    for key in compared:
        assert math.isclose(before[key], after[key], rel_tol=1e-5, abs_tol=1e-7), (
            key,
            before[key],
            after[key],
        )
