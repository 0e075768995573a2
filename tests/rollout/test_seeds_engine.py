"""Seeded requests on a real engine (vLLM on CPU): a group's tokens depend on the seed key and the
sample, not on what else the call holds (so not on how many engines share a step), and response i of
a group is sampled with group_seed + i, the rule services/rollout/seeds.py documents."""

from __future__ import annotations

import pytest

from services.rollout.seeds import SeedKey, group_seed

pytestmark = [pytest.mark.integration, pytest.mark.slow]
FAMILY = "qwen2_5_vl"


def tokens(groups) -> list[list[list[int]]]:
    return [[r.token_ids for r in g.responses] for g in groups]


def test_a_group_s_tokens_depend_on_its_key_and_sample_alone(rollout_engine, video_sample) -> None:
    engine = rollout_engine(FAMILY)
    a = video_sample(FAMILY, "wide", "seeded-a")
    b = video_sample(FAMILY, "tall_in_time", "seeded-b")
    both = engine.rollout([a, b], key=SeedKey(3))
    alone = engine.rollout([a], key=SeedKey(3))
    assert tokens(both)[0] == tokens(alone)[0]
    assert tokens(engine.rollout([b, a], key=SeedKey(3))) == tokens(both)[::-1]
    # another step samples other tokens (the temperature-1 responses of a random model differ)
    assert tokens(engine.rollout([a], key=SeedKey(4))) != tokens(alone)


def test_response_i_is_sampled_with_the_group_seed_plus_i(rollout_engine, video_sample) -> None:
    engine = rollout_engine(FAMILY)
    sample = video_sample(FAMILY, "wide", "seeded-rule")
    (group,) = engine.rollout([sample], n=3, key=SeedKey(7))
    seed = group_seed(engine.config.seed, SeedKey(7), sample.id)
    inputs = engine.prepare([sample])
    for i, response in enumerate(group.responses):
        ((_, (lone,)),) = engine.generate(inputs, [1], [seed + i])
        assert lone.token_ids == response.token_ids, i
    assert len({tuple(r.token_ids) for r in group.responses}) > 1


def test_the_streaming_engine_seeds_its_requests_the_same_way(
    async_engine, loop_thread, rollout_engine, video_sample
) -> None:
    sample = video_sample(FAMILY, "wide", "seeded-async")
    first = loop_thread.run(async_engine.rollout([sample], key=SeedKey(9)))
    again = loop_thread.run(async_engine.rollout([sample], key=SeedKey(9)))
    other = loop_thread.run(async_engine.rollout([sample], key=SeedKey(10)))
    assert tokens(first) == tokens(again) != tokens(other)
    # one seed rule for both engines: the batch engine samples the same group
    assert tokens(rollout_engine(FAMILY).rollout([sample], key=SeedKey(9))) == tokens(first)
