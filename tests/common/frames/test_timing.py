"""Frame count, rate and timestamps come from the container's timestamps, by one rule for every backend."""

from fractions import Fraction

import pytest
import torch

from services.common.frames import VideoParams, decode_clip
from services.common.frames.synthetic import make_vfr_video
from services.common.frames.timing import Timeline, TimelineError, read_timeline, source_timing

# 1 s at 30 fps, then 2 s at 10 fps: 50 frames, the last shown at 1 + 19/10 = 2.9 s.
VFR_TIMES = [i / 30 for i in range(30)] + [1 + i / 10 for i in range(20)]


def test_mean_presentation_rate_by_hand():
    # 4 frames, pts 0..9000 at 1/90000 s: 3 intervals over 0.1 s → 30 fps; 4 frames last 4/30 s.
    timing = source_timing(Timeline((0, 3000, 6000, 9000), Fraction(1, 90000), hidden=0))
    assert timing.total_frames == 4 and timing.fps == 30.0
    assert timing.duration == pytest.approx(4 / 30)
    assert timing.timestamps([0, 3]) == [0.0, 0.1]


def test_constant_rate_is_exact():
    # 29.97 fps (30000/1001) as an mp4 stores it: step 1001 at 1/30000. Exact, as FFmpeg's avg rate.
    pts = tuple(range(0, 1001 * 300, 1001))
    assert source_timing(Timeline(pts, Fraction(1, 30000), 0)).fps == 30000 / 1001


@pytest.mark.parametrize(
    ("pts", "message"), [((), "presents 0 frame"), ((7,), "presents 1 frame"), ((5, 5), "same timestamp")]
)
def test_no_rate_without_two_distinct_timestamps(pts, message):
    with pytest.raises(TimelineError, match=message):
        source_timing(Timeline(pts, Fraction(1, 1000), 0))


@pytest.fixture(scope="module")
def vfr_clips(tmp_path_factory):
    root = tmp_path_factory.mktemp("vfr")
    # mp4 stores pts at 1/90000 s; matroska at 1/1000 s and declares the 30 fps rate in its header.
    return [make_vfr_video(root / f"vfr.{ext}", VFR_TIMES) for ext in ("mp4", "mkv")]


def test_variable_frame_rate_clip_gets_the_same_indices_from_every_backend_and_container(vfr_clips):
    # Hand-computed: 50 frames over 2.9 s → 49 / 2.9 = 490/29 fps (≈16.9), duration 50 × 29/490 s.
    # At 2 fps: 50 / (490/29) × 2 = 5.92 → 4 frames (even floor); round(linspace(0, 49, 4)) = 0 16 33 49.
    # Header rates said otherwise: mp4 avg_frame_rate 125/7, matroska 30 (the declared rate).
    fps = 490 / 29
    indices = [0, 16, 33, 49]
    for clip in vfr_clips:
        timeline = read_timeline(clip)
        assert len(timeline.pts) == 50 and timeline.hidden == 0
        decoded = {name: decode_clip(clip, VideoParams(), decoders=[name]) for name in ("decord", "pyav")}
        for name, (_, meta) in decoded.items():
            assert meta["backend"] == name
            assert meta["fps"] == fps and meta["total_num_frames"] == 50, (clip.name, name)
            assert meta["frames_indices"] == indices, (clip.name, name)
            assert meta["timestamps"] == [i / fps for i in indices]
            assert meta["duration"] == pytest.approx(50 * 29 / 490)
        assert torch.equal(decoded["decord"][0], decoded["pyav"][0]), clip.name


def test_a_frame_count_decord_disagrees_with_is_refused(vfr_clips, monkeypatch):
    from services.common.frames import DecodeError

    real = read_timeline

    def one_frame_fewer(path):
        timeline = real(path)
        return Timeline(timeline.pts[:-1], timeline.time_base, timeline.hidden)

    monkeypatch.setattr("services.common.frames.decoders.read_timeline", one_frame_fewer)
    with pytest.raises(DecodeError, match="decord counts 50 frames where the container presents 49"):
        decode_clip(vfr_clips[0], VideoParams(), decoders=["decord"])
