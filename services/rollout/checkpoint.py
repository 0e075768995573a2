"""What the rollout side needs to know about a checkpoint: family, processor and special token ids."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.common.families import FAMILIES, Family

END_OF_TURN = "<|im_end|>"


def family_of(hf_config: Any) -> Family:
    """The model family of a checkpoint, from its ``model_type``."""
    for family in FAMILIES.values():
        if family.model_type == hf_config.model_type:
            return family
    known = ", ".join(f.model_type for f in FAMILIES.values())
    raise ValueError(f"model type {hf_config.model_type!r} is not a supported family ({known})")


@dataclass(frozen=True)
class Checkpoint:
    path: str
    family: Family
    processor: Any
    video_token_id: int
    image_token_id: int
    end_token_id: int  # closes an assistant turn: <|im_end|> (the tokenizer's EOS if it has none)

    @property
    def tokenizer(self) -> Any:
        return self.processor.tokenizer

    @property
    def placeholder_token_ids(self) -> tuple[int, int]:
        return (self.image_token_id, self.video_token_id)

    @classmethod
    def load(cls, path: str | Path) -> Checkpoint:
        """Read config and processor of a local checkpoint folder (or a cached hub id) offline."""
        from transformers import AutoConfig, AutoProcessor

        path = str(path)
        hf_config = AutoConfig.from_pretrained(path)
        processor = AutoProcessor.from_pretrained(path)
        end = processor.tokenizer.convert_tokens_to_ids(END_OF_TURN)
        if end is None or end == processor.tokenizer.unk_token_id:
            end = processor.tokenizer.eos_token_id
        return cls(
            path=path,
            family=family_of(hf_config),
            processor=processor,
            video_token_id=int(hf_config.video_token_id),
            image_token_id=int(hf_config.image_token_id),
            end_token_id=int(end),
        )
