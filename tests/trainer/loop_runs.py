"""What tests of the whole loop train on: the colour task's files and a tiny Qwen2.5-VL checkpoint."""

from __future__ import annotations

from pathlib import Path

from services.common.synthetic_tasks import make_task_datasets
from services.common.tiny_models import build_tiny_model


def colour_task(root: Path) -> tuple[dict[str, Path], Path]:
    """The task's files (4 training videos, 1 held out) by name, and the model's folder, under ``root``."""
    data = {k: Path(v) for k, v in make_task_datasets(root / "data", train_videos=4, val_videos=1).items()}
    return data, build_tiny_model("qwen2_5_vl", root / "tiny", seed=0)
