"""What enters and leaves a rollout: a sample whose media are frame-store keys, and a group of responses.

Only keys cross process boundaries (Ray actors, task payloads); frames are loaded beside the engine.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class RolloutSample(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    prompt: str = Field(description="the user turn's text (already rendered from the problem's template)")
    system: str | None = None
    images: tuple[str, ...] = Field((), description="frame-store keys of single-frame clips")
    videos: tuple[str, ...] = Field((), description="frame-store keys of clips")
    # The decode parameters (VideoParams fields) the clips must have been stored with; a clip decoded
    # under other settings is an error, never used silently. None: not checked.
    video_params: dict[str, Any] | None = None
    offline_output: str | None = Field(None, description="a pre-collected response for mixed groups")
    reward: dict[str, Any] = Field(
        default_factory=dict, description="scoring fields (problem_type, answer, options, ...) for the gate"
    )


class RolloutResponse(BaseModel):
    model_config = ConfigDict(frozen=True)

    token_ids: list[int]
    # log π(token | prefix) of each sampled token under the rollout weights (vLLM's raw logprobs, i.e.
    # before temperature / top-p); None for an offline response, which no rollout policy produced.
    logprobs: list[float] | None
    text: str
    finish_reason: str  # "stop", "length", "abort" or "offline"
    offline: bool = False


class StreamDelta(BaseModel):
    """New tokens of response ``index`` of one request since its previous delta."""

    model_config = ConfigDict(frozen=True)

    sample_id: str
    index: int
    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str | None  # set on the response's last delta


class RolloutGroup(BaseModel):
    """The n responses to one sample; ``offline_mask`` tells the trainer which slots are off-policy."""

    model_config = ConfigDict(frozen=True)

    sample_id: str
    prompt_token_ids: list[int]
    responses: list[RolloutResponse]
    # Mean accuracy of the online responses when the mix gate scored them, else None.
    online_accuracy: float | None = None

    @property
    def offline_mask(self) -> list[bool]:
        return [r.offline for r in self.responses]
