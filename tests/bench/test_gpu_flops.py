"""bench/gpu/flops.py: the model FLOPs of a pass counted by hand, the chip's peak by its name, the
memory plan's choices on the two devices lent to the project, and the shape read off a real model."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.gpu.flops import GiB, Shape, forward_flops, memory_plan, mfu, peak_flops

TOY = Shape(
    lm_params=10, head_params=6, layers=1, attention_width=2, tower_params=5, merger_params=8, tower_layers=3,
    tower_width=4, merge=4, full_layers=1, window_patches=2,
)  # fmt: skip


def test_forward_flops_by_part_counted_by_hand() -> None:
    # sequences [3, 1]: dense 2·10·4; causal attention 2·1·2·(9 + 1); head 2·6·2 scored tokens
    # one clip t=2, h=1, w=4 (4-patch frames, 8 patches): tower 2·5·8 + merger 2·8·8/4;
    # attention 4·4·(1 full layer · 2 frames · 4² + 2 windowed layers · 8 patches · window 2)
    got = forward_flops(TOY, [3, 1], 2, [(2, 1, 4)])
    assert got == {
        "lm_dense": 80.0, "lm_attention": 40.0, "head": 24.0, "tower_dense": 80.0 + 32.0,
        "tower_attention": 16.0 * (32 + 32),
    }  # fmt: skip
    # a window wider than the frame attends over the frame
    wide = forward_flops(Shape(**{**TOY.__dict__, "window_patches": 64}), [1], 0, [(1, 1, 4)])
    assert wide["tower_attention"] == 16.0 * (16 + 2 * 4 * 4)
    # every layer full (Qwen2-VL, Qwen3-VL): no windows
    full = forward_flops(
        Shape(**{**TOY.__dict__, "full_layers": 3, "window_patches": None}), [1], 0, [(1, 1, 4)]
    )
    assert full["tower_attention"] == 16.0 * 3 * 16


def test_mfu_and_the_peak_by_device_name() -> None:
    assert mfu(989.4e12 * 0.5, 2.0, 989.4e12) == pytest.approx(0.25)
    assert math.isnan(mfu(1.0, 0.0, 1.0))
    assert peak_flops("NVIDIA H200") == 989.4e12  # not H20's 148 (its name is inside H200's)
    assert peak_flops("NVIDIA H100 80GB HBM3") == 989.4e12
    assert peak_flops("NVIDIA H100 PCIe") == 756e12
    assert peak_flops("NVIDIA H20") == 148e12
    assert math.isnan(peak_flops("cpu"))


def test_memory_plan_sizes_the_3b_run_to_each_device() -> None:
    params = 3_754_622_976  # the 3B checkpoint the script builds (tied head, tower included)
    h100 = memory_plan(params, int(79.1 * GiB), 16384)  # what torch reports for an H100 80 GB
    assert h100["offload_optimizer"] is False and h100["micro_batch_tokens"] == 8192
    assert h100["need_gib"] == pytest.approx(16 * params / GiB + 8192 * 1.1 / 1024, rel=1e-9)
    h200 = memory_plan(params, int(139.8 * GiB), 16384)
    assert h200 == {"offload_optimizer": False, "micro_batch_tokens": 16384, "need_gib": h200["need_gib"]}
    # a device where the moments only fit once the activations are gone: they go to the host
    tight = memory_plan(params, int(16 * params / 0.9) + 1, 16384)
    assert tight["offload_optimizer"] is True and tight["micro_batch_tokens"] == 16384
    with pytest.raises(ValueError, match="fp32 optimizer step"):
        memory_plan(params, int(40 * GiB), 16384)


@pytest.mark.integration
def test_the_shape_of_a_real_model(tmp_path: Path) -> None:
    from transformers import AutoModelForImageTextToText

    from services.common.tiny_models import build_tiny_model

    model = AutoModelForImageTextToText.from_pretrained(
        build_tiny_model("qwen2_5_vl", tmp_path / "m", seed=0)
    )
    shape = Shape.of(model)
    text, vision = model.config.text_config, model.config.vision_config
    every = sum(p.numel() for p in model.parameters())
    embed = model.model.language_model.embed_tokens.weight.numel()
    assert shape.lm_params + shape.tower_params + shape.merger_params + embed + shape.head_params == every
    assert shape.head_params == text.vocab_size * text.hidden_size
    assert shape.layers == text.num_hidden_layers and shape.tower_layers == vision.depth
    # Qwen2.5-VL: windows of 112 px = 8 x 8 patches of 14, the full-attention blocks as configured
    assert shape.window_patches == 64 and shape.full_layers == len(vision.fullatt_block_indexes)
    assert shape.merge == 4
