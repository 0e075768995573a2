"""The Qwen3.5 family's tiny checkpoint: hybrid decoder (Gated DeltaNet + full attention), loaded by
transformers on a video and served by vLLM's CPU build (its GDN kernel needs bfloat16)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForImageTextToText, AutoProcessor

from services.common.tiny_models import build_tiny_model


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return build_tiny_model("qwen3_5", tmp_path_factory.mktemp("qwen3_5") / "model", seed=0)


def test_transformers_runs_it_on_a_video(checkpoint):
    processor = AutoProcessor.from_pretrained(checkpoint)
    model = AutoModelForImageTextToText.from_pretrained(checkpoint).eval()
    assert model.config.model_type == "qwen3_5"
    assert model.config.text_config.layer_types == ["linear_attention", "full_attention"]
    frames = torch.randint(
        0, 256, (8, 64, 64, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
    )
    metadata = {
        "fps": 30.0,
        "duration": 4.0,
        "total_num_frames": 120,
        "frames_indices": list(range(0, 120, 15)),
    }
    messages = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "What happens?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(
        text=[text], videos=[frames], video_metadata=[metadata], do_sample_frames=False, do_resize=False,
        return_tensors="pt",
    )  # fmt: skip
    # 8 frames / 2 = 4; 64 / patch 16 = 4 → grid (4, 4, 4) → 64 patches / merge² 4 = 16 video tokens
    assert inputs["video_grid_thw"].tolist() == [[4, 4, 4]]
    assert int((inputs["input_ids"] == model.config.video_token_id).sum()) == 16
    with torch.no_grad():
        logits = model(**inputs).logits
    assert torch.isfinite(logits).all()


@pytest.mark.slow
@pytest.mark.integration
def test_vllm_serves_it_with_a_stored_clip(checkpoint, tmp_path, video_dir):
    from services.common.frames import FrameStore, VideoParams, clip_key, decode_clip
    from services.common.frames.hashing import content_hash
    from services.rollout.config import EngineConfig, RolloutConfig
    from services.rollout.engine import RolloutEngine
    from services.rollout.samples import RolloutSample

    store = FrameStore(tmp_path / "frames")
    params = VideoParams(family="qwen3_5", fps=None, nframes=4, min_pixels=4 * 1024, max_pixels=6 * 1024)
    key = clip_key(content_hash(video_dir / "short.mp4"), params)
    store.put(key, *decode_clip(video_dir / "short.mp4", params))
    config = RolloutConfig(
        n=2, max_tokens=6, engine=EngineConfig(dtype="bfloat16", max_model_len=1024, kv_cache_gib=0.25)
    )
    engine = RolloutEngine(checkpoint, config, source=store)
    try:
        (group,) = engine.rollout(
            [RolloutSample(id="q35", prompt="What happens?", videos=(key,), video_params=params.model_dump())]
        )
    finally:
        engine.shutdown()
    assert len(group.responses) == 2
    assert all(0 < len(r.token_ids) <= 6 for r in group.responses)
    # the engine expanded the clip to the placeholders its grid implies (checked inside rollout too)
    assert group.prompt_token_ids.count(engine.checkpoint.video_token_id) > 0
