"""A colocated engine steps with the other engines of the world whatever its share of a call (vLLM's
data-parallel loop under the external launcher all-reduces "anything unfinished?" over every engine at
each pass): with no samples, with samples refused before its loop ran, or with its loop broken, it still
runs a loop with no requests of its own. A stand-in ``vllm.LLM`` records the calls; the real shards
step together in tests/trainer/test_multinode.py (validation on one sample, two engines)."""

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

    def wait_for_completion(self, use_tqdm=False):
        self.calls.append("loop without requests")
        return []


class Shard(ColocatedRolloutEngine):
    """The colocated engine with a stand-in vLLM instead of a shard joined to a process group."""

    def _launch(self) -> None:
        self.llm, self.engine_index, self.seedable, self._open = StandInLLM(), 0, True, True


@pytest.fixture
def shard(tiny_models: dict[str, Path]) -> Shard:
    return Shard(tiny_models["qwen2_5_vl"], small_config(), source=object())


def test_an_engine_with_no_samples_still_steps_with_the_others(shard: Shard) -> None:
    assert shard.rollout([]) == []
    assert shard.llm.calls == ["loop without requests"]


def test_an_engine_that_generated_runs_its_one_loop_only(shard: Shard, monkeypatch) -> None:
    """A second loop after a successful one would leave this engine an all-reduce ahead of the others."""
    import services.rollout.engine as engine_module

    monkeypatch.setattr(shard, "prepare", lambda samples, config=None: [SimpleNamespace(prompt="p")])
    monkeypatch.setattr(engine_module, "check_feature_count", lambda item, ids, video_token: None)
    monkeypatch.setattr(engine_module, "response_from", lambda completion, version: completion)
    monkeypatch.setattr(engine_module, "assemble_groups", lambda samples, generated, *args: generated)
    generated = shard.rollout([RolloutSample(id="s0", prompt="q")])
    assert generated == [([1, 2], ["completion"])]
    assert shard.llm.calls == ["generate(1)"]


def test_a_refused_sample_is_raised_after_stepping_with_the_others(shard: Shard, monkeypatch) -> None:
    def refuse(samples, config=None):
        raise ValueError(f"sample {samples[0].id!r}: no such clip")

    monkeypatch.setattr(shard, "prepare", refuse)
    with pytest.raises(ValueError, match="sample 's0': no such clip"):
        shard.rollout([RolloutSample(id="s0", prompt="q")])
    assert shard.llm.calls == ["loop without requests"]


def test_a_loop_that_broke_is_followed_by_one_without_requests(shard: Shard, monkeypatch) -> None:
    monkeypatch.setattr(shard, "prepare", lambda samples, config=None: [type("Input", (), {"prompt": "p"})()])
    shard.llm.generate_error = RuntimeError("lost a request")
    with pytest.raises(RuntimeError, match="lost a request"):
        shard.rollout([RolloutSample(id="s0", prompt="q")])
    assert shard.llm.calls == ["generate(1)", "loop without requests"]


def test_the_original_error_is_raised_when_stepping_fails_too(shard: Shard, monkeypatch, caplog) -> None:
    def refuse(samples, config=None):
        raise ValueError("sample 's0': no such clip")

    def broken(use_tqdm=False):
        raise RuntimeError("engine core gone")

    monkeypatch.setattr(shard, "prepare", refuse)
    monkeypatch.setattr(shard.llm, "wait_for_completion", broken)
    with pytest.raises(ValueError, match="no such clip"):
        shard.rollout([RolloutSample(id="s0", prompt="q")])
    assert "could not step with the others" in caplog.text and "engine core gone" in caplog.text
