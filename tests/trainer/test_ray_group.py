"""The actor ranks as Ray actors (a local Ray of 2 CPUs, 2 FSDP ranks): one step and a checkpoint round
trip through :class:`RayActorGroup` match the single-process group, the pushed weights carry the names
the rollout engine accepts, a rank's failure names the rank, and shutdown leaves no process behind."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest
import torch

from services.rollout.checkpoint import Checkpoint
from services.trainer.group import LocalActorGroup
from services.trainer.layout import engine_cpus, generating_cpus
from services.trainer.ray_group import rank_threads
from services.trainer.sequences import balanced_shares, group_tokens
from services.trainer.update import SequenceTargets, combine_rank_metrics
from tests.trainer.actor_steps import UPDATE, advantages, build_world, make_groups, train_config

TOLERANCE = 1e-5


def test_rank_metrics_combine() -> None:
    ranks = [
        {"pg_loss": 0.25, "entropy": 1.0, "grad_norm": 2.0, "rollout_logprob_diff_max": 0.1},
        {"pg_loss": -0.5, "entropy": 3.0, "grad_norm": 2.0, "rollout_logprob_diff_max": 0.3},
    ]
    # loss shares add up to the global loss; means average; the largest gap is the larger one
    assert combine_rank_metrics(ranks) == {
        "pg_loss": -0.25,
        "entropy": 2.0,
        "grad_norm": 2.0,
        "rollout_logprob_diff_max": 0.3,
    }


def test_a_cpu_rank_computes_with_its_share_of_the_node() -> None:
    assert rank_threads(cores=2, node_cpus=3.0, ranks=1) == 2  # a lone rank on a 2-core node: both cores
    assert rank_threads(cores=16, node_cpus=3.0, ranks=2) == 1  # two ranks on a node of 3 Ray CPUs
    assert rank_threads(cores=2, node_cpus=2.0, ranks=4) == 1  # never none
    assert rank_threads(cores=64, node_cpus=8.0, ranks=1) == 8  # the node's Ray CPUs, not the machine's
    # a container of 4 cores on a 64-core host whose Ray counts 64: 2 ranks split the 4 cores
    assert rank_threads(cores=4, node_cpus=64.0, ranks=2) == 2
    # engines generating during the update (trainer.off_policy_steps: 1) keep their cores
    assert rank_threads(cores=2, node_cpus=3.0, ranks=1, busy=1.0) == 1
    assert rank_threads(cores=16, node_cpus=16.0, ranks=2, busy=2.0) == 7
    assert rank_threads(cores=2, node_cpus=2.0, ranks=1, busy=2.0) == 1  # never none


def test_engines_count_as_busy_during_the_update_only_off_policy() -> None:
    from services.trainer.config import parse_config

    def cpus(**trainer) -> float:
        return generating_cpus(parse_config({
            "data": {"train_files": ["t.jsonl"]}, "actor": {"model_path": "m"},
            "rollout": {"engines": 2}, "trainer": {"use_ray": True, **trainer},
        }))  # fmt: skip

    assert cpus() == 0.0  # on-policy engines idle while the ranks update
    assert cpus(off_policy_steps=1) == 2.0  # two disaggregated engines of 1 Ray CPU
    assert cpus(off_policy_steps=1, ray_cpus_rollout=1.5) == 2.0  # whole cores: one each
    assert cpus(off_policy_steps=1, rollout_on_ray=False) == 2.0  # two driver engines' workers
    # the engines' own cap (placement.start_disaggregated) is what the ranks leave them, whole cores
    assert cpus(off_policy_steps=1, ray_cpus_rollout=0.5) == 2.0
    for share in (0.5, 1.0, 1.5, 2.0):
        config = parse_config({
            "data": {"train_files": ["t.jsonl"]}, "actor": {"model_path": "m"},
            "trainer": {"use_ray": True, "off_policy_steps": 1, "ray_cpus_rollout": share},
        })  # fmt: skip
        assert generating_cpus(config) == engine_cpus(config) == max(1, int(share))


def gap(a: list[torch.Tensor] | dict[str, torch.Tensor], b: list[torch.Tensor] | dict) -> float:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        a, b = list(a.values()), [b[k] for k in a]
    assert [t.shape for t in a] == [t.shape for t in b]
    return max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True))


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def broadcast_pass(push, pushed: dict[str, torch.Tensor], *, form: bool) -> dict[str, torch.Tensor]:
    """Receive one push over its weight group as the group's rank 1 (formed first when ``form``),
    checking each bucket's announced order and size bound; returns every tensor received."""
    from services.rollout import weight_group

    assert [n for n, _ in push.announced] == list(pushed) and push.backend == "gloo"
    if form:
        address = push.address()
        wait = push.connect(address, 2)
        broadcast_pass.member = weight_group.join(address, 1, 2, push.timeout_s, "gloo")
        assert wait() == push.group() is not None  # rank 0 holds the group just formed
    else:
        assert push.group() is not None  # the group formed before is still rank 0's
    received: dict[str, torch.Tensor] = {}
    push.open()
    try:
        for index, slots in enumerate(push.buckets):
            wait = push.send(index)
            bucket = weight_group.receive(broadcast_pass.member, index, slots, "cpu")
            wait()
            size = sum(t.numel() * t.element_size() for t in bucket.values())
            assert size <= 0.05 * 2**20 or len(bucket) == 1
            received.update({k: v.clone() for k, v in bucket.items()})
    finally:
        push.close()
    assert len(push.buckets) > 1 and list(received) == list(pushed)
    return received


@pytest.mark.slow
@pytest.mark.integration
def test_ray_group_matches_one_process(tmp_path: Path) -> None:
    import ray

    from services.trainer.ray_group import RayActorGroup

    world = build_world(tmp_path, samples=3)
    # warmup 4 steps: the lr moves with every scheduler step, so a restored schedule shows
    config = train_config(world, world_size=2, optim={"lr": 0.1, "eps": 1.0, "weight_decay": 0.0,
                                                     "grad_clip": None, "warmup_steps": 4})  # fmt: skip
    rollout = config.effective_rollout()
    samples = list(world.samples)
    # 6 sequences in 3 groups of equal tokens: whole groups by tokens, ties to the lower rank, so rank 0
    # holds groups 0 and 2 and rank 1 group 1 (log-probs come back out of rank order)
    groups = make_groups(world, rollout, [[6, 4], [7, 3], [5, 5]])
    adv = advantages(groups)

    single = config.model_copy(update={"actor": config.actor.model_copy(update={"world_size": 1})})
    local = LocalActorGroup(single, str(world.model), world.store, rollout)
    local.load_batch(samples, groups)
    initial = {k: v.clone() for k, v in local.state_dict().items()}
    old = local.log_probs(temperature=1.0)
    first = local.update([SequenceTargets(a, o) for a, o in zip(adv, old, strict=True)], **UPDATE)
    after_first = {k: v.clone() for k, v in local.state_dict().items()}
    local.scheduler_step()
    old2 = local.log_probs(temperature=1.0)
    second = local.update([SequenceTargets(a, o) for a, o in zip(adv, old2, strict=True)], **UPDATE)
    after_second = {k: v.clone() for k, v in local.state_dict().items()}
    local.warm_start(samples, steps=1, lr=0.01, batch_size=3, seed=0)
    after_warm = local.state_dict()

    group = RayActorGroup(config, str(world.model), world.frames, rollout)
    try:
        assert ray.is_initialized()
        pids = [info["pid"] for info in group.info]
        assert [info["rank"] for info in group.info] == [0, 1]
        assert len(set(pids)) == 2 and all(alive(p) for p in pids)
        # each of the 2 ranks on the one node computes with half its CPUs (Ray alone would say 1)
        half = max(1, len(os.sched_getaffinity(0)) // 2)
        assert [info["threads"] for info in group.info] == [half, half]
        temp = group._temp_dir
        assert temp is not None and temp.is_dir()

        # a rank's failure arrives at once, with its type and the rank named
        wrong = [
            groups[0].model_copy(update={"prompt_token_ids": groups[0].prompt_token_ids[1:]}),
            *groups[1:],
        ]
        with pytest.raises(ValueError, match="differs from the rollout's") as failure:
            group.load_batch(samples, wrong)
        assert any("actor rank 0 of 2 failed in load_batch" in n for n in failure.value.__notes__)

        assert group.load_batch(samples, groups) == 6
        assert group.shares == balanced_shares(group_tokens(groups), 2) == [[0, 1, 4, 5], [2, 3]]
        pushed = group.state_dict()
        assert gap(pushed, initial) == 0.0
        # the rollout engine's push check accepts exactly these names
        Checkpoint.load(world.model).parameter_names.check(pushed, "push")

        # the same weights in buckets made one at a time by both ranks (FSDP shards gathered per
        # tensor), rank 0's sent by reference: every tensor once, in announced order, none of them
        # in the driver until asked for
        bucketed = group.bucket_refs(0.05)
        assert [n for n, _ in bucketed.announced] == list(pushed)
        assert [tuple(s) for _, s in bucketed.announced] == [tuple(t.shape) for t in pushed.values()]
        received: dict[str, torch.Tensor] = {}
        count = 0
        for ref in bucketed.refs:
            bucket = ray.get(ref)
            size = sum(t.numel() * t.element_size() for t in bucket.values())
            assert size <= 0.05 * 2**20 or len(bucket) == 1  # a tensor larger than a bucket goes alone
            received.update(bucket)
            count += 1
        assert count > 1 and list(received) == list(pushed) and gap(received, pushed) == 0.0
        # a pass left early closes on both ranks; the next one starts afresh
        early = group.bucket_refs(0.05)
        next(early.refs)
        early.refs.close()
        assert (
            gap({k: v for ref in group.bucket_refs(1024).refs for k, v in ray.get(ref).items()}, pushed)
            == 0.0
        )

        # the same buckets over a weight-broadcast group: rank 0 broadcasts each one to the members
        # (this process, rank 1 of the group, plays an engine worker), twice over the one group
        assert gap(broadcast_pass(group.bucket_broadcast(0.05, 60.0), pushed, form=True), pushed) == 0.0
        assert gap(broadcast_pass(group.bucket_broadcast(0.05, 60.0), pushed, form=False), pushed) == 0.0

        ray_old = group.log_probs(temperature=1.0)
        assert gap(ray_old, old) <= TOLERANCE
        metrics = group.update([SequenceTargets(a, o) for a, o in zip(adv, ray_old, strict=True)], **UPDATE)
        assert metrics["grad_norm"] == pytest.approx(first["grad_norm"], rel=TOLERANCE)
        assert metrics["pg_loss"] == pytest.approx(first["pg_loss"], abs=TOLERANCE)
        assert metrics["ppo_kl"] == pytest.approx(0.0, abs=1e-7)
        assert gap(group.state_dict(), after_first) <= TOLERANCE
        # the reference model stays at the initial weights while the actor has moved on
        assert gap(group.log_probs(temperature=1.0, reference=True), old) <= TOLERANCE
        assert group.scheduler_step() == pytest.approx(0.025)  # (0 + 1) / 4 of the lr

        folder = tmp_path / "checkpoint"
        folder.mkdir()
        group.save(folder)
        assert sorted(p.name for p in folder.iterdir()) == ["model", "optim_rank0.pt", "optim_rank1.pt"]
        saved = Checkpoint.load(folder / "model")  # an HF checkpoint the engine can load
        saved.parameter_names.check(pushed, "push")
        assert group.scheduler_step() == pytest.approx(0.05)  # the schedule moves on (0.075 now) ...
        group.load_optimizer(folder)  # ... and back to where it was saved (0.05)

        ray_old2 = group.log_probs(temperature=1.0)
        assert gap(ray_old2, old2) <= TOLERANCE
        assert gap(ray_old2, old) > 100 * TOLERANCE
        second_ray = group.update(
            [SequenceTargets(a, o) for a, o in zip(adv, ray_old2, strict=True)], **UPDATE
        )
        assert group.scheduler_step() == pytest.approx(0.05)  # the lr the second update used
        # the restored AdamW moments carry on exactly as the uninterrupted single-process run's
        assert second_ray["grad_norm"] == pytest.approx(second["grad_norm"], rel=TOLERANCE)
        assert gap(group.state_dict(), after_second) <= TOLERANCE

        group.warm_start(samples, steps=1, lr=0.01, batch_size=3, seed=0)
        warm = group.state_dict()
        # The warm start's own AdamW (eps 1e-8) moves each weight by about lr·sign(g): a handful of
        # weights whose gradient is zero up to rounding move by rounding-dependent amounts (≤ lr)
        gaps = torch.cat([(warm[k] - after_warm[k]).abs().flatten() for k in warm])
        assert float(gaps.max()) <= 0.01
        assert float((gaps > TOLERANCE).float().mean()) < 1e-4
    finally:
        group.shutdown()
        local.shutdown()
    assert not ray.is_initialized()  # the group started this local Ray, so it stopped it
    deadline = time.monotonic() + 30
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not [p for p in pids if alive(p)], "actor rank processes outlived shutdown"
    assert not temp.exists()
    group.shutdown()  # twice is harmless


@pytest.mark.slow
@pytest.mark.integration
def test_a_lone_cpu_rank_computes_with_every_core(tmp_path: Path, monkeypatch) -> None:
    """Ray starts an actor that asks for less than 2 CPUs with one OpenMP thread: a lone rank on the
    CPU would compute its update on one core while the others idle."""
    import ray

    from services.trainer.ray_group import RayActorGroup

    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # a local Ray of this test's own

    world = build_world(tmp_path, samples=1)
    config = train_config(world, world_size=1)
    group = RayActorGroup(config, str(world.model), world.frames, config.effective_rollout())
    try:
        cores = len(os.sched_getaffinity(0))
        assert ray.cluster_resources()["CPU"] >= cores
        assert [info["threads"] for info in group.info] == [cores]
    finally:
        group.shutdown()
