"""Ulysses sequence parallelism (``actor.ulysses_size``): the ``u`` consecutive ranks of a sequence-
parallel group score the same packed micro-batch, each holding 1/u of its tokens through the language
model; around every attention an all-to-all swaps the sequence for the heads (DeepSpeed-Ulysses, as
verl does for Qwen2.5-VL), so attention sees the whole row for 1/u of the heads.

How a packed row of T tokens runs on rank ``r`` of a group of ``u``:

- The embeddings and the vision tower run on the whole row, on every rank of the group (below, why).
  The language model's pre-hook (:func:`split_sequence`) pads the row to ``T_pad`` = T rounded up to a
  multiple of u and keeps rank r's slice [r·T_pad/u, (r+1)·T_pad/u) of the embeddings, the M-RoPE
  positions and (Qwen3-VL) the deepstack features of the visual tokens inside it. The padding is a
  span of its own in the attention boundaries, so no real token attends to it and its outputs are
  finite (a NaN in a pad row would reach the weight gradients through 0 × NaN).
- Each attention (:func:`attend`) turns its (T_pad/u tokens, H heads) into (T_pad tokens, H/u heads),
  runs the variable-length attention over the whole row's boundaries, and turns the result back.
  Fewer KV heads than ranks are repeated so each rank has one (verl's rule); H must be divisible by u.
- The LM head scores only the response tokens whose predicting position lies in rank r's slice
  (:meth:`SequenceParallel.local_rows`); the group then all-gathers the scores (:func:`gather_rows`), so
  every rank computes the same loss from the whole micro-batch.

Gradients. Every copy of the loss is identical; the backward of the gather hands each rank the
gradient of its own scores only, and the all-to-alls route the attention's gradients back to the
ranks whose tokens they came from. So the parameter gradients of the u ranks sum to the gradient of one
copy of the loss, and FSDP's average over all ``world`` ranks, with each rank's loss multiplied by
``world`` and normalised by the global count of tokens counted once per group
(:func:`data_parallel_sum`), is the data-parallel mean.

Why the vision tower is not split: its attention windows (Qwen2.5-VL) and clips (Qwen2-VL, Qwen3-VL)
do not fall on the slice boundaries, and its output is merged into the row before the split; running it
whole on every rank is exact with no exchange inside the tower, and its parameters' gradients still sum
to one copy's (each rank's backward reaches the tower through its own slice of the row only). Its
cost is the tower's forward and backward u times over, against the language model's which is split;
its activations are not split (docs/training.md, "Memory and speed at scale").

Qwen3.5's linear-attention layers carry a recurrent state along the sequence and cannot be split by
heads this way; a model with them is refused (:func:`check_model`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

KEY = "ulysses"  # the attention's keyword argument naming the group (travels with cu_seq_lens_q)


@dataclasses.dataclass(frozen=True)
class SequenceParallel:
    """This rank's sequence-parallel group: ``size`` consecutive ranks, this one ``rank`` among them."""

    group: Any
    size: int
    rank: int

    def padded(self, length: int) -> int:
        """``length`` rounded up to a multiple of the group's size: 10 tokens on 4 ranks → 12."""
        return -(-length // self.size) * self.size

    def span(self, length: int, rank: int | None = None) -> tuple[int, int]:
        """[start, stop) of ``rank``'s (default: this rank's) slice of a row of ``length`` tokens, in
        the padded row: 10 tokens on 4 ranks → slices of 3: rank 1 holds [3, 6), rank 3 [9, 12)."""
        part = self.padded(length) // self.size
        r = self.rank if rank is None else rank
        return r * part, (r + 1) * part

    def local_rows(self, positions: torch.Tensor, length: int) -> tuple[torch.Tensor, list[int]]:
        """Of the ascending row ``positions`` (the scored ones), a mask of those in this rank's slice,
        and how many fall in each rank's slice (the gather's counts).

        Example: positions [1, 2, 6, 9], 10 tokens, 2 ranks (slices [0, 5), [5, 10)): rank 0 keeps
        [True, True, False, False], counts [2, 2]."""
        start, stop = self.span(length)
        mine = (positions >= start) & (positions < stop)
        edges = torch.tensor([self.span(length, r)[1] for r in range(self.size)], dtype=positions.dtype)
        ends = torch.searchsorted(positions.cpu(), edges, right=False).tolist()
        counts = [b - a for a, b in zip([0, *ends[:-1]], ends, strict=True)]
        return mine, counts


def check_model(model: Any, size: int) -> None:
    """Refuse, at load, a model the split cannot run: query heads not divisible by ``size``, KV heads
    neither a multiple nor a divisor of it, or linear-attention layers (Qwen3.5)."""
    config = model.config
    text = getattr(config, "text_config", None) or config
    heads, kv = (
        text.num_attention_heads,
        getattr(text, "num_key_value_heads", None) or text.num_attention_heads,
    )
    if heads % size:
        raise ValueError(
            f"actor.ulysses_size={size}: the language model's {heads} attention heads do not divide among "
            f"{size} ranks; pick a ulysses_size that divides {heads}"
        )
    if kv % size and size % kv:
        raise ValueError(
            f"actor.ulysses_size={size}: the language model's {kv} KV heads are neither a multiple nor a "
            f"divisor of {size}; pick a ulysses_size that {kv} divides or that divides {kv}"
        )
    linear = [type(m).__name__ for m in model.modules() if type(m).__name__.endswith("GatedDeltaNet")]
    if linear:
        raise ValueError(
            f"actor.ulysses_size={size}: {type(model).__name__} has linear-attention layers ({linear[0]}), "
            "whose recurrent state runs along the sequence and cannot be split by heads; use "
            "actor.ulysses_size: 1 (with padding_free and more ranks for data parallelism)"
        )


def data_parallel(rank: int, world: int, size: int) -> tuple[int, int]:
    """(data-parallel rank, data-parallel size): the groups of ``size`` consecutive ranks share their
    sequences, so rank 5 of 8 with groups of 2 is in data-parallel slot 2 of 4."""
    return rank // size, world // size


def new_group(size: int) -> SequenceParallel | None:
    """This rank's group of ``size`` consecutive ranks (every rank must call, in the same order: each
    group is created collectively), or None for ``size`` 1. Consecutive ranks, so a group stays on
    one node, where the all-to-alls are cheap."""
    if size == 1:
        return None
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = None
    for first in range(0, world, size):
        ranks = list(range(first, first + size))
        group = dist.new_group(ranks)
        if rank in ranks:
            mine = SequenceParallel(group=group, size=size, rank=ranks.index(rank))
    return mine


# -- the exchanges ------------------------------------------------------------------------------------


class _AllToAll(torch.autograd.Function):
    """(u, ...) chunks: chunk j goes to rank j, and chunk j of the result came from rank j. Its own
    adjoint: the gradient goes back by the same exchange."""

    @staticmethod
    def forward(ctx: Any, chunks: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        return _exchange(chunks, group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return _exchange(grad, ctx.group), None


def _exchange(chunks: torch.Tensor, group: Any) -> torch.Tensor:
    chunks = chunks.contiguous()
    out = torch.empty_like(chunks)
    dist.all_to_all_single(out, chunks, group=group)
    return out


def seq_to_heads(x: torch.Tensor, sp: SequenceParallel) -> torch.Tensor:
    """(T/u tokens, H, D) on each rank → (T, H/u, D): the whole row for this rank's heads
    [rank·H/u, (rank+1)·H/u)."""
    tokens, heads, dim = x.shape
    part = heads // sp.size
    chunks = x.reshape(tokens, sp.size, part, dim).transpose(0, 1)  # chunk j: head group j
    return _AllToAll.apply(chunks, sp.group).reshape(sp.size * tokens, part, dim)


def heads_to_seq(x: torch.Tensor, sp: SequenceParallel) -> torch.Tensor:
    """The inverse of :func:`seq_to_heads`: (T, H/u, D) → (T/u, H, D)."""
    tokens, part, dim = x.shape
    chunks = x.reshape(sp.size, tokens // sp.size, part, dim)  # chunk j: rank j's tokens
    back = _AllToAll.apply(chunks, sp.group)  # chunk j: my tokens, head group j
    return back.transpose(0, 1).reshape(tokens // sp.size, sp.size * part, dim)


def attend(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, sp: SequenceParallel, run: Any
) -> torch.Tensor:
    """Attention over the whole row for 1/u of the heads. ``query`` (1, H, T/u, D), ``key``/``value``
    (1, H_kv, T/u, D) in transformers' layout; ``run(q, k, v)`` attends (1, h, T, D) inputs over the
    whole row and returns (1, T, h, D). Returns (1, T/u, H, D)."""
    kv = key.shape[1]
    if kv % sp.size:  # fewer KV heads than ranks: each rank gets a copy of its query heads' one
        key = key.repeat_interleave(sp.size // kv, dim=1)
        value = value.repeat_interleave(sp.size // kv, dim=1)
    q, k, v = (
        seq_to_heads(t[0].transpose(0, 1), sp).transpose(0, 1).unsqueeze(0) for t in (query, key, value)
    )
    out = run(q, k, v)  # (1, T, h, D)
    return heads_to_seq(out[0], sp).unsqueeze(0)


class _GatherRows(torch.autograd.Function):
    """Each rank's rows (``counts[r]`` of them), concatenated in rank order on every rank; the backward
    hands each rank the gradient of its own rows (every rank computes the same loss from the whole)."""

    @staticmethod
    def forward(ctx: Any, rows: torch.Tensor, counts: list[int], sp: SequenceParallel) -> torch.Tensor:
        ctx.start = sum(counts[: sp.rank])
        ctx.count = counts[sp.rank]
        widest = max(counts)
        padded = rows.new_zeros((widest, *rows.shape[1:]))
        padded[: rows.shape[0]] = rows
        parts = [torch.empty_like(padded) for _ in range(sp.size)]
        dist.all_gather(parts, padded.contiguous(), group=sp.group)
        return torch.cat([p[:n] for p, n in zip(parts, counts, strict=True)])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return grad[ctx.start : ctx.start + ctx.count].contiguous(), None, None


def gather_rows(rows: torch.Tensor, counts: Sequence[int], sp: SequenceParallel) -> torch.Tensor:
    """(counts[rank], ...) on each rank → (Σ counts, ...) on every rank, in rank order."""
    if rows.shape[0] != counts[sp.rank]:
        raise ValueError(f"rank {sp.rank} holds {rows.shape[0]} rows, its count says {counts[sp.rank]}")
    return _GatherRows.apply(rows, list(counts), sp)


# -- the language model's slice --------------------------------------------------------------------


@contextmanager
def split_sequence(model: Any, sp: SequenceParallel, length: int) -> Iterator[None]:
    """For one forward of a packed row of ``length`` tokens: the language model receives this rank's
    slice of the (padded) row, and its attention layers the group (module docstring). The model's own
    forward builds the embeddings, runs the vision tower and merges it, all on the whole row, first."""
    language = model.model.language_model
    start, stop = sp.span(length)
    extra = sp.padded(length) - length

    def pre_hook(module: Any, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
        kwargs = dict(kwargs)
        embeds = kwargs.get("inputs_embeds")
        if embeds is None or embeds.shape[:2] != (1, length):
            raise ValueError(f"sequence parallelism expects one packed row of {length} embeddings")
        kwargs["inputs_embeds"] = F.pad(embeds, (0, 0, 0, extra))[:, start:stop]
        positions = kwargs.get("position_ids")
        if positions is None:
            raise ValueError("sequence parallelism needs the row's position ids")
        kwargs["position_ids"] = F.pad(positions, (0, extra))[..., start:stop]
        _extend_boundaries(kwargs, length, extra)
        _slice_deepstack(kwargs, length, extra, start, stop)
        kwargs[KEY] = sp
        return args, kwargs

    handle = language.register_forward_pre_hook(pre_hook, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


def _extend_boundaries(kwargs: dict[str, Any], length: int, extra: int) -> None:
    """The padding becomes a span of its own: attended within itself, never by a real token."""
    if not extra:
        return
    from services.trainer.packing import EDGES

    for name in ("cu_seq_lens_q", "cu_seq_lens_k"):
        cu = kwargs.get(name)
        if cu is not None:
            kwargs[name] = torch.cat([cu, cu.new_tensor([length + extra])])
    for name in ("max_length_q", "max_length_k"):
        if kwargs.get(name) is not None:
            kwargs[name] = max(int(kwargs[name]), extra)
    if kwargs.get(EDGES) is not None:
        kwargs[EDGES] = (*kwargs[EDGES], length + extra)


def _slice_deepstack(kwargs: dict[str, Any], length: int, extra: int, start: int, stop: int) -> None:
    """Qwen3-VL adds the tower's intermediate features to the visual tokens' hidden states in its first
    layers: this rank keeps the mask of its slice and the features of the visual tokens inside it."""
    mask = kwargs.get("visual_pos_masks")
    if mask is None:
        return
    padded = F.pad(mask, (0, extra), value=False)
    before = int(padded[:, :start].sum())
    inside = int(padded[:, start:stop].sum())
    kwargs["visual_pos_masks"] = padded[:, start:stop]
    features = kwargs.get("deepstack_visual_embeds")
    if features is not None:
        kwargs["deepstack_visual_embeds"] = [f[before : before + inside] for f in features]
