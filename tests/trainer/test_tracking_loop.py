"""The real loop on the tiny model with wandb (offline) and MLflow (its local store) on: a run whose last step
was logged after its newest checkpoint resumes from that checkpoint, recomputes the step, and both
trackers still hold every step exactly once, in one tracker run each."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from services.common.synthetic_tasks import make_task_datasets
from services.common.tiny_models import build_tiny_model
from services.trainer.tracking import read_metrics

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def _train(out: Path, data: dict[str, Path], model: Path, steps: int, cwd: Path) -> None:
    args = {
        "data.train_files": f"[{data['colour_mix']}]",
        "data.val_files": f"[{data['colour_val']}]",
        "data.batch_size": 2,
        "rollout.n": 2,
        "actor.model_path": str(model),
        "trainer.output_dir": str(out),
        "trainer.total_steps": steps,
        "trainer.save_freq": 2,
        "trainer.val_freq": 0,
        "trainer.val_limit": 2,
        "trainer.loggers": "[jsonl,wandb,mlflow]",
        "trainer.wandb.project": "reelrl-test",
    }
    command = [
        sys.executable,
        "-m",
        "services.cli",
        "train",
        str(ROOT / "examples" / "tiny_cpu_trackers.yaml"),
    ]
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "VLLM_LOGGING_LEVEL": "WARNING"}
    env.pop("MLFLOW_TRACKING_URI", None)
    done = subprocess.run(
        [*command, *(f"{k}={v}" for k, v in args.items())], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


def test_resumed_run_holds_every_step_once_in_wandb_and_mlflow(reelrl_home: Path, tmp_path: Path) -> None:
    from mlflow import MlflowClient

    from services.common.trackers import local_store

    data = {
        k: Path(v) for k, v in make_task_datasets(tmp_path / "data", train_videos=8, val_videos=4).items()
    }
    model = build_tiny_model("qwen2_5_vl", tmp_path / "tiny", seed=0)
    out = tmp_path / "run"
    _train(out, data, model, 3, tmp_path)  # checkpoints at steps 2 and 3
    # As if killed after logging step 3 but before its checkpoint: the resume starts from step 2.
    shutil.rmtree(out / "checkpoints" / "step_000003")
    _train(out, data, model, 4, tmp_path)

    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    # training time leaves validation out: the resumed process validates once in its loop, at step 4
    # (its step 3, recomputed, is the row kept for step 3)
    for r in rows[1:]:
        validated = r["perf/val_s"] if "val/accuracy" in r else 0.0
        assert r["perf/elapsed_s"] - r["perf/train_s"] == pytest.approx(validated, abs=1e-6), r["step"]
    assert rows[4]["perf/val_s"] > 0 and rows[4]["perf/train_s"] < rows[4]["perf/elapsed_s"]
    assert "perf/val_s" in rows[0] and not any("perf/val_s" in r for r in rows[1:4])
    record = json.loads((out / "trackers.json").read_text())

    # wandb: two offline run folders (one per process), one run id, each step once
    wandb_cli = Path(sys.executable).with_name("wandb")
    ids, steps = set(), []
    folders = sorted((out / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(folders) == 2
    for path in folders:
        lines = subprocess.run(
            [str(wandb_cli), "leet", "inspect", "--json", str(path)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
        for item in map(json.loads, lines):
            if item["type"] == "run":
                ids.add(item["run"]["run_id"])
                assert item["run"]["config"]["update"]["trainer"]["loggers"] == ["jsonl", "wandb", "mlflow"]
            elif item["type"] == "history":
                steps.append(item["history"]["item"]["_step"])
                assert (
                    "reward/overall" in item["history"]["item"] or "val/accuracy" in item["history"]["item"]
                )
    assert ids == {record["wandb"]["id"]}
    assert sorted(steps) == [0, 1, 2, 3, 4]

    # MLflow: one run, finished, every step of every training metric once, checkpoints by reference
    client = MlflowClient(tracking_uri=local_store(out / "mlruns"))
    runs = client.search_runs([client.get_experiment_by_name("reelrl-tiny").experiment_id])
    assert [r.info.run_id for r in runs] == [record["mlflow"]["id"]]
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.data.params["trainer.total_steps"] == "3"  # params keep the first values
    for key in ("reward/overall", "actor/lr", "timing/step_s"):
        assert sorted(m.step for m in client.get_metric_history(run.info.run_id, key)) == [1, 2, 3, 4], key
    # validation before training and at each run's last step (3, then 4)
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "val/accuracy")) == [0, 3, 4]
    pointers = sorted(a.path for a in client.list_artifacts(run.info.run_id, "checkpoints"))
    assert pointers == [
        "checkpoints/step_000002.json",
        "checkpoints/step_000003.json",
        "checkpoints/step_000004.json",
    ]
    assert not [p for p in (out / "mlruns").rglob("*.safetensors")]
