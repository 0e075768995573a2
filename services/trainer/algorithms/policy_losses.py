"""Policy-gradient losses, one registered pure function each.

Shapes: ``log_probs`` ``(B, L)`` are log-probabilities of the sampled tokens under the policy being
trained (with gradient); ``old_log_probs`` ``(B, L)`` the same under the policy that sampled them (no
gradient); ``advantages`` ``(B, L)``; ``response_mask`` ``(B, L)`` 0/1. Each registered function returns
per-token losses ``(B, L)`` (to be minimised) and a dict of float metrics; :func:`compute_policy_loss`
reduces the per-token losses with the configured :class:`LossAgg`.

Pick one by configuration: ``algorithm.policy_loss: ppo``.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

import torch

from services.trainer.algorithms.aggregation import LossAgg, aggregate_loss
from services.trainer.algorithms.masked import masked_mean, zero_padding
from services.trainer.algorithms.metrics import approx_kl, clip_fractions
from services.trainer.algorithms.registry import Registry

LOG_RATIO_LIMIT = 20.0
"""Log-ratios are clamped to ±20 before exp: keeps exp finite (and gradients of masked branches 0, not NaN)."""

TokenLosses = tuple[torch.Tensor, dict[str, float]]


class PolicyLoss(StrEnum):
    """Config names of the policy losses (``algorithm.policy_loss``)."""

    PPO = "ppo"
    GSPO = "gspo"
    GSPO_TOKEN = "gspo_token"
    CISPO = "cispo"
    LUFFY = "luffy"


POLICY_LOSSES: Registry[PolicyLoss] = Registry("policy loss", PolicyLoss)


def register_policy_loss(key: PolicyLoss) -> Callable[[Callable[..., TokenLosses]], Callable]:
    """Decorator adding a policy loss to the registry under ``key``."""
    return POLICY_LOSSES.register(key)


def _ratio(log_probs: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    return torch.exp((log_probs - reference).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT))


def _clipped_surrogate(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_ratio_dual: float | None,
) -> torch.Tensor:
    """Per-element PPO loss ``max(-A r, -A clip(r, 1 - low, 1 + high))``; with dual clip, negative-advantage
    elements are further capped at ``-A c`` so a huge ratio cannot blow the loss up."""
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    losses = torch.maximum(unclipped, clipped)
    if clip_ratio_dual is not None:
        capped = torch.minimum(losses, -advantages * clip_ratio_dual)
        losses = torch.where(advantages < 0, capped, losses)
    return losses


@register_policy_loss(PolicyLoss.PPO)
def ppo_clip_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_ratio_dual: float | None = None,
) -> TokenLosses:
    """PPO clipped surrogate with asymmetric bounds (DAPO clip-higher) and optional dual clip.

    ``r_t = exp(logp_t - old_logp_t)``, ``l_t = max(-A_t r_t, -A_t clip(r_t, 1 - eps_low, 1 + eps_high))``,
    and with dual clip ``c`` for ``A_t < 0``: ``l_t = min(l_t, -A_t c)``.

    Returns:
        per-token losses ``(B, L)``; metrics ``clipfrac_higher``, ``clipfrac_lower`` (``clipfrac_dual``).
    """
    ratio = _ratio(log_probs, old_log_probs)
    losses = _clipped_surrogate(ratio, advantages, clip_ratio_low, clip_ratio_high, clip_ratio_dual)
    metrics = clip_fractions(
        ratio.detach(),
        advantages,
        response_mask,
        clip_ratio_low=clip_ratio_low,
        clip_ratio_high=clip_ratio_high,
        clip_ratio_dual=clip_ratio_dual,
    )
    return losses, metrics


def _sequence_log_ratio(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """``(1/|y_i|) sum_t (logp - old_logp)`` over response tokens, ``(B,)``."""
    return masked_mean(log_probs - old_log_probs, mask, dim=-1).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)


def _sequence_metrics(
    seq_ratio: torch.Tensor,
    seq_adv: torch.Tensor,
    response_mask: torch.Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
) -> dict[str, float]:
    """GSPO's per-response clip fractions and mean sequence ratio (responses without tokens excluded)."""
    has_tokens = response_mask.sum(dim=-1) > 0
    metrics = clip_fractions(
        seq_ratio, seq_adv, has_tokens, clip_ratio_low=clip_ratio_low, clip_ratio_high=clip_ratio_high
    )
    metrics["seq_ratio_mean"] = masked_mean(seq_ratio, has_tokens).item()
    return metrics


@register_policy_loss(PolicyLoss.GSPO)
def gspo_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
) -> TokenLosses:
    """GSPO: one importance ratio per response, the geometric mean of its token ratios.

    ``s_i = exp(mean_t (logp - old_logp))``, ``A_i = mean_t A_t`` (constant for outcome advantages),
    ``l_i = max(-A_i s_i, -A_i clip(s_i, 1 - eps_low, 1 + eps_high))``, copied onto every response token:
    with ``loss_agg: seq-mean-token-mean`` the loss is exactly the paper's ``mean_i l_i``.

    Returns:
        per-token losses ``(B, L)``; metrics ``clipfrac_higher``, ``clipfrac_lower`` (fractions of
        responses), ``seq_ratio_mean``.
    """
    seq_ratio = torch.exp(_sequence_log_ratio(log_probs, old_log_probs, response_mask))
    seq_adv = masked_mean(advantages, response_mask, dim=-1)
    seq_losses = _clipped_surrogate(seq_ratio, seq_adv, clip_ratio_low, clip_ratio_high, None)
    metrics = _sequence_metrics(seq_ratio.detach(), seq_adv, response_mask, clip_ratio_low, clip_ratio_high)
    return seq_losses.unsqueeze(-1) * response_mask.to(seq_losses.dtype), metrics


@register_policy_loss(PolicyLoss.GSPO_TOKEN)
def gspo_token_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
) -> TokenLosses:
    """GSPO-token: the sequence ratio's value with a per-token gradient, for token-level advantages.

    ``s_{i,t} = sg[s_i] * pi(y_t) / sg[pi(y_t)]`` (numerically ``s_i``),
    ``l_{i,t} = max(-A_t s_{i,t}, -A_t clip(s_{i,t}, 1 - eps_low, 1 + eps_high))``. With a constant
    advantage per response it equals GSPO in value and gradient.

    Returns:
        per-token losses ``(B, L)``; metrics as :func:`gspo_loss`.
    """
    seq_log_ratio = _sequence_log_ratio(log_probs, old_log_probs, response_mask).detach()
    token_ratio = torch.exp(seq_log_ratio.unsqueeze(-1) + log_probs - log_probs.detach())
    losses = _clipped_surrogate(token_ratio, advantages, clip_ratio_low, clip_ratio_high, None)
    seq_adv = masked_mean(advantages, response_mask, dim=-1)
    metrics = _sequence_metrics(
        torch.exp(seq_log_ratio), seq_adv, response_mask, clip_ratio_low, clip_ratio_high
    )
    return losses, metrics


@register_policy_loss(PolicyLoss.CISPO)
def cispo_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
) -> TokenLosses:
    """CISPO (MiniMax-M1): clip the importance weight, not the update, so every token keeps a gradient.

    ``l_t = -sg[clip(r_t, 1 - eps_low, 1 + eps_high)] * A_t * logp_t``.

    Returns:
        per-token losses ``(B, L)``; metrics ``is_weight_clipfrac`` (tokens whose weight was clipped)
        and ``is_weight_mean``.
    """
    ratio = _ratio(log_probs, old_log_probs).detach()
    weight = ratio.clamp(1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    losses = -weight * advantages * log_probs
    metrics = {
        "is_weight_clipfrac": masked_mean((weight != ratio).to(ratio.dtype), response_mask).item(),
        "is_weight_mean": masked_mean(weight, response_mask).item(),
    }
    return losses, metrics


@register_policy_loss(PolicyLoss.LUFFY)
def luffy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    offline_mask: torch.Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_ratio_dual: float | None = None,
    shaping_gamma: float = 0.1,
    behaviour_log_probs: torch.Tensor | None = None,
) -> TokenLosses:
    """LUFFY: off-policy guidance from offline trajectories with policy shaping.

    On-policy tokens: the PPO clipped loss (:func:`ppo_clip_loss`). Off-policy tokens (from an offline
    trajectory): ``r_t = pi(y_t) / pi_behav(y_t)`` with ``pi_behav = 1`` when the behaviour policy's
    probabilities are unknown (so ``r_t = pi(y_t)``), no clipping, and the shaped loss
    ``l_t = -A_t f(r_t)``, ``f(r) = r / (r + gamma)``. ``f'(r) = gamma / (r + gamma)^2`` boosts the gradient
    of tokens the policy finds unlikely, which plain importance weighting would ignore.

    Args:
        offline_mask: ``(B,)`` or ``(B, L)`` bool, True for tokens of offline trajectories.
        shaping_gamma: ``gamma`` of the shaping function, > 0.
        behaviour_log_probs: ``(B, L)`` log-probs of the offline tokens under the model that wrote them,
            if known; None means probability 1.

    Returns:
        per-token losses ``(B, L)``; metrics: on-policy clip fractions, ``offline_token_frac``,
        ``offline_shaped_weight_mean``.
    """
    offline = offline_mask.bool()
    if offline.dim() == 1 and offline.shape[0] == log_probs.shape[0]:
        offline = offline.unsqueeze(-1).expand_as(log_probs)
    if offline.shape != log_probs.shape:
        raise ValueError(
            f"luffy: offline_mask shape {tuple(offline_mask.shape)} fits neither (B,) nor "
            f"(B, L) = {tuple(log_probs.shape)}"
        )
    on_policy_ratio = _ratio(log_probs, old_log_probs)
    on_losses = _clipped_surrogate(
        on_policy_ratio, advantages, clip_ratio_low, clip_ratio_high, clip_ratio_dual
    )
    behaviour = torch.zeros_like(log_probs) if behaviour_log_probs is None else behaviour_log_probs
    off_ratio = _ratio(log_probs, behaviour)
    shaped = off_ratio / (off_ratio + shaping_gamma)
    losses = torch.where(offline, -advantages * shaped, on_losses)

    mask = response_mask.bool()
    metrics = clip_fractions(
        on_policy_ratio.detach(),
        advantages,
        mask & ~offline,
        clip_ratio_low=clip_ratio_low,
        clip_ratio_high=clip_ratio_high,
        clip_ratio_dual=clip_ratio_dual,
    )
    metrics["offline_token_frac"] = masked_mean(offline.to(log_probs.dtype), mask).item()
    metrics["offline_shaped_weight_mean"] = masked_mean(shaped.detach(), mask & offline).item()
    return losses, metrics


def compute_policy_loss(
    loss: PolicyLoss | str,
    *,
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg: LossAgg | str,
    norm_length: float | None = None,
    global_normaliser: float | torch.Tensor | None = None,
    **inputs: object,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Run the policy loss named in the config and aggregate it.

    With gradient accumulation (micro-batches, data-parallel ranks) pass ``global_normaliser``, the
    mini-batch's total count from :func:`~services.trainer.algorithms.aggregation.local_normaliser`
    (see :func:`~services.trainer.algorithms.aggregation.aggregate_loss`): the returned values then sum
    over micro-batches to the mini-batch's loss, and so does ``pg_loss``.

    Further ``inputs`` (``clip_ratio_low``/``high``/``dual``, ``offline_mask``, ``shaping_gamma``,
    ``behaviour_log_probs``; most from :meth:`AlgorithmConfig.policy_loss_params`) go to the loss that
    names them; ``None`` counts as absent.

    Padded positions of the token-level inputs are zeroed first, so a NaN or inf there (e.g. a ``-inf``
    log-prob) reaches neither the loss nor its gradient.

    Returns:
        the 0-d loss to back-propagate and float metrics: the loss's own plus ``pg_loss`` and ``ppo_kl``
        (k3 estimate of KL(old || new)).
    """
    log_probs = zero_padding(log_probs, response_mask)
    old_log_probs = zero_padding(old_log_probs, response_mask)
    advantages = zero_padding(advantages, response_mask)
    behaviour = inputs.get("behaviour_log_probs")
    if isinstance(behaviour, torch.Tensor):
        inputs["behaviour_log_probs"] = zero_padding(behaviour, response_mask)
    token_losses, metrics = POLICY_LOSSES.call(
        loss,
        log_probs=log_probs,
        old_log_probs=old_log_probs,
        advantages=advantages,
        response_mask=response_mask,
        **inputs,
    )
    value = aggregate_loss(
        token_losses, response_mask, loss_agg, norm_length=norm_length, global_normaliser=global_normaliser
    )
    metrics["pg_loss"] = value.item()
    metrics["ppo_kl"] = approx_kl(log_probs, old_log_probs, response_mask)
    return value, metrics
