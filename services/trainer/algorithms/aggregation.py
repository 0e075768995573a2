"""How per-token losses ``(B, L)`` become the scalar that is differentiated.

The choice changes which tokens weigh more: token-mean weighs every token alike (DAPO), so long responses
count more; seq-mean-token-mean weighs every response alike (the GRPO paper), so tokens of short responses
count more; seq-mean-token-sum divides by a constant instead of a length (Dr.GRPO), removing the length
bias of both.
"""

from __future__ import annotations

from enum import StrEnum

import torch

from services.trainer.algorithms.masked import masked_mean, masked_sum


class LossAgg(StrEnum):
    """Config names of the loss aggregation modes (``algorithm.loss_agg``)."""

    TOKEN_MEAN = "token-mean"
    SEQ_MEAN_TOKEN_MEAN = "seq-mean-token-mean"
    SEQ_MEAN_TOKEN_SUM = "seq-mean-token-sum"


def aggregate_loss(
    token_losses: torch.Tensor,
    response_mask: torch.Tensor,
    mode: LossAgg | str,
    *,
    norm_length: float | None = None,
) -> torch.Tensor:
    """Reduce per-token losses to a scalar; padding never contributes.

    - ``token-mean``: ``sum_{i,t} m l / sum_{i,t} m``.
    - ``seq-mean-token-mean``: ``mean_i (sum_t m l / sum_t m)`` over responses with at least one token.
    - ``seq-mean-token-sum``: ``mean_i (sum_t m l) / norm_length`` over responses with at least one token;
      Dr.GRPO sets ``norm_length`` to the generation budget (max response length), None means 1.

    Args:
        token_losses: ``(B, L)``.
        response_mask: ``(B, L)``.
        mode: a :class:`LossAgg` or its config name.
        norm_length: only for ``seq-mean-token-sum``.

    Returns:
        a 0-d tensor.
    """
    mode = LossAgg(mode)
    if norm_length is not None and mode is not LossAgg.SEQ_MEAN_TOKEN_SUM:
        raise ValueError(f"norm_length applies to loss_agg=seq-mean-token-sum only, not {mode.value}")
    if mode is LossAgg.TOKEN_MEAN:
        return masked_mean(token_losses, response_mask)
    has_tokens = response_mask.sum(dim=-1) > 0
    if mode is LossAgg.SEQ_MEAN_TOKEN_MEAN:
        per_seq = masked_mean(token_losses, response_mask, dim=-1)
    else:
        per_seq = masked_sum(token_losses, response_mask, dim=-1) / (norm_length or 1.0)
    return masked_mean(per_seq, has_tokens)
