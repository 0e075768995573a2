"""A train job's rollout log as the status page reads it: ``<trainer.output_dir>/rollouts/step_NNNNNN.jsonl``.

With ``trainer.rollout_log`` on, the trainer writes one file per logged step, whole (a temp file renamed
into place), one JSON object per group: the sample, its clips (frame-store keys and the timestamp of
each stored frame), the prompt, the answer, and every response with its reward parts and advantage
(:class:`RolloutGroup`; the writer is ``services/trainer/rollout_log.py``, which the API does not import:
it brings the trainer). A number that was not finite is written as null.

Nothing here takes a path from a client: the folder is the job's own recorded ``trainer.output_dir``
(checked against the data roots when the job was submitted), a step is an int, and a clip key is
used only when that step's log names it (:func:`logged_clips`), so a thumbnail cannot read any other
frame-store entry.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from services.common.jobs import JobInfo
from services.common.json_lines import RecordError, loads_record
from services.common.rollout_files import ROLLOUTS_DIR, rollout_file, step_of

#: a frame-store key as clip_key makes them (hex sha256), or a test's plain name: never a path
CLIP_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
_ENABLE_HINT = "the trainer writes it with trainer.rollout_log: {every: N, max_groups: M}"


class RolloutLogMissing(LookupError):
    """No such log (the job is not a train job, logged nothing, or not that step, or that clip): 404."""


class RolloutLogInvalid(ValueError):
    """A step's log cannot be read: the message names the file, the line and the field (422)."""


class RolloutReward(BaseModel):
    """The reward of one response: ``overall`` and its named parts (``accuracy``, ``format``, a reward
    mix's functions, …), floats (null: not finite)."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, float | None] = Field(init=False)

    overall: float | None
    accuracy: float | None
    format: float | None


class RolloutResponse(BaseModel):
    index: int
    text: str
    reward: RolloutReward
    advantage: float | None = Field(description="the mean of its token advantages (null: not finite)")
    length: int = Field(description="response tokens")
    offline: bool = Field(description="an offline (dataset) answer mixed into the group")
    engine: str | int | None = None
    error: str | None = Field(None, description="why it could not be scored")


class RolloutClip(BaseModel):
    key: str = Field(pattern=CLIP_KEY_PATTERN, description="the clip's frame-store key")
    timestamps: list[float] = Field(
        description="seconds of each stored frame, in order; none for a still image or a clip decoded "
        "without storing (no thumbnails)"
    )


class RolloutGroup(BaseModel):
    """One line of a step's log: a prompt and its group of responses."""

    step: int
    group: int
    sample_id: str
    problem_type: str
    prompt: str
    prompt_full: str | None = None
    answer: Any = None
    clips: list[RolloutClip]
    responses: list[RolloutResponse]


def run_folder(job: JobInfo) -> Path:
    """The job's ``trainer.output_dir`` as recorded in its config; RolloutLogMissing if it has none."""
    if job.kind != "train":
        raise RolloutLogMissing(f"job {job.id} is a {job.kind} job: only train jobs log rollouts")
    trainer = job.config.get("trainer")
    folder = trainer.get("output_dir") if isinstance(trainer, dict) else None
    if not isinstance(folder, str) or not folder:
        raise RolloutLogMissing(f"job {job.id}: its config names no trainer.output_dir")
    return Path(folder)


def step_file(folder: Path, step: int) -> Path:
    return rollout_file(folder, step)


def logged_steps(folder: Path) -> list[int]:
    """Steps with a log file under ``folder``, ascending; none when the folder has no rollouts yet."""
    try:
        names = [p.name for p in (folder / ROLLOUTS_DIR).iterdir()]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(step for name in names if (step := step_of(name)) is not None)


def read_step(job: JobInfo, step: int) -> list[RolloutGroup]:
    """Every group logged at ``step`` of ``job``, in file order."""
    return _read(run_folder(job), step, job.id)


def _read(folder: Path, step: int, job_id: str) -> list[RolloutGroup]:
    path = step_file(folder, step)
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        logged = logged_steps(folder)
        if not logged:
            raise RolloutLogMissing(
                f"job {job_id} logged no rollouts: {folder / ROLLOUTS_DIR} holds no step file ({_ENABLE_HINT})"
            ) from None
        shown = ", ".join(map(str, logged[-20:]))
        raise RolloutLogMissing(
            f"job {job_id} logged no rollouts at step {step}: no {path.name} (logged steps: {shown})"
        ) from None
    except UnicodeDecodeError as exc:
        raise RolloutLogInvalid(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise RolloutLogInvalid(f"{path}: cannot be read ({exc.strerror})") from None
    return _parse(text, path, step)


def _parse(text: str, path: Path, step: int) -> list[RolloutGroup]:
    # "\n" only: the writer leaves U+2028 and other line breaks inside strings unescaped
    return [_group(line, path, n, step) for n, line in enumerate(text.split("\n"), 1) if line.strip()]


def _group(line: str, path: Path, number: int, step: int) -> RolloutGroup:
    where = f"{path}:{number}"
    try:
        record = loads_record(line)
    except RecordError as exc:
        raise RolloutLogInvalid(f"{where}: {exc}") from None
    try:
        group = RolloutGroup.model_validate(record)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'line'}: {e['msg']}"
            for e in exc.errors(include_url=False)[:5]
        )  # fmt: skip
        raise RolloutLogInvalid(f"{where}: {problems}") from None
    if group.step != step:
        raise RolloutLogInvalid(f"{where}: says step {group.step}, in the file of step {step}")
    return group


def logged_clips(job: JobInfo, step: int) -> dict[str, int]:
    """Clip key → frames logged for it (its timestamps), over every group of the step's log.

    Read again only when the file changed (its size or mtime): the page asks this for every thumbnail.
    """
    folder = run_folder(job)
    try:
        stat = step_file(folder, step).stat()
    except OSError:
        return _clips(_read(folder, step, job.id))  # raises, naming what is missing
    return _cached_clips(folder, step, job.id, stat.st_mtime_ns, stat.st_size)


def _clips(groups: list[RolloutGroup]) -> dict[str, int]:
    clips: dict[str, int] = {}
    for group in groups:
        for clip in group.clips:
            clips[clip.key] = max(clips.get(clip.key, 0), len(clip.timestamps))
    return clips


@lru_cache(maxsize=64)
def _cached_clips(folder: Path, step: int, job_id: str, mtime_ns: int, size: int) -> dict[str, int]:
    return _clips(_read(folder, step, job_id))
