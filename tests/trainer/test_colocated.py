"""Colocated placement on CPU: 2 gloo ranks, each hosting a vLLM engine shard in its own process
(vLLM's external_launcher over the ranks' process group), independent of each other. After the loop's
cycle (the trainer's turn, then a bucketed load from the FSDP2 parameters in the engine's), each
engine's logprobs are the new weights' (and no longer the old ones')."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.rollout.environment import core_share
from tests.trainer.colocated_rank import torchrun

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.slow]
TOLERANCE = 1e-4
TIMEOUT_S = 600


def test_two_ranks_each_host_an_engine_and_load_their_own_buckets(tmp_path: Path) -> None:
    from services.common.tiny_models import build_tiny_model

    model = build_tiny_model("qwen2_5_vl", tmp_path / "model")
    out = tmp_path / "out"
    out.mkdir()
    command = torchrun("tests.trainer.colocated_rank", model, out)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    results = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["engine_index"] for r in results] == [0, 1]  # one engine per rank (TP 1)
    # each rank, shard included, keeps to its own half of the host's cores
    cores = sorted(os.sched_getaffinity(0))
    assert [r["cores"] for r in results] == [core_share(cores, r, 2) for r in range(2)]
    assert [r["shard_cores"] for r in results] == [r["cores"] for r in results]
    for r in results:
        assert r["gap_before_vs_old"] < TOLERANCE, r
        assert r["gap_after_vs_new"] < TOLERANCE, r
        assert r["gap_after_vs_old"] > 1e-3, r  # the load took
        assert r["weight_version"] == 1 and r["buckets"] > 10, r
        assert r["slept"] is False, r  # the CPU backend has no sleep mode: the same order, nothing released
        # the loop's cycle: the trainer's turn, then the engine's, the KV cache last
        assert r["phases"] == [
            "sleep", "free_cache", "(actor back)", "reload",
            "(optimizer parked)", "park_optimizer", "wake_weights", "push", "(actor parked)", "park_actor",
            "wake_kv_cache",
        ], r  # fmt: skip
        # a LoRA actor's push: the merged weights by the checkpoint's names, scored as merged
        assert r["gap_lora_vs_merged"] < TOLERANCE and r["gap_lora_vs_base"] > 1e-3, r
    # engines are independent: rank 0 generated while rank 1 was outside vLLM (in one vLLM data-parallel
    # group, rank 0's decode steps would have waited for rank 1's for good)
    assert results[0]["alone_s"] is not None and results[1]["alone_s"] is None


class Recorder:
    """The real fleet, with every call the loop makes on it (and the actor's update) written to
    ``calls``; its sleep and wake report success as a GPU engine's would (the CPU backend has no sleep
    mode, so the real engines keep their memory)."""

    def __init__(self, fleet, calls: list[str], level: int | None) -> None:
        self.fleet, self.calls, self.level = fleet, calls, level
        self.asleep = False

    def rollout(self, *args, **kwargs):
        if self.asleep:  # as a sleeping GPU engine refuses
            raise RuntimeError("cannot generate: the engine is asleep")
        self.calls.append("generate")
        return self.fleet.rollout(*args, **kwargs)

    def sleep(self, level: int | None = None) -> bool:
        level = self.level if level is None else level  # the fleet's own, as the real one does
        if level is None:
            return False
        self.calls.append(f"sleep({level})")
        self.asleep = True
        return True

    def wake_up(self) -> bool:
        self.calls.append("wake_up")
        self.asleep = False
        return True

    def push_weights(self, weights) -> float:
        self.calls.append("load")
        return self.fleet.push_weights(weights)

    def __getattr__(self, name: str):
        return getattr(self.fleet, name)


@pytest.mark.parametrize("estimator", ["grpo", "remax"])
def test_the_loop_sleeps_for_the_update_and_wakes_before_the_load(
    tmp_path: Path, monkeypatch, estimator
) -> None:
    """With ``engine.enable_sleep_mode``, each step runs generate → sleep → update → wake → load (the
    real loop and engine; only sleep and wake are recorded instead of sent, which CPU vLLM refuses).
    ReMax's greedy baseline is generated before the engines sleep (it was generated after, which a
    sleeping engine refuses: every colocated GPU run with ReMax failed its first step)."""
    from services.common.synthetic_tasks import make_task_datasets
    from services.common.tiny_models import build_tiny_model
    from services.rollout.config import sleep_level
    from services.trainer import placement
    from services.trainer.config import load_config
    from services.trainer.loop import run

    data = make_task_datasets(tmp_path / "data", train_videos=4, val_videos=2)
    model = build_tiny_model("qwen2_5_vl", tmp_path / "model")
    values = {
        "data.train_files": f"[{data['colour_mix']}]", "data.val_files": f"[{data['colour_val']}]",
        "data.batch_size": 2, "data.video_min_pixels": 3136, "data.video_max_pixels": 3136,
        "actor.model_path": str(model), "rollout.n": 2, "rollout.engine.enable_sleep_mode": "true",
        "trainer.output_dir": str(tmp_path / "run"), "trainer.total_steps": 2, "trainer.val_freq": 0,
        "trainer.save_freq": 0, "trainer.loggers": "[jsonl]", "algorithm.advantage_estimator": estimator,
    }  # fmt: skip
    if estimator == "remax":
        values["rollout.greedy_baseline"] = "true"
    config = load_config(ROOT / "examples" / "tiny_cpu.yaml", [f"{k}={v}" for k, v in values.items()])
    calls: list[str] = []
    start = placement.start_fleet

    def recorded(cfg, model_path, *, group, **parts):
        awake = cfg.model_copy(deep=True)
        awake.rollout.engine.enable_sleep_mode = False  # the real CPU engines refuse sleep mode
        update = group.update

        def recorded_update(*args, **kwargs):
            calls.append("update")
            return update(*args, **kwargs)

        group.update = recorded_update
        level = sleep_level(cfg.rollout.engine, "driver")  # what the real fleet would sleep at
        return Recorder(start(awake, model_path, group=group, **parts), calls, level)

    monkeypatch.setattr(placement, "start_fleet", recorded)
    result = run(config)
    assert result.steps == 2
    # around each update: asleep right before it, awake and loaded right after, never generating asleep
    updates = [i for i, call in enumerate(calls) if call == "update"]
    assert len(updates) == 2, calls
    for i in updates:
        assert calls[i - 1 : i + 3] == ["sleep(1)", "update", "wake_up", "load"], calls
        assert calls[i - 2] == "generate", calls  # the step's rollout (and ReMax's) came before the sleep
    assert calls.count("sleep(1)") == calls.count("wake_up") == 2, calls


@pytest.mark.parametrize("use_ray", [True, False], ids=["ray", "no-ray"])
def test_one_rank_hosts_its_engine_with_and_without_ray(tmp_path: Path, use_ray: bool) -> None:
    """``actor.world_size: 1`` colocated: on Ray the lone rank joins a world of one for its engine (vLLM's
    external launcher reads RANK and LOCAL_RANK, which a one-rank group never exported before: its
    start failed); without Ray the engine lives in the trainer's own process beside the actor. Two
    steps, so the second rollout comes after the cycle's bucketed load, scored as the engine sampled."""
    from services.common.synthetic_tasks import make_task_datasets
    from services.common.tiny_models import build_tiny_model
    from services.trainer.tracking import read_metrics

    data = make_task_datasets(tmp_path / "data", train_videos=4, val_videos=2)
    model = build_tiny_model("qwen2_5_vl", tmp_path / "model")
    out = tmp_path / "run"
    values = {
        "data.train_files": f"[{data['colour_mix']}]", "data.val_files": f"[{data['colour_val']}]",
        "data.batch_size": 2, "data.video_min_pixels": 3136, "data.video_max_pixels": 3136,
        "actor.model_path": str(model), "rollout.n": 2, "rollout.placement": "colocated",
        "trainer.use_ray": str(use_ray).lower(), "trainer.output_dir": str(out), "trainer.total_steps": 2,
        "trainer.val_freq": 0, "trainer.save_freq": 0, "trainer.loggers": "[jsonl]",
    }  # fmt: skip
    command = [sys.executable, "-m", "services.cli", "train", str(ROOT / "examples" / "tiny_cpu.yaml")]
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"}
    for key in ("RAY_ADDRESS", "MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE"):
        env.pop(key, None)
    done = subprocess.run(
        [*command, *(f"{k}={v}" for k, v in values.items())], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-6000:]
    assert "placement colocated" in done.stderr
    assert ("actor ranks on Ray" in done.stderr) is use_ray
    rows = [r for r in read_metrics(out / "metrics.jsonl") if r["step"] > 0]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:  # the engine's weights after the cycle's push are the actor's
        assert r["actor/rollout_logprob_diff_max"] < 1e-4, r
