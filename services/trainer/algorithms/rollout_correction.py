"""Rollout correction: importance weights for the gap between the policy that sampled a response (the
engine: bf16 vLLM, another kernel, maybe older weights) and the trainer's policy the loss takes as the
old one (``algorithm.rollout_correction``).

With ``ρ = π_old(y_t) / π_rollout(y_t)`` per token (``level: token``), or ``ρ = Π_t ρ_t`` per
sequence broadcast to its tokens (``level: sequence``), each kept token's loss is weighted by a
stop-gradient weight w:

- ``tis`` (truncated importance sampling, Yao et al. 2025, "Your Efficient RL Framework Secretly Brings
  You Off-Policy RL Training"): ``w = min(ρ, cap)``, every token kept;
- ``mis`` (masked importance sampling, Liu, Li et al. 2025, "When Speed Kills Stability"): ``w = ρ``
  where ``low ≤ ρ ≤ high``; a token (or sequence) outside the band is dropped from the loss AND from
  its normaliser, as verl does since it separated rejection from weighting.

ρ is bounded to [e^-20, e^20] before anything else, so a sequence's product never overflows. The
weights multiply the advantages: every registered policy loss is positively homogeneous in the
advantage (linear, or a min/max of linear terms), so ``loss(w·A) = w·loss(A)`` token by token for
w ≥ 0, the per-token weighting verl applies to its token losses.

The metrics (``rollout_corr/*``) are reported every step the engine's log-probs are comparable, also
with the correction off, so the mismatch is always visible.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

SAFETY_LOG_BOUND = 20.0


class RolloutCorrectionConfig(BaseModel):
    """``algorithm.rollout_correction``."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    enabled: bool = False
    mode: Literal["tis", "mis"] = "tis"
    level: Literal["token", "sequence"] = "token"
    cap: float = Field(default=2.0, gt=1.0, description="tis: weights above it are truncated to it")
    band: tuple[float, float] = Field(
        default=(0.5, 2.0),
        description="mis: [low, high]; tokens (sequences) whose ratio leaves it are dropped",
    )

    @model_validator(mode="after")
    def _band_holds_one(self) -> RolloutCorrectionConfig:
        low, high = self.band
        if not 0.0 <= low < 1.0 < high:
            raise ValueError(
                f"algorithm.rollout_correction.band={list(self.band)} must satisfy 0 <= low < 1 < high "
                "(a ratio of 1, no mismatch, must be kept), e.g. [0.5, 2.0]"
            )
        return self

    @property
    def needs_old_log_probs(self) -> bool:
        """MIS drops tokens from the loss's normaliser, which is fixed before the update's first forward:
        the old log-probs must come from their own pass, before it."""
        return self.enabled and self.mode == "mis"


def ratios(
    old: torch.Tensor, rollout: torch.Tensor, mask: torch.Tensor, level: Literal["token", "sequence"]
) -> torch.Tensor:
    """ρ per token (B, R): exp(old − rollout) per token, or per sequence exp(Σ over its tokens),
    broadcast; bounded to [e^-20, e^20]; 1 where ``mask`` is 0.

    Example: old [[-1.0, -2.0]], rollout [[-1.5, -2.0]], mask [[1, 1]] → token [[e^0.5, 1]],
    sequence [[e^0.5, e^0.5]].
    """
    keep = mask.bool()
    log_ratio = torch.where(keep, old - rollout, torch.zeros_like(old))
    if level == "sequence":
        log_ratio = log_ratio.sum(dim=-1, keepdim=True).expand_as(old)
    bounded = log_ratio.clamp(-SAFETY_LOG_BOUND, SAFETY_LOG_BOUND)
    return torch.where(keep, bounded.exp(), torch.ones_like(old))


def correction(
    rho: torch.Tensor, mask: torch.Tensor, config: RolloutCorrectionConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(weights, keep)``, each (B, R): the stop-gradient weight of each token's loss and the tokens
    kept in the loss and its normaliser (a subset of ``mask``).

    Example (cap 2, band [0.5, 2]): ρ [[0.25, 1.0, 3.0]] → tis: weights [[0.25, 1.0, 2.0]], all kept;
    mis: weights [[0, 1.0, 0]], keep [[0, 1, 0]].
    """
    real = mask.bool()
    if config.mode == "tis":
        return torch.where(real, rho.clamp(max=config.cap), torch.zeros_like(rho)), real
    low, high = config.band
    keep = real & (rho >= low) & (rho <= high)
    return torch.where(keep, rho, torch.zeros_like(rho)), keep


def mismatch_metrics(
    old: torch.Tensor, rollout: torch.Tensor, mask: torch.Tensor, config: RolloutCorrectionConfig
) -> dict[str, float]:
    """How far the engine's policy is from the trainer's on these tokens, at the configured level:
    the ratio's mean, max and min over real tokens, the share the correction truncates (tis) or drops (mis)
    (what it would, when it is off), and KL(rollout ‖ old) estimated as the mean of
    (rollout − old) over the sampled tokens. Empty without a real token."""
    real = mask.bool()
    if not real.any():
        return {}
    rho = ratios(old, rollout, mask, config.level)[real]
    if config.mode == "tis":
        affected = rho > config.cap
    else:
        low, high = config.band
        affected = (rho < low) | (rho > high)
    return {
        "rollout_corr/ratio_mean": float(rho.mean()),
        "rollout_corr/ratio_max": float(rho.max()),
        "rollout_corr/ratio_min": float(rho.min()),
        "rollout_corr/clipped_frac": float(affected.float().mean()),
        "rollout_corr/kl": float((rollout - old)[real].mean()),
    }
