"""Rewards of a step: a reward service that stays down fails the step by name (never zeros)."""

from __future__ import annotations

import socket

import pytest

from services.reward import RewardConfig
from services.reward.client import HttpRewardClient, InProcessRewardClient
from services.rollout.samples import RolloutGroup, RolloutResponse
from services.trainer.loop import RewardStepError, score_groups


class _Sample:
    def __init__(self, reward: dict) -> None:
        self.reward = reward


def _group(texts: list[str]) -> RolloutGroup:
    return RolloutGroup(
        sample_id="s",
        prompt_token_ids=[1],
        responses=[
            RolloutResponse(
                token_ids=[1],
                logprobs=[0.0],
                text=t,
                finish_reason="stop",
                weight_version=0,
                weight_versions=((0, 0),),
            )
            for t in texts
        ],
    )


SAMPLE = _Sample({"id": "s", "problem_type": "multiple choice", "options": ["A. x", "B. y"], "answer": "B"})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_scores_in_process() -> None:
    scored = score_groups(
        InProcessRewardClient(), 3, [SAMPLE], [_group(["<answer>B</answer>", "<answer>A</answer>", "B"])]
    )
    assert scored.accuracy == [1.0, 0.0, 1.0]
    assert scored.format == [1.0, 1.0, 0.0]
    assert scored.overall == pytest.approx([1.0, 0.1, 0.9])


def test_a_reward_service_that_is_down_fails_the_step_by_name() -> None:
    config = RewardConfig(url=f"http://127.0.0.1:{_free_port()}", http_retries=1, http_timeout_s=2.0)
    with (
        HttpRewardClient(config) as client,
        pytest.raises(RewardStepError, match="step 7: the reward service failed"),
    ):
        score_groups(client, 7, [SAMPLE], [_group(["<answer>B</answer>"])])
