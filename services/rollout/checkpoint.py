"""What the rollout side needs to know about a checkpoint: family, processor and special token ids."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from services.common.families import FAMILIES, Family
from services.rollout.param_names import ParameterNames, checkpoint_names

END_OF_TURN = "<|im_end|>"


class ModelFolderError(ValueError):
    """A model folder that is not a checkpoint of a supported family (the user's input, not a crash)."""


def family_of(hf_config: Any) -> Family:
    """The model family of a checkpoint, from its ``model_type``."""
    for family in FAMILIES.values():
        if family.model_type == hf_config.model_type:
            return family
    known = ", ".join(f.model_type for f in FAMILIES.values())
    raise ModelFolderError(f"model type {hf_config.model_type!r} is not a supported family ({known})")


@dataclass(frozen=True)
class Checkpoint:
    path: str
    family: Family
    processor: Any
    video_token_id: int
    image_token_id: int
    end_token_id: int  # closes an assistant turn: <|im_end|> (the tokenizer's EOS if it has none)
    # Every token vLLM stops on (finish_reason "stop"): the tokenizer's EOS and the generation config's
    # eos_token_id(s). The set the trainer masks on: a response ends at its first one of these.
    stop_token_ids: frozenset[int] = frozenset()
    hf_config: Any = field(default=None, repr=False, compare=False)

    @property
    def tokenizer(self) -> Any:
        return self.processor.tokenizer

    @property
    def placeholder_token_ids(self) -> tuple[int, int]:
        return (self.image_token_id, self.video_token_id)

    @cached_property
    def parameter_names(self) -> ParameterNames:
        """The tensor names a weight push must carry (built once, on first push)."""
        if self.hf_config is None:
            raise ValueError(f"checkpoint {self.path} was built without its config; use Checkpoint.load")
        return checkpoint_names(self.hf_config, self.path)

    @classmethod
    def load(cls, path: str | Path) -> Checkpoint:
        """Read config and processor of a local checkpoint folder (or a cached hub id) offline."""
        from transformers import AutoConfig, AutoProcessor

        path = str(path)
        try:
            hf_config = AutoConfig.from_pretrained(path)
        except (OSError, ValueError) as exc:  # no folder, no config.json, no or an unknown model_type
            raise ModelFolderError(f"{path}: not a model checkpoint transformers can read ({exc})") from exc
        processor = AutoProcessor.from_pretrained(path)
        end = processor.tokenizer.convert_tokens_to_ids(END_OF_TURN)
        if end is None or end == processor.tokenizer.unk_token_id:
            end = processor.tokenizer.eos_token_id
        return cls(
            path=path,
            hf_config=hf_config,
            stop_token_ids=stop_token_ids(path, processor.tokenizer),
            family=family_of(hf_config),
            processor=processor,
            video_token_id=int(hf_config.video_token_id),
            image_token_id=int(hf_config.image_token_id),
            end_token_id=int(end),
        )


def stop_token_ids(path: str, tokenizer: Any) -> frozenset[int]:
    """The tokenizer's EOS plus the generation config's ``eos_token_id`` (an int or a list), if any."""
    from transformers import GenerationConfig

    ids = {int(tokenizer.eos_token_id)} if tokenizer.eos_token_id is not None else set()
    try:
        generation = GenerationConfig.from_pretrained(path)
    except OSError:  # no generation_config.json: vLLM stops on the tokenizer's EOS alone
        return frozenset(ids)
    eos = generation.eos_token_id
    ids |= {int(t) for t in ([] if eos is None else [eos] if isinstance(eos, int) else eos)}
    return frozenset(ids)
