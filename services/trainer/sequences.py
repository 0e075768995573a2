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


def group_tokens(groups: Sequence[RolloutGroup]) -> list[list[int]]:
    """Each group's sequences' token counts (prompt + response): exactly the trainer's, since its
    prompts must equal the engine's token for token (:func:`build_sequences` checks)."""
    return [[len(g.prompt_token_ids) + len(r.token_ids) for r in g.responses] for g in groups]


def balanced_shares(tokens: Sequence[Sequence[int]], world: int, min_count: int = 1) -> list[list[int]]:
    """Which sequences each rank scores and updates: indices into the flattened (group, response)
    order, ascending, one list per rank.

    Whole groups go to ranks by token count, the largest first to the least-loaded rank (ties: the
    lower rank), so no rank holds far more tokens than another, and so pads fewer dummy micro-batches
    to keep in step (verl balances its sequences by length likewise); a group stays on one rank, which
    loads its frames and runs its clip's vision pass once for all of its responses. With fewer
    (non-empty) groups than ranks, or when a rank would hold fewer than ``min_count`` sequences (the
    update's mini-batches: every rank must run as many optimizer steps), the sequences are cut into
    contiguous, near-equal counts instead (:func:`shard`).

    Example: groups of tokens [[5, 5], [1, 1], [3, 3], [2]], 2 ranks → weights 10, 2, 6, 2 → rank 0
    takes group 0, rank 1 groups 2, 1 and 3 (6, then 8, then 10): [[0, 1], [2, 3, 4, 5, 6]].
    """
    starts, total = [], 0
    for group in tokens:
        starts.append(total)
        total += len(group)
    contiguous = [list(shard(total, rank, world)) for rank in range(world)]
    groups = [g for g in range(len(tokens)) if tokens[g]]  # an empty group gives a rank nothing
    if len(groups) < world:
        return contiguous
    load, owned = [0] * world, [[] for _ in range(world)]
    for g in sorted(groups, key=lambda i: (-sum(tokens[i]), i)):
        rank = min(range(world), key=lambda r: (load[r], r))
        load[rank] += sum(tokens[g])
        owned[rank].append(g)
    shares = [[starts[g] + j for g in sorted(mine) for j in range(len(tokens[g]))] for mine in owned]
    return contiguous if any(len(share) < min_count for share in shares) else shares


def rank_shares(
    tokens: Sequence[Sequence[int]], world: int, min_count: int = 1, ulysses_size: int = 1
) -> list[list[int]]:
    """Each rank's share: :func:`balanced_shares` over the data-parallel slots, the ``ulysses_size``
    consecutive ranks of a sequence-parallel group holding the same one (they split its rows).

    Example: 4 ranks in groups of 2, slots' shares [[0, 1], [2]] → [[0, 1], [0, 1], [2], [2]]."""
    slots = balanced_shares(tokens, world // ulysses_size, min_count)
    return [slots[rank // ulysses_size] for rank in range(world)]


def as_dicts(items: Sequence[Any]) -> list[dict[str, Any]]:
    return [i.model_dump() for i in items]
