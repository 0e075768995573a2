"""Video decoders behind one registry: open a file, report its stream facts, read frames by index.

Every backend returns RGB uint8 frames (T, H, W, 3) and defines the frame count as the number of
frames the stream presents, so sampling picks the same indices whichever backend decoded. decord's
batch read is the fastest here (it seeks only when that pays); PyAV decodes every codec FFmpeg knows
(VP9, AV1 that decord cannot), so it is the fallback.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np


class DecodeError(RuntimeError):
    """The file could not be decoded (corrupt, truncated, not a video, unsupported codec)."""


class DecodeTimeout(DecodeError):
    """The decoder did not finish in time (decoders can hang on malformed files)."""


@dataclass(frozen=True)
class StreamInfo:
    total_frames: int
    fps: float
    height: int
    width: int
    codec: str

    @property
    def duration(self) -> float:
        return self.total_frames / self.fps


class OpenVideo(Protocol):
    info: StreamInfo

    def read(self, indices: list[int]) -> np.ndarray: ...

    def close(self) -> None: ...


Opener = Callable[[Path, int], OpenVideo]
DECODERS: dict[str, Opener] = {}


def register_decoder(name: str) -> Callable[[Opener], Opener]:
    def wrap(opener: Opener) -> Opener:
        DECODERS[name] = opener
        return opener

    return wrap


def _check_info(path: Path, info: StreamInfo) -> StreamInfo:
    if info.total_frames <= 0:
        raise DecodeError(f"{path}: the video stream has no frames")
    if not info.fps or not np.isfinite(info.fps) or info.fps <= 0:
        raise DecodeError(f"{path}: the video stream reports no frame rate ({info.fps!r})")
    return info


class _DecordVideo:
    def __init__(self, path: Path, threads: int) -> None:
        import decord

        try:
            self._reader = decord.VideoReader(str(path), ctx=decord.cpu(0), num_threads=threads)
        except (decord.DECORDError, RuntimeError) as exc:
            raise DecodeError(f"{path}: decord cannot open it: {_first_line(exc)}") from exc
        first = self._reader[0].shape
        self.info = _check_info(
            path, StreamInfo(len(self._reader), float(self._reader.get_avg_fps()), first[0], first[1], "?")
        )
        self._path = path

    def read(self, indices: list[int]) -> np.ndarray:
        import decord

        try:
            return self._reader.get_batch(indices).asnumpy()
        except (decord.DECORDError, RuntimeError) as exc:
            raise DecodeError(f"{self._path}: decord failed reading frames: {_first_line(exc)}") from exc

    def close(self) -> None:
        del self._reader


class _PyAVVideo:
    def __init__(self, path: Path, threads: int) -> None:
        import av

        try:
            self._container = av.open(str(path))
        except (av.FFmpegError, OSError) as exc:
            raise DecodeError(f"{path}: PyAV cannot open it: {exc}") from exc
        if not self._container.streams.video:
            self._container.close()
            raise DecodeError(f"{path}: the file has no video stream")
        stream = self._container.streams.video[0]
        stream.thread_count = threads
        stream.thread_type = "AUTO" if threads != 1 else "SLICE"
        if stream.codec_context is None or stream.codec_context.codec is None:
            raise DecodeError(f"{path}: no decoder for codec {stream.codec_context}")
        total = stream.frames or self._count_packets(stream)
        rate = stream.average_rate or stream.guessed_rate
        self.info = _check_info(
            path,
            StreamInfo(int(total), float(rate or 0), stream.height, stream.width, stream.codec_context.name),
        )
        self._stream = stream
        self._path = path

    def _count_packets(self, stream) -> int:
        count = sum(1 for p in self._container.demux(stream) if p.size)
        self._container.seek(0)
        return count

    def read(self, indices: list[int]) -> np.ndarray:
        import av

        wanted: dict[int, list[int]] = {}
        for pos, idx in enumerate(indices):
            wanted.setdefault(idx, []).append(pos)
        out: list[np.ndarray | None] = [None] * len(indices)
        last = max(indices)
        seen = 0
        try:
            for i, frame in enumerate(self._container.decode(self._stream)):
                seen = i + 1
                if i in wanted:
                    rgb = frame.to_ndarray(format="rgb24")
                    for pos in wanted[i]:
                        out[pos] = rgb
                if i >= last:
                    break
        except av.FFmpegError as exc:
            raise DecodeError(f"{self._path}: PyAV failed at frame {seen}: {exc}") from exc
        if seen <= last:
            raise DecodeError(
                f"{self._path}: stream ends after {seen} frames but its header promised "
                f"{self.info.total_frames} (truncated file?)"
            )
        return np.stack(out)

    def close(self) -> None:
        self._container.close()


register_decoder("decord")(_DecordVideo)
register_decoder("pyav")(_PyAVVideo)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def call_with_deadline(fn: Callable, timeout_s: float, what: str):
    """Run ``fn()`` in a daemon thread; raise DecodeTimeout if it does not return in ``timeout_s``.

    A hung native decoder cannot be interrupted from Python; the caller reports the failure and the
    worker process is recycled (see preprocess.tasks) so the stuck thread dies with it.
    """
    result: dict[str, object] = {}

    def target() -> None:
        try:
            result["value"] = fn()
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=target, name="reelrl-decode", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise DecodeTimeout(f"{what}: decoding did not finish within {timeout_s:g} s")
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return result["value"]
