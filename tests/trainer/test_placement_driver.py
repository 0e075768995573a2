"""A driver fleet on the CPU: each engine is given its own share of the process's cores (vLLM's ``auto``
binding would put every engine's threads on the same ones); a disaggregated fleet gives each engine its
slot, which its actor pins itself to. The engine class is a recorder here; real
engines' workers on their own cores: tests/trainer/test_resume_loop.py (two driver engines)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

import pytest

from services.trainer import placement
from services.trainer.config import load_config

ROOT = Path(__file__).resolve().parents[2]


class Recorder:
    started: ClassVar[list[list[int] | None]] = []

    def __init__(self, model: Any, config: Any, *, source: Any, reward_client: Any, cpu_cores: Any) -> None:
        self.weight_version = 0
        Recorder.started.append(cpu_cores)

    def shutdown(self) -> None:
        pass


def start_recorded(monkeypatch: pytest.MonkeyPatch, layout: placement.Layout) -> Any:
    """``start_driver`` on the CPU with the recorder as the engine class; returns the fleet."""
    import services.rollout.engine

    monkeypatch.setattr(services.rollout.engine, "RolloutEngine", Recorder)
    monkeypatch.setattr("services.rollout.vllm_bridge.on_cpu", lambda: True)
    Recorder.started = []
    config = load_config(
        ROOT / "examples" / "tiny_cpu.yaml", ["rollout.placement=driver", f"rollout.engines={layout.engines}"]
    )
    return placement.start_driver(
        config, layout, "model", config.effective_rollout(), source=None, reward_client=None
    )


@pytest.mark.parametrize(
    ("engines", "cores", "expected"),
    [
        (2, {0, 1}, [[0], [1]]),
        (2, {0, 1, 2, 3}, [[0, 1], [2, 3]]),
        (3, {0, 1}, [[0, 1], [0, 1], [0, 1]]),  # fewer cores than engines: they share them all
        (1, {0, 1}, [None]),  # one engine: vLLM's own choice
    ],
)
def test_each_engine_of_a_cpu_driver_fleet_gets_its_own_cores(
    monkeypatch: pytest.MonkeyPatch, engines: int, cores: set[int], expected: list
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: cores)
    fleet = start_recorded(monkeypatch, placement.Layout("driver", engines, 1))
    try:
        assert Recorder.started == expected
        assert len(fleet.members) == engines
    finally:
        fleet.shutdown()


def test_tensor_parallel_engines_keep_vllm_s_binding(monkeypatch: pytest.MonkeyPatch) -> None:
    # vLLM's binding then names one core list per rank ("0|1"): a single list would fail its check
    start_recorded(monkeypatch, placement.Layout("driver", 2, 2)).shutdown()
    assert Recorder.started == [None, None]


def test_each_disaggregated_engine_of_a_fleet_is_given_its_core_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    # the actor pins itself to the slot's share of its host's cores (on vLLM's CPU backend only)
    import services.trainer.ray_rollout

    slots: list[Any] = []

    class RayRecorder(Recorder):
        def __init__(self, model: Any, config: Any, *, cpu_slot: Any, **parts: Any) -> None:
            self.weight_version = 0
            slots.append(cpu_slot)

    monkeypatch.setattr(services.trainer.ray_rollout, "RayRolloutEngine", RayRecorder)
    config = load_config(
        ROOT / "examples" / "tiny_cpu.yaml", ["rollout.placement=disaggregated", "trainer.use_ray=true"]
    )
    for layout, expected in [
        (placement.Layout("disaggregated", 2, 1), [(0, 2), (1, 2)]),
        (placement.Layout("disaggregated", 1, 1), [None]),
        (placement.Layout("disaggregated", 2, 2), [None, None]),  # tensor parallel: vLLM's binding
    ]:
        slots.clear()
        placement.start_disaggregated(
            config, layout, "model", config.effective_rollout(), source=None, reward_client=None
        ).shutdown()
        assert slots == expected, layout
