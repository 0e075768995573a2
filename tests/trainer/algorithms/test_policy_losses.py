"""Policy losses and loss aggregation against hand-computed values and gradients."""

import math

import pytest
import torch

from services.trainer.algorithms.aggregation import aggregate_loss
from services.trainer.algorithms.policy_losses import (
    POLICY_LOSSES,
    PolicyLoss,
    cispo_loss,
    compute_policy_loss,
    gspo_loss,
    gspo_token_loss,
    luffy_loss,
    ppo_clip_loss,
)

F64 = torch.float64
CLIP = {"clip_ratio_low": 0.2, "clip_ratio_high": 0.28}


def f64(values):
    return torch.tensor(values, dtype=F64)


def log_probs_for(ratios) -> torch.Tensor:
    """log-probs (with grad) whose ratio to old log-probs of 0 is ``ratios``."""
    return torch.log(f64(ratios)).requires_grad_(True)


def grad_of_sum(token_losses: torch.Tensor, log_probs: torch.Tensor) -> torch.Tensor:
    (grad,) = torch.autograd.grad(token_losses.sum(), log_probs)
    return grad


# --- PPO clip ---------------------------------------------------------------------------------------------

# (ratio, advantage, dual clip) -> (loss, d loss / d logp); clip range [0.8, 1.28]
# loss = max(-A r, -A clip(r)); gradient -A r where the unclipped branch is taken, else 0
PPO_CASES = [
    # r = 1: both branches -1
    (1.0, 1.0, None, -1.0, -1.0),
    # A > 0, r = 1.5 above 1.28: max(-1.5, -1.28) = -1.28, clipped -> no gradient
    (1.5, 1.0, None, -1.28, 0.0),
    # A > 0, r = 0.5 below 0.8 is not clipped: max(-0.5, -0.8) = -0.5, gradient -0.5
    (0.5, 1.0, None, -0.5, -0.5),
    # A < 0, r = 0.5: max(0.5, 0.8) = 0.8, clipped -> no gradient
    (0.5, -1.0, None, 0.8, 0.0),
    # A < 0, r = 1.5: max(1.5, 1.28) = 1.5, gradient -A r = 1.5
    (1.5, -1.0, None, 1.5, 1.5),
    # A < 0, r = 4 without dual clip: 4, gradient 4
    (4.0, -1.0, None, 4.0, 4.0),
    # ... with dual clip c = 3: min(4, -A c = 3) = 3, constant -> no gradient
    (4.0, -1.0, 3.0, 3.0, 0.0),
    # dual clip leaves A < 0 alone below c: r = 2 -> max(2, 1.28) = 2 < 3, gradient 2
    (2.0, -1.0, 3.0, 2.0, 2.0),
    # dual clip never touches A > 0: r = 4 -> -1.28 * 2 = -2.56 (clipped above)
    (4.0, 2.0, 3.0, -2.56, 0.0),
]


@pytest.mark.parametrize(("ratio", "advantage", "dual", "loss", "grad"), PPO_CASES)
def test_ppo_clip_per_token(ratio, advantage, dual, loss, grad):
    log_probs = log_probs_for([[ratio]])
    losses, _ = ppo_clip_loss(
        log_probs,
        torch.zeros(1, 1, dtype=F64),
        f64([[advantage]]),
        torch.ones(1, 1, dtype=F64),
        clip_ratio_dual=dual,
        **CLIP,
    )
    torch.testing.assert_close(losses, f64([[loss]]))
    torch.testing.assert_close(grad_of_sum(losses, log_probs), f64([[grad]]))


def test_ppo_clip_fractions():
    # tokens (r, A): (1.5, +1) clipped above; (0.5, -1) clipped below; (4, -1) dual-capped; (1, +1) free;
    # the padded token (9, +1) would count as clipped above but is masked: each fraction is 1/4
    log_probs = log_probs_for([[1.5, 0.5, 4.0, 1.0, 9.0]])
    mask = f64([[1, 1, 1, 1, 0]])
    _, metrics = ppo_clip_loss(
        log_probs, torch.zeros(1, 5, dtype=F64), f64([[1, -1, -1, 1, 1]]), mask, clip_ratio_dual=3.0, **CLIP
    )
    assert metrics == pytest.approx({"clipfrac_higher": 0.25, "clipfrac_lower": 0.25, "clipfrac_dual": 0.25})


def test_padding_never_contributes_to_loss_or_gradient():
    mask = f64([[1, 1, 0], [1, 0, 0]])
    old = torch.zeros(2, 3, dtype=F64)
    clean_lp = log_probs_for([[1.1, 0.9, 1.0], [1.2, 1.0, 1.0]])
    junk_lp = log_probs_for([[1.1, 0.9, 50.0], [1.2, 1e-9, 7.0]])
    clean_adv = f64([[1.0, 1.0, 0.0], [-1.0, 0.0, 0.0]])
    junk_adv = f64([[1.0, 1.0, 1e6], [-1.0, -1e6, 3.0]])
    for name in PolicyLoss:
        extra = {"offline_mask": torch.tensor([False, True])} if name is PolicyLoss.LUFFY else {}
        results = []
        for lp, adv in [(clean_lp, clean_adv), (junk_lp, junk_adv)]:
            loss, _ = compute_policy_loss(
                name,
                log_probs=lp,
                old_log_probs=old,
                advantages=adv,
                response_mask=mask,
                loss_agg="seq-mean-token-mean",
                **CLIP,
                **extra,
            )
            (grad,) = torch.autograd.grad(loss, lp)
            assert torch.all(grad[mask == 0] == 0), name
            results.append((loss.detach(), grad[mask == 1]))
        torch.testing.assert_close(results[0], results[1], msg=f"{name}: padding changed the result")


@pytest.mark.parametrize("pad", [-math.inf, math.nan])
def test_non_finite_padding_reaches_neither_loss_nor_gradient(pad):
    # one real token per row, r = 1 (log-probs ln 0.5 under both policies), A = +1; padded positions hold
    # -inf or nan in every token-level input. Every loss gives -1 on the real token (PPO/GSPO: -A r;
    # CISPO: -w A logp = -ln 0.5 = +0.693147 but its gradient is -w A = -1; LUFFY row 1 is offline with
    # behaviour prob 0.5, so r = 1 and f = 1 / 1.1). Before padding was zeroed at the entry point,
    # gspo_token and cispo back-propagated 0 * nan into the padded positions.
    mask = f64([[1, 0], [1, 0]])
    half = math.log(0.5)
    expected_loss = {
        PolicyLoss.PPO: -1.0,
        PolicyLoss.GSPO: -1.0,
        PolicyLoss.GSPO_TOKEN: -1.0,
        PolicyLoss.CISPO: -half,
        # (-1 + -1/1.1) / 2 = -0.954545
        PolicyLoss.LUFFY: (-1.0 - 1 / 1.1) / 2,
    }
    # d/dlogp: -A r = -1 for PPO/GSPO/CISPO; LUFFY offline: -gamma r / (r + gamma)^2 = -0.1 / 1.21
    expected_grad = {name: [[-0.5, 0.0], [-0.5, 0.0]] for name in PolicyLoss}
    expected_grad[PolicyLoss.LUFFY] = [[-0.5, 0.0], [-0.05 / 1.21, 0.0]]
    for name in PolicyLoss:
        log_probs = f64([[half, pad], [half, pad]]).requires_grad_(True)
        loss, _ = compute_policy_loss(
            name,
            log_probs=log_probs,
            old_log_probs=f64([[half, pad], [half, pad]]),
            advantages=f64([[1.0, pad], [1.0, pad]]),
            response_mask=mask,
            loss_agg="token-mean",
            offline_mask=torch.tensor([False, True]),
            behaviour_log_probs=f64([[0.0, pad], [half, pad]]),
            **CLIP,
        )
        assert loss.item() == pytest.approx(expected_loss[name]), name
        (grad,) = torch.autograd.grad(loss, log_probs)
        torch.testing.assert_close(grad, f64(expected_grad[name]), msg=f"{name}: gradient {grad}")


# --- GSPO -------------------------------------------------------------------------------------------------


def test_gspo_sequence_ratio_and_clip():
    # row 0 log-ratios [0.1, 0.3] -> s = exp(0.2) = 1.221403, A = +1: clip range [0.8, 1.2] -> -1.2, clipped
    # row 1 log-ratios [-0.2 | pad 9] -> s = exp(-0.2) = 0.818731, A = -1: max(0.818731, 0.818731), free
    # seq-mean-token-mean: (-1.2 + 0.818731) / 2 = -0.190635
    log_probs = f64([[0.1, 0.3], [-0.2, 9.0]]).requires_grad_(True)
    mask = f64([[1, 1], [1, 0]])
    loss, metrics = compute_policy_loss(
        "gspo",
        log_probs=log_probs,
        old_log_probs=torch.zeros(2, 2, dtype=F64),
        advantages=f64([[1, 1], [-1, -1]]),
        response_mask=mask,
        loss_agg="seq-mean-token-mean",
        clip_ratio_low=0.2,
        clip_ratio_high=0.2,
    )
    torch.testing.assert_close(loss, torch.tensor(-0.190635, dtype=F64), atol=1e-6, rtol=0)
    # row 0 is clipped: no gradient; row 1: d(s)/d logp_0 = s / |y| = 0.818731, halved by the mean over 2
    (grad,) = torch.autograd.grad(loss, log_probs)
    torch.testing.assert_close(grad, f64([[0, 0], [0.818731 / 2, 0]]), atol=1e-6, rtol=0)
    assert metrics["clipfrac_higher"] == 0.5
    assert metrics["seq_ratio_mean"] == pytest.approx((1.221403 + 0.818731) / 2, abs=1e-6)


def test_gspo_gradient_spreads_over_tokens_by_length():
    # one response, 4 tokens, all log-ratios 0 -> s = 1, A = 1: loss -s; d s / d logp_t = s / 4 = 0.25 each
    log_probs = torch.zeros(1, 4, dtype=F64, requires_grad=True)
    losses, _ = gspo_loss(
        log_probs,
        torch.zeros(1, 4, dtype=F64),
        torch.ones(1, 4, dtype=F64),
        torch.ones(1, 4, dtype=F64),
        3e-4,
        4e-4,
    )
    loss = aggregate_loss(losses, torch.ones(1, 4, dtype=F64), "seq-mean-token-mean")
    torch.testing.assert_close(torch.autograd.grad(loss, log_probs)[0], torch.full((1, 4), -0.25, dtype=F64))


def test_gspo_token_equals_gspo_for_constant_advantages():
    torch.manual_seed(1)
    old = -torch.rand(3, 5, dtype=F64)
    base = old + 0.05 * torch.randn(3, 5, dtype=F64)
    mask = f64([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]])
    adv = f64([1.5, -0.5, 2.0]).unsqueeze(-1).expand(3, 5)
    out = []
    for fn in (gspo_loss, gspo_token_loss):
        lp = base.clone().requires_grad_(True)
        losses, _ = fn(lp, old, adv, mask, 0.02, 0.03)
        loss = aggregate_loss(losses, mask, "seq-mean-token-mean")
        out.append((loss, torch.autograd.grad(loss, lp)[0]))
    torch.testing.assert_close(out[0], out[1])


def test_gspo_token_follows_token_advantages():
    # log-ratios [0.1, -0.1] -> s = exp(0) = 1 for both tokens; A = [+1, -1]: losses [-1, +1],
    # gradients -A_t * s = [-1, +1]; sequence GSPO would see A = 0 and give no gradient at all
    log_probs = f64([[0.1, -0.1]]).requires_grad_(True)
    losses, _ = gspo_token_loss(
        log_probs, torch.zeros(1, 2, dtype=F64), f64([[1, -1]]), torch.ones(1, 2, dtype=F64), 3e-4, 4e-4
    )
    torch.testing.assert_close(losses, f64([[-1, 1]]))
    torch.testing.assert_close(grad_of_sum(losses, log_probs), f64([[-1, 1]]))


# --- CISPO ------------------------------------------------------------------------------------------------


def test_cispo_clips_the_weight_but_keeps_every_gradient():
    # r = [1, 1.5, 0.5], A = [1, 1, -1]; weights clip(r, 0.8, 1.28) = [1, 1.28, 0.8]
    # loss = -w A logp: [-1*1*0, -1.28*1*ln 1.5, -0.8*(-1)*ln 0.5] = [0, -0.518995, -0.554518]
    # gradient -w A = [-1, -1.28, 0.8]: the clipped tokens still learn (PPO would give 0 for both)
    log_probs = log_probs_for([[1.0, 1.5, 0.5]])
    losses, metrics = cispo_loss(
        log_probs, torch.zeros(1, 3, dtype=F64), f64([[1, 1, -1]]), torch.ones(1, 3, dtype=F64), **CLIP
    )
    torch.testing.assert_close(losses, f64([[0.0, -1.28 * math.log(1.5), -0.8 * math.log(2.0)]]))
    torch.testing.assert_close(grad_of_sum(losses, log_probs), f64([[-1.0, -1.28, 0.8]]))
    assert metrics["is_weight_clipfrac"] == pytest.approx(2 / 3)
    assert metrics["is_weight_mean"] == pytest.approx((1 + 1.28 + 0.8) / 3)


# --- LUFFY ------------------------------------------------------------------------------------------------


def test_luffy_shapes_offline_tokens_and_clips_online_ones():
    # row 0 on-policy: r = 1.5, A = 1 -> PPO: -1.28, clipped, gradient 0
    # row 1 offline, behaviour unknown (prob 1): r = pi = 0.5; f = 0.5 / (0.5 + 0.1) = 0.833333, loss -0.833333
    #   gradient -A * gamma * r / (r + gamma)^2 = -0.1 * 0.5 / 0.36 = -0.138889
    # row 2 offline with behaviour log-prob ln 0.45 and pi = 0.9: r = 2 (no clip although > 1.28);
    #   f = 2 / 2.1 = 0.952381, loss -0.952381; gradient -0.1 * 2 / 2.1^2 = -0.045351
    log_probs = torch.log(f64([[0.6], [0.5], [0.9]])).requires_grad_(True)
    old = torch.log(f64([[0.4], [0.3], [0.3]]))  # row 0: 0.6 / 0.4 = 1.5; offline rows ignore it
    behaviour = torch.log(f64([[1.0], [1.0], [0.45]]))  # row 1: probability 1, as when unknown
    offline = torch.tensor([False, True, True])
    losses, metrics = luffy_loss(
        log_probs,
        old,
        f64([[1], [1], [1]]),
        torch.ones(3, 1, dtype=F64),
        offline_mask=offline,
        behaviour_log_probs=behaviour,
        shaping_gamma=0.1,
        **CLIP,
    )
    torch.testing.assert_close(losses, f64([[-1.28], [-0.5 / 0.6], [-2 / 2.1]]))
    torch.testing.assert_close(grad_of_sum(losses, log_probs), f64([[0.0], [-0.05 / 0.36], [-0.2 / 4.41]]))
    assert metrics["offline_token_frac"] == pytest.approx(2 / 3)
    assert metrics["clipfrac_higher"] == 1.0  # of the on-policy tokens only
    assert metrics["offline_shaped_weight_mean"] == pytest.approx((0.5 / 0.6 + 2 / 2.1) / 2)


def test_luffy_token_and_sequence_offline_masks_agree_and_unknown_behaviour_means_one():
    lp = torch.log(f64([[0.5, 0.2], [0.7, 0.9]]))
    args = (lp, torch.zeros(2, 2, dtype=F64), f64([[1, 1], [-1, -1]]), torch.ones(2, 2, dtype=F64))
    by_row, _ = luffy_loss(*args, offline_mask=torch.tensor([True, False]), **CLIP)
    by_token, _ = luffy_loss(*args, offline_mask=torch.tensor([[True, True], [False, False]]), **CLIP)
    explicit_one, _ = luffy_loss(
        *args,
        offline_mask=torch.tensor([True, False]),
        behaviour_log_probs=torch.zeros(2, 2, dtype=F64),
        **CLIP,
    )
    torch.testing.assert_close(by_row, by_token)
    torch.testing.assert_close(by_row, explicit_one)


def test_luffy_without_offline_tokens_is_ppo():
    torch.manual_seed(2)
    lp, old, adv = torch.randn(3, 4, dtype=F64), torch.randn(3, 4, dtype=F64), torch.randn(3, 4, dtype=F64)
    mask = torch.ones(3, 4, dtype=F64)
    luffy, _ = luffy_loss(
        lp, old, adv, mask, offline_mask=torch.zeros(3, dtype=torch.bool), clip_ratio_dual=3.0, **CLIP
    )
    ppo, _ = ppo_clip_loss(lp, old, adv, mask, clip_ratio_dual=3.0, **CLIP)
    torch.testing.assert_close(luffy, ppo)


def test_luffy_rejects_a_mask_of_the_wrong_shape():
    with pytest.raises(ValueError, match=r"offline_mask shape \(3,\)"):
        luffy_loss(
            torch.zeros(2, 2),
            torch.zeros(2, 2),
            torch.zeros(2, 2),
            torch.ones(2, 2),
            offline_mask=torch.tensor([True, False, True]),
            **CLIP,
        )


# --- toy policy: sign and size of the gradient on the logits -----------------------------------------------


@pytest.mark.parametrize(
    ("loss", "expected"),
    [
        # uniform policy over 3 tokens, action 0 sampled, A = +1, ratio 1 (old = current):
        # d(-A r)/d z = -A * r * (onehot - pi) = -(2/3, -1/3, -1/3)
        (PolicyLoss.PPO, [-2 / 3, 1 / 3, 1 / 3]),
        (PolicyLoss.GSPO, [-2 / 3, 1 / 3, 1 / 3]),
        (PolicyLoss.GSPO_TOKEN, [-2 / 3, 1 / 3, 1 / 3]),
        # CISPO: -sg[w] A d logp / dz with w = 1 -> the same
        (PolicyLoss.CISPO, [-2 / 3, 1 / 3, 1 / 3]),
        # LUFFY offline: d f / d logp = gamma * pi / (pi + gamma)^2 = 0.1 * (1/3) / (0.433333)^2 = 0.177515;
        # gradient -0.177515 * (2/3, -1/3, -1/3) = (-0.118343, 0.059172, 0.059172)
        (PolicyLoss.LUFFY, [-0.118343, 0.059172, 0.059172]),
    ],
)
def test_gradient_on_a_toy_policy_raises_the_rewarded_token(loss, expected):
    logits = torch.zeros(3, dtype=F64, requires_grad=True)
    log_prob = torch.log_softmax(logits, dim=-1)[0].reshape(1, 1)
    value, _ = compute_policy_loss(
        loss,
        log_probs=log_prob,
        old_log_probs=log_prob.detach(),
        advantages=f64([[1.0]]),
        response_mask=f64([[1.0]]),
        loss_agg="token-mean",
        offline_mask=torch.tensor([True]),
        **CLIP,
    )
    (grad,) = torch.autograd.grad(value, logits)
    torch.testing.assert_close(grad, f64(expected), atol=1e-6, rtol=0)
    # one SGD step makes the rewarded token likelier
    assert torch.softmax(logits.detach() - 0.5 * grad, dim=-1)[0] > 1 / 3


# --- entry point and registry -----------------------------------------------------------------------------


def test_compute_policy_loss_reports_metrics():
    # one token r = 1.5, A = 1 -> -1.28; ppo_kl is k3 of KL(old || new): d = old - new = -ln 1.5
    # exp(ln 1.5) - 1 - ln 1.5 = 0.5 - 0.405465 = 0.094535
    loss, metrics = compute_policy_loss(
        "ppo",
        log_probs=log_probs_for([[1.5]]),
        old_log_probs=f64([[0.0]]),
        advantages=f64([[1.0]]),
        response_mask=f64([[1.0]]),
        loss_agg="token-mean",
        **CLIP,
    )
    assert loss.item() == pytest.approx(-1.28)
    assert metrics["pg_loss"] == pytest.approx(-1.28)
    assert metrics["ppo_kl"] == pytest.approx(0.5 - math.log(1.5))


def test_compute_policy_loss_names_missing_offline_mask():
    with pytest.raises(ValueError, match="'luffy' needs the input 'offline_mask'"):
        compute_policy_loss(
            "luffy",
            log_probs=f64([[0.0]]),
            old_log_probs=f64([[0.0]]),
            advantages=f64([[1.0]]),
            response_mask=f64([[1.0]]),
            loss_agg="token-mean",
            **CLIP,
        )


def test_every_policy_loss_is_registered():
    assert POLICY_LOSSES.unregistered() == []
