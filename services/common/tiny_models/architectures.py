"""Tiny architectures per model family: the config and processors of a random-weight checkpoint.

One registered entry per family. Every family shares the same tiny text decoder shape (hidden 128,
2 layers, 2 query heads, 1 KV head of width 64) and a 2-block, 64-wide vision tower with the family's
real patch geometry from :mod:`services.common.families`, so frames resized for a real checkpoint of
the family fit the tiny one too. 0.8-1.0M parameters (Qwen2-VL 815,616, Qwen2.5-VL 831,936, Qwen3-VL
954,048 with the trained tokenizer): an engine starts and a step trains in seconds. Qwen3.5's decoder
is hybrid (a Gated DeltaNet layer, then a full attention layer); vLLM's CPU build serves it in bfloat16
only, and its CPU GDN kernel wants linear-attention heads of width 128.

``REAL_SIZES`` holds public checkpoints' dimensions for random-weight checkpoints at true scale.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from transformers import (
    PretrainedConfig,
    Qwen2_5_VLConfig,
    Qwen2_5_VLProcessor,
    Qwen2VLConfig,
    Qwen2VLImageProcessor,
    Qwen2VLProcessor,
    Qwen2VLVideoProcessor,
    Qwen3_5Config,
    Qwen3VLConfig,
    Qwen3VLProcessor,
    Qwen3VLVideoProcessor,
)
from transformers.processing_utils import ProcessorMixin

from services.common.families import Family, FamilyName, get_family

# Qwen2/2.5-VL normalise with CLIP's statistics, Qwen3-VL with 0.5/0.5. vLLM normalises videos with the
# image processor's mean/std, so both processors of a checkpoint must carry the same pair.
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
HALF = (0.5, 0.5, 0.5)

TEXT_HIDDEN = 128
TEXT_INTERMEDIATE = 256
TEXT_LAYERS = 2
TEXT_HEADS = 2
TEXT_KV_HEADS = 1
HEAD_DIM = TEXT_HIDDEN // TEXT_HEADS
# Rotary halves of the head (64 / 2 = 32) split over (temporal, height, width): 8 + 12 + 12 = 32.
MROPE_SECTION = [8, 12, 12]
MAX_POSITIONS = 32_768
VISION_WIDTH = 64
VISION_INTERMEDIATE = 128
VISION_DEPTH = 2
VISION_HEADS = 2
VOCAB_MULTIPLE = 64
# Pixel bounds in merged patches ("tokens"); small so vLLM's profiling pass stays within a short context.
IMAGE_MIN_TOKENS = 4
IMAGE_MAX_TOKENS = 256
VIDEO_MIN_TOKENS = 4
VIDEO_MAX_TOKENS = 256


@dataclass(frozen=True)
class TokenIds:
    """Ids the config must agree on with the tokenizer."""

    vocab_size: int  # embedding rows: tokenizer length rounded up to a multiple of 64
    bos: int  # <|endoftext|>
    eos: int  # <|im_end|>
    pad: int  # <|endoftext|>
    image: int
    video: int
    vision_start: int
    vision_end: int

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> TokenIds:
        def tid(token: str) -> int:
            return tokenizer.convert_tokens_to_ids(token)

        rows = -(-len(tokenizer) // VOCAB_MULTIPLE) * VOCAB_MULTIPLE
        return cls(
            vocab_size=rows,
            bos=tid("<|endoftext|>"),
            eos=tid("<|im_end|>"),
            pad=tid("<|endoftext|>"),
            image=tid("<|image_pad|>"),
            video=tid("<|video_pad|>"),
            vision_start=tid("<|vision_start|>"),
            vision_end=tid("<|vision_end|>"),
        )

    def vision_ids(self) -> dict[str, int]:
        return {
            "image_token_id": self.image,
            "video_token_id": self.video,
            "vision_start_token_id": self.vision_start,
            "vision_end_token_id": self.vision_end,
        }


@dataclass(frozen=True)
class TinyArchitecture:
    family: Family
    make_config: Callable[[TokenIds], PretrainedConfig]
    processor_cls: type[ProcessorMixin]
    video_processor_cls: type
    mean: tuple[float, float, float]
    std: tuple[float, float, float]

    def config(self, ids: TokenIds, size: str = "tiny", tied: bool | None = None) -> PretrainedConfig:
        """The tiny config, or one with a real checkpoint's sizes (:data:`REAL_SIZES`; "real" names the
        family's first listed size). Only dimensions change: token ids, geometry and rope kinds stay.

        ``tied``: whether the LM head is the input embeddings' weight (``tie_word_embeddings``, as small
        Qwen-VL checkpoints have it); None takes the size's own: a real size's ``"tied"`` entry (as its
        public checkpoint, where this project keeps it), untied otherwise and for the tiny one."""
        if size == "tiny":
            config = self.make_config(ids)
            return _tie(config.to_dict(), True, type(config)) if tied else config
        sizes = REAL_SIZES.get(self.family.name, {})
        name = next(iter(sizes), None) if size == "real" else size
        if name not in sizes:
            known = ", ".join(["tiny", "real", *sizes])
            raise ValueError(f"no size {size!r} for family {self.family.name.value}; sizes: {known}")
        real = sizes[name]
        values = self.make_config(replace(ids, vocab_size=max(ids.vocab_size, real["vocab_size"]))).to_dict()
        # per-layer lists derived from the tiny layer count are derived again unless the size gives them
        values["text_config"].pop("layer_types", None)
        for part in ("text_config", "vision_config"):
            values[part] = {**values[part], **real.get(part, {})}
        values["text_config"]["rope_parameters"] = {
            **values["text_config"]["rope_parameters"],
            **real.get("rope_parameters", {}),
        }
        return _tie(values, real.get("tied", False) if tied is None else tied, type(self.make_config(ids)))

    def make_processor(self, tokenizer: Any, chat_template: str) -> ProcessorMixin:
        """Processor with identical image/video normalisation and the family's patch geometry."""
        fam = self.family
        shared = {
            "patch_size": fam.patch_size,
            "merge_size": fam.merge_size,
            "temporal_patch_size": fam.temporal_patch_size,
            "image_mean": list(self.mean),
            "image_std": list(self.std),
        }
        area = fam.factor**2
        image = Qwen2VLImageProcessor(
            size={"shortest_edge": IMAGE_MIN_TOKENS * area, "longest_edge": IMAGE_MAX_TOKENS * area}, **shared
        )
        video = self.video_processor_cls(
            size={"shortest_edge": VIDEO_MIN_TOKENS * area, "longest_edge": VIDEO_MAX_TOKENS * area},
            cap_pixels_per_frame=True,
            **shared,
        )
        return self.processor_cls(
            image_processor=image, video_processor=video, tokenizer=tokenizer, chat_template=chat_template
        )


def _tie(values: dict[str, Any], tied: bool, cls: type[PretrainedConfig]) -> PretrainedConfig:
    """A config from ``values`` with its LM head tied or not. Both levels are set: transformers reads
    the root's ``tie_word_embeddings``, vLLM's language model its text config's."""
    values["tie_word_embeddings"] = values["text_config"]["tie_word_embeddings"] = tied
    return cls.from_dict(values)


ARCHITECTURES: dict[FamilyName, TinyArchitecture] = {}


def register(
    name: FamilyName,
    *,
    processor_cls: type[ProcessorMixin],
    video_processor_cls: type,
    mean: tuple[float, float, float],
    std: tuple[float, float, float],
) -> Callable[[Callable[[TokenIds], PretrainedConfig]], Callable[[TokenIds], PretrainedConfig]]:
    def decorate(
        make_config: Callable[[TokenIds], PretrainedConfig],
    ) -> Callable[[TokenIds], PretrainedConfig]:
        ARCHITECTURES[name] = TinyArchitecture(
            get_family(name), make_config, processor_cls, video_processor_cls, mean, std
        )
        return make_config

    return decorate


def get_architecture(name: str | FamilyName) -> TinyArchitecture:
    family = get_family(name)
    try:
        return ARCHITECTURES[family.name]
    except KeyError:
        known = ", ".join(sorted(f.value for f in ARCHITECTURES))
        raise ValueError(
            f"no tiny architecture for family {family.name.value!r}; available: {known}"
        ) from None


def _text(ids: TokenIds, rope_theta: float, **extra: Any) -> dict[str, Any]:
    return {
        "vocab_size": ids.vocab_size,
        "hidden_size": TEXT_HIDDEN,
        "intermediate_size": TEXT_INTERMEDIATE,
        "num_hidden_layers": TEXT_LAYERS,
        "num_attention_heads": TEXT_HEADS,
        "num_key_value_heads": TEXT_KV_HEADS,
        "max_position_embeddings": MAX_POSITIONS,
        "bos_token_id": ids.bos,
        "eos_token_id": ids.eos,
        "pad_token_id": ids.pad,
        "rope_parameters": {"rope_type": "default", "rope_theta": rope_theta, "mrope_section": MROPE_SECTION},
        **extra,
    }


def _vision(family: FamilyName, **extra: Any) -> dict[str, Any]:
    """The vision tower of Qwen2.5-VL and Qwen3-VL (same field names) with the family's geometry."""
    fam = get_family(family)
    return {
        "depth": VISION_DEPTH,
        "hidden_size": VISION_WIDTH,
        "intermediate_size": VISION_INTERMEDIATE,
        "num_heads": VISION_HEADS,
        "out_hidden_size": TEXT_HIDDEN,
        "patch_size": fam.patch_size,
        "spatial_merge_size": fam.merge_size,
        "temporal_patch_size": fam.temporal_patch_size,
        **extra,
    }


@register(
    FamilyName.qwen2_vl,
    processor_cls=Qwen2VLProcessor,
    video_processor_cls=Qwen2VLVideoProcessor,
    mean=CLIP_MEAN,
    std=CLIP_STD,
)
def qwen2_vl_config(ids: TokenIds) -> PretrainedConfig:
    fam = get_family(FamilyName.qwen2_vl)
    vision = {
        "depth": VISION_DEPTH,
        "embed_dim": VISION_WIDTH,
        "hidden_size": TEXT_HIDDEN,  # Qwen2-VL's merger projects to the text width under this name
        "mlp_ratio": VISION_INTERMEDIATE // VISION_WIDTH,
        "num_heads": VISION_HEADS,
        "patch_size": fam.patch_size,
        "spatial_merge_size": fam.merge_size,
        "temporal_patch_size": fam.temporal_patch_size,
    }
    return Qwen2VLConfig(
        text_config=_text(ids, rope_theta=1_000_000.0),
        vision_config=vision,
        dtype="float32",
        **ids.vision_ids(),
    )


@register(
    FamilyName.qwen2_5_vl,
    processor_cls=Qwen2_5_VLProcessor,
    video_processor_cls=Qwen2VLVideoProcessor,
    mean=CLIP_MEAN,
    std=CLIP_STD,
)
def qwen2_5_vl_config(ids: TokenIds) -> PretrainedConfig:
    # Windowed attention over 112-pixel windows (4x4 merged patches) in block 0, full in block 1.
    vision = _vision(FamilyName.qwen2_5_vl, window_size=112, fullatt_block_indexes=[1], tokens_per_second=2)
    return Qwen2_5_VLConfig(
        text_config=_text(ids, rope_theta=1_000_000.0),
        vision_config=vision,
        dtype="float32",
        **ids.vision_ids(),
    )


@register(
    FamilyName.qwen3_vl,
    processor_cls=Qwen3VLProcessor,
    video_processor_cls=Qwen3VLVideoProcessor,
    mean=HALF,
    std=HALF,
)
def qwen3_vl_config(ids: TokenIds) -> PretrainedConfig:
    text = _text(ids, rope_theta=5_000_000.0, head_dim=HEAD_DIM)
    text["rope_parameters"]["mrope_interleaved"] = True
    # 256 learned positions: a 16x16 grid, interpolated per frame; deepstack features from block 1
    vision = _vision(FamilyName.qwen3_vl, num_position_embeddings=256, deepstack_visual_indexes=[1])
    return Qwen3VLConfig(text_config=text, vision_config=vision, dtype="float32", **ids.vision_ids())


@register(
    FamilyName.qwen3_5,
    processor_cls=Qwen3VLProcessor,
    video_processor_cls=Qwen3VLVideoProcessor,
    mean=HALF,
    std=HALF,
)
def qwen3_5_config(ids: TokenIds) -> PretrainedConfig:
    # The hybrid decoder: a Gated DeltaNet (linear attention) layer, then a full attention layer, with
    # rotary on a quarter of each head (64 · 0.25 = 16 → halves 2 + 3 + 3 = 8, interleaved M-RoPE).
    text = _text(
        ids,
        rope_theta=10_000_000.0,
        head_dim=HEAD_DIM,
        layer_types=["linear_attention", "full_attention"],
        linear_num_key_heads=1,
        linear_num_value_heads=1,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel_dim=4,
    )
    text["rope_parameters"].update(
        mrope_section=[2, 3, 3], mrope_interleaved=True, partial_rotary_factor=0.25
    )
    vision = _vision(FamilyName.qwen3_5, num_position_embeddings=256)
    return Qwen3_5Config(text_config=text, vision_config=vision, dtype="float32", **ids.vision_ids())


# The dimensions of public checkpoints (their config.json), for random-weight checkpoints of true size:
# throughput benchmarks on GPU machines that cannot download weights. Token ids come from the tokenizer.
# ``"tied": True``: the LM head is the embeddings' weight, as in that checkpoint; a size without it is
# untied (the 7-9B checkpoints are; the 2B's tie is dropped for the figures measured on it).
_QWEN2_TEXT_7B = {
    "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
    "num_key_value_heads": 4, "max_position_embeddings": 128000,
}  # fmt: skip
_QWEN2_ROPE_7B = {"mrope_section": [16, 24, 24]}  # head 128: halves 16 + 24 + 24 = 64
_SIGLIP2_VISION = {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16}
REAL_SIZES: dict[FamilyName, dict[str, dict[str, Any]]] = {
    FamilyName.qwen2_vl: {
        "7b": {  # Qwen2-VL-7B-Instruct
            "vocab_size": 152064,
            "text_config": {**_QWEN2_TEXT_7B, "max_position_embeddings": 32768},
            "rope_parameters": _QWEN2_ROPE_7B,
            "vision_config": {
                "depth": 32,
                "embed_dim": 1280,
                "hidden_size": 3584,
                "mlp_ratio": 4,
                "num_heads": 16,
            },
        },
        # Qwen2-VL-2B-Instruct (2.2B; its embeddings are tied, here untied like the other sizes): a real-size
        # model that fits three times in a 24 GiB host, as the full push's memory figure needs
        "2b": {
            "vocab_size": 151936,
            "text_config": {
                "hidden_size": 1536,
                "intermediate_size": 8960,
                "num_hidden_layers": 28,
                "num_attention_heads": 12,
                "num_key_value_heads": 2,
                "max_position_embeddings": 32768,
            },
            "rope_parameters": _QWEN2_ROPE_7B,  # head 128 as at 7B
            "vision_config": {
                "depth": 32,
                "embed_dim": 1280,
                "hidden_size": 1536,
                "mlp_ratio": 4,
                "num_heads": 16,
            },
        },
        # not a public checkpoint: Qwen2-VL-2B's widths with 12 decoder layers and 8 vision blocks
        # (1.22B, 4.5 GiB in fp32): the smallest real-width model past 1B, for memory figures that
        # must dwarf a process's fixed overhead (tests/trainer/test_sharded_load.py)
        "1b": {
            "vocab_size": 151936,
            "text_config": {
                "hidden_size": 1536,
                "intermediate_size": 8960,
                "num_hidden_layers": 12,
                "num_attention_heads": 12,
                "num_key_value_heads": 2,
                "max_position_embeddings": 32768,
            },
            "rope_parameters": _QWEN2_ROPE_7B,
            "vision_config": {
                "depth": 8,
                "embed_dim": 1280,
                "hidden_size": 1536,
                "mlp_ratio": 4,
                "num_heads": 16,
            },
        },
    },
    FamilyName.qwen2_5_vl: {
        "7b": {  # Qwen2.5-VL-7B-Instruct
            "vocab_size": 152064,
            "text_config": _QWEN2_TEXT_7B,
            "rope_parameters": _QWEN2_ROPE_7B,
            "vision_config": {
                "depth": 32,
                "hidden_size": 1280,
                "intermediate_size": 3420,
                "num_heads": 16,
                "out_hidden_size": 3584,
                "fullatt_block_indexes": [7, 15, 23, 31],
            },
        },
        # Qwen2.5-VL-3B-Instruct, its LM head tied to the embeddings as published (3,754,622,976
        # parameters, the tied weight counted once): the real-size tied checkpoint, whose push must leave
        # the head out (tests/trainer/test_weight_buckets.py). Its fp32 master weights, gradients and
        # AdamW moments (16 bytes a parameter, ~60 GB) fit one H200 beside the activations; the 7B's
        # (~133 GB) do not, so the one-GPU script trains this size
        "3b": {
            "tied": True,
            "vocab_size": 151936,
            "text_config": {
                "hidden_size": 2048,
                "intermediate_size": 11008,
                "num_hidden_layers": 36,
                "num_attention_heads": 16,
                "num_key_value_heads": 2,
                "max_position_embeddings": 128000,
            },
            "rope_parameters": _QWEN2_ROPE_7B,  # head 128 as at 7B
            "vision_config": {
                "depth": 32,
                "hidden_size": 1280,
                "intermediate_size": 3420,
                "num_heads": 16,
                "out_hidden_size": 2048,
                "fullatt_block_indexes": [7, 15, 23, 31],
            },
        },
    },
    FamilyName.qwen3_vl: {  # Qwen3-VL-8B-Instruct
        "8b": {
            "vocab_size": 151936,
            "text_config": {
                "hidden_size": 4096,
                "intermediate_size": 12288,
                "num_hidden_layers": 36,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "head_dim": 128,
                "max_position_embeddings": 262144,
            },
            "rope_parameters": {"mrope_section": [24, 20, 20]},
            "vision_config": {
                **_SIGLIP2_VISION,
                "out_hidden_size": 4096,
                "num_position_embeddings": 2304,
                "deepstack_visual_indexes": [8, 16, 24],
            },
        }
    },
    FamilyName.qwen3_5: {  # Qwen3.5-9B: 3 Gated DeltaNet layers to each full attention layer
        "9b": {
            "vocab_size": 248320,
            "text_config": {
                "hidden_size": 4096,
                "intermediate_size": 12288,
                "num_hidden_layers": 32,
                "num_attention_heads": 16,
                "num_key_value_heads": 4,
                "head_dim": 256,
                "max_position_embeddings": 262144,
                "linear_num_key_heads": 16,
                "linear_num_value_heads": 32,
                "linear_key_head_dim": 128,
                "linear_value_head_dim": 128,
                "layer_types": [
                    "full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(32)
                ],
            },
            "rope_parameters": {"mrope_section": [11, 11, 10]},  # 256 · 0.25 = 64 → halves 32
            "vision_config": {**_SIGLIP2_VISION, "out_hidden_size": 4096, "num_position_embeddings": 2304},
        }
    },
}
