"""Whole prefills on CPU (for seeded requests) on a model with linear-attention layers: vLLM caches
such a model's prefixes only with chunked prefill, so the prefix cache is what gives way (the real
engine check is tests/common/test_tiny_qwen3_5.py::test_vllm_serves_it_with_a_stored_clip)."""

from __future__ import annotations

import json

from services.rollout.vllm_bridge import hybrid_attention, seedable_kwargs


def checkpoint(folder, layer_types):
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"text_config": {"layer_types": layer_types}}))
    return folder


def test_a_hybrid_model_keeps_whole_prefills_without_the_prefix_cache(tmp_path):
    hybrid = checkpoint(tmp_path / "hybrid", ["linear_attention", "full_attention"])
    plain = checkpoint(tmp_path / "plain", ["full_attention", "full_attention"])
    assert hybrid_attention(hybrid) and not hybrid_attention(plain)
    assert not hybrid_attention(tmp_path / "missing")
    base = {"max_model_len": 1024, "enable_prefix_caching": True}
    seeded = seedable_kwargs({**base, "model": str(hybrid)}, cpu=True)
    assert seeded["enable_chunked_prefill"] is False and seeded["enable_prefix_caching"] is False
    kept = seedable_kwargs({**base, "model": str(plain)}, cpu=True)
    assert kept["enable_chunked_prefill"] is False and kept["enable_prefix_caching"] is True
    # off CPU, or with chunked prefill named explicitly, nothing changes
    assert seedable_kwargs({**base, "model": str(hybrid)}, cpu=False)["enable_prefix_caching"] is True
