"""Log-probs (and entropy) of the sampled tokens straight from the last hidden states, ``chunk_tokens``
rows at a time: the fp32 ``[tokens, vocab]`` logits are never held whole, in the forward or the backward.

At 16,384 response tokens and Qwen's 152,064-token vocabulary the full fp32 logits are
16,384 × 152,064 × 4 B ≈ 10 GB, and the log-softmax and its backward hold as much again; in chunks of
1,024 tokens one chunk's logits are 1,024 × 152,064 × 4 B ≈ 0.62 GB (docs/training.md, "Memory of the
log-probs"). The backward recomputes each chunk's logits from the saved hidden states and head weight
(one more head matmul per chunk) instead of keeping them.

:func:`chunked_log_probs` is the maths; :func:`scoring_head` puts it in place of an HF model's LM head
for one forward, so the model's own forward (and under FSDP2 its root unit's all-gather of the head)
runs unchanged and hands back scores instead of logits.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch


def chunked_log_probs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    temperature: float = 1.0,
    chunk_tokens: int,
    entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of each target token and, if asked, the entropy of each row's distribution, where row
    ``i``'s logits are ``z_i = (hidden[i] @ weight.T + bias) / temperature``, computed ``chunk_tokens``
    rows at a time.

    The head matmul runs in the inputs' dtype (bf16 logits are cast per chunk, as ``logits.float()``
    did on the full tensor); the softmax, the log-probs, the entropy and the gradient of the logits are
    fp32. Gradients flow to ``hidden``, ``weight`` and ``bias`` from both outputs; the backward
    recomputes each chunk's logits (one more head matmul per chunk than the full computation). The
    head's gradient is summed over chunks in fp32 and returned in the weight's dtype: for a bf16 head
    that is one fp32 ``(V, H)`` buffer plus each chunk's bf16 ``(V, H)`` product (at 152,064 × 3,584:
    2.2 GB and 1.1 GB, where the full logits of 16,384 tokens are 10 GB).

    Args:
        hidden: ``(N, H)``, the final hidden states of the scored positions.
        weight: ``(V, H)``, the LM head, in ``hidden``'s dtype.
        targets: ``(N,)`` long, the token each row scores.
        bias: ``(V,)`` or None.
        temperature: logits are divided by it (the sampling temperature).
        chunk_tokens: rows per chunk; no more than ``chunk_tokens × V`` fp32 logits exist at once.
        entropy: also return the entropy.

    Returns:
        ``(N,)`` fp32 log-probs and ``(N,)`` fp32 entropies in nats (None unless ``entropy``); fp64
        for fp64 inputs.
    """
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(
            f"hidden {tuple(hidden.shape)} and weight {tuple(weight.shape)} are not (N, H), (V, H)"
        )
    if targets.shape != hidden.shape[:1]:
        raise ValueError(f"targets {tuple(targets.shape)} for {hidden.shape[0]} rows of hidden states")
    if hidden.dtype != weight.dtype or (bias is not None and bias.dtype != weight.dtype):
        raise ValueError(
            f"hidden {hidden.dtype}, weight {weight.dtype}, bias {None if bias is None else bias.dtype}: "
            "cast them to one dtype (the head's compute dtype) first"
        )
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens={chunk_tokens}: must be at least 1")
    if temperature <= 0:
        raise ValueError(f"temperature={temperature}: must be positive")
    logp, ent = _ChunkedHead.apply(
        hidden, weight, bias, targets, float(temperature), int(chunk_tokens), entropy
    )
    return logp, (ent if entropy else None)


def _logits(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, temperature: float
) -> torch.Tensor:
    """``(c, H)`` rows → their logits ``(c, V)`` in fp32 (fp64 for fp64 inputs) divided by ``temperature``."""
    z = hidden @ weight.T
    if bias is not None:
        z = z + bias
    z = z.to(_softmax_dtype(z.dtype))
    if temperature != 1.0:
        z = z.div_(temperature)
    return z


def _softmax_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp32 for the half types (and fp32); fp64 stays fp64 (the tests' gradient checks)."""
    return torch.promote_types(dtype, torch.float32)


class _ChunkedHead(torch.autograd.Function):
    """Forward: per chunk, logits → logsumexp, target logit, entropy; keeps only ``(N,)`` vectors.
    Backward: per chunk, the logits again, then (``z`` the scaled logits, ``p`` their softmax, ``t``
    the target, ``H`` the entropy) ``d logp_t / d z = onehot(t) - p`` and ``d H / d z = -p (log p + H)``,
    each times its output's gradient, divided by the temperature, through the head matmul. The entropy's
    term is taken as ``-p (z - E_p[z])`` (``E_p[z]`` kept from the forward): ``log p + H`` would subtract
    two values of the logits' size and lose digits to the cancellation."""

    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        targets: torch.Tensor,
        temperature: float,
        chunk_tokens: int,
        with_entropy: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n = hidden.shape[0]
        logp = torch.empty(n, dtype=_softmax_dtype(weight.dtype), device=hidden.device)
        # per row, the largest logit and sum_v exp(z_v - max): the backward's softmax is exp(z - max) / sum
        # (exp(z - logsumexp) would lose digits where the logsumexp is large)
        top, total = torch.empty_like(logp), torch.empty_like(logp)
        ent = torch.empty_like(logp) if with_entropy else logp.new_empty(0)
        mean_z = torch.empty_like(ent)  # E_p[z] per row, for the entropy's gradient
        with torch.autocast(hidden.device.type, enabled=False):
            for start in range(0, n, chunk_tokens):
                rows = slice(start, start + chunk_tokens)
                z = _logits(hidden[rows], weight, bias, temperature)
                top_c = z.amax(dim=-1, keepdim=True)
                e = torch.sub(z, top_c).exp_()  # the one other (c, V) buffer
                total_c = e.sum(dim=-1, keepdim=True)
                lse_c = (total_c.log() + top_c).squeeze(-1)
                top[rows], total[rows] = top_c.squeeze(-1), total_c.squeeze(-1)
                logp[rows] = z.gather(-1, targets[rows].unsqueeze(-1)).squeeze(-1) - lse_c
                if with_entropy:  # H = lse - sum_v p_v z_v
                    mean_z[rows] = e.div_(total_c).mul_(z).sum(dim=-1)
                    ent[rows] = lse_c - mean_z[rows]
                del z, e
        ctx.save_for_backward(hidden, weight, bias, targets, top, total, mean_z)
        ctx.temperature, ctx.chunk_tokens, ctx.with_entropy = temperature, chunk_tokens, with_entropy
        # an output the loss does not use (the entropy, logged but not in the loss at entropy_coef 0)
        # gets None, not zeros: its backward term (another (c, V) buffer a chunk) is then skipped
        ctx.set_materialize_grads(False)
        if not with_entropy:
            ctx.mark_non_differentiable(ent)
        return logp, ent

    @staticmethod
    def backward(ctx: Any, grad_logp: torch.Tensor, grad_ent: torch.Tensor | None) -> tuple:
        hidden, weight, bias, targets, top, total, mean_z = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        temperature, chunk = ctx.temperature, ctx.chunk_tokens
        with_entropy = ctx.with_entropy and grad_ent is not None
        if grad_logp is None and not with_entropy:
            return None, None, None, None, None, None, None
        if grad_logp is None:  # only the entropy reaches the loss
            grad_logp = torch.zeros_like(top)
        grad_h = torch.zeros_like(hidden) if need_h else None
        acc = _softmax_dtype(weight.dtype)
        grad_w = torch.zeros(weight.shape, dtype=acc, device=weight.device) if need_w else None
        grad_b = torch.zeros(weight.shape[0], dtype=acc, device=weight.device) if need_b else None
        with torch.autocast(hidden.device.type, enabled=False):
            for start in range(0, hidden.shape[0], chunk):
                rows = slice(start, start + chunk)
                h = hidden[rows]
                g_lp = grad_logp[rows].to(acc).unsqueeze(-1)  # (c, 1)
                # the chunk's scaled logits, then their gradient, in one (c, V) buffer
                g = _logits(h, weight, bias, temperature)
                top_c, total_c = top[rows].unsqueeze(-1), total[rows].unsqueeze(-1)
                if with_entropy:  # -g_H p (z - E_p[z]) - g_lp p  (-p (z - E_p[z]) = -p (log p + H))
                    p = torch.sub(g, top_c).exp_().div_(total_c)
                    g_h = grad_ent[rows].to(acc).unsqueeze(-1)
                    g.sub_(mean_z[rows].unsqueeze(-1)).mul_(p).mul_(-g_h).sub_(p.mul_(g_lp))
                    del p
                else:  # -g_lp p
                    g.sub_(top_c).exp_().mul_(-g_lp / total_c)
                g.scatter_add_(-1, targets[rows].unsqueeze(-1), g_lp)  # + g_lp onehot(t)
                if temperature != 1.0:
                    g.div_(temperature)
                if need_b:
                    grad_b += g.sum(dim=0)
                g = g.to(weight.dtype)  # the head's dtype for its matmuls (a no-op in fp32)
                if need_h:
                    grad_h[rows] = g @ weight
                if need_w:
                    if grad_w.dtype == g.dtype:
                        grad_w.addmm_(g.T, h)
                    else:  # a (V, H) product in the head's dtype, summed in fp32
                        grad_w += g.T @ h
                del g  # before the next chunk's logits exist
        if grad_w is not None:
            grad_w = grad_w.to(weight.dtype)
        if grad_b is not None:
            grad_b = grad_b.to(bias.dtype)
        return grad_h, grad_w, grad_b, None, None, None, None


@contextmanager
def scoring_head(
    model: Any,
    targets: torch.Tensor,
    mask: torch.Tensor,
    *,
    temperature: float,
    chunk_tokens: int,
    entropy: bool,
) -> Iterator[None]:
    """Inside, ``model``'s LM head (``get_output_embeddings()``) returns scores instead of logits:
    called on the hidden states of the scored positions, ``(B, R, H)`` (or any shape ``(..., H)`` of
    ``B·R`` positions in ``targets``' row-major order, e.g. a packed row's ``(1, B·R, H)``), it returns
    ``(..., 2)`` fp32, ``[..., 0]`` the log-prob of ``targets`` and ``[..., 1]`` the entropy (0 when
    not asked), both 0 where ``mask`` is 0 (padding rows are not computed). The head module and its hooks stay in place
    (only its ``forward`` is replaced), so FSDP2 still gathers its weight for the model's forward and
    reduces its gradient, tied to the embeddings or not. Under autocast the head matmul runs in the
    autocast dtype, as ``nn.Linear`` would.

    Args:
        targets: ``(B, R)`` long, the sampled tokens (any value on padding).
        mask: ``(B, R)``, nonzero where a token is scored.
    """
    head = model.get_output_embeddings()
    if head is None or not isinstance(getattr(head, "weight", None), torch.Tensor):
        raise ValueError(f"{type(model).__name__} has no output embedding with a weight to score through")

    def forward(hidden: torch.Tensor) -> torch.Tensor:
        if hidden.shape[:-1].numel() != targets.numel():
            raise RuntimeError(
                f"the LM head was called on {tuple(hidden.shape)}, not on the {tuple(targets.shape)} scored "
                "positions (logits_to_keep): transformers changed how it calls its head"
            )
        weight, bias = head.weight, getattr(head, "bias", None)
        if torch.is_autocast_enabled(hidden.device.type):
            dtype = torch.get_autocast_dtype(hidden.device.type)
        else:
            dtype = weight.dtype
        rows = mask.reshape(-1).nonzero().squeeze(-1)
        flat = hidden.reshape(-1, hidden.shape[-1]).index_select(0, rows)
        logp, ent = chunked_log_probs(
            flat.to(dtype),
            weight.to(dtype),
            targets.reshape(-1).index_select(0, rows),
            bias=None if bias is None else bias.to(dtype),
            temperature=temperature,
            chunk_tokens=chunk_tokens,
            entropy=entropy,
        )
        scores = torch.stack([logp, ent if ent is not None else torch.zeros_like(logp)], dim=-1)
        out = scores.new_zeros(targets.numel(), 2).index_copy(0, rows, scores)
        return out.view(*hidden.shape[:-1], 2)

    own = head.__dict__.get("forward")  # an instance-level forward someone set before (kept)
    head.forward = forward
    try:
        yield
    finally:
        if own is None:
            del head.forward
        else:
            head.forward = own
