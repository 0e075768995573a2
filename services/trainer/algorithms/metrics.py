"""Diagnostics logged every step: clip fractions, approximate KL, entropy, reward means per problem type.

All return Python floats (ready for the logger) except :func:`entropy_from_logits`, which stays a tensor so
an entropy bonus can be differentiated through it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import torch

from services.trainer.algorithms.kl import KLEstimator, kl_penalty
from services.trainer.algorithms.masked import masked_mean


def clip_fractions(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_ratio_dual: float | None = None,
) -> dict[str, float]:
    """Fraction of response tokens whose gradient a PPO-style clip removes.

    - ``clipfrac_higher``: ``A > 0`` and ``r > 1 + clip_ratio_high``;
    - ``clipfrac_lower``: ``A < 0`` and ``r < 1 - clip_ratio_low``;
    - ``clipfrac_dual``: ``A < 0`` and ``r > clip_ratio_dual`` (only with dual clip).

    Args:
        ratio, advantages, response_mask: ``(B, L)``, or all ``(B,)`` for sequence-level ratios.
    """
    zero = torch.zeros_like(advantages)
    fractions = {
        "clipfrac_higher": masked_mean(
            ((advantages > 0) & (ratio > 1.0 + clip_ratio_high)).to(zero), response_mask
        ),
        "clipfrac_lower": masked_mean(
            ((advantages < 0) & (ratio < 1.0 - clip_ratio_low)).to(zero), response_mask
        ),
    }
    if clip_ratio_dual is not None:
        fractions["clipfrac_dual"] = masked_mean(
            ((advantages < 0) & (ratio > clip_ratio_dual)).to(zero), response_mask
        )
    return {name: value.item() for name, value in fractions.items()}


def approx_kl(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    estimator: KLEstimator | str = KLEstimator.K3,
) -> float:
    """Token-mean estimate of KL(old || new) from tokens sampled by the old policy: how far one update moved.

    Args:
        log_probs, old_log_probs, response_mask: ``(B, L)``.
    """
    with torch.no_grad():
        return masked_mean(kl_penalty(old_log_probs, log_probs, estimator), response_mask).item()


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the categorical distribution at each position.

    ``H = logsumexp(z) - sum_v softmax(z)_v z_v``; ``-inf`` logits (masked tokens) contribute 0.

    Args:
        logits: ``(B, L, V)``.

    Returns:
        ``(B, L)`` in nats.
    """
    # a -inf logit (a banned token) would give 0 * -inf = nan; the lowest finite value gives p = 0 exactly
    # and a zero gradient through the clamp
    logits = logits.clamp(min=torch.finfo(logits.dtype).min)
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)


def mean_entropy(logits: torch.Tensor, response_mask: torch.Tensor) -> float:
    """Token-mean entropy over response tokens. ``logits``: ``(B, L, V)``; ``response_mask``: ``(B, L)``."""
    with torch.no_grad():
        return masked_mean(entropy_from_logits(logits), response_mask).item()


def reward_means_by_type(
    components: Mapping[str, torch.Tensor | Sequence[float]], problem_types: Sequence[str]
) -> dict[str, float]:
    """Mean of every reward component per problem type, plus over the whole batch.

    Args:
        components: name (``overall``, ``accuracy``, ``format``, ...) -> ``(B,)`` values.
        problem_types: ``(B,)`` canonical problem type of each sample.

    Returns:
        ``{"reward/<type>/<component>": mean}`` with ``<type>`` = ``all`` for the whole batch.
    """
    by_type: dict[str, list[int]] = defaultdict(list)
    for i, problem_type in enumerate(problem_types):
        by_type[problem_type].append(i)
    out: dict[str, float] = {}
    for name, values in components.items():
        flat = torch.as_tensor(values, dtype=torch.float64).flatten()
        if flat.numel() != len(problem_types):
            raise ValueError(
                f"reward component {name!r} has {flat.numel()} values for {len(problem_types)} samples"
            )
        out[f"reward/all/{name}"] = flat.mean().item()
        for problem_type, rows in sorted(by_type.items()):
            out[f"reward/{problem_type}/{name}"] = flat[rows].mean().item()
    return out
