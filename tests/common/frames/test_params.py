import pytest
from pydantic import ValidationError

from services.common.frames import VideoParams, clip_key
from services.common.frames.params import diff_params


def test_key_is_stable_and_covers_every_parameter():
    base = VideoParams()
    key = clip_key("blake3:abc", base)
    assert key == clip_key("blake3:abc", VideoParams())
    # A default given explicitly is the same clip: the canonical form resolves defaults.
    assert key == clip_key("blake3:abc", VideoParams(min_pixels=128 * 28 * 28))
    variants = [
        VideoParams(fps=1.0),
        VideoParams(max_frames=64),
        VideoParams(min_frames=8),
        VideoParams(max_pixels=200_000),
        VideoParams(min_pixels=50_000),
        VideoParams(total_pixels=10_000_000),
        VideoParams(fps=None, nframes=16),
        VideoParams(family="qwen3_vl"),
    ]
    keys = {clip_key("blake3:abc", v) for v in variants}
    assert key not in keys and len(keys) == len(variants)
    assert clip_key("blake3:abd", base) != key


def test_family_decides_patch_geometry_in_canonical_form():
    c = VideoParams(family="qwen3_vl").canonical()
    assert (c["patch_size"], c["merge_size"], c["min_pixels"]) == (16, 2, 128 * 32 * 32)
    c = VideoParams(family="qwen2_vl").canonical()
    assert (c["patch_size"], c["min_pixels"]) == (14, 128 * 28 * 28)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_frames": 0}, "max_frames"),
        ({"fps": 0}, "fps"),
        ({"fps": None, "nframes": 1}, "nframes"),
        ({"nframes": 8}, "either fps or nframes"),
        ({"min_frames": 10, "max_frames": 8}, "exceeds max_frames"),
        ({"max_pixels": 100}, "below one 28x28 patch"),
        ({"family": "qwen3_vl", "min_pixels": 1000}, "below one 32x32 patch"),
        ({"max_pixels": 50_000}, "below min_pixels"),
        ({"family": "llava"}, "family"),
        ({"fsp": 2}, "fsp"),
    ],
)
def test_absurd_parameters_are_rejected_with_the_field_named(fields, message):
    with pytest.raises(ValidationError, match=message):
        VideoParams(**fields)


def test_overrides_and_round_trip():
    base = VideoParams(max_frames=32)
    assert base.with_overrides({"fps": 1.0}).canonical()["fps"] == 1.0
    assert base.with_overrides(None) is base
    with pytest.raises(ValidationError):
        base.with_overrides({"max_frames": 0})
    for p in (base, VideoParams(fps=None, nframes=6, family="qwen3_vl"), VideoParams(max_pixels=300_000)):
        assert VideoParams.from_canonical(p.canonical()).canonical() == p.canonical()


def test_diff_names_fields():
    assert diff_params({"fps": 2.0, "a": 1}, {"fps": 1.0, "a": 1}) == {"fps": (2.0, 1.0)}


def test_key_survives_a_json_round_trip_of_the_params():
    import json

    for p in (VideoParams(), VideoParams(total_pixels=5_000_000, fps=1)):
        stored = json.loads(json.dumps(p.canonical()))
        assert clip_key("blake3:x", VideoParams.from_canonical(stored)) == clip_key("blake3:x", p)


def test_a_clips_frames_at_min_pixels_must_fit_the_context():
    """min_pixels wins over the budget (qwen-vl-utils), so each field within its bound could still make
    one clip of gigabytes: 8 frames of 20M pixels were accepted and decoded into 481 MB."""
    # qwen2.5-vl: 128,000 tokens x 28^2 pixels x 2 frames a temporal patch = 200,704,000 pixels
    ceiling = 128_000 * 28 * 28 * 2
    VideoParams(fps=None, nframes=8, min_pixels=ceiling // 8)  # exactly the context: accepted
    with pytest.raises(
        ValidationError, match="8 frames of at least min_pixels=25088001 are 200704008 pixels"
    ):
        VideoParams(fps=None, nframes=8, min_pixels=ceiling // 8 + 1)
    with pytest.raises(ValidationError, match="lower min_pixels or max_frames"):
        VideoParams(min_pixels=1_000_000)  # 768 frames (the default max_frames) of 1M pixels
    VideoParams(min_pixels=1_000_000, max_frames=200)  # the fix the message names
