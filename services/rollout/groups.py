"""From generated responses to GRPO groups: the mix-policy gate and the group assembly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from services.rollout import mix_policy
from services.rollout.checkpoint import Checkpoint
from services.rollout.config import RolloutConfig
from services.rollout.samples import RolloutGroup, RolloutResponse, RolloutSample, continued_response

Generated = tuple[list[int], list[RolloutResponse]]  # (prompt token ids, online responses)


def online_counts(samples: Sequence[RolloutSample], config: RolloutConfig) -> list[int]:
    """How many responses to generate per sample."""
    return [
        mix_policy.online_count(
            config.n, config.mix_policy, s.offline_output is not None, config.mix_accuracy_threshold
        )
        for s in samples
    ]


def offline_responses(
    samples: Sequence[RolloutSample],
    checkpoint: Checkpoint,
    config: RolloutConfig,
    prompt_lengths: Sequence[int | None] | None = None,
) -> list[RolloutResponse | None]:
    """Each sample's offline response when this config mixes it in (else None), checked: no vision
    placeholders, at most ``max_tokens`` tokens and, given the prompt lengths, within ``max_model_len``.
    Called before generating (without prompt lengths) so a bad offline output fails fast."""
    lengths = prompt_lengths or [None] * len(samples)
    return [
        mix_policy.offline_response(
            sample,
            checkpoint.tokenizer,
            checkpoint.end_token_id,
            checkpoint.placeholder_token_ids,
            max_tokens=config.max_tokens,
            max_model_len=config.engine.max_model_len,
            prompt_length=length,
        )
        if config.mix_policy and sample.offline_output is not None
        else None
        for sample, length in zip(samples, lengths, strict=True)
    ]


def gate_accuracies(
    samples: Sequence[RolloutSample],
    generated: Sequence[Generated],
    config: RolloutConfig,
    reward_client: Any,
) -> list[list[float] | None]:
    """Accuracy of each online response of the samples the gate must judge (None for the others).

    Scored in one batch through ``services.reward`` (in-process or HTTP); a sample the reward library
    cannot score is an error naming it, never a silent zero.
    """
    judged = [
        i
        for i, s in enumerate(samples)
        if mix_policy.needs_scores(
            config.mix_policy, s.offline_output is not None, config.mix_accuracy_threshold
        )
    ]
    out: list[list[float] | None] = [None] * len(samples)
    if not judged:
        return out
    items = [
        ({"id": samples[i].id, **samples[i].reward}, continued_response(samples[i].assistant_prefix, r.text))
        for i in judged
        for r in generated[i][1]
    ]
    results = iter(reward_client.score_batch(items))
    for i in judged:
        scores = []
        for _ in generated[i][1]:
            result = next(results)
            if result.error:
                raise ValueError(f"sample {samples[i].id!r}: the mix gate cannot score it: {result.error}")
            scores.append(float(result.accuracy))
        out[i] = scores
    return out


def assemble_groups(
    samples: Sequence[RolloutSample],
    generated: Sequence[Generated],
    checkpoint: Checkpoint,
    config: RolloutConfig,
    reward_client: Any = None,
) -> list[RolloutGroup]:
    """One group of ``config.n`` responses per sample, offline responses mixed in per the config."""
    offline_all = offline_responses(samples, checkpoint, config, [len(ids) for ids, _ in generated])
    accuracies = gate_accuracies(samples, generated, config, reward_client)
    groups = []
    for sample, (prompt_ids, online), acc, offline in zip(
        samples, generated, accuracies, offline_all, strict=True
    ):
        inject = offline is not None and mix_policy.should_inject(acc or [], config.mix_accuracy_threshold)
        groups.append(
            RolloutGroup(
                sample_id=sample.id,
                prompt_token_ids=prompt_ids,
                responses=mix_policy.assemble_group(online, offline, config.n, inject),
                online_accuracy=sum(acc) / len(acc) if acc else None,
            )
        )
    return groups
