"""decode → sample → resize: the one code path that turns a video file into model-ready frames.

Preprocessing workers run it to fill the store; the loader's ``prefer_cached`` fallback runs the same
function, so a cached clip and a freshly decoded one are bit-identical.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import torch

from services.common.frames.decoders import (
    DECODERS,
    DecodeError,
    DecodeTimeout,
    call_with_deadline,
    failure_reason,
)
from services.common.frames.folder import FrameFolder
from services.common.frames.params import VideoParams
from services.common.frames.resize import resize_frames, target_size
from services.common.frames.sampling import frame_indices, num_frames, window_range
from services.common.frames.timing import SourceTiming

DEFAULT_DECODERS = ("decord", "pyav")
# A directory is read by the frame-folder reader whatever the decoders are: no video decoder opens one.
FOLDER_BACKEND = "folder"


@contextmanager
def _decoder_failure(path: Path) -> Iterator[None]:
    """Whatever a decoder raises on a file (decord's and FFmpeg's own errors, a bug in a backend) is
    that decoder's failure, a DecodeError, so the next decoder is tried. Only what this module raises
    itself outside the decoder (parameters that cannot apply: ValueError) stays what it is."""
    try:
        yield
    except DecodeError:
        raise
    except Exception as exc:
        raise DecodeError(failure_reason(exc, path)) from exc


def _open(name: str, path: Path, params: VideoParams, threads: int):
    if name == FOLDER_BACKEND:
        return FrameFolder(path, params.folder_fps)
    return DECODERS[name](path, threads)


def _decode_with(name: str, path: Path, params: VideoParams, threads: int) -> tuple[torch.Tensor, dict]:
    t0 = time.perf_counter()
    if name != FOLDER_BACKEND and params.folder_fps is not None:
        raise ValueError(
            f"{path}: folder_fps applies to frame folders only; this is a file (drop folder_fps)"
        )
    with _decoder_failure(path):
        video = _open(name, path, params, threads)
        info = video.info
    try:
        timing = info.timing
        first, last = window_range(params.window, timing.total_frames, timing.fps)
        total = last - first + 1
        n = num_frames(params, total, timing.fps)
        source_indices = frame_indices(total, n, first)
        with _decoder_failure(path):
            raw = video.read(source_indices)
    finally:
        with _decoder_failure(path):
            video.close()
    t1 = time.perf_counter()
    height, width = target_size(params, info.height, info.width, n)
    frames = resize_frames(torch.from_numpy(raw), height, width)
    t2 = time.perf_counter()
    # A windowed clip is described as the pre-cut clip the official protocols feed: its frame count,
    # duration, indices and timestamps count from the window's first frame, so the model's temporal
    # positions (Qwen3-VL's timestamps) start at 0. The source's own facts keep ``source_`` names.
    indices = [i - first for i in source_indices]
    clip_timing = SourceTiming(total, timing.fps)
    meta = {
        "params": params.canonical(),
        "fps": timing.fps,
        "total_num_frames": total,
        "duration": clip_timing.duration,
        "source_total_num_frames": timing.total_frames,
        "source_duration": timing.duration,
        "source_height": info.height,
        "source_width": info.width,
        "codec": info.codec,
        "window": None
        if params.window is None
        else {
            **params.window.canonical(),
            "first_frame": first,
            "last_frame": last,
            "offset_s": first / timing.fps,
        },
        "frames_indices": indices,
        "timestamps": clip_timing.timestamps(indices),
        "source_frames_indices": source_indices,
        "sample_fps": n / total * timing.fps,
        "num_frames": n,
        "height": height,
        "width": width,
        "backend": name,
        "versions": dict(_versions(name)),
        "timings": {"decode_s": t1 - t0, "resize_s": t2 - t1},
    }
    return frames, meta


def decode_clip(
    path: str | Path,
    params: VideoParams,
    *,
    decoders: tuple[str, ...] | list[str] = DEFAULT_DECODERS,
    threads: int = 1,
    timeout_s: float | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Frames (T, H, W, 3) uint8 and their metadata for ``path`` under ``params``.

    Decoders are tried in order; a decoder that cannot read the file, whatever it raises, hands over
    to the next. A timeout is final (the file is what hangs decoders). A directory is a frame folder
    (:mod:`services.common.frames.folder`), read at ``params.folder_fps``. Raises DecodeError with
    one line, ``file · decoders tried · each one's reason`` (the path once), or ValueError when the
    parameters cannot apply to this video (WindowError for a window outside it).
    """
    path = Path(path)
    unknown = [d for d in decoders if d not in DECODERS]
    if unknown:
        raise ValueError(f"unknown decoder(s) {unknown}; known: {sorted(DECODERS)}")
    if path.is_dir():
        decoders = (FOLDER_BACKEND,)
    errors: list[str] = []
    for name in decoders:
        try:
            if timeout_s is None:
                return _decode_with(name, path, params, threads)
            return call_with_deadline(
                lambda n=name: _decode_with(n, path, params, threads), timeout_s, f"{path} · {name}"
            )
        except DecodeTimeout:
            raise
        except DecodeError as exc:
            errors.append(f"{name}: {failure_reason(exc, path)}")
    tried = ", ".join(decoders)
    raise DecodeError(f"{path} · {tried} · no decoder could read it: " + "; ".join(errors))


@cache
def _versions(decoder: str) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"torch": torch.__version__}
    library = {"decord": "decord", FOLDER_BACKEND: "pillow"}.get(decoder, "av")
    for dist in ("reelrl", library):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "unknown"
    return out
