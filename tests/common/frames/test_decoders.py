import time

import pytest
import torch

from services.common.frames import DecodeError, DecodeTimeout, VideoParams, decode_clip
from services.common.frames.decoders import DECODERS, register_decoder
from services.common.frames.synthetic import make_video


@pytest.fixture(scope="module")
def av1(tmp_path_factory):
    return make_video(
        tmp_path_factory.mktemp("av1") / "clip.mp4", seconds=2, width=160, height=120, codec="libsvtav1"
    )


def test_fallback_decodes_what_decord_cannot(av1):
    # decord 0.6 has no AV1 decoder; PyAV (FFmpeg's dav1d) has.
    with pytest.raises(DecodeError, match=r"\[decord\]"):
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


def test_corrupt_inputs_raise_errors_naming_the_file(tmp_path, video_dir):
    for path in _corrupt_files(tmp_path, video_dir):
        with pytest.raises(DecodeError) as err:
            decode_clip(path, VideoParams())
        message = str(err.value)
        assert str(path) in message and "[decord]" in message and "[pyav]" in message, message


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
