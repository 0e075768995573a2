"""Metric helpers against hand-computed values."""

import math

import pytest
import torch

from services.trainer.algorithms.metrics import (
    approx_kl,
    clip_fractions,
    entropy_from_logits,
    mean_entropy,
    reward_means_by_type,
)

F64 = torch.float64


def f64(values):
    return torch.tensor(values, dtype=F64)


def test_clip_fractions():
    # (r, A): (1.5, +1) above 1.28 -> higher; (0.5, -1) below 0.8 -> lower; (4, -1) above c = 3 -> dual;
    # (0.5, +1) not clipped (A > 0 is only clipped above); (1, +1) free; the padded (9, +1) is ignored
    # 5 real tokens -> 1/5 each
    ratio = f64([[1.5, 0.5, 4.0, 0.5, 1.0, 9.0]])
    adv = f64([[1, -1, -1, 1, 1, 1]])
    mask = f64([[1, 1, 1, 1, 1, 0]])
    fractions = clip_fractions(
        ratio, adv, mask, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_dual=3.0
    )
    assert fractions == pytest.approx({"clipfrac_higher": 0.2, "clipfrac_lower": 0.2, "clipfrac_dual": 0.2})
    assert "clipfrac_dual" not in clip_fractions(ratio, adv, mask, clip_ratio_low=0.2, clip_ratio_high=0.28)


@pytest.mark.parametrize(
    ("estimator", "expected"),
    [
        # old p 0.5, new p 0.25: d = ln 0.5 - ln 0.25 = ln 2 -> k1 0.693147; k3 exp(-ln 2) - 1 + ln 2 = 0.193147
        ("k1", math.log(2.0)),
        ("k3", math.log(2.0) - 0.5),
    ],
)
def test_approx_kl(estimator, expected):
    old = torch.log(f64([[0.5, 0.5]]))
    new = torch.log(f64([[0.25, 0.01]]))  # the second token is padding
    assert approx_kl(new, old, f64([[1, 0]]), estimator) == pytest.approx(expected)


def test_entropy_from_logits():
    # uniform over 4: ln 4 = 1.386294; uniform over 3: ln 3 = 1.098612;
    # probs [0.5, 0.25, 0.25]: 0.5 ln 2 + 2 * 0.25 ln 4 = 0.5 ln 2 + ln 2 = 1.5 ln 2 = 1.039721
    uniform4 = torch.zeros(1, 1, 4, dtype=F64)
    torch.testing.assert_close(entropy_from_logits(uniform4), f64([[math.log(4.0)]]))
    logits = torch.log(f64([[[1 / 3, 1 / 3, 1 / 3], [0.5, 0.25, 0.25]]]))
    torch.testing.assert_close(entropy_from_logits(logits), f64([[math.log(3.0), 1.5 * math.log(2.0)]]))
    # logits are defined up to a constant: shifting one position's logits by 7 changes nothing
    torch.testing.assert_close(entropy_from_logits(logits + 7.0), entropy_from_logits(logits))
    # masked mean: only the first position counts
    assert mean_entropy(logits, f64([[1, 0]])) == pytest.approx(math.log(3.0))


def test_entropy_ignores_minus_inf_logits_in_value_and_gradient():
    # logits [0, -inf, ln 3]: probs [1/4, 0, 3/4]; H = 0.25 ln 4 + 0.75 ln(4/3) = 0.346574 + 0.215762 = 0.562335
    # (0 * -inf used to give nan); dH/dz_v = -p_v (log p_v + H): the banned token has p = 0 -> gradient 0
    logits = f64([[[0.0, -math.inf, math.log(3.0)]]]).requires_grad_(True)
    entropy = entropy_from_logits(logits)
    expected = 0.25 * math.log(4.0) + 0.75 * math.log(4 / 3)
    torch.testing.assert_close(entropy, f64([[expected]]))
    (grad,) = torch.autograd.grad(entropy.sum(), logits)
    p0, p2 = 0.25, 0.75
    expected_grad = [-p0 * (math.log(p0) + expected), 0.0, -p2 * (math.log(p2) + expected)]
    torch.testing.assert_close(grad, f64([[expected_grad]]))


def test_reward_means_by_type():
    # mcq: overall (1 + 0) / 2 = 0.5, accuracy (1 + 0) / 2 = 0.5; ocr: 0.5 and 0.4
    # all: overall (1 + 0.5 + 0) / 3 = 0.5; accuracy (1 + 0.4 + 0) / 3 = 0.466667
    means = reward_means_by_type(
        {"overall": torch.tensor([1.0, 0.5, 0.0]), "accuracy": [1.0, 0.4, 0.0]}, ["mcq", "ocr", "mcq"]
    )
    assert means == pytest.approx(
        {
            "reward/all/overall": 0.5,
            "reward/mcq/overall": 0.5,
            "reward/ocr/overall": 0.5,
            "reward/all/accuracy": 1.4 / 3,
            "reward/mcq/accuracy": 0.5,
            "reward/ocr/accuracy": 0.4,
        }
    )


def test_reward_means_by_type_rejects_misaligned_components():
    with pytest.raises(ValueError, match="'format' has 2 values for 3 samples"):
        reward_means_by_type({"format": [1.0, 0.0]}, ["mcq", "ocr", "mcq"])
