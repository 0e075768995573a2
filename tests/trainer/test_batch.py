"""Packing by token budget and collation: left-padded prompts, right-padded responses, vision tensors
concatenated in sequence order, and the logits columns that score the responses."""

from __future__ import annotations

import pytest
import torch

from services.trainer.batch import PromptInputs, TokenSequence, collate, pack


def test_pack_by_padded_size() -> None:
    def prompts(*lengths: int) -> list[tuple[int, int]]:
        return [(n, 0) for n in lengths]

    assert pack(prompts(3, 3, 5, 2), 9) == [[0, 1], [2], [3]]  # 3 x 5 and 2 x 5 exceed 9
    assert pack(prompts(3, 3, 5, 2), 10) == [[0, 1], [2, 3]]
    assert pack(prompts(12, 1), 10) == [[0], [1]]  # longer than the budget: alone
    assert pack(prompts(2, 2, 2, 2, 2), 10) == [[0, 1, 2, 3, 4]]
    assert pack([], 10) == []
    # collate pads prompts and responses separately: (100 + 100) x 2 = 400, not 2 x 110
    assert pack([(100, 10), (10, 100)], 230) == [[0], [1]]
    assert pack([(100, 10), (90, 20)], 240) == [[0, 1]]  # (100 + 20) x 2 = 240


def _types(rows):
    return [[1 if t == 9 else 0 for t in r] for r in rows]


def test_collate_layout() -> None:
    a = PromptInputs(
        "a",
        [5, 9, 9, 6],
        {"pixel_values_videos": torch.ones(2, 3), "video_grid_thw": torch.tensor([[1, 1, 2]])},
    )
    b = PromptInputs(
        "b",
        [7, 9, 9],
        {"pixel_values_videos": torch.zeros(2, 3), "video_grid_thw": torch.tensor([[1, 2, 1]])},
    )
    seqs = [TokenSequence(a, [11, 12]), TokenSequence(b, [13, 14, 15])]
    pos = [torch.arange(6).expand(3, 6), torch.arange(6).expand(3, 6) + 10]
    mb = collate(seqs, [0, 1], pad_id=0, positions=pos, mm_token_types=_types)
    # P = 4, R = 3: b's prompt is left-padded by one, a's response right-padded by one
    assert mb.inputs["input_ids"].tolist() == [[5, 9, 9, 6, 11, 12, 0], [0, 7, 9, 9, 13, 14, 15]]
    assert mb.inputs["attention_mask"].tolist() == [[1, 1, 1, 1, 1, 1, 0], [0, 1, 1, 1, 1, 1, 1]]
    assert mb.inputs["mm_token_type_ids"].tolist() == [[0, 1, 1, 0, 0, 0, 0], [0, 0, 1, 1, 0, 0, 0]]
    assert mb.response_ids.tolist() == [[11, 12, 0], [13, 14, 15]]
    assert mb.response_mask.tolist() == [[1, 1, 0], [1, 1, 1]]
    # logits at columns 3..5 predict the tokens at columns 4..6: the responses
    assert mb.logits_to_keep.tolist() == [3, 4, 5]
    assert mb.inputs["position_ids"].shape == (3, 2, 7)
    assert mb.inputs["position_ids"][0, 0].tolist() == [0, 1, 2, 3, 4, 5, 0]
    assert mb.inputs["position_ids"][0, 1].tolist() == [0, 10, 11, 12, 13, 14, 15]
    assert mb.inputs["pixel_values_videos"].tolist() == [[1.0] * 3] * 2 + [[0.0] * 3] * 2
    assert mb.inputs["video_grid_thw"].tolist() == [[1, 1, 2], [1, 2, 1]]


def test_placeholder_and_feature_counts_must_agree_naming_the_sample() -> None:
    from services.common.families import get_family
    from services.rollout.checkpoint import Checkpoint
    from services.trainer.sequences import check_placeholders

    ckpt = Checkpoint(path="-", family=get_family("qwen2_5_vl"), processor=None, video_token_id=7,
                      image_token_id=8, end_token_id=1)  # fmt: skip
    # a (2, 4, 4) video grid is 32 patches, 8 merged features; one (1, 2, 4) image: 2 features
    vision = {"video_grid_thw": torch.tensor([[2, 4, 4]]), "image_grid_thw": torch.tensor([[1, 2, 4]])}
    check_placeholders(PromptInputs("ok", [1] + [7] * 8 + [8] * 2 + [3], vision), ckpt)
    with pytest.raises(ValueError, match=r"sample 'short': 7 video placeholder token\(s\) .* for 8 video"):
        check_placeholders(PromptInputs("short", [7] * 7 + [8] * 2, vision), ckpt)
    with pytest.raises(ValueError, match=r"sample 'stray': 1 image placeholder token\(s\) .* for 0 image"):
        check_placeholders(
            PromptInputs("stray", [7] * 8 + [8], {"video_grid_thw": vision["video_grid_thw"]}), ckpt
        )


def test_collate_keeps_a_shared_prompts_pixels_once() -> None:
    # a group's responses share their prompt object: its pixel rows are collated once, its grid for
    # every sequence, and each sequence's video names the distinct one it is
    a = PromptInputs(
        "a", [9], {"pixel_values_videos": torch.ones(2, 3), "video_grid_thw": torch.tensor([[1, 1, 2]])}
    )
    b = PromptInputs(
        "b", [9], {"pixel_values_videos": torch.zeros(4, 3), "video_grid_thw": torch.tensor([[1, 2, 2]])}
    )
    text = PromptInputs("t", [7])
    seqs = [
        TokenSequence(a, [1]),
        TokenSequence(a, [2]),
        TokenSequence(text, [3]),
        TokenSequence(b, [4]),
        TokenSequence(a, [5]),
    ]
    mb = collate(seqs, list(range(5)), pad_id=0, positions=[None] * 5, mm_token_types=_types)
    assert mb.inputs["pixel_values_videos"].tolist() == [[1.0] * 3] * 2 + [[0.0] * 3] * 4
    assert mb.inputs["video_grid_thw"].tolist() == [[1, 1, 2], [1, 1, 2], [1, 2, 2], [1, 1, 2]]
    assert mb.repeats == {"video_grid_thw": [0, 0, 1, 0]}
    # nothing repeats: every row once, no plan
    alone = collate(seqs[2:4], [0, 1], pad_id=0, positions=[None] * 2, mm_token_types=_types)
    assert alone.repeats == {} and alone.inputs["pixel_values_videos"].shape == (4, 3)
