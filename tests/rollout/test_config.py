"""Rollout configuration: defaults in one place, bad combinations rejected with the fix."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.rollout.config import GiB, RolloutConfig, call_config
from services.rollout.vllm_bridge import engine_kwargs


def test_unknown_keys_are_rejected():
    with pytest.raises(ValidationError, match="extra_forbidden"):
        RolloutConfig.model_validate({"n": 4, "temprature": 0.7})
    with pytest.raises(ValidationError, match="extra_forbidden"):
        RolloutConfig.model_validate({"engine": {"max_len": 10}})


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"mix_policy": True, "n": 1}, "mix_policy needs n >= 2"),
        ({"mix_accuracy_threshold": 0.5}, "set mix_policy: true"),
        ({"image_min_pixels": 10_000, "image_max_pixels": 100}, "image_min_pixels .* exceeds"),
        ({"top_p": 0.0}, "greater than 0"),
    ],
)
def test_bad_combinations_say_what_to_fix(fields, message):
    with pytest.raises(ValidationError, match=message):
        RolloutConfig.model_validate(fields)


def test_engine_kwargs_carry_the_config():
    config = RolloutConfig.model_validate(
        {"seed": 3, "engine": {"dtype": "float32", "max_model_len": 1024, "kv_cache_gib": 0.5}}
    )
    kwargs = engine_kwargs("/ckpt", config)
    assert kwargs["model"] == "/ckpt"
    assert kwargs["dtype"] == "float32"
    assert kwargs["max_model_len"] == 1024
    assert kwargs["seed"] == 3
    assert kwargs["logprobs_mode"] == "raw_logprobs"
    assert kwargs["kv_cache_memory_bytes"] == GiB // 2  # 0.5 GiB = 536,870,912 bytes
    assert kwargs["worker_extension_cls"] == "services.rollout.weight_sync.WeightSyncExtension"


def test_gpu_throughput_settings_pass_through_only_when_set():
    defaults = engine_kwargs("/ckpt", RolloutConfig())
    for name in ("max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill", "mm_processor_cache_gb"):
        assert name not in defaults
    assert "enable_sleep_mode" not in defaults
    engine = {
        "max_num_seqs": 64,
        "max_num_batched_tokens": 16384,
        "enable_chunked_prefill": True,
        "mm_processor_cache_gb": 0,
        "enable_sleep_mode": True,
    }
    kwargs = engine_kwargs("/ckpt", RolloutConfig.model_validate({"engine": engine}))
    assert {k: kwargs[k] for k in engine} == engine


def test_no_kv_cache_size_leaves_vllm_to_size_it_from_gpu_memory():
    kwargs = engine_kwargs("/ckpt", RolloutConfig.model_validate({"engine": {"kv_cache_gib": None}}))
    assert "kv_cache_memory_bytes" not in kwargs
    assert kwargs["gpu_memory_utilization"] == 0.6


MIXING = RolloutConfig(n=4, mix_policy=True, mix_accuracy_threshold=0.5, temperature=0.7)


def test_a_call_config_is_revalidated():
    # n=1 with mix_policy would generate n-1 = 0 responses; the copy must be refused like the config
    with pytest.raises(ValidationError, match="mix_policy needs n >= 2"):
        call_config(MIXING, n=1)


@pytest.mark.parametrize(
    ("n", "mix_policy", "expected"),
    [
        (None, None, (4, True, 0.5)),  # unchanged
        (6, None, (6, True, 0.5)),  # a bigger group, still mixing
        (1, False, (1, False, None)),  # a greedy baseline: mixing and its gate off for the call
        (None, True, (4, True, 0.5)),  # asking for what the config does already
    ],
)
def test_call_config_overrides(n, mix_policy, expected):
    config = call_config(MIXING, n, mix_policy)
    assert (config.n, config.mix_policy, config.mix_accuracy_threshold) == expected
    assert config.temperature == 0.7 and MIXING.n == 4  # the rest kept, the engine's config untouched


def test_mixing_cannot_be_turned_on_for_one_call():
    with pytest.raises(ValueError, match="mix_policy=True for one call needs a config with mix_policy"):
        call_config(RolloutConfig(n=4), mix_policy=True)
