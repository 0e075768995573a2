"""DAPO dynamic sampling and overlong penalty against hand-computed values."""

import pytest
import torch

from services.trainer.algorithms.dapo import dynamic_sampling_keep, overlong_penalty

F64 = torch.float64


def test_dynamic_sampling_drops_groups_without_spread():
    # a = {0, 0}: unsolved, dropped; b = {1, 1}: solved, dropped; c = {1, 0}: kept;
    # d = {0.5}: a single response has no spread, dropped; e = {0.5, 0.5}: equal, dropped; groups interleave
    ids = ["a", "c", "b", "a", "e", "c", "b", "d", "e"]
    scores = torch.tensor([0, 1, 1, 0, 0.5, 0, 1, 0.5, 0.5], dtype=F64)
    keep, metrics = dynamic_sampling_keep(scores, ids)
    assert keep.tolist() == [False, True, False, False, False, True, False, False, False]
    assert metrics == {"groups": 5.0, "groups_kept": 1.0, "groups_all_zero": 1.0, "groups_all_one": 1.0}


def test_dynamic_sampling_keeps_everything_with_spread():
    keep, metrics = dynamic_sampling_keep(torch.tensor([0.1, 0.2, 0.9, 0.3]), torch.tensor([4, 4, 8, 8]))
    assert keep.all()
    assert metrics["groups_kept"] == 2.0


@pytest.mark.parametrize(
    ("factor", "expected"),
    [
        # max 20, buffer 4 -> expected length 16. lengths 10, 16: 0; 17: (16 - 17)/4 = -0.25; 18: -0.5;
        # 20: -4/4 = -1; 21 and 100: beyond the maximum, -1
        (1.0, [0.0, 0.0, -0.25, -0.5, -1.0, -1.0, -1.0]),
        (0.5, [0.0, 0.0, -0.125, -0.25, -0.5, -0.5, -0.5]),
    ],
)
def test_overlong_penalty(factor, expected):
    lengths = torch.tensor([10, 16, 17, 18, 20, 21, 100])
    penalty = overlong_penalty(lengths, max_length=20, buffer_length=4, factor=factor)
    torch.testing.assert_close(penalty, torch.tensor(expected))


def test_overlong_penalty_rejects_a_buffer_longer_than_the_maximum():
    with pytest.raises(ValueError, match=r"buffer_length \(30\) <= max_length \(20\)"):
        overlong_penalty(torch.tensor([5]), max_length=20, buffer_length=30)
