"""Before an engine wakes, this process's cached CUDA blocks go back to the device (the update's freed
activations, which vLLM's sleep-mode pool cannot reuse). CUDA is recorded, not present: the wake-up
order is what is checked here; bench/gpu/run.sh runs the real sleep and wake on a GPU."""

from __future__ import annotations

import threading

import torch

from services.rollout.colocated import ColocatedShard
from services.rollout.engine import RolloutEngine
from services.rollout.vllm_bridge import free_cached_device_memory


class Llm:
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def wake_up(self, tags=None) -> bool:
        self.calls.append(f"wake_up {tags}")
        return True


def record_cuda(monkeypatch, calls: list[str]) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: calls.append("synchronize"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))


def test_the_cache_is_emptied_before_every_wake_up(monkeypatch) -> None:
    calls: list[str] = []
    record_cuda(monkeypatch, calls)
    engine = object.__new__(RolloutEngine)
    engine.llm, engine._sleep_level, engine._calls, engine._open = Llm(calls), 1, threading.RLock(), True
    assert engine.wake_up() is True
    shard = object.__new__(ColocatedShard)
    shard.llm, shard.asleep = Llm(calls), True
    shard.wake_up(["weights"])
    shard.wake_up(["kv_cache"])
    assert calls == [
        "synchronize", "empty_cache", "wake_up None",
        "synchronize", "empty_cache", "wake_up ['weights']",
        "synchronize", "empty_cache", "wake_up ['kv_cache']",
    ]  # fmt: skip


def test_without_cuda_nothing_is_touched(monkeypatch) -> None:
    calls: list[str] = []
    record_cuda(monkeypatch, calls)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    free_cached_device_memory()
    assert calls == []
