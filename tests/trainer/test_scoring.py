"""Rewards of a step: a reward service that stays down fails the step by name (never zeros)."""

from __future__ import annotations

import socket

import pytest

from services.reward import RewardConfig
from services.reward.client import HttpRewardClient, InProcessRewardClient
from services.rollout.samples import RolloutGroup, RolloutResponse, RolloutSample
from services.trainer.loop import RewardStepError, score_groups


class _Sample:
    def __init__(self, reward: dict, assistant_prefix: str | None = None) -> None:
        self.reward = reward
        self.rollout = RolloutSample(id="s", prompt="?", assistant_prefix=assistant_prefix)


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


def test_answers_are_read_after_the_samples_assistant_prefix() -> None:
    # "B) y. A) was not it" names two letters (a hedge, no answer) alone; after the prompt's
    # "Best option:(" the final-answer phrase reads B
    prefixed = _Sample(SAMPLE.reward, assistant_prefix="Best option:(")
    hedge = "B) y. A) was not it"
    scored = score_groups(InProcessRewardClient(), 1, [prefixed, SAMPLE], [_group([hedge]), _group([hedge])])
    assert scored.accuracy == [1.0, 0.0]


def test_a_reward_service_that_is_down_fails_the_step_by_name() -> None:
    config = RewardConfig(url=f"http://127.0.0.1:{_free_port()}", http_retries=1, http_timeout_s=2.0)
    with (
        HttpRewardClient(config) as client,
        pytest.raises(RewardStepError, match="step 7: the reward service failed"),
    ):
        score_groups(client, 7, [SAMPLE], [_group(["<answer>B</answer>"])])


class _Engine:
    """Stands in for the rollout engine: answers every prompt with ``text`` (the scoring is tested)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def rollout(self, samples: list[RolloutSample], **_: object) -> list[RolloutGroup]:
        return [_group([self.text]) for _ in samples]


def test_validation_and_the_remax_baseline_read_answers_after_the_assistant_prefix() -> None:
    """The same prefix rule as the training groups' scores: one helper (``reward_item``) for all."""
    from services.trainer.config import parse_config
    from services.trainer.loop import Trainer

    hedge = "B) y. A) was not it"
    prefixed = _Sample(SAMPLE.reward, assistant_prefix="Best option:(")
    prefixed.problem_type, prefixed.prompt_tokens = "multiple choice", 1
    config = parse_config({"data": {"train_files": ["t.jsonl"]}, "actor": {"model_path": "m"}})
    trainer = Trainer(config)
    trainer.engine, trainer.reward_client = _Engine(hedge), InProcessRewardClient()
    trainer.val_samples, trainer._step = [prefixed], 1
    expected = score_groups(trainer.reward_client, 1, [prefixed], [_group([hedge])])
    assert expected.accuracy == [1.0]
    assert trainer.validate()["val/accuracy"] == 1.0
    baseline = trainer._greedy_baseline([prefixed])
    assert baseline.tolist() == pytest.approx(expected.overall * config.rollout.n)
