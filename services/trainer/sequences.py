"""A step's sequences, built beside the model that scores them: each sample's frames are loaded from the
frame source by key and processed exactly as vLLM processed them, then paired with each response."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from services.rollout.checkpoint import Checkpoint
from services.rollout.config import RolloutConfig
from services.rollout.consistency import processor_inputs
from services.rollout.media import FrameSource, load_media
from services.rollout.prompts import render_prompt
from services.rollout.samples import RolloutGroup, RolloutSample
from services.trainer.batch import PromptInputs, TokenSequence


def prompt_inputs(
    sample: RolloutSample, checkpoint: Checkpoint, source: FrameSource, config: RolloutConfig
) -> PromptInputs:
    """The HF processor's view of a sample's prompt and frames, exactly as the engine asked for them."""
    media = load_media(sample, source, checkpoint.family, config.video_max_pixels)
    text = render_prompt(checkpoint.processor, sample)
    prompt = PromptInputs.from_processor(
        sample.id, processor_inputs(checkpoint.processor, text, media, config)
    )
    check_placeholders(prompt, checkpoint)
    return prompt


def check_placeholders(prompt: PromptInputs, checkpoint: Checkpoint) -> None:
    """Each modality's placeholder tokens must number its vision features (grid t·h·w / merge²): the
    model would otherwise fail mid-batch without saying which sample, or FSDP ranks would fall out of
    step. Raises naming the sample."""
    merge = checkpoint.family.merge_size**2
    for name, token, grids in (
        ("image", checkpoint.image_token_id, "image_grid_thw"),
        ("video", checkpoint.video_token_id, "video_grid_thw"),
    ):
        grid = prompt.vision.get(grids)
        features = int(grid.prod(dim=-1).sum()) // merge if grid is not None else 0
        tokens = prompt.input_ids.count(token)
        if tokens != features:
            raise ValueError(
                f"sample {prompt.sample_id!r}: {tokens} {name} placeholder token(s) in the prompt for "
                f"{features} {name} feature(s); the prompt and its {name}s disagree"
            )


def build_sequences(
    samples: Sequence[RolloutSample],
    groups: Sequence[RolloutGroup],
    checkpoint: Checkpoint,
    source: FrameSource,
    config: RolloutConfig,
    *,
    cache: dict[str, PromptInputs] | None = None,
) -> list[TokenSequence]:
    """One sequence per response, in (sample, response) order. The actor's prompt ids must equal the
    engine's: a mismatch (other processor settings, other frames) is an error naming the sample."""
    out = []
    for sample, group in zip(samples, groups, strict=True):
        prompt = cache.get(sample.id) if cache is not None else None
        if prompt is None:
            prompt = prompt_inputs(sample, checkpoint, source, config)
            if cache is not None:
                cache[sample.id] = prompt
        if prompt.input_ids != list(group.prompt_token_ids):
            raise ValueError(
                f"sample {sample.id!r}: the actor's prompt ({len(prompt.input_ids)} tokens) differs from the "
                f"rollout's ({len(group.prompt_token_ids)}); processor and engine disagree"
            )
        out.extend(TokenSequence(prompt, list(r.token_ids), r.offline, r.logprobs) for r in group.responses)
    return out


def offline_sequences(
    samples: Sequence[RolloutSample], checkpoint: Checkpoint, source: FrameSource, config: RolloutConfig,
    cache: dict[str, PromptInputs] | None = None,
) -> list[TokenSequence]:  # fmt: skip
    """Each sample's ``offline_output`` as a sequence (supervised warm start)."""
    from services.rollout.mix_policy import offline_response

    out = []
    for s in samples:
        prompt = cache.get(s.id) if cache is not None else None
        if prompt is None:
            prompt = prompt_inputs(s, checkpoint, source, config)
            if cache is not None:
                cache[s.id] = prompt
        response = offline_response(
            s, checkpoint.tokenizer, checkpoint.end_token_id, checkpoint.placeholder_token_ids
        )
        out.append(TokenSequence(prompt, list(response.token_ids), offline=True))
    return out


def shard(count: int, rank: int, world: int) -> range:
    """Contiguous, near-equal share of ``count`` items for ``rank`` of ``world``."""
    base, extra = divmod(count, world)
    start = rank * base + min(rank, extra)
    return range(start, start + base + (1 if rank < extra else 0))


def covering(counts: Sequence[int], share: range) -> tuple[list[int], int]:
    """The groups (by index) holding the sequences of ``share``, a range over the flattened
    (group, response) order where group i holds ``counts[i]`` sequences, and the position of the share's
    first sequence among those groups' sequences.

    Example: counts [2, 2, 2], share range(3, 5) → ([1, 2], 1): sequences 3 and 4 are the second of
    group 1 and the first of group 2.
    """
    picked: list[int] = []
    offset, start = 0, 0
    for i, count in enumerate(counts):
        if start < share.stop and start + count > share.start:
            if not picked:
                offset = share.start - start
            picked.append(i)
        start += count
    return picked, offset


def as_dicts(items: Sequence[Any]) -> list[dict[str, Any]]:
    return [i.model_dump() for i in items]
