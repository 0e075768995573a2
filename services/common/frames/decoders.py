"""Video decoders behind one registry: open a file, report its stream facts, read frames by index.

Every backend returns RGB uint8 frames (T, H, W, 3) defined the same way, so sampling picks the same
indices, timestamps and pixels whichever backend decoded:

- **Frame set**: the frames the file *presents*, after its edit list. A stream-copy cut
  (``ffmpeg -ss … -c copy``) keeps the coded frames back to the previous keyframe and hides them with
  an edit list; players, the container's duration and whoever annotated timestamps see only the
  presented frames, so those are the video. FFmpeg (PyAV) flags the hidden frames as discarded and
  never returns them. decord 0.6 counts them, yet drops them while decoding: its index i is presented
  frame i when read from the start but presented frame i - hidden after a seek, and its last indices
  repeat the final frame (measured). No index shift makes that right, so decord refuses such files and
  the next backend (PyAV) decodes them.
- **Frame count, rate and timestamps**: from the container's own presentation timestamps, by one
  rule that every backend feeds (:mod:`services.common.frames.timing`), never from a header rate.
- **Orientation**: as displayed. A display-matrix rotation by a multiple of 90° is applied; decord
  does it itself, PyAV returns stored pixels and we rotate them. Other angles and mirrored matrices
  are left as stored by both (decord ignores them; an axis-aligned frame cannot show an angle).

decord's batch read is the fastest here (it seeks only when that pays); PyAV decodes every codec FFmpeg
knows (VP9, AV1 that decord cannot), so it is the fallback.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from services.common.frames.timing import (
    SourceTiming,
    Timeline,
    TimelineError,
    read_timeline,
    source_timing,
)


class DecodeError(RuntimeError):
    """The file could not be decoded (corrupt, truncated, not a video, unsupported codec).

    A decoder's own message gives the reason only; :func:`~services.common.frames.decode_clip` names
    the file and the decoders tried, once.
    """


class DecodeTimeout(DecodeError):
    """The decoder did not finish in time (decoders can hang on malformed files)."""


@dataclass(frozen=True)
class StreamInfo:
    timing: SourceTiming
    height: int
    width: int
    codec: str


class OpenVideo(Protocol):
    info: StreamInfo

    def read(self, indices: list[int]) -> np.ndarray: ...

    def close(self) -> None: ...


Opener = Callable[[Path, int], OpenVideo]
# PyAV seeks to the keyframe before the first wanted frame when that frame lies this far (seconds)
# into the file, as a clip window late in a long video does; nearer ones are decoded from the start.
SEEK_AFTER_S = 10.0
log = logging.getLogger(__name__)
DECODERS: dict[str, Opener] = {}


def register_decoder(name: str) -> Callable[[Opener], Opener]:
    def wrap(opener: Opener) -> Opener:
        DECODERS[name] = opener
        return opener

    return wrap


def _timing(path: Path, timeline: Timeline) -> SourceTiming:
    try:
        return source_timing(timeline)
    except TimelineError as exc:
        raise DecodeError(str(exc)) from exc


def _read_timeline(path: Path) -> Timeline:
    """The file's timeline (reads its packets, decodes none)."""
    import av

    try:
        return read_timeline(path)
    except (av.FFmpegError, OSError, TimelineError) as exc:
        raise DecodeError(f"cannot read its frame timestamps: {_first_line(exc)}") from exc


class _DecordVideo:
    def __init__(self, path: Path, threads: int) -> None:
        import decord

        try:
            self._reader = decord.VideoReader(str(path), ctx=decord.cpu(0), num_threads=threads)
            count = len(self._reader)
            # decord applies the display rotation itself: frame 0's shape is the displayed H×W. Reading
            # it decodes, so it fails on files decord opens yet cannot decode (H.264 B-frames in MPEG-TS).
            first = self._reader[0].shape
        except (decord.DECORDError, RuntimeError) as exc:
            raise DecodeError(f"decord cannot decode it: {_first_line(exc)}") from exc
        # decord reports times only as float32 seconds: the timeline is read from the container.
        timeline = _read_timeline(path)
        if timeline.hidden:
            raise DecodeError(
                f"its edit list hides {timeline.hidden} of {count} coded frames and "
                "decord ignores edit lists (wrong count, frames shifted after a seek); another backend "
                "must decode it"
            )
        timing = _timing(path, timeline)
        if count != timing.total_frames:
            raise DecodeError(
                f"decord counts {count} frames where the container presents "
                f"{timing.total_frames}; another backend must decode it"
            )
        self.info = StreamInfo(timing, first[0], first[1], "?")
        self._path = path

    def read(self, indices: list[int]) -> np.ndarray:
        import decord

        try:
            return self._reader.get_batch(indices).asnumpy()
        except (decord.DECORDError, RuntimeError) as exc:
            raise DecodeError(f"decord failed reading frames: {_first_line(exc)}") from exc

    def close(self) -> None:
        del self._reader


class _PyAVVideo:
    def __init__(self, path: Path, threads: int) -> None:
        import av

        try:
            self._container = av.open(str(path))
        except (av.FFmpegError, OSError) as exc:
            raise DecodeError(f"PyAV cannot open it: {_av_reason(exc)}") from exc
        self._path = path
        try:
            self.info = self._open_stream(threads)
        except DecodeError:
            self._container.close()
            raise

    def _open_stream(self, threads: int) -> StreamInfo:
        if not self._container.streams.video:
            raise DecodeError("the file has no video stream")
        stream = self._container.streams.video[0]
        stream.thread_count = threads
        stream.thread_type = "AUTO" if threads != 1 else "SLICE"
        if stream.codec_context is None or stream.codec_context.codec is None:
            raise DecodeError(f"no decoder for codec {stream.codec_context}")
        self._stream = stream
        # Read on a container of its own, so this one decodes from the start without a seek.
        timeline = _read_timeline(self._path)
        timing = _timing(self._path, timeline)
        self._promised = timing.total_frames
        self._pts, self._time_base = timeline.pts, timeline.time_base
        # The display rotation is known only from a decoded frame. Frame 0 is always sampled, so it is
        # kept for read() rather than decoded twice.
        self._frames = self._decode()
        self._first = self._next_frame(0)
        self._quarter_turns = _quarter_turns(self._first.rotation)
        height, width = self._first.height, self._first.width
        if self._quarter_turns % 2:
            height, width = width, height
        return StreamInfo(timing, height, width, stream.codec_context.name)

    def _decode(self):
        import av

        done = 0
        try:
            for frame in self._container.decode(self._stream):
                yield frame
                done += 1
        except av.FFmpegError as exc:
            raise DecodeError(f"truncated or corrupt at frame {done}: {_av_reason(exc)}") from exc

    def _next_frame(self, i: int):
        frame = next(self._frames, None)
        if frame is None:
            raise DecodeError(
                f"truncated or corrupt at frame {i}: the stream ends there, its container lists "
                f"{self._promised} frames"
            )
        return frame

    def read(self, indices: list[int]) -> np.ndarray:
        first = min(indices)
        if (self._pts[first] - self._pts[0]) * self._time_base >= SEEK_AFTER_S:
            frames = self._read_after_seek(indices)
            if frames is not None:
                return frames
        if self._first is None:
            # A second read starts over from the first frame.
            self._container.seek(0)
            self._frames = self._decode()
            self._first = self._next_frame(0)
        wanted: dict[int, list[int]] = {}
        for pos, idx in enumerate(indices):
            wanted.setdefault(idx, []).append(pos)
        out: list[np.ndarray | None] = [None] * len(indices)
        frame, self._first = self._first, None
        for i in range(max(indices) + 1):
            if i:
                frame = self._next_frame(i)
            if i in wanted:
                rgb = np.rot90(frame.to_ndarray(format="rgb24"), self._quarter_turns)
                for pos in wanted[i]:
                    out[pos] = rgb
        return np.stack(out)

    def _read_after_seek(self, indices: list[int]) -> np.ndarray | None:
        """The frames ``indices`` decoded from the keyframe before the first of them, each known by its
        pts (the timeline maps pts to index); None if the decoder does not land at or before that
        frame or leaves one out, and the caller decodes from the start instead."""
        self._frames.close()
        self._first = None  # whatever reads next starts over from the first frame
        index_of = {pts: i for i, pts in enumerate(self._pts)}
        wanted: dict[int, list[int]] = {}
        for pos, idx in enumerate(indices):
            wanted.setdefault(idx, []).append(pos)
        out: list[np.ndarray | None] = [None] * len(indices)
        first, last = min(indices), max(indices)
        import av

        try:
            self._container.seek(self._pts[first], stream=self._stream, backward=True, any_frame=False)
        except av.FFmpegError as exc:
            # A container that cannot seek (broken index, odd muxer) still decodes from the start.
            log.info("%s: seek to frame %d failed (%s); decoding from the start", self._path, first, exc)
            return None
        self._frames = self._decode()
        landed = False
        for frame in self._frames:
            i = index_of.get(frame.pts) if frame.pts is not None else None
            if i is None:
                return None
            if not landed:
                if i > first:
                    return None
                landed = True
            for pos in wanted.get(i, ()):
                out[pos] = np.rot90(frame.to_ndarray(format="rgb24"), self._quarter_turns)
            if i >= last:
                break
        if any(frame is None for frame in out):
            return None
        return np.stack(out)

    def close(self) -> None:
        self._frames.close()
        self._container.close()


def _quarter_turns(rotation: int) -> int:
    """Counter-clockwise quarter turns (``np.rot90``'s ``k``) that show a stored frame as displayed.

    ``rotation`` is PyAV's ``VideoFrame.rotation``: the degrees the display matrix turns the frame
    counter-clockwise (FFmpeg's ``av_display_rotation_get``, in [-180, 180]); 90 → 1, -90 → 3, ±180 → 2.
    Only multiples of 90° apply, as in decord; other angles are left as stored.
    """
    return rotation // 90 % 4 if rotation % 90 == 0 else 0


register_decoder("decord")(_DecordVideo)
register_decoder("pyav")(_PyAVVideo)


# decord prefixes its messages with a time stamp and its C++ source position, and often the path
_DECORD_PREFIX = re.compile(r"^\[[\d:]+\]\s+\S+:\d+:\s*(ERROR\s*)?")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return _DECORD_PREFIX.sub("", text[0])[:300] if text else type(exc).__name__


def _av_reason(exc: BaseException) -> str:
    # FFmpegError's text repeats the errno and the path or the C call; its strerror is the reason
    return getattr(exc, "strerror", None) or _first_line(exc)


def failure_reason(exc: BaseException, path: str | Path | None = None) -> str:
    """One line for ``exc``: its message (its type too unless it is one of ours), without the file's
    path, which whoever reports the failure states once."""
    line = _first_line(exc)
    if path is not None:
        for form in (f"[{path}]", f"{path}: ", f"{path}, ", str(path)):
            line = line.replace(form, "" if form != str(path) else "the file")
    line = line.strip() or type(exc).__name__
    return line if isinstance(exc, DecodeError) else f"{type(exc).__name__}: {line}"


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
        raise DecodeTimeout(f"{what} · decoding did not finish within {timeout_s:g} s")
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return result["value"]
