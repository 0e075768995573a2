"""Model FLOPs of the actor's passes and the chip's share of them (MFU), counted per part of a Qwen-VL
model, and the memory plan that sizes the GPU script's run to the device it lands on.

The count follows verl's (``verl/utils/flops_counter.py``, ``FlopsCounter``, after its PR #4959 halved
the causal attention term): a training pass is 3 forwards, 2 FLOPs per dense weight per token a forward,
and causal attention 2 × s² × (heads × head width) per layer per sequence of s tokens a forward (verl's
6 × Σ s² × head_dim × heads × layers for a training pass); gradient checkpointing's recomputed forward is
not model work and is not counted (verl does not count it either). Where ours differs, it counts less
or what verl leaves out, and says so beside the figures (docs/benchmarks.md):

- the LM head counts 2 × vocab × hidden per *scored* response token only (verl counts the head, and the
  embedding, for every token: 2 × vocab × hidden of its N);
- the vision tower counts (verl counts it for Qwen3-VL, not for Qwen2/2.5-VL): 2 FLOPs per weight per
  patch through its blocks, per merged token through its merger; its attention, bidirectional,
  4 × span² × width per layer over each frame (Qwen2-VL, Qwen3-VL, Qwen2.5-VL's full-attention layers)
  or window of ``window_patches`` (Qwen2.5-VL's other layers, counted as whole windows); only the
  passes that run: one per clip per micro-batch, its n responses sharing it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

# Dense bf16 tensor-core peaks (no sparsity), FLOP/s, from the vendors' data sheets; matched on the
# CUDA device name, the first entry that appears in it wins (so "H100 PCIe" before "H100").
PEAK_BF16 = (
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989.4e12),  # SXM (HBM3)
    ("H200", 989.4e12),
    ("H800", 989.4e12),
    ("H20", 148e12),
    ("A100", 312e12),
    ("A800", 312e12),
    ("L40S", 362e12),
)


def peak_flops(device_name: str) -> float:
    """The chip's dense bf16 peak by its CUDA name; NaN where the table does not know it (the CPU)."""
    for key, value in PEAK_BF16:
        if key in device_name:
            return value
    return math.nan


@dataclasses.dataclass(frozen=True)
class Shape:
    """What the count needs of a model (:meth:`of` reads it from a transformers Qwen-VL model)."""

    lm_params: int  # the decoder layers and final norm (no embeddings, no head)
    head_params: int  # vocab × hidden
    layers: int
    attention_width: int  # query heads × head width
    tower_params: int  # patch embedding and blocks (once per patch)
    merger_params: int  # patch merger(s) (once per merged token)
    tower_layers: int
    tower_width: int
    merge: int  # patches per merged token (spatial_merge_size²)
    full_layers: int  # tower layers attending over whole frames
    window_patches: int | None  # the other layers' window (Qwen2.5-VL), None: every layer is full

    @classmethod
    def of(cls, model: Any) -> Shape:
        config = model.config
        text = getattr(config, "text_config", None) or config
        vision = config.vision_config
        inner = model.model
        language, tower = inner.language_model, inner.visual

        def count(module: Any) -> int:
            return sum(p.numel() for p in module.parameters())

        embed = count(language.embed_tokens)
        merger = sum(count(m) for name, m in tower.named_children() if "merger" in name)
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        depth = vision.depth
        full = getattr(vision, "fullatt_block_indexes", None)
        window = getattr(vision, "window_size", None)
        windowed = full is not None and window is not None
        return cls(
            lm_params=count(language) - embed,
            head_params=model.lm_head.weight.numel(),
            layers=text.num_hidden_layers,
            attention_width=text.num_attention_heads * head_dim,
            tower_params=count(tower) - merger,
            merger_params=merger,
            tower_layers=depth,
            tower_width=vision.hidden_size,
            merge=vision.spatial_merge_size**2,
            full_layers=len(full) if windowed else depth,
            window_patches=(window // vision.patch_size) ** 2 if windowed else None,
        )


def forward_flops(
    shape: Shape, lengths: Sequence[int], response_tokens: int, clips: Sequence[tuple[int, int, int]]
) -> dict[str, float]:
    """One forward's model FLOPs by part: ``lengths`` the sequences' token counts, ``response_tokens``
    how many tokens the head scores, ``clips`` the (t, h, w) patch grids of the tower passes that run.

    Example (hand count): lm 10 weights, 1 layer of width 2, sequences [3, 1]: 2·10·4 = 80 dense,
    causal attention 2·1·2·(9 + 1) = 40; head 6 weights, 2 scored tokens: 24."""
    tokens = sum(lengths)
    out = {
        "lm_dense": 2.0 * shape.lm_params * tokens,
        "lm_attention": 2.0 * shape.layers * shape.attention_width * sum(n * n for n in lengths),
        "head": 2.0 * shape.head_params * response_tokens,
        "tower_dense": 0.0,
        "tower_attention": 0.0,
    }
    for t, h, w in clips:
        frame = h * w
        patches = t * frame
        out["tower_dense"] += (
            2.0 * shape.tower_params * patches + 2.0 * shape.merger_params * patches / shape.merge
        )
        spans = shape.full_layers * t * frame * frame
        if shape.window_patches is not None:
            spans += (shape.tower_layers - shape.full_layers) * patches * min(shape.window_patches, frame)
        out["tower_attention"] += 4.0 * shape.tower_width * spans
    return out


def mfu(flops: float, seconds: float, peak: float) -> float:
    """The share of the chip's peak that ``flops`` in ``seconds`` are (NaN where the peak is unknown)."""
    return flops / seconds / peak if seconds > 0 else math.nan


# -- sizing the run to the device -----------------------------------------------------------------

GiB = 2**30
# The update's activations per micro-batch token beside the weights, measured on the H200 run of the
# 3B model (16.6 GiB over the 60.6 GiB of weights, gradients and moments at 16,384 padded tokens, with
# gradient checkpointing), rounded up.
ACTIVATION_BYTES_PER_TOKEN = 1.1 * 2**20
HEADROOM = 0.9  # of the device's memory the plan may count on (the allocator's fragmentation, CUDA's own)


def memory_plan(params: int, device_bytes: int, micro_batch_tokens: int) -> dict[str, Any]:
    """Whether AdamW's moments must live on the host between steps (``actor.offload_optimizer``) and how
    many tokens a micro-batch may hold, for a model of ``params`` parameters trained with an fp32 master
    (4 B weights + 4 B gradients + 8 B moments a parameter) on one device of ``device_bytes``.

    With the moments on the device the update needs 16 B a parameter plus the activations; smaller
    micro-batches (halved down to 4,096 tokens) are tried first, since moving the moments costs a
    host round trip of 8 B a parameter every step. With them on the host it needs the larger of the
    forward/backward (8 B + activations) and the optimizer step (16 B, the activations gone), down to
    2,048 tokens. Raises where even the step does not fit one device.

    Example: 3.75e9 parameters (the 3B model, its head tied) on an H100 (79.1 GiB, 71.2 usable): 55.9
    GiB of state + 1.1 MiB a token of activations does not fit at 16,384 tokens (73.5 GiB) but does at
    8,192 (64.7 GiB); on an H200 (139.8 GiB) it fits at 16,384."""
    budget = HEADROOM * device_bytes
    state, step = 8 * params, 16 * params
    if step > budget:
        raise ValueError(
            f"{params / 1e9:.2f} B parameters need {step / GiB:.1f} GiB for an fp32 optimizer step, more than "
            f"{budget / GiB:.1f} GiB of this device: use a smaller --size or several ranks"
        )
    for offload, floor in ((False, 4096), (True, 2048)):
        tokens = micro_batch_tokens
        while tokens >= floor:
            activations = ACTIVATION_BYTES_PER_TOKEN * tokens
            need = max(state + activations, step) if offload else step + activations
            if need <= budget:
                return {"offload_optimizer": offload, "micro_batch_tokens": tokens, "need_gib": need / GiB}
            tokens //= 2
    raise ValueError(f"no micro-batch of >= 2,048 tokens fits {budget / GiB:.1f} GiB beside the weights")
