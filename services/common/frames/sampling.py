"""Which source frames a clip keeps: qwen-vl-utils ``smart_nframes`` and its linspace rule."""

from __future__ import annotations

import math

import torch

from services.common.frames.params import FRAME_FACTOR, ClipWindow, VideoParams


class WindowError(ValueError):
    """A clip window that selects too few of the video's frames (or none: it lies outside the video)."""


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


def window_range(window: ClipWindow | None, total_frames: int, video_fps: float) -> tuple[int, int]:
    """First and last source frame inside ``window`` (both included): the whole video when None.

    qwen-vl-utils' ``calculate_video_frame_range``: frame ``i`` is at ``i / fps`` seconds; the first
    frame is the first at or after ``start`` (``ceil(start·fps)``), the last the last at or before
    ``end`` (``floor(end·fps)``), and an end past the video's end stops at its last frame. A window
    that starts at or after the video's end, or that holds fewer than two frames, is refused.

    Example: 20 frames at 10 fps, window [1.0, 2.5] → frames 10..19 (the end is past the last frame).
    """
    if window is None:
        return 0, total_frames - 1
    duration = total_frames / video_fps
    where = f"clip window [{window.start:g}, {window.end:g}] s of a {duration:g} s video ({total_frames} frames at {video_fps:g} fps)"
    if window.start >= duration:
        raise WindowError(
            f"{where}: it starts at or after the video's end; the window lies outside the video"
        )
    first = math.ceil(window.start * video_fps)
    last = min(math.floor(min(window.end, duration) * video_fps), total_frames - 1)
    if last - first + 1 < FRAME_FACTOR:
        raise WindowError(
            f"{where}: it holds {max(last - first + 1, 0)} frame(s); at least {FRAME_FACTOR} are needed"
        )
    return first, last


def frame_indices(total_frames: int, n: int, first: int = 0) -> list[int]:
    """Indices of the kept frames of the ``total_frames`` frames from ``first`` on:
    ``round(linspace(first, first + total - 1, n))``.

    Computed with torch's float32 ``linspace`` and round-half-to-even exactly as the reference, since
    a float64 re-derivation lands on the other side of some .5 boundaries (and, for a window, on its
    absolute bounds: rounding ``first + x`` is not ``first + round(x)`` at .5 when ``first`` is odd).
    """
    return torch.linspace(first, first + total_frames - 1, n).round().long().tolist()
