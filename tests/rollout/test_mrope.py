"""M-RoPE position ids by vLLM's rule, and locating vision items in a token sequence."""

from __future__ import annotations

import pytest
import torch

from services.rollout.mrope import VisionItem, vision_items, vllm_positions

IMG, VID = 7, 9


def test_text_only_counts_up_on_all_three_axes():
    assert vllm_positions(4, []).tolist() == [[0, 1, 2, 3]] * 3


def test_docstring_example_two_frames_one_row_two_columns():
    # 2 text tokens (0, 1); item grid (t=2, h=1, w=2) starts at 2: t 2 2 3 3, h 2 2 2 2, w 2 3 2 3;
    # the next text continues at max(all) + 1 = 4.
    pos = vllm_positions(7, [VisionItem(offset=2, t=2, h=1, w=2)])
    assert pos.tolist() == [
        [0, 1, 2, 2, 3, 3, 4],
        [0, 1, 2, 2, 2, 2, 4],
        [0, 1, 2, 3, 2, 3, 4],
    ]


def test_text_after_a_temporally_long_video_continues_after_its_largest_position():
    # 1 text token, then t=3, h=1, w=1: t positions 1, 2, 3 → the text continues at 4.
    # (transformers 5.19 would continue at 1 + max(h, w) = 2: the disagreement this module fixes.)
    pos = vllm_positions(5, [VisionItem(offset=1, t=3, h=1, w=1)])
    assert pos[:, -1].tolist() == [4, 4, 4]
    assert pos[0].tolist() == [0, 1, 2, 3, 4]


def test_temporal_factor_spreads_frames_and_truncates():
    # t_factor 1.5: floor(0·1.5, 1·1.5, 2·1.5) = 0, 1, 3; start 0; the tail continues at 3 + 1 = 4.
    pos = vllm_positions(4, [VisionItem(offset=0, t=3, h=1, w=1, t_factor=1.5)])
    assert pos[0].tolist() == [0, 1, 3, 4]
    assert pos[1].tolist() == [0, 0, 0, 4]


def test_two_items_with_text_between():
    # image (1, 2, 1) at 0: t 0 0, h 0 1, w 0 0 → next 2; text at 2; video (2, 1, 1) at 3 starts at 3:
    # t 3 4, h 3 3, w 3 3 → next 5.
    pos = vllm_positions(6, [VisionItem(0, 1, 2, 1), VisionItem(3, 2, 1, 1)])
    assert pos.tolist() == [[0, 0, 2, 3, 4, 5], [0, 1, 2, 3, 3, 5], [0, 0, 2, 3, 3, 5]]


@pytest.mark.parametrize(
    ("length", "items", "message"),
    [
        (3, [VisionItem(0, 1, 2, 2)], "past the sequence end"),
        (10, [VisionItem(0, 1, 2, 2), VisionItem(2, 1, 1, 1)], "overlaps"),
    ],
)
def test_inconsistent_items_are_rejected(length, items, message):
    with pytest.raises(ValueError, match=message):
        vllm_positions(length, items)


def test_vision_items_reads_grids_in_order_and_merges_them():
    # video grid (4, 4, 4) with merge 2 → (4, 2, 2) = 16 tokens; image grid (1, 2, 4) → (1, 1, 2) = 2.
    ids = [1, 2] + [VID] * 16 + [3] + [IMG] * 2 + [4]
    items = vision_items(
        ids,
        image_token_id=IMG,
        video_token_id=VID,
        merge_size=2,
        image_grid_thw=torch.tensor([[1, 2, 4]]),
        video_grid_thw=torch.tensor([[4, 4, 4]]),
        second_per_grid_ts=torch.tensor([1.0]),
        tokens_per_second=2.0,
    )
    # t_factor = 1.0 s per grid · 2 tokens per second = 2
    assert items == [VisionItem(2, 4, 2, 2, 2.0), VisionItem(19, 1, 1, 2, 1.0)]


@pytest.mark.parametrize(
    ("ids", "videos", "message"),
    [
        # grid (2, 2, 2) merges to (2, 1, 1) = 2 tokens
        ([VID], [[2, 2, 2]], "needs 2 placeholders, found a shorter run"),
        ([VID] * 3, [[2, 2, 2]], "more video placeholders than video grids"),
        ([VID] * 2, [], "more video placeholders than video grids"),
        ([1, 2], [[2, 2, 2]], "a video grid has no placeholders"),
    ],
)
def test_placeholder_and_grid_mismatches_are_errors(ids, videos, message):
    grid = torch.tensor(videos) if videos else None
    with pytest.raises(ValueError, match=message):
        vision_items(ids, image_token_id=IMG, video_token_id=VID, merge_size=2, video_grid_thw=grid)


def test_errors_name_the_sample():
    with pytest.raises(ValueError, match=r"^sample 'clip-3': vision items run to token 4, past"):
        vllm_positions(3, [VisionItem(0, 1, 2, 2)], sample_id="clip-3")
    with pytest.raises(ValueError, match=r"^sample 'clip-3': more video placeholders than video grids"):
        vision_items([VID], image_token_id=IMG, video_token_id=VID, merge_size=2, sample_id="clip-3")


def test_a_video_without_its_seconds_per_grid_is_an_error_naming_the_sample():
    # two videos of grid (2, 2, 2) → 2 tokens each, but one second_per_grid_ts entry
    with pytest.raises(ValueError, match=r"sample 's5': video at token 2 has no second_per_grid_ts entry"):
        vision_items(
            [VID] * 4,
            image_token_id=IMG,
            video_token_id=VID,
            merge_size=2,
            video_grid_thw=torch.tensor([[2, 2, 2], [2, 2, 2]]),
            second_per_grid_ts=[1.0],
            sample_id="s5",
        )
