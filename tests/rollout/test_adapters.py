"""``rollout_sample``: the one mapping from a shared Sample (+ keys, params, prompt) to the rollout input,
as the trainer and eval call it."""

from __future__ import annotations

import pytest

from services.common.frames.params import VideoParams
from services.common.samples import Sample
from services.rollout.adapters import rollout_sample
from services.rollout.samples import RolloutSample, continued_response

PARAMS = VideoParams(family="qwen2_5_vl", fps=None, nframes=4, min_pixels=3136, max_pixels=6272)


def two_videos(**fields) -> Sample:
    return Sample(
        id="s1", problem="What changes?", problem_type="multiple choice", videos=["a.mp4", "b.mp4"],
        options=["A. x", "B. y"], answer="B", **fields,
    )  # fmt: skip


def test_trainer_call_keeps_every_field():
    """What services/trainer/data.py passes: keys, one VideoParams dict, reward, the offline output."""
    sample = two_videos(offline_output="<answer>B</answer>")
    reward = {"problem_type": "multiple choice", "answer": "B", "options": ["A. x", "B. y"]}
    got = rollout_sample(
        sample, "rendered prompt", videos=["k1", "k2"], video_params=PARAMS.model_dump(mode="json"),
        system="be brief", reward=reward,
    )  # fmt: skip
    assert got == RolloutSample(
        id="s1", prompt="rendered prompt", system="be brief", videos=("k1", "k2"),
        video_params=PARAMS.model_dump(mode="json"), offline_output="<answer>B</answer>", reward=reward,
    )  # fmt: skip
    assert got.expected_params() == [PARAMS.canonical(), PARAMS.canonical()]


def test_eval_call_per_clip_params_prefix_and_id():
    sample = two_videos(offline_output="<answer>B</answer>")
    got = rollout_sample(
        sample, "p", videos=["k1", "k2"], clip_params=[PARAMS, PARAMS.canonical()],
        assistant_prefix="Best Option: (", sample_id="mlvu/s1", offline_output=False,
    )  # fmt: skip
    assert (got.id, got.assistant_prefix, got.offline_output, got.video_params) == (
        "mlvu/s1", "Best Option: (", None, None,
    )  # fmt: skip
    assert got.clip_params == (PARAMS.canonical(), PARAMS.canonical())
    assert continued_response(got.assistant_prefix, "A) x") == "Best Option: (A) x"
    assert continued_response(None, "A") == "A"


def test_keys_must_match_the_samples_media():
    with pytest.raises(ValueError, match=r"sample 's1': 1 video key\(s\) for its 2 video\(s\)"):
        rollout_sample(two_videos(), "p", videos=["k1"], video_params=PARAMS)
    text = Sample(id="t", problem="2+2?", problem_type="numerical", answer="4")
    assert rollout_sample(text, "p").videos == ()
    with pytest.raises(ValueError, match="carry no decode parameters"):
        rollout_sample(two_videos(), "p", videos=["k1", "k2"])
