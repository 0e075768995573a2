"""From response groups to padded model inputs: one sequence per response, packed into micro-batches
by a token budget, collated so the actor's forward scores exactly the tokens the rollout sampled.

Layout of a micro-batch: prompts LEFT-padded to the longest prompt ``P``, responses RIGHT-padded to the
longest response ``R``: every response starts at column ``P``, so the logits of columns
``P-1 … P+R-2`` (``logits_to_keep``) score all responses at once and no prompt logit is computed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

# Per-item vision tensors of the HF processor. Grids and per-video values are concatenated over a
# micro-batch in sequence order; pixel rows once per distinct prompt (``MicroBatch.repeats``).
_VISION_ROWS = ("pixel_values", "pixel_values_videos")
_VISION_GRIDS = ("image_grid_thw", "video_grid_thw")
_PER_VIDEO = ("second_per_grid_ts",)


@dataclass
class PromptInputs:
    """What the HF processor made of one sample's prompt (shared by its n responses)."""

    sample_id: str
    input_ids: list[int]
    vision: dict[str, torch.Tensor] = field(default_factory=dict)

    @classmethod
    def from_processor(cls, sample_id: str, inputs: Mapping[str, Any]) -> PromptInputs:
        vision = {
            k: v
            for k, v in inputs.items()
            if k in (*_VISION_ROWS, *_VISION_GRIDS, *_PER_VIDEO) and isinstance(v, torch.Tensor)
        }
        return cls(sample_id=sample_id, input_ids=inputs["input_ids"][0].tolist(), vision=vision)


@dataclass
class TokenSequence:
    """One response to one prompt, with what the loss needs per token (all lists of length R)."""

    prompt: PromptInputs
    response_ids: list[int]
    offline: bool = False
    rollout_logprobs: list[float] | None = None

    @property
    def length(self) -> int:
        return len(self.prompt.input_ids) + len(self.response_ids)


@dataclass
class MicroBatch:
    """Indices into the step's sequences and the collated tensors of their forward."""

    indices: list[int]
    inputs: dict[str, Any]  # input_ids, attention_mask, (position_ids), vision tensors, mm_token_type_ids
    response_mask: torch.Tensor  # (B, R) float
    response_ids: torch.Tensor  # (B, R) long, 0 on padding
    logits_to_keep: torch.Tensor  # (R,) columns whose logits score the responses
    # A repeat whose loss is multiplied by 0: ranks of an FSDP group must run equally many forwards.
    dummy: bool = False
    # Per grid name ("video_grid_thw", "image_grid_thw"), where items repeat: for each item of the
    # grid (every sequence's, in order), the index of its rows among the distinct items, whose pixel
    # rows alone were collated (the n responses of a prompt share its clip: the vision tower encodes
    # it once; services/trainer/shared_vision.py hands each sequence its features)
    repeats: dict[str, list[int]] = field(default_factory=dict)
    # Padding-free (services/trainer/packing.py): the sequences are one row of real tokens, and
    # ``logits_to_keep`` holds B·R positions of that row (response slot j of sequence b at b·R + j)
    packed: bool = False
    # The response tokens the loss counts when fewer than all of them (rollout correction's MIS drops
    # some); None: all. The forward always scores every response token (``response_mask``): a packed
    # row's scored positions are fixed by it.
    loss_mask: torch.Tensor | None = None

    @property
    def counted_mask(self) -> torch.Tensor:
        """(B, R) the tokens the loss and its normaliser count."""
        return self.response_mask if self.loss_mask is None else self.loss_mask


def pack(shapes: Sequence[tuple[int, int]], token_budget: int) -> list[list[int]]:
    """Consecutive groups of indices whose collated size stays within the budget. ``shapes[i]`` is
    (prompt length, response length); a group collates to count × (longest prompt + longest
    response), the layout :func:`collate` builds. A sequence larger than the budget is a group alone.

    Example: shapes [(3, 0), (3, 0), (5, 0), (2, 0)], budget 9 → [[0, 1], [2], [3]] (3 × 5 = 15 and
    2 × 5 = 10 exceed 9); [(100, 10), (10, 100)], budget 230 → [[0], [1]] (2 × (100 + 100) = 400).
    """
    groups: list[list[int]] = []
    current: list[int] = []
    prompt = response = 0
    for i, (p, r) in enumerate(shapes):
        wide_p, wide_r = max(prompt, p), max(response, r)
        if current and (wide_p + wide_r) * (len(current) + 1) > token_budget:
            groups.append(current)
            current, wide_p, wide_r = [], p, r
        current.append(i)
        prompt, response = wide_p, wide_r
    if current:
        groups.append(current)
    return groups


def collate(
    sequences: Sequence[TokenSequence],
    indices: list[int],
    *,
    pad_id: int,
    positions: Sequence[torch.Tensor | None],
    mm_token_types: Any,
) -> MicroBatch:
    """Collate ``sequences[i] for i in indices`` (see the module docstring for the layout).

    ``positions[i]``: (3, L_i) M-RoPE ids of sequence i by vLLM's rule, or None where the model's own
    rule applies (then the model derives them from the attention mask). ``mm_token_types``: the
    processor's ``create_mm_token_type_ids`` (a list of id lists → list of type lists).
    """
    chosen = [sequences[i] for i in indices]
    p_len = max(len(s.prompt.input_ids) for s in chosen)
    r_len = max(max(len(s.response_ids) for s in chosen), 1)
    rows, masks, resp, resp_mask, pos_rows = [], [], [], [], []
    for i, s in zip(indices, chosen, strict=True):
        prompt, response = s.prompt.input_ids, s.response_ids
        left, right = p_len - len(prompt), r_len - len(response)
        rows.append([pad_id] * left + prompt + response + [pad_id] * right)
        masks.append([0] * left + [1] * (len(prompt) + len(response)) + [0] * right)
        resp.append(response + [0] * right)
        resp_mask.append([1.0] * len(response) + [0.0] * right)
        if positions[i] is not None:
            pos = positions[i]
            pos_rows.append(
                torch.cat(
                    [
                        torch.zeros(3, left, dtype=pos.dtype),
                        pos,
                        torch.zeros(3, right, dtype=pos.dtype),
                    ],
                    dim=1,
                )
            )
    input_ids = torch.tensor(rows, dtype=torch.long)
    inputs: dict[str, Any] = {
        "input_ids": input_ids,
        "attention_mask": torch.tensor(masks, dtype=torch.long),
        "mm_token_type_ids": torch.tensor(mm_token_types(rows), dtype=torch.long),
    }
    if pos_rows:
        if len(pos_rows) != len(chosen):
            raise ValueError("position ids must be given for every sequence of a micro-batch or for none")
        inputs["position_ids"] = torch.stack(pos_rows, dim=1)  # (3, B, L)
    repeats = add_vision(inputs, chosen)
    return MicroBatch(
        indices=list(indices),
        inputs=inputs,
        response_mask=torch.tensor(resp_mask),
        response_ids=torch.tensor(resp, dtype=torch.long),
        logits_to_keep=torch.arange(p_len - 1, p_len + r_len - 1),
        repeats=repeats,
    )


def add_vision(inputs: dict[str, Any], chosen: Sequence[TokenSequence]) -> dict[str, list[int]]:
    """Put the vision tensors of ``chosen`` (in order) into ``inputs``: grids and per-video values
    concatenated over every sequence, pixel rows once per distinct prompt; returns the repeats
    (``MicroBatch.repeats``)."""
    for name in (*_VISION_GRIDS, *_PER_VIDEO):  # one row per item, of every sequence
        parts = [s.prompt.vision[name] for s in chosen if name in s.prompt.vision]
        if parts:
            inputs[name] = torch.cat(parts, dim=0)
    repeats: dict[str, list[int]] = {}
    for rows, grids in zip(_VISION_ROWS, _VISION_GRIDS, strict=True):
        distinct, source = distinct_items([s.prompt for s in chosen], grids)
        if distinct:
            inputs[rows] = torch.cat([p.vision[rows] for p in distinct], dim=0)
        if len(set(source)) < len(source):
            repeats[grids] = source
    return repeats


def distinct_items(prompts: Sequence[PromptInputs], grids: str) -> tuple[list[PromptInputs], list[int]]:
    """The prompts holding items of ``grids`` (images or videos), each once in first-seen order, and for
    every item of every prompt in ``prompts`` (in order) the index of that item among the distinct
    prompts' items. A prompt is the same when it is the same object: a group's responses share theirs
    (services/trainer/sequences.py).

    Example: prompts [a, a, b] where a holds 1 video and b 2 → ([a, b], [0, 0, 1, 2])."""
    first: dict[int, int] = {}  # id(prompt) -> index of its first item among the distinct ones
    distinct: list[PromptInputs] = []
    source: list[int] = []
    count = 0
    for prompt in prompts:
        if grids not in prompt.vision:
            continue
        items = len(prompt.vision[grids])
        if id(prompt) not in first:
            first[id(prompt)] = count
            distinct.append(prompt)
            count += items
        source.extend(range(first[id(prompt)], first[id(prompt)] + items))
    return distinct, source


def pad_rows(rows: Sequence[Sequence[float]], width: int, value: float = 0.0) -> torch.Tensor:
    """Right-pad float rows to ``width``: (len(rows), width)."""
    return torch.tensor([list(r) + [value] * (width - len(r)) for r in rows], dtype=torch.float32)
