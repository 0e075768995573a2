"""Mixed offline/online groups: how many to generate, when to inject, how the group is assembled."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from services.rollout import mix_policy
from services.rollout.samples import RolloutResponse, RolloutSample


def online(k: int) -> list[RolloutResponse]:
    return [
        RolloutResponse(
            token_ids=[i],
            logprobs=[-1.0],
            text=str(i),
            finish_reason="stop",
            weight_version=0,
            weight_versions=((0, 0),),
        )
        for i in range(k)
    ]


OFFLINE = RolloutResponse(token_ids=[99], logprobs=None, text="x", finish_reason="offline", offline=True)


@pytest.mark.parametrize(
    ("n", "mixing", "has_offline", "threshold", "expected"),
    [
        (8, False, True, None, 8),  # policy off: all online
        (8, True, False, None, 8),  # no offline response for this sample
        (8, True, True, None, 7),  # always inject: n - 1 generated
        (8, True, True, 0.5, 8),  # gated: n generated, the last may be replaced
    ],
)
def test_online_count(n, mixing, has_offline, threshold, expected):
    assert mix_policy.online_count(n, mixing, has_offline, threshold) == expected


@pytest.mark.parametrize(
    ("accuracies", "threshold", "expected"),
    [
        ([0.0, 1.0, 0.0, 0.0], None, True),  # no gate
        ([0.0, 1.0, 0.0, 0.0], 0.5, True),  # mean 0.25 < 0.5
        ([1.0, 1.0, 0.0, 0.0], 0.5, False),  # mean 0.5 is not below 0.5
        ([1.0, 1.0, 1.0, 0.0], 0.5, False),  # mean 0.75
        ([0.0, 0.0], 0.0, False),  # mean 0 is not below 0: a zero threshold never injects
    ],
)
def test_should_inject(accuracies, threshold, expected):
    assert mix_policy.should_inject(accuracies, threshold) is expected


def test_the_gate_needs_scores():
    with pytest.raises(ValueError, match="at least one scored"):
        mix_policy.should_inject([], 0.5)


@pytest.mark.parametrize(
    ("n_online", "inject", "expected_texts"),
    [
        (3, True, ["0", "1", "2", "x"]),  # n-1 generated + offline
        (4, True, ["0", "1", "2", "x"]),  # n generated, the last replaced
        (4, False, ["0", "1", "2", "3"]),  # gate said no
    ],
)
def test_assemble_group(n_online, inject, expected_texts):
    group = mix_policy.assemble_group(online(n_online), OFFLINE, 4, inject)
    assert [r.text for r in group] == expected_texts
    assert [r.offline for r in group] == [t == "x" for t in expected_texts]


def test_assemble_group_rejects_wrong_sizes():
    with pytest.raises(ValueError, match="expected 4 online responses, got 3"):
        mix_policy.assemble_group(online(3), None, 4, False)
    with pytest.raises(ValueError, match="expected 3 or 4 online responses"):
        mix_policy.assemble_group(online(2), OFFLINE, 4, True)


class ToyTokenizer:
    """Ids are the characters' code points; token 0 ends the turn; "#" stands for a video placeholder."""

    def __call__(self, text, add_special_tokens=False):
        return SimpleNamespace(input_ids=[ord(c) for c in text])

    def convert_ids_to_tokens(self, ids):
        return [chr(i) for i in ids]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ab", [97, 98, 0]),  # end token appended
        ("ab\x00", [97, 98, 0]),  # already ends the turn: not doubled
    ],
)
def test_offline_response_is_tokenised_and_closed_with_the_end_token(text, expected):
    sample = RolloutSample(id="s", prompt="q", offline_output=text)
    response = mix_policy.offline_response(
        sample, ToyTokenizer(), end_token_id=0, placeholder_token_ids=(35,)
    )
    assert response.token_ids == expected
    assert response.offline and response.logprobs is None and response.finish_reason == "offline"
    assert response.text == text


def test_offline_response_with_a_placeholder_token_names_the_sample():
    sample = RolloutSample(id="clip-7", prompt="q", offline_output="a#b")
    with pytest.raises(ValueError, match=r"sample 'clip-7': offline_output contains vision placeholder.*'#'"):
        mix_policy.offline_response(sample, ToyTokenizer(), end_token_id=0, placeholder_token_ids=(35,))


@pytest.mark.parametrize(
    ("length", "max_tokens", "max_model_len", "prompt_length", "message"),
    [
        (12, 12, None, None, None),  # exactly max_tokens fits
        (13, 12, None, None, r"sample 's1': offline_output is 13 tokens .* more than max_tokens=12"),
        # 2048 - 2040 = 8 tokens left after the prompt
        (
            9,
            12,
            2048,
            2040,
            r"sample 's1': offline_output is 9 tokens .* more than the 8 that "
            r"max_model_len=2048 leaves after its 2040-token prompt",
        ),
        (8, 12, 2048, 2040, None),  # exactly the 8 left
    ],
)
def test_offline_length_limits(length, max_tokens, max_model_len, prompt_length, message):
    if message is None:
        mix_policy.check_offline_length("s1", length, max_tokens, max_model_len, prompt_length)
    else:
        with pytest.raises(ValueError, match=message):
            mix_policy.check_offline_length("s1", length, max_tokens, max_model_len, prompt_length)


def test_an_offline_response_longer_than_max_tokens_names_the_sample():
    # "abcd" → 4 ids + the end token = 5 > 4
    sample = RolloutSample(id="long-1", prompt="q", offline_output="abcd")
    with pytest.raises(ValueError, match=r"sample 'long-1': offline_output is 5 tokens"):
        mix_policy.offline_response(sample, ToyTokenizer(), end_token_id=0, max_tokens=4)
    assert len(mix_policy.offline_response(sample, ToyTokenizer(), 0, max_tokens=5).token_ids) == 5
