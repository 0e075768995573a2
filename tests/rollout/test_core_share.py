"""Colocated shards on vLLM's CPU backend each get their own cores (services/rollout/colocated.py):
every rank on Ray is local rank 0, so vLLM's own `auto` binding gave two shards the same cores."""

from __future__ import annotations

from services.rollout.environment import core_share


def test_ranks_on_one_host_split_its_cores_in_rank_order():
    assert core_share([0, 1], 0, 2) == [0] and core_share([0, 1], 1, 2) == [1]
    assert core_share(range(8), 1, 4) == [2, 3]
    assert core_share([0, 1, 2], 1, 2) == [1]  # the odd core is left to the system


def test_one_rank_or_more_ranks_than_cores_share_everything():
    assert core_share([0, 1], 0, 1) == [0, 1]
    assert core_share([0, 1], 2, 3) == [0, 1]
