"""The one sample model of the system (SPEC §2): what training and evaluation read, how it is loaded
from JSON / JSONL / Parquet, and how the Video-R1 / EasyVideoR1 schema converts into it.

Services turn a :class:`Sample` into their own views (the reward sample, the rollout sample) through
:func:`reward_fields` and the rollout's adapter; only paths and frame-store keys travel with it.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from services.common.coords import BoxSpace, convert_answer_boxes, family_frame_size
from services.common.families import FamilyName
from services.common.json_lines import MAX_DEPTH, RecordError, loads_record

DataType = Literal["video", "image", "text"]
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_CLIP_FIELDS = frozenset({"width", "height", "duration"})


class SampleError(ValueError):
    """A record that cannot become a :class:`Sample`; the message names the file, record and field."""


class Sample(BaseModel):
    """One question about zero or more videos or images. Unknown fields are kept (``model_extra``)."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)

    id: str = Field("", description="stable id; derived from the content when absent")
    problem: str = Field(min_length=1)
    problem_type: str = Field(min_length=1, description="canonical reward type or an alias (SPEC §4)")
    data_type: DataType = "text"
    videos: tuple[str, ...] = ()
    images: tuple[str, ...] = ()
    options: list[str] | dict[str, str] | None = None
    answer: Any = None
    offline_output: str | None = None
    video_params: dict[str, Any] | None = None
    # In which space ground-truth boxes are written: pixels of the original frame (most datasets),
    # relative 0-1, or relative 0-1000. Converted into the model family's space by reward_fields.
    box_space: BoxSpace = "pixels"
    # Written by `reelrl preprocess`: frame-store keys aligned with videos (then images), and each
    # clip's decode parameters (VideoParams.canonical()) that consumers check the stored clip against.
    clips: tuple[str, ...] | None = None
    clip_params: tuple[dict[str, Any], ...] | None = None

    @model_validator(mode="before")
    @classmethod
    def _fill(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            raise ValueError(f"a sample must be a JSON object, got {type(data).__name__}")
        data = dict(data)
        if data.get("answer") is None and data.get("solution") is not None:
            data["answer"] = data["solution"]
        if "data_type" not in data or data["data_type"] is None:
            data["data_type"] = "video" if data.get("videos") else "image" if data.get("images") else "text"
        if data.get("id") in (None, ""):
            data["id"] = content_id(data)
        return data

    @field_validator("id", mode="before")
    @classmethod
    def _id_text(cls, value: Any) -> str:
        return str(value)

    @field_validator("answer", mode="before")
    @classmethod
    def _unwrap(cls, value: Any) -> Any:
        if not _finite(value):
            raise ValueError("holds a non-finite number (NaN or infinity)")
        if isinstance(value, str):
            match = _ANSWER_TAG.search(value)
            return (match.group(1) if match else value).strip()
        return value

    @field_validator("videos", "images", mode="before")
    @classmethod
    def _paths(cls, value: Any) -> Any:
        if value is None:
            return ()
        if isinstance(value, str):
            return (value,)
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v for v in value):
            raise ValueError("must be a list of non-empty paths")
        return tuple(value)

    @model_validator(mode="after")
    def _check(self) -> Sample:
        if self.videos and self.images:
            raise ValueError("a sample holds videos or images, never both")
        media = {"video": self.videos, "image": self.images, "text": ()}[self.data_type]
        if self.data_type != "text" and not media:
            raise ValueError(f"data_type is {self.data_type!r} but the sample lists no {self.data_type}s")
        if self.data_type == "text" and (self.videos or self.images):
            raise ValueError("data_type is 'text' but the sample lists media")
        if self.clips is not None:
            if len(self.clips) != len(self.media):
                raise ValueError(f"{len(self.clips)} clip keys for {len(self.media)} media paths")
            if self.clip_params is not None and len(self.clip_params) != len(self.clips):
                raise ValueError(f"{len(self.clip_params)} clip_params for {len(self.clips)} clips")
        return self

    @property
    def media(self) -> tuple[str, ...]:
        return self.videos or self.images

    def extra(self, name: str, default: Any = None) -> Any:
        return (self.model_extra or {}).get(name, default)


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list | tuple):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


def content_id(data: dict[str, Any]) -> str:
    """First 16 hex digits of sha256 over the fields that make a sample what it is."""
    fields = {k: data.get(k) for k in ("problem", "problem_type", "videos", "images", "options", "answer")}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:16]


# --- Video-R1 / EasyVideoR1 -------------------------------------------------------------------------------

_VIDEO_R1_TYPES = {"free-form": "open-ended", "OCR": "ocr"}


def from_video_r1(record: dict[str, Any]) -> dict[str, Any]:
    """A Video-R1 / EasyVideoR1 record (`path`, `solution`, `process`, …) as :class:`Sample` fields.

    ``process`` (the chain of thought) plus ``solution`` becomes ``offline_output``, the pre-collected
    trajectory mixed groups learn from; both are kept as they are in the extra fields too.
    """
    out = {k: v for k, v in record.items() if k not in ("path", "problem_id")}
    if record.get("problem_id") is not None and not record.get("id"):
        out["id"] = str(record["problem_id"])
    kind = record.get("data_type") or "video"
    path = record.get("path")
    if isinstance(path, str) and path:
        out["images" if kind == "image" else "videos"] = [path]
    out["data_type"] = kind
    ptype = record.get("problem_type")
    if isinstance(ptype, str):
        out["problem_type"] = _VIDEO_R1_TYPES.get(ptype, ptype)
    solution = record.get("solution")
    if solution is not None and record.get("answer") is None:
        out["answer"] = solution
    process, sol = record.get("process"), record.get("solution")
    if record.get("offline_output") is None and isinstance(process, str) and isinstance(sol, str):
        sep = "" if process.endswith("\n") or not process else "\n"
        out["offline_output"] = f"{process}{sep}{sol}" if process.strip() else sol
    return out


def _looks_video_r1(record: dict[str, Any]) -> bool:
    return "path" in record and "videos" not in record and "images" not in record


def to_sample(record: Any, *, where: str) -> Sample:
    """Validate one record (native or Video-R1 schema); errors name ``where`` and the field."""
    if isinstance(record, dict) and _looks_video_r1(record):
        record = from_video_r1(record)
    try:
        return Sample.model_validate(record)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'record'}: {e['msg']}" for e in exc.errors()
        )
        raise SampleError(f"{where}: {problems}") from None


# --- loaders ----------------------------------------------------------------------------------------------


def read_records(path: Path) -> list[tuple[str, Any]]:
    """Raw records of a JSON (list, or ``{"data": [...]}``), JSONL or Parquet file, each with where it
    stands (``file:line`` or ``file#index``)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        records = []
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    records.append((f"{path}:{n}", loads_record(line)))
                except RecordError as exc:
                    raise SampleError(f"{path}:{n}: {exc}") from None
        return records
    if suffix == ".json":
        text = path.read_text(encoding="utf-8")
        try:  # a list of records (or {"data": [...]}): two levels above a record's own
            data = loads_record(text, max_depth=MAX_DEPTH + 2)
        except RecordError as exc:
            raise SampleError(f"{path}: {exc}") from None
        if isinstance(data, dict) and isinstance(data.get("data"), list):
            data = data["data"]
        if not isinstance(data, list):
            raise SampleError(f"{path}: a JSON dataset is a list of samples (or {{'data': [...]}})")
        return [(f"{path}#{i}", r) for i, r in enumerate(data)]
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        return [(f"{path}#{i}", r) for i, r in enumerate(table.to_pylist())]
    raise SampleError(f"{path}: unknown dataset format {suffix!r} (use .json, .jsonl or .parquet)")


def load_samples(paths: Path | str | Iterable[Path | str]) -> list[Sample]:
    """Every sample of one or more dataset files; the first invalid record raises, naming it.

    Ids must be unique across the files: two records with one id would share results and metrics.
    """
    if isinstance(paths, str | Path):
        paths = [paths]
    samples: list[Sample] = []
    seen: dict[str, str] = {}
    for path in paths:
        for where, record in read_records(Path(path)):
            sample = to_sample(record, where=where)
            if sample.id in seen:
                raise SampleError(f"{where}: duplicate id {sample.id!r} (first at {seen[sample.id]})")
            seen[sample.id] = where
            samples.append(sample)
    return samples


# --- views for the services --------------------------------------------------------------------------------


def reward_fields(
    sample: Sample, family: FamilyName | str, clip_meta: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The reward library's sample (a dict its ``RewardSample`` accepts) for ``sample`` answered by a
    model of ``family``: boxes in the family's coordinate space, and the first clip's ``duration`` and
    frame size (in that space) for the hedging defences of the grounding types."""
    # A dataset's own fields ride along as extras, except the names the reward sample types itself:
    # those come from the clip (Video-MME's "duration": "short" is a category, not seconds).
    extras = {k: v for k, v in (sample.model_extra or {}).items() if k not in _CLIP_FIELDS}
    fields: dict[str, Any] = {
        **extras,
        "id": sample.id,
        "problem": sample.problem,
        "problem_type": sample.problem_type,
        "data_type": sample.data_type,
        "answer": sample.answer,
    }
    if sample.options is not None:
        fields["options"] = sample.options
    meta = clip_meta[0] if clip_meta else None
    original = resized = None
    if meta is not None:
        original = (float(meta["source_width"]), float(meta["source_height"]))
        resized = (float(meta["width"]), float(meta["height"]))
        fields["width"], fields["height"] = family_frame_size(family, resized)
        if meta.get("duration"):
            fields["duration"] = float(meta["duration"])
    try:
        fields["answer"] = convert_answer_boxes(sample.answer, family, original, resized, sample.box_space)
    except ValueError as exc:
        raise SampleError(f"sample {sample.id!r}: {exc}") from None
    return fields
