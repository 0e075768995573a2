"""Request seeds are a pure, stable function of (run seed, step, stream, sample id); response i of a
group gets seed + i; on vLLM's CPU backend the engine arguments keep prefills whole so seeded requests
can run."""

from __future__ import annotations

import hashlib

import pytest

from services.rollout.seeds import SEED_BITS, SeedKey, group_seed, group_seeds, response_seed
from services.rollout.vllm_bridge import seedable_kwargs, seeds_supported


def test_the_seed_is_the_top_62_bits_of_blake2b_over_the_fields() -> None:
    digest = hashlib.blake2b(b"0\x001\x00train\x00a", digest_size=8).digest()
    assert group_seed(0, SeedKey(1), "a") == int.from_bytes(digest, "big") >> 2


def test_seeds_are_stable_across_processes_and_versions() -> None:
    # pinned: a change here changes every run's samples (a resumed run would no longer match its past)
    assert group_seed(0, SeedKey(1), "a") == 2324987096986280920
    assert group_seed(0, SeedKey(2), "a") == 2852803735616202098
    assert group_seed(7, SeedKey(1, "val"), "clip-3") == 1953674171718480774


def test_every_field_moves_the_seed_and_response_seeds_count_up() -> None:
    base = group_seed(3, SeedKey(5), "s")
    others = {
        group_seed(4, SeedKey(5), "s"),
        group_seed(3, SeedKey(6), "s"),
        group_seed(3, SeedKey(5, "val"), "s"),
        group_seed(3, SeedKey(5), "t"),
    }
    assert base not in others and len(others) == 4
    assert [response_seed(3, SeedKey(5), "s", i) for i in range(3)] == [base, base + 1, base + 2]
    assert 0 <= base < 2**SEED_BITS and base + 64 < 2**63


def test_fields_cannot_run_into_each_other() -> None:
    # NUL-separated: ("1", "0\x00x") cannot collide with ("10", "x") and so on
    assert group_seed(1, SeedKey(0, "train"), "x") != group_seed(10, SeedKey(0, "train"), "x")
    with pytest.raises(ValueError, match="non-empty name"):
        SeedKey(0, "a\x00b")
    with pytest.raises(ValueError, match=">= 0"):
        SeedKey(-1)


def test_no_key_leaves_requests_unseeded() -> None:
    class Sample:
        def __init__(self, id: str) -> None:
            self.id = id

    samples = [Sample("a"), Sample("b")]
    assert group_seeds(0, None, samples) == [None, None]
    assert group_seeds(0, SeedKey(1), samples) == [
        group_seed(0, SeedKey(1), "a"),
        group_seed(0, SeedKey(1), "b"),
    ]


def test_a_sample_repeated_in_a_call_gets_a_seed_per_repeat() -> None:
    # a batch spanning two epochs may hold a sample twice: its groups must be two draws, not one twice
    class Sample:
        def __init__(self, id: str) -> None:
            self.id = id

    seeds = group_seeds(0, SeedKey(1), [Sample("a"), Sample("b"), Sample("a")])
    assert seeds[:2] == [group_seed(0, SeedKey(1), "a"), group_seed(0, SeedKey(1), "b")]
    assert seeds[2] == group_seed(0, SeedKey(1), "a", repeat=1) != seeds[0]
    text = "0\x001\x00train\x00a\x001"
    assert seeds[2] == int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") >> 2


def test_on_cpu_prefills_stay_whole_so_seeded_requests_can_run() -> None:
    kwargs = {"max_model_len": 4096, "max_num_batched_tokens": 2048}
    cpu = seedable_kwargs(kwargs, cpu=True)
    assert cpu["enable_chunked_prefill"] is False and cpu["max_num_batched_tokens"] == 4096
    assert seeds_supported(cpu, cpu=True)
    assert seedable_kwargs({"max_model_len": 1024}, cpu=True)["max_num_batched_tokens"] == 1024
    # GPU: nothing changes (its generators rewind after a chunk)
    assert seedable_kwargs(kwargs, cpu=False) == kwargs and seeds_supported(kwargs, cpu=False)
    # an explicit choice is kept, and then seeded requests are refused on CPU
    chunked = {"max_model_len": 1024, "enable_chunked_prefill": True}
    assert seedable_kwargs(chunked, cpu=True) == chunked
    assert not seeds_supported(chunked, cpu=True)
