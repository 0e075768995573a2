"""Prompts: chat format, placeholder checks, processor arguments, and the feature-count check."""

from __future__ import annotations

import numpy as np
import pytest

from services.rollout.checkpoint import Checkpoint, family_of
from services.rollout.media import SampleMedia
from services.rollout.prompts import (
    EngineInput,
    PlaceholderMismatch,
    check_feature_count,
    check_media_counts,
    engine_input,
    prepare_inputs,
    processor_kwargs,
    render_prompt,
)
from services.rollout.samples import RolloutSample


@pytest.fixture(scope="module")
def checkpoint(tiny_models) -> Checkpoint:
    return Checkpoint.load(tiny_models["qwen2_5_vl"])


def test_checkpoint_facts_come_from_its_config_and_tokenizer(checkpoint):
    tok = checkpoint.tokenizer
    assert checkpoint.family.name.value == "qwen2_5_vl"
    assert checkpoint.video_token_id == tok.convert_tokens_to_ids("<|video_pad|>")
    assert checkpoint.image_token_id == tok.convert_tokens_to_ids("<|image_pad|>")
    assert checkpoint.end_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    # vLLM stops on the tokenizer's EOS (<|im_end|>) and on generation_config's eos_token_id list,
    # which the tiny builder sets to [<|im_end|>, <|endoftext|>]
    assert checkpoint.stop_token_ids == {
        tok.convert_tokens_to_ids("<|im_end|>"),
        tok.convert_tokens_to_ids("<|endoftext|>"),
    }


def test_unknown_model_types_are_named():
    class Config:
        model_type = "llava"

    with pytest.raises(ValueError, match="model type 'llava' is not a supported family"):
        family_of(Config())


def test_prompt_puts_images_then_videos_then_the_question(checkpoint):
    sample = RolloutSample(
        id="s", prompt="What changes?", system="Be brief.", images=("i",), videos=("v",), check_params=False
    )
    assert render_prompt(checkpoint.processor, sample) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>"
        "<|vision_start|><|video_pad|><|vision_end|>What changes?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


@pytest.mark.parametrize(
    ("prompt", "videos", "message"),
    [
        ("Look: <|video_pad|>", ("v",), r"sample 'bad-1': the prompt holds 2 video placeholder"),
        ("<|image_pad|> here", (), r"sample 'bad-1': the prompt holds 1 image placeholder.* has 0 image"),
    ],
)
def test_placeholders_in_the_question_text_are_errors_naming_the_sample(checkpoint, prompt, videos, message):
    with pytest.raises(PlaceholderMismatch, match=message):
        render_prompt(
            checkpoint.processor, RolloutSample(id="bad-1", prompt=prompt, videos=videos, check_params=False)
        )


def test_processor_kwargs_keep_stored_videos_and_bound_images(make_config):
    config = make_config(image_min_pixels=3136, image_max_pixels=12544)
    assert processor_kwargs(config) == {
        "do_sample_frames": False,
        "videos_kwargs": {"do_resize": False},
        "images_kwargs": {"size": {"shortest_edge": 3136, "longest_edge": 12544}},
    }


def test_engine_input_counts_the_video_tokens_it_expects(checkpoint, make_config):
    clip = np.zeros((8, 56, 84, 3), dtype=np.uint8)
    media = SampleMedia(videos=[(clip, {"fps": 30.0})])
    sample = RolloutSample(id="s", prompt="q", videos=("v",), check_params=False)
    item = engine_input(checkpoint.processor, sample, media, checkpoint.family, make_config())
    # (8/2)·(56/14)·(84/14) / 2² = 4·4·6/4 = 24
    assert item.video_tokens == 24
    assert item.prompt["multi_modal_data"]["video"][0] is clip
    assert item.prompt["mm_processor_kwargs"]["videos_kwargs"] == {"do_resize": False}


def test_text_only_samples_send_no_media(checkpoint, make_config):
    sample = RolloutSample(id="t", prompt="2 + 2?")
    item = engine_input(checkpoint.processor, sample, SampleMedia(), checkpoint.family, make_config())
    assert set(item.prompt) == {"prompt"}
    assert item.video_tokens == 0


def test_feature_count_mismatch_names_the_sample_and_its_clips():
    item = EngineInput(
        sample=RolloutSample(id="s7", prompt="q", videos=("k1",), check_params=False),
        prompt={},
        video_tokens=16,
    )
    check_feature_count(item, [1] + [5] * 16 + [2], video_token_id=5)
    with pytest.raises(
        PlaceholderMismatch, match=r"sample 's7': .* 15 video tokens but its clips \['k1'\] hold 16"
    ):
        check_feature_count(item, [1] + [5] * 15 + [2], video_token_id=5)


class NoFrames:
    def load(self, key, expect):
        raise AssertionError(f"media of {key} loaded before the offline outputs were checked")


def test_a_too_long_offline_output_fails_before_any_media_is_loaded(checkpoint, make_config):
    config = make_config(mix_policy=True, max_tokens=4)
    text = "one two three four five six"
    length = len(checkpoint.tokenizer(text, add_special_tokens=False).input_ids) + 1  # + <|im_end|>
    assert length > 4
    samples = [
        RolloutSample(id="ok", prompt="q", videos=("v",), check_params=False),
        RolloutSample(id="wordy", prompt="q", videos=("v",), check_params=False, offline_output=text),
    ]
    with pytest.raises(
        ValueError, match=rf"sample 'wordy': offline_output is {length} tokens .* max_tokens=4"
    ):
        prepare_inputs(samples, checkpoint, NoFrames(), config)
    # not mixing: the offline output is not used, so not checked
    with pytest.raises(AssertionError, match="loaded before"):
        prepare_inputs(samples, checkpoint, NoFrames(), make_config(max_tokens=4))


def test_more_media_than_the_engine_allows_is_refused_naming_the_sample():
    two_videos = RolloutSample(id="s7", prompt="Compare.", videos=("k1", "k2"), check_params=False)
    check_media_counts(two_videos, {"video": 2, "image": 1})
    with pytest.raises(ValueError, match=r"sample 's7': 2 video\(s\) but .*limit_mm_per_prompt allows 1"):
        check_media_counts(two_videos, {"video": 1, "image": 1})
    with pytest.raises(ValueError, match=r"sample 'i': 1 image\(s\) .* allows 0"):
        check_media_counts(RolloutSample(id="i", prompt="?", images=("k",)), {"video": 1})
