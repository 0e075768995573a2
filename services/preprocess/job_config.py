"""The config of a ``preprocess`` job submitted over the API: which dataset, where to write, how to decode.

Paths must lie inside the configured data roots (``REELRL_DATA_ROOTS``): a job names files on the
server, so without roots no path is accepted. Relative paths are taken under the roots. ``out`` (and
the failures file beside it) must be new, or a file an earlier preprocess run wrote and nobody changed
since: a job never replaces a file it did not make (services/common/outputs.py).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from services.common.data_roots import inside_roots, job_roots
from services.common.frames import VideoParams
from services.common.job_bounds import check_samples
from services.common.jobs import JobSettings
from services.common.outputs import OutputTaken, check_output_file, check_usable
from services.preprocess.dataset import InputError, failed_path, resolve_video

_NEW_OUT = "A job writes only new files or its kind's earlier outputs: choose a new out."


class PreprocessJobConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dataset: Path = Field(description="input JSONL under a data root (absolute, or relative to the roots)")
    out: Path = Field(description="output JSONL to write under a data root; failures go beside it")
    video_params: VideoParams = Field(default_factory=VideoParams, description="decode parameters")
    workers: int = Field(
        0, ge=0, le=64, description="decode processes the job starts for itself (0: the running pool)"
    )
    timeout_s: float | None = Field(None, gt=0, description="give up (job failed) after this long")
    retry_failed: bool = Field(False, description="decode again clips that failed in an earlier run")

    @field_validator("dataset")
    @classmethod
    def _dataset_inside_roots(cls, value: Path) -> Path:
        roots = job_roots()
        try:
            path = resolve_video(str(value), roots[0], roots, frame_folders=False)
        except (InputError, OSError) as exc:
            raise ValueError(str(exc)) from None
        check_samples([("dataset", path)], JobSettings())
        return path

    @field_validator("out")
    @classmethod
    def _out_inside_roots(cls, value: Path, info: ValidationInfo) -> Path:
        path = inside_roots(value, job_roots())
        check_usable(path, _NEW_OUT)  # a name too long, a path under a file: before looking at it
        if path.is_dir():
            raise ValueError(f"{value}: is a directory; name the output JSONL file")
        dataset = info.data.get("dataset")
        if dataset is not None and dataset in (path, failed_path(path)):
            return path  # refused below, saying why
        for output in (path, failed_path(path)):
            check_output_file(output, "preprocess", hint=_NEW_OUT)
        return path

    @model_validator(mode="after")
    def _not_in_place(self) -> PreprocessJobConfig:
        from services.preprocess.dispatch import check_not_in_place

        try:
            check_not_in_place(self.dataset, self.out)
        except OutputTaken as exc:
            raise ValueError(f"out: {exc}") from None
        return self
