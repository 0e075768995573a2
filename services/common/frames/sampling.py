"""Which source frames a clip keeps: qwen-vl-utils ``smart_nframes`` and its linspace rule."""

from __future__ import annotations

import math

import torch

from services.common.frames.params import FRAME_FACTOR, VideoParams


def _floor(x: float, factor: int) -> int:
    return math.floor(x / factor) * factor


def _ceil(x: float, factor: int) -> int:
    return math.ceil(x / factor) * factor


def _round(x: float, factor: int) -> int:
    return round(x / factor) * factor


def num_frames(params: VideoParams, total_frames: int, video_fps: float) -> int:
    """Number of frames to sample from a video of ``total_frames`` at ``video_fps``.

    Same arithmetic as qwen-vl-utils ``smart_nframes``: ``total/fps_src*fps`` clamped to
    [min_frames, max_frames] and to the video, then floored to an even count.
    """
    if params.nframes is not None:
        n = _round(params.nframes, FRAME_FACTOR)
    else:
        min_frames = _ceil(params.min_frames, FRAME_FACTOR)
        max_frames = _floor(params.max_frames, FRAME_FACTOR)
        n = total_frames / video_fps * params.fps
        n = min(min(max(n, min_frames), max_frames), total_frames)
        n = _floor(n, FRAME_FACTOR)
    if not FRAME_FACTOR <= n <= total_frames:
        raise ValueError(
            f"cannot sample {n} frames from a video of {total_frames} frames "
            f"(need between {FRAME_FACTOR} and the video's frame count)"
        )
    return n


def frame_indices(total_frames: int, n: int) -> list[int]:
    """Indices of the kept frames: ``round(linspace(0, total-1, n))``.

    Computed with torch's float32 ``linspace`` and round-half-to-even exactly as the reference, since
    a float64 re-derivation lands on the other side of some .5 boundaries.
    """
    return torch.linspace(0, total_frames - 1, n).round().long().tolist()
