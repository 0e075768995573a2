"""Advantage estimators for critic-free RL, one registered pure function each.

Shapes: ``scores`` ``(B,)`` is the return of each response: the masked sum of its token rewards
(:func:`sequence_returns`), which is the outcome reward minus any per-token KL penalty; ``token_rewards``
``(B, L)`` is the same reward spread over tokens (the outcome reward on the last response token, plus any
per-token KL penalty); ``response_mask`` ``(B, L)`` is 1 on response tokens and 0 on padding;
``group_ids`` ``(B,)`` gives the prompt each response answers (groups need not be contiguous). Every
estimator returns token-level advantages ``(B, L)`` that are 0 on padding.

Pick one by configuration: ``algorithm.advantage_estimator: grpo`` and call :func:`compute_advantages`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from enum import StrEnum

import torch

from services.trainer.algorithms.masked import (
    GroupIds,
    group_index,
    group_mean_std,
    group_sizes,
    group_sums,
    masked_sum,
    masked_whiten,
    require_group_size,
)
from services.trainer.algorithms.registry import Registry


class AdvantageEstimator(StrEnum):
    """Config names of the advantage estimators (``algorithm.advantage_estimator``)."""

    GRPO = "grpo"
    GRPO_PASSK = "grpo_passk"
    RLOO = "rloo"
    REMAX = "remax"
    REINFORCE_PLUS_PLUS = "reinforce_plus_plus"
    GDPO = "gdpo"


ADVANTAGE_ESTIMATORS: Registry[AdvantageEstimator] = Registry("advantage estimator", AdvantageEstimator)

GROUP_ESTIMATORS = frozenset(
    {AdvantageEstimator.GRPO, AdvantageEstimator.GRPO_PASSK, AdvantageEstimator.RLOO, AdvantageEstimator.GDPO}
)
"""Estimators whose baseline comes from the other responses to the same prompt (they need n >= 2)."""


def register_advantage(key: AdvantageEstimator) -> Callable[[Callable[..., torch.Tensor]], Callable]:
    """Decorator adding an estimator to the registry under ``key``."""
    return ADVANTAGE_ESTIMATORS.register(key)


def _per_token(seq_values: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Broadcast ``(B,)`` to ``(B, L)``, zero on padding."""
    return seq_values.unsqueeze(-1) * response_mask.to(seq_values.dtype)


def outcome_token_rewards(scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Place each score on the last response token.

    Args:
        scores: ``(B,)``.
        response_mask: ``(B, L)``.

    Returns:
        ``(B, L)`` with ``scores[i]`` at the last position where ``response_mask[i]`` is 1, 0 elsewhere.
    """
    mask = response_mask.to(scores.dtype)
    # integer positions: in bf16 (8-bit mantissa) 257 rounds to 256, and argmax would pick an earlier tie
    positions = torch.arange(1, mask.shape[-1] + 1, dtype=torch.long, device=scores.device)
    last = (response_mask.bool().long() * positions).argmax(dim=-1, keepdim=True)
    placed = torch.zeros_like(mask).scatter_(-1, last, scores.unsqueeze(-1))
    return placed * mask


def sequence_returns(token_rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """The return of each response: the masked sum of its token rewards, as EasyR1 and verl compute it.

    With ``kl.mode: reward`` the token rewards carry ``-coef * kl_t`` on every token, so the return is the
    outcome minus the response's summed KL penalty.

    Args:
        token_rewards: ``(B, L)``; response_mask: ``(B, L)``.

    Returns:
        ``(B,)``.
    """
    return masked_sum(token_rewards, response_mask, dim=-1)


@register_advantage(AdvantageEstimator.GRPO)
def grpo_advantages(
    scores: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: GroupIds,
    norm_by_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """GRPO: ``A_i = (r_i - mean_g) / (std_g + eps)``; without std scaling (Dr.GRPO) ``A_i = r_i - mean_g``.

    The std is the unbiased (n - 1) estimate over the group ``g`` of response ``i``.

    Args:
        scores: ``(B,)``; response_mask: ``(B, L)``; group_ids: ``(B,)``, every group of size >= 2.

    Returns:
        ``(B, L)``.
    """
    mean, std = group_mean_std(scores, group_ids, who="grpo")
    centred = scores - mean
    return _per_token(centred / (std + eps) if norm_by_std else centred, response_mask)


@register_advantage(AdvantageEstimator.GRPO_PASSK)
def passk_advantages(
    scores: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: GroupIds,
    k: int,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Pass@k training (analytical form): the group reward is the best of ``k`` responses drawn without
    replacement from the ``n`` of a group.

    With the k-subsets ``S`` of a group, ``R(S) = max_{j in S} r_j``:
    ``mean = E_S[R(S)]``, ``std = sqrt(Var_S[R(S)])`` and ``A_i = (E_{S ∋ i}[R(S)] - mean) / (std + eps)``.
    For 0/1 rewards with ``c`` correct this is the closed form of the paper:
    ``mean = 1 - C(n-c, k) / C(n, k)``, ``A_pos = (1 - mean) / std``,
    ``A_neg = (1 - mean - C(n-c-1, k-1) / C(n-1, k-1)) / std``. For ``k = 1`` it is GRPO with the
    population std. Advantages of a group sum to 0.

    Args:
        scores: ``(B,)``; response_mask: ``(B, L)``; group_ids: ``(B,)``, every group larger than ``k``.
        k: responses per attempt, ``1 <= k < n``.

    Returns:
        ``(B, L)``.
    """
    if k < 1:
        raise ValueError(f"grpo_passk: k must be >= 1, got {k}")
    index, names = group_index(group_ids)
    index = index.to(scores.device)
    require_group_size(group_sizes(index, len(names)), names, who=f"grpo_passk with k={k}", min_size=k + 1)
    advantages = torch.zeros_like(scores)
    for g in range(len(names)):
        members = (index == g).nonzero().flatten()
        advantages[members] = _passk_group(scores[members], k, eps)
    return _per_token(advantages, response_mask)


def _passk_group(rewards: torch.Tensor, k: int, eps: float) -> torch.Tensor:
    """Pass@k advantages ``(n,)`` of one group's rewards ``(n,)``."""
    n = rewards.numel()
    ordered, order = torch.sort(rewards, stable=True)
    # sorted position j (0-based) is the maximum of C(j, k-1) of the C(n, k) subsets
    as_max = torch.tensor([math.comb(j, k - 1) for j in range(n)], dtype=rewards.dtype, device=rewards.device)
    as_max = as_max / math.comb(n, k)
    mean = (as_max * ordered).sum()
    std = torch.sqrt(((as_max * ordered**2).sum() - mean**2).clamp(min=0.0))
    # among the C(n-1, k-1) subsets holding position p: p is the max in C(p, k-1) of them, and a higher
    # position j is the max in C(j-1, k-2) of them (the k-2 others come from below j, excluding p)
    counts = torch.zeros(n, n, dtype=rewards.dtype, device=rewards.device)
    for p in range(n):
        counts[p, p] = math.comb(p, k - 1)
        for j in range(p + 1, n):
            counts[p, j] = math.comb(j - 1, k - 2) if k >= 2 else 0
    value_with = counts @ ordered / math.comb(n - 1, k - 1)
    advantages = torch.empty_like(rewards)
    advantages[order] = (value_with - mean) / (std + eps)
    return advantages


@register_advantage(AdvantageEstimator.RLOO)
def rloo_advantages(scores: torch.Tensor, response_mask: torch.Tensor, group_ids: GroupIds) -> torch.Tensor:
    """RLOO: the baseline of a response is the mean score of the other responses to its prompt,
    ``A_i = r_i - (sum_g - r_i) / (n_g - 1)``.

    Args:
        scores: ``(B,)``; response_mask: ``(B, L)``; group_ids: ``(B,)``, every group of size >= 2.

    Returns:
        ``(B, L)``.
    """
    index, names = group_index(group_ids)
    index = index.to(scores.device)
    sizes = group_sizes(index, len(names))
    require_group_size(sizes, names, who="rloo", min_size=2)
    others = group_sums(scores, index, len(names))[index] - scores
    baseline = others / (sizes[index] - 1).to(scores.dtype)
    return _per_token(scores - baseline, response_mask)


@register_advantage(AdvantageEstimator.REMAX)
def remax_advantages(
    scores: torch.Tensor, response_mask: torch.Tensor, baseline_scores: torch.Tensor
) -> torch.Tensor:
    """ReMax: the baseline is the reward of the greedy response to the same prompt, ``A_i = r_i - b_i``.

    Args:
        scores: ``(B,)``; response_mask: ``(B, L)``.
        baseline_scores: ``(B,)``, the greedy response's reward for the prompt of each sampled response.

    Returns:
        ``(B, L)``.
    """
    if baseline_scores.shape != scores.shape:
        raise ValueError(
            f"remax: baseline_scores has shape {tuple(baseline_scores.shape)}, "
            f"scores has {tuple(scores.shape)}; give one greedy reward per sampled response"
        )
    return _per_token(scores - baseline_scores, response_mask)


@register_advantage(AdvantageEstimator.REINFORCE_PLUS_PLUS)
def reinforce_plus_plus_advantages(
    token_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float = 1.0, eps: float = 1e-8
) -> torch.Tensor:
    """REINFORCE++: discounted return per token, whitened over every response token of the batch.

    ``G_t = r_t + gamma * G_{t+1}`` along the response tokens (padding is skipped: it adds no reward and no
    discount), then ``A = (G - mean(G)) / std(G)`` with mean and std over all unmasked tokens.

    Args:
        token_rewards: ``(B, L)``, e.g. the outcome reward on the last token minus a per-token KL penalty.
        response_mask: ``(B, L)``.
        gamma: discount in ``(0, 1]``.

    Returns:
        ``(B, L)``.
    """
    mask = response_mask.to(token_rewards.dtype)
    returns = torch.zeros_like(token_rewards)
    running = torch.zeros_like(token_rewards[:, 0])
    for t in reversed(range(token_rewards.shape[-1])):
        stepped = token_rewards[:, t] + gamma * running
        running = torch.where(mask[:, t].bool(), stepped, running)
        returns[:, t] = running
    return masked_whiten(returns, mask, eps=eps)


@register_advantage(AdvantageEstimator.GDPO)
def gdpo_advantages(
    reward_components: Mapping[str, torch.Tensor],
    component_weights: Mapping[str, float],
    response_mask: torch.Tensor,
    group_ids: GroupIds,
    eps: float = 1e-6,
    reward_penalties: torch.Tensor | None = None,
) -> torch.Tensor:
    """GDPO: normalise each reward component within its group separately, sum with weights, whiten.

    ``A_i^c = (r_i^c - mean_g^c) / (std_g^c + eps)``, ``S_i = sum_c w_c A_i^c - (p_i - mean_g p)``,
    ``A_i = (S_i - mean_B S) / std_B S`` over the batch (unbiased stds).

    ``p_i`` is the response's summed token-level penalty (``coef * sum_t kl_t`` with ``kl.mode: reward``).
    It is centred within the group like the components but not divided by its std: that would cancel
    ``coef`` and leave the KL as strong as a whole reward component whatever its size.

    Args:
        reward_components: name -> ``(B,)`` (e.g. ``accuracy``, ``format`` from the reward service).
        component_weights: name -> weight; every named component must be in ``reward_components``.
        response_mask: ``(B, L)``; group_ids: ``(B,)``, every group of size >= 2.
        reward_penalties: ``(B,)`` penalties ``p`` in reward units (outcome minus return), None for none.

    Returns:
        ``(B, L)``.
    """
    missing = [name for name in component_weights if name not in reward_components]
    if missing:
        raise ValueError(
            f"gdpo: reward component(s) {missing} are configured in algorithm.gdpo_components but the "
            f"rewards only carry {sorted(reward_components)}; name components the reward service returns"
        )
    combined: torch.Tensor | None = None
    for name, weight in component_weights.items():
        values = reward_components[name]
        mean, std = group_mean_std(values, group_ids, who=f"gdpo component {name!r}")
        term = weight * (values - mean) / (std + eps)
        combined = term if combined is None else combined + term
    if combined is None:
        raise ValueError("gdpo: algorithm.gdpo_components is empty; name at least one reward component")
    if reward_penalties is not None:
        mean, _ = group_mean_std(reward_penalties, group_ids, who="gdpo reward penalty")
        combined = combined - (reward_penalties - mean)
    whitened = masked_whiten(combined, torch.ones_like(combined))
    return _per_token(whitened, response_mask)


@torch.no_grad()
def compute_advantages(
    estimator: AdvantageEstimator | str,
    *,
    response_mask: torch.Tensor,
    scores: torch.Tensor | None = None,
    token_rewards: torch.Tensor | None = None,
    **inputs: object,
) -> torch.Tensor:
    """Run the estimator named in the config.

    Give ``scores`` ``(B,)``, the outcome reward of each response, and/or ``token_rewards`` ``(B, L)``.
    When ``token_rewards`` are given they decide the return every estimator sees: the sequence-level ones
    (GRPO, pass@k, RLOO, ReMax) get :func:`sequence_returns`, REINFORCE++ the token rewards themselves. So
    with ``kl.mode: reward``, pass the token rewards penalised by
    :func:`~services.trainer.algorithms.kl.apply_kl_reward_penalty` together with the unpenalised
    ``scores``: the difference is each response's penalty, which GDPO (whose components are separate
    rewards) subtracts after normalising the components. Without ``token_rewards`` the scores are the
    returns and sit on the last response token.

    Further ``inputs`` (``group_ids``, ``baseline_scores``, ``reward_components``, and the settings from
    :meth:`AlgorithmConfig.advantage_params`) go to the estimator that names them; ``None`` counts as
    absent, and a name that no estimator takes raises. No gradient flows through advantages.

    Returns:
        advantages ``(B, L)``, 0 on padding.

    Raises:
        ValueError: neither ``scores`` nor ``token_rewards``; GDPO given ``token_rewards`` without
            ``scores`` (it could not tell the penalty from the outcome); an estimator's input is missing.
    """
    if scores is None and token_rewards is None:
        raise ValueError("compute_advantages needs scores (B,) or token_rewards (B, L)")
    if token_rewards is None:
        token_rewards = outcome_token_rewards(scores, response_mask)
        returns = scores
    else:
        returns = sequence_returns(token_rewards, response_mask)
    penalties = None if scores is None else scores - returns
    if penalties is None and ADVANTAGE_ESTIMATORS.takes(estimator, "reward_penalties"):
        raise ValueError(
            f"advantage estimator {AdvantageEstimator(estimator).value} keeps token-level penalties (KL in "
            "reward) apart from its reward components, so it needs the outcome as well: give scores= (the "
            "rewards before apply_kl_reward_penalty) together with token_rewards"
        )
    return ADVANTAGE_ESTIMATORS.call(
        estimator,
        scores=returns,
        token_rewards=token_rewards,
        response_mask=response_mask,
        reward_penalties=penalties,
        **inputs,
    )
