"""Train/infer consistency on multi-frame video, Qwen2.5-VL and Qwen3-VL tiny checkpoints (fp32):
(a) vLLM's prompt token ids equal the HF processor's for the same cached clip;
(b) the logprobs vLLM reports for sampled tokens equal the HF model's teacher-forced ones to 1e-5.
"""

from __future__ import annotations

import pytest

from services.rollout import consistency
from services.rollout.media import load_media
from services.rollout.prompts import render_prompt
from services.rollout.samples import RolloutSample

pytestmark = [pytest.mark.integration, pytest.mark.slow]
FAMILIES = ["qwen2_5_vl", "qwen3_vl"]
CLIPS = ["tall_in_time", "wide"]
TOLERANCE = 1e-5


def diff(expected, got) -> float:
    import torch

    return (expected - torch.tensor(got)).abs().max().item()


@pytest.mark.parametrize("family", FAMILIES)
def test_prompt_token_ids_equal_the_hf_processors(rollout_engine, video_sample, family):
    engine = rollout_engine(family)
    samples = [video_sample(family, clip, f"{family}-{clip}") for clip in CLIPS]
    groups = engine.rollout(samples, n=1)
    processor = engine.checkpoint.processor
    for sample, group in zip(samples, groups, strict=True):
        media = load_media(sample, engine.source, engine.family, None)
        inputs = consistency.processor_inputs(
            processor, render_prompt(processor, sample), media, engine.config
        )
        assert inputs["input_ids"][0].tolist() == group.prompt_token_ids, sample.id


@pytest.mark.parametrize("family", FAMILIES)
def test_image_and_text_prompts_tokenise_alike(rollout_engine, family):
    engine = rollout_engine(family)
    samples = [
        RolloutSample(id="image", prompt="What is shown?", images=("still-image",)),
        RolloutSample(id="text", prompt="What is 2 + 2?", system="Answer briefly."),
    ]
    processor = engine.checkpoint.processor
    for sample, group in zip(samples, engine.rollout(samples, n=1), strict=True):
        media = load_media(sample, engine.source, engine.family, None)
        inputs = consistency.processor_inputs(
            processor, render_prompt(processor, sample), media, engine.config
        )
        assert inputs["input_ids"][0].tolist() == group.prompt_token_ids, sample.id


@pytest.mark.parametrize("family", FAMILIES)
def test_sampled_logprobs_equal_hf_teacher_forced_logprobs(
    rollout_engine, video_sample, tiny_models, hf_model, hf_logprobs, family
):
    engine = rollout_engine(family)
    hf = hf_model(tiny_models[family])
    samples = [video_sample(family, clip, f"{family}-{clip}") for clip in CLIPS]
    for sample, group in zip(samples, engine.rollout(samples), strict=True):
        assert len(group.responses) == engine.config.n
        for response in group.responses:
            assert len(response.logprobs) == len(response.token_ids) > 0
            gap = diff(hf_logprobs(engine, hf, sample, response.token_ids), response.logprobs)
            assert gap < TOLERANCE, f"{sample.id}: max |Δ logprob| = {gap:.2e}"


def test_qwen2_5_vl_needs_vllms_position_rule_on_temporally_long_clips(
    rollout_engine, video_sample, tiny_models, hf_model, hf_logprobs
):
    # The clip's merged grid is (4, 2, 2): transformers' own rule continues the text 2 positions too
    # early (at start + 2 instead of start + 4), so without the override the two disagree.
    engine = rollout_engine("qwen2_5_vl")
    hf = hf_model(tiny_models["qwen2_5_vl"])
    sample = video_sample("qwen2_5_vl", "tall_in_time", "needs-rule")
    response = engine.rollout([sample], n=1)[0].responses[0]
    own_rule = hf_logprobs(engine, hf, sample, response.token_ids, vllm_rule=False)
    assert diff(own_rule, response.logprobs) > 100 * TOLERANCE


def test_raw_logprobs_are_the_models_own_at_any_sampling_temperature(
    rollout_engine, video_sample, tiny_models, hf_model, hf_logprobs
):
    # logprobs_mode raw_logprobs: vLLM reports log-softmax of the unscaled logits, what the trainer's
    # teacher-forced forward computes, whatever temperature the tokens were sampled at
    engine = rollout_engine("qwen3_vl")
    hf = hf_model(tiny_models["qwen3_vl"])
    sample = video_sample("qwen3_vl", "wide", "warm")
    (group,) = engine.rollout([sample], n=2, temperature=0.7)
    for response in group.responses:
        gap = diff(hf_logprobs(engine, hf, sample, response.token_ids), response.logprobs)
        assert gap < TOLERANCE, f"max |Δ logprob| = {gap:.2e} at temperature 0.7"
