"""Hybrid sharding (``actor.fsdp_size``, services/trainer/sharding.py): 4 gloo ranks in 2 groups of 2
make the same update as 1 rank on the same global batch, and each rank holds half of the parameters
(its group's shard), the two groups the same halves."""

from __future__ import annotations

import pytest
import torch

from services.trainer.sharding import mesh_shape
from tests.trainer.actor_steps import (
    build_world,
    free_port,
    fsdp_rank,
    make_groups,
    run_step,
    spawn_ranks,
    train_config,
)

TOLERANCE = 1e-5  # fp32: as tests/trainer/test_fsdp.py (sums in another order across ranks)
RANKS, FSDP_SIZE = 4, 2


def test_mesh_shapes() -> None:
    assert mesh_shape(8, None) == (8,) and mesh_shape(8, 8) == (8,)
    assert mesh_shape(32, 8) == (4, 8) and mesh_shape(4, 2) == (2, 2)
    with pytest.raises(ValueError, match="must divide"):
        mesh_shape(6, 4)


def test_a_group_size_that_does_not_divide_the_ranks_is_refused(tmp_path) -> None:
    from services.trainer.config import ActorConfig

    with pytest.raises(ValueError, match=r"actor\.fsdp_size=3 must divide actor\.world_size=4"):
        ActorConfig(model_path="m", world_size=4, fsdp_size=3)


@pytest.mark.slow
@pytest.mark.integration
def test_two_groups_of_two_update_like_one_rank(tmp_path) -> None:
    world = build_world(tmp_path / "world", samples=4)
    one_rank = train_config(world, batch_size=4)
    rollout = one_rank.effective_rollout()
    groups = make_groups(world, rollout, [[5, 9], [7, 3], [4, 6], [8, 2]])
    single = run_step(world, one_rank, groups)
    hybrid = train_config(world, batch_size=4, world_size=RANKS, fsdp_size=FSDP_SIZE)
    out = tmp_path / "ranks"
    out.mkdir()
    spawn_ranks(
        fsdp_rank, (RANKS, free_port(), world, {"hsdp": (hybrid, groups)}, out), RANKS, 300, "the 4 ranks"
    )
    ranks = [torch.load(out / f"hsdp-rank{r}.pt") for r in range(RANKS)]
    gap = max(float((ranks[0]["final"][k] - single["final"][k]).abs().max()) for k in single["final"])
    moved = max(float((single["final"][k] - single["initial"][k]).abs().max()) for k in single["final"])
    assert moved > 100 * TOLERANCE and gap <= TOLERANCE, (moved, gap)
    for r in ranks:
        assert r["metrics"]["grad_norm"] == pytest.approx(single["metrics"]["grad_norm"], rel=TOLERANCE)
    assert sum(r["metrics"]["pg_loss"] for r in ranks) == pytest.approx(
        single["metrics"]["pg_loss"], abs=TOLERANCE
    )
    total = single["local_params"]
    # a group of 2 splits every tensor in two (a row more on the first rank where a dimension is odd)
    for r in ranks:
        assert abs(2 * r["local_params"] - total) <= 0.01 * total, (r["local_params"], total)
    assert (
        ranks[0]["local_params"] == ranks[2]["local_params"]
        and ranks[1]["local_params"] == ranks[3]["local_params"]
    )
