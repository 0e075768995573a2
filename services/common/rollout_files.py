"""Where a run's rollout log lives (``trainer.rollout_log``): ``OUTPUT_DIR/rollouts/step_NNNNNN.jsonl``.
The trainer writes these files (services/trainer/rollout_log.py) and the status page reads them
(services/api/rollouts.py); both name them through here."""

from __future__ import annotations

import re
from pathlib import Path

ROLLOUTS_DIR = "rollouts"
_STEP_FILE = re.compile(r"step_(\d{6,})\.jsonl")


def rollout_name(step: int) -> str:
    """``step_NNNNNN.jsonl``: a step's file in ``OUTPUT_DIR/rollouts/`` (and its trackers' artifact)."""
    return f"step_{step:06d}.jsonl"


def rollout_file(output_dir: Path | str, step: int) -> Path:
    return Path(output_dir) / ROLLOUTS_DIR / rollout_name(step)


def step_of(name: str) -> int | None:
    """The step a file name logs, or None for anything else (a temporary file, a stranger)."""
    match = _STEP_FILE.fullmatch(name)
    return int(match.group(1)) if match else None
