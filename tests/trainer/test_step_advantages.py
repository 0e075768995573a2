"""A step's advantages from its groups, hand-computed with RLOO (baseline = mean of the others)."""

from __future__ import annotations

import pytest
import torch

from services.rollout.samples import RolloutGroup, RolloutResponse
from services.trainer.algorithms import AlgorithmConfig
from services.trainer.loop import Scored, step_advantages


def _groups(*lengths: tuple[int, ...]) -> list[RolloutGroup]:
    return [
        RolloutGroup(
            sample_id=f"s{g}",
            prompt_token_ids=[1],
            responses=[
                RolloutResponse(
                    token_ids=[5] * n,
                    logprobs=[0.0] * n,
                    text="",
                    finish_reason="stop",
                    weight_version=0,
                    weight_versions=((0, 0),),
                )
                for n in group
            ],
        )
        for g, group in enumerate(lengths)
    ]


def _scored(overall: list[float]) -> Scored:
    return Scored(overall=overall, accuracy=overall, format=[1.0] * len(overall))


RLOO = {"advantage_estimator": "rloo", "kl": {"mode": "off"}}


def test_rloo_per_group_and_signal_share() -> None:
    groups = _groups((2, 3), (1, 1))
    adv, m = step_advantages(AlgorithmConfig(**RLOO), groups, _scored([1.0, 0.0, 0.5, 0.5]), None, None, 0.0)
    # group 0: 1 - 0 = 1 and 0 - 1 = -1 on every token; group 1: equal rewards, no signal
    assert [a.tolist() for a in adv] == [[1.0, 1.0], [-1.0, -1.0, -1.0], [0.0], [0.0]]
    assert m["actor/groups_with_signal"] == 0.5
    assert m["actor/advantage_abs_mean"] == pytest.approx(5 / 7)


def test_overlong_penalty_enters_the_return() -> None:
    algo = AlgorithmConfig(**RLOO, overlong_penalty={"enabled": True, "max_length": 4, "buffer_length": 2})
    # lengths 2 and 4: e = 4 - 2 = 2; 2 tokens → 0, 4 tokens → (2 - 4) / 2 = -1; returns 1 and -1
    adv, m = step_advantages(algo, _groups((2, 4)), _scored([1.0, 0.0]), None, None, 0.0)
    assert adv[0].tolist() == [2.0, 2.0] and adv[1].tolist() == [-2.0] * 4
    assert m["reward/overlong_penalty"] == -0.5


def test_kl_in_the_reward_changes_the_advantages() -> None:
    algo = AlgorithmConfig(advantage_estimator="rloo", kl={"mode": "reward", "estimator": "k1", "coef": 0.5})
    old = [torch.zeros(2), torch.zeros(2)]
    ref = [torch.full((2,), -1.0), torch.zeros(2)]  # k1 = old - ref: 1 per token for the first response
    adv, m = step_advantages(algo, _groups((2, 2)), _scored([1.0, 0.0]), old, ref, 0.5)
    # returns: 1 - 0.5 * (1 + 1) = 0 and 0 - 0 = 0: the KL penalty cancels the reward gap entirely
    assert adv[0].tolist() == [0.0, 0.0] and adv[1].tolist() == [0.0, 0.0]
    assert m["actor/kl_ref"] == 0.5  # 2 of 4 tokens at 1
    no_kl, _ = step_advantages(AlgorithmConfig(**RLOO), _groups((2, 2)), _scored([1.0, 0.0]), old, ref, 0.5)
    assert no_kl[0].tolist() == [1.0, 1.0]


def test_gdpo_sees_the_overlong_penalty() -> None:
    base = {"advantage_estimator": "gdpo", "kl": {"mode": "off"}}
    groups = _groups((2, 4), (2, 4))
    scored = _scored([1.0, 1.0, 1.0, 1.0])
    plain, _ = step_advantages(AlgorithmConfig(**base), groups, scored, None, None, 0.0)
    penalised, m = step_advantages(
        AlgorithmConfig(**base, overlong_penalty={"enabled": True, "max_length": 4, "buffer_length": 2}),
        groups, scored, None, None, 0.0,
    )  # fmt: skip
    assert all(float(a.abs().max()) == 0.0 for a in plain)  # equal rewards: no signal
    # the 4-token responses are penalised -1: now the short ones are better than the long ones
    assert float(penalised[0][0]) > 0 > float(penalised[1][0]) and m["reward/overlong_penalty"] == -0.5
