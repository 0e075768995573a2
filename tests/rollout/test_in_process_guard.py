"""The rules around in-process engines, without vLLM: an engine whose vLLM is a stand-in, so the guard,
the shutdown paths and the settings can be driven exactly (real engines: tests/rollout/test_in_process.py).

- one in-process engine at a time, and none in a process that has a torch.distributed group of its own;
- an exported ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` makes an engine in-process for the guard too, unless
  its setting says false; a failed start leaves no torch.distributed group behind;
- a shutdown that raises still frees the slot; a shutdown waits for a call still running in the
  engine, and leaves an engine whose call does not end to end with the process (the slot stays taken);
  a call after the stop is refused;
- the null setting resolves to in-process only for an engine alone on the CPU, tensor parallel 1, with
  no executor named; the trainer's static checks and evaluation refuse what cannot hold.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from services.rollout import engine_base
from services.rollout.config import EngineConfig, RolloutConfig, in_process_resolved
from services.rollout.engine import RolloutEngine


class StandIn:
    """What ``RolloutEngine.shutdown`` and ``_start`` touch of a ``vllm.LLM``."""

    def __init__(self, fail_shutdown: bool = False) -> None:
        self.stopped = False

        def shutdown() -> None:
            if fail_shutdown:
                raise RuntimeError("engine core shutdown failed")
            self.stopped = True

        self.llm_engine = SimpleNamespace(engine_core=SimpleNamespace(shutdown=shutdown), renderer=None)


class FakeEngine(RolloutEngine):
    fail_shutdown = False

    def _launch(self) -> None:
        self.llm = self._start(self._construct)

    def _construct(self) -> StandIn:
        #: what vLLM would read: run its engine core in this process ("0") or in processes of its own
        self.multiprocessing = os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"]
        return StandIn(self.fail_shutdown)


def config(in_process: bool | None = True) -> RolloutConfig:
    return RolloutConfig(engine=EngineConfig(in_process=in_process))


@pytest.fixture
def model(tiny_models) -> Path:
    return tiny_models["qwen2_5_vl"]


@pytest.fixture(autouse=True)
def no_engine_left():
    yield
    leftover, engine_base._in_process = engine_base._in_process, None
    assert leftover is None, "a test left an in-process engine registered"


def test_one_in_process_engine_at_a_time_and_one_after_another(model) -> None:
    first = FakeEngine(model, config(), source=object())
    assert first.in_process and engine_base._in_process is first
    with pytest.raises(RuntimeError, match="already runs in this process"):
        FakeEngine(model, config(), source=object())
    separate = FakeEngine(model, config(False), source=object())  # processes of its own: allowed beside
    assert not separate.in_process
    separate.shutdown()
    first.shutdown()
    assert first.llm.stopped and engine_base._in_process is None
    FakeEngine(model, config(), source=object()).shutdown()


def test_an_exported_single_process_setting_counts_only_where_nothing_is_set(model, monkeypatch) -> None:
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    first = FakeEngine(model, config(None), source=object())
    try:
        assert first.in_process and first.multiprocessing == "0"
        with pytest.raises(RuntimeError, match="already runs in this process"):
            FakeEngine(model, config(None), source=object())
        # an explicit false runs in processes of its own, whatever the operator exported
        second = FakeEngine(model, config(False), source=object())
        assert not second.in_process and second.multiprocessing == "1"
        assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"  # put back
        second.shutdown()
    finally:
        first.shutdown()


def test_a_call_after_the_stop_is_refused_by_name(model) -> None:
    engine = FakeEngine(model, config(), source=object())
    engine.shutdown()
    with pytest.raises(RuntimeError, match="is stopped"), engine._calling():
        pass
    engine.shutdown()  # twice: no second wait, nothing raised


def test_a_failed_in_process_start_leaves_no_distributed_group(model, monkeypatch, tmp_path) -> None:
    import torch.distributed as dist

    class FailsAfterItsGroup(FakeEngine):
        def _construct(self) -> StandIn:  # as vLLM's start failing after init_device (KV sizing)
            dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
            raise ValueError("no room for the KV cache")

    with pytest.raises(ValueError, match="KV cache"):
        FailsAfterItsGroup(model, config(), source=object())
    assert not dist.is_initialized() and engine_base._in_process is None
    FakeEngine(model, config(), source=object()).shutdown()  # the next in-process start is allowed


def test_a_process_with_its_own_distributed_group_is_refused(model, tmp_path) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        with pytest.raises(RuntimeError, match=r"torch\.distributed process group"):
            FakeEngine(model, config(), source=object())
    finally:
        dist.destroy_process_group()


def released(engine: FakeEngine) -> bool:
    """Whether another thread can take the engine's call lock (on the stopping thread it re-enters)."""
    got: list[bool] = []

    def take() -> None:
        got.append(engine._calls.acquire(timeout=2))
        if got[0]:
            engine._calls.release()

    other = threading.Thread(target=take)
    other.start()
    other.join()
    return got[0]


def test_a_shutdown_that_raises_still_frees_the_slot(model, monkeypatch) -> None:
    monkeypatch.setattr(FakeEngine, "fail_shutdown", True)
    engine = FakeEngine(model, config(), source=object())
    with pytest.raises(RuntimeError, match="engine core shutdown failed"):
        engine.shutdown()
    assert engine_base._in_process is None
    assert released(engine)  # the stop held the call lock through the teardown, and let it go
    monkeypatch.setattr(FakeEngine, "fail_shutdown", False)
    FakeEngine(model, config(), source=object()).shutdown()


def calling_until(engine: FakeEngine, done: threading.Event) -> threading.Thread:
    """A thread inside a call on ``engine`` until ``done`` is set (at most 30 s), already in it."""

    def call() -> None:
        with engine._calling():
            done.wait(30)

    thread = threading.Thread(target=call)
    thread.start()
    time.sleep(0.2)
    return thread


def test_a_shutdown_waits_for_a_running_call_and_leaves_one_that_does_not_end(model, monkeypatch) -> None:
    monkeypatch.setattr(engine_base, "IN_PROCESS_STOP_WAIT_S", 5.0)
    engine = FakeEngine(model, config(), source=object())
    release = threading.Event()
    running = calling_until(engine, release)
    threading.Timer(1.0, release.set).start()
    started = time.monotonic()
    engine.shutdown()  # waits for the call, then stops
    assert 0.5 < time.monotonic() - started < 5.0 and engine.llm.stopped
    running.join()

    monkeypatch.setattr(engine_base, "IN_PROCESS_STOP_WAIT_S", 0.5)
    stuck = FakeEngine(model, config(), source=object())
    never = threading.Event()
    hung = calling_until(stuck, never)
    try:
        stuck.shutdown()  # gives up: vLLM is left running, and the slot stays taken
        assert not stuck.llm.stopped and engine_base._in_process is stuck
        with pytest.raises(RuntimeError, match="already runs in this process"):
            FakeEngine(model, config(), source=object())
        # a later call is refused at once, not queued behind the hung one
        started = time.monotonic()
        with pytest.raises(RuntimeError, match="is stopped"), stuck._calling():
            pass
        assert time.monotonic() - started < 0.5
    finally:
        never.set()
        hung.join()
        engine_base._in_process = None  # the stand-in has nothing to end with the process


@pytest.mark.parametrize(
    ("engine", "alone", "cpu", "expected"),
    [
        (EngineConfig(), True, True, True),  # one engine alone on the CPU
        (EngineConfig(), False, True, False),  # a driver fleet: engines of one process run one at a time
        (EngineConfig(), True, False, False),  # a GPU: vLLM's own layout
        (EngineConfig(tensor_parallel_size=2), True, True, False),  # a process per rank
        (EngineConfig(distributed_executor_backend="mp"), True, True, False),  # an executor asked for
        (EngineConfig(in_process=False), True, True, False),  # as set
        (EngineConfig(in_process=True), False, False, True),
    ],
)
def test_the_null_setting_resolves_to_in_process_only_for_an_engine_alone_on_the_cpu(
    engine: EngineConfig, alone: bool, cpu: bool, expected: bool
) -> None:
    assert in_process_resolved(engine, alone=alone, cpu=cpu).in_process is expected


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["rollout.placement=colocated", "trainer.use_ray=true", "rollout.engine.in_process=false"],
            "colocated",
        ),
        (
            ["rollout.placement=driver", "rollout.engines=2", "rollout.engine.in_process=true"],
            "one at a time",
        ),
    ],
)
def test_the_trainer_refuses_in_process_settings_that_cannot_hold(overrides: list[str], message: str) -> None:
    from services.trainer.config import ConfigError, load_config

    root = Path(__file__).resolve().parents[2]
    with pytest.raises(ConfigError, match=message):
        load_config(root / "examples" / "tiny_cpu.yaml", overrides)
    # a disaggregated fleet's engines are each alone in an actor: in process is fine there
    load_config(
        root / "examples" / "tiny_cpu.yaml",
        ["rollout.placement=disaggregated", "trainer.use_ray=true", "rollout.engines=2", "rollout.engine.in_process=true"],
    )  # fmt: skip


def test_evaluation_refuses_in_process() -> None:
    from pydantic import ValidationError

    from services.eval.config import EvalConfig

    with pytest.raises(ValidationError, match="asynchronous engine"):
        EvalConfig.model_validate(
            {"model": "m", "benchmarks": ["video_r1"], "rollout": {"engine": {"in_process": True}}}
        )


def test_a_folder_s_weight_files_are_those_its_index_names(tmp_path: Path) -> None:
    import json

    import torch
    from safetensors.torch import save_file

    from services.rollout.param_names import folder_names, safetensors_files

    for name in (
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "consolidated.safetensors",
    ):
        save_file({name.split(".")[0].replace("-", "_"): torch.zeros(1)}, tmp_path / name)
    assert len(safetensors_files(tmp_path)) == 3  # no index: every file
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    assert [f.name for f in safetensors_files(tmp_path)] == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ]
    assert folder_names(tmp_path) == ["model_00001_of_00002", "model_00002_of_00002"]
