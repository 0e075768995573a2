"""RL algorithms: advantage estimators, policy losses, KL, DAPO pieces, metrics and their config.

Everything is a pure torch function chosen by name from the config; see docs/algorithms.md.
"""

from services.trainer.algorithms.advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageEstimator,
    compute_advantages,
    outcome_token_rewards,
    register_advantage,
    sequence_returns,
)
from services.trainer.algorithms.aggregation import LossAgg, aggregate_loss, local_normaliser
from services.trainer.algorithms.config import (
    AlgorithmConfig,
    DynamicSamplingConfig,
    KLConfig,
    OverlongPenaltyConfig,
    validate_algorithm,
)
from services.trainer.algorithms.dapo import dynamic_sampling_keep, overlong_penalty
from services.trainer.algorithms.kl import (
    AdaptiveKLController,
    FixedKLController,
    KLEstimator,
    KLMode,
    apply_kl_reward_penalty,
    compute_kl_loss,
    kl_penalty,
    make_kl_controller,
)
from services.trainer.algorithms.metrics import (
    approx_kl,
    clip_fractions,
    entropy_from_logits,
    mean_entropy,
    reward_means_by_type,
)
from services.trainer.algorithms.policy_losses import (
    POLICY_LOSSES,
    PolicyLoss,
    compute_policy_loss,
    register_policy_loss,
)
from services.trainer.algorithms.rollout_correction import (
    RolloutCorrectionConfig,
    correction,
    mismatch_metrics,
    ratios,
)

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "POLICY_LOSSES",
    "AdaptiveKLController",
    "AdvantageEstimator",
    "AlgorithmConfig",
    "DynamicSamplingConfig",
    "FixedKLController",
    "KLConfig",
    "KLEstimator",
    "KLMode",
    "LossAgg",
    "OverlongPenaltyConfig",
    "PolicyLoss",
    "RolloutCorrectionConfig",
    "aggregate_loss",
    "apply_kl_reward_penalty",
    "approx_kl",
    "clip_fractions",
    "compute_advantages",
    "compute_kl_loss",
    "compute_policy_loss",
    "correction",
    "dynamic_sampling_keep",
    "entropy_from_logits",
    "kl_penalty",
    "local_normaliser",
    "make_kl_controller",
    "mean_entropy",
    "mismatch_metrics",
    "outcome_token_rewards",
    "overlong_penalty",
    "ratios",
    "register_advantage",
    "register_policy_loss",
    "reward_means_by_type",
    "sequence_returns",
    "validate_algorithm",
]
