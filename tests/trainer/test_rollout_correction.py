"""Rollout correction (services/trainer/algorithms/rollout_correction.py): the ratios, the TIS and MIS
weights and the mismatch metrics against hand-computed values; the weights' entry into the loss
(through the advantages) equal to weighting each token's loss; MIS dropping tokens from the loss's
normaliser; the config's refusals."""

from __future__ import annotations

import math
import re

import pytest
import torch

from services.trainer.algorithms import AlgorithmConfig, compute_policy_loss
from services.trainer.algorithms.rollout_correction import (
    RolloutCorrectionConfig,
    correction,
    mismatch_metrics,
    ratios,
)
from services.trainer.batch import MicroBatch, PromptInputs, TokenSequence
from services.trainer.update import SequenceTargets, _drop_outside_band, _rollout_weights

E = math.e


def test_ratios_per_token_and_per_sequence_by_hand() -> None:
    old = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, 0.0]])
    rollout = torch.tensor([[-1.5, -2.0, -1.0], [-0.5, -1.5, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    token = ratios(old, rollout, mask, "token")
    # exp(0.5), exp(0), exp(-2); exp(0), exp(1), padding → 1
    torch.testing.assert_close(token, torch.tensor([[E**0.5, 1.0, E**-2], [1.0, E, 1.0]]))
    sequence = ratios(old, rollout, mask, "sequence")
    # row 0: exp(0.5 + 0 - 2) = exp(-1.5) on every token; row 1: exp(1) on its two tokens
    torch.testing.assert_close(sequence, torch.tensor([[E**-1.5] * 3, [E, E, 1.0]]))
    # bounded to e^20 however long the sequence: no overflow to inf
    far = ratios(torch.zeros(1, 50), torch.full((1, 50), -5.0), torch.ones(1, 50), "sequence")
    torch.testing.assert_close(far, torch.full((1, 50), E**20))


def test_tis_truncates_and_mis_masks_by_hand() -> None:
    rho = torch.tensor([[0.25, 1.0, 3.0, 1.5]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    weights, keep = correction(rho, mask, RolloutCorrectionConfig(enabled=True, mode="tis", cap=2.0))
    torch.testing.assert_close(weights, torch.tensor([[0.25, 1.0, 2.0, 0.0]]))
    assert keep.tolist() == [[True, True, True, False]]
    weights, keep = correction(rho, mask, RolloutCorrectionConfig(enabled=True, mode="mis", band=(0.5, 2.0)))
    torch.testing.assert_close(weights, torch.tensor([[0.0, 1.0, 0.0, 0.0]]))
    assert keep.tolist() == [[False, True, False, False]]
    # the band's edges are inside it
    edges = torch.tensor([[0.5, 2.0]])
    _, keep = correction(edges, torch.ones(1, 2), RolloutCorrectionConfig(enabled=True, mode="mis"))
    assert keep.tolist() == [[True, True]]


def test_mismatch_metrics_by_hand() -> None:
    old = torch.tensor([[0.0, 0.0, 0.0]])
    rollout = torch.tensor([[math.log(2.0), -math.log(3.0), 0.0]])  # ρ = 1/2, 3, 1
    mask = torch.ones(1, 3)
    tis = mismatch_metrics(old, rollout, mask, RolloutCorrectionConfig())  # off: what tis would clip
    assert tis["rollout_corr/ratio_mean"] == pytest.approx((0.5 + 3.0 + 1.0) / 3)
    assert tis["rollout_corr/ratio_max"] == pytest.approx(3.0)
    assert tis["rollout_corr/ratio_min"] == pytest.approx(0.5)
    assert tis["rollout_corr/clipped_frac"] == pytest.approx(1 / 3)  # 3 > cap 2
    assert tis["rollout_corr/kl"] == pytest.approx((math.log(2.0) - math.log(3.0)) / 3)
    mis = mismatch_metrics(old, rollout, mask, RolloutCorrectionConfig(mode="mis", band=(0.6, 2.0)))
    assert mis["rollout_corr/clipped_frac"] == pytest.approx(2 / 3)  # 1/2 < 0.6 and 3 > 2
    assert mismatch_metrics(old, rollout, torch.zeros(1, 3), RolloutCorrectionConfig()) == {}


def test_weighting_the_advantages_weighs_each_tokens_loss() -> None:
    """PPO's clipped surrogate with A·w equals w times the surrogate with A, token by token, for w >= 0:
    the weights enter every registered loss this way."""
    log_probs = torch.tensor([[-1.0, -0.2, -2.0]])
    old = torch.tensor([[-1.3, -0.2, -1.0]])
    adv = torch.tensor([[1.0, -2.0, 0.5]])
    mask = torch.ones(1, 3)
    w = torch.tensor([[2.0, 0.5, 0.0]])
    params = AlgorithmConfig().policy_loss_params()
    one = torch.tensor(1.0)
    weighted, _ = compute_policy_loss("ppo", log_probs=log_probs, old_log_probs=old, advantages=adv * w,
                                      response_mask=mask, global_normaliser=one * 3, **params)  # fmt: skip
    per_token = []
    for t in range(3):
        single = torch.zeros(1, 3)
        single[0, t] = 1.0
        loss, _ = compute_policy_loss("ppo", log_probs=log_probs, old_log_probs=old, advantages=adv,
                                      response_mask=single, global_normaliser=one, **params)  # fmt: skip
        per_token.append(float(w[0, t]) * float(loss))
    assert float(weighted) == pytest.approx(sum(per_token) / 3)


def _sequence(response: int, rollout: list[float] | None, offline: bool = False) -> TokenSequence:
    return TokenSequence(PromptInputs("p", [1, 2]), list(range(3, 3 + response)), offline, rollout)


def test_mis_drops_rejected_tokens_from_the_mask_and_tis_weighs_rows_with_engine_log_probs() -> None:
    seqs = [
        _sequence(3, [0.0, 0.0, 0.0]),
        _sequence(2, None, offline=True),  # no engine sampled it: untouched
        _sequence(2, [-math.log(4.0), 0.0]),
    ]
    old = [torch.tensor([0.0, math.log(3.0), 0.0]), None, torch.tensor([0.0, 0.0])]
    targets = [SequenceTargets(torch.zeros(len(s.response_ids)), o) for s, o in zip(seqs, old, strict=True)]
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    mb = MicroBatch([0, 1, 2], {}, mask, torch.zeros(3, 3, dtype=torch.long), torch.arange(3))
    algorithm = AlgorithmConfig(rollout_correction={"enabled": True, "mode": "mis", "band": [0.5, 2.0]})
    dropped = _drop_outside_band(mb, seqs, targets, algorithm)
    # row 0 token 1: ρ = 3 > 2; row 2 token 0: ρ = exp(0 + log 4) = 4 > 2; the offline row keeps its mask
    assert dropped.response_mask.tolist() == [[1.0, 0.0, 1.0], [1.0, 1.0, 0.0], [0.0, 1.0, 0.0]]
    with pytest.raises(ValueError, match="needs old log-probs for rows \\[0\\]"):
        _drop_outside_band(mb, seqs, [SequenceTargets(torch.zeros(3), None), *targets[1:]], algorithm)

    grid_old = torch.tensor([[0.0, math.log(3.0), 0.0], [-9.0, -9.0, 0.0], [0.0, 0.0, 0.0]])
    tis = RolloutCorrectionConfig(enabled=True, mode="tis", cap=2.0)
    weights, metrics = _rollout_weights(grid_old, mask, seqs, tis)
    torch.testing.assert_close(weights, torch.tensor([[1.0, 2.0, 1.0], [1.0, 1.0, 1.0], [2.0, 1.0, 0.0]]))
    # over the 5 sampled tokens: ρ 1, 3, 1, 4, 1
    assert metrics["rollout_corr/ratio_mean"] == pytest.approx(10 / 5)
    assert metrics["rollout_corr/clipped_frac"] == pytest.approx(2 / 5)
    off, metrics_off = _rollout_weights(grid_old, mask, seqs, RolloutCorrectionConfig())
    assert off is None and metrics_off == metrics  # reported with the correction off too


def test_the_config_refuses_what_it_cannot_correct() -> None:
    with pytest.raises(ValueError, match="0 <= low < 1 < high"):
        RolloutCorrectionConfig(band=(1.2, 2.0))
    with pytest.raises(ValueError):
        RolloutCorrectionConfig(cap=0.9)
    assert not AlgorithmConfig(kl={"mode": "off"}).needs_old_log_probs
    assert AlgorithmConfig(
        kl={"mode": "off"}, rollout_correction={"enabled": True, "mode": "mis"}
    ).needs_old_log_probs
    assert not AlgorithmConfig(kl={"mode": "off"}, rollout_correction={"enabled": True}).needs_old_log_probs


def test_a_correction_needs_engine_log_probs_of_the_actors_distribution(tmp_path) -> None:
    from services.trainer.config import ConfigError, load_config

    overrides = ["algorithm.rollout_correction.enabled=true", "rollout.temperature=0.7"]
    with pytest.raises(ConfigError, match=re.escape("rollout_correction.enabled at rollout.temperature=0.7")):
        load_config(None, [*overrides, *_minimal(tmp_path)])
    fine = load_config(
        None, [*overrides, "rollout.engine.logprobs_mode=processed_logprobs", *_minimal(tmp_path)]
    )
    assert fine.algorithm.rollout_correction.enabled


def _minimal(tmp_path) -> list[str]:
    data = tmp_path / "d.jsonl"
    data.write_text('{"id": "a", "problem": "q", "answer": "a", "problem_type": "free-form"}\n')
    return [
        f"data.train_files=[{data}]",
        f"actor.model_path={tmp_path}",
        f"trainer.output_dir={tmp_path / 'o'}",
    ]
