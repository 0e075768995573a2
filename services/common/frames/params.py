"""Decode parameters of a clip, their defaults, validation, and the content-addressed clip key."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from services.common.families import FamilyName, get_family

# Bump when sampling or resizing changes in a way that changes stored frames: every key changes.
# /2: frames are oriented as displayed and edit lists are honoured by every decoder.
# /3: source frame count and rate come from the container's timestamps (frames.timing), not headers.
# Not bumped for clip windows and frame folders: whole-file clips sample exactly as before, and the
# new rules only apply to keys that carry ``window`` or ``folder_fps``, which no earlier key did.
SAMPLING_VERSION = "qwen-vl-utils-0.0.14/3"

# qwen-vl-utils 0.0.14 defaults (vision_process.py), expressed per merged patch ("token").
FRAME_FACTOR = 2
DEFAULT_FPS = 2.0
DEFAULT_MIN_FRAMES = 4
DEFAULT_MAX_FRAMES = 768
VIDEO_MIN_TOKENS = 128
VIDEO_MAX_TOKENS = 768
MODEL_SEQ_LEN = 128_000
# Upper bounds of what a family can take (beyond them a worker would try to allocate petabytes):
# a frame, or a clip's frames together, of more tokens than the model's whole context, or more
# frames than 8x qwen-vl-utils' own cap.
MAX_FRAMES_LIMIT = 8 * DEFAULT_MAX_FRAMES


class ClipWindow(BaseModel):
    """A span of the source video in seconds of its timeline (frame index / source fps).

    The clip samples only the frames inside it, as qwen-vl-utils does for ``video_start`` /
    ``video_end`` (:func:`services.common.frames.sampling.window_range`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    start: float = Field(ge=0, allow_inf_nan=False)
    end: float = Field(allow_inf_nan=False)

    @model_validator(mode="after")
    def _check(self) -> ClipWindow:
        if self.end <= self.start:
            raise ValueError(f"window end ({self.end}) must be after its start ({self.start})")
        return self

    def canonical(self) -> dict[str, float]:
        # floats always, so a window given as 3 and as 3.0 is one clip
        return {"start": float(self.start), "end": float(self.end)}


class VideoParams(BaseModel):
    """How a video becomes model-ready frames. ``None`` budgets take the family's reference default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    family: FamilyName = FamilyName.qwen2_5_vl
    fps: float | None = Field(default=DEFAULT_FPS, gt=0, le=240)
    nframes: int | None = Field(default=None, ge=FRAME_FACTOR, le=MAX_FRAMES_LIMIT)
    min_frames: int = Field(default=DEFAULT_MIN_FRAMES, ge=1, le=MAX_FRAMES_LIMIT)
    max_frames: int = Field(default=DEFAULT_MAX_FRAMES, ge=FRAME_FACTOR, le=MAX_FRAMES_LIMIT)
    min_pixels: int | None = Field(default=None, gt=0)
    max_pixels: int | None = Field(default=None, gt=0)
    total_pixels: int | None = Field(default=None, gt=0)
    # Sample only this span of the source (None: the whole video).
    window: ClipWindow | None = None
    # Frame rate of a frame-folder source (a directory of numbered images), which no container declares.
    folder_fps: float | None = Field(default=None, gt=0, le=240)

    @model_validator(mode="after")
    def _check(self) -> VideoParams:
        if self.nframes is not None and self.fps is not None:
            raise ValueError("give either fps or nframes, not both (set fps to null to use nframes)")
        if self.nframes is None and self.fps is None:
            raise ValueError("one of fps or nframes is required")
        if self.min_frames > self.max_frames:
            raise ValueError(f"min_frames ({self.min_frames}) exceeds max_frames ({self.max_frames})")
        patch = self.factor**2
        fam = get_family(self.family)
        # one frame may not exceed the whole context; a clip's frames together (each temporal patch
        # of frames shares its tokens) neither
        ceilings = {
            "min_pixels": MODEL_SEQ_LEN * patch,
            "max_pixels": MODEL_SEQ_LEN * patch,
            "total_pixels": MODEL_SEQ_LEN * patch * fam.temporal_patch_size,
        }
        for name, ceiling in ceilings.items():
            value = getattr(self, name)
            if value is not None and value < patch:
                raise ValueError(
                    f"{name}={value} is below one {self.factor}x{self.factor} patch ({patch} pixels) "
                    f"for family {self.family.value}"
                )
            if value is not None and value > ceiling:
                raise ValueError(
                    f"{name}={value} is more than family {self.family.value} can take: at most {ceiling} "
                    f"pixels ({MODEL_SEQ_LEN} tokens of {self.factor}x{self.factor} pixels, the whole context)"
                )
        # every frame gets at least min_pixels (qwen-vl-utils lets min_pixels win over the budget), so
        # the clip's frames at min_pixels must fit the context too, or one clip could fill a disk
        frames = self.nframes if self.nframes is not None else self.max_frames
        floor = frames * self.resolved_min_pixels
        if floor > ceilings["total_pixels"]:
            raise ValueError(
                f"{frames} frames of at least min_pixels={self.resolved_min_pixels} are {floor} pixels, more "
                f"than family {self.family.value} can take in one clip ({ceilings['total_pixels']}); lower "
                f"min_pixels or {'nframes' if self.nframes is not None else 'max_frames'}"
            )
        if self.max_pixels is not None and self.max_pixels < self.resolved_min_pixels:
            raise ValueError(
                f"max_pixels ({self.max_pixels}) is below min_pixels ({self.resolved_min_pixels}"
                f"{'' if self.min_pixels else ', the family default'}); lower min_pixels too"
            )
        return self

    @property
    def factor(self) -> int:
        return get_family(self.family).factor

    @property
    def resolved_min_pixels(self) -> int:
        return self.min_pixels if self.min_pixels is not None else VIDEO_MIN_TOKENS * self.factor**2

    @property
    def resolved_total_pixels(self) -> float:
        # Always a float, so a stored and a given budget serialise (and hash) the same way.
        if self.total_pixels is not None:
            return float(self.total_pixels)
        return MODEL_SEQ_LEN * self.factor**2 * 0.9

    def canonical(self) -> dict[str, Any]:
        """Every parameter that decides the frames, defaults resolved: the identity of a clip.

        ``window`` and ``folder_fps`` appear only when set, so a whole-file clip keeps the key it had
        before they existed.
        """
        fam = get_family(self.family)
        canonical: dict[str, Any] = {
            "family": fam.name.value,
            "patch_size": fam.patch_size,
            "merge_size": fam.merge_size,
            "temporal_patch_size": fam.temporal_patch_size,
            "fps": self.fps,
            "nframes": self.nframes,
            "min_frames": self.min_frames,
            "max_frames": self.max_frames,
            "min_pixels": self.resolved_min_pixels,
            "max_pixels": self.max_pixels,
            "total_pixels": self.resolved_total_pixels,
            "sampling_version": SAMPLING_VERSION,
        }
        if self.window is not None:
            canonical["window"] = self.window.canonical()
        if self.folder_fps is not None:
            canonical["folder_fps"] = float(self.folder_fps)
        return canonical

    @classmethod
    def from_canonical(cls, canonical: dict[str, Any]) -> VideoParams:
        """Rebuild params from a stored ``canonical()`` dict (resolved defaults given explicitly)."""
        fields = {k: canonical[k] for k in cls.model_fields if k in canonical}
        params = cls.model_validate(fields)
        if canonical_json(params.canonical()) != canonical_json(canonical):
            raise ValueError(f"stored parameters {canonical} do not round-trip (sampling version changed?)")
        return params

    def with_overrides(self, overrides: dict[str, Any] | None) -> VideoParams:
        """These params with a sample's ``video_params`` applied (validated like the originals)."""
        if not overrides:
            return self
        merged = self.model_dump()
        merged.update(overrides)
        return VideoParams.model_validate(merged)


def window_overrides(start: Any, end: Any) -> dict[str, Any] | None:
    """``video_params`` restricting a clip to [start, end] seconds of its video (None when a bound is
    missing, empty as in a CSV cell). Validated where the parameters are built, so a bad window fails
    only its own sample."""
    if start in (None, "") or end in (None, ""):
        return None
    return {"window": {"start": start, "end": end}}


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def clip_key(content_hash: str, params: VideoParams) -> str:
    """Key of a clip: the video's content hash plus every decode parameter (hex sha256)."""
    payload = canonical_json({"content": content_hash, "params": params.canonical()})
    return hashlib.sha256(payload.encode()).hexdigest()


class ParamsMismatch(ValueError):
    """A clip exists, but under other decode parameters than the ones asked for."""


def check_params(key: str, stored: dict[str, Any], expect: VideoParams | dict[str, Any] | None) -> None:
    """Raise ParamsMismatch naming every field where ``stored`` (canonical) differs from ``expect``."""
    if expect is None:
        return
    wanted = expect.canonical() if isinstance(expect, VideoParams) else dict(expect)
    diff = diff_params(stored, wanted)
    if diff:
        detail = ", ".join(f"{k}: stored {a!r} != requested {b!r}" for k, (a, b) in diff.items())
        raise ParamsMismatch(f"clip {key} was decoded with other parameters ({detail})")


def diff_params(stored: dict[str, Any], expected: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Fields whose stored value differs from the expected one: name → (stored, expected)."""
    names = sorted(set(stored) | set(expected))
    return {n: (stored.get(n), expected.get(n)) for n in names if stored.get(n) != expected.get(n)}
