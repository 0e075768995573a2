"""``AlgorithmConfig``: every algorithm knob, its one default, and the checks that reject impossible
combinations at load time with the fix in the message.

Checks that need only the algorithm section are model validators; checks that need facts about the
rollout (responses per prompt, offline data, a greedy baseline) are in :func:`validate_algorithm`, which
the trainer's config loader calls once the whole tree is known.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from services.trainer.algorithms.advantages import GROUP_ESTIMATORS, AdvantageEstimator
from services.trainer.algorithms.aggregation import LossAgg
from services.trainer.algorithms.kl import KLEstimator, KLMode
from services.trainer.algorithms.policy_losses import PolicyLoss
from services.trainer.algorithms.rollout_correction import RolloutCorrectionConfig

CLIP_RATIO_DEFAULTS: dict[PolicyLoss, tuple[float, float]] = {
    # (low, high). PPO and LUFFY's on-policy part: DAPO's clip-higher 0.2 / 0.28.
    PolicyLoss.PPO: (0.2, 0.28),
    PolicyLoss.LUFFY: (0.2, 0.28),
    # GSPO's sequence ratio is a geometric mean, far closer to 1 than token ratios: the paper's 3e-4 / 4e-4.
    PolicyLoss.GSPO: (3e-4, 4e-4),
    PolicyLoss.GSPO_TOKEN: (3e-4, 4e-4),
    # CISPO imposes no lower bound on the weight (MiniMax-M1 sets eps_low large); 1.0 clips at 0.
    PolicyLoss.CISPO: (1.0, 0.28),
}
"""Clip ratios used when ``clip_ratio_low``/``clip_ratio_high`` are left unset: they depend on the loss."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class KLConfig(_Section):
    """``algorithm.kl``: KL to a frozen reference model; ``mode: off`` loads no reference model."""

    mode: KLMode = KLMode.LOSS
    estimator: KLEstimator = KLEstimator.K3
    coef: float = Field(default=1e-2, ge=0.0)
    controller: Literal["fixed", "adaptive"] = "fixed"
    target: float | None = Field(default=None, gt=0.0, description="adaptive controller: KL to approach")
    horizon: int = Field(default=10_000, gt=0, description="adaptive controller: samples per full correction")

    @model_validator(mode="after")
    def _adaptive_needs_target(self) -> KLConfig:
        if self.controller == "adaptive" and self.target is None:
            raise ValueError(
                "algorithm.kl.controller=adaptive needs a target KL: set algorithm.kl.target (e.g. 0.1)"
            )
        return self


class DynamicSamplingConfig(_Section):
    """``algorithm.dynamic_sampling``: DAPO online filtering of groups whose rewards are all equal."""

    enabled: bool = False
    metric: Literal["accuracy", "overall", "format"] = Field(
        default="accuracy", description="reward component the filter looks at"
    )
    max_rounds: int = Field(default=10, ge=1, description="generation rounds per step before giving up")


class OverlongPenaltyConfig(_Section):
    """``algorithm.overlong_penalty``: DAPO soft overlong punishment added to the reward."""

    enabled: bool = False
    max_length: int | None = Field(default=None, gt=0, description="response length that earns -factor")
    buffer_length: int = Field(default=256, gt=0, description="length of the linear ramp before max_length")
    factor: float = Field(default=1.0, ge=0.0)

    @model_validator(mode="after")
    def _lengths(self) -> OverlongPenaltyConfig:
        if not self.enabled:
            return self
        if self.max_length is None:
            raise ValueError(
                "algorithm.overlong_penalty.enabled=true needs algorithm.overlong_penalty.max_length "
                "(usually the rollout's max response length)"
            )
        if self.buffer_length > self.max_length:
            raise ValueError(
                f"algorithm.overlong_penalty.buffer_length={self.buffer_length} exceeds max_length="
                f"{self.max_length}; use a buffer shorter than the maximum (DAPO: 4096 of 20480)"
            )
        return self


class AlgorithmConfig(_Section):
    """``algorithm``: advantage estimator, policy loss, aggregation, KL, DAPO pieces."""

    advantage_estimator: AdvantageEstimator = AdvantageEstimator.GRPO
    norm_adv_by_std: bool = Field(default=True, description="grpo: divide by the group std (false = Dr.GRPO)")
    passk_k: int = Field(default=4, ge=1, description="grpo_passk: the k of pass@k, below rollout.n")
    gamma: float = Field(default=1.0, gt=0.0, le=1.0, description="reinforce_plus_plus: discount")
    gdpo_components: dict[str, float] = Field(
        default_factory=lambda: {"accuracy": 1.0, "format": 1.0},
        description="gdpo: reward component name -> weight",
    )
    policy_loss: PolicyLoss = PolicyLoss.PPO
    clip_ratio_low: float | None = Field(default=None, description="unset: CLIP_RATIO_DEFAULTS[policy_loss]")
    clip_ratio_high: float | None = Field(default=None, description="unset: CLIP_RATIO_DEFAULTS[policy_loss]")
    clip_ratio_dual: float | None = Field(default=3.0, description="dual-clip c > 1 (ppo, luffy); null: off")
    loss_agg: LossAgg = LossAgg.TOKEN_MEAN
    loss_agg_norm_length: int | None = Field(
        default=None, gt=0, description="seq-mean-token-sum: constant divisor (Dr.GRPO: max response length)"
    )
    luffy_shaping_gamma: float = Field(default=0.1, gt=0.0, description="luffy: f(r) = r / (r + gamma)")
    kl: KLConfig = Field(default_factory=KLConfig)
    dynamic_sampling: DynamicSamplingConfig = Field(default_factory=DynamicSamplingConfig)
    overlong_penalty: OverlongPenaltyConfig = Field(default_factory=OverlongPenaltyConfig)
    rollout_correction: RolloutCorrectionConfig = Field(default_factory=RolloutCorrectionConfig)

    @model_validator(mode="after")
    def _standalone_checks(self) -> AlgorithmConfig:
        problems = _standalone_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def clip_ratios(self) -> tuple[float, float]:
        """``(low, high)`` in effect: the configured values, else the chosen loss's defaults."""
        low, high = CLIP_RATIO_DEFAULTS[self.policy_loss]
        return (
            low if self.clip_ratio_low is None else self.clip_ratio_low,
            high if self.clip_ratio_high is None else self.clip_ratio_high,
        )

    @property
    def needs_reference_model(self) -> bool:
        """False when KL is off: the trainer then loads no reference model at all."""
        return self.kl.mode is not KLMode.OFF

    @property
    def needs_old_log_probs(self) -> bool:
        """The old log-probs need their own pass before the update even when it is the only one on
        these weights: KL's reference pass goes with it, and MIS fixes its normaliser from them."""
        return self.needs_reference_model or self.rollout_correction.needs_old_log_probs

    def advantage_params(self) -> dict[str, Any]:
        """Keyword settings for :func:`compute_advantages` (each estimator takes the ones it names)."""
        return {
            "norm_by_std": self.norm_adv_by_std,
            "k": self.passk_k,
            "gamma": self.gamma,
            "component_weights": dict(self.gdpo_components),
        }

    def policy_loss_params(self) -> dict[str, Any]:
        """Keyword settings for :func:`compute_policy_loss` (each loss takes the ones it names)."""
        low, high = self.clip_ratios
        return {
            "loss_agg": self.loss_agg,
            "norm_length": self.loss_agg_norm_length,
            "clip_ratio_low": low,
            "clip_ratio_high": high,
            "clip_ratio_dual": self.clip_ratio_dual,
            "shaping_gamma": self.luffy_shaping_gamma,
        }


def _standalone_problems(cfg: AlgorithmConfig) -> list[str]:
    problems = []
    low, high = cfg.clip_ratios
    if not 0.0 < low <= 1.0:
        problems.append(
            f"algorithm.clip_ratio_low={low} must be in (0, 1]: the ratio is clipped below at 1 - clip_ratio_low"
        )
    if high <= 0.0:
        problems.append(f"algorithm.clip_ratio_high={high} must be > 0 (e.g. 0.28 for DAPO clip-higher)")
    if cfg.clip_ratio_dual is not None and cfg.clip_ratio_dual <= 1.0:
        problems.append(
            f"algorithm.clip_ratio_dual={cfg.clip_ratio_dual} must be > 1 (it caps the loss of "
            "negative-advantage tokens at c*|A|; 3.0 is usual) or null to turn dual clip off"
        )
    if cfg.loss_agg_norm_length is not None and cfg.loss_agg is not LossAgg.SEQ_MEAN_TOKEN_SUM:
        problems.append(
            f"algorithm.loss_agg_norm_length applies to loss_agg=seq-mean-token-sum only; remove it or set "
            f"algorithm.loss_agg=seq-mean-token-sum (now {cfg.loss_agg.value})"
        )
    if cfg.advantage_estimator is AdvantageEstimator.GDPO and not cfg.gdpo_components:
        problems.append(
            "algorithm.advantage_estimator=gdpo needs algorithm.gdpo_components, e.g. {accuracy: 1.0, format: 1.0}"
        )
    bad_weights = {name: w for name, w in cfg.gdpo_components.items() if not math.isfinite(w)}
    if bad_weights:
        problems.append(f"algorithm.gdpo_components has non-finite weights {bad_weights}")
    return problems


def validate_algorithm(
    cfg: AlgorithmConfig,
    *,
    rollout_n: int,
    has_offline_data: bool,
    has_greedy_baseline: bool,
    max_response_length: int | None = None,
) -> None:
    """Reject algorithm settings that the rollout cannot serve.

    Args:
        rollout_n: responses sampled per prompt (offline ones included).
        has_offline_data: the run mixes in offline trajectories (``offline_output`` with mix-policy on).
        has_greedy_baseline: the rollout also generates a greedy response per prompt and scores it.
        max_response_length: the rollout's response budget, if known.

    Raises:
        ValueError: listing every problem, each with the setting to change.
    """
    problems = []
    estimator = cfg.advantage_estimator
    if estimator in GROUP_ESTIMATORS and rollout_n < 2:
        problems.append(
            f"advantage_estimator={estimator.value} compares the responses to one prompt, but rollout.n="
            f"{rollout_n}; set rollout.n >= 2 (e.g. 8) or use advantage_estimator=reinforce_plus_plus or remax"
        )
    if estimator is AdvantageEstimator.GRPO_PASSK and rollout_n >= 2 and cfg.passk_k >= rollout_n:
        problems.append(
            f"advantage_estimator=grpo_passk with passk_k={cfg.passk_k} needs rollout.n > passk_k "
            f"(rollout.n={rollout_n}); lower algorithm.passk_k or raise rollout.n"
        )
    if estimator is AdvantageEstimator.REMAX and not has_greedy_baseline:
        problems.append(
            "advantage_estimator=remax needs the reward of a greedy (temperature 0) response per prompt as "
            "its baseline, and the rollout produces none; enable the rollout's greedy baseline or use "
            "advantage_estimator=grpo"
        )
    if cfg.policy_loss is PolicyLoss.LUFFY and not has_offline_data:
        problems.append(
            "policy_loss=luffy learns from offline trajectories, and this run has none; give samples an "
            "offline_output and set rollout.mix_policy=true, or use policy_loss=ppo"
        )
    if cfg.dynamic_sampling.enabled and rollout_n < 2:
        problems.append(
            f"dynamic_sampling drops groups whose responses all score alike; with rollout.n={rollout_n} every "
            "group would be dropped; set rollout.n >= 2 or algorithm.dynamic_sampling.enabled=false"
        )
    overlong = cfg.overlong_penalty
    if (
        overlong.enabled
        and max_response_length is not None
        and overlong.max_length is not None
        and overlong.max_length > max_response_length
    ):
        problems.append(
            f"algorithm.overlong_penalty.max_length={overlong.max_length} exceeds the rollout's max response "
            f"length {max_response_length}, so the penalty can never reach -factor; set it <= "
            f"{max_response_length}"
        )
    if problems:
        raise ValueError("invalid algorithm configuration: " + "; ".join(problems))
