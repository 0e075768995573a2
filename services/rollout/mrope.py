"""Multimodal rotary (M-RoPE) position ids by vLLM's rule, for the trainer's HF forward.

Qwen2-VL and Qwen2.5-VL place a vision item's tokens on a (t, h, w) grid starting where the text
left off. After the item, vLLM (like the original Qwen2-VL code) continues text at ``max(every
position so far) + 1``; transformers 5.19 continues at ``start + max(grid_h, grid_w) // merge``. The
two differ whenever a video's temporal extent exceeds its spatial one, and then training logprobs drift
from the rollout's (3e-3 on tiny models). Passing these ids to the HF forward restores agreement.
Qwen3-VL needs nothing: its frames are separate t=1 items, where both rules agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

# model_type → whether transformers' own rope index differs from vLLM's and must be overridden
OVERRIDDEN = frozenset({"qwen2_vl", "qwen2_5_vl"})


@dataclass(frozen=True)
class VisionItem:
    """One image or video in the token sequence, on the language model's (merged) grid."""

    offset: int  # index of its first placeholder token
    t: int
    h: int
    w: int
    t_factor: float = 1.0  # temporal position step per grid frame (seconds per grid · tokens per second)

    @property
    def length(self) -> int:
        return self.t * self.h * self.w


def _prefix(sample_id: str | None) -> str:
    return "" if sample_id is None else f"sample {sample_id!r}: "


def vllm_positions(length: int, items: Sequence[VisionItem], sample_id: str | None = None) -> torch.Tensor:
    """Position ids (3, length) as vLLM assigns them.

    Text runs count up by 1 from ``max(previous positions) + 1`` (0 at the start); an item at text
    position s gets (s + floor(i_t · t_factor), s + i_h, s + i_w) in (t, h, w) raster order.
    Example (t=2, h=1, w=2, t_factor=1) after 2 text tokens, then 1 text token:
    t: 0 1 2 2 3 3 4 · h: 0 1 2 2 2 2 4 · w: 0 1 2 3 2 3 4.
    """
    parts: list[torch.Tensor] = []
    next_pos = 0
    cursor = 0
    for item in sorted(items, key=lambda it: it.offset):
        if item.offset < cursor:
            raise ValueError(
                f"{_prefix(sample_id)}vision item at {item.offset} overlaps the previous one (ends at {cursor})"
            )
        text = item.offset - cursor
        parts.append(torch.arange(text).expand(3, text) + next_pos)
        start = next_pos + text
        t_idx = (torch.arange(item.t, dtype=torch.float64) * item.t_factor).long()
        grid = torch.stack(
            torch.meshgrid(t_idx, torch.arange(item.h), torch.arange(item.w), indexing="ij")
        ).reshape(3, -1)
        parts.append(grid + start)
        next_pos = int(torch.cat(parts, dim=1).max()) + 1
        cursor = item.offset + item.length
    if cursor > length:
        raise ValueError(
            f"{_prefix(sample_id)}vision items run to token {cursor}, past the sequence end ({length})"
        )
    tail = length - cursor
    parts.append(torch.arange(tail).expand(3, tail) + next_pos)
    return torch.cat(parts, dim=1)


def vision_items(
    input_ids: Sequence[int],
    *,
    image_token_id: int,
    video_token_id: int,
    merge_size: int,
    image_grid_thw: torch.Tensor | None = None,
    video_grid_thw: torch.Tensor | None = None,
    second_per_grid_ts: torch.Tensor | Sequence[float] | None = None,
    tokens_per_second: float = 1.0,
    sample_id: str | None = None,
) -> list[VisionItem]:
    """Locate each image/video of a processor output in ``input_ids`` (grids in processor order).

    Raises ValueError, naming ``sample_id``, when the placeholders do not add up to the grids (a
    placeholder/feature mismatch) or there are fewer ``second_per_grid_ts`` than videos.
    """
    where = _prefix(sample_id)
    grids = {
        image_token_id: iter([] if image_grid_thw is None else image_grid_thw.tolist()),
        video_token_id: iter([] if video_grid_thw is None else video_grid_thw.tolist()),
    }
    seconds = iter([] if second_per_grid_ts is None else [float(s) for s in second_per_grid_ts])
    items: list[VisionItem] = []
    pos = 0
    ids = list(input_ids)
    while pos < len(ids):
        token = ids[pos]
        if token not in grids:
            pos += 1
            continue
        kind = "image" if token == image_token_id else "video"
        try:
            t, h, w = next(grids[token])
        except StopIteration:
            raise ValueError(f"{where}more {kind} placeholders than {kind} grids (at token {pos})") from None
        t_factor = 1.0
        if token == video_token_id and second_per_grid_ts is not None:
            try:
                t_factor = next(seconds) * tokens_per_second
            except StopIteration:
                raise ValueError(
                    f"{where}video at token {pos} has no second_per_grid_ts entry "
                    f"({len(second_per_grid_ts)} given for more videos)"
                ) from None
        item = VisionItem(pos, t, h // merge_size, w // merge_size, t_factor)
        span = ids[pos : pos + item.length]
        if len(span) != item.length or any(x != token for x in span):
            raise ValueError(
                f"{where}{kind} at token {pos} needs {item.length} placeholders, found a shorter run"
            )
        items.append(item)
        pos += item.length
    for token, remaining in grids.items():
        if next(remaining, None) is not None:
            kind = "image" if token == image_token_id else "video"
            raise ValueError(f"{where}a {kind} grid has no placeholders in the sequence")
    return items
