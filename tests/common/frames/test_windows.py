"""Clip windows: only frames inside [start, end] are sampled, by every backend, under their own keys.

The clip is 2 s at 10 fps, red for frames 0-9 (t < 1.0 s) and blue for frames 10-19, so the colour of
a sampled frame says where on the timeline it came from.
"""

import os

import pytest
import torch
from pydantic import ValidationError

from services.common.frames import FrameStore, ParamsMismatch, VideoParams, clip_key, decode_clip
from services.common.frames.hashing import content_hash
from services.common.frames.params import ClipWindow
from services.common.frames.sampling import WindowError, frame_indices, window_range
from services.common.frames.synthetic import make_colour_change_video

RED, BLUE = "red", "blue"


@pytest.fixture(scope="module")
def colour_clip(tmp_path_factory):
    return make_colour_change_video(tmp_path_factory.mktemp("window") / "change.mp4")


def colours(frames: torch.Tensor) -> list[str]:
    """Each frame's colour: flat red or flat blue after H.264 (channel means within a few levels)."""
    means = frames.float().mean(dim=(1, 2))
    out = []
    for r, g, b in means.tolist():
        assert g < 8 and ((r > 240 and b < 8) or (b > 240 and r < 8)), (r, g, b)
        out.append(RED if r > b else BLUE)
    return out


def windowed(start, end, **fields) -> VideoParams:
    return VideoParams(fps=None, nframes=4, window={"start": start, "end": end}, **fields)


@pytest.mark.parametrize("decoder", ["decord", "pyav"])
def test_a_window_before_or_after_the_change_holds_only_that_colour(colour_clip, decoder):
    # [0, 0.9]: frames ceil(0)=0 .. floor(9.0)=9; round(linspace(0, 9, 4)) = 0, 3, 6, 9 → all red
    frames, meta = decode_clip(colour_clip, windowed(0.0, 0.9), decoders=[decoder])
    assert colours(frames) == [RED] * 4
    assert meta["source_frames_indices"] == [0, 3, 6, 9]
    # [1.0, 2.5]: frames ceil(10.0)=10 .. min(floor(2.0·10), 19)=19 (the end is past the video's end)
    # → round(linspace(10, 19, 4)) = 10, 13, 16, 19 → all blue
    frames, meta = decode_clip(colour_clip, windowed(1.0, 2.5), decoders=[decoder])
    assert colours(frames) == [BLUE] * 4
    assert meta["source_frames_indices"] == [10, 13, 16, 19]
    # As a pre-cut clip: indices, timestamps, count and duration from the window's first frame.
    assert meta["frames_indices"] == [0, 3, 6, 9]
    assert meta["timestamps"] == pytest.approx([0.0, 0.3, 0.6, 0.9])
    assert (meta["total_num_frames"], meta["duration"]) == (10, pytest.approx(1.0))
    assert (meta["source_total_num_frames"], meta["source_duration"]) == (20, pytest.approx(2.0))
    assert meta["window"] == {"start": 1.0, "end": 2.5, "first_frame": 10, "last_frame": 19, "offset_s": 1.0}
    assert meta["fps"] == pytest.approx(10.0)
    # fps rule inside the window: 10 frames / 10 fps · 2 fps = 2 → raised to min_frames 4
    _, meta = decode_clip(colour_clip, VideoParams(window=ClipWindow(start=1.0, end=2.5)), decoders=[decoder])
    assert meta["source_frames_indices"] == [10, 13, 16, 19]


def test_every_backend_samples_the_same_frames_of_a_straddling_window(colour_clip):
    # [0.15, 1.65]: frames ceil(1.5)=2 .. floor(16.5)=16, 15 frames; linspace(2, 16, 4) =
    # 2, 6.67, 11.33, 16 → 2, 7, 11, 16: two red (t < 1 s), two blue; relative 0, 5, 9, 14
    params = windowed(0.15, 1.65)
    results = [decode_clip(colour_clip, params, decoders=[d]) for d in ("decord", "pyav")]
    for frames, meta in results:
        assert colours(frames) == [RED, RED, BLUE, BLUE]
        assert meta["source_frames_indices"] == [2, 7, 11, 16]
        assert meta["frames_indices"] == [0, 5, 9, 14]
        assert meta["timestamps"] == pytest.approx([0.0, 0.5, 0.9, 1.4])
    (a, meta_a), (b, meta_b) = results
    assert torch.equal(a, b)
    drop = ("backend", "versions", "timings", "codec")
    assert {k: v for k, v in meta_a.items() if k not in drop} == {
        k: v for k, v in meta_b.items() if k not in drop
    }


def test_pyav_seeking_to_the_window_gives_the_same_clip(colour_clip, monkeypatch):
    import services.common.frames.decoders as decoders

    params = windowed(1.0, 2.5)
    expected, meta = decode_clip(colour_clip, params, decoders=["decord"])
    monkeypatch.setattr(decoders, "SEEK_AFTER_S", 0.5)  # frame 10 at 1.0 s: PyAV seeks to it
    frames, seeked_meta = decode_clip(colour_clip, params, decoders=["pyav"])
    assert torch.equal(frames, expected) and seeked_meta["frames_indices"] == meta["frames_indices"]


def test_window_indices_round_like_the_reference():
    # round(linspace(1, 4, 3)) = round(1, 2.5, 4) = 1, 2, 4 (half to even); 1 + round(linspace(0, 3, 3))
    # would give 1, 3, 4: the reference rounds absolute positions.
    assert frame_indices(4, 3, first=1) == [1, 2, 4]
    assert frame_indices(20, 4) == [0, 6, 13, 19]
    assert window_range(None, 20, 10.0) == (0, 19)
    assert window_range(ClipWindow(start=0.15, end=1.65), 20, 10.0) == (2, 16)


def test_windows_outside_the_video_or_too_short_are_refused(colour_clip):
    with pytest.raises(WindowError, match=r"\[2, 3\] s of a 2 s video .* lies outside the video"):
        decode_clip(colour_clip, windowed(2.0, 3.0))
    # [1.95, 2.5]: first frame ceil(19.5) = 20 is past the last frame 19
    with pytest.raises(WindowError, match=r"holds 0 frame\(s\); at least 2 are needed"):
        decode_clip(colour_clip, windowed(1.95, 2.5))
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        windowed(-1.0, 1.0)
    with pytest.raises(ValidationError, match=r"window end \(1.0\) must be after its start \(1.0\)"):
        windowed(1.0, 1.0)
    with pytest.raises(ValidationError, match=r"window\.end"):
        VideoParams(window={"start": 1.0})


def test_window_is_part_of_the_key_and_whole_file_keys_are_unchanged():
    content = "blake3:" + "0" * 64
    # Computed before windows existed: existing stores stay valid.
    assert (
        clip_key(content, VideoParams()) == "5850cca8823edae2f5d53597ec98e79d20260f37cfde0792b42d1f98f897ac36"
    )
    assert "window" not in VideoParams().canonical()
    keys = {
        clip_key(content, VideoParams()),
        clip_key(content, windowed(0.0, 0.9)),
        clip_key(content, windowed(1.0, 2.5)),
        clip_key(content, windowed(1.0, 2.0)),
    }
    assert len(keys) == 4
    # 1 and 1.0 are one window; round trip through the stored canonical form
    assert clip_key(content, windowed(1, 2)) == clip_key(content, windowed(1.0, 2.0))
    canonical = windowed(1, 2).canonical()
    assert canonical["window"] == {"start": 1.0, "end": 2.0}
    restored = VideoParams.from_canonical(canonical)
    assert restored.window == ClipWindow(start=1.0, end=2.0) and restored.canonical() == canonical


def test_store_checks_the_window_on_load(tmp_path, colour_clip):
    store = FrameStore(tmp_path / "frames")
    params = windowed(1.0, 2.5)
    frames, meta = decode_clip(colour_clip, params)
    key = clip_key(content_hash(colour_clip), params)
    store.put(key, frames, meta)
    loaded, loaded_meta = store.load(key, expect=params)
    assert torch.equal(loaded, frames) and loaded_meta["window"]["first_frame"] == 10
    with pytest.raises(
        ParamsMismatch, match=r"window: stored \{'start': 1.0, 'end': 2.5\} != requested None"
    ):
        store.load(key, expect=VideoParams(fps=None, nframes=4))
    with pytest.raises(ParamsMismatch, match="window"):
        store.load(key, expect=windowed(0.0, 0.9))


def test_windowed_frames_equal_qwen_vl_utils_video_start_end(video_dir):
    os.environ.setdefault("FORCE_QWENVL_VIDEO_READER", "decord")
    from qwen_vl_utils import vision_process as ref

    path = str(video_dir / "wide.mp4")  # 3 s at 25 fps
    ele = {"video": path, "fps": 2.0, "video_start": 0.7, "video_end": 2.3}
    (video, ref_meta), _ = ref.fetch_video(ele, return_video_sample_fps=True, return_video_metadata=True)
    for decoder in ("decord", "pyav"):
        frames, meta = decode_clip(path, VideoParams(window={"start": 0.7, "end": 2.3}), decoders=[decoder])
        assert torch.equal(video.permute(0, 2, 3, 1).to(torch.uint8), frames)
        # the reference's indices are absolute: ours keep them as source_frames_indices
        assert meta["source_frames_indices"] == list(ref_meta["frames_indices"])
        # frames ceil(17.5)=18 .. floor(57.5)=57: 40 frames / 25 fps · 2 fps = 3.2 → 4
        assert meta["window"]["first_frame"] == 18 and meta["total_num_frames"] == 40
        assert ref_meta["total_num_frames"] == 40


def test_pyav_falls_back_to_decoding_from_the_start_when_the_seek_fails(colour_clip, monkeypatch):
    """A container whose seek raises (an FFmpegError, not a ValueError) still gives the clip, decoded
    from the first frame (before: the error escaped the decoder)."""
    import av

    import services.common.frames.decoders as decoders

    class NoSeek:
        """The real container, except that seeking anywhere but the start fails."""

        def __init__(self, container):
            self._container = container

        def __getattr__(self, name):
            return getattr(self._container, name)

        def seek(self, offset, **kwargs):
            if offset:
                raise av.FFmpegError(22, "Invalid argument")
            return self._container.seek(offset, **kwargs)

    params = windowed(1.0, 2.5)
    expected, meta = decode_clip(colour_clip, params, decoders=["decord"])
    real_open_stream = decoders._PyAVVideo._open_stream

    def open_stream(self, threads):
        self._container = NoSeek(self._container)
        return real_open_stream(self, threads)

    monkeypatch.setattr(decoders._PyAVVideo, "_open_stream", open_stream)
    monkeypatch.setattr(decoders, "SEEK_AFTER_S", 0.5)  # frame 10 at 1.0 s: PyAV tries to seek
    frames, fallback_meta = decode_clip(colour_clip, params, decoders=["pyav"])
    assert torch.equal(frames, expected) and fallback_meta["frames_indices"] == meta["frames_indices"]
