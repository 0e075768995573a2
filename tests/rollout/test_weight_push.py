"""(c) After a weight push the running engine's logprobs are the new weights', not the old ones',
whichever transport carried them; caches are reset so a repeated clip is served under the new weights."""

from __future__ import annotations

import copy

import pytest
import torch

from services.rollout.weight_sync import safetensors_bytes

pytestmark = [pytest.mark.integration, pytest.mark.slow]
FAMILIES = ["qwen2_5_vl", "qwen3_vl"]
TOLERANCE = 1e-5


def perturbed(model, seed: int):
    """A copy of ``model`` with every weight moved by N(0, 0.05²) noise (seeded)."""
    generator = torch.Generator().manual_seed(seed)
    new = copy.deepcopy(model)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
    return new


def gap(expected: torch.Tensor, got: list[float]) -> float:
    return (expected - torch.tensor(got)).abs().max().item()


@pytest.mark.parametrize(("family", "transport"), [("qwen2_5_vl", "file"), ("qwen3_vl", "bytes")])
def test_logprobs_follow_the_pushed_weights(
    rollout_engine, video_sample, tiny_models, hf_model, hf_logprobs, family, transport
):
    engine = rollout_engine(family)
    old = hf_model(tiny_models[family])
    new = perturbed(old, seed=1)
    sample = video_sample(family, "tall_in_time", f"push-{family}")
    start = engine.weight_version  # the shared engine may have seen pushes already
    (before,) = engine.rollout([sample], n=1)[0].responses  # the clip is now in the encoder/prefix caches
    assert (before.weight_version, before.weight_versions) == (start, ((0, start),))
    try:
        engine.push_weights(new.state_dict(), transport=transport)
        assert engine.weight_version == start + 1
        for response in engine.rollout([sample])[0].responses:
            assert gap(hf_logprobs(engine, new, sample, response.token_ids), response.logprobs) < TOLERANCE
            assert gap(hf_logprobs(engine, old, sample, response.token_ids), response.logprobs) > 1e-3
            assert (response.weight_version, response.weight_versions) == (start + 1, ((0, start + 1),))
    finally:
        engine.push_weights(safetensors_bytes(old.state_dict()))  # raw bytes: the other entry point
    for response in engine.rollout([sample])[0].responses:
        assert gap(hf_logprobs(engine, old, sample, response.token_ids), response.logprobs) < TOLERANCE
        # the old weights again, but pushed: a new version
        assert (response.weight_version, response.weight_versions) == (start + 2, ((0, start + 2),))


def test_a_checkpoint_folder_can_be_pushed(
    rollout_engine, video_sample, tiny_models, hf_model, hf_logprobs, tmp_path
):
    engine = rollout_engine("qwen2_5_vl")
    old = hf_model(tiny_models["qwen2_5_vl"])
    new = perturbed(old, seed=2)
    new.save_pretrained(tmp_path / "step-1")
    sample = video_sample("qwen2_5_vl", "wide", "push-folder")
    try:
        engine.push_weights(tmp_path / "step-1")
        response = engine.rollout([sample], n=1)[0].responses[0]
        assert gap(hf_logprobs(engine, new, sample, response.token_ids), response.logprobs) < TOLERANCE
    finally:
        engine.push_weights(old.state_dict())


@pytest.mark.parametrize("transport", ["file", "bytes"])
def test_a_push_without_the_vision_tower_is_refused_and_the_old_weights_stay(
    rollout_engine, video_sample, tiny_models, hf_model, hf_logprobs, transport
):
    # vLLM itself would log "weights were not loaded" and keep the old vision tower: a silent half-push
    engine = rollout_engine("qwen2_5_vl")
    old = hf_model(tiny_models["qwen2_5_vl"])
    new = perturbed(old, seed=4)
    language_only = {k: v for k, v in new.state_dict().items() if not k.startswith("model.visual.")}
    start = engine.weight_version
    with pytest.raises(ValueError, match=r"state dict does not match .* missing \(e\.g\. \['model\.visual\."):
        engine.push_weights(language_only, transport=transport)
    assert engine.weight_version == start  # refused before anything reached the workers
    sample = video_sample("qwen2_5_vl", "wide", f"refused-{transport}")
    response = engine.rollout([sample], n=1)[0].responses[0]
    assert gap(hf_logprobs(engine, old, sample, response.token_ids), response.logprobs) < TOLERANCE
