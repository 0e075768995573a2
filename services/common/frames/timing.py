"""Source frame count, frame rate and frame timestamps: one rule, fed from the container's own timestamps.

Every decoder reads the presentation timestamps (pts) of the frames the stream presents (packets the
edit list hides are left out) with :func:`read_timeline` and derives its frame count and rate with
:func:`source_timing`, so the sampled indices cannot depend on which backend decoded. Header rates are
not used: decord's ``get_avg_fps`` (the stream's ``avg_frame_rate``) and PyAV's
``average_rate or guessed_rate`` come from different places, and on variable-frame-rate files a
matroska header's declared rate can be far from the rate the frames are shown at.

The rate is the mean presentation rate ``(n - 1) / (last pts - first pts)``, computed exactly in the
stream's time base. On a constant-rate mp4 that equals FFmpeg's ``avg_frame_rate`` exactly (frames /
summed frame durations), so the frames stay those of qwen-vl-utils' decord reader.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path


class TimelineError(ValueError):
    """The container's timestamps cannot define a frame rate (fewer than two frames, no timestamps)."""


@dataclass(frozen=True)
class Timeline:
    """Presentation timestamps of the presented frames, sorted, in units of ``time_base`` seconds."""

    pts: tuple[int, ...]
    time_base: Fraction
    hidden: int  # coded frames that the edit list hides (not in ``pts``)


@dataclass(frozen=True)
class SourceTiming:
    total_frames: int
    fps: float

    @property
    def duration(self) -> float:
        return self.total_frames / self.fps

    def timestamps(self, indices: Sequence[int]) -> list[float]:
        """Seconds of source frames ``indices``, as the Qwen-VL processors compute them (index / fps)."""
        return [i / self.fps for i in indices]


def source_timing(timeline: Timeline) -> SourceTiming:
    """Frame count and mean presentation rate of ``timeline``.

    Example: pts 0, 3000, 6000, 9000 at time base 1/90000 → 4 frames spanning 0.1 s → 3 / 0.1 = 30 fps.
    """
    n = len(timeline.pts)
    if n < 2:
        raise TimelineError(f"the stream presents {n} frame(s); a frame rate needs at least two")
    span = (timeline.pts[-1] - timeline.pts[0]) * timeline.time_base
    if span <= 0:
        raise TimelineError(f"the stream's {n} frames all have the same timestamp")
    return SourceTiming(n, float(Fraction(n - 1) / span))


def timeline_of(container, stream) -> Timeline:
    """The timeline of ``stream`` in an open PyAV ``container``, read by demuxing (no decoding).

    Packets without a pts use their dts (containers such as AVI store only one); empty packets are
    the demuxer's end-of-stream markers. The container is left at its end: seek before decoding.
    """
    pts: list[int] = []
    hidden = 0
    for packet in container.demux(stream):
        if not packet.size:
            continue
        if packet.is_discard:
            hidden += 1
            continue
        stamp = packet.pts if packet.pts is not None else packet.dts
        if stamp is None:
            raise TimelineError("a packet carries no timestamp (raw elementary stream?)")
        pts.append(stamp)
    if stream.time_base is None:
        raise TimelineError("the stream has no time base")
    return Timeline(tuple(sorted(pts)), Fraction(stream.time_base), hidden)


def read_timeline(path: Path) -> Timeline:
    """The timeline of the first video stream of the file at ``path`` (opens and closes it)."""
    import av

    with av.open(str(path)) as container:
        if not container.streams.video:
            raise TimelineError("the file has no video stream")
        return timeline_of(container, container.streams.video[0])
