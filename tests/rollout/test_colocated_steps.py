"""A colocated engine generates on its own (vLLM's external data-parallel replicas: no data-parallel group
over the ranks, so no all-reduce per pass of its loop): with no samples it calls nothing, a refused
sample or a broken loop is raised at once, and one that generated runs its one loop. A stand-in
``vllm.LLM`` records the calls; the real shards generate independently in
tests/trainer/test_colocated.py (one generates while the other is outside vLLM)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from services.rollout.colocated import ColocatedRolloutEngine
from services.rollout.samples import RolloutSample
from tests.rollout.conftest import small_config


class StandInLLM:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.generate_error: Exception | None = None

    def generate(self, prompts, params, use_tqdm=False):
        self.calls.append(f"generate({len(prompts)})")
        if self.generate_error is not None:
            raise self.generate_error
        return [SimpleNamespace(prompt_token_ids=[1, 2], outputs=["completion"]) for _ in prompts]

    def wait_for_completion(self, use_tqdm=False):  # what an engine in lockstep would have to call
        self.calls.append("loop without requests")
        return []


class Shard(ColocatedRolloutEngine):
    """The colocated engine with a stand-in vLLM instead of a shard joined to a process group."""

    def _launch(self) -> None:
        self.llm, self.engine_index, self.seedable, self._open = StandInLLM(), 0, True, True


@pytest.fixture
def shard(tiny_models: dict[str, Path]) -> Shard:
    return Shard(tiny_models["qwen2_5_vl"], small_config(), source=object())


def test_an_engine_with_no_samples_calls_nothing(shard: Shard) -> None:
    assert shard.rollout([]) == []
    assert shard.llm.calls == []


def test_an_engine_that_generated_runs_its_one_loop_only(shard: Shard, monkeypatch) -> None:
    import services.rollout.engine as engine_module

    monkeypatch.setattr(shard, "prepare", lambda samples, config=None: [SimpleNamespace(prompt="p")])
    monkeypatch.setattr(engine_module, "check_feature_count", lambda item, ids, video_token: None)
    monkeypatch.setattr(engine_module, "response_from", lambda completion, version: completion)
    monkeypatch.setattr(engine_module, "assemble_groups", lambda samples, generated, *args: generated)
    generated = shard.rollout([RolloutSample(id="s0", prompt="q")])
    assert generated == [([1, 2], ["completion"])]
    assert shard.llm.calls == ["generate(1)"]


def test_a_refused_sample_is_raised_at_once(shard: Shard, monkeypatch) -> None:
    def refuse(samples, config=None):
        raise ValueError(f"sample {samples[0].id!r}: no such clip")

    monkeypatch.setattr(shard, "prepare", refuse)
    with pytest.raises(ValueError, match="sample 's0': no such clip"):
        shard.rollout([RolloutSample(id="s0", prompt="q")])
    assert shard.llm.calls == []


def test_a_loop_that_broke_is_raised_with_no_second_loop(shard: Shard, monkeypatch) -> None:
    monkeypatch.setattr(shard, "prepare", lambda samples, config=None: [type("Input", (), {"prompt": "p"})()])
    shard.llm.generate_error = RuntimeError("lost a request")
    with pytest.raises(RuntimeError, match="lost a request"):
        shard.rollout([RolloutSample(id="s0", prompt="q")])
    assert shard.llm.calls == ["generate(1)"]
