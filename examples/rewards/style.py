"""Example reward functions for `reward.functions` (docs/rewards.md, "Reward functions from a file").

Each is called with the sample (a ``services.reward.RewardSample``: ``problem_type``, ``answer``,
``options``, ``problem``, …) and the response text, and returns a number or a dict of named numbers.
"""

from __future__ import annotations


def answer_first(sample, response: str) -> dict[str, float]:
    """1 when the response opens with its <answer> tag (no preamble before the answer), with how many
    characters came before the tag logged beside it as reward/answer_first/preamble_chars."""
    at = response.find("<answer>")
    preamble = len(response) if at < 0 else len(response[:at].strip())
    return {"overall": 1.0 if at >= 0 and preamble == 0 else 0.0, "preamble_chars": float(preamble)}


def brevity(sample, response: str) -> float:
    """1 for a response of at most 40 characters, falling to 0 at 400: a nudge against rambling."""
    return max(0.0, min(1.0, (400 - len(response)) / 360))
