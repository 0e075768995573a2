"""The rollout types check themselves: a sample states its clips' decode parameters (or opts out), an
online response states which weight versions produced its tokens."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.common.frames import VideoParams
from services.rollout.samples import RolloutResponse, RolloutSample

PARAMS = VideoParams(family="qwen2_5_vl", fps=None, nframes=4)


def test_videos_without_decode_params_are_refused_naming_the_sample_and_the_ways_out():
    with pytest.raises(
        ValidationError, match=r"sample 'q1': its 2 video\(s\) carry no decode parameters; set clip_params"
    ) as info:
        RolloutSample(id="q1", prompt="?", videos=("k1", "k2"))
    assert "video_params" in str(info.value) and "check_params=False" in str(info.value)
    # nothing to check: text and image samples need no parameters
    RolloutSample(id="text", prompt="?")
    RolloutSample(id="image", prompt="?", images=("still",))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"video_params": PARAMS.model_dump(), "clip_params": (PARAMS.canonical(),)},
            "sample 'q2': give video_params or clip_params, not both",
        ),
        (
            {"check_params": False, "clip_params": (PARAMS.canonical(),)},
            "sample 'q2': check_params is false but clip_params is set",
        ),
        (
            {"clip_params": (PARAMS.canonical(), PARAMS.canonical())},
            "sample 'q2': 2 clip_params for 1 video",
        ),
        # a partial dict is not a canonical one (a row's video_params overrides are not clip_params)
        ({"clip_params": ({"fps": 2.0},)}, "sample 'q2', video k1: invalid clip_params: .*round-trip"),
        (
            {"clip_params": ({**PARAMS.canonical(), "sampling_version": "old/1"},)},
            "sample 'q2', video k1: invalid clip_params",
        ),
        ({"video_params": {"fps": -1}}, "sample 'q2': invalid video_params"),
    ],
)
def test_contradictory_or_invalid_params_name_the_sample(fields, message):
    with pytest.raises(ValidationError, match=message):
        RolloutSample(id="q2", prompt="?", videos=("k1",), **fields)


def test_expected_params_per_video():
    one_fps = VideoParams(family="qwen3_vl", fps=1.0)
    shared = RolloutSample(
        id="a", prompt="?", videos=("k1", "k2"), video_params={"family": "qwen3_vl", "fps": 1.0}
    )
    assert shared.expected_params() == [one_fps.canonical(), one_fps.canonical()]
    per_clip = RolloutSample(
        id="b", prompt="?", videos=("k1", "k2"), clip_params=(PARAMS.canonical(), one_fps.canonical())
    )
    assert per_clip.expected_params() == [PARAMS.canonical(), one_fps.canonical()]
    unchecked = RolloutSample(id="c", prompt="?", videos=("k1",), check_params=False)
    assert unchecked.expected_params() == [None]


def test_preprocess_rows_clip_params_survive_a_json_round_trip():
    sample = RolloutSample(id="r", prompt="?", videos=("k1",), clip_params=(PARAMS.canonical(),))
    again = RolloutSample.model_validate_json(sample.model_dump_json())
    assert again == sample and again.expected_params() == [PARAMS.canonical()]


def online(**fields) -> RolloutResponse:
    values = {"token_ids": [5, 6, 7, 8, 9], "logprobs": [-1.0] * 5, "text": "x", "finish_reason": "length"}
    return RolloutResponse(**{**values, **fields})


def test_token_weight_versions_expand_the_spans():
    response = online(weight_version=3, weight_versions=((0, 3), (2, 4)))
    assert response.token_weight_versions() == [3, 3, 4, 4, 4]
    assert online(weight_version=7, weight_versions=((0, 7),)).token_weight_versions() == [7] * 5
    empty = RolloutResponse(
        token_ids=[], logprobs=[], text="", finish_reason="abort", weight_version=1, weight_versions=((0, 1),)
    )
    assert empty.token_weight_versions() == []


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "an online response needs weight_version and weight_versions"),
        ({"weight_version": 1, "weight_versions": ((1, 1),)}, "must start at token 0"),
        ({"weight_version": 1, "weight_versions": ((0, 1), (0, 2))}, "must start at token 0 and ascend"),
        ({"weight_version": 1, "weight_versions": ((0, 1), (5, 2))}, "start past the 5 tokens"),
        ({"weight_version": 2, "weight_versions": ((0, 2), (3, 1))}, "must increase along the response"),
        ({"weight_version": 2, "weight_versions": ((0, 1), (3, 2))}, "not the first span's version 1"),
    ],
)
def test_online_responses_must_carry_consistent_versions(fields, message):
    with pytest.raises(ValidationError, match=message):
        online(**fields)


def test_offline_responses_carry_no_version():
    offline = {"token_ids": [1], "logprobs": None, "text": "x", "finish_reason": "offline", "offline": True}
    assert RolloutResponse(**offline).token_weight_versions() is None
    with pytest.raises(ValidationError, match="an offline response has no weight version"):
        RolloutResponse(**offline, weight_version=0, weight_versions=((0, 0),))
