"""Masked reductions and group bookkeeping shared by the estimators and losses.

Shapes: token-level tensors are ``(B, L)`` with a ``response_mask`` ``(B, L)`` of 0/1 (padding is 0);
sequence-level tensors are ``(B,)``. Padding never contributes to any reduction here.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
import torch

GroupIds = torch.Tensor | np.ndarray | Sequence[Hashable]
"""Group membership, one id per sample ``(B,)``: samples of one prompt share an id, in any order."""


def zero_padding(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``values`` with every position where ``mask`` is 0 replaced by 0. ``values``, ``mask``: same shape.

    Applied to the inputs of a differentiable loss, it keeps a NaN or inf in a padded position out of the
    gradient as well as the value: masking only the output still back-propagates ``0 * nan = nan`` through
    ``exp`` or a product with the padded entry.
    """
    return torch.where(mask.bool(), values, torch.zeros_like(values))


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``values`` where ``mask`` is 1. ``values``, ``mask``: same shape; ``dim`` None sums all."""
    kept = zero_padding(values, mask)
    return kept.sum() if dim is None else kept.sum(dim=dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``values`` over positions where ``mask`` is 1; 0 where nothing is unmasked.

    ``torch.where`` rather than multiplication keeps a NaN or inf in a padded position out of the result.
    """
    count = mask.to(values.dtype).sum() if dim is None else mask.to(values.dtype).sum(dim=dim)
    return masked_sum(values, mask, dim) / count.clamp(min=1.0)


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(x - mean) / sqrt(var + eps)`` over the unmasked positions, 0 elsewhere.

    The variance uses Bessel's correction (divides by ``n - 1``), like the group std of GRPO.

    Args:
        values: any shape.
        mask: same shape as ``values``; at least two positions must be 1.
    """
    n = mask.to(values.dtype).sum()
    if n < 2:
        raise ValueError(f"whitening needs at least 2 unmasked values, got {int(n.item())}")
    mean = masked_mean(values, mask)
    var = masked_sum((values - mean) ** 2, mask) / (n - 1)
    whitened = (values - mean) * torch.rsqrt(var + eps)
    return torch.where(mask.bool(), whitened, torch.zeros_like(whitened))


def group_index(group_ids: GroupIds) -> tuple[torch.Tensor, list[Hashable]]:
    """Dense group numbers for arbitrary ids.

    Returns:
        index: ``(B,)`` int64, ``index[i]`` in ``[0, G)``.
        names: the original id of each of the ``G`` groups (for error messages).
    """
    if isinstance(group_ids, torch.Tensor):
        names, index = torch.unique(group_ids, return_inverse=True)
        return index.reshape(-1).long(), names.tolist()
    position: dict[Hashable, int] = {}
    index_list = [position.setdefault(_hashable(g), len(position)) for g in group_ids]
    return torch.tensor(index_list, dtype=torch.long), list(position)


def _hashable(group_id: Hashable) -> Hashable:
    # numpy scalars hash like Python scalars, but 0-d arrays do not hash at all
    return group_id.item() if isinstance(group_id, np.generic | np.ndarray) else group_id


def group_sizes(index: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Members per group ``(G,)`` for a dense ``index`` ``(B,)``."""
    return torch.bincount(index, minlength=num_groups)


def group_sums(values: torch.Tensor, index: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Per-group sums ``(G,)`` of ``values`` ``(B,)`` for a dense ``index`` ``(B,)``."""
    zeros = torch.zeros(num_groups, dtype=values.dtype, device=values.device)
    return zeros.index_add_(0, index.to(values.device), values)


def group_mean_std(
    scores: torch.Tensor, group_ids: GroupIds, *, who: str, min_size: int = 2
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample mean and unbiased std of its group's scores.

    Args:
        scores: ``(B,)``.
        group_ids: ``(B,)`` group membership.
        who: the caller, named in the error for an undersized group.
        min_size: smallest group accepted (a std over one sample does not exist).

    Returns:
        mean, std: ``(B,)`` each, broadcast back to the members.

    Raises:
        ValueError: a group has fewer than ``min_size`` members; the message names the group id.
    """
    index, names = group_index(group_ids)
    index = index.to(scores.device)
    sizes = group_sizes(index, len(names))
    require_group_size(sizes, names, who=who, min_size=min_size)
    counts = sizes.to(scores.dtype)
    means = group_sums(scores, index, len(names)) / counts
    sq = group_sums((scores - means[index]) ** 2, index, len(names))
    stds = torch.sqrt(sq / (counts - 1).clamp(min=1.0))
    return means[index], stds[index]


def require_group_size(sizes: torch.Tensor, names: list[Hashable], *, who: str, min_size: int) -> None:
    """Raise ValueError naming the first group (by its original id) with fewer than ``min_size`` members."""
    small = (sizes < min_size).nonzero().flatten().tolist()
    if small:
        g = small[0]
        raise ValueError(
            f"{who}: group {names[g]!r} has {int(sizes[g])} response(s) but needs at least {min_size}; "
            f"sample rollout.n >= {min_size} responses per prompt ({len(small)} group(s) affected)"
        )
