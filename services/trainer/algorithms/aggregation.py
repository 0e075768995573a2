"""How per-token losses ``(B, L)`` become the scalar that is differentiated.

The choice changes which tokens weigh more: token-mean weighs every token alike (DAPO), so long responses
count more; seq-mean-token-mean weighs every response alike (the GRPO paper), so tokens of short responses
count more; seq-mean-token-sum divides by a constant instead of a length (Dr.GRPO), removing the length
bias of both.

A mini-batch is usually split into micro-batches (gradient accumulation) and over data-parallel ranks.
Normalising each call by the tokens it sees would weigh every micro-batch alike, not every token; with a
``global_normaliser`` (the count over the whole mini-batch, :func:`local_normaliser` gives each call's
share) the per-call values sum to the full mini-batch's loss.
"""

from __future__ import annotations

import math
from enum import StrEnum

import torch

from services.trainer.algorithms.masked import masked_mean, masked_sum


class LossAgg(StrEnum):
    """Config names of the loss aggregation modes (``algorithm.loss_agg``)."""

    TOKEN_MEAN = "token-mean"
    SEQ_MEAN_TOKEN_MEAN = "seq-mean-token-mean"
    SEQ_MEAN_TOKEN_SUM = "seq-mean-token-sum"


def local_normaliser(response_mask: torch.Tensor, mode: LossAgg | str) -> torch.Tensor:
    """What this batch adds to a mini-batch's ``global_normaliser``: its valid tokens for ``token-mean``, its
    responses with at least one token for the ``seq-mean-*`` modes.

    Args:
        response_mask: ``(B, L)``.
        mode: a :class:`LossAgg` or its config name.

    Returns:
        a 0-d int64 tensor on the mask's device (exact, ready for ``all_reduce``).
    """
    valid = response_mask.bool()
    if LossAgg(mode) is LossAgg.TOKEN_MEAN:
        return valid.sum()
    return valid.any(dim=-1).sum()


def aggregate_loss(
    token_losses: torch.Tensor,
    response_mask: torch.Tensor,
    mode: LossAgg | str,
    *,
    norm_length: float | None = None,
    global_normaliser: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Reduce per-token losses to a scalar; padding never contributes.

    - ``token-mean``: ``sum_{i,t} m l / N``, ``N`` = valid tokens.
    - ``seq-mean-token-mean``: ``sum_i (sum_t m l / sum_t m) / N``, ``N`` = responses with a token.
    - ``seq-mean-token-sum``: ``sum_i (sum_t m l) / norm_length / N``, ``N`` = responses with a token;
      Dr.GRPO sets ``norm_length`` to the generation budget (max response length), None means 1.

    ``N`` is this call's own count unless ``global_normaliser`` gives the count over the whole mini-batch
    (all micro-batches and ranks, each share from :func:`local_normaliser`); then the values returned for
    the micro-batches sum to the mini-batch's loss and accumulated gradients equal the full batch's.

    Args:
        token_losses: ``(B, L)``.
        response_mask: ``(B, L)``.
        mode: a :class:`LossAgg` or its config name.
        norm_length: only for ``seq-mean-token-sum``.
        global_normaliser: the mini-batch's total count ``N`` (tokens or responses, as above); a number or a
            0-d tensor (e.g. after ``all_reduce``). It cannot be below this call's own count.

    Returns:
        a 0-d tensor.
    """
    mode = LossAgg(mode)
    if norm_length is not None and mode is not LossAgg.SEQ_MEAN_TOKEN_SUM:
        raise ValueError(f"norm_length applies to loss_agg=seq-mean-token-sum only, not {mode.value}")
    if mode is LossAgg.TOKEN_MEAN:
        total = masked_sum(token_losses, response_mask)
    else:
        has_tokens = response_mask.bool().any(dim=-1)
        if mode is LossAgg.SEQ_MEAN_TOKEN_MEAN:
            per_seq = masked_mean(token_losses, response_mask, dim=-1)
        else:
            per_seq = masked_sum(token_losses, response_mask, dim=-1) / (norm_length or 1.0)
        total = masked_sum(per_seq, has_tokens)
    count = local_normaliser(response_mask, mode)
    if global_normaliser is None:
        return total / count.clamp(min=1).to(total.dtype)
    _check_global_normaliser(global_normaliser, int(count), mode)
    return total / global_normaliser


def _check_global_normaliser(global_normaliser: float | torch.Tensor, count: int, mode: LossAgg) -> None:
    # one host sync per call; a wrong count (responses for token-mean, a rank's own count) is otherwise a
    # silently mis-scaled gradient
    value = float(global_normaliser)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"global_normaliser={value} must be a finite number > 0 (loss_agg={mode.value})")
    if value < count:
        what = "valid tokens" if mode is LossAgg.TOKEN_MEAN else "responses with tokens"
        raise ValueError(
            f"global_normaliser={value} is below the {count} {what} of this call (loss_agg={mode.value}); "
            "pass the total over the whole mini-batch, all micro-batches and ranks (sum local_normaliser "
            "over them and all_reduce it)"
        )
