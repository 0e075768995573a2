"""Sampling and resizing against hand-computed values and against qwen-vl-utils itself."""

import pytest
import torch
from qwen_vl_utils import vision_process as ref

from services.common.frames import VideoParams
from services.common.frames.resize import resize_frames, smart_resize, target_size
from services.common.frames.sampling import frame_indices, num_frames


@pytest.mark.parametrize(
    ("total", "fps_src", "params", "expected"),
    [
        # 60 s at 30 fps, 2 fps → 1800/30*2 = 120 frames; even already.
        (1800, 30.0, VideoParams(), 120),
        # capped: max_frames 64 → 64.
        (1800, 30.0, VideoParams(max_frames=64), 64),
        # 2 s at 30 fps → 60/30*2 = 4 frames (= min_frames 4).
        (60, 30.0, VideoParams(), 4),
        # 1 s at 25 fps → 2 frames, raised to min_frames 4.
        (25, 25.0, VideoParams(), 4),
        # 10.5 s at 30 fps, 1 fps → 10.5 → floor to even → 10.
        (315, 30.0, VideoParams(fps=1.0), 10),
        # nframes 7 → round(7/2)*2 = 8 (round half to even: 3.5 → 4).
        (100, 30.0, VideoParams(fps=None, nframes=7), 8),
        # max_frames 9 → floor to 8.
        (1800, 30.0, VideoParams(max_frames=9), 8),
    ],
)
def test_num_frames_hand_computed(total, fps_src, params, expected):
    assert num_frames(params, total, fps_src) == expected


def test_num_frames_rejects_videos_too_short():
    with pytest.raises(ValueError, match="cannot sample"):
        num_frames(VideoParams(), 1, 30.0)


def test_num_frames_and_indices_match_reference_over_a_grid():
    for total in (3, 7, 60, 61, 299, 1800, 7201):
        for fps_src in (23.976, 25.0, 30.0, 60.0):
            for kwargs in ({}, {"fps": 1.0}, {"max_frames": 32}, {"fps": 4.0, "min_frames": 6}):
                ele = {"fps": kwargs.get("fps", 2.0), **{k: v for k, v in kwargs.items() if k != "fps"}}
                try:
                    expected = ref.smart_nframes(ele, total_frames=total, video_fps=fps_src)
                except ValueError:
                    with pytest.raises(ValueError):
                        num_frames(VideoParams(**kwargs), total, fps_src)
                    continue
                n = num_frames(VideoParams(**kwargs), total, fps_src)
                assert n == expected, (total, fps_src, kwargs)
                assert frame_indices(total, n) == torch.linspace(0, total - 1, n).round().long().tolist()


def test_frame_indices_hand_computed():
    # linspace(0, 9, 4) = 0, 3, 6, 9
    assert frame_indices(10, 4) == [0, 3, 6, 9]
    # linspace(0, 4, 4) = 0, 1.333, 2.667, 4 → 0, 1, 3, 4
    assert frame_indices(5, 4) == [0, 1, 3, 4]


@pytest.mark.parametrize(
    ("h", "w", "factor", "lo", "hi", "expected"),
    [
        # 480x854 at 28: round → 476x840 = 399,840 px, inside [100,352, 602,112].
        (480, 854, 28, 128 * 784, 768 * 784, (476, 840)),
        # 720x1280 = 921,600 > 602,112: beta = sqrt(921600/602112) = 1.2372;
        # 720/1.2372 = 581.9 → floor to 28: 560; 1280/1.2372 = 1034.6 → 1008.
        (720, 1280, 28, 128 * 784, 768 * 784, (560, 1008)),
        # 64x64 at 32 is 4,096 px < 131,072: beta = sqrt(131072/4096) = 5.657 → 362 → ceil 384.
        (64, 64, 32, 128 * 1024, 768 * 1024, (384, 384)),
    ],
)
def test_smart_resize_hand_computed(h, w, factor, lo, hi, expected):
    assert smart_resize(h, w, factor, lo, hi) == expected
    assert ref.smart_resize(h, w, factor=factor, min_pixels=lo, max_pixels=hi) == expected


def test_target_size_matches_reference_budget_rule():
    # 64 frames of 720p for Qwen2.5-VL with the default budgets: 560x1008 (FINDINGS).
    assert target_size(VideoParams(), 720, 1280, 64) == (560, 1008)
    # total_pixels caps the per-frame budget: 20 frames, 2,000,000 total → 200,000 per 2 frames... min
    # (602,112, 2e6/20*2 = 200,000) = 200,000 → 720x1280 scaled by sqrt(921600/200000) = 2.1466 →
    # 335.4 → 308, 596.3 → 588.
    assert target_size(VideoParams(total_pixels=2_000_000), 720, 1280, 20) == (308, 588)


def test_resize_is_bit_identical_to_torchvision_bicubic_antialias():
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import functional as tvf

    g = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 256, (3, 90, 160, 3), dtype=torch.uint8, generator=g)
    for size in ((56, 112), (140, 252), (90, 160)):
        ours = resize_frames(frames, *size)
        theirs = tvf.resize(frames.permute(0, 3, 1, 2), list(size), InterpolationMode.BICUBIC, antialias=True)
        assert torch.equal(ours, theirs.permute(0, 2, 3, 1)), size
