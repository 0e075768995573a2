"""Write a tiny random-weight Qwen-VL checkpoint that transformers and vLLM load offline."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import torch
from transformers import AutoModelForImageTextToText, GenerationConfig, PretrainedConfig

from services.common.tiny_models.architectures import TokenIds, get_architecture
from services.common.tiny_models.tokenizer import chat_template, real_qwen_tokenizer, trained_tokenizer

# transformers >= 5 reads processor_config.json; vLLM and older readers look for these two as well.
LEGACY_IMAGE_CONFIG = "preprocessor_config.json"
LEGACY_VIDEO_CONFIG = "video_preprocessor_config.json"


def checkpoint_config(
    family: str, ids: TokenIds, size: str = "tiny", tied: bool | None = None
) -> PretrainedConfig:
    """The config :func:`build_tiny_model` writes for these token ids: the architecture's
    (``TinyArchitecture.config``), declaring bfloat16 at a real size (the weights it writes then)."""
    config = get_architecture(family).config(ids, size, tied=tied)
    if size != "tiny":
        config.dtype = config.text_config.dtype = config.vision_config.dtype = "bfloat16"
    return config


def build_tiny_model(
    family: str,
    out: Path,
    seed: int = 0,
    real_tokenizer: bool = False,
    size: str = "tiny",
    tied: bool | None = None,
) -> Path:
    """Write config, fp32 safetensors weights, tokenizer, chat template and processor configs to ``out``.

    Deterministic: the same family, seed and tokenizer choice give byte-identical weights. ``out`` must
    not exist or be an empty folder; the checkpoint is assembled in a sibling temp folder and renamed
    into place, so a reader never sees half a checkpoint.

    ``size`` "real" (or a named size, e.g. "8b"; see ``REAL_SIZES``) builds random bf16 weights with a
    public checkpoint's dimensions and the real Qwen tokenizer: ~16 GB written, ~20 GB of memory.
    ``tied``: the LM head shares the input embeddings' weight and the files hold no ``lm_head.weight``
    (None: as the size has it, see ``TinyArchitecture.config``).
    """
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out} exists and is not an empty folder; choose a new output path")
    arch = get_architecture(family)
    full_size = size != "tiny"
    tokenizer = real_qwen_tokenizer() if real_tokenizer or full_size else trained_tokenizer()
    config = checkpoint_config(family, TokenIds.from_tokenizer(tokenizer), size, tied)
    dtype = torch.bfloat16 if full_size else torch.float32
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForImageTextToText.from_config(config, dtype=dtype)
    model.generation_config = GenerationConfig(
        bos_token_id=config.text_config.bos_token_id,
        eos_token_id=[config.text_config.eos_token_id, config.text_config.bos_token_id],
        pad_token_id=config.text_config.pad_token_id,
    )
    processor = arch.make_processor(tokenizer, chat_template())

    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save_pretrained(staging)
        processor.save_pretrained(staging)
        processor.image_processor.to_json_file(staging / LEGACY_IMAGE_CONFIG)
        processor.video_processor.to_json_file(staging / LEGACY_VIDEO_CONFIG)
        # mkdtemp makes a private folder; a checkpoint is read by other users and containers too
        staging.chmod(0o755)
        for path in staging.iterdir():
            path.chmod(0o644)
        if out.exists():
            out.rmdir()
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out
