"""AlgorithmConfig defaults, load-time rejections (each naming the fix), and selection by config alone."""

import pytest
import torch
from pydantic import ValidationError

from services.trainer.algorithms.advantages import AdvantageEstimator, compute_advantages
from services.trainer.algorithms.config import CLIP_RATIO_DEFAULTS, AlgorithmConfig, validate_algorithm
from services.trainer.algorithms.kl import KLEstimator
from services.trainer.algorithms.policy_losses import PolicyLoss, compute_policy_loss

F64 = torch.float64


def test_defaults():
    cfg = AlgorithmConfig()
    assert cfg.advantage_estimator is AdvantageEstimator.GRPO
    assert cfg.policy_loss is PolicyLoss.PPO
    assert cfg.clip_ratios == (0.2, 0.28)
    assert cfg.needs_reference_model


@pytest.mark.parametrize("loss", list(PolicyLoss))
def test_unset_clip_ratios_follow_the_chosen_loss(loss):
    assert AlgorithmConfig(policy_loss=loss).clip_ratios == CLIP_RATIO_DEFAULTS[loss]


def test_gspo_uses_the_papers_small_clip_and_explicit_values_win():
    assert AlgorithmConfig(policy_loss="gspo").clip_ratios == (3e-4, 4e-4)
    assert AlgorithmConfig(policy_loss="gspo", clip_ratio_high=1e-3).clip_ratios == (3e-4, 1e-3)


def test_a_dumped_config_loads_back_equal():
    cfg = AlgorithmConfig(advantage_estimator="gdpo", kl={"mode": "reward", "estimator": "mse"})
    again = AlgorithmConfig.model_validate(cfg.model_dump(mode="json"))
    assert again == cfg
    assert again.kl.estimator is KLEstimator.K2


def test_unknown_keys_are_rejected():
    with pytest.raises(ValidationError, match="clip_ratio\n"):
        AlgorithmConfig.model_validate({"clip_ratio": 0.2})
    with pytest.raises(ValidationError, match=r"kl\.kl_coef"):
        AlgorithmConfig.model_validate({"kl": {"kl_coef": 0.2}})


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"clip_ratio_dual": 0.9}, r"clip_ratio_dual=0.9 must be > 1 .* or null to turn dual clip off"),
        ({"clip_ratio_low": 1.5}, r"clip_ratio_low=1.5 must be in \(0, 1\]"),
        ({"clip_ratio_high": 0.0}, r"clip_ratio_high=0.0 must be > 0"),
        ({"loss_agg_norm_length": 512}, r"set algorithm.loss_agg=seq-mean-token-sum \(now token-mean\)"),
        ({"advantage_estimator": "gdpo", "gdpo_components": {}}, r"needs algorithm.gdpo_components"),
        ({"kl": {"controller": "adaptive"}}, r"set algorithm.kl.target"),
        ({"overlong_penalty": {"enabled": True}}, r"needs algorithm.overlong_penalty.max_length"),
        (
            {"overlong_penalty": {"enabled": True, "max_length": 100, "buffer_length": 200}},
            r"buffer_length=200",
        ),
        ({"gamma": 0.0}, r"gamma"),
        ({"luffy_shaping_gamma": -0.1}, r"luffy_shaping_gamma"),
        ({"advantage_estimator": "gae"}, r"advantage_estimator"),
        ({"loss_agg": "seq-mean"}, r"loss_agg"),
    ],
)
def test_standalone_rejections(settings, message):
    with pytest.raises(ValidationError, match=message):
        AlgorithmConfig.model_validate(settings)


def test_dual_clip_can_be_turned_off():
    assert AlgorithmConfig(clip_ratio_dual=None).policy_loss_params()["clip_ratio_dual"] is None


ROLLOUT_OK = {"rollout_n": 8, "has_offline_data": False, "has_greedy_baseline": False}


@pytest.mark.parametrize(
    ("settings", "rollout", "message"),
    [
        (
            {"advantage_estimator": "grpo"},
            {"rollout_n": 1},
            r"grpo compares .* rollout.n=1; set rollout.n >= 2",
        ),
        ({"advantage_estimator": "rloo"}, {"rollout_n": 1}, r"rloo .* set rollout.n >= 2"),
        ({"advantage_estimator": "gdpo"}, {"rollout_n": 1}, r"gdpo .* set rollout.n >= 2"),
        ({"advantage_estimator": "grpo_passk", "passk_k": 4}, {"rollout_n": 4}, r"lower algorithm.passk_k"),
        ({"advantage_estimator": "remax"}, {}, r"remax needs .* greedy .* or use advantage_estimator=grpo"),
        (
            {"policy_loss": "luffy"},
            {},
            r"luffy .* offline_output and set rollout.mix_policy=true, or use policy_loss=ppo",
        ),
        (
            {"advantage_estimator": "reinforce_plus_plus", "dynamic_sampling": {"enabled": True}},
            {"rollout_n": 1},
            r"dynamic_sampling.enabled=false",
        ),
        (
            {"overlong_penalty": {"enabled": True, "max_length": 4096}},
            {"max_response_length": 2048},
            r"max_length=4096 exceeds .* 2048",
        ),
    ],
)
def test_rollout_dependent_rejections(settings, rollout, message):
    with pytest.raises(ValueError, match=message):
        validate_algorithm(AlgorithmConfig.model_validate(settings), **{**ROLLOUT_OK, **rollout})


@pytest.mark.parametrize(
    ("settings", "rollout"),
    [
        ({}, {}),
        ({"advantage_estimator": "reinforce_plus_plus"}, {"rollout_n": 1}),
        ({"advantage_estimator": "remax"}, {"rollout_n": 1, "has_greedy_baseline": True}),
        ({"advantage_estimator": "grpo_passk", "passk_k": 4}, {"rollout_n": 5}),
        ({"policy_loss": "luffy"}, {"has_offline_data": True}),
    ],
)
def test_serviceable_combinations_pass(settings, rollout):
    validate_algorithm(AlgorithmConfig.model_validate(settings), **{**ROLLOUT_OK, **rollout})


def test_every_problem_is_reported_at_once():
    cfg = AlgorithmConfig(advantage_estimator="remax", policy_loss="luffy")
    with pytest.raises(ValueError, match=r"remax needs .*; policy_loss=luffy"):
        validate_algorithm(cfg, rollout_n=4, has_offline_data=False, has_greedy_baseline=False)


# --- a researcher picks the algorithm by configuration alone ------------------------------------------------


@pytest.mark.parametrize("estimator", list(AdvantageEstimator))
def test_every_estimator_runs_from_config(estimator):
    # two interleaved groups of 3 responses, k = 2 < 3; padding must stay 0
    cfg = AlgorithmConfig(advantage_estimator=estimator, passk_k=2)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]], dtype=F64)
    scores = torch.tensor([1.0, 0.0, 0.5, 0.0, 1.0, 1.0], dtype=F64)
    adv = compute_advantages(
        cfg.advantage_estimator,
        scores=scores,
        response_mask=mask,
        group_ids=["p", "q", "p", "q", "p", "q"],
        baseline_scores=torch.full((6,), 0.5, dtype=F64),
        reward_components={
            "accuracy": scores,
            "format": torch.tensor([1.0, 0.0, 1.0, 0.5, 1.0, 1.0], dtype=F64),
        },
        **cfg.advantage_params(),
    )
    assert adv.shape == (6, 3)
    assert torch.all(adv[mask == 0] == 0)
    assert torch.isfinite(adv).all()
    assert adv.abs().sum() > 0


@pytest.mark.parametrize("loss", list(PolicyLoss))
def test_every_policy_loss_runs_from_config(loss):
    cfg = AlgorithmConfig(policy_loss=loss)
    torch.manual_seed(3)
    log_probs = (-torch.rand(2, 3, dtype=F64)).requires_grad_(True)
    value, metrics = compute_policy_loss(
        cfg.policy_loss,
        log_probs=log_probs,
        old_log_probs=log_probs.detach() + 0.01,
        advantages=torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]], dtype=F64),
        response_mask=torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=F64),
        offline_mask=torch.tensor([True, False]),
        **cfg.policy_loss_params(),
    )
    assert value.dim() == 0
    assert torch.isfinite(torch.autograd.grad(value, log_probs)[0]).all()
    assert {"pg_loss", "ppo_kl"} <= metrics.keys()
