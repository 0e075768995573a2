"""Loss aggregation: hand-computed modes, and a global normaliser that makes gradient accumulation over
micro-batches (and ranks) equal one full batch."""

import pytest
import torch

from services.trainer.algorithms.aggregation import LossAgg, aggregate_loss, local_normaliser
from services.trainer.algorithms.kl import compute_kl_loss
from services.trainer.algorithms.policy_losses import PolicyLoss, compute_policy_loss

F64 = torch.float64


def f64(values):
    return torch.tensor(values, dtype=F64)


@pytest.mark.parametrize(
    ("mode", "norm_length", "expected"),
    [
        # rows [1, 2, 3] and [4 | pad 100, 100]
        (LossAgg.TOKEN_MEAN, None, 2.5),  # (1 + 2 + 3 + 4) / 4
        (LossAgg.SEQ_MEAN_TOKEN_MEAN, None, 3.0),  # ((1 + 2 + 3) / 3 + 4 / 1) / 2 = (2 + 4) / 2
        (LossAgg.SEQ_MEAN_TOKEN_SUM, None, 5.0),  # (6 + 4) / 2
        (LossAgg.SEQ_MEAN_TOKEN_SUM, 4, 1.25),  # (6 / 4 + 4 / 4) / 2
    ],
)
def test_aggregation_modes(mode, norm_length, expected):
    losses = f64([[1, 2, 3], [4, 100, 100]])
    mask = f64([[1, 1, 1], [1, 0, 0]])
    assert aggregate_loss(losses, mask, mode, norm_length=norm_length).item() == pytest.approx(expected)


def test_aggregation_skips_responses_without_tokens():
    # the empty second row is not a response: seq-mean over the first only -> (1 + 3) / 2 = 2
    losses, mask = f64([[1, 3], [9, 9]]), f64([[1, 1], [0, 0]])
    assert aggregate_loss(losses, mask, "seq-mean-token-mean").item() == 2.0
    assert aggregate_loss(losses, mask, "seq-mean-token-sum").item() == 4.0


def test_norm_length_only_with_token_sum():
    with pytest.raises(ValueError, match="seq-mean-token-sum only"):
        aggregate_loss(f64([[1.0]]), f64([[1.0]]), "token-mean", norm_length=8)


# --- global normaliser ------------------------------------------------------------------------------------


def test_local_normaliser_counts_tokens_or_responses_with_tokens():
    # 3 + 1 + 0 valid tokens; 2 responses have at least one token (the empty third is not a response)
    mask = f64([[1, 1, 1], [1, 0, 0], [0, 0, 0]])
    assert local_normaliser(mask, "token-mean").item() == 4
    assert local_normaliser(mask, "seq-mean-token-mean").item() == 2
    assert local_normaliser(mask, "seq-mean-token-sum").item() == 2


@pytest.mark.parametrize(
    ("mode", "norm_length", "normaliser", "expected"),
    [
        # rows [1, 2, 3] and [4 | pad], a share of a mini-batch with 8 tokens / 4 responses in all
        (LossAgg.TOKEN_MEAN, None, 8, 1.25),  # (1 + 2 + 3 + 4) / 8
        (LossAgg.SEQ_MEAN_TOKEN_MEAN, None, 4, 1.5),  # (2 + 4) / 4
        (LossAgg.SEQ_MEAN_TOKEN_SUM, 4, torch.tensor(4), 0.625),  # (6 / 4 + 4 / 4) / 4
    ],
)
def test_global_normaliser_divides_this_share_by_the_whole_count(mode, norm_length, normaliser, expected):
    losses = f64([[1, 2, 3], [4, 100, 100]])
    mask = f64([[1, 1, 1], [1, 0, 0]])
    value = aggregate_loss(losses, mask, mode, norm_length=norm_length, global_normaliser=normaliser)
    assert value.item() == pytest.approx(expected)


@pytest.mark.parametrize(
    ("normaliser", "message"),
    [
        # 4 valid tokens here, so a whole mini-batch of 3 is impossible (e.g. a count of responses)
        (3, r"global_normaliser=3.0 is below the 4 valid tokens of this call"),
        (0, r"global_normaliser=0.0 must be a finite number > 0"),
        (float("nan"), r"global_normaliser=nan must be a finite number > 0"),
    ],
)
def test_an_impossible_global_normaliser_is_refused(normaliser, message):
    with pytest.raises(ValueError, match=message):
        aggregate_loss(
            f64([[1, 2, 3], [4, 0, 0]]),
            f64([[1, 1, 1], [1, 0, 0]]),
            "token-mean",
            global_normaliser=normaliser,
        )


# A mini-batch of 6 responses, lengths 5, 2, 0 (empty), 4, 1, 3, split into micro-batches holding 1, 3 and 2
# responses with 5, 6 and 4 valid tokens: unequal shares, so averaging per-micro-batch means is wrong.
LENGTHS = [5, 2, 0, 4, 1, 3]
SPLITS = [slice(0, 1), slice(1, 4), slice(4, 6)]
CLIP = {"clip_ratio_low": 0.2, "clip_ratio_high": 0.28}
MODES = [
    (LossAgg.TOKEN_MEAN, None),
    (LossAgg.SEQ_MEAN_TOKEN_MEAN, None),
    (LossAgg.SEQ_MEAN_TOKEN_SUM, None),
    (LossAgg.SEQ_MEAN_TOKEN_SUM, 5),
]


def _mini_batch():
    torch.manual_seed(7)
    mask = (torch.arange(5).unsqueeze(0) < torch.tensor(LENGTHS).unsqueeze(-1)).to(F64)
    old = -torch.rand(6, 5, dtype=F64)
    # ratios up to e^±0.4: some tokens clip, so the clipped branch is exercised as well
    log_probs = old + 0.4 * (2 * torch.rand(6, 5, dtype=F64) - 1)
    advantages = torch.randn(6, 1, dtype=F64).expand(6, 5) * mask
    return log_probs, old, advantages, mask


def _policy_grad(loss_name, mode, norm_length, *, parts, normaliser):
    """Gradient on the mini-batch's log-probs after backward() on each part, accumulating."""
    log_probs, old, advantages, mask = _mini_batch()
    log_probs.requires_grad_(True)
    for part in parts:
        value, _ = compute_policy_loss(
            loss_name,
            log_probs=log_probs[part],
            old_log_probs=old[part],
            advantages=advantages[part],
            response_mask=mask[part],
            loss_agg=mode,
            norm_length=norm_length,
            global_normaliser=normaliser,
            **CLIP,
        )
        value.backward()
    return log_probs.grad


@pytest.mark.parametrize(("mode", "norm_length"), MODES)
@pytest.mark.parametrize("loss_name", [PolicyLoss.PPO, PolicyLoss.GSPO, PolicyLoss.CISPO])
def test_accumulated_micro_batches_give_the_full_batch_gradient(loss_name, mode, norm_length):
    full = _policy_grad(loss_name, mode, norm_length, parts=[slice(None)], normaliser=None)
    _, _, _, mask = _mini_batch()
    # the trainer sums each micro-batch's share (and all-reduces it over ranks): 15 tokens, 5 responses
    total = sum(local_normaliser(mask[part], mode) for part in SPLITS)
    assert total.item() == (15 if mode is LossAgg.TOKEN_MEAN else 5)
    accumulated = _policy_grad(loss_name, mode, norm_length, parts=SPLITS, normaliser=total)
    torch.testing.assert_close(accumulated, full)
    assert full.abs().sum() > 0
    # without it each micro-batch normalises by its own count: the sum over 3 micro-batches weighs them
    # alike instead of by their tokens / responses (and is 3x too large)
    per_call = _policy_grad(loss_name, mode, norm_length, parts=SPLITS, normaliser=None)
    assert not torch.allclose(per_call, full)
    assert not torch.allclose(per_call / len(SPLITS), full)


@pytest.mark.parametrize(("mode", "norm_length"), MODES)
def test_accumulated_kl_loss_gives_the_full_batch_gradient(mode, norm_length):
    log_probs, reference, _, mask = _mini_batch()
    total = local_normaliser(mask, mode)
    grads = []
    for parts, normaliser in [([slice(None)], None), (SPLITS, total)]:
        lp = log_probs.clone().requires_grad_(True)
        for part in parts:
            value, _ = compute_kl_loss(
                lp[part],
                reference[part],
                mask[part],
                coef=0.1,
                estimator="k3",
                loss_agg=mode,
                norm_length=norm_length,
                global_normaliser=normaliser,
            )
            value.backward()
        grads.append(lp.grad)
    torch.testing.assert_close(grads[1], grads[0])
