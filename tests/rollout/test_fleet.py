"""The fleet's bookkeeping with recording engines (no vLLM: these check routing, weight versions,
faults and shutdown; tests/rollout/test_fleet_ray.py runs real engines on Ray)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar

import pytest

from services.rollout.fleet import Fleet, FleetError, StaleWeights
from services.rollout.samples import RolloutGroup, RolloutResponse, RolloutSample
from services.rollout.seeds import SeedKey, group_seeds
from services.rollout.weight_group import WeightGroupError
from services.rollout.weight_sync import BucketBroadcast, BucketRefs


class Recording:
    """Answers each sample with one response per slot, labelled with its weight version."""

    def __init__(self, name: str, *, fail: str | None = None, labels_lag: bool = False) -> None:
        self.name, self.fail, self.labels_lag = name, fail, labels_lag
        self.weight_version = 0
        self.served: list[list[str]] = []
        self.seeds: list[tuple[str, int | None]] = []  # (sample id, the request seed the engine would use)
        self.pushes: list[Any] = []
        self.events: list[str] = []
        self.stopped = False
        self.release = threading.Event()
        self.sleeps = False  # whether sleep and wake_up report releasing memory (a GPU engine's would)
        self.slept: list[int] = []  # the levels it was asked to sleep at

    def rollout(self, samples, n=None, *, mix_policy=None, key=None, **overrides) -> list[RolloutGroup]:
        self.events.append("rollout")
        if self.fail == "raise":
            raise RuntimeError(f"{self.name} died")
        if self.fail == "hang":
            self.release.wait(30)
            raise RuntimeError("released")
        if self.fail == "timeout-error":  # the engine's own TimeoutError (e.g. a ray.get with a limit)
            raise TimeoutError(f"{self.name} gave up")
        if self.fail == "refuse":
            raise ValueError(f"sample {samples[0].id!r}: too long")
        if self.fail == "reverse":
            samples = samples[::-1]
        self.served.append([s.id for s in samples])
        self.seeds += zip([s.id for s in samples], group_seeds(0, key, samples), strict=True)
        version = self.weight_version - 1 if self.labels_lag else self.weight_version
        response = RolloutResponse(
            token_ids=[1], logprobs=[0.0], text="x", finish_reason="stop", weight_version=version,
            weight_versions=((0, version),),
        )  # fmt: skip
        return [
            RolloutGroup(sample_id=s.id, prompt_token_ids=[0], responses=[response] * (n or 2))
            for s in samples
        ]

    def push_weights(self, weights: Any) -> float:
        self.events.append("push")
        if self.fail == "hang-push":
            self.release.wait(30)
        if self.fail == "stale-push":
            return 0.0  # claims success, version unchanged
        self.pushes.append(weights)
        self.weight_version += 1
        return 0.0

    # a bucketed push by reference, one call per bucket (RayRolloutEngine's session)
    def begin_weight_buckets(self, announced) -> None:
        if self.fail == "refuse-push":
            raise ValueError("1 announced tensors have the wrong shape")
        self.events.append("begin")
        self.buckets: list[Any] = []

    def load_weight_bucket(self, ref: Any) -> int:
        if self.fail == "raise-bucket":
            raise RuntimeError(f"{self.name} died")
        self.events.append(f"load {ref}")
        self.buckets.append(ref)
        return 1

    # the same push over a weight-broadcast group (Broadcaster below plays rank 0 and the group)
    group: Broadcaster | None = None

    def join_weight_group(self, address, first_rank, world, timeout_s, backend) -> None:
        self.events.append(f"join {first_rank}/{world}")
        self.group = Broadcaster.at[address]

    def receive_weight_bucket(self, index, slots) -> int:
        assert self.group is not None
        if self.fail == "die-receive" and self.group.breaks(index):
            self.fail = "dead"
            raise RuntimeError(f"{self.name}'s actor died")
        if self.fail == "own-error" and self.group.breaks(index):
            raise RuntimeError(f"{self.name} could not load the bucket")  # it answers on
        if self.group.breaks(index):
            raise WeightGroupError("weight group (rank 1 of 3): Connection closed by peer")
        self.events.append(f"recv {self.group.name}-{index}")
        self.buckets.append(f"{self.group.name}-{index}")
        return len(slots)

    def end_weight_buckets(self, *, failed: bool = False) -> int:
        if self.fail == "dead":
            raise RuntimeError(f"{self.name}'s actor died")
        self.events.append("end failed" if failed else "end")
        self.weight_version += 1  # as the engine: its weights moved on, whole or not
        if not failed:
            self.pushes.append(tuple(self.buckets))
        return len(self.buckets)

    def sleep(self, level: int = 1) -> bool:
        if self.fail == "sleep":
            raise RuntimeError(f"{self.name}'s actor died")
        self.slept.append(level)
        return self.sleeps

    def wake_up(self) -> bool:
        return self.sleeps

    def shutdown(self) -> None:
        self.stopped = True
        self.release.set()
        if self.fail == "shutdown":
            raise RuntimeError(f"{self.name} would not stop")


def samples(count: int) -> list[RolloutSample]:
    return [RolloutSample(id=f"s{i}", prompt="q") for i in range(count)]


def fleet(*engines: Recording, **options: Any) -> Fleet:
    return Fleet(list(engines), max_tokens=4, n=2, **options)


def test_groups_are_split_by_estimated_tokens_and_come_back_in_sample_order() -> None:
    a, b = Recording("a"), Recording("b")
    with fleet(a, b) as f:
        groups = f.rollout(samples(4), key=SeedKey(1), prompt_tokens=[100, 1, 50, 60])
    assert [g.sample_id for g in groups] == ["s0", "s1", "s2", "s3"]
    # costs 108, 9, 58, 68: 108→a, 68→b, 58→b (68<108), 9→a (108<126)
    assert a.served == [["s0", "s1"]] and b.served == [["s2", "s3"]]
    assert [g.engine for g in groups] == [0, 0, 1, 1]  # each group names the engine that generated it


def test_a_repeated_sample_is_seeded_as_on_one_engine() -> None:
    # a batch spanning two epochs holds "a" twice: both groups must go to one engine, so that the
    # repeat's seed (counted in call order) is the one a single engine would give it
    batch = [RolloutSample(id=i, prompt="q") for i in ("a", "b", "c", "a")]
    one = Recording("one")
    with fleet(one) as f:
        f.rollout(batch, key=SeedKey(3), prompt_tokens=[50, 40, 30, 50])
    a, b = Recording("a"), Recording("b")
    with fleet(a, b) as f:
        f.rollout(batch, key=SeedKey(3), prompt_tokens=[50, 40, 30, 50])
    assert a.served == [["a", "a"]] and b.served == [["b", "c"]]
    assert sorted(a.seeds + b.seeds) == sorted(one.seeds)
    assert len({seed for _, seed in one.seeds}) == 4


def test_every_engine_takes_each_push_and_responses_carry_the_fleet_version() -> None:
    a, b = Recording("a"), Recording("b")
    with fleet(a, b) as f:
        f.push_weights("w1")
        f.push_weights("w2")
        assert (a.pushes, b.pushes, f.weight_version) == (["w1", "w2"], ["w1", "w2"], 2)
        groups = f.rollout(samples(2))
    assert {r.weight_version for g in groups for r in g.responses} == {2}


def test_a_push_that_did_not_take_is_refused() -> None:
    f = fleet(Recording("a"), Recording("b", fail="stale-push"))
    with f, pytest.raises(StaleWeights, match="engine 1 reports weight version 0 after a push from 0"):
        f.push_weights("w1")


def test_tokens_from_older_weights_are_refused() -> None:
    with fleet(Recording("a", labels_lag=True)) as f:
        f.push_weights("w1")
        with pytest.raises(
            StaleWeights, match=r"engine 0 generated with weight version\(s\) \[0\], expected 1"
        ):
            f.rollout(samples(1))


def test_a_failing_engine_s_groups_go_to_the_others_and_are_counted() -> None:
    a, b = Recording("a"), Recording("b", fail="raise")
    with fleet(a, b) as f:
        groups = f.rollout(samples(4))
        assert [g.sample_id for g in groups] == ["s0", "s1", "s2", "s3"]
        assert f.pop_metrics() == {"rollout/engine_failures": 1.0, "rollout/engines_alive": 1.0}
        assert f.pop_metrics() == {"rollout/engine_failures": 0.0, "rollout/engines_alive": 1.0}
        f.rollout(samples(2))  # the dead engine gets no more work
    assert sorted(i for served in a.served for i in served) == ["s0", "s0", "s1", "s1", "s2", "s3"]
    assert b.stopped


def test_a_hung_engine_times_out_and_its_groups_are_re_sent() -> None:
    a, b = Recording("a"), Recording("b", fail="hang")
    with fleet(a, b, timeout_s=0.5) as f:
        started = time.monotonic()
        groups = f.rollout(samples(2))
        assert time.monotonic() - started < 20
        assert len(groups) == 2 and f.pop_metrics()["rollout/engine_failures"] == 1.0


def test_an_engine_s_own_timeout_error_is_a_failure_without_a_fleet_limit() -> None:
    a, b = Recording("a"), Recording("b", fail="timeout-error")
    with fleet(a, b) as f:  # timeout_s None: the fleet itself never times out
        assert [g.sample_id for g in f.rollout(samples(4))] == ["s0", "s1", "s2", "s3"]
        assert f.members[1].failures == ["TimeoutError: b gave up"]
        assert f.pop_metrics()["rollout/engine_failures"] == 1.0


def test_a_colocated_engine_s_failure_fails_the_call_without_re_sending_or_stopping_it() -> None:
    # a shard is one member of the ranks' collectives: the next push needs every rank, and stopping it
    # would destroy its ranks' process group, so the step fails by name and the engines stay for shutdown
    a, b = Recording("a"), Recording("b", fail="raise")
    with fleet(a, b, independent=False) as f:
        with pytest.raises(FleetError, match=r"rollout engine 1 failed \(RuntimeError: b died\); colocated"):
            f.rollout(samples(4))
        assert sum(len(s) for s in a.served) == 2, "the failed engine's groups were re-sent"
        assert not b.stopped and f.members[1].restart is None
        assert f.pop_metrics()["rollout/engine_failures"] == 1.0
    assert a.stopped and b.stopped


def test_colocated_engines_are_called_only_with_work_of_their_own() -> None:
    # colocated shards generate independently (no vLLM data-parallel group over the ranks), so an engine
    # without groups is left alone, as an independent one is
    for independent in (False, True):
        a, b = Recording("a"), Recording("b")
        with fleet(a, b, independent=independent) as f:
            assert [g.sample_id for g in f.rollout(samples(1))] == ["s0"]
        assert a.served + b.served == [["s0"]]


def test_the_fleet_sleeps_at_its_own_level_unless_told_one() -> None:
    a = Recording("a")
    a.sleeps = True
    with fleet(a) as f:
        assert f.sleep() is False and a.slept == []  # no level: the engines keep their memory
    a = Recording("a")
    a.sleeps = True
    with fleet(a, sleep_level=2) as f:
        assert f.sleep() is True and f.wake_up() is True
        assert f.sleep(1) is True
    assert a.slept == [2, 1]


def test_an_engine_that_answers_out_of_order_fails_and_its_groups_go_elsewhere() -> None:
    a, b = Recording("a"), Recording("b", fail="reverse")
    with fleet(a, b) as f:
        assert [g.sample_id for g in f.rollout(samples(4))] == ["s0", "s1", "s2", "s3"]
        assert f.last_engines == [0, 0, 0, 0]
        assert f.members[1].failures == ["answered samples ['s3', 's1'] when asked for ['s1', 's3']"]
        assert f.pop_metrics()["rollout/engine_failures"] == 1.0


def test_an_engine_that_fails_to_sleep_is_dropped_and_the_others_sleep() -> None:
    a, b = Recording("a"), Recording("b", fail="sleep")
    a.sleeps = True
    made, restart = restarts()
    with fleet(a, b, restart=restart) as f:
        assert f.sleep(1) is True
        assert f.members[1].failures == ["sleep: RuntimeError: b's actor died"]
        assert f.pop_metrics() == {"rollout/engine_failures": 1.0, "rollout/engines_alive": 1.0}
        time.sleep(0.2)
        assert made == [], "a replacement started awake while the others slept for the update"
        assert f.wake_up() is True
        f.members[1].restart.result(timeout=10)
        assert [e.name for e in made] == ["new1"]  # after the wake-up
    a, b = Recording("a"), Recording("b", fail="sleep")
    with fleet(a, b, independent=False) as f, pytest.raises(FleetError, match="engine 1 failed \\(sleep: "):
        f.sleep(1)  # a colocated shard: the step fails by name


class VersionLost(Recording):
    """Takes a push, then its actor dies before it can say which weights it holds."""

    lost = False

    def push_weights(self, weights: Any) -> float:
        took = super().push_weights(weights)
        self.lost = True
        return took

    @property
    def weight_version(self) -> int:
        if self.lost:
            raise RuntimeError(f"{self.name}'s actor died")
        return self._version

    @weight_version.setter
    def weight_version(self, value: int) -> None:
        self._version = value


def test_an_engine_that_dies_before_reporting_its_weight_version_is_dropped() -> None:
    a, b = Recording("a"), VersionLost("b")
    with fleet(a, b) as f:
        f.push_weights({"w": 1})
        assert f.weight_version == 1 and a.weight_version == 1
        assert f.members[1].failures == ["weight version after the push: RuntimeError: b's actor died"]
        assert [g.sample_id for g in f.rollout(samples(2))] == ["s0", "s1"]
        assert f.last_engines == [0, 0]


def test_when_every_engine_fails_the_call_fails_naming_them() -> None:
    f = fleet(Recording("a", fail="raise"), Recording("b", fail="raise"))
    with (
        f,
        pytest.raises(FleetError, match=r"engine 0: RuntimeError: a died; engine 1: RuntimeError: b died"),
    ):
        f.rollout(samples(2))


def test_a_refused_input_is_the_input_s_error_not_an_engine_failure() -> None:
    with fleet(Recording("a", fail="refuse")) as f:
        with pytest.raises(ValueError, match="too long"):
            f.rollout(samples(1))
        assert f.pop_metrics()["rollout/engine_failures"] == 0.0


def restarts(**kwargs: Any) -> tuple[list[Recording], Callable[[int], Recording]]:
    """A fleet's restart factory that makes ``Recording("new<index>", **kwargs)`` engines, and the list
    it appends each one to (in the order the fleet asked for them)."""
    made: list[Recording] = []

    def restart(index: int) -> Recording:
        made.append(Recording(f"new{index}", **kwargs))
        return made[-1]

    return made, restart


def lose_and_wait(f: Fleet, engine: Recording, replacements: list[Recording]) -> None:
    """``engine`` (the fleet's second) dies in a rollout; wait until its replacement has started."""
    engine.fail = "raise"
    f.rollout(samples(2))
    deadline = time.monotonic() + 10
    while not replacements and time.monotonic() < deadline:
        time.sleep(0.01)
    f.members[1].restart.result(10)


def test_a_restarted_engine_gets_the_current_weights_before_any_work() -> None:
    replacements, restart = restarts()

    a, b = Recording("a"), Recording("b")
    with fleet(a, b, restart=restart) as f:
        f.push_weights("w1")
        lose_and_wait(f, b, replacements)
        groups = f.rollout(samples(4))
        (new,) = replacements
        assert new.events[0] == "push" and new.pushes == ["w1"]
        assert new.served, "the replacement got no work"
        assert {r.weight_version for g in groups for r in g.responses} == {1}
        assert f.members[1].engine is new


def test_only_the_owner_s_thread_adopts_a_replacement() -> None:
    """A rollout on another thread (generated during the update) does not fetch the current weights
    from the actor ranks for a replacement; the next call on the fleet's own thread does."""
    replacements, restart = restarts()
    fetched: list[str] = []

    def current() -> str:
        fetched.append(threading.current_thread().name)
        return "fetched"

    a, b = Recording("a"), Recording("b")
    with fleet(a, b, restart=restart, current_weights=current) as f:
        f.push_weights("w1")
        lose_and_wait(f, b, replacements)
        answered: list[list[RolloutGroup]] = []
        ahead = threading.Thread(target=lambda: answered.append(f.rollout(samples(2))), name="ahead")
        ahead.start()
        ahead.join(10)
        (new,) = replacements
        assert len(answered) == 1 and fetched == [] and not new.served and a.served[-1] == ["s0", "s1"]
        assert not f.members[1].alive
        f.rollout(samples(2))
        assert fetched == [threading.current_thread().name] and new.pushes == ["fetched"]
        assert f.members[1].engine is new and f.members[1].alive


def test_a_replacement_that_hangs_taking_the_current_weights_is_dropped_under_the_limit() -> None:
    replacements, restart = restarts(fail="hang-push")

    a, b = Recording("a"), Recording("b")
    with fleet(a, b, restart=restart, timeout_s=0.5) as f:
        f.push_weights("w1")
        b.fail = "raise"
        f.rollout(samples(2))
        f.members[1].restart.result(10)
        groups = f.rollout(samples(2))  # adopting the replacement times out instead of waiting on it
        first = replacements[0]
        assert first.stopped and not f.members[1].alive and f.members[1].engine is b
        assert "restart push: " in f.members[1].failures[-1]
        assert [g.sample_id for g in groups] == ["s0", "s1"] and a.served[-1] == ["s0", "s1"]
        f.members[1].restart.result(10)  # and another is on its way


def test_a_replacement_that_fails_is_started_again_a_few_times_then_the_engine_stays_out() -> None:
    from concurrent.futures import wait

    import services.rollout.fleet as fleet_module

    starts: list[int] = []

    def flaky(index: int) -> Recording:  # a node that comes back on the third try
        starts.append(index)
        if len(starts) < 3:
            raise RuntimeError(f"no node for engine {index} yet")
        return Recording(f"new{index}")

    a, b = Recording("a"), Recording("b", fail="raise")
    with fleet(a, b, restart=flaky) as f:
        f.rollout(samples(2))
        for _ in range(3):  # each call adopts what has started by then
            wait([f.members[1].restart], timeout=10)
            f.rollout(samples(2))
        assert starts == [1, 1, 1] and f.members[1].alive and f.members[1].engine.name == "new1"
        assert f.members[1].failures[-2:] == ["restart: no node for engine 1 yet"] * 2

    def never(index: int) -> Recording:
        starts.append(index)
        raise RuntimeError("no node")

    starts.clear()
    a, b = Recording("a"), Recording("b", fail="raise")
    with fleet(a, b, restart=never) as f:
        f.rollout(samples(2))
        while f.members[1].restart is not None:
            wait([f.members[1].restart], timeout=10)
            f.rollout(samples(2))
        assert len(starts) == fleet_module.RESTART_TRIES and not f.members[1].alive
        assert f.pop_metrics()["rollout/engines_alive"] == 1.0


def test_a_replacement_can_fetch_the_current_weights_instead_of_the_fleet_keeping_them() -> None:
    replacements, restart = restarts()

    a, b = Recording("a"), Recording("b")
    with fleet(a, b, restart=restart, current_weights=lambda: "fetched") as f:
        f.push_weights("w1")
        assert f._weights is None  # nothing held between pushes
        b.fail = "raise"
        f.rollout(samples(2))
        f.members[1].restart.result(10)
        f.rollout(samples(2))
        assert replacements[0].pushes == ["fetched"]


def test_shutdown_stops_every_engine_even_when_one_fails() -> None:
    a, b, c = Recording("a"), Recording("b", fail="shutdown"), Recording("c")
    f = fleet(a, b, c)
    with pytest.raises(RuntimeError, match="b would not stop"):
        f.shutdown()
    assert a.stopped and b.stopped and c.stopped
    f.shutdown()  # idempotent


def test_a_replacement_that_starts_after_shutdown_gave_up_waiting_is_stopped(monkeypatch) -> None:
    import services.rollout.fleet as fleet_module

    monkeypatch.setattr(fleet_module, "RESTART_WAIT_S", 0.1)
    go, made = threading.Event(), []

    def slow_restart(index: int) -> Recording:
        go.wait(30)  # a cold start still under way when the fleet shuts down
        made.append(Recording(f"new{index}"))
        return made[-1]

    a, b = Recording("a"), Recording("b", fail="raise")
    f = fleet(a, b, restart=slow_restart)
    f.rollout(samples(2))  # b fails: its replacement starts in the background
    future = f.members[1].restart
    f.shutdown()  # gives up on the replacement after 0.1 s
    assert a.stopped and b.stopped and not made
    go.set()
    assert future.result(timeout=30) is None
    assert len(made) == 1 and made[0].stopped, (
        "a replacement that came up after the shutdown was left running"
    )


class Ranks:
    """The actor ranks' side of a bucketed push by reference: one open pass at a time (as each rank
    holds one), opened when its first bucket is asked for; ``stop_after``: the ranks fail then."""

    def __init__(self, buckets: int = 3, stop_after: int | None = None) -> None:
        self.buckets, self.stop_after = buckets, stop_after
        self.open: object | None = None
        self.log: list[str] = []
        self.passes = 0

    def bucket_refs(self) -> BucketRefs:
        self.passes += 1
        name = f"p{self.passes}"

        def refs():
            me = object()
            self.open = me
            self.log.append(f"open {name}")
            try:
                for i in range(self.buckets):
                    if self.stop_after is not None and i == self.stop_after:
                        raise RuntimeError("actor rank 1 of 2 failed in weight buckets")
                    assert self.open is me, "another pass took the ranks' slot"
                    yield f"{name}-{i}"
            finally:
                self.open = None
                self.log.append(f"close {name}")

        return BucketRefs(announced=(("w", (1,)),), refs=refs())


def test_buckets_by_reference_reach_every_engine_before_the_next_is_made() -> None:
    ranks = Ranks(buckets=3)
    a, b = Recording("a"), Recording("b")
    with fleet(a, b, restart=lambda i: Recording(f"new{i}"), current_weights=ranks.bucket_refs) as f:
        f.push_weights(ranks.bucket_refs())
        assert f.weight_version == 1
    for engine in (a, b):
        assert engine.events == ["begin", "load p1-0", "load p1-1", "load p1-2", "end"]
        assert engine.pushes == [("p1-0", "p1-1", "p1-2")]
    assert ranks.log == ["open p1", "close p1"]


def test_a_replacement_s_pass_is_over_before_the_push_that_adopts_it_opens_its_own() -> None:
    ranks = Ranks(buckets=2)
    replacements, restart = restarts()

    a, b = Recording("a"), Recording("b")
    with fleet(a, b, restart=restart, current_weights=ranks.bucket_refs) as f:
        f.push_weights(ranks.bucket_refs())
        lose_and_wait(f, b, replacements)
        # the loop makes the push's pass before the fleet adopts the replacement (which makes one more)
        f.push_weights(ranks.bucket_refs())
        (new,) = replacements
        assert f.members[1].engine is new and f.members[1].alive and f.weight_version == 2
    assert new.pushes == [("p3-0", "p3-1"), ("p2-0", "p2-1")]  # the current weights, then the push's
    assert ranks.log == ["open p1", "close p1", "open p3", "close p3", "open p2", "close p2"]


def test_a_pass_the_ranks_stop_ends_every_engine_s_push_and_takes_them_out() -> None:
    ranks = Ranks(buckets=3, stop_after=1)
    a, b = Recording("a"), Recording("b")
    with fleet(a, b, restart=lambda i: Recording(f"new{i}"), current_weights=ranks.bucket_refs) as f:
        with pytest.raises(RuntimeError, match="actor rank 1 of 2 failed"):
            f.push_weights(ranks.bucket_refs())
        # each engine finished its reload (it can generate again), but its weights are undefined: out
        assert a.events[-1] == b.events[-1] == "end failed"
        assert not any(m.alive for m in f.members) and f.weight_version == 0
        assert f.pop_metrics()["rollout/engine_failures"] == 2
    assert ranks.log == ["open p1", "close p1"]


def test_an_engine_lost_mid_pass_leaves_it_and_the_others_finish() -> None:
    ranks = Ranks(buckets=2)
    a, b = Recording("a"), Recording("b", fail="raise-bucket")
    with fleet(a, b, restart=lambda i: Recording(f"new{i}"), current_weights=ranks.bucket_refs) as f:
        f.push_weights(ranks.bucket_refs())
        assert f.weight_version == 1 and f.members[0].alive and not f.members[1].alive
    assert a.pushes == [("p1-0", "p1-1")] and "end" not in b.events
    assert ranks.log == ["open p1", "close p1"]


def test_refused_names_leave_every_engine_as_it_was_and_make_no_bucket() -> None:
    ranks = Ranks()
    a, b = Recording("a", fail="refuse-push"), Recording("b", fail="refuse-push")
    with fleet(a, b, restart=lambda i: Recording(f"new{i}"), current_weights=ranks.bucket_refs) as f:
        with pytest.raises(ValueError, match="wrong shape"):
            f.push_weights(ranks.bucket_refs())
        assert all(m.alive for m in f.members) and f.weight_version == 0
    assert ranks.log == [] and a.weight_version == b.weight_version == 0


def test_a_restarting_fleet_without_current_weights_refuses_a_pass_by_reference() -> None:
    with (
        fleet(Recording("a"), restart=lambda i: Recording("new")) as f,
        pytest.raises(ValueError, match="one pass"),
    ):
        f.push_weights(Ranks().bucket_refs())


class Broadcaster:
    """Rank 0's side of a push over a weight group, and the group: ``break_at``, a bucket whose
    broadcast breaks in the first group formed (every member fails it);
    ``rank_fails_at``: a bucket rank 0 cannot make."""

    at: ClassVar[dict[str, Broadcaster]] = {}

    def __init__(
        self, buckets: int = 2, break_at: int | None = None, rank_fails_at: int | None = None
    ) -> None:
        self.count, self.break_at, self.rank_fails_at = buckets, break_at, rank_fails_at
        self.log: list[str] = []
        self.groups = 0
        self.name = "g0"

    @property
    def held(self) -> str | None:
        """The group rank 0 holds: the last one formed, until ``drop``."""
        return None if self.dropped else self.name

    dropped = False

    def breaks(self, index: int) -> bool:
        return index == self.break_at and self.groups == 1

    def push(self) -> BucketBroadcast:
        def address() -> str:
            self.groups += 1
            self.name = f"g{self.groups}"
            Broadcaster.at[self.name] = self
            return self.name

        def connect(address: str, world: int):
            self.log.append(f"group {address} of {world}")
            return lambda: address  # the token: the group's name

        def send(index: int):
            def wait() -> None:
                if index == self.rank_fails_at:
                    raise RuntimeError("actor rank 1 of 2 failed in weight bucket")
                if self.breaks(index):
                    raise WeightGroupError("weight group (rank 0 of 3): Connection closed by peer")

            return wait

        return BucketBroadcast(
            announced=tuple((f"w{i}", (1,)) for i in range(self.count)),
            buckets=tuple(((f"w{i}", (1,), "float32"),) for i in range(self.count)),
            sender="rank0", backend="gloo", timeout_s=5.0, address=address, connect=connect,
            group=lambda: self.held,
            open=lambda: self.log.append("open"), send=send, close=lambda: self.log.append("close"),
        )  # fmt: skip


def test_a_broadcast_push_reaches_every_engine_over_one_group_formed_once() -> None:
    ranks = Broadcaster(buckets=2)
    a, b = Recording("a"), Recording("b")
    with fleet(a, b) as f:
        f.push_weights(ranks.push())
        f.push_weights(ranks.push())
        assert f.weight_version == 2
    assert a.events == [
        "begin",
        "join 1/3",
        "recv g1-0",
        "recv g1-1",
        "end",
        "begin",
        "recv g1-0",
        "recv g1-1",
        "end",
    ]
    assert b.events[1] == "join 2/3"
    assert ranks.log == ["group g1 of 3", "open", "close", "open", "close"]


def test_an_engine_lost_mid_broadcast_leaves_and_the_others_get_the_push_over_a_new_group() -> None:
    ranks = Broadcaster(buckets=3, break_at=1)
    a, b, c = Recording("a"), Recording("b", fail="die-receive"), Recording("c")
    with fleet(a, b, c, restart=lambda i: None) as f:
        push = ranks.push()
        f.push_weights(push)
        assert f.weight_version == 1 and [m.alive for m in f.members] == [True, False, True]
        assert f.pop_metrics()["rollout/engine_failures"] == 1
    # a and c: the broken attempt ended as failed, then the whole push again over a group of three
    assert a.events == ["begin", "join 1/4", "recv g1-0", "end failed", "begin", "join 1/3", "recv g2-0",
                        "recv g2-1", "recv g2-2", "end"]  # fmt: skip
    assert c.events[-5] == "join 2/3" and c.weight_version == 2
    assert ranks.log == ["group g1 of 4", "open", "close", "group g2 of 3", "open", "close"]


def test_a_broadcast_the_ranks_break_with_every_engine_alive_fails_them_and_is_raised() -> None:
    ranks = Broadcaster(buckets=2, rank_fails_at=1)
    a, b = Recording("a"), Recording("b")
    with fleet(a, b, restart=lambda i: None) as f:
        with pytest.raises(RuntimeError, match="actor rank 1 of 2 failed"):
            f.push_weights(ranks.push())
        assert not any(m.alive for m in f.members) and f.weight_version == 0
        assert a.events[-1] == b.events[-1] == "end failed"
    assert ranks.log == ["group g1 of 3", "open", "close"]


def test_a_replacement_joins_a_new_group_for_the_current_weights_and_the_next_push_forms_one_for_all() -> (
    None
):
    ranks = Broadcaster(buckets=1)
    replacements, restart = restarts()

    a, b = Recording("a"), Recording("b")
    with fleet(a, b, restart=restart) as f:
        f.push_weights(ranks.push())
        lose_and_wait(f, b, replacements)
        f.push_weights(ranks.push())
        (new,) = replacements
        assert f.members[1].engine is new and f.members[1].alive and f.weight_version == 2
    # the replacement alone with rank 0 (the kept push, made again), then everyone
    assert new.events == ["begin", "join 1/2", "recv g2-0", "end", "begin", "join 2/3", "recv g3-0", "end"]
    assert ranks.log == ["group g1 of 3", "open", "close", "group g2 of 2", "open", "close", "group g3 of 3",
                         "open", "close"]  # fmt: skip


def test_refused_names_form_no_group() -> None:
    ranks = Broadcaster()
    a, b = Recording("a", fail="refuse-push"), Recording("b", fail="refuse-push")
    with fleet(a, b) as f, pytest.raises(ValueError, match="wrong shape"):
        f.push_weights(ranks.push())
    assert ranks.log == [] and a.weight_version == b.weight_version == 0


def test_an_engine_s_own_failure_leaves_it_alone_out_and_the_others_take_the_push_again() -> None:
    ranks = Broadcaster(buckets=2, break_at=0)
    a, b = Recording("a"), Recording("b", fail="own-error")
    with fleet(a, b, restart=lambda i: None) as f:
        f.push_weights(ranks.push())
        assert f.weight_version == 1 and [m.alive for m in f.members] == [True, False]
        assert "could not load" in f.members[1].failures[0]
        assert f.pop_metrics()["rollout/engine_failures"] == 1
    assert a.events == [
        "begin",
        "join 1/3",
        "end failed",
        "begin",
        "join 1/2",
        "recv g2-0",
        "recv g2-1",
        "end",
    ]
    assert "end failed" not in b.events  # out at once: not asked to end what it failed at


def test_a_group_rank_0_no_longer_holds_is_formed_again() -> None:
    ranks = Broadcaster(buckets=1)
    a = Recording("a")
    with fleet(a) as f:
        f.push_weights(ranks.push())
        ranks.dropped = True  # e.g. rank 0 left it after a failed send
        f.push_weights(ranks.push())
    assert [e for e in a.events if e.startswith("join")] == ["join 1/2", "join 1/2"]
    assert ranks.log.count("group g1 of 2") == 1 and ranks.log.count("group g2 of 2") == 1


def test_buckets_that_do_not_carry_the_announced_tensors_are_refused_before_any_group() -> None:
    push = Broadcaster().push()
    with pytest.raises(ValueError, match="do not carry the announced"):
        dataclasses.replace(push, announced=(("v", (1,)),))
