"""Synthetic test videos (H.264 and friends via PyAV): moving shapes, so sampled frames differ."""

from __future__ import annotations

import os
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import av
import numpy as np


def synthetic_frame(i: int, height: int, width: int, fps: float) -> np.ndarray:
    """Frame ``i``: a colour gradient drifting with time plus a square crossing the frame."""
    t = i / fps
    y = np.arange(height, dtype=np.float32)[:, None]
    x = np.arange(width, dtype=np.float32)[None, :]
    img = np.empty((height, width, 3), dtype=np.uint8)
    img[..., 0] = ((x / max(width - 1, 1)) * 255 + t * 40) % 256
    img[..., 1] = ((y / max(height - 1, 1)) * 255 + t * 25) % 256
    img[..., 2] = ((x + y) / 4 + i * 3) % 256
    side = max(4, min(height, width) // 5)
    cx = int((t * 0.2 % 1.0) * (width - side))
    cy = (height - side) // 2
    img[cy : cy + side, cx : cx + side] = (255, 255, 255)
    return img


def make_video(
    path: str | Path,
    seconds: float = 2.0,
    fps: int = 30,
    width: int = 320,
    height: int = 240,
    *,
    codec: str = "libx264",
    gop_seconds: float | None = 1.0,
    crf: int = 23,
    bframes: int | None = None,
) -> Path:
    """Write a synthetic clip (default H.264 mp4, keyframe every second) atomically to ``path``; the
    container follows the suffix (``.ts`` is MPEG-TS). ``bframes`` sets H.264's B-frame count (Main
    profile), as cameras and broadcast encoders write them."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    n = round(seconds * fps)
    with av.open(str(tmp), mode="w") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.width, stream.height = width, height
        stream.pix_fmt = "yuv420p"
        if gop_seconds:
            stream.codec_context.gop_size = max(1, int(gop_seconds * fps))
        if codec == "libx264":
            stream.options = {"crf": str(crf), "preset": "veryfast"}
            if bframes is not None:
                stream.codec_context.profile = "Main"
                stream.options = {**stream.options, "bf": str(bframes)}
        for i in range(n):
            frame = av.VideoFrame.from_ndarray(synthetic_frame(i, height, width, fps), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    os.replace(tmp, path)
    return path


def make_vfr_video(
    path: str | Path,
    times: Sequence[float],
    width: int = 160,
    height: int = 96,
    *,
    codec: str = "libx264",
    time_base: Fraction = Fraction(1, 90000),
) -> Path:
    """Write a variable-frame-rate clip: frame ``i`` is shown at ``times[i]`` seconds (rounded to
    ``time_base``). The stream's declared rate is 30 fps whatever the times are, as in files from
    screen recorders and phones, so header rates and the frames' real rate disagree."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    with av.open(str(tmp), mode="w") as container:
        stream = container.add_stream(codec, rate=30)
        stream.width, stream.height = width, height
        stream.pix_fmt = "yuv420p"
        stream.time_base = stream.codec_context.time_base = time_base
        for i, t in enumerate(times):
            frame = av.VideoFrame.from_ndarray(synthetic_frame(i, height, width, 30), format="rgb24")
            frame.pts, frame.time_base = round(t / time_base), time_base
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    os.replace(tmp, path)
    return path


def make_colour_change_video(
    path: str | Path,
    *,
    seconds: float = 2.0,
    fps: int = 10,
    change_at: float = 1.0,
    before: tuple[int, int, int] = (255, 0, 0),
    after: tuple[int, int, int] = (0, 0, 255),
    width: int = 64,
    height: int = 48,
) -> Path:
    """Write an H.264 clip that is one flat colour, then another from ``change_at`` seconds on: frame
    ``i`` (at ``i / fps`` s) shows ``before`` while ``i / fps < change_at``. Tells which part of the
    timeline a sampled frame came from."""
    frames = np.empty((round(seconds * fps), height, width, 3), dtype=np.uint8)
    for i in range(len(frames)):
        frames[i] = before if i / fps < change_at else after
    return write_rgb_clip(path, frames, fps)


def write_rgb_clip(path: str | Path, frames: np.ndarray, fps: int, *, crf: int = 18) -> Path:
    """``(T, H, W, 3)`` uint8 frames as an H.264 mp4 at ``fps``, written atomically (temp, rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    with av.open(str(tmp), mode="w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.height, stream.width = frames.shape[1:3]
        stream.pix_fmt = "yuv420p"
        stream.options = {"crf": str(crf), "preset": "veryfast"}
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    os.replace(tmp, path)
    return path
