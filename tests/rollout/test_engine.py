"""The batch engine: groups, mixed offline/online groups through the real engine, media checks and
errors that name the sample, images within their pixel budget, and the install recipe in workers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace

import pytest

from services.reward.client import InProcessRewardClient
from services.rollout.config import RolloutConfig
from services.rollout.media import MediaError
from services.rollout.samples import RolloutSample

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@contextmanager
def configured(engine, reward_client=None, **updates) -> Iterator[None]:
    """The shared engine with some sampling/mix settings (and its gate's reward client) changed."""
    saved = engine.config, engine._reward_client
    engine.config = RolloutConfig.model_validate({**saved[0].model_dump(), **updates})
    engine._reward_client = reward_client or saved[1]
    try:
        yield
    finally:
        engine.config, engine._reward_client = saved


class FixedAccuracy:
    """A reward client whose every response scores ``accuracy``; records what it was asked."""

    def __init__(self, accuracy: float) -> None:
        self.accuracy = accuracy
        self.items: list = []

    def score_batch(self, items):
        self.items += items
        return [SimpleNamespace(accuracy=self.accuracy, error=None) for _ in items]


def test_a_group_holds_n_responses_with_logprobs(rollout_engine, video_sample):
    engine = rollout_engine("qwen2_5_vl")
    groups = engine.rollout([video_sample("qwen2_5_vl", "wide", "g1"), RolloutSample(id="text", prompt="Hi")])
    assert [g.sample_id for g in groups] == ["g1", "text"]
    tokenizer = engine.checkpoint.tokenizer
    for group in groups:
        assert len(group.responses) == 4 and group.offline_mask == [False] * 4
        for r in group.responses:
            assert 0 < len(r.token_ids) <= 12 and len(r.logprobs) == len(r.token_ids)
            assert all(lp <= 0.0 for lp in r.logprobs)
            assert r.finish_reason in ("stop", "length")
            # vLLM stops on any of the checkpoint's stop tokens (the set the trainer masks on)
            assert (r.finish_reason == "stop") == (r.token_ids[-1] in engine.checkpoint.stop_token_ids)
            # vLLM holds back a trailing incomplete UTF-8 sequence; decode shows it as U+FFFD
            assert r.text == tokenizer.decode(r.token_ids, skip_special_tokens=True).rstrip("\ufffd")
            # placeholders are never sampled: they would not match any vision features in training
            assert not set(r.token_ids) & set(engine.checkpoint.placeholder_token_ids)


def test_greedy_rollouts_repeat_exactly(rollout_engine, video_sample):
    engine = rollout_engine("qwen3_vl")
    sample = video_sample("qwen3_vl", "tall_in_time", "greedy")
    twin = sample.model_copy(update={"id": "greedy-twin"})
    first = engine.rollout([sample, twin], n=1, temperature=0.0)
    second = engine.rollout([sample], n=1, temperature=0.0)
    ids = [g.responses[0].token_ids for g in [*first, *second]]
    assert ids[0] == ids[1] == ids[2]


def test_mixed_group_always_injects_the_offline_response(rollout_engine, video_sample):
    engine = rollout_engine("qwen2_5_vl")
    offline_text = "<think>The square moves right.</think><answer>B</answer>"
    sample = video_sample("qwen2_5_vl", "wide", "mixed", offline_output=offline_text)
    # the offline text is 13 tokens with <|im_end|>: max_tokens must leave it room (12 would refuse it)
    with configured(engine, mix_policy=True, max_tokens=16):
        mixed, plain = engine.rollout([sample, video_sample("qwen2_5_vl", "wide", "plain")])
    assert mixed.offline_mask == [False, False, False, True]  # n-1 = 3 generated + the offline one
    offline = mixed.responses[-1]
    tokenizer = engine.checkpoint.tokenizer
    assert offline.token_ids == [*tokenizer(offline_text).input_ids, engine.checkpoint.end_token_id]
    assert offline.logprobs is None and offline.text == offline_text
    assert plain.offline_mask == [False] * 4  # no offline_output: an ordinary group


def test_a_mixing_engine_refuses_n_1_unless_mixing_is_off_for_the_call(rollout_engine, video_sample):
    from pydantic import ValidationError

    engine = rollout_engine("qwen2_5_vl")
    sample = video_sample("qwen2_5_vl", "wide", "baseline", offline_output="<answer>A</answer>")
    with configured(engine, mix_policy=True):
        # n=1 would generate n-1 = 0 responses and hand vLLM an obscure n=0 request
        with pytest.raises(ValidationError, match="mix_policy needs n >= 2"):
            engine.rollout([sample], n=1, temperature=0.0)
        (group,) = engine.rollout([sample], n=1, temperature=0.0, mix_policy=False)
    assert group.offline_mask == [False]
    assert len(group.responses[0].token_ids) > 0


def test_a_too_long_offline_output_names_the_sample_before_generating(rollout_engine, video_sample):
    engine = rollout_engine("qwen2_5_vl")
    sample = video_sample("qwen2_5_vl", "wide", "too-long", offline_output="word " * 40)
    with (
        configured(engine, mix_policy=True),
        pytest.raises(ValueError, match=r"sample 'too-long': offline_output is \d+ tokens .* max_tokens=12"),
    ):
        engine.rollout([sample])


@pytest.mark.parametrize(("accuracy", "injected"), [(0.25, True), (0.5, False), (1.0, False)])
def test_the_accuracy_gate_injects_only_below_the_threshold(rollout_engine, video_sample, accuracy, injected):
    engine = rollout_engine("qwen2_5_vl")
    scorer = FixedAccuracy(accuracy)
    sample = video_sample(
        "qwen2_5_vl",
        "wide",
        "gated",
        offline_output="<answer>A</answer>",
        reward={"problem_type": "mcq", "answer": "A"},
    )
    with configured(engine, scorer, mix_policy=True, mix_accuracy_threshold=0.5):
        (group,) = engine.rollout([sample])
    # n = 4 online responses were generated and scored; the last one is replaced when mean < 0.5
    assert len(scorer.items) == 4
    assert scorer.items[0][0] == {"id": "gated", "problem_type": "mcq", "answer": "A"}
    assert group.offline_mask == [False, False, False, injected]
    assert group.online_accuracy == accuracy


def test_the_gate_scores_with_the_reward_library(rollout_engine, video_sample):
    # A tiny random model cannot write this number, so every online accuracy is 0 < 0.5: inject.
    engine = rollout_engine("qwen2_5_vl")
    sample = video_sample(
        "qwen2_5_vl",
        "wide",
        "real-gate",
        offline_output="<answer>987654.321</answer>",
        reward={"problem_type": "numerical", "answer": "987654.321"},
    )
    # the offline text is 16 tokens with <|im_end|>, over the default 12
    with configured(
        engine, InProcessRewardClient(), mix_policy=True, mix_accuracy_threshold=0.5, max_tokens=16
    ):
        (group,) = engine.rollout([sample])
    assert group.online_accuracy == 0.0
    assert group.offline_mask == [False, False, False, True]


def test_the_gate_names_a_sample_it_cannot_score(rollout_engine, video_sample):
    engine = rollout_engine("qwen2_5_vl")
    sample = video_sample(
        "qwen2_5_vl", "wide", "unscorable", offline_output="x", reward={"problem_type": "mcq"}
    )
    with (
        configured(engine, InProcessRewardClient(), mix_policy=True, mix_accuracy_threshold=0.5),
        pytest.raises(ValueError, match="sample 'unscorable': the mix gate cannot score it"),
    ):
        engine.rollout([sample])


def test_a_clip_stored_for_another_family_names_the_sample(rollout_engine, clips):
    engine = rollout_engine("qwen2_5_vl")
    # the store holds the clip as the sample expects it, but for Qwen3-VL's patch grid
    wrong = RolloutSample(
        id="wrong-family",
        prompt="q",
        videos=(clips.keys["qwen3_vl"]["wide"],),
        clip_params=(clips.params["qwen3_vl"]["wide"].canonical(),),
    )
    with pytest.raises(MediaError, match=r"sample 'wrong-family', video .* stored for family 'qwen3_vl'"):
        engine.rollout([RolloutSample(id="fine", prompt="q"), wrong])


def test_a_clip_decoded_with_other_params_names_the_clip(rollout_engine, clips):
    from services.common.frames import ParamsMismatch

    engine = rollout_engine("qwen2_5_vl")
    params = clips.params["qwen2_5_vl"]["wide"].model_dump()
    params["max_frames"] = 16
    sample = RolloutSample(
        id="s", prompt="q", videos=(clips.keys["qwen2_5_vl"]["wide"],), video_params=params
    )
    key = clips.keys["qwen2_5_vl"]["wide"]
    with pytest.raises(
        ParamsMismatch, match=rf"sample 's', video {key}: clip {key} .*max_frames: stored 768 != requested 16"
    ):
        engine.rollout([sample])


@pytest.mark.parametrize(
    ("max_pixels", "tokens"),
    [
        # 150x200 rounds to 140x196 = 27,440 px > 16·28² = 12,544: scaled by √(30,000/12,544) = 1.55
        # and floored to multiples of 28 → 84x112 → (6·8 patches)/4 = 12 tokens
        (16 * 28 * 28, 12),
        # 27,440 px fits 64·28² = 50,176: 140x196 → (10·14)/4 = 35 tokens
        (64 * 28 * 28, 35),
    ],
)
def test_images_are_resized_within_the_image_pixel_budget(rollout_engine, max_pixels, tokens):
    engine = rollout_engine("qwen2_5_vl")
    sample = RolloutSample(id="img", prompt="What is shown?", images=("still-image",))
    with configured(engine, image_min_pixels=4 * 28 * 28, image_max_pixels=max_pixels):
        (group,) = engine.rollout([sample], n=1)
    assert group.prompt_token_ids.count(engine.checkpoint.image_token_id) == tokens


def test_torchvision_imports_in_the_engines_worker_processes(rollout_engine):
    # The install recipe's .pth hook must reach processes that never import ReelRL themselves.
    (runtime,) = rollout_engine("qwen2_5_vl").worker_runtime()
    assert runtime["torchvision_ok"]
    assert runtime["compat_applied"] == (not runtime["extension_loads"])


def test_sleep_mode_is_refused_where_vllm_cannot_sleep(tiny_models, clips, make_config):
    from services.rollout.async_engine import AsyncRolloutEngine
    from services.rollout.engine import RolloutEngine

    config = make_config(engine={**make_config().engine.model_dump(), "enable_sleep_mode": True})
    for engine_class in (RolloutEngine, AsyncRolloutEngine):
        # before anything starts, naming the setting (vLLM's own error names neither)
        with pytest.raises(ValueError, match=r"engine.enable_sleep_mode: .* this vLLM runs on cpu"):
            engine_class(tiny_models["qwen2_5_vl"], config, source=clips.store)


def test_sleep_on_cpu_is_a_no_op_that_says_so(rollout_engine, video_sample, caplog):
    engine = rollout_engine("qwen2_5_vl")
    with pytest.raises(ValueError, match=r"sleep level must be 1 .* or 2"):
        engine.sleep(3)
    with caplog.at_level("WARNING", logger="services.rollout.engine_base"):
        assert engine.sleep(1) is False
    assert "sleep(level=1) is a no-op: vLLM's CPU backend cannot release" in caplog.text
    assert not engine.sleeping
    assert engine.wake_up() is False  # was not asleep
    sample = video_sample("qwen2_5_vl", "wide", "after-sleep")
    assert len(engine.rollout([sample], n=1)[0].responses[0].token_ids) > 0
