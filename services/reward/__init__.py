"""ReelRL's task-aware reward library: one scorer for the trainer's rewards and the evaluator's metrics.

from services.reward import score, score_batch
score({"problem_type": "multiple choice", "answer": "B", "options": ["A. red", "B. blue"]},
      "<think>…</think><answer>B</answer>")  # RewardResult(overall=1.0, accuracy=1.0, format=1.0, …)
"""

from services.reward import types as _types  # noqa: F401 - registers every problem type
from services.reward.client import HttpRewardClient, InProcessRewardClient, RewardClient, make_reward_client
from services.reward.config import RewardConfig, ScoringOptions
from services.reward.errors import InvalidSample, ItemTimeout, RewardError, UnknownProblemType
from services.reward.prompts import render_prompt, template_version
from services.reward.registry import ProblemType, all_types, canonical_name, get_type, known_names
from services.reward.result import RewardResult
from services.reward.sample import RewardSample
from services.reward.scoring import score, score_batch, score_items

__all__ = [
    "HttpRewardClient",
    "InProcessRewardClient",
    "InvalidSample",
    "ItemTimeout",
    "ProblemType",
    "RewardClient",
    "RewardConfig",
    "RewardError",
    "RewardResult",
    "RewardSample",
    "ScoringOptions",
    "UnknownProblemType",
    "all_types",
    "canonical_name",
    "get_type",
    "known_names",
    "make_reward_client",
    "render_prompt",
    "score",
    "score_batch",
    "score_items",
    "template_version",
]
