"""Frames from the frame store, checked against the model family and turned into vLLM's media inputs.

Videos go to vLLM as ``(frames, metadata)`` and are neither re-sampled nor resized downstream
(``do_sample_frames=False``, ``do_resize=False``): the store already applied the family's reference
sampling and resizing, so rollout, reference and actor see identical pixels, grids and timestamps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from services.common.families import Family
from services.common.frames.params import ParamsMismatch
from services.rollout.samples import RolloutSample


class MediaError(ValueError):
    """A sample's media cannot be used with this model (the message names the sample and the clip)."""


class FrameSource(Protocol):
    """What the engine needs from the frame store (``services.common.frames.FrameStore``).

    ``expect`` is always passed: the canonical decode parameters the clip must have been stored with
    (ParamsMismatch otherwise), or None where the caller opted out or nothing applies (images).
    """

    def load(self, key: str, expect: Any) -> tuple[torch.Tensor, dict[str, Any]]: ...


@dataclass
class SampleMedia:
    images: list[np.ndarray] = field(default_factory=list)  # (H, W, 3) uint8 each
    videos: list[tuple[np.ndarray, dict[str, Any]]] = field(default_factory=list)  # (T, H, W, 3), metadata

    def multi_modal_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.images:
            data["image"] = self.images[0] if len(self.images) == 1 else self.images
        if self.videos:
            data["video"] = self.videos[0] if len(self.videos) == 1 else self.videos
        return data


def video_metadata(meta: dict[str, Any]) -> dict[str, Any]:
    """The metadata transformers' Qwen-VL processors read, from a frame-store ``meta.json``.

    ``fps`` is the SOURCE frame rate and ``frames_indices`` index the source: Qwen2.5-VL derives
    ``second_per_grid_ts`` from them and Qwen3-VL its per-frame timestamps.
    """
    return {
        "fps": float(meta["fps"]),
        "duration": float(meta["duration"]),
        "total_num_frames": int(meta["total_num_frames"]),
        "frames_indices": [int(i) for i in meta["frames_indices"]],
        "width": int(meta["width"]),
        "height": int(meta["height"]),
        "video_backend": str(meta.get("backend", "reelrl")),
        "do_sample_frames": False,
    }


def check_video(
    sample_id: str,
    key: str,
    frames: torch.Tensor,
    meta: dict[str, Any],
    family: Family,
    max_pixels: int | None,
) -> None:
    """Raise MediaError unless the clip fits ``family``'s patch grid and the pixel budget."""
    where = f"sample {sample_id!r}, video {key}"
    if frames.dtype != torch.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
        raise MediaError(
            f"{where}: frames must be uint8 (T, H, W, 3), got {frames.dtype} {tuple(frames.shape)}"
        )
    params = meta.get("params") or {}
    stored = (params.get("patch_size"), params.get("merge_size"))
    if params and stored != (family.patch_size, family.merge_size):
        raise MediaError(
            f"{where}: stored for family {params.get('family')!r} (patch {stored[0]}, merge {stored[1]}), "
            f"but the model is {family.name.value} (patch {family.patch_size}, merge {family.merge_size}); "
            f"preprocess the video for {family.name.value}"
        )
    t, h, w, _ = frames.shape
    if t % family.temporal_patch_size:
        raise MediaError(f"{where}: {t} frames is not a multiple of {family.temporal_patch_size}")
    if h % family.factor or w % family.factor:
        raise MediaError(f"{where}: frame size {h}x{w} is not a multiple of {family.factor}")
    if max_pixels is not None and h * w > max_pixels:
        raise MediaError(f"{where}: frames of {h}x{w} = {h * w} pixels exceed video_max_pixels={max_pixels}")
    if len(meta.get("frames_indices", ())) != t:
        raise MediaError(
            f"{where}: metadata lists {len(meta.get('frames_indices', ()))} frame indices for {t} frames"
        )


def load_media(
    sample: RolloutSample, source: FrameSource, family: Family, video_max_pixels: int | None
) -> SampleMedia:
    """Load and check every image and video of ``sample`` (frames stay memory-mapped where stored so).

    Each video's stored decode parameters must equal the sample's expected ones (``clip_params`` or
    ``video_params``) unless the sample opted out (``check_params=False``): a ParamsMismatch then names
    the sample, the clip and every differing field.
    """
    media = SampleMedia()
    for key, expected in zip(sample.videos, sample.expected_params(), strict=True):
        try:
            frames, meta = source.load(key, expect=expected)
        except ParamsMismatch as exc:
            raise ParamsMismatch(f"sample {sample.id!r}, video {key}: {exc}") from None
        check_video(sample.id, key, frames, meta, family, video_max_pixels)
        media.videos.append((frames.numpy(), video_metadata(meta)))
    for key in sample.images:
        # single-frame entries carry no decode parameters: the processor sizes them to the image budget
        frames, _ = source.load(key, expect=None)
        if frames.ndim != 4 or frames.shape[0] != 1 or frames.dtype != torch.uint8:
            raise MediaError(
                f"sample {sample.id!r}, image {key}: expected one uint8 frame (1, H, W, 3), "
                f"got {frames.dtype} {tuple(frames.shape)}"
            )
        media.images.append(frames[0].numpy())
    return media


def video_tokens(frames: np.ndarray, family: Family) -> int:
    """Placeholder tokens a clip expands to: (T / tp) · (H / p) · (W / p) / merge²."""
    t, h, w, _ = frames.shape
    patches = (t // family.temporal_patch_size) * (h // family.patch_size) * (w // family.patch_size)
    return patches // family.merge_size**2
