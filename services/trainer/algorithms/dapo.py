"""DAPO's two data-side pieces: dynamic sampling (online filtering of groups) and the soft overlong
penalty (Yu et al., 2025, arXiv 2503.14476).

Shapes: ``scores`` ``(B,)``, ``group_ids`` ``(B,)``, ``response_lengths`` ``(B,)`` in tokens.
"""

from __future__ import annotations

import torch

from services.trainer.algorithms.masked import GroupIds, group_index


def dynamic_sampling_keep(scores: torch.Tensor, group_ids: GroupIds) -> tuple[torch.Tensor, dict[str, float]]:
    """Which samples survive DAPO's dynamic sampling.

    A group whose responses all score the same (all 0: unsolved, all 1: solved) has zero group-relative
    advantage and only dilutes the batch, so all its samples are dropped; the caller samples more prompts
    until the batch is full again. A single-response group has no spread either and is dropped.

    Args:
        scores: ``(B,)``, the metric filtered on (usually accuracy).
        group_ids: ``(B,)``.

    Returns:
        keep: ``(B,)`` bool; metrics ``groups``, ``groups_kept``, ``groups_all_zero``, ``groups_all_one``.
    """
    index, names = group_index(group_ids)
    index = index.to(scores.device)
    g = len(names)
    highest = torch.full((g,), -torch.inf, dtype=scores.dtype, device=scores.device)
    lowest = torch.full((g,), torch.inf, dtype=scores.dtype, device=scores.device)
    highest = highest.scatter_reduce(0, index, scores, reduce="amax")
    lowest = lowest.scatter_reduce(0, index, scores, reduce="amin")
    varied = highest > lowest  # a single-response group has highest == lowest: dropped too
    flat = ~varied
    metrics = {
        "groups": float(g),
        "groups_kept": float(varied.sum()),
        "groups_all_zero": float((flat & (highest == 0)).sum()),
        "groups_all_one": float((flat & (lowest == 1)).sum()),
    }
    return varied[index], metrics


def overlong_penalty(
    response_lengths: torch.Tensor, *, max_length: int, buffer_length: int, factor: float = 1.0
) -> torch.Tensor:
    """DAPO's soft overlong punishment, added to the reward.

    With ``e = max_length - buffer_length``: 0 for ``|y| <= e``, ``(e - |y|) / buffer_length`` (falling
    linearly from 0 to -1) for ``e < |y| <= max_length``, and -1 beyond; all times ``factor``.

    Args:
        response_lengths: ``(B,)`` response lengths in tokens.

    Returns:
        ``(B,)`` float penalties in ``[-factor, 0]``.
    """
    if not 0 < buffer_length <= max_length:
        raise ValueError(
            f"overlong penalty needs 0 < buffer_length ({buffer_length}) <= max_length ({max_length})"
        )
    lengths = response_lengths.to(
        torch.get_default_dtype() if not response_lengths.is_floating_point() else response_lengths.dtype
    )
    expected = max_length - buffer_length
    return ((expected - lengths) / buffer_length).clamp(min=-1.0, max=0.0) * factor
