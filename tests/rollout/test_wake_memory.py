"""The colocated cycle's order on the device: the engine sleeps and the allocator's cache goes back before
the actor returns; after the update the optimizer leaves before the engine's weights wake, the push
runs on woken weights, the actor leaves, and the KV cache wakes last, each wake after the allocator's
cached blocks went back (the update's freed activations, which vLLM's sleep-mode pool cannot reuse).
CUDA is recorded, not present: the order is what is checked here; bench/gpu/run.sh runs the real sleep
and wake on a GPU."""

from __future__ import annotations

import threading

import pytest
import torch

from services.rollout.colocated import HAND_BACK, TAKE_BACK, ColocatedRolloutEngine
from services.rollout.config import EngineConfig, RolloutConfig
from services.rollout.engine import RolloutEngine
from services.rollout.vllm_bridge import free_cached_device_memory


class Llm:
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def sleep(self, level: int = 1) -> None:
        self.calls.append(f"sleep {level}")

    def wake_up(self, tags=None) -> bool:
        self.calls.append(f"wake_up {tags}")
        return tags is None or "kv_cache" in tags  # fully awake once the KV cache is back


def record_cuda(monkeypatch, calls: list[str]) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: calls.append("synchronize"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))


def engine_of(cls: type, calls: list[str]) -> RolloutEngine:
    """An engine of ``cls`` around the recording ``Llm``, awake, with sleep mode on (as on a GPU)."""
    engine = object.__new__(cls)
    engine.llm, engine._calls, engine._open = Llm(calls), threading.RLock(), True
    engine._sleep_level, engine._asleep, engine._weights_discarded = None, (), False
    engine.config = RolloutConfig(engine=EngineConfig(enable_sleep_mode=True))
    return engine


def test_the_cache_is_emptied_before_every_wake_up(monkeypatch) -> None:
    calls: list[str] = []
    record_cuda(monkeypatch, calls)
    engine = engine_of(RolloutEngine, calls)
    assert engine.sleep(1) is True and engine.sleeping
    assert engine.wake_up() is True and not engine.sleeping
    assert engine.wake_up() is False  # awake: nothing to do
    assert calls == ["sleep 1", "synchronize", "empty_cache", "wake_up None"]


def test_a_partial_wake_up_allows_a_push_but_not_generation(monkeypatch) -> None:
    calls: list[str] = []
    record_cuda(monkeypatch, calls)
    engine = engine_of(RolloutEngine, calls)
    engine.sleep(2)
    with pytest.raises(RuntimeError, match="asleep"):
        engine._check_ready("push weights")
    assert engine.wake_up(["weights"]) is True
    engine._check_ready("push weights")  # the weights are back: a push may run
    with pytest.raises(RuntimeError, match="asleep"):
        engine._check_ready("generate")  # not before the KV cache is back
    assert engine.wake_up(["weights"]) is False  # already awake
    assert engine.wake_up(["kv_cache"]) is True and not engine.sleeping
    with pytest.raises(RuntimeError, match="discarded the weights"):
        engine._check_ready("generate")  # level 2 dropped them: a push must come first
    with pytest.raises(ValueError, match="unknown sleep tag"):
        engine.wake_up(["scheduling"])


def test_the_colocated_cycle_hands_the_device_over_in_order(monkeypatch) -> None:
    calls: list[str] = []
    record_cuda(monkeypatch, calls)
    engine = engine_of(ColocatedRolloutEngine, calls)

    def load_from(weights) -> int:
        engine._check_ready("push weights")  # as the real one does: refused unless the weights woke
        calls.append("push")
        engine._weights_discarded = False
        return 1

    engine.load_from = load_from
    phases: list[str] = []
    assert engine.hand_back(2, reload=lambda: calls.append("actor back"), observe=phases.append) is True
    assert engine.take_back(
        object(), park_optimizer=lambda: calls.append("optimizer parked"),
        park_actor=lambda: calls.append("actor parked"), observe=phases.append,
    ) == 1  # fmt: skip
    assert phases == [*HAND_BACK, *TAKE_BACK]
    assert calls == [
        "sleep 2", "synchronize", "empty_cache", "actor back",
        "optimizer parked", "synchronize", "empty_cache", "wake_up ['weights']", "push", "actor parked",
        "synchronize", "empty_cache", "wake_up ['kv_cache']",
    ]  # fmt: skip
    engine._check_ready("generate")  # awake, with the pushed weights


def test_without_cuda_nothing_is_touched(monkeypatch) -> None:
    calls: list[str] = []
    record_cuda(monkeypatch, calls)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    free_cached_device_memory()
    assert calls == []
