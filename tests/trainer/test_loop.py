"""The whole loop on real parts: vLLM on CPU, the frame store and worker pool, the reward library, the HF
actor, SQLite. A run killed with SIGKILL resumes from its checkpoint with the same next batch and no
step written twice; a `train` job runs through the Celery task body and reports every step."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from services.common.synthetic_tasks import make_image_task, make_task_datasets
from services.common.tiny_models import build_tiny_model
from services.trainer.data import StatefulLoader
from services.trainer.tracking import read_metrics, run_id_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def assets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("loop-assets")
    out = {k: Path(v) for k, v in make_task_datasets(root / "data", train_videos=16, val_videos=8).items()}
    out["colour_images_mix"] = make_image_task(root / "data", 8)
    out["qwen2_5_vl"] = build_tiny_model("qwen2_5_vl", root / "tiny-qwen2_5_vl", seed=0)
    out["qwen3_vl"] = build_tiny_model("qwen3_vl", root / "tiny-qwen3_vl", seed=0)
    return out


def overrides(assets: dict[str, Path], out: Path, family: str = "qwen2_5_vl", **extra: object) -> list[str]:
    pixels = 4096 if family == "qwen3_vl" else 3136  # one 64x64 / 56x56 frame
    values = {
        "data.train_files": f"[{assets['colour_mix']}]",
        "data.val_files": f"[{assets['colour_val']}]",
        "data.batch_size": 4,
        "data.video_min_pixels": pixels,
        "data.video_max_pixels": pixels,
        "actor.model_path": str(assets[family]),
        "rollout.n": 4,
        "trainer.output_dir": str(out),
        "trainer.val_limit": 4,
        "trainer.loggers": "[jsonl,db]",
        **extra,
    }
    return [f"{k}={v}" for k, v in values.items()]


def _train_cmd(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "services.cli", "train", str(ROOT / "examples" / "tiny_cpu.yaml"), *args]


def test_sigkill_then_resume_continues_with_the_same_batch(assets, reelrl_home: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = overrides(assets, out, **{"trainer.total_steps": 5, "trainer.save_freq": 2, "trainer.val_freq": 0})
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"}
    first = subprocess.Popen(
        _train_cmd(args), cwd=tmp_path, env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    marker = out / "checkpoints" / "step_000002" / "state.json"
    deadline = time.monotonic() + 420
    while not marker.exists():
        if first.poll() is not None:
            pytest.fail(
                f"the first run ended early ({first.returncode}): {first.stderr.read().decode()[-3000:]}"
            )
        if time.monotonic() > deadline:
            os.killpg(first.pid, signal.SIGKILL)
            pytest.fail("no checkpoint after 420 s")
        time.sleep(0.2)
    # The whole process group, vLLM's engine processes included: what a machine dying looks like.
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    killed_at = max(int(r["step"]) for r in read_metrics(out / "metrics.jsonl"))
    assert killed_at >= 2

    second = subprocess.run(
        _train_cmd(args), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert second.returncode == 0, second.stderr[-3000:]

    steps = [int(r["step"]) for r in read_metrics(out / "metrics.jsonl")]
    assert steps == [0, 1, 2, 3, 4, 5], steps  # 0 is the validation before training; none twice
    # The batches are the ones an uninterrupted run draws: the loader's position was restored.
    ids = [json.loads(line)["id"] for line in assets["colour_mix"].read_text().splitlines()]
    loader = StatefulLoader(len(ids), 4, seed=0)
    expected = [[ids[i] for i in loader.next_batch()] for _ in range(5)]
    batches = [r["samples"] for r in read_metrics(out / "batches.jsonl")]
    assert batches == expected
    # The database holds each step once as well.
    from services.common.db.engine import session_scope
    from services.common.db.models import TrainRun, TrainStepMetrics

    with session_scope() as s:
        rows = s.scalars(
            select(TrainStepMetrics.step)
            .where(TrainStepMetrics.run_id == run_id_for(out))
            .order_by(TrainStepMetrics.step)
        ).all()
        run = s.get(TrainRun, run_id_for(out))
    assert list(rows) == [0, 1, 2, 3, 4, 5]
    assert (run.status, run.last_step) == ("finished", 5)
    # max_keep=2 of the shipped config: steps 4 and 5 remain, each loadable as an HF checkpoint.
    kept = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert kept == ["step_000004", "step_000005"]
    from transformers import AutoConfig

    assert (
        AutoConfig.from_pretrained(out / "checkpoints" / "step_000005" / "model").model_type == "qwen2_5_vl"
    )


# MIS forces the old log-probs' own pass and drops the tokens outside its band (none, here)
MIS_RUN = {
    "trainer.total_steps": 2,
    "trainer.val_freq": 0,
    "algorithm.rollout_correction.enabled": "true",
    "algorithm.rollout_correction.mode": "mis",
}


def test_train_job_reports_every_step_and_qwen3_logprobs_match_vllm(
    assets, reelrl_home: Path, tmp_path: Path
) -> None:
    from services.common.jobs import create_job, get_job, job_events
    from services.trainer.config import load_config
    from services.trainer.tasks import train_job

    out = tmp_path / "job-run"
    config = load_config(
        ROOT / "examples" / "tiny_cpu.yaml",
        overrides(assets, out, "qwen3_vl", **MIS_RUN),
    )
    job_id = create_job("train", config.model_dump(mode="json"))
    train_job(job_id)

    job = get_job(job_id)
    assert job.state.value == "succeeded", job.reason
    metrics = [e.data for e in job_events(job_id) if e.type == "metrics"]
    assert [m["step"] for m in metrics] == [0, 1, 2]
    assert job.result["steps"] == 2 and Path(job.result["checkpoint"]).is_dir()
    # the checkpoint names its job: a retry of this job may resume from it, another job's retry not
    assert json.loads((Path(job.result["checkpoint"]) / "state.json").read_text())["job_id"] == job_id
    # Train/infer consistency in the loop itself: the actor scores the sampled tokens as vLLM did.
    # (as the rollout correction measures it: every ratio pi_old / pi_vllm within 1e-4 of 1, nothing
    # dropped by MIS)
    for m in metrics[1:]:
        assert 1 - 1e-4 < m["rollout_corr/ratio_min"] <= m["rollout_corr/ratio_max"] < 1 + 1e-4, m
        assert m["rollout_corr/clipped_frac"] == 0.0 and abs(m["rollout_corr/kl"]) < 1e-4, m


def train_on_ray(assets: dict[str, Path], out: Path, **extra: object) -> list[dict]:
    """Two steps of `reelrl train` with 2 FSDP ranks on Ray and the engine a Ray actor (``extra``: more
    overrides), checked to have run there and logged every step; the metrics rows."""
    args = overrides(
        assets, out,
        **{"trainer.total_steps": 2, "trainer.val_freq": 0, "trainer.use_ray": "true", "actor.world_size": 2,
           **extra},
    )  # fmt: skip
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"}
    proc = subprocess.run(
        _train_cmd(args), cwd=out.parent, env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    # both the ranks and the vLLM engine ran as Ray actors (each in its placement group)
    assert "actor ranks on Ray" in proc.stderr and "rollout engine on Ray" in proc.stderr
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2]
    return rows


def test_two_fsdp_ranks_on_ray_train_end_to_end(assets, reelrl_home: Path, tmp_path: Path) -> None:
    """`trainer.use_ray`: the actor as 2 FSDP ranks in a Ray placement group, the vLLM engine as a Ray
    actor in its own, on
    joint image-video data (still images read from their files beside the engine and on each rank)."""
    out = tmp_path / "ray-run"
    rows = train_on_ray(
        assets, out, **{"data.train_files": f"[{assets['colour_mix']},{assets['colour_images_mix']}]"}
    )
    batches = [json.loads(line)["samples"] for line in (out / "batches.jsonl").read_text().splitlines()]
    used = [i for b in batches for i in b]
    assert any(i.startswith("image-") for i in used) and any(not i.startswith("image-") for i in used)
    for r in rows[1:]:
        # the ranks' shares were scored as vLLM sampled them, and both updated the same weights
        assert r["actor/rollout_logprob_diff_max"] < 1e-4
        assert r["actor/grad_norm"] > 0
    assert (out / "checkpoints" / "step_000002" / "optim_rank1.pt").exists()


def test_lora_on_two_ray_ranks_pushes_merged_weights_to_a_ray_engine(
    assets, reelrl_home: Path, tmp_path: Path
) -> None:
    """`actor.lora` on 2 FSDP ranks on Ray with the engine a Ray actor: the push announces and sends the
    merged weights by the checkpoint's names (rank 0's buckets by reference), so step 2, sampled after
    step 1's adapters moved the policy, is scored by the ranks as vLLM sampled it."""
    out = tmp_path / "ray-lora"
    rows = train_on_ray(
        assets, out,
        **{"actor.lora": "{rank: 8, alpha: 16}", "actor.optim.lr": 1.0e-2, "algorithm.kl.mode": "loss",
           "algorithm.kl.coef": 0.1},
    )  # fmt: skip
    # the ranks' old log-probs of step 2's tokens against vLLM's (KL on: the old ones are computed)
    assert abs(rows[2]["rollout_corr/kl"]) < 1e-4 and rows[2]["rollout_corr/ratio_max"] < 1 + 1e-3, rows[2]
    assert rows[2]["actor/kl_ref"] > 1e-6  # the adapters moved the policy from the base by then
    assert (out / "checkpoints" / "step_000002" / "adapter" / "adapter_model.safetensors").is_file()
