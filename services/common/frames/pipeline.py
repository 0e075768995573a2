"""decode → sample → resize: the one code path that turns a video file into model-ready frames.

Preprocessing workers run it to fill the store; the loader's ``prefer_cached`` fallback runs the same
function, so a cached clip and a freshly decoded one are bit-identical.
"""

from __future__ import annotations

import time
from functools import cache
from pathlib import Path
from typing import Any

import torch

from services.common.frames.decoders import DECODERS, DecodeError, DecodeTimeout, call_with_deadline
from services.common.frames.params import VideoParams
from services.common.frames.resize import resize_frames, target_size
from services.common.frames.sampling import frame_indices, num_frames

DEFAULT_DECODERS = ("decord", "pyav")


def _decode_with(name: str, path: Path, params: VideoParams, threads: int) -> tuple[torch.Tensor, dict]:
    t0 = time.perf_counter()
    video = DECODERS[name](path, threads)
    try:
        info = video.info
        timing = info.timing
        n = num_frames(params, timing.total_frames, timing.fps)
        indices = frame_indices(timing.total_frames, n)
        raw = video.read(indices)
    finally:
        video.close()
    t1 = time.perf_counter()
    height, width = target_size(params, info.height, info.width, n)
    frames = resize_frames(torch.from_numpy(raw), height, width)
    t2 = time.perf_counter()
    meta = {
        "params": params.canonical(),
        "fps": timing.fps,
        "total_num_frames": timing.total_frames,
        "duration": timing.duration,
        "source_height": info.height,
        "source_width": info.width,
        "codec": info.codec,
        "frames_indices": indices,
        "timestamps": timing.timestamps(indices),
        "sample_fps": n / timing.total_frames * timing.fps,
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

    Decoders are tried in order; a decoder that cannot read the file hands over to the next. A
    timeout is final (the file is what hangs decoders). Raises DecodeError naming the file and every
    decoder's reason, or ValueError when the parameters cannot apply to this video.
    """
    path = Path(path)
    unknown = [d for d in decoders if d not in DECODERS]
    if unknown:
        raise ValueError(f"unknown decoder(s) {unknown}; known: {sorted(DECODERS)}")
    errors: list[str] = []
    for name in decoders:
        try:
            if timeout_s is None:
                return _decode_with(name, path, params, threads)
            return call_with_deadline(
                lambda n=name: _decode_with(n, path, params, threads), timeout_s, str(path)
            )
        except DecodeTimeout:
            raise
        except DecodeError as exc:
            errors.append(f"[{name}] {exc}")
    raise DecodeError(f"{path}: no decoder could read it: " + " | ".join(errors))


@cache
def _versions(decoder: str) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"torch": torch.__version__}
    for dist in ("reelrl", "decord" if decoder == "decord" else "av"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "unknown"
    return out
