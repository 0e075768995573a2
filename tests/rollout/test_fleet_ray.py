"""Two disaggregated engines (Ray actors, 1 CPU each, TP 1) behind one fleet on a local Ray: the
samples are split between them with the tokens one engine would sample; after a push both engines'
log-probs are the new weights' (so the changed weights reached both); an engine killed mid-generation
leaves the step complete with rollout/engine_failures at 1, and its replacement gets the current
weights before any work; shutdown leaves none of the processes the test started."""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
import torch

from services.reward.config import RewardConfig
from services.rollout.environment import core_share
from services.rollout.fleet import Fleet
from services.rollout.seeds import SeedKey
from tests.rollout.conftest import small_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]
FAMILY = "qwen2_5_vl"
TOLERANCE = 1e-5


def descendants() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.fixture(scope="module")
def ray_fleet(tiny_models, clips):
    import ray

    from services.trainer.ray_rollout import RayRolloutEngine

    before = descendants()
    temp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    # 4 logical CPUs: two engine bundles of 1 CPU and room for a replacement (2 cores in fact)
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, _temp_dir=str(temp))
    config = small_config()

    def start(index: int) -> RayRolloutEngine:
        return RayRolloutEngine(
            str(tiny_models[FAMILY]), config, source=clips.store, reward=RewardConfig(), cpus=1.0,
            cpu_slot=(index, 2),
        )  # fmt: skip

    fleet = None
    try:
        fleet = Fleet(
            [start(0), start(1)], max_tokens=config.max_tokens, n=config.n, timeout_s=600, restart=start
        )
        local = SimpleNamespace(checkpoint=None, source=clips.store, config=config)
        from services.rollout.checkpoint import Checkpoint

        local.checkpoint = Checkpoint.load(tiny_models[FAMILY])
        yield SimpleNamespace(fleet=fleet, local=local, before=before, ray=ray, temp=temp)
    finally:
        if fleet is not None:
            fleet.shutdown()
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


def gap(expected: torch.Tensor, got: list[float]) -> float:
    return (expected - torch.tensor(got)).abs().max().item()


def some_samples(video_sample, count: int, prefix: str):
    clips = ["wide", "tall_in_time"]
    return [video_sample(FAMILY, clips[i % 2], f"{prefix}-{i}") for i in range(count)]


def test_samples_are_split_between_the_engines_with_one_engine_s_tokens(ray_fleet, video_sample) -> None:
    fleet = ray_fleet.fleet
    samples = some_samples(video_sample, 4, "split")
    groups = fleet.rollout(samples, key=SeedKey(1), prompt_tokens=[10] * 4)
    assert [g.sample_id for g in groups] == [s.id for s in samples]
    assert sorted(fleet.last_engines) == [0, 0, 1, 1]
    alone = Fleet([fleet.members[0].engine], max_tokens=fleet.max_tokens, n=fleet.n)
    same = alone.rollout(samples, key=SeedKey(1))
    assert [[r.token_ids for r in g.responses] for g in same] == [
        [r.token_ids for r in g.responses] for g in groups
    ]


def own_cores(engine) -> set[tuple[int, ...]]:
    """The core sets of an engine's actor, which runs its vLLM engine core and worker in-process on the
    CPU (no processes of their own: tests/rollout/test_core_share.py pins processes a pinned actor
    would start)."""
    seen = engine.affinity()
    assert set(seen) == {"actor"}, seen
    return {tuple(cores) for cores in seen.values()}


def test_each_engine_keeps_to_its_own_core(ray_fleet) -> None:
    # as one GPU per engine on a cluster: engine i's frontend, scheduler and worker on core i only
    cores = sorted(os.sched_getaffinity(0))
    assert len(cores) >= 2, "two engines need two cores to keep apart"
    for index, member in enumerate(ray_fleet.fleet.members):
        assert own_cores(member.engine) == {tuple(core_share(cores, index, 2))}
        # and its worker, this process, computes with the share's cores (Ray set 1 thread)
        info = ray_fleet.ray.get(member.engine.worker.info.remote())
        assert info["threads"] == len(core_share(cores, index, 2))


def test_after_a_push_both_engines_sample_from_the_new_weights(
    ray_fleet, video_sample, tiny_models, hf_model, hf_logprobs
) -> None:
    fleet, local = ray_fleet.fleet, ray_fleet.local
    old = hf_model(tiny_models[FAMILY])
    new = copy.deepcopy(old)
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
    sample = video_sample(FAMILY, "wide", "pushed")
    version = fleet.weight_version
    counts = [m.engine.weight_version for m in fleet.members]  # each engine's own count of pushes
    fleet.push_weights(ray_fleet.ray.put(new.state_dict()))
    assert fleet.weight_version == version + 1
    assert [m.engine.weight_version for m in fleet.members] == [c + 1 for c in counts], "both took it"
    for member in fleet.members:
        (group,) = member.engine.rollout([sample], key=SeedKey(2))
        for response in group.responses:
            assert gap(hf_logprobs(local, new, sample, response.token_ids), response.logprobs) < TOLERANCE
            assert gap(hf_logprobs(local, old, sample, response.token_ids), response.logprobs) > 1e-3
    groups = fleet.rollout([sample, video_sample(FAMILY, "tall_in_time", "pushed-2")], key=SeedKey(2))
    assert sorted(fleet.last_engines) == [0, 1]
    assert {r.weight_version for g in groups for r in g.responses} == {version + 1}  # the fleet's label


def test_buckets_by_reference_reach_both_engines_each_before_the_next_is_made(
    ray_fleet, video_sample, tiny_models, hf_model, hf_logprobs
) -> None:
    from services.rollout.weight_sync import BucketRefs
    from services.trainer.weight_buckets import weight_buckets

    fleet, local, ray = ray_fleet.fleet, ray_fleet.local, ray_fleet.ray
    new = copy.deepcopy(hf_model(tiny_models[FAMILY]))  # the session's model stays as loaded
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
    plan = weight_buckets(new, None, 0.25)
    events: list[tuple[str, int]] = []

    def made() -> Iterator:  # as the actor ranks make them: one object per bucket, when asked
        for i, bucket in enumerate(plan.open()):
            events.append(("make", i))
            yield ray.put(bucket)

    loads = [m.engine.load_weight_bucket for m in fleet.members]

    def spy(index: int, real):
        def load(ref):
            events.append((f"load{index}", len(events)))
            return real(ref)

        return load

    for index, member in enumerate(fleet.members):
        member.engine.load_weight_bucket = spy(index, loads[index])
    version = fleet.weight_version
    # one pass only: a fleet that restarts engines must be able to make another for a replacement
    with pytest.raises(ValueError, match="one pass"):
        fleet.push_weights(BucketRefs(plan.announced, made()))
    fleet._current_weights = lambda: BucketRefs(plan.announced, made(), plan.nbytes)
    try:
        # a wrong shape is refused before any bucket is made, and both engines keep their weights
        wrong = ((plan.announced[0][0], (1, 2, 3)), *plan.announced[1:])
        with pytest.raises(ValueError, match="wrong shape"):
            fleet.push_weights(BucketRefs(wrong, made()))
        assert events == [] and fleet.weight_version == version
        fleet.push_weights(BucketRefs(plan.announced, made(), plan.nbytes))
    finally:
        fleet._current_weights = None
        for member, real in zip(fleet.members, loads, strict=True):
            member.engine.load_weight_bucket = real
    assert fleet.weight_version == version + 1
    makes = [i for i, (what, _) in enumerate(events) if what == "make"]
    assert len(makes) > 1, "the model went in one bucket: the check below would see nothing"
    for a, b in zip(makes, [*makes[1:], len(events)], strict=True):  # after each bucket, both engines
        assert sorted(what for what, _ in events[a + 1 : b]) == ["load0", "load1"], events
    sample = video_sample(FAMILY, "tall_in_time", "bucketed")
    for member in fleet.members:
        (group,) = member.engine.rollout([sample], key=SeedKey(3))
        for response in group.responses:
            assert gap(hf_logprobs(local, new, sample, response.token_ids), response.logprobs) < TOLERANCE
    # the same weights once more as a state dict: the fleet (without current_weights again) keeps them
    # for the replacement of the next test
    fleet.push_weights(ray.put(new.state_dict()))


class Rank0:
    """The actor's rank 0 in a weight group (what ``ActorWorker`` does with FSDP shards, here with a
    whole model: tests/trainer/test_ray_group.py runs the ranks' own side): serves the group and
    broadcasts each bucket of a pass."""

    def __init__(self, state: dict, bucket_mb: float) -> None:
        from services.trainer.weight_buckets import bucket_slots, manifest

        self.state, self.bucket_mb = state, bucket_mb
        self.slots = bucket_slots(manifest(state, None), bucket_mb)
        self.member, self.pass_, self.token = None, None, None

    def address(self) -> str:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return f"127.0.0.1:{sock.getsockname()[1]}"

    def join(self, address: str, world: int) -> str:
        from services.rollout import weight_group

        if self.member is not None:
            self.member.close()
        self.member = weight_group.join(address, 0, world, 15.0, "gloo")
        self.token = address
        return self.token

    def held(self) -> str | None:
        return self.token if self.member is not None and self.member.open else None

    def open(self) -> None:
        from services.trainer.weight_buckets import group_stream, manifest

        self.pass_ = group_stream(iter(self.state.items()), manifest(self.state, None), self.bucket_mb)

    def send(self, index: int) -> int:
        from services.rollout import weight_group

        return weight_group.send_bucket(
            self.member, index, lambda: next(self.pass_), self.slots[index], "cpu"
        )


def broadcast_push(ray, rank0, slots, announced, sent: list[int] | None = None):
    from services.rollout.weight_sync import BucketBroadcast

    def send(index: int):
        ref = rank0.send.remote(index)
        if sent is not None:
            sent.append(index)
        return lambda: ray.get(ref)

    return BucketBroadcast(
        announced=announced, buckets=tuple(tuple((n, tuple(sh), d) for n, sh, d in b) for b in slots),
        sender="rank0", backend="gloo", timeout_s=15.0, address=lambda: ray.get(rank0.address.remote()),
        connect=lambda address, world: (lambda ref: lambda: ray.get(ref))(rank0.join.remote(address, world)),
        group=lambda: ray.get(rank0.held.remote()),
        open=lambda: ray.get(rank0.open.remote()), send=send, close=lambda: None,
    )  # fmt: skip


def test_a_broadcast_push_reaches_both_engines_and_survives_one_lost_mid_push(
    ray_fleet, video_sample, tiny_models, hf_model, hf_logprobs
) -> None:
    from services.trainer.weight_buckets import bucket_slots, manifest

    fleet, local, ray = ray_fleet.fleet, ray_fleet.local, ray_fleet.ray
    new = copy.deepcopy(hf_model(tiny_models[FAMILY]))
    generator = torch.Generator().manual_seed(9)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
    state = {k: v.contiguous() for k, v in new.state_dict().items()}
    slots = bucket_slots(manifest(state, None), 0.25)
    announced = tuple((n, tuple(t.shape)) for n, t in state.items())
    rank0 = ray.remote(Rank0).options(num_cpus=0).remote(state, 0.25)
    try:
        assert len(slots) > 2, "the model went in two buckets or fewer: the kill below would see nothing"
        version = fleet.weight_version
        fleet.pop_metrics()
        fleet.push_weights(broadcast_push(ray, rank0, slots, announced))
        assert fleet.weight_version == version + 1
        sample = video_sample(FAMILY, "wide", "broadcast")
        for member in fleet.members:
            (group,) = member.engine.rollout([sample], key=SeedKey(5))
            for response in group.responses:
                assert gap(hf_logprobs(local, new, sample, response.token_ids), response.logprobs) < TOLERANCE

        # engine 1's actor dies after the first bucket: the broadcast breaks for both, engine 0 takes
        # the whole push again over a new group, and engine 1 leaves (counted, replaced)
        victim = fleet.members[1].engine
        sent: list[int] = []
        push = broadcast_push(ray, rank0, slots, announced, sent)
        real_send = push.send

        def send(index: int):
            if index == 1 and victim.worker is not None and fleet.members[1].engine is victim:
                ray.kill(victim.worker)
            return real_send(index)

        import dataclasses

        fleet.push_weights(dataclasses.replace(push, send=send))
        assert fleet.weight_version == version + 2 and fleet.members[0].alive and not fleet.members[1].alive
        assert sent[:2] == [0, 1] and sent.count(0) == 2  # broken at bucket 1, then again from the start
        assert fleet.pop_metrics()["rollout/engine_failures"] == 1.0
        (group,) = fleet.members[0].engine.rollout([sample], key=SeedKey(6))
        for response in group.responses:
            assert gap(hf_logprobs(local, new, sample, response.token_ids), response.logprobs) < TOLERANCE
        # the replacement joins a group of its own with rank 0 for the current weights before any work
        fleet.members[1].restart.result(600)
        both = [sample, video_sample(FAMILY, "tall_in_time", "broadcast-2")]
        groups = fleet.rollout(both, key=SeedKey(6))
        assert fleet.members[1].alive and sorted(fleet.last_engines) == [0, 1]
        for asked, g in zip(both, groups, strict=True):
            for response in g.responses:
                assert gap(hf_logprobs(local, new, asked, response.token_ids), response.logprobs) < TOLERANCE
        # the same weights as a state dict: the fleet keeps them (not rank 0's group) for the next test
        fleet.push_weights(ray.put(new.state_dict()))
    finally:
        ray.kill(rank0)


def test_an_engine_killed_mid_generation_leaves_the_step_complete(ray_fleet, video_sample) -> None:
    fleet, ray = ray_fleet.fleet, ray_fleet.ray
    fleet.pop_metrics()
    samples = some_samples(video_sample, 4, "killed")
    victim = fleet.members[1].engine
    result: dict = {}

    def step() -> None:
        result["groups"] = fleet.rollout(
            samples, key=SeedKey(3), prompt_tokens=[10] * 4, max_tokens=1800, ignore_eos=True
        )

    worker = threading.Thread(target=step)
    worker.start()
    time.sleep(1.5)
    assert worker.is_alive(), "generation ended before the engine was killed: make it longer"
    ray.kill(victim.worker)
    worker.join(600)
    assert [g.sample_id for g in result["groups"]] == [s.id for s in samples]
    assert all(len(r.token_ids) == 1800 for g in result["groups"] for r in g.responses)
    assert fleet.pop_metrics() == {"rollout/engine_failures": 1.0, "rollout/engines_alive": 1.0}
    assert set(fleet.last_engines) == {0}

    # the replacement starts in the background; it takes the current weights before any work
    fleet.members[1].restart.result(600)
    groups = fleet.rollout(samples, key=SeedKey(4), prompt_tokens=[10] * 4)
    replacement = fleet.members[1].engine
    assert replacement is not victim and fleet.members[1].alive
    assert own_cores(replacement) == {tuple(core_share(sorted(os.sched_getaffinity(0)), 1, 2))}  # its share
    assert replacement.weight_version == (1 if fleet.weight_version else 0)
    assert sorted(fleet.last_engines) == [0, 0, 1, 1]
    assert {r.weight_version for g in groups for r in g.responses} == {fleet.weight_version}


def test_shutdown_stops_every_engine_and_ray(ray_fleet) -> None:
    ray_fleet.fleet.shutdown()
    ray_fleet.ray.shutdown()
    deadline = time.monotonic() + 60
    while (left := descendants() - ray_fleet.before) and time.monotonic() < deadline:
        time.sleep(0.5)
    names = []
    for pid in left:
        try:
            names.append(" ".join(psutil.Process(pid).cmdline())[:120])
        except psutil.Error:
            continue
    assert not names, names
