"""Routing a call's groups over a fleet's engines (pure): longest first to the least loaded engine."""

from __future__ import annotations

import pytest

from services.rollout.routing import assign, group_cost, shards


def test_a_group_costs_its_prompt_once_and_every_response_at_its_limit() -> None:
    assert group_cost(prompt_tokens=100, responses=8, max_tokens=16) == 228


def test_longest_first_to_the_least_loaded_engine() -> None:
    # costs 5, 3, 8, 4, 4 on 2 engines, by hand: 8→e0; 5→e1; 4 (index 3)→e1 (5<8); 4 (index 4)→e0 (8<9);
    # 3→e1 (9<12): loads 12 and 12
    assert assign([5, 3, 8, 4, 4], 2) == [1, 1, 0, 1, 0]
    # ties go to the lower engine, then the lower group index
    assert assign([1, 1, 1, 1], 2) == [0, 1, 0, 1]
    assert assign([7, 7], 1) == [0, 0]
    assert assign([], 3) == []


def test_more_engines_than_groups_leave_some_idle() -> None:
    assert assign([2, 9], 4) == [1, 0]
    assert shards([1, 0], range(4)) == {0: [1], 1: [0]}


def test_shards_keep_sample_order() -> None:
    assert shards([1, 0, 1, 0, 0], range(2)) == {0: [1, 3, 4], 1: [0, 2]}


def test_a_repeated_sample_s_groups_go_to_one_engine_weighed_together() -> None:
    # a (50) + a (50) = 100 → e0; b (40) → e1; c (30) → e1 (40<100). Without keys the two a's split:
    # a→e0, a→e1, b→e0 (tie: lower engine), c→e1
    assert assign([50, 40, 30, 50], 2) == [0, 0, 1, 1]
    assert assign([50, 40, 30, 50], 2, ["a", "b", "c", "a"]) == [0, 1, 1, 0]
    # no repeats: the same split as without keys
    assert assign([5, 3, 8, 4, 4], 2, list("vwxyz")) == assign([5, 3, 8, 4, 4], 2)
    with pytest.raises(ValueError, match="2 keys for 1 groups"):
        assign([1], 1, ["a", "b"])


def test_a_fleet_needs_an_engine() -> None:
    with pytest.raises(ValueError, match="at least one engine"):
        assign([1], 0)
