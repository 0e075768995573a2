"""Mixed offline/online groups (SPEC §5): a pre-collected response joins the sample's online group.

Without a threshold the engine generates n-1 responses and the offline one fills the last slot. With
a threshold it generates n, scores them, and replaces the last online response by the offline one
only when the online mean accuracy is below the threshold (the model still fails this sample, so the
demonstration is worth its off-policy cost). The group size is n either way, which GRPO relies on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from services.rollout.samples import RolloutResponse, RolloutSample


def online_count(n: int, mixing: bool, has_offline: bool, threshold: float | None) -> int:
    """Responses to generate for one sample: n-1 when the offline response always joins, else n."""
    if mixing and has_offline and threshold is None:
        return n - 1
    return n


def needs_scores(mixing: bool, has_offline: bool, threshold: float | None) -> bool:
    """Whether the gate must score the online responses of a sample before deciding."""
    return mixing and has_offline and threshold is not None


def should_inject(accuracies: Sequence[float], threshold: float | None) -> bool:
    """Inject when there is no threshold, or when the online mean accuracy is strictly below it."""
    if threshold is None:
        return True
    if not accuracies:
        raise ValueError("the accuracy gate needs at least one scored online response")
    return sum(accuracies) / len(accuracies) < threshold


def check_offline_length(
    sample_id: str,
    length: int,
    max_tokens: int,
    max_model_len: int | None = None,
    prompt_length: int | None = None,
) -> None:
    """An offline response must fit where an online one would: at most ``max_tokens`` tokens, and at
    most ``max_model_len - prompt_length`` (the trainer reads prompt + response as one sequence)."""
    if length > max_tokens:
        raise ValueError(
            f"sample {sample_id!r}: offline_output is {length} tokens (end token included), "
            f"more than max_tokens={max_tokens}"
        )
    if max_model_len is not None and prompt_length is not None and length > max_model_len - prompt_length:
        raise ValueError(
            f"sample {sample_id!r}: offline_output is {length} tokens (end token included), more than "
            f"the {max_model_len - prompt_length} that max_model_len={max_model_len} leaves after its "
            f"{prompt_length}-token prompt"
        )


def offline_response(
    sample: RolloutSample,
    tokenizer: Any,
    end_token_id: int,
    placeholder_token_ids: Sequence[int] = (),
    *,
    max_tokens: int | None = None,
    max_model_len: int | None = None,
    prompt_length: int | None = None,
) -> RolloutResponse:
    """The sample's ``offline_output`` tokenised as the model would have produced it, closed by the
    end-of-turn token. Vision placeholder tokens in it are an error naming the sample (they would not
    match any vision features when the trainer reads prompt + response), and so is a response longer
    than the limits given (:func:`check_offline_length`)."""
    text = sample.offline_output
    if text is None:
        raise ValueError(f"sample {sample.id!r} has no offline_output to mix in")
    ids = tokenizer(text, add_special_tokens=False).input_ids
    found = sorted(set(ids) & set(placeholder_token_ids))
    if found:
        names = tokenizer.convert_ids_to_tokens(found)
        raise ValueError(f"sample {sample.id!r}: offline_output contains vision placeholder token(s) {names}")
    if not ids or ids[-1] != end_token_id:
        ids = [*ids, end_token_id]
    if max_tokens is not None:
        check_offline_length(sample.id, len(ids), max_tokens, max_model_len, prompt_length)
    return RolloutResponse(token_ids=ids, logprobs=None, text=text, finish_reason="offline", offline=True)


def assemble_group(
    online: Sequence[RolloutResponse], offline: RolloutResponse | None, n: int, inject: bool
) -> list[RolloutResponse]:
    """The n responses of a group: the online ones, the last replaced or completed by ``offline``."""
    if offline is None or not inject:
        if len(online) != n:
            raise ValueError(f"expected {n} online responses, got {len(online)}")
        return list(online)
    if len(online) not in (n - 1, n):
        raise ValueError(f"expected {n - 1} or {n} online responses to mix with, got {len(online)}")
    return [*online[: n - 1], offline]
