"""What tests of the whole loop train on: the colour task's files and a tiny Qwen2.5-VL checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from services.common.synthetic_tasks import make_task_datasets
from services.common.tiny_models import build_tiny_model

ROOT = Path(__file__).resolve().parents[2]


def colour_task(root: Path) -> tuple[dict[str, Path], Path]:
    """The task's files (4 training videos, 1 held out) by name, and the model's folder, under ``root``."""
    data = {k: Path(v) for k, v in make_task_datasets(root / "data", train_videos=4, val_videos=1).items()}
    return data, build_tiny_model("qwen2_5_vl", root / "tiny", seed=0)


def colour_config(out: Path, data: dict[str, Path], model: Path, **values: Any) -> Any:
    """``examples/tiny_cpu.yaml`` on the colour task's files and ``model``, writing to ``out``: batches
    of 2 groups of 4 (three sampled responses and the offline answer), no validation, metrics to
    jsonl; ``values``: more dotted overrides (they win)."""
    from services.trainer.config import load_config

    base = {
        "data.train_files": f"[{data['colour_mix']}]", "data.val_files": "[]", "data.batch_size": 2,
        "rollout.n": 4, "actor.model_path": str(model), "trainer.output_dir": str(out),
        "trainer.val_before_train": "false", "trainer.loggers": "[jsonl]",
    }  # fmt: skip
    overrides = [f"{k}={v}" for k, v in {**base, **values}.items()]
    return load_config(ROOT / "examples" / "tiny_cpu.yaml", overrides)


def step_metrics(out: Path, step: int) -> dict[str, float]:
    """The metrics the run in ``out`` logged for ``step``."""
    from services.trainer.tracking import read_metrics

    (found,) = [m for m in read_metrics(out / "metrics.jsonl") if m["step"] == step]
    return found
