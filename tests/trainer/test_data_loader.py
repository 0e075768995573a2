"""The stateful loader: seeded epochs, full batches, and a position that survives a checkpoint."""

from __future__ import annotations

import pytest

from services.trainer.data import DataError, StatefulLoader


def test_epochs_are_permutations_and_deterministic() -> None:
    a = StatefulLoader(10, 4, seed=3)
    batches = [a.next_batch() for _ in range(5)]
    assert sorted(batches[0] + batches[1]) == sorted(set(batches[0] + batches[1]))  # no repeats in an epoch
    assert a.epoch == 1  # 20 of the stream's 10 + 10: the second epoch is under way
    b = StatefulLoader(10, 4, seed=3)
    assert [b.next_batch() for _ in range(5)] == batches
    # the third batch is epoch 0's tail (2 samples) completed by epoch 1's first two
    order0 = StatefulLoader(10, 4, seed=3)._order()
    assert batches[2][:2] == order0[8:]


def test_without_shuffling_no_sample_is_skipped() -> None:
    loader = StatefulLoader(10, 4, seed=0, shuffle=False)
    seen = [i for _ in range(5) for i in loader.next_batch()]
    assert seen == [*range(10), *range(10)]


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
