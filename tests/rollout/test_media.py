"""Loading a sample's clips: metadata for the processors, and the checks that name the sample."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from services.common.families import get_family
from services.common.frames import ParamsMismatch, VideoParams
from services.rollout.media import MediaError, load_media, video_metadata, video_tokens
from services.rollout.samples import RolloutSample

QWEN25 = get_family("qwen2_5_vl")  # patch 14, merge 2: frame sides multiples of 28


def meta_for(frames: torch.Tensor, family: str = "qwen2_5_vl", **extra) -> dict:
    fam = get_family(family)
    t, h, w, _ = frames.shape
    return {
        "fps": 30.0,
        "duration": 4.0,
        "total_num_frames": 120,
        "frames_indices": list(range(0, 120, 120 // t))[:t],
        "height": h,
        "width": w,
        "backend": "pyav",
        "params": {"family": family, "patch_size": fam.patch_size, "merge_size": fam.merge_size},
        **extra,
    }


class DictSource:
    def __init__(self, clips: dict) -> None:
        self.clips = clips
        self.expects: list = []

    def load(self, key, expect):
        self.expects.append(expect)
        return self.clips[key]


def frames(t: int, h: int, w: int) -> torch.Tensor:
    return torch.zeros((t, h, w, 3), dtype=torch.uint8)


def test_metadata_keeps_source_fps_and_indices_and_disables_resampling():
    clip = frames(4, 56, 56)
    meta = video_metadata(meta_for(clip))
    assert meta == {
        "fps": 30.0,
        "duration": 4.0,
        "total_num_frames": 120,
        "frames_indices": [0, 30, 60, 90],
        "width": 56,
        "height": 56,
        "video_backend": "pyav",
        "do_sample_frames": False,
    }


@pytest.mark.parametrize(
    ("shape", "family", "expected"),
    [
        ((8, 56, 56), "qwen2_5_vl", 16),  # (8/2)·(56/14)·(56/14) / 4 = 4·4·4/4
        ((4, 56, 112), "qwen2_5_vl", 16),  # 2·4·8 / 4
        ((8, 64, 64), "qwen3_vl", 16),  # 4·(64/16)·(64/16) / 4
        ((2, 32, 32), "qwen3_vl", 1),  # 1·2·2 / 4
    ],
)
def test_video_tokens(shape, family, expected):
    assert video_tokens(frames(*shape).numpy(), get_family(family)) == expected


def test_loads_videos_and_single_frame_images():
    clip, image = frames(4, 56, 56), frames(1, 30, 40)
    source = DictSource({"v": (clip, meta_for(clip)), "i": (image, {})})
    sample = RolloutSample(id="s", prompt="q", videos=("v",), images=("i",), check_params=False)
    media = load_media(sample, source, QWEN25, video_max_pixels=None)
    assert media.videos[0][0].shape == (4, 56, 56, 3)
    assert media.videos[0][1]["do_sample_frames"] is False
    assert media.images[0].shape == (30, 40, 3)
    assert set(media.multi_modal_data()) == {"video", "image"}


def test_every_clip_is_loaded_with_its_expected_params_and_images_with_none():
    clip, image = frames(4, 56, 56), frames(1, 28, 28)
    source = DictSource({"v": (clip, meta_for(clip)), "w": (clip, meta_for(clip)), "i": (image, {})})
    one_fps = VideoParams(family="qwen2_5_vl", fps=1.0)
    sample = RolloutSample(
        id="s",
        prompt="q",
        videos=("v", "w"),
        images=("i",),
        video_params={"family": "qwen2_5_vl", "fps": 1.0},
    )
    load_media(sample, source, QWEN25, video_max_pixels=None)
    assert source.expects == [one_fps.canonical(), one_fps.canonical(), None]

    per_clip = (one_fps.canonical(), VideoParams(family="qwen2_5_vl", nframes=4, fps=None).canonical())
    source.expects.clear()
    load_media(
        RolloutSample(id="s", prompt="q", videos=("v", "w"), clip_params=per_clip), source, QWEN25, None
    )
    assert source.expects == list(per_clip)

    source.expects.clear()
    load_media(RolloutSample(id="s", prompt="q", videos=("v",), check_params=False), source, QWEN25, None)
    assert source.expects == [None]  # opted out: stated to the source, not defaulted


def test_a_clip_decoded_for_another_budget_is_refused_unless_opted_out(clips):
    key = clips.keys["qwen2_5_vl"]["wide"]
    stored = clips.params["qwen2_5_vl"]["wide"]
    other = VideoParams.model_validate({**stored.model_dump(), "max_pixels": 2 * stored.max_pixels})
    for fields in ({"clip_params": (other.canonical(),)}, {"video_params": other.model_dump()}):
        sample = RolloutSample(id="budget-1", prompt="q", videos=(key,), **fields)
        with pytest.raises(
            ParamsMismatch,
            match=rf"sample 'budget-1', video {key}: clip {key} was decoded with other parameters "
            rf"\(.*max_pixels: stored {stored.max_pixels} != requested {other.max_pixels}",
        ):
            load_media(sample, clips.store, QWEN25, video_max_pixels=None)

    cached, _ = clips.store.load(key, expect=stored)
    for fields in ({"clip_params": (stored.canonical(),)}, {"check_params": False}):
        sample = RolloutSample(id="budget-2", prompt="q", videos=(key,), **fields)
        media = load_media(sample, clips.store, QWEN25, video_max_pixels=None)
        assert np.array_equal(media.videos[0][0], cached.numpy())


@pytest.mark.parametrize(
    ("clip", "meta_update", "max_pixels", "message"),
    [
        (
            frames(4, 64, 64),
            {"params": {"family": "qwen3_vl", "patch_size": 16, "merge_size": 2}},
            None,
            "stored for family 'qwen3_vl' .* preprocess the video for qwen2_5_vl",
        ),
        (frames(3, 56, 56), {}, None, "3 frames is not a multiple of 2"),
        (frames(4, 56, 60), {}, None, "56x60 is not a multiple of 28"),
        (frames(4, 56, 112), {}, 56 * 56, "6272 pixels exceed video_max_pixels=3136"),
        (frames(4, 56, 56), {"frames_indices": [0, 1]}, None, "lists 2 frame indices for 4 frames"),
        (frames(4, 56, 56).float(), {}, None, "must be uint8"),
    ],
)
def test_unusable_clips_name_the_sample_and_the_clip(clip, meta_update, max_pixels, message):
    meta = {**meta_for(clip), **meta_update}
    sample = RolloutSample(id="sample-42", prompt="q", videos=("clip-key",), check_params=False)
    with pytest.raises(MediaError, match=rf"sample 'sample-42', video clip-key: .*{message}"):
        load_media(sample, DictSource({"clip-key": (clip, meta)}), QWEN25, video_max_pixels=max_pixels)


def test_an_image_key_must_hold_one_frame():
    sample = RolloutSample(id="s9", prompt="q", images=("img",))
    with pytest.raises(MediaError, match=r"sample 's9', image img: expected one uint8 frame"):
        load_media(sample, DictSource({"img": (frames(2, 28, 28), {})}), QWEN25, video_max_pixels=None)


def test_a_windowed_clip_reaches_the_model_as_the_pre_cut_clip(tmp_path):
    """Qwen3-VL's timestamps (what the prompt shows) count from the window's first frame, as when the
    official protocols feed a clip cut to the window."""
    from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor

    from services.common.frames import FrameStore, clip_key, decode_clip
    from services.common.frames.hashing import content_hash
    from services.common.frames.synthetic import make_colour_change_video

    path = make_colour_change_video(tmp_path / "change.mp4")  # 2 s at 10 fps
    params = VideoParams(family="qwen3_vl", fps=None, nframes=4, window={"start": 1.0, "end": 2.5})
    store = FrameStore(tmp_path / "frames")
    key = clip_key(content_hash(path), params)
    store.put(key, *decode_clip(path, params))
    sample = RolloutSample(id="s", prompt="p", videos=(key,), clip_params=(params.canonical(),))
    ((_, meta),) = load_media(sample, store, get_family("qwen3_vl"), None).videos
    # source frames 10, 13, 16, 19 of the window's 10 (frames 10-19)
    assert (meta["frames_indices"], meta["total_num_frames"], meta["fps"]) == ([0, 3, 6, 9], 10, 10.0)
    assert meta["duration"] == pytest.approx(1.0)
    # one timestamp per temporal patch of 2 frames: (0.0 + 0.3) / 2, (0.6 + 0.9) / 2
    stamps = Qwen3VLProcessor._calculate_timestamps(None, meta["frames_indices"], meta["fps"], 2)
    assert stamps == pytest.approx([0.15, 0.75])
