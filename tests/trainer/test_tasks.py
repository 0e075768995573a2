"""The ``train`` job kind's retry: it resumes only from a checkpoint of its own job."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.trainer import checkpoints as ckpt
from services.trainer.config import parse_config
from services.trainer.tasks import _continue_own_run


def _config(output_dir: Path, resume: str = "none"):
    return parse_config(
        {
            "data": {"train_files": ["t.jsonl"]},
            "actor": {"model_path": "m"},
            "trainer": {"output_dir": str(output_dir), "resume": resume},
        }
    )


def _checkpoint(output_dir: Path, step: int, job_id: str | None) -> None:
    folder = ckpt.checkpoint_dir(output_dir, step)
    folder.mkdir(parents=True)
    ckpt.write_state(folder, {"step": step, "job_id": job_id})


def test_a_retry_resumes_from_its_own_newest_checkpoint(tmp_path: Path) -> None:
    _checkpoint(tmp_path, 2, "job-a")
    _checkpoint(tmp_path, 4, "job-a")
    first = _config(tmp_path)
    _continue_own_run(first, "job-a", attempt=1)
    assert first.trainer.resume == "none"  # the first attempt does as it was told
    retry = _config(tmp_path)
    _continue_own_run(retry, "job-a", attempt=2)
    assert retry.trainer.resume == "auto"


@pytest.mark.parametrize("newest", ["job-b", None], ids=["another-job", "no-job"])
def test_a_retry_keeps_the_setting_when_the_newest_checkpoint_is_not_its_own(
    tmp_path: Path, newest: str | None
) -> None:
    _checkpoint(tmp_path, 2, "job-a")
    _checkpoint(tmp_path, 4, newest)  # another job (or a run outside any job) wrote here since
    retry = _config(tmp_path)
    _continue_own_run(retry, "job-a", attempt=2)
    assert retry.trainer.resume == "none"


def test_a_retry_without_checkpoints_keeps_the_setting(tmp_path: Path) -> None:
    retry = _config(tmp_path)
    _continue_own_run(retry, "job-a", attempt=3)
    assert retry.trainer.resume == "none"


@pytest.mark.parametrize("writer", ["job-b", None], ids=["another-job", "no-job"])
@pytest.mark.parametrize("attempt", [1, 2])
def test_resume_auto_never_adopts_another_runs_checkpoint(
    tmp_path: Path, writer: str | None, attempt: int
) -> None:
    from services.trainer.tasks import ForeignCheckpoint

    _checkpoint(tmp_path, 4, writer)  # e.g. a duplicate submitted after a client timeout, same output_dir
    config = _config(tmp_path, resume="auto")
    with pytest.raises(ForeignCheckpoint, match=r"trainer.resume=.*step_000004 to continue it on purpose"):
        _continue_own_run(config, "job-a", attempt=attempt)
    # Naming the checkpoint is how to continue it on purpose.
    explicit = _config(tmp_path, resume=str(ckpt.checkpoint_dir(tmp_path, 4)))
    _continue_own_run(explicit, "job-a", attempt=1)
    assert explicit.trainer.resume == str(ckpt.checkpoint_dir(tmp_path, 4))


def test_resume_auto_continues_its_own_checkpoint(tmp_path: Path) -> None:
    _checkpoint(tmp_path, 4, "job-a")
    config = _config(tmp_path, resume="auto")
    _continue_own_run(config, "job-a", attempt=2)
    assert config.trainer.resume == "auto"
