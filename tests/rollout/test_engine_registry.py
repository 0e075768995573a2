"""The rollout tests' shared-engine registry (tests/rollout/conftest.py): an engine stopped when the
session leaves tests/rollout is forgotten, so coming back (pytest-xdist hands a worker files in any
order) starts a new one instead of handing out the stopped one; the engines stop all at once, and one
whose stop fails is reported without keeping the others running."""

from __future__ import annotations

import threading
from pathlib import Path

from tests.rollout.conftest import EngineRegistry


class FakeEngine:
    def __init__(self, tmp: Path, n: int) -> None:
        self.temp_folder = tmp / f"engine-{n}"  # never created: nothing left behind
        self.stopped = False

    def shutdown(self) -> None:
        self.stopped = True


def test_an_engine_stopped_by_shutdown_all_is_started_again_on_the_next_request(tmp_path: Path) -> None:
    registry = EngineRegistry(segments=set)
    started: list[FakeEngine] = []

    def start() -> FakeEngine:
        started.append(FakeEngine(tmp_path, len(started)))
        return started[-1]

    first = registry.get("llm-x", start)
    assert registry.get("llm-x", start) is first  # shared while it runs
    assert registry.shutdown_all() == [] and first.stopped
    second = registry.get("llm-x", start)
    assert second is not first and not second.stopped and len(started) == 2
    assert registry.shutdown_all() == [] and second.stopped


def test_shutdown_all_stops_the_engines_at_once_and_reports_one_that_fails(tmp_path: Path) -> None:
    registry = EngineRegistry(segments=set)
    together = threading.Barrier(2, timeout=10)  # broken unless both stops run at the same time

    class Waits(FakeEngine):
        def shutdown(self) -> None:
            together.wait()
            super().shutdown()

    class Fails(FakeEngine):
        def shutdown(self) -> None:
            raise RuntimeError("engine core did not answer")

    a, b = registry.get("a", lambda: Waits(tmp_path, 0)), registry.get("b", lambda: Waits(tmp_path, 1))
    registry.get("c", lambda: Fails(tmp_path, 2))
    problems = registry.shutdown_all()
    assert a.stopped and b.stopped
    (problem,) = problems
    assert problem.startswith("engine c failed to stop: Traceback") and "in shutdown" in problem
    assert problem.endswith("RuntimeError: engine core did not answer")
    assert registry.shutdown_all() == []  # each engine is stopped and judged once
