"""Size bounds of a job, checked at submission: a config the API accepts is one whose setup a worker
can finish (a train config listing one dataset 30,000 times was accepted, and its worker went on to
prepare 1.9 million samples at 9 GB).

- Each file list (``data.train_files``, ``data.val_files``, ``warmup.files``) holds at most
  ``REELRL_JOB_MAX_FILES`` files, and each file once. A repeated file is refused, not deduplicated:
  silently dropping the copies would change the sampling weight the list seems to ask for, and a
  path repeated by a template is a mistake its author wants to see. To weigh a file's samples more,
  repeat them inside the file.
- All the files together hold at most ``REELRL_JOB_MAX_SAMPLES`` samples (rows), counted without
  parsing them (lines of JSONL, Parquet's row count); a preprocess job's one dataset too.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from services.common.jobs import JobSettings
    from services.trainer.config import TrainConfig


def count_rows(path: Path, limit: int) -> int:
    """Samples in the dataset file ``path``, counted up to just past ``limit``; 0 for a file that cannot
    be read (the worker reports that one with its reason)."""
    try:
        suffix = path.suffix.lower()
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.ParquetFile(path).metadata.num_rows
        if suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            data = data.get("data", []) if isinstance(data, dict) else data
            return len(data) if isinstance(data, list) else 0
        rows = 0
        with open(path, "rb") as fh:
            for line in fh:
                rows += bool(line.strip())
                if rows > limit:
                    break
        return rows
    except (OSError, ValueError, ImportError):
        return 0


def check_samples(files: Iterable[tuple[str, str | Path]], settings: JobSettings) -> None:
    """Raise ValueError when the ``(config key, file)`` pairs hold more samples than the job's bound,
    naming the key of the file that passes it."""
    total = 0
    for key, file in files:
        total += count_rows(Path(file), settings.max_samples - total)
        if total > settings.max_samples:
            raise ValueError(
                f"{key}: the dataset files hold more than {settings.max_samples} samples, the limit "
                "of one job (REELRL_JOB_MAX_SAMPLES)"
            )


def check_train_job_bounds(config: TrainConfig, settings: JobSettings) -> None:
    """Raise ValueError naming the field and the bound a submitted train config exceeds."""
    lists = {
        "data.train_files": config.data.train_files,
        "data.val_files": config.data.val_files,
        "warmup.files": config.warmup.files,
    }
    for key, files in lists.items():
        repeated = [(f, n) for f, n in Counter(files).items() if n > 1]
        if repeated:
            path, times = repeated[0]
            raise ValueError(
                f"{key} lists {path} {times} times; list each file once (to weigh its samples more, "
                "repeat them inside the file)"
            )
        if len(files) > settings.max_files:
            raise ValueError(
                f"{key} lists {len(files)} files; at most {settings.max_files} are allowed "
                "(REELRL_JOB_MAX_FILES)"
            )
    check_samples(((key, file) for key, files in lists.items() for file in files), settings)
