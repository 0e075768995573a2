"""bench/gpu/run.sh --dry-run on CPU: the GPU script's code path (colocated cycle, then the driver
engine) with the tiny model, so it cannot rot while no GPU is lent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
KEYS = ("tokens_per_s", "update_s", "sleep_s", "wake_s", "sync_s", "step_s", "peak_memory_gib")


def test_the_gpu_script_dry_run_writes_every_figure(tmp_path: Path) -> None:
    results = tmp_path / "gpu_results.json"
    env = {**os.environ, "PYTHON": sys.executable, "RESULTS": str(results)}
    env.pop("OUT", None)
    done = subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu" / "run.sh"), "--dry-run"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    figures = json.loads(results.read_text())
    assert set(figures) == {f"gpu_{mode}_{key}" for mode in ("colocated", "driver") for key in KEYS}
    assert figures["gpu_colocated_tokens_per_s"] > 0 and figures["gpu_driver_tokens_per_s"] > 0
    assert figures["gpu_colocated_sync_s"] > 0 and figures["gpu_driver_sync_s"] > 0
