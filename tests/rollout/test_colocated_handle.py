"""The driver's handle on a colocated engine (``ColocatedEngine``) with stand-in rank actors: a rank
stuck in a hung call cannot take the shutdown, so the handle stops waiting for it (the actor group's
shutdown kills it). tests/trainer/test_colocated.py runs the real shards on Ray."""

from __future__ import annotations

import sys
import types

import services.rollout.colocated as colocated
from services.rollout.colocated import ColocatedEngine


class Ref:
    def __init__(self, rank: int, stuck: bool) -> None:
        self.rank, self.stuck = rank, stuck


class Rank:
    """A rank actor whose ``engine_shutdown`` never runs when it is busy in a hung call."""

    def __init__(self, rank: int, busy: bool) -> None:
        self.rank, self.busy = rank, busy
        outer = self

        class Method:
            def remote(self) -> Ref:
                return Ref(outer.rank, outer.busy)

        self.engine_shutdown = Method()


def stand_in_ray(waited: list[float]) -> types.ModuleType:
    ray = types.ModuleType("ray")

    def get(refs):
        if any(r.stuck for r in refs):
            raise AssertionError("ray.get on a busy actor never returns")
        return [None for _ in refs]

    def wait(refs, *, num_returns, timeout):
        waited.append(timeout)
        return [r for r in refs if not r.stuck], [r for r in refs if r.stuck]

    ray.get, ray.wait = get, wait
    return ray


def test_shutdown_does_not_wait_forever_on_a_rank_stuck_in_a_hung_call(monkeypatch, caplog) -> None:
    waited: list[float] = []
    monkeypatch.setitem(sys.modules, "ray", stand_in_ray(waited))
    engine = ColocatedEngine([Rank(0, busy=False), Rank(1, busy=True)], bucket_mb=1.0)
    engine.shutdown()
    assert waited == [colocated.SHUTDOWN_WAIT_S]
    assert "1 colocated shard(s) did not stop in time" in caplog.text
