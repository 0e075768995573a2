"""verl's custom reward hook (``custom_reward_function.path`` of its trainer) calling the product's reward
library: the score ReelRL trains on (``overall``). The ground truth verl hands over is the reward
library's sample as JSON (bench/peers/__main__.py writes it into verl's parquet rows)."""

from __future__ import annotations

import json
from functools import cache
from typing import Any


@cache
def _client():
    from services.reward import make_reward_client

    return make_reward_client()


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None) -> float:
    (result,) = _client().score_batch([(json.loads(ground_truth), solution_str)])
    return result.overall
