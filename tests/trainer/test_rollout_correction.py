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
    assert dropped.loss_mask.tolist() == [[1.0, 0.0, 1.0], [1.0, 1.0, 0.0], [0.0, 1.0, 0.0]]
    assert dropped.counted_mask is dropped.loss_mask
    assert torch.equal(dropped.response_mask, mask)  # the forward still scores every response token
    with pytest.raises(ValueError, match="needs old log-probs for rows \\[0\\]"):
        _drop_outside_band(mb, seqs, [SequenceTargets(torch.zeros(3), None), *targets[1:]], algorithm)

    grid_old = torch.tensor([[0.0, math.log(3.0), 0.0], [-9.0, -9.0, 0.0], [0.0, 0.0, 0.0]])
    tis = RolloutCorrectionConfig(enabled=True, mode="tis", cap=2.0)
    weights, metrics = _rollout_weights(grid_old, mask, mask, seqs, tis)
    torch.testing.assert_close(weights, torch.tensor([[1.0, 2.0, 1.0], [1.0, 1.0, 1.0], [2.0, 1.0, 0.0]]))
    # over the 5 sampled tokens: ρ 1, 3, 1, 4, 1
    assert metrics["rollout_corr/ratio_mean"] == pytest.approx(10 / 5)
    assert metrics["rollout_corr/clipped_frac"] == pytest.approx(2 / 5)
    off, metrics_off = _rollout_weights(grid_old, mask, mask, seqs, RolloutCorrectionConfig())
    assert off is None and metrics_off == metrics  # reported with the correction off too
    # MIS: weights on the kept tokens only, metrics over every sampled one (its drops visible)
    mis = RolloutCorrectionConfig(enabled=True, mode="mis", band=(0.5, 2.0))
    weights, metrics = _rollout_weights(grid_old, mask, dropped.loss_mask, seqs, mis)
    torch.testing.assert_close(weights, torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 1.0], [0.0, 1.0, 0.0]]))
    assert metrics["rollout_corr/clipped_frac"] == pytest.approx(2 / 5)
    assert metrics["rollout_corr/ratio_max"] == pytest.approx(4.0)
    with pytest.raises(ValueError, match="carries 2 engine log-probs for 3 tokens"):
        _rollout_weights(grid_old, mask, mask, [_sequence(3, [0.0, 0.0]), *seqs[1:]], tis)


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
    lagging = ["algorithm.rollout_correction.enabled=true", "trainer.off_policy_steps=1"]
    lagging += ["rollout.engine.enable_sleep_mode=false", "rollout.placement=disaggregated"]
    with pytest.raises(ConfigError, match="would weigh by 1; turn one of them off"):
        load_config(None, [*lagging, *_minimal(tmp_path)])


def _minimal(tmp_path) -> list[str]:
    data = tmp_path / "d.jsonl"
    data.write_text('{"id": "a", "problem": "q", "answer": "a", "problem_type": "free-form"}\n')
    return [
        f"data.train_files=[{data}]",
        f"actor.model_path={tmp_path}",
        f"trainer.output_dir={tmp_path / 'o'}",
    ]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from services.common.tiny_models import build_tiny_model

    return build_tiny_model("qwen2_5_vl", tmp_path_factory.mktemp("mis") / "m", seed=0)


def _update(model, padding_free: bool, shift: dict[tuple[int, int], float]) -> tuple[dict, dict]:
    """One MIS update of a fresh actor on three text sequences whose engine log-probs equal the
    actor's except at ``shift`` (row, token) → log-ratio; returns the metrics and the new weights."""
    from services.trainer.actor import Actor
    from services.trainer.config import ActorConfig
    from services.trainer.update import update_policy

    torch.manual_seed(0)
    actor = Actor(ActorConfig(model_path=str(model), padding_free=padding_free), total_steps=1, device="cpu")
    seqs = [
        TokenSequence(PromptInputs(f"p{i}", [5 + i, 6, 7]), [10 + i, 11, 12, 13][: 2 + i]) for i in range(3)
    ]
    old = actor.log_probs(seqs, temperature=1.0)
    seqs = [
        TokenSequence(
            s.prompt, s.response_ids, False, [float(v) - shift.get((i, j), 0.0) for j, v in enumerate(o)]
        )
        for i, (s, o) in enumerate(zip(seqs, old, strict=True))
    ]
    targets = [SequenceTargets(torch.linspace(-1, 1, len(o)), o) for o in old]
    algorithm = AlgorithmConfig(kl={"mode": "off"}, rollout_correction={"enabled": True, "mode": "mis"})
    metrics = update_policy(
        actor, seqs, targets, algorithm, kl_coef=0.0, entropy_coef=0.0, temperature=1.0,
        offline_term="likelihood", behaviour_comparable=True,
    )  # fmt: skip
    return metrics, {k: v.detach().clone() for k, v in actor.model.state_dict().items()}


@pytest.mark.integration
def test_mis_on_packed_rows_updates_like_padded_ones(tiny_model) -> None:
    """MIS dropping a token of a packed row crashed the forward (its scored positions come from the
    response mask); the drop now lives in the loss mask, and packed equals padded."""
    shift = {(1, 1): 2.0}  # ρ = e^2 > 2: dropped
    packed, packed_weights = _update(tiny_model, True, shift)
    padded, padded_weights = _update(tiny_model, False, shift)
    assert packed["rollout_corr/clipped_frac"] == pytest.approx(1 / 9) == padded["rollout_corr/clipped_frac"]
    assert packed["pg_loss"] == pytest.approx(padded["pg_loss"], abs=1e-6)
    assert packed["grad_norm"] == pytest.approx(padded["grad_norm"], rel=1e-5)
    assert max(float((packed_weights[k] - padded_weights[k]).abs().max()) for k in packed_weights) < 1e-6


@pytest.mark.integration
def test_mis_dropping_a_whole_mini_batch_skips_it(tiny_model) -> None:
    """Every token outside the band: the normaliser was 0 and the update raised; now nothing is learnt
    from the mini-batch and the run goes on."""
    from services.trainer.actor import Actor
    from services.trainer.config import ActorConfig

    torch.manual_seed(0)
    fresh = Actor(ActorConfig(model_path=str(tiny_model)), total_steps=1, device="cpu")
    before = {k: v.detach().clone() for k, v in fresh.model.state_dict().items()}
    metrics, after = _update(tiny_model, False, {(i, j): 3.0 for i in range(3) for j in range(4)})
    assert metrics["empty_minibatches"] == 1 and "pg_loss" not in metrics and "grad_norm" not in metrics
    assert all(torch.equal(before[k], after[k]) for k in before)  # not even AdamW's decay moved them
