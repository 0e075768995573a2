"""Advantage estimators against hand-computed values (arithmetic in the comments)."""

import itertools
import math

import pytest
import torch

from services.trainer.algorithms.advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageEstimator,
    compute_advantages,
    gdpo_advantages,
    grpo_advantages,
    outcome_token_rewards,
    passk_advantages,
    reinforce_plus_plus_advantages,
    remax_advantages,
    rloo_advantages,
    sequence_returns,
)
from services.trainer.algorithms.kl import apply_kl_reward_penalty

F64 = torch.float64
S2 = math.sqrt(2.0)


def f64(values):
    return torch.tensor(values, dtype=F64)


def ones_mask(batch: int, length: int = 1) -> torch.Tensor:
    return torch.ones(batch, length, dtype=F64)


def seq(advantages: torch.Tensor) -> torch.Tensor:
    """The per-response advantage of a (B, 1) result."""
    return advantages[:, 0]


# --- GRPO -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scores", "group_ids", "norm_by_std", "expected"),
    [
        # one group {1,0,0,1}: mean 0.5; unbiased var = 4 * 0.25 / 3 = 1/3, std = 0.57735;
        # A = ±0.5 / 0.57735 = ±0.866025
        ([1, 0, 0, 1], [0, 0, 0, 0], True, [0.866025, -0.866025, -0.866025, 0.866025]),
        # interleaved groups a = {1, 0}, b = {3, 5}: means 0.5 and 4; stds sqrt(0.5) and sqrt(2);
        # A = 0.5/0.70711, -0.5/0.70711, -1/1.41421, 1/1.41421
        ([1, 3, 0, 5], ["a", "b", "a", "b"], True, [1 / S2, -1 / S2, -1 / S2, 1 / S2]),
        # Dr.GRPO: no std scaling, only the group mean is removed: 1-0.5, 3-4, 0-0.5, 5-4
        ([1, 3, 0, 5], ["a", "b", "a", "b"], False, [0.5, -1.0, -0.5, 1.0]),
    ],
)
def test_grpo_hand_computed(scores, group_ids, norm_by_std, expected):
    adv = grpo_advantages(f64(scores), ones_mask(len(scores)), group_ids, norm_by_std=norm_by_std, eps=0.0)
    torch.testing.assert_close(seq(adv), f64(expected), atol=1e-6, rtol=0)


def test_grpo_equal_rewards_give_zero_not_nan():
    # std 0: 0 / (0 + eps) = 0
    adv = grpo_advantages(f64([1.0, 1.0]), ones_mask(2), [3, 3])
    assert torch.equal(adv, torch.zeros(2, 1, dtype=F64))


def test_grpo_broadcasts_and_zeroes_padding():
    # scores {2, 0}: mean 1, std sqrt(2) -> A = ±0.70711 on every response token, 0 on padding
    mask = f64([[1, 1, 0], [1, 0, 0]])
    adv = grpo_advantages(f64([2.0, 0.0]), mask, torch.tensor([5, 5]), eps=0.0)
    torch.testing.assert_close(adv, f64([[1 / S2, 1 / S2, 0], [-1 / S2, 0, 0]]))


@pytest.mark.parametrize("norm_by_std", [True, False])
@pytest.mark.parametrize("shift", [-3.0, 0.25, 100.0])
def test_grpo_invariant_to_a_constant_added_within_a_group(shift, norm_by_std):
    torch.manual_seed(0)
    scores = torch.rand(8, dtype=F64)
    ids = torch.tensor([0, 1, 0, 1, 0, 1, 0, 1])
    shifted = torch.where(ids == 0, scores + shift, scores)  # only group 0 moves
    before = grpo_advantages(scores, ones_mask(8), ids, norm_by_std=norm_by_std)
    after = grpo_advantages(shifted, ones_mask(8), ids, norm_by_std=norm_by_std)
    torch.testing.assert_close(before, after)


def test_grpo_rejects_a_group_of_one_naming_it():
    with pytest.raises(ValueError, match=r"group 'lonely' has 1 response.*rollout.n >= 2"):
        grpo_advantages(f64([1.0, 0.0, 1.0]), ones_mask(3), ["pair", "pair", "lonely"])


# --- GRPO pass@k ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rewards", "k", "expected"),
    [
        # n=4, c=1 correct, k=2: mean = 1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5; std = sqrt(0.5 * 0.5) = 0.5
        # A_pos = (1 - 0.5) / 0.5 = 1; A_neg = (1 - 0.5 - C(2,1)/C(3,1)) / 0.5 = (0.5 - 2/3) / 0.5 = -1/3
        ([1, 0, 0, 0], 2, [1.0, -1 / 3, -1 / 3, -1 / 3]),
        # n=5, c=2, k=3: mean = 1 - C(3,3)/C(5,3) = 1 - 1/10 = 0.9; std = sqrt(0.9 * 0.1) = 0.3
        # A_pos = 0.1 / 0.3 = 1/3; A_neg = (1 - 0.9 - C(2,2)/C(4,2)) / 0.3 = (0.1 - 1/6) / 0.3 = -2/9
        ([0, 1, 0, 1, 0], 3, [-2 / 9, 1 / 3, -2 / 9, 1 / 3, -2 / 9]),
        # continuous rewards {0, 0.5, 1}, k=2: subsets {0,.5}->.5, {0,1}->1, {.5,1}->1
        # mean = 2.5/3 = 5/6; E[R^2] = (.25 + 1 + 1)/3 = 3/4; var = 3/4 - 25/36 = 1/18; std = 1/(3*sqrt2)
        # sample 0: its subsets give .5 and 1 -> 0.75; A = (0.75 - 5/6) * 3*sqrt2 = -sqrt2/4
        # sample 0.5: .5 and 1 -> 0.75 -> -sqrt2/4; sample 1: 1 and 1 -> 1; A = (1/6) * 3*sqrt2 = sqrt2/2
        ([0.0, 0.5, 1.0], 2, [-S2 / 4, -S2 / 4, S2 / 2]),
    ],
)
def test_passk_hand_computed(rewards, k, expected):
    adv = passk_advantages(f64(rewards), ones_mask(len(rewards)), [0] * len(rewards), k=k, eps=0.0)
    torch.testing.assert_close(seq(adv), f64(expected), atol=1e-9, rtol=0)


def _passk_by_enumeration(rewards: list[float], k: int) -> list[float]:
    """Literal definition: average best-of-k over all k-subsets (with and without each sample)."""
    subsets = list(itertools.combinations(range(len(rewards)), k))
    best = {s: max(rewards[j] for j in s) for s in subsets}
    mean = sum(best.values()) / len(subsets)
    std = math.sqrt(sum((b - mean) ** 2 for b in best.values()) / len(subsets))
    return [
        (sum(best[s] for s in subsets if i in s) / sum(1 for s in subsets if i in s) - mean) / std
        for i in range(len(rewards))
    ]


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_passk_matches_enumeration_with_ties_and_interleaved_groups(k):
    g0 = [0.2, 0.9, 0.5, 0.5, 0.1]
    g1 = [1.0, 0.0, 0.3, 0.7, 0.3]
    scores = f64([v for pair in zip(g0, g1, strict=True) for v in pair])  # groups interleaved
    adv = seq(passk_advantages(scores, ones_mask(10), [0, 1] * 5, k=k, eps=0.0))
    torch.testing.assert_close(adv[0::2], f64(_passk_by_enumeration(g0, k)))
    torch.testing.assert_close(adv[1::2], f64(_passk_by_enumeration(g1, k)))
    # the advantages of a group sum to zero: sum_i E[R | i in S] = n * mean
    torch.testing.assert_close(adv.sum(), torch.zeros((), dtype=F64))


def test_passk_needs_groups_larger_than_k():
    with pytest.raises(ValueError, match=r"grpo_passk with k=2: group 0 has 2 response"):
        passk_advantages(f64([1.0, 0.0]), ones_mask(2), [0, 0], k=2)


# --- RLOO, ReMax ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scores", "group_ids", "expected"),
    [
        # one group {1,0,0,1}: baseline of a 1 is (0+0+1)/3 = 1/3 -> 2/3; of a 0 is (1+0+1)/3 = 2/3 -> -2/3
        ([1, 0, 0, 1], [0, 0, 0, 0], [2 / 3, -2 / 3, -2 / 3, 2 / 3]),
        # group 7 = {3, 0, 6} (sum 9): 3 - 6/2 = 0, 0 - 9/2 = -4.5, 6 - 3/2 = 4.5; group 9 = {1, 5}: -4, 4
        ([3, 1, 0, 5, 6], [7, 9, 7, 9, 7], [0.0, -4.0, -4.5, 4.0, 4.5]),
    ],
)
def test_rloo_hand_computed(scores, group_ids, expected):
    adv = rloo_advantages(f64(scores), ones_mask(len(scores)), torch.tensor(group_ids))
    torch.testing.assert_close(seq(adv), f64(expected))


def test_remax_subtracts_the_greedy_reward():
    # 1 - 0.5, 0.5 - 0.5, 0 - 1
    adv = remax_advantages(f64([1.0, 0.5, 0.0]), f64([[1, 1], [1, 0], [1, 1]]), f64([0.5, 0.5, 1.0]))
    torch.testing.assert_close(adv, f64([[0.5, 0.5], [0.0, 0.0], [-1.0, -1.0]]))


def test_remax_rejects_a_baseline_of_the_wrong_shape():
    with pytest.raises(ValueError, match="one greedy reward per sampled response"):
        remax_advantages(f64([1.0, 0.5]), ones_mask(2), f64([0.5]))


# --- REINFORCE++ ------------------------------------------------------------------------------------------


def test_reinforce_plus_plus_discounts_then_whitens():
    # gamma 0.5. row 0 rewards [0, 0, 1]: G = [0.25, 0.5, 1]; row 1 [0, 0.5 | pad]: G = [0.25, 0.5]
    # unmasked G: .25 .5 1 .25 .5 -> mean 0.5; squared deviations .0625 0 .25 .0625 0 = .375
    # unbiased var .375/4 = .09375, std .306186; A = (G - .5)/.306186
    rewards = f64([[0, 0, 1], [0, 0.5, 0]])
    mask = f64([[1, 1, 1], [1, 1, 0]])
    adv = reinforce_plus_plus_advantages(rewards, mask, gamma=0.5)
    std = math.sqrt(0.09375)
    expected = f64([[-0.25 / std, 0, 0.5 / std], [-0.25 / std, 0, 0]])
    torch.testing.assert_close(adv, expected, atol=1e-6, rtol=0)


def test_reinforce_plus_plus_ignores_padding_and_skips_holes():
    # a hole at t=1 neither adds its reward (99) nor discounts: row 0 G_2 = 1, G_0 = 0 + 0.5 * 1 = 0.5;
    # row 1 rewards [1, 0 | pad 42]: G_1 = 0, G_0 = 1 + 0.5 * 0 = 1
    mask = f64([[1, 0, 1], [1, 1, 0]])
    with_junk = reinforce_plus_plus_advantages(f64([[0, 99, 1], [1, 0, 42]]), mask, gamma=0.5)
    clean = reinforce_plus_plus_advantages(f64([[0, 0, 1], [1, 0, 0]]), mask, gamma=0.5)
    torch.testing.assert_close(with_junk, clean)
    # unmasked G: .5, 1, 1, 0 -> mean .625; deviations -.125 .375 .375 -.625; squares sum
    # .015625 + .140625 + .140625 + .390625 = .6875; var .6875/3 = .229167; std .478714
    std = math.sqrt(0.6875 / 3)
    expected = f64([[-0.125 / std, 0, 0.375 / std], [0.375 / std, -0.625 / std, 0]])
    torch.testing.assert_close(clean, expected, atol=1e-6, rtol=0)


# --- GDPO -------------------------------------------------------------------------------------------------


def test_gdpo_normalises_each_component_within_its_group_then_whitens():
    # group 0: accuracy {1, 0} -> ±0.70711; format {1, 1} -> 0 (std 0)
    # group 1: accuracy {1, 1} -> 0;        format {0, 1} -> ∓0.70711
    # weights accuracy 2, format 1: S = [1.41421, -1.41421, -0.70711, 0.70711]; mean 0
    # sum of squares 2 + 2 + .5 + .5 = 5; unbiased var 5/3; std 1.290994 -> A = S / 1.290994
    components = {"accuracy": f64([1, 0, 1, 1]), "format": f64([1, 1, 0, 1])}
    adv = gdpo_advantages(components, {"accuracy": 2.0, "format": 1.0}, ones_mask(4), [0, 0, 1, 1])
    std = math.sqrt(5 / 3)
    expected = f64([S2 / std, -S2 / std, -1 / S2 / std, 1 / S2 / std])
    torch.testing.assert_close(seq(adv), expected, atol=1e-5, rtol=0)


def test_gdpo_keeps_combinations_apart_that_grpo_merges():
    # rewards (accuracy, format) for one group of 4: (1,0) (0,1) (1,1) (0,0)
    # GRPO on the sum [1, 1, 2, 0] gives (1,0) and (0,1) the same advantage; with accuracy weighted 2, GDPO
    # separates them: S = 2*a_hat + f_hat with a_hat = f_hat = ±0.866 -> (1,0): 2*.866 - .866 > (0,1)
    components = {"accuracy": f64([1, 0, 1, 0]), "format": f64([0, 1, 1, 0])}
    gdpo = seq(gdpo_advantages(components, {"accuracy": 2.0, "format": 1.0}, ones_mask(4), [0] * 4))
    grpo = seq(grpo_advantages(f64([1, 1, 2, 0]), ones_mask(4), [0] * 4))
    assert grpo[0] == grpo[1]
    assert gdpo[0] > gdpo[1]


def test_gdpo_names_missing_components():
    with pytest.raises(ValueError, match=r"\['length'\].*only carry \['accuracy'\]"):
        gdpo_advantages({"accuracy": f64([1, 0])}, {"length": 1.0}, ones_mask(2), [0, 0])


# --- entry point and registry -----------------------------------------------------------------------------


def test_outcome_token_rewards_puts_the_score_on_the_last_response_token():
    placed = outcome_token_rewards(f64([2.0, 3.0, 4.0]), f64([[1, 1, 0], [1, 1, 1], [1, 0, 1]]))
    torch.testing.assert_close(placed, f64([[0, 2, 0], [0, 0, 3], [0, 0, 4]]))


@pytest.mark.parametrize(
    ("dtype", "length"),
    [
        # bf16 has an 8-bit mantissa: position 257 rounded to 256 and tied with 256, so argmax put the score
        # on index 255 instead of 256; fp16 (11 bits) ties 2049 with 2048 the same way
        (torch.bfloat16, 257),
        (torch.float16, 2049),
    ],
)
def test_outcome_token_rewards_finds_the_last_token_of_long_low_precision_responses(dtype, length):
    mask = torch.zeros(1, length + 3, dtype=dtype)
    mask[0, :length] = 1
    placed = outcome_token_rewards(torch.tensor([1.0], dtype=dtype), mask)
    assert placed.dtype == dtype
    assert placed.nonzero().tolist() == [[0, length - 1]]


def test_compute_advantages_derives_scores_from_token_rewards():
    # token rewards sum to scores {1, 0}: RLOO gives 1 - 0 = 1 and 0 - 1 = -1
    mask = f64([[1, 1], [1, 0]])
    adv = compute_advantages(
        "rloo", token_rewards=f64([[0.25, 0.75], [0.0, 5.0]]), response_mask=mask, group_ids=[0, 0]
    )
    torch.testing.assert_close(adv, f64([[1, 1], [-1, 0]]))


def test_compute_advantages_names_a_missing_input():
    with pytest.raises(ValueError, match="'remax' needs the input 'baseline_scores'"):
        compute_advantages(AdvantageEstimator.REMAX, scores=f64([1.0]), response_mask=ones_mask(1))


def test_compute_advantages_rejects_unknown_names_listing_known_ones():
    with pytest.raises(ValueError, match="unknown advantage estimator 'ppo'; known: grpo, grpo_passk"):
        compute_advantages("ppo", scores=f64([1.0]), response_mask=ones_mask(1))


def test_every_estimator_is_registered():
    assert ADVANTAGE_ESTIMATORS.unregistered() == []


# --- KL as a reward penalty reaches every estimator --------------------------------------------------------

# One group of 3 responses, outcome scores [1, 1, 0]; the third has one token. k1 KL per token
# d = logp - ref = [[0.6, 0.4], [0, 0], [0 | pad]], coef 0.5, so apply_kl_reward_penalty gives
# token rewards [[0 - 0.3, 1 - 0.2], [0, 1], [0 | 0]] = [[-0.3, 0.8], [0, 1], [0, 0]] and the returns
# (masked sums) R = [0.5, 1, 0]: the first response pays 0.5 for its summed KL of 1.
KL_SCORES = [1.0, 1.0, 0.0]
KL_MASK = [[1, 1], [1, 1], [1, 0]]
KL_D = [[0.6, 0.4], [0.0, 0.0], [0.0, 7.0]]


def _penalised_token_rewards() -> torch.Tensor:
    mask = f64(KL_MASK)
    token_rewards = outcome_token_rewards(f64(KL_SCORES), mask)
    penalised, _ = apply_kl_reward_penalty(
        token_rewards, f64(KL_D), torch.zeros(3, 2, dtype=F64), mask, coef=0.5, estimator="k1"
    )
    return penalised


def test_penalised_token_rewards_and_their_returns():
    penalised = _penalised_token_rewards()
    torch.testing.assert_close(penalised, f64([[-0.3, 0.8], [0.0, 1.0], [0.0, 0.0]]))
    torch.testing.assert_close(sequence_returns(penalised, f64(KL_MASK)), f64([0.5, 1.0, 0.0]))


STD_RPP_BEFORE = math.sqrt(0.2)
STD_RPP_AFTER = math.sqrt(0.178)
STD_GDPO_AFTER = math.sqrt((2 + 1 / math.sqrt(3) + 1 / 6) / 2)

KL_CASES = [
    # GRPO. before: [1, 1, 0], mean 2/3, deviations [1/3, 1/3, -2/3], unbiased var (1/9+1/9+4/9)/2 = 1/3,
    #   std 0.577350 -> [0.577350, 0.577350, -1.154701]
    # after: R = [0.5, 1, 0], mean 0.5, deviations [0, 0.5, -0.5], var 0.5/2 = 0.25, std 0.5 -> [0, 1, -1]
    ("grpo", [1 / math.sqrt(3), 1 / math.sqrt(3), -2 / math.sqrt(3)], [0.0, 1.0, -1.0]),
    # RLOO. before: [1 - (1+0)/2, 1 - (1+0)/2, 0 - (1+1)/2] = [0.5, 0.5, -1]
    # after: [0.5 - (1+0)/2, 1 - (0.5+0)/2, 0 - (0.5+1)/2] = [0, 0.75, -0.75]
    ("rloo", [0.5, 0.5, -1.0], [0.0, 0.75, -0.75]),
    # ReMax, greedy baseline 0.5 for every response (the greedy response's own score, unpenalised).
    # before: [0.5, 0.5, -0.5]; after: [0.5 - 0.5, 1 - 0.5, 0 - 0.5] = [0, 0.5, -0.5]
    ("remax", [0.5, 0.5, -0.5], [0.0, 0.5, -0.5]),
    # pass@2 of 3. before: [1, 1, 0]: every pair holds a 1, mean 1, std 0 -> 0 / (0 + eps) = 0
    # after: sorted R a=0 < b=0.5 < c=1; pair maxima {a,b} 0.5, {a,c} 1, {b,c} 1: mean 2.5/3 = 5/6,
    #   E[max^2] = 2.25/3 = 0.75, var 0.75 - 25/36 = 1/18, std 0.235702; with a or b: (0.5+1)/2 = 0.75 ->
    #   (0.75 - 5/6)/0.235702 = -0.353553; with c: 1 -> (1/6)/0.235702 = 0.707107
    ("grpo_passk", [0.0, 0.0, 0.0], [-0.353553, 0.707107, -0.353553]),
    # GDPO, accuracy [1, 1, 0] -> Â [1, 1, -2]/sqrt3, format [0, 1, 1] -> Â [-2, 1, 1]/sqrt3 (same group std).
    # before: S = [-1, 2, -1]/sqrt3; mean 0, unbiased var (1+4+1)/3/2 = 1 -> A = S = [-0.577350, 1.154701, ...]
    # after: the penalty p = scores - R = [0.5, 0, 0], centred in the group (mean 1/6): [1/3, -1/6, -1/6],
    #   subtracted: S = [-0.577350 - 0.333333, 1.154701 + 0.166667, -0.577350 + 0.166667]
    #   = [-0.910684, 1.321367, -0.410684]; mean 0, var (0.829345 + 1.746011 + 0.168661)/2 = 1.372008
    #   (exactly (2 + 1/sqrt3 + 1/6)/2), std 1.171328 -> A = [-0.777480, 1.128094, -0.350614]
    (
        "gdpo",
        [-1 / math.sqrt(3), 2 / math.sqrt(3), -1 / math.sqrt(3)],
        [
            (-1 / math.sqrt(3) - 1 / 3) / STD_GDPO_AFTER,
            (2 / math.sqrt(3) + 1 / 6) / STD_GDPO_AFTER,
            (-1 / math.sqrt(3) + 1 / 6) / STD_GDPO_AFTER,
        ],
    ),
]


@pytest.mark.parametrize(("estimator", "before", "after"), KL_CASES)
def test_kl_reward_penalty_changes_every_sequence_estimator_by_the_hand_computed_amount(
    estimator, before, after
):
    mask = f64(KL_MASK)
    inputs = {
        "response_mask": mask,
        "group_ids": ["q", "q", "q"],
        "baseline_scores": f64([0.5, 0.5, 0.5]),
        "reward_components": {"accuracy": f64([1.0, 1.0, 0.0]), "format": f64([0.0, 1.0, 1.0])},
        "component_weights": {"accuracy": 1.0, "format": 1.0},
        "k": 2,
    }
    without_kl = compute_advantages(estimator, scores=f64(KL_SCORES), **inputs)
    # the trainer's call with kl.mode=reward: the outcome scores and the penalised token rewards
    with_kl = compute_advantages(
        estimator, scores=f64(KL_SCORES), token_rewards=_penalised_token_rewards(), **inputs
    )
    # every response token carries its response's advantage; padding stays 0
    torch.testing.assert_close(without_kl, f64(before).unsqueeze(-1) * mask, atol=1e-5, rtol=0)
    torch.testing.assert_close(with_kl, f64(after).unsqueeze(-1) * mask, atol=1e-5, rtol=0)


def test_kl_reward_penalty_changes_reinforce_plus_plus_per_token():
    # gamma 1. before: token rewards [[0, 1], [0, 1], [0 | pad]] -> G [[1, 1], [1, 1], [0]]; unmasked mean
    #   0.8, deviations 0.2 x4 and -0.8, unbiased var (4 * 0.04 + 0.64)/4 = 0.2
    # after: [[-0.3, 0.8], [0, 1], [0]] -> G [[0.5, 0.8], [1, 1], [0]]; mean 3.3/5 = 0.66, deviations
    #   [-0.16, 0.14, 0.34, 0.34, -0.66], squares 0.0256 + 0.0196 + 0.1156 + 0.1156 + 0.4356 = 0.712, var 0.178
    mask = f64(KL_MASK)
    without_kl = compute_advantages(
        "reinforce_plus_plus", scores=f64(KL_SCORES), response_mask=mask, gamma=1.0
    )
    with_kl = compute_advantages(
        "reinforce_plus_plus",
        scores=f64(KL_SCORES),
        token_rewards=_penalised_token_rewards(),
        response_mask=mask,
        gamma=1.0,
    )
    s, t = STD_RPP_BEFORE, STD_RPP_AFTER
    torch.testing.assert_close(without_kl, f64([[0.2 / s, 0.2 / s], [0.2 / s, 0.2 / s], [-0.8 / s, 0]]))
    torch.testing.assert_close(
        with_kl, f64([[-0.16 / t, 0.14 / t], [0.34 / t, 0.34 / t], [-0.66 / t, 0]]), atol=1e-6, rtol=0
    )


def test_gdpo_without_the_outcome_cannot_separate_the_penalty_and_says_so():
    with pytest.raises(ValueError, match=r"gdpo .* give scores= .* together with token_rewards"):
        compute_advantages(
            "gdpo",
            token_rewards=_penalised_token_rewards(),
            response_mask=f64(KL_MASK),
            group_ids=[0, 0, 0],
            reward_components={"accuracy": f64([1.0, 1.0, 0.0])},
            component_weights={"accuracy": 1.0},
        )


def test_gdpo_with_unpenalised_token_rewards_is_unchanged():
    # token rewards that only carry the outcome: the penalty is 0 and GDPO matches the scores-only call
    mask = f64(KL_MASK)
    inputs = {
        "response_mask": mask,
        "group_ids": [0, 0, 0],
        "reward_components": {"accuracy": f64([1.0, 1.0, 0.0]), "format": f64([0.0, 1.0, 1.0])},
        "component_weights": {"accuracy": 1.0, "format": 1.0},
    }
    plain = compute_advantages("gdpo", scores=f64(KL_SCORES), **inputs)
    both = compute_advantages(
        "gdpo", scores=f64(KL_SCORES), token_rewards=outcome_token_rewards(f64(KL_SCORES), mask), **inputs
    )
    torch.testing.assert_close(both, plain)
