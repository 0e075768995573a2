import time

import av
import numpy as np
import pytest
import torch

from services.common.frames import DecodeError, DecodeTimeout, VideoParams, decode_clip
from services.common.frames.decoders import DECODERS, register_decoder
from services.common.frames.resize import resize_frames
from services.common.frames.synthetic import make_video, synthetic_frame


@pytest.fixture(scope="module")
def av1(tmp_path_factory):
    return make_video(
        tmp_path_factory.mktemp("av1") / "clip.mp4", seconds=2, width=160, height=120, codec="libsvtav1"
    )


def test_fallback_decodes_what_decord_cannot(av1):
    # decord 0.6 has no AV1 decoder; PyAV (FFmpeg's dav1d) has.
    with pytest.raises(DecodeError, match=r"clip\.mp4 · decord · no decoder could read it: decord: "):
        decode_clip(av1, VideoParams(), decoders=["decord"])
    frames, meta = decode_clip(av1, VideoParams())
    assert meta["backend"] == "pyav" and frames.shape[0] == 4 and meta["codec"] in ("libdav1d", "av1")


def test_vp9_decodes_identically_with_both(tmp_path):
    vp9 = make_video(tmp_path / "clip.webm", seconds=2, width=160, height=120, codec="libvpx-vp9")
    a, _ = decode_clip(vp9, VideoParams(), decoders=["decord"])
    b, _ = decode_clip(vp9, VideoParams(), decoders=["pyav"])
    assert torch.equal(a, b)


def test_decoders_agree_on_h264(video_dir):
    a, ma = decode_clip(video_dir / "short.mp4", VideoParams(), decoders=["decord"])
    b, mb = decode_clip(video_dir / "short.mp4", VideoParams(), decoders=["pyav"])
    assert torch.equal(a, b) and ma["frames_indices"] == mb["frames_indices"]


def _corrupt_files(tmp_path, video_dir):
    text = tmp_path / "notes.mp4"
    text.write_text("this is not a video\n" * 50)
    truncated = tmp_path / "truncated.mp4"
    data = (video_dir / "short.mp4").read_bytes()
    truncated.write_bytes(data[: len(data) // 3])
    empty = tmp_path / "empty.mp4"
    empty.write_bytes(b"")
    return [text, truncated, empty]


def test_corrupt_inputs_raise_one_line_naming_the_file_once(tmp_path, video_dir):
    for path in _corrupt_files(tmp_path, video_dir):
        with pytest.raises(DecodeError) as err:
            decode_clip(path, VideoParams())
        message = str(err.value)
        assert message.startswith(f"{path} · decord, pyav · "), message
        assert message.count(str(path)) == 1 and "\n" not in message, message
        assert "decord: " in message and "pyav: " in message, message
        assert ".cc:" not in message, message  # decord's C++ source positions stay out


def _faststart_mp4(path, frames=60):
    """An mp4 whose index precedes its frames, as web encoders write it: cut short, its container still
    lists every frame. One encoder thread: x264's threads make the bytes differ from run to run."""
    with av.open(str(path), mode="w", options={"movflags": "faststart"}) as container:
        stream = container.add_stream("libx264", rate=30, options={"threads": "1"})
        stream.width, stream.height, stream.pix_fmt = 160, 120, "yuv420p"
        for i in range(frames):
            image = av.VideoFrame.from_ndarray(synthetic_frame(i, 120, 160, 30), format="rgb24")
            container.mux(stream.encode(image))
        container.mux(stream.encode())
    return path


def _packet_start(path, frame):
    """The byte offset of the packet that holds frame ``frame`` (in presentation order)."""
    with av.open(str(path)) as container:
        packets = [p for p in container.demux(video=0) if p.pts is not None]
    return sorted(packets, key=lambda p: p.pts)[frame].pos


def test_a_truncated_file_names_the_frame_where_it_breaks(tmp_path):
    whole = _faststart_mp4(tmp_path / "whole.mp4")
    cut = tmp_path / "cut.mp4"
    # cut inside frame 20's packet, before the last frames VideoParams() samples (21 and 31 of 60): a
    # cut by a fraction of the bytes once fell after them, and the decode rightly succeeded
    cut.write_bytes(whole.read_bytes()[: _packet_start(whole, 20) + 10])
    with pytest.raises(DecodeError, match=r"pyav: truncated or corrupt at frame \d+") as err:
        decode_clip(cut, VideoParams(), decoders=["pyav"])
    assert str(err.value).count(str(cut)) == 1, err.value


class Kaboom(Exception):
    """Not a type any decoder or this project knows."""


def test_any_exception_a_decoder_raises_hands_over_to_the_next(video_dir):
    class FailsOpening:
        def __init__(self, path, threads):
            raise Kaboom(f"cannot cope with {path}")

    class FailsReading:
        def __init__(self, path, threads):
            self.inner = DECODERS["pyav"](path, threads)
            self.info = self.inner.info

        def read(self, indices):
            raise Kaboom("lost my place")

        def close(self):
            self.inner.close()

    register_decoder("test-kaboom-open")(FailsOpening)
    register_decoder("test-kaboom-read")(FailsReading)
    path = video_dir / "short.mp4"
    try:
        expected, _ = decode_clip(path, VideoParams(), decoders=["pyav"])
        frames, meta = decode_clip(
            path, VideoParams(), decoders=["test-kaboom-open", "test-kaboom-read", "pyav"]
        )
        assert meta["backend"] == "pyav" and torch.equal(frames, expected)
        with pytest.raises(DecodeError) as err:
            decode_clip(path, VideoParams(), decoders=["test-kaboom-open", "test-kaboom-read"])
        assert str(err.value) == (
            f"{path} · test-kaboom-open, test-kaboom-read · no decoder could read it: "
            "test-kaboom-open: Kaboom: cannot cope with the file; test-kaboom-read: Kaboom: lost my place"
        )
    finally:
        DECODERS.pop("test-kaboom-open")
        DECODERS.pop("test-kaboom-read")


def test_h264_with_b_frames_in_mpeg_ts_decodes_with_pyav_where_decord_fails(tmp_path):
    # decord 0.6 opens this file but fails decoding its first frame (DECORDError, "Unable to handle
    # EOF"); the file is fine, and FFmpeg decodes it.
    # As `ffmpeg -c:v libx264 -profile:v main -bf 2 -f mpegts` writes it: x264's own keyframe interval
    # (250), so the 3 s clip is one GOP.
    ts = make_video(
        tmp_path / "bframes.ts", seconds=3, fps=25, width=320, height=240, bframes=2, gop_seconds=None
    )
    with pytest.raises(DecodeError, match=r"bframes\.ts · decord · .*decord: decord cannot decode it"):
        decode_clip(ts, VideoParams(), decoders=["decord"])
    frames, meta = decode_clip(ts, VideoParams())
    assert meta["backend"] == "pyav" and meta["source_total_num_frames"] == 75
    with av.open(str(ts)) as container:
        own = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(own) == 75
    picked = torch.from_numpy(np.stack([own[i] for i in meta["source_frames_indices"]]))
    assert torch.equal(frames, resize_frames(picked, meta["height"], meta["width"]))


def test_unknown_decoder_is_an_error(video_dir):
    with pytest.raises(ValueError, match="unknown decoder"):
        decode_clip(video_dir / "short.mp4", VideoParams(), decoders=["ffmpeg-magic"])


def test_hanging_decoder_times_out(video_dir):
    class Hangs:
        def __init__(self, path, threads):
            time.sleep(30)

    register_decoder("test-hang")(Hangs)
    try:
        started = time.monotonic()
        with pytest.raises(DecodeTimeout, match=r"did not finish within 0\.5 s"):
            decode_clip(video_dir / "short.mp4", VideoParams(), decoders=["test-hang", "pyav"], timeout_s=0.5)
        assert time.monotonic() - started < 10
    finally:
        DECODERS.pop("test-hang")
