"""KL estimators, KL loss, KL reward penalty and controllers against hand-computed values."""

import math

import pytest
import torch

from services.trainer.algorithms.config import AlgorithmConfig, KLConfig
from services.trainer.algorithms.kl import (
    AdaptiveKLController,
    FixedKLController,
    KLEstimator,
    apply_kl_reward_penalty,
    compute_kl_loss,
    kl_penalty,
    make_kl_controller,
)

F64 = torch.float64
LN2 = math.log(2.0)


def f64(values):
    return torch.tensor(values, dtype=F64)


# policy probs [0.5, 0.25], reference [0.25, 0.5] -> d = logp - ref = [ln 2, -ln 2] = [0.693147, -0.693147]
POLICY = torch.log(f64([[0.5, 0.25]]))
REFERENCE = torch.log(f64([[0.25, 0.5]]))


# per-token values at d = [ln 2, -ln 2], one entry per estimator
EXPECTED = {
    KLEstimator.K1: [LN2, -LN2],
    # 0.5 * d^2 = 0.5 * 0.480453 = 0.240227 for both
    KLEstimator.K2: [0.5 * LN2**2, 0.5 * LN2**2],
    # exp(-d) - 1 + d: exp(-ln 2) = 0.5 -> 0.5 - 1 + 0.693147 = 0.193147; exp(ln 2) = 2 -> 2 - 1 - 0.693147
    KLEstimator.K3: [LN2 - 0.5, 1.0 - LN2],
    KLEstimator.ABS: [LN2, LN2],
}


@pytest.mark.parametrize("estimator", list(KLEstimator))
def test_estimators_hand_computed(estimator):
    # parametrized over the Enum: a new estimator fails here (KeyError) until its values are written down
    torch.testing.assert_close(kl_penalty(POLICY, REFERENCE, estimator), f64([EXPECTED[estimator]]))


@pytest.mark.parametrize(
    ("alias", "member"), [("kl", "k1"), ("mse", "k2"), ("low_var_kl", "k3"), ("K3", "k3")]
)
def test_verl_names_are_aliases(alias, member):
    assert KLEstimator(alias) is KLEstimator(member)


def test_unknown_estimator_is_an_error():
    with pytest.raises(ValueError, match="k4"):
        kl_penalty(POLICY, REFERENCE, "k4")


def test_k3_is_clamped():
    # d = -20: exp(20) - 1 - 20 ~ 4.85e8 -> clamped to 10
    assert kl_penalty(f64([[-20.0]]), f64([[0.0]]), "k3").item() == 10.0


@pytest.mark.parametrize("d", [-100.0, 100.0])
def test_k3_far_from_the_reference_has_a_clamped_value_and_a_zero_not_nan_gradient(d):
    # float32, d = -100: exp(100) overflows to inf and clamping only the result back-propagated 0 * inf = nan;
    # with d clamped to -20 first: exp(20) - 1 - 20 = 4.85e8 -> 10, gradient 0.
    # d = +100: exp(-100) - 1 + 100 = 99 -> 10, gradient 0
    log_probs = torch.tensor([[d]], requires_grad=True)
    kl = kl_penalty(log_probs, torch.zeros(1, 1), "k3")
    assert kl.item() == 10.0
    (grad,) = torch.autograd.grad(kl.sum(), log_probs)
    assert grad.item() == 0.0


@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_k1_and_k3_are_unbiased(estimator):
    # p = [0.5, 0.5], q = [0.25, 0.75]: KL(p||q) = 0.5 ln(0.5/0.25) + 0.5 ln(0.5/0.75) = 0.5 (0.693147 - 0.405465)
    # = 0.143841; the expectation of the estimator under p must equal it (for k3: sum q - 1 + KL = KL)
    p, q = f64([0.5, 0.5]), f64([0.25, 0.75])
    expectation = (p * kl_penalty(p.log(), q.log(), estimator)).sum()
    assert expectation.item() == pytest.approx(0.5 * (LN2 - math.log(1.5)))


def test_kl_loss_scales_aggregates_and_pulls_towards_the_reference():
    # k2 over the 2 real tokens: mean(0.240227, 0.240227) = 0.240227; coef 0.1 -> 0.0240227; the padded third
    # token (d = 3) is ignored
    log_probs = torch.log(f64([[0.5, 0.25, 0.9]])).requires_grad_(True)
    reference = torch.log(f64([[0.25, 0.5, 0.045]]))
    loss, metrics = compute_kl_loss(
        log_probs, reference, f64([[1, 1, 0]]), coef=0.1, estimator="k2", loss_agg="token-mean"
    )
    assert loss.item() == pytest.approx(0.1 * 0.5 * LN2**2)
    assert metrics == pytest.approx({"kl_loss": 0.5 * LN2**2, "kl_coef": 0.1})
    # d(0.1 * mean(d^2 / 2)) / d logp_t = 0.1 * d_t / 2 = [0.034657, -0.034657, 0]: descent moves logp to ref
    (grad,) = torch.autograd.grad(loss, log_probs)
    torch.testing.assert_close(grad, f64([[0.05 * LN2, -0.05 * LN2, 0.0]]))


@pytest.mark.parametrize("estimator", list(KLEstimator))
@pytest.mark.parametrize("pad", [-math.inf, math.nan])
def test_kl_loss_ignores_non_finite_padding_in_value_and_gradient(estimator, pad):
    # real token: p 0.5 vs ref 0.25 -> d = ln 2; the padded token has log-probs -inf or nan in both inputs.
    # k2 and k3 used to back-propagate 0 * nan into the padded position.
    log_probs = f64([[math.log(0.5), pad]]).requires_grad_(True)
    reference = f64([[math.log(0.25), pad]])
    loss, _ = compute_kl_loss(
        log_probs, reference, f64([[1, 0]]), coef=1.0, estimator=estimator, loss_agg="token-mean"
    )
    # values at d = ln 2 (see test_estimators_hand_computed) and their derivatives in d:
    # k1: ln 2, 1; k2: ln^2 2 / 2, d = ln 2; k3: ln 2 - 0.5, 1 - exp(-d) = 0.5; abs: ln 2, 1
    value, slope = {
        "k1": (LN2, 1.0),
        "k2": (0.5 * LN2**2, LN2),
        "k3": (LN2 - 0.5, 0.5),
        "abs": (LN2, 1.0),
    }[KLEstimator(estimator).value]
    assert loss.item() == pytest.approx(value)
    (grad,) = torch.autograd.grad(loss, log_probs)
    torch.testing.assert_close(grad, f64([[slope, 0.0]]))


def test_kl_reward_penalty_is_zero_on_padding_even_when_log_probs_there_are_nan():
    # k1 on the real token: d = ln 2, reward 1 - 0.5 * ln 2 = 0.653426; padding: nan * 0 used to stay nan
    rewards, _ = apply_kl_reward_penalty(
        f64([[1.0, 0.0]]),
        f64([[math.log(0.5), math.nan]]),
        f64([[math.log(0.25), 0.0]]),
        f64([[1, 0]]),
        coef=0.5,
        estimator="k1",
    )
    torch.testing.assert_close(rewards, f64([[1 - 0.5 * LN2, 0.0]]))


def test_kl_reward_penalty():
    # outcome reward 1 on the last real token; k1 d = [ln 2, -ln 2 | pad]; coef 0.5:
    # [0 - 0.5 * 0.693147, 1 + 0.5 * 0.693147, pad 0] = [-0.346574, 1.346574, 0]; summed KL per response 0
    log_probs = torch.log(f64([[0.5, 0.25, 0.9]]))
    reference = torch.log(f64([[0.25, 0.5, 0.1]]))
    rewards, metrics = apply_kl_reward_penalty(
        f64([[0.0, 1.0, 0.0]]), log_probs, reference, f64([[1, 1, 0]]), coef=0.5, estimator="k1"
    )
    torch.testing.assert_close(rewards, f64([[-0.5 * LN2, 1 + 0.5 * LN2, 0.0]]))
    assert metrics["kl_penalty"] == pytest.approx(0.0, abs=1e-12)
    assert metrics["kl_coef"] == 0.5


def test_fixed_controller_never_moves():
    controller = FixedKLController(coef=0.1)
    controller.update(current_kl=50.0, n_steps=1000)
    assert controller.coef == 0.1


@pytest.mark.parametrize(
    ("current_kl", "expected"),
    [
        # target 6, 100 samples, horizon 10000: e = clip(kl/6 - 1, ±0.2); coef *= 1 + e * 0.01
        (9.0, 0.1 * 1.002),  # 9/6 - 1 = 0.5 -> clipped to 0.2
        (3.0, 0.1 * 0.998),  # 3/6 - 1 = -0.5 -> clipped to -0.2
        (6.6, 0.1 * 1.001),  # 6.6/6 - 1 = 0.1
        (6.0, 0.1),  # on target
    ],
)
def test_adaptive_controller(current_kl, expected):
    controller = AdaptiveKLController(coef=0.1, target=6.0, horizon=10_000)
    controller.update(current_kl=current_kl, n_steps=100)
    assert controller.coef == pytest.approx(expected)


def test_controller_from_config():
    assert make_kl_controller(KLConfig(coef=0.2)) == FixedKLController(coef=0.2)
    adaptive = make_kl_controller(KLConfig(coef=0.2, controller="adaptive", target=0.5, horizon=100))
    assert adaptive == AdaptiveKLController(coef=0.2, target=0.5, horizon=100)


@pytest.mark.parametrize(("mode", "needs_reference"), [("off", False), ("loss", True), ("reward", True)])
def test_kl_off_needs_no_reference_model(mode, needs_reference):
    assert AlgorithmConfig(kl={"mode": mode}).needs_reference_model is needs_reference
