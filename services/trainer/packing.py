"""Padding-free micro-batches (``actor.padding_free``): a micro-batch's sequences are concatenated into
one row of real tokens, and attention never crosses from one sequence into another.

The padded layout (services/trainer/batch.py) costs every sequence the longest prompt plus the longest
response of its micro-batch; with video prompts that differ by thousands of tokens most of a padded
forward and backward is spent on padding. Packed, a micro-batch of sequences of lengths L_0 … L_{B-1}
is one row of T = ΣL_i tokens:

- ``position_ids`` (3, 1, T): each sequence's own M-RoPE ids (vLLM's rule for Qwen2/2.5-VL, the
  model's for Qwen3-VL/3.5), exactly those of the padded path, one after the other. (A 4-row form,
  text positions first, would make transformers build a T×T block mask from them: 4 GB at 64k
  tokens, which the boundaries below make unnecessary.)
- ``cu_seq_lens_q``/``_k`` (B+1,) the sequences' boundaries, which every attention layer receives: the
  registered attention :data:`ATTENTION` runs one causal attention per sequence (PyTorch's
  variable-length flash kernel on a GPU in half precision, else SDPA per sequence), and Qwen3.5's
  linear-attention layers run per sequence (:func:`segment_linear_attention`), whose CPU kernels
  would otherwise carry their recurrent state from one sequence into the next. A forward without
  boundaries (a padded batch) is transformers' SDPA attention with its usual mask.
- ``logits_to_keep`` (N,) the row positions whose logits score each real response token, in the
  padded (B, R) grid's row-major order (sequence b's token j before b's token j+1 before b+1's): the LM
  head scores no padding, and the scorer puts the N scores back into the (B, R) grid, so the losses
  are unchanged.

``actor.micro_batch_tokens`` then counts real tokens (:func:`pack_tokens`).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from services.trainer import ulysses
from services.trainer.batch import MicroBatch, TokenSequence, add_vision

ATTENTION = "reelrl_varlen"
# "flash" in the name: transformers' vision attention passes its windows in one call only then.
VISION_ATTENTION = "reelrl_flash_varlen_vision"
_BOUNDARIES = "cu_seq_lens_q"
EDGES = "packed_edges"  # the same boundaries as a tuple of ints, for the per-sequence paths


def pack_tokens(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Consecutive groups of indices whose total length stays within ``token_budget`` (real tokens, no
    padding); a sequence longer than the budget is a group alone.

    Example: lengths [3, 3, 5, 2], budget 8 → [[0, 1], [2, 3]] (3 + 3 = 6, + 5 > 8; 5 + 2 = 7);
    [10, 1], budget 4 → [[0], [1]].
    """
    from services.trainer.weight_buckets import pack

    return pack(lengths, token_budget)  # the weight buckets' rule: consecutive runs within a budget


def boundaries(lengths: Sequence[int]) -> torch.Tensor:
    """Cumulative sequence lengths (B+1,) int32, flash-attention's ``cu_seqlens``: [2, 3] → [0, 2, 5]."""
    out = [0]
    for n in lengths:
        out.append(out[-1] + int(n))
    return torch.tensor(out, dtype=torch.int32)


def keep_positions(prompt_lengths: Sequence[int], response_lengths: Sequence[int]) -> torch.Tensor:
    """(N,) positions of the packed row whose logits predict each response token, N = Σ R_b: the token
    predicting response token j of sequence b sits at start_b + P_b − 1 + j.

    Example: prompts [2, 3], responses [2, 1] (row: p p r r | p p p r), starts 0 and 4: [1, 2, 6].
    """
    out: list[int] = []
    start = 0
    for p, r in zip(prompt_lengths, response_lengths, strict=True):
        out.extend(start + p - 1 + j for j in range(r))
        start += p + r
    return torch.tensor(out, dtype=torch.long)


def collate_packed(
    sequences: Sequence[TokenSequence],
    indices: list[int],
    *,
    positions: Sequence[torch.Tensor],
    mm_token_types: Any,
) -> MicroBatch:
    """Collate ``sequences[i] for i in indices`` into one packed row (module docstring).

    ``positions[i]``: (3, L_i) M-RoPE ids of sequence i (every sequence needs them: a packed row has no
    attention mask from which the model could derive them). ``mm_token_types``: the processor's
    ``create_mm_token_type_ids``."""
    chosen = [sequences[i] for i in indices]
    ids: list[int] = []
    rope: list[torch.Tensor] = []
    for i, s in zip(indices, chosen, strict=True):
        row = s.prompt.input_ids + s.response_ids
        pos = positions[i]
        if pos is None or tuple(pos.shape) != (3, len(row)):
            got = None if pos is None else tuple(pos.shape)
            raise ValueError(f"sequence {i}: packing needs (3, {len(row)}) position ids, got {got}")
        ids.extend(row)
        rope.append(pos)
    lengths = [s.length for s in chosen]
    prompts = [len(s.prompt.input_ids) for s in chosen]
    responses = [len(s.response_ids) for s in chosen]
    width = max(max(responses), 1)
    cu = boundaries(lengths)
    inputs: dict[str, Any] = {
        "input_ids": torch.tensor([ids], dtype=torch.long),
        "position_ids": torch.cat(rope, dim=1).unsqueeze(1),
        "mm_token_type_ids": torch.tensor(mm_token_types([ids]), dtype=torch.long),
        "cu_seq_lens_q": cu,
        "cu_seq_lens_k": cu,
        "max_length_q": max(lengths),
        "max_length_k": max(lengths),
        EDGES: tuple(cu.tolist()),
    }
    repeats = add_vision(inputs, chosen)
    resp = [s.response_ids + [0] * (width - len(s.response_ids)) for s in chosen]
    mask = [[1.0] * n + [0.0] * (width - n) for n in responses]
    return MicroBatch(
        indices=list(indices),
        inputs=inputs,
        response_mask=torch.tensor(mask),
        response_ids=torch.tensor(resp, dtype=torch.long),
        logits_to_keep=keep_positions(prompts, responses),
        repeats=repeats,
        packed=True,
    )


def hf_positions(
    model: Any, input_ids: Sequence[int], vision: dict[str, torch.Tensor], types: Any
) -> torch.Tensor:
    """(3, L) M-RoPE ids of one sequence by the model's own rule (``get_rope_index``, as its padded
    forward derives them): for the families whose rule vLLM shares (Qwen3-VL, Qwen3.5)."""
    inner = model.model
    ids = torch.tensor([list(input_ids)], dtype=torch.long)
    pos, _ = inner.get_rope_index(
        ids,
        mm_token_type_ids=torch.tensor(types([list(input_ids)]), dtype=torch.long),
        image_grid_thw=vision.get("image_grid_thw"),
        video_grid_thw=vision.get("video_grid_thw"),
        attention_mask=None,
    )
    return pos[:, 0, :].to(torch.long)


# -- attention ---------------------------------------------------------------------------------------


def varlen_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention signature (query (1, H, T, D), key/value (1, H_kv, T, D) → (1, T, H, D)):
    causal attention within each sequence of ``cu_seq_lens_q``. Without boundaries (a padded batch) it
    is transformers' SDPA attention unchanged."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    cu = kwargs.get(_BOUNDARIES)
    if cu is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal,
            **kwargs,
        )  # fmt: skip
    if query.shape[0] != 1:
        raise ValueError(f"a packed batch is one row, got {query.shape[0]}: its boundaries would be misread")
    if kwargs.get("sliding_window") is not None:
        raise NotImplementedError("sliding-window attention over packed rows is not supported")

    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        gqa = q.shape[1] != k.shape[1]  # no mask: SDPA repeats no K/V for the heads
        if _flash_ready(q, dropout):
            return _varlen_kernel(q, k, v, kwargs, scaling, causal=True, gqa=gqa)
        # the edges as plain ints, made once on the host (``cu`` on a GPU would cost a sync per layer)
        edges = kwargs.get(EDGES) or cu.tolist()
        return _per_sequence_sdpa(q, k, v, edges, dropout, scaling, causal=True, gqa=gqa)

    group = kwargs.get(ulysses.KEY)
    if group is not None:  # this rank's slice of the row: the whole row for 1/u of the heads
        return ulysses.attend(query, key, value, group, run), None
    return run(query, key, value), None


def vision_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """The vision tower's attention over all of a layer's windows (Qwen2.5-VL) or clips (Qwen2-VL,
    Qwen3-VL, Qwen3.5) in one call: bidirectional within each span of ``cu_seq_lens_q``.

    transformers' vision attention hands the spans over in one call only to an implementation whose
    name says "flash" (:data:`VISION_ATTENTION` does); any other gets one call per window, 7,232 of
    them for one 3B clip's forward. On a GPU in half precision the spans go to PyTorch's
    variable-length flash kernel at once; elsewhere it runs SDPA per span, the very computation
    transformers' own SDPA path makes, so outputs are unchanged."""
    cu = kwargs.get(_BOUNDARIES)
    if cu is None or query.shape[0] != 1:
        raise ValueError("the vision tower's attention needs one row of spans and their cu_seq_lens_q")
    if _flash_ready(query, dropout):
        return _varlen_kernel(query, key, value, kwargs, scaling, causal=False, gqa=False), None
    return _per_sequence_sdpa(query, key, value, cu.tolist(), dropout, scaling, causal=False, gqa=False), None


def _per_sequence_sdpa(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, edges: Sequence[int], dropout: float,
    scaling: float | None, *, causal: bool, gqa: bool,
) -> torch.Tensor:  # fmt: skip
    """(1, H, T, D) inputs → (1, T, H, D): SDPA within each span [edges[i], edges[i+1])."""
    parts = [
        F.scaled_dot_product_attention(
            query[:, :, a:b],
            key[:, :, a:b],
            value[:, :, a:b],
            dropout_p=dropout,
            scale=scaling,
            is_causal=causal,
            enable_gqa=gqa,
        )
        for a, b in itertools.pairwise(edges)
    ]
    return torch.cat(parts, dim=2).transpose(1, 2).contiguous()


def _varlen_kernel(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, kwargs: dict[str, Any],
    scaling: float | None, *, causal: bool, gqa: bool,
) -> torch.Tensor:  # fmt: skip
    """(1, H, T, D) inputs → (1, T, H, D) through PyTorch's variable-length flash kernel, one call for
    every span (it has a backward; no flash-attn package is needed)."""
    from torch.nn.attention.varlen import varlen_attn

    cu_q = kwargs[_BOUNDARIES].to(device=query.device, dtype=torch.int32)
    cu_k = kwargs.get("cu_seq_lens_k")
    cu_k = cu_q if cu_k is None else cu_k.to(device=query.device, dtype=torch.int32)
    max_q, max_k = kwargs.get("max_length_q"), kwargs.get("max_length_k")
    if max_q is None or max_k is None:  # a sync, only where the caller did not say
        edges = kwargs.get(EDGES) or cu_q.tolist()
        longest = max(b - a for a, b in itertools.pairwise(edges))
        max_q, max_k = max_q or longest, max_k or longest
    out = varlen_attn(
        query[0].transpose(0, 1), key[0].transpose(0, 1), value[0].transpose(0, 1), cu_q, cu_k,
        int(max_q), int(max_k), scale=scaling, window_size=(-1, 0) if causal else (-1, -1), enable_gqa=gqa,
    )  # fmt: skip
    return out.unsqueeze(0)  # (T, H, D) → (1, T, H, D)


def _flash_ready(query: torch.Tensor, dropout: float = 0.0) -> bool:
    """PyTorch's variable-length flash kernel can take ``query``: a CUDA tensor in half precision on an
    Ampere or newer GPU, and no dropout (fp32 forwards, e.g. ``compute_dtype: float32``, and older GPUs
    such as V100 or T4 take the per-sequence path)."""
    if not query.is_cuda or query.dtype not in (torch.float16, torch.bfloat16) or dropout:
        return False
    return _flash_capable(
        query.device.index if query.device.index is not None else torch.cuda.current_device()
    )


@functools.cache
def _flash_capable(device_index: int) -> bool:
    return torch.cuda.get_device_capability(device_index) >= (8, 0)


def register_attention() -> None:
    """Make :data:`ATTENTION` a name transformers' models can use (idempotent), with SDPA's mask
    rule: a padded batch gets its padding mask, a packed row (no attention mask, causal) none."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(ATTENTION, varlen_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION, sdpa_mask)
    AttentionInterface.register(VISION_ATTENTION, vision_attention)


def enable_packing(model: Any) -> None:
    """Make ``model`` score packed rows (idempotent; a padded batch still runs as before): its language
    model's attention is :data:`ATTENTION`, its vision tower's :data:`VISION_ATTENTION` (every window
    of a layer in one call), and its linear-attention layers, if any, run per sequence
    (:func:`segment_linear_attention`)."""
    register_attention()
    config = model.config
    text = getattr(config, "text_config", None) or config
    text._attn_implementation = ATTENTION
    vision = getattr(config, "vision_config", None)
    if vision is not None:
        vision._attn_implementation = VISION_ATTENTION
    segment_linear_attention(model)


def segment_linear_attention(model: Any) -> None:
    """Qwen3.5's linear-attention (Gated DeltaNet) layers run once per sequence of a packed row: their
    CPU kernels ignore ``cu_seq_lens_q`` and would carry the recurrent state (and the causal
    convolution's window) from one packed sequence into the next. Installed for good, not around one
    forward: a backward that recomputes a checkpointed layer must split it the same way. A call
    without boundaries (a padded batch) runs the layer as it was."""
    for layer in model.modules():
        if not type(layer).__name__.endswith("GatedDeltaNet") or getattr(layer, _SEGMENTED, False):
            continue
        layer.forward = _per_sequence(layer.forward)
        setattr(layer, _SEGMENTED, True)


_SEGMENTED = "_reelrl_per_sequence"


def _per_sequence(original: Any) -> Any:
    def forward(hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        cu = kwargs.pop(_BOUNDARIES, None)
        edges = kwargs.pop(EDGES, None)
        if cu is None:
            return original(hidden_states, *args, **kwargs)
        kwargs.pop("cu_seq_lens_k", None)
        edges = edges or cu.tolist()
        parts = [original(hidden_states[:, a:b], *args, **kwargs) for a, b in itertools.pairwise(edges)]
        return torch.cat(parts, dim=1)

    return forward
