"""KL divergence between the policy and a reference: estimators, the loss term, the reward penalty and
the coefficient controllers.

Shapes: ``log_probs`` and ``ref_log_probs`` are ``(B, L)`` log-probabilities of the sampled tokens under
the policy and the reference; ``response_mask`` ``(B, L)``. With ``algorithm.kl.mode: off`` none of this
runs and no reference model is loaded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

import torch

from services.trainer.algorithms.aggregation import LossAgg, aggregate_loss
from services.trainer.algorithms.masked import masked_mean, masked_sum, zero_padding

if TYPE_CHECKING:
    from services.trainer.algorithms.config import KLConfig

K3_CLAMP = 10.0
"""|k3| is clamped here: exp(ref - logp) explodes for tokens the policy has made far less likely."""

K3_LOG_RATIO_LIMIT = 20.0
"""``d`` is clamped to ±20 before k3's exp: exp(-d) overflows float32/bf16 from d < -88, and the clamp on
k3 alone would then back-propagate ``0 * inf = nan`` (verl/EasyR1 ``low_var_kl`` clamp the same way)."""


class KLMode(StrEnum):
    """Where the KL term goes (``algorithm.kl.mode``)."""

    OFF = "off"
    LOSS = "loss"
    REWARD = "reward"


class KLEstimator(StrEnum):
    """Per-token estimators of KL(policy || reference) from tokens sampled by the policy
    (``algorithm.kl.estimator``); the names used by verl/EasyR1 are accepted as aliases."""

    K1 = "k1"
    K2 = "k2"
    K3 = "k3"
    ABS = "abs"

    @classmethod
    def _missing_(cls, value: object) -> KLEstimator | None:
        name = str(value).lower()
        return _KL_ALIASES.get(name) or next((m for m in cls if m.value == name), None)


_KL_ALIASES = {"kl": KLEstimator.K1, "mse": KLEstimator.K2, "low_var_kl": KLEstimator.K3}


def kl_penalty(
    log_probs: torch.Tensor, ref_log_probs: torch.Tensor, estimator: KLEstimator | str
) -> torch.Tensor:
    """Per-token KL estimate ``(B, L)`` with ``d = log_probs - ref_log_probs``.

    - ``k1``: ``d`` (unbiased, high variance, can be negative).
    - ``k2``: ``d^2 / 2`` (the "mse" form; biased, low variance).
    - ``k3``: ``exp(-d) - 1 + d`` (unbiased, non-negative, low variance), with ``d`` clamped to ``[-20, 20]``
      first and the result to ``[-10, 10]``; beyond either clamp the gradient is 0 (never NaN).
    - ``abs``: ``|d|``.
    """
    return _KL_ESTIMATORS[KLEstimator(estimator)](log_probs - ref_log_probs)


_KL_ESTIMATORS: dict[KLEstimator, Callable[[torch.Tensor], torch.Tensor]] = {
    KLEstimator.K1: lambda d: d,
    KLEstimator.K2: lambda d: 0.5 * d.square(),
    KLEstimator.K3: lambda d: _k3(d.clamp(-K3_LOG_RATIO_LIMIT, K3_LOG_RATIO_LIMIT)),
    KLEstimator.ABS: lambda d: d.abs(),
}


def _k3(d: torch.Tensor) -> torch.Tensor:
    return (torch.exp(-d) - 1.0 + d).clamp(-K3_CLAMP, K3_CLAMP)


def compute_kl_loss(
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    coef: float,
    estimator: KLEstimator | str,
    loss_agg: LossAgg | str,
    norm_length: float | None = None,
    global_normaliser: float | torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """KL as a loss term: ``coef * aggregate(kl_penalty)``, added to the policy loss.

    ``global_normaliser`` as in :func:`~services.trainer.algorithms.aggregation.aggregate_loss`: the
    mini-batch's total count, so that micro-batch values (and ``kl_loss``) sum to the mini-batch's.

    Padded positions of the inputs are zeroed first, so a NaN or inf there reaches neither the loss nor
    its gradient.

    Returns:
        the scaled 0-d loss (differentiable in ``log_probs``) and metrics ``kl_loss`` (unscaled),
        ``kl_coef``.
    """
    log_probs = zero_padding(log_probs, response_mask)
    ref_log_probs = zero_padding(ref_log_probs, response_mask)
    kl = aggregate_loss(
        kl_penalty(log_probs, ref_log_probs, estimator),
        response_mask,
        loss_agg,
        norm_length=norm_length,
        global_normaliser=global_normaliser,
    )
    return coef * kl, {"kl_loss": kl.item(), "kl_coef": coef}


@torch.no_grad()
def apply_kl_reward_penalty(
    token_rewards: torch.Tensor,
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    coef: float,
    estimator: KLEstimator | str,
) -> tuple[torch.Tensor, dict[str, float]]:
    """KL as a reward penalty: ``r_t - coef * kl_t`` on every response token.

    Args:
        token_rewards: ``(B, L)``; log_probs, ref_log_probs, response_mask: ``(B, L)``.

    Returns:
        penalised rewards ``(B, L)`` (0 on padding) and metrics ``kl_penalty`` (mean over responses of the
        summed per-token KL, what an adaptive controller tracks) and ``kl_coef``.
    """
    kl = kl_penalty(log_probs, ref_log_probs, estimator)
    # where, not a product with the mask: a NaN log-prob in a padded position must not leak as 0 * nan
    penalised = zero_padding(token_rewards - coef * kl, response_mask)
    per_response = masked_sum(kl, response_mask, dim=-1)
    return penalised, {"kl_penalty": per_response.mean().item(), "kl_coef": coef}


def mean_kl(
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    estimator: KLEstimator | str = KLEstimator.K3,
) -> float:
    """Token-mean KL estimate, for logging."""
    return masked_mean(kl_penalty(log_probs, ref_log_probs, estimator), response_mask).item()


class KLController(Protocol):
    """Holds the KL coefficient and updates it once per step."""

    coef: float

    def update(self, current_kl: float, n_steps: int) -> None: ...


@dataclass
class FixedKLController:
    """The coefficient never changes."""

    coef: float

    def update(self, current_kl: float, n_steps: int) -> None:
        """No-op."""


@dataclass
class AdaptiveKLController:
    """Proportional controller of Ziegler et al. (2019): moves ``coef`` so the KL approaches ``target``.

    ``e = clip(current_kl / target - 1, -0.2, 0.2)``, ``coef <- coef * (1 + e * n_steps / horizon)``.
    """

    coef: float
    target: float
    horizon: int

    def update(self, current_kl: float, n_steps: int) -> None:
        """Apply one update after ``n_steps`` samples (the batch size) with measured ``current_kl``."""
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.coef *= 1.0 + error * n_steps / self.horizon


def make_kl_controller(cfg: KLConfig) -> KLController:
    """The controller named by ``algorithm.kl.controller``."""
    if cfg.controller == "adaptive":
        # the config validator guarantees a target when the controller is adaptive
        return AdaptiveKLController(coef=cfg.coef, target=float(cfg.target), horizon=cfg.horizon)
    return FixedKLController(coef=cfg.coef)
