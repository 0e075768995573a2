"""What enters and leaves a rollout: a sample whose media are frame-store keys, and a group of responses.

Only keys cross process boundaries (Ray actors, task payloads); frames are loaded beside the engine.
"""

from __future__ import annotations

import itertools
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from services.common.frames.params import VideoParams

# (index of the first output token, weight version) for each run of tokens one set of weights produced
VersionSpans = tuple[tuple[int, int], ...]


class RolloutSample(BaseModel):
    """One prompt and its media. Every video must say how it was expected to be decoded, so that a clip
    stored for another budget (frames, pixels, family, sampling rule) is refused, never used silently:
    ``clip_params`` (one ``VideoParams.canonical()`` dict per video, as preprocess output rows carry
    them) or ``video_params`` (VideoParams fields for every video). ``check_params=False`` opts out
    explicitly. Images are single-frame entries resized by the processor: no decode parameters apply."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    prompt: str = Field(description="the user turn's text (already rendered from the problem's template)")
    system: str | None = None
    assistant_prefix: str | None = Field(
        None,
        description="text the assistant turn starts with (after the chat template's generation prompt); "
        "the model continues it, so readers of the answer put it back first (continued_response)",
    )
    images: tuple[str, ...] = Field((), description="frame-store keys of single-frame clips")
    videos: tuple[str, ...] = Field((), description="frame-store keys of clips")
    video_params: dict[str, Any] | None = Field(
        None, description="VideoParams fields every video must have been decoded with"
    )
    clip_params: tuple[dict[str, Any], ...] | None = Field(
        None,
        description="VideoParams.canonical() per video, aligned with videos (preprocess rows' clip_params)",
    )
    check_params: bool = Field(True, description="false: use the videos without checking their parameters")
    offline_output: str | None = Field(None, description="a pre-collected response for mixed groups")
    reward: dict[str, Any] = Field(
        default_factory=dict, description="scoring fields (problem_type, answer, options, ...) for the gate"
    )

    @model_validator(mode="after")
    def _check_params(self) -> RolloutSample:
        where = f"sample {self.id!r}"
        given = [name for name in ("video_params", "clip_params") if getattr(self, name) is not None]
        if not self.check_params:
            if given:
                raise ValueError(f"{where}: check_params is false but {given[0]} is set; drop one of them")
            return self
        if len(given) == 2:
            raise ValueError(f"{where}: give video_params or clip_params, not both")
        if self.videos and not given:
            raise ValueError(
                f"{where}: its {len(self.videos)} video(s) carry no decode parameters; set clip_params "
                "(a preprocess row's clip_params: one VideoParams.canonical() dict per video) or "
                "video_params (VideoParams fields for all videos), or check_params=False to use the "
                "clips unchecked"
            )
        if self.video_params is not None:
            try:
                VideoParams.model_validate(self.video_params)
            except ValidationError as exc:
                raise ValueError(f"{where}: invalid video_params: {exc}") from None
        if self.clip_params is not None:
            if len(self.clip_params) != len(self.videos):
                raise ValueError(
                    f"{where}: {len(self.clip_params)} clip_params for {len(self.videos)} video(s); "
                    "they must be aligned with videos"
                )
            for key, canonical in zip(self.videos, self.clip_params, strict=True):
                try:
                    VideoParams.from_canonical(canonical)
                except (ValidationError, ValueError) as exc:
                    raise ValueError(f"{where}, video {key}: invalid clip_params: {exc}") from None
        return self

    def expected_params(self) -> list[dict[str, Any] | None]:
        """Per video, the canonical decode parameters its clip must have been stored with; None for
        every video when ``check_params`` is false."""
        if self.clip_params is not None:
            return [dict(p) for p in self.clip_params]
        if self.video_params is not None:
            canonical = VideoParams.model_validate(self.video_params).canonical()
            return [dict(canonical) for _ in self.videos]
        return [None for _ in self.videos]


def continued_response(assistant_prefix: str | None, text: str) -> str:
    """The whole assistant turn: a protocol's answer prefix (e.g. MVBench's "Best option:(") and the
    ``text`` the model generated after it. Answers are read from this, never from ``text`` alone: the
    letter of "A) ..." only means something after "Best option:(".
    """
    return (assistant_prefix or "") + text


class RolloutResponse(BaseModel):
    model_config = ConfigDict(frozen=True)

    token_ids: list[int]
    # log π(token | prefix) of each sampled token under the rollout weights (vLLM's raw logprobs, i.e.
    # before temperature / top-p); None for an offline response, which no rollout policy produced.
    logprobs: list[float] | None
    text: str
    finish_reason: str  # "stop", "length", "abort" or "offline"
    offline: bool = False
    # The engine's weight version (0 at start, +1 per push) of the weights that produced the first
    # token: the oldest policy in the response. None exactly for offline responses.
    weight_version: int | None = None
    # (first token index, version) per run of tokens produced by one version, ascending; more than one
    # entry when a push landed while the response was being generated (AsyncRolloutEngine).
    weight_versions: VersionSpans = ()

    @model_validator(mode="after")
    def _check_versions(self) -> RolloutResponse:
        if self.offline:
            if self.weight_version is not None or self.weight_versions:
                raise ValueError("an offline response has no weight version (no rollout policy produced it)")
            return self
        if self.weight_version is None or not self.weight_versions:
            raise ValueError("an online response needs weight_version and weight_versions")
        starts = [start for start, _ in self.weight_versions]
        versions = [version for _, version in self.weight_versions]
        if starts[0] != 0 or any(a >= b for a, b in itertools.pairwise(starts)):
            raise ValueError(f"weight_versions must start at token 0 and ascend, got {self.weight_versions}")
        if starts[-1] >= max(len(self.token_ids), 1):
            raise ValueError(
                f"weight_versions {self.weight_versions} start past the {len(self.token_ids)} tokens"
            )
        if any(a >= b for a, b in itertools.pairwise(versions)):
            raise ValueError(f"weight versions must increase along the response, got {self.weight_versions}")
        if self.weight_version != versions[0]:
            raise ValueError(
                f"weight_version {self.weight_version} is not the first span's version {versions[0]}"
            )
        return self

    def token_weight_versions(self) -> list[int] | None:
        """The weight version of each token (None for an offline response)."""
        if self.offline:
            return None
        ends = [start for start, _ in self.weight_versions[1:]] + [len(self.token_ids)]
        return [
            v for (start, v), end in zip(self.weight_versions, ends, strict=True) for _ in range(start, end)
        ]


class StreamDelta(BaseModel):
    """New tokens of response ``index`` of one request since its previous delta."""

    model_config = ConfigDict(frozen=True)

    sample_id: str
    index: int
    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str | None  # set on the response's last delta
    # set on the response's last delta: (first token index, weight version) over the whole response
    weight_versions: VersionSpans | None = None


class RolloutGroup(BaseModel):
    """The n responses to one sample; ``offline_mask`` tells the trainer which slots are off-policy."""

    model_config = ConfigDict(frozen=True)

    sample_id: str
    prompt_token_ids: list[int]
    responses: list[RolloutResponse]
    # Mean accuracy of the online responses when the mix gate scored them, else None.
    online_accuracy: float | None = None
    # Which of the fleet's engines generated the group (its index; None outside a fleet).
    engine: int | None = None

    @property
    def offline_mask(self) -> list[bool]:
        return [r.offline for r in self.responses]
