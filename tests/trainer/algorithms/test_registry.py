"""The registry's call contract: each variant gets the inputs it names, and a name no variant takes raises."""

from enum import StrEnum

import pytest
import torch

from services.trainer.algorithms.advantages import compute_advantages
from services.trainer.algorithms.policy_losses import compute_policy_loss
from services.trainer.algorithms.registry import Registry

F64 = torch.float64


class Shape(StrEnum):
    SQUARE = "square"
    RECT = "rect"


def make_registry() -> Registry[Shape]:
    shapes: Registry[Shape] = Registry("shape", Shape)

    @shapes.register(Shape.SQUARE)
    def square(side: float) -> float:
        return side * side

    @shapes.register(Shape.RECT)
    def rect(side: float, height: float = 1.0) -> float:
        return side * height

    return shapes


def test_an_input_only_some_variants_take_is_passed_to_those_and_dropped_for_the_others():
    shapes = make_registry()
    # square ignores height: 3 * 3 = 9; rect uses it: 3 * 2 = 6
    assert shapes.call("square", side=3.0, height=2.0) == 9.0
    assert shapes.call("rect", side=3.0, height=2.0) == 6.0


def test_an_input_no_variant_takes_raises_naming_it_and_the_accepted_names():
    shapes = make_registry()
    with pytest.raises(ValueError, match=r"'hieght'.* no shape takes .*accepted: height, side"):
        shapes.call("rect", side=3.0, hieght=2.0)


def test_an_unknown_input_raises_even_when_its_value_is_none():
    # None counts as absent for known names; an unknown name is a caller bug whatever its value
    with pytest.raises(ValueError, match="'colour'"):
        make_registry().call("square", side=1.0, colour=None)


def test_misspelled_behaviour_log_probs_is_refused_not_taken_as_probability_one():
    # LUFFY used to drop behavior_log_probs= and assume behaviour probability 1 for the offline token
    with pytest.raises(ValueError, match=r"'behavior_log_probs'.*did you mean 'behaviour_log_probs'"):
        compute_policy_loss(
            "luffy",
            log_probs=torch.log(torch.tensor([[0.5]], dtype=F64)),
            old_log_probs=torch.zeros(1, 1, dtype=F64),
            advantages=torch.ones(1, 1, dtype=F64),
            response_mask=torch.ones(1, 1, dtype=F64),
            loss_agg="token-mean",
            offline_mask=torch.tensor([True]),
            behavior_log_probs=torch.log(torch.tensor([[0.25]], dtype=F64)),
            clip_ratio_low=0.2,
            clip_ratio_high=0.28,
        )


def test_a_misspelled_advantage_input_is_refused():
    with pytest.raises(ValueError, match=r"'group_id'.* no advantage estimator takes"):
        compute_advantages(
            "grpo",
            scores=torch.tensor([1.0, 0.0], dtype=F64),
            response_mask=torch.ones(2, 1, dtype=F64),
            group_id=[0, 0],
        )


def test_inputs_for_other_variants_stay_allowed_in_one_uniform_call():
    # the trainer passes everything it has; GRPO ignores the ReMax baseline and the LUFFY-only inputs
    # never reach PPO. scores {1, 0}: A = ±0.5 / std(sqrt(0.5)) = ±0.707107 (eps 1e-6 -> ±0.707106)
    adv = compute_advantages(
        "grpo",
        scores=torch.tensor([1.0, 0.0], dtype=F64),
        response_mask=torch.ones(2, 1, dtype=F64),
        group_ids=[0, 0],
        baseline_scores=torch.tensor([0.5, 0.5], dtype=F64),
        gamma=1.0,
        eps=0.0,
    )
    torch.testing.assert_close(adv, torch.tensor([[0.5**0.5], [-(0.5**0.5)]], dtype=F64))
    loss, _ = compute_policy_loss(
        "ppo",
        log_probs=torch.zeros(1, 1, dtype=F64),
        old_log_probs=torch.zeros(1, 1, dtype=F64),
        advantages=torch.ones(1, 1, dtype=F64),
        response_mask=torch.ones(1, 1, dtype=F64),
        loss_agg="token-mean",
        offline_mask=torch.tensor([True]),
        shaping_gamma=0.1,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
    )
    # r = 1, A = 1 -> -1 (the offline mask is LUFFY's; PPO treats the token as on-policy)
    assert loss.item() == -1.0
