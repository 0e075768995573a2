"""Offload (services/trainer/offload.py): storages parked on the host are emptied (their bytes go back
to the allocator) and come back bit for bit; an update after a round trip of the actor's weights,
gradients and AdamW moments equals one without it, bit for bit; AdamW's moments kept on the host
between steps change nothing either. (Two FSDP ranks with the shards on the host: test_fsdp.py.)"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from services.trainer.group import LocalActorGroup
from services.trainer.offload import HostCopies, local, optimizer_tensors
from services.trainer.update import SequenceTargets
from tests.trainer.actor_steps import UPDATE, advantages, build_world, make_groups, train_config


def test_parked_storages_are_empty_and_come_back_bit_for_bit() -> None:
    whole = torch.randn(10, generator=torch.Generator().manual_seed(0))
    view = whole[2:5]  # a view: its storage (all 10 values) is parked once, padding included
    other = torch.arange(4.0)
    before = (whole.clone(), other.clone())
    host = HostCopies()
    freed = host.park([view, whole, other, None])
    assert freed == (10 + 4) * 4 and host.nbytes == freed and host.parked
    assert whole.untyped_storage().nbytes() == 0 and other.untyped_storage().nbytes() == 0
    assert host.restore() == freed and not host.parked
    assert torch.equal(whole, before[0]) and torch.equal(other, before[1])
    assert torch.equal(view, before[0][2:5])
    assert host.restore() == 0  # nothing left to restore


def _steps(
    world, config, groups, *, round_trip: bool
) -> tuple[dict[str, torch.Tensor], list[dict[str, int]]]:
    """Two updates of one actor on the same batch; with ``round_trip`` its state goes to the host and
    back between them (where colocated generation would run). Returns the final weights and what
    each offload freed."""
    group = LocalActorGroup(config, str(world.model), world.store, config.effective_rollout())
    freed = []
    try:
        group.load_batch(list(world.samples[: len(groups)]), groups)
        every = advantages(groups)
        share = group.share
        for _ in range(2):
            old = group.log_probs(temperature=1.0)
            group.update([SequenceTargets(every[i], o) for i, o in zip(share, old, strict=True)], **UPDATE)
            if round_trip:
                freed.append(group.actor.offload())
                actor = group.actor
                parked = [*actor.model.parameters(), *optimizer_tensors(actor.optimizer)]
                assert all(local(t).untyped_storage().nbytes() == 0 for t in parked)
                actor.reload()
        return {k: v.clone() for k, v in group.state_dict().items()}, freed
    finally:
        group.shutdown()


@pytest.mark.integration
def test_an_update_after_a_round_trip_equals_one_without(tmp_path: Path) -> None:
    world = build_world(tmp_path / "world")
    config = train_config(world)
    groups = make_groups(world, config.effective_rollout(), [[5, 9], [7, 3]])
    plain, _ = _steps(world, config, groups, round_trip=False)
    tripped, freed = _steps(world, config, groups, round_trip=True)
    assert plain.keys() == tripped.keys()
    assert all(torch.equal(plain[k], tripped[k]) for k in plain)  # bit for bit
    params = sum(v.numel() * v.element_size() for v in plain.values())
    # fp32 weights, and AdamW's two fp32 moments per trained weight (+ its step counters)
    assert freed[0]["params"] >= params and freed[0]["optimizer"] >= 2 * params
    assert freed[0]["grads"] == 0  # the step zeroed them (set to None)


@pytest.mark.integration
def test_moments_kept_on_the_host_between_steps_change_nothing(tmp_path: Path) -> None:
    world = build_world(tmp_path / "world")
    groups = make_groups(world, train_config(world).effective_rollout(), [[5, 9], [7, 3]])
    plain, _ = _steps(world, train_config(world), groups, round_trip=False)
    config = train_config(world, offload_optimizer=True)
    group = LocalActorGroup(config, str(world.model), world.store, config.effective_rollout())
    try:
        group.load_batch(list(world.samples[:2]), groups)
        every = advantages(groups)
        for _ in range(2):
            old = group.log_probs(temperature=1.0)
            group.update([SequenceTargets(e, o) for e, o in zip(every, old, strict=True)], **UPDATE)
            moments = optimizer_tensors(group.actor.optimizer)
            assert moments and all(t.untyped_storage().nbytes() == 0 for t in moments if t.dim())
        offloaded = {k: v.clone() for k, v in group.state_dict().items()}
        state = group.actor.state()  # a checkpoint brings them back first
        assert all(t.untyped_storage().nbytes() > 0 for t in optimizer_tensors(group.actor.optimizer))
        assert state["optimizer"]["state"]
    finally:
        group.shutdown()
    assert all(torch.equal(plain[k], offloaded[k]) for k in plain)


def test_host_offload_of_fsdp_units_needs_ranks() -> None:
    from services.trainer.config import ActorConfig

    with pytest.raises(ValueError, match=r"actor\.offload_params streams FSDP units from the host"):
        ActorConfig(model_path="m", offload_params=True)
    ActorConfig(model_path="m", offload_params=True, offload_reference=True, world_size=2)
    ActorConfig(model_path="m", offload_optimizer=True)


@contextlib.contextmanager
def updated_group(tmp_path: Path, **actor: Any) -> Iterator[LocalActorGroup]:
    """A one-rank group of the test world after one update on a batch of two groups."""
    world = build_world(tmp_path / "world")
    config = train_config(world, **actor)
    groups = make_groups(world, config.effective_rollout(), [[5, 9], [7, 3]])
    group = LocalActorGroup(config, str(world.model), world.store, config.effective_rollout())
    try:
        group.load_batch(list(world.samples[:2]), groups)
        every = advantages(groups)
        old = group.log_probs(temperature=1.0)
        group.update([SequenceTargets(every[i], o) for i, o in zip(group.share, old, strict=True)], **UPDATE)
        yield group
    finally:
        group.shutdown()


@pytest.mark.integration
def test_a_parked_group_comes_back_for_any_reader_and_a_resumed_optimizer_parks(tmp_path: Path) -> None:
    """What a colocated rank does around generation (services/trainer/hybrid.py): the optimizer's kinds
    leave first, then everything; any reader of the group (the log-prob pass, a save) brings it all
    back for the call, with the values as before, and parks it again after. The optimizer state a
    resume reads from its checkpoint file parks too (torch.load's tensors do not own their bytes;
    before, parking them raised)."""
    with updated_group(tmp_path) as group:
        group.save(tmp_path / "ckpt")
        group.load_optimizer(tmp_path / "ckpt")  # the resumed moments and step counters
        before = group.log_probs(temperature=1.0)
        freed = group.offload(["grads", "optimizer"])
        assert set(freed) == {"grads", "optimizer"} and freed["optimizer"] > 0
        assert group.parked and not group.actor._host.get("params")  # the weights stay for the push
        freed = group.offload()
        assert freed["params"] > 0 and ("reference" in freed) == (group.reference is not None)
        actor = group.actor
        assert all(local(p).untyped_storage().nbytes() == 0 for p in actor.model.parameters())
        kinds = group.parked_kinds()
        after = group.log_probs(temperature=1.0)  # a reader: everything comes back for it, then leaves
        assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
        assert group.parked_kinds() == kinds  # the engine keeps the room its KV cache was sized for
        group.save(tmp_path / "again")  # so does a save between steps
        assert group.parked_kinds() == kinds and (tmp_path / "again" / "optim_rank0.pt").exists()
        assert all(local(p).untyped_storage().nbytes() == 0 for p in actor.model.parameters())
        group.reload()
        assert not group.parked
        assert all(local(t).untyped_storage().nbytes() > 0 for t in optimizer_tensors(actor.optimizer))
        with pytest.raises(ValueError, match="nothing to offload called"):
            group.offload(["kv_cache"])


def test_only_what_lives_on_the_compute_device_is_parked() -> None:
    """Shards FSDP keeps on the host for a GPU (``actor.offload_params``, pinned: never resizable) are
    neither parked (nothing would be freed, and parking one raised) nor given a storage of their own
    (a clone would lose the pinning); on the compute device a mapped storage is replaced, then parks."""
    import numpy as np

    from services.trainer.actor import PolicyModel
    from services.trainer.offload import own_storage

    model = torch.nn.Linear(2, 2)
    with torch.no_grad():
        model.weight.data = torch.from_numpy(np.ones((2, 2), dtype=np.float32))  # not resizable
    policy = object.__new__(PolicyModel)
    policy.model, policy._host = model, {}
    policy.device = torch.device("cuda")  # the model is on the CPU: the "host" of a GPU rank
    own_storage(model, policy.device)
    assert not model.weight.untyped_storage().resizable()  # left alone
    assert policy.offload() == {"params": 0} and not policy.parked
    policy.device = torch.device("cpu")  # now the model is on the compute device
    with pytest.raises(ValueError, match="does not own its bytes"):
        policy.offload()
    own_storage(model, policy.device)
    assert model.weight.untyped_storage().resizable()
    assert policy.offload()["params"] == (4 + 2) * 4 and policy.parked
    assert policy.reload() == (4 + 2) * 4 and torch.equal(model.weight, torch.ones(2, 2))


@pytest.mark.integration
def test_moments_kept_on_the_host_go_back_after_a_save(tmp_path: Path) -> None:
    """``actor.offload_optimizer``: a checkpoint reads the moments (on the device for the read); they go
    back to the host once written, instead of staying until the next step."""
    with updated_group(tmp_path, offload_optimizer=True) as group:
        assert group.actor._moments.parked
        group.save(tmp_path / "ckpt")
        assert group.actor._moments.parked
        saved = torch.load(tmp_path / "ckpt" / "optim_rank0.pt", weights_only=True)
        moments = [v for st in saved["optimizer"]["state"].values() for k, v in st.items() if k == "exp_avg"]
        assert moments and all(m.numel() > 0 and m.abs().sum() > 0 for m in moments)  # written whole
