"""Our decode → sample → resize equals qwen-vl-utils' fetch_video, and the HF processors accept it."""

import os

import pytest
import torch

from services.common.frames import VideoParams, decode_clip

# qwen-vl-utils picks its reader once, at import; decord is the one it uses without torchcodec.
os.environ.setdefault("FORCE_QWENVL_VIDEO_READER", "decord")
from qwen_vl_utils import vision_process as ref

CASES = [
    ("qwen2_5_vl", 14, {}),
    ("qwen2_5_vl", 14, {"max_frames": 8, "min_pixels": 4 * 28 * 28, "max_pixels": 64 * 28 * 28}),
    ("qwen3_vl", 16, {"fps": 4.0, "min_pixels": 16 * 32 * 32, "max_pixels": 96 * 32 * 32}),
    ("qwen3_vl", 16, {"total_pixels": 12 * 128 * 32 * 32}),
    ("qwen2_vl", 14, {"fps": 1.0}),
]


@pytest.mark.parametrize("decoder", ["decord", "pyav"])
@pytest.mark.parametrize(("family", "patch", "extra"), CASES)
def test_frames_bit_identical_to_qwen_vl_utils(video_dir, family, patch, extra, decoder):
    for name in ("short.mp4", "wide.mp4", "tall.mp4"):
        path = str(video_dir / name)
        ele = {"video": path, "fps": extra.get("fps", 2.0), **{k: v for k, v in extra.items() if k != "fps"}}
        (video, ref_meta), _ = ref.fetch_video(
            ele, image_patch_size=patch, return_video_sample_fps=True, return_video_metadata=True
        )
        frames, meta = decode_clip(path, VideoParams(family=family, **extra), decoders=[decoder])
        expected = video.permute(0, 2, 3, 1)
        assert expected.shape == frames.shape, name
        assert torch.equal(expected.to(torch.uint8), frames), name
        # The reference returns floats holding whole numbers: uint8 is lossless.
        assert torch.equal(expected, frames.float())
        assert list(ref_meta["frames_indices"]) == meta["frames_indices"]
        assert ref_meta["total_num_frames"] == meta["total_num_frames"]
        assert ref_meta["fps"] == pytest.approx(meta["fps"])
        assert meta["backend"] == decoder


@pytest.mark.parametrize(
    ("family", "processor_path", "patch"),
    [
        ("qwen2_5_vl", "transformers.Qwen2VLVideoProcessor", 14),
        ("qwen3_vl", "transformers.Qwen3VLVideoProcessor", 16),
    ],
)
def test_hf_video_processor_accepts_our_frames(video_dir, family, processor_path, patch):
    import importlib

    module, name = processor_path.rsplit(".", 1)
    processor = getattr(importlib.import_module(module), name)(
        patch_size=patch, merge_size=2, temporal_patch_size=2
    )
    frames, meta = decode_clip(video_dir / "wide.mp4", VideoParams(family=family))
    t, h, w, _ = frames.shape
    metadata = {
        "fps": meta["fps"],
        "frames_indices": meta["frames_indices"],
        "total_num_frames": meta["total_num_frames"],
        "duration": meta["duration"],
    }
    out = processor(
        videos=[frames.permute(0, 3, 1, 2)],
        video_metadata=[metadata],
        do_sample_frames=False,
        do_resize=False,
        return_tensors="pt",
    )
    # One grid cell per 2 frames and per patch: 3 s at 25 fps, 2 fps → 6 frames → t = 3.
    assert out["video_grid_thw"].tolist() == [[t // 2, h // patch, w // patch]]
    assert t == 6
