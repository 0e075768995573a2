"""The actor ranks' placement by node (``services.trainer.ray_placement``): how many ranks each node holds,
computed by hand for uneven nodes and tensor-parallel pairs, and on a real two-node Ray
(``ray.cluster_utils.Cluster``, GPUs declared, none used) a pair of ranks never spans two nodes."""

from __future__ import annotations

import pytest

from services.trainer.config import parse_config
from services.trainer.placement import PlacementError
from services.trainer.ray_placement import (
    NodeShare,
    RayNode,
    default_cpus_per_rank,
    fill_order,
    place_ranks,
    rank_layout,
)


def node(name: str, cpus: float, gpus: float = 0.0, address: str = "10.0.0.1") -> RayNode:
    return RayNode(name, address, cpus, gpus)


def test_nodes_fill_from_the_drivers_then_by_address() -> None:
    a, b = node("a", 8, address="10.0.0.10"), node("b", 8, address="10.0.0.2")
    c, d = node("c", 8, address="10.0.0.1"), node("d", 8, address="10.0.0.1")
    assert fill_order([a, b, d, c], first="b") == [b, c, d, a]  # same address: by id
    assert fill_order([a, b, d, c]) == [c, d, a, b]  # addresses sort as text: a stable order is enough


def test_one_node_holds_every_rank() -> None:
    local = node("local", 2)
    # 2 CPUs / 0.5 = 4 ranks fit; 2 are asked for
    assert rank_layout([local], 2, 1, 0.5, 0.0) == [NodeShare(local, 0, 2)]


def test_uneven_gpu_nodes_fill_in_order() -> None:
    a, b, c = node("a", 64, 8), node("b", 32, 4), node("c", 16, 2)
    assert rank_layout([a, b, c], 4, 1, 4, 1) == [NodeShare(a, 0, 4)]
    assert rank_layout([a, b, c], 12, 1, 4, 1) == [NodeShare(a, 0, 8), NodeShare(b, 8, 4)]
    assert rank_layout([a, b, c], 14, 2, 4, 1) == [
        NodeShare(a, 0, 8),
        NodeShare(b, 8, 4),
        NodeShare(c, 12, 2),
    ]
    # a CPU head (no GPU) holds no GPU rank: left out
    head = node("head", 8)
    assert rank_layout([head, c], 2, 1, 4, 1) == [NodeShare(c, 0, 2)]


def test_a_tp_pair_stays_on_one_node() -> None:
    a, b = node("a", 12, 3), node("b", 12, 3)
    # one group over both nodes (PACK) could hold ranks 0-2 on a and 3 on b, cutting pair (2, 3): in
    # pairs each 3-GPU node holds 2 ranks, one GPU left free
    assert rank_layout([a, b], 4, 2, 4, 1) == [NodeShare(a, 0, 2), NodeShare(b, 2, 2)]
    # 6 ranks fit the 6 GPUs, never in pairs on one node each
    with pytest.raises(PlacementError) as refused:
        rank_layout([a, b], 6, 2, 4, 1)
    message = str(refused.value)
    assert "in groups of 2 on one node" in message
    assert "node a at 10.0.0.1 (12 CPU, 3 GPU): 3; node b" in message
    assert "set a rollout.engine.tensor_parallel_size that divides" in message
    assert "lower actor.world_size to 4 or less" in message
    assert "cpus_per_rank" not in message  # GPUs are what is short
    with pytest.raises(PlacementError, match=r"not a multiple of rollout\.engine\.tensor_parallel_size=2"):
        rank_layout([a, b], 3, 2, 4, 1)


def test_too_few_cpus_names_cpus_per_rank() -> None:
    a = node("a", 16, 8)
    # 16 CPUs / 4 = 4 ranks, though the node has 8 GPUs
    assert rank_layout([a], 4, 1, 4, 1) == [NodeShare(a, 0, 4)]
    with pytest.raises(PlacementError, match=r"to 4 or less, add nodes or lower ray_group.cpus_per_rank=4"):
        rank_layout([a], 8, 1, 4, 1)
    # one CPU a node, one CPU a rank (tests/trainer/test_multinode.py): a rank on each node
    one, two = node("one", 1), node("two", 1)
    assert rank_layout([one, two], 2, 1, 1, 0) == [NodeShare(one, 0, 1), NodeShare(two, 1, 1)]
    with pytest.raises(PlacementError, match="no alive node"):
        rank_layout([], 1, 1, 0.5, 0)


def test_a_gpu_rank_gets_the_cpus_of_its_gpu_up_to_four() -> None:
    assert default_cpus_per_rank([node("a", 2)], 0.0) == 0.5  # CPU ranks: threads from the node
    assert default_cpus_per_rank([node("a", 96, 8)], 1.0) == 4.0  # 12 a GPU, at most 4
    assert default_cpus_per_rank([node("a", 6, 2)], 1.0) == 3.0
    assert default_cpus_per_rank([node("a", 3, 2)], 1.0) == 1.0  # 1.5: whole CPUs
    assert default_cpus_per_rank([node("a", 2, 4)], 1.0) == 0.5  # under one a GPU: all of them
    # the poorest GPU node decides; a CPU head does not count
    assert default_cpus_per_rank([node("head", 16), node("a", 96, 8), node("b", 8, 4)], 1.0) == 2.0
    assert default_cpus_per_rank([node("a", 16, 8)], 2.0) == 4.0  # two GPUs a rank: 2 x 2 CPUs


def test_cpus_per_rank_is_a_ray_group_key() -> None:
    base = {"data": {"train_files": ["t.jsonl"]}, "actor": {"model_path": "m"}}
    assert parse_config(base).ray_group.cpus_per_rank is None
    assert parse_config({**base, "ray_group": {"cpus_per_rank": 2}}).ray_group.cpus_per_rank == 2.0
    # an earlier run's config.yaml says trainer.ray_cpus_per_rank: read as the new key
    old = parse_config({**base, "trainer": {"ray_cpus_per_rank": 1}})
    assert old.ray_group.cpus_per_rank == 1.0 and "ray_cpus_per_rank" not in old.trainer.model_dump()
    with pytest.raises(ValueError, match=r"contradicts ray_group\.cpus_per_rank=2"):
        parse_config({**base, "trainer": {"ray_cpus_per_rank": 1}, "ray_group": {"cpus_per_rank": 2}})
    with pytest.raises(ValueError, match=r"unknown key 'ray_group\.threads'"):
        parse_config({**base, "ray_group": {"threads": 2}})


@pytest.mark.slow  # a two-node Ray: 25 s on 2 busy cores
@pytest.mark.integration
def test_ranks_in_pairs_on_two_ray_nodes(monkeypatch) -> None:
    """Two nodes of 3 (declared) GPUs and 3 CPUs: 4 ranks in pairs go 2 on each, in node order, each in
    a bundle of 1 CPU (3 CPUs / 3 GPUs) and 1 GPU; 6 are refused before anything is reserved; one node
    alone holds a pair in one group; a group that cannot be placed says which ranks and frees itself."""
    import ray
    from ray.cluster_utils import Cluster
    from ray.util.placement_group import placement_group, placement_group_table

    from services.trainer import ray_placement

    @ray.remote(num_cpus=0)
    class Where:
        def report(self) -> tuple[str, dict[str, float]]:
            context = ray.get_runtime_context()
            return context.get_node_id(), context.get_assigned_resources()

    def run(placement: ray_placement.RankPlacement, world: int) -> list[tuple[str, dict[str, float]]]:
        """Where ``world`` ranks put as the actor group puts its ranks run, and what each holds."""
        actors = [
            Where.options(
                num_cpus=placement.cpus_per_rank,
                num_gpus=placement.gpus_per_rank,
                scheduling_strategy=placement.strategy(rank),
            ).remote()
            for rank in range(world)
        ]
        try:
            return ray.get([a.report.remote() for a in actors], timeout=120)
        finally:
            for a in actors:
                ray.kill(a)

    def states() -> list[str]:
        return [g["state"] for g in placement_group_table().values()]

    head_args = {"num_cpus": 3, "num_gpus": 3, "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=head_args)
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        head = ray.get_runtime_context().get_node_id()
        one = place_ranks(2, tp=2)
        assert [(s.node.node_id, s.ranks) for s in one.layout] == [(head, 2)] and len(one.groups) == 1
        assert run(one, 2) == [(head, {"CPU": 1.0, "GPU": 1.0})] * 2
        one.remove()

        # 2 of the head's GPUs held by something else: the pair laid out there waits, then names itself
        blocker = placement_group([{"GPU": 2}], "STRICT_PACK")
        ray.get(blocker.ready(), timeout=60)
        monkeypatch.setattr(ray_placement, "PLACEMENT_TIMEOUT_S", 2.0)
        with pytest.raises(
            RuntimeError, match=r"could not place actor ranks 0-1 of actor.world_size=2 on node"
        ):
            place_ranks(2, tp=2)
        ray.util.remove_placement_group(blocker)
        assert set(states()) == {"REMOVED"}  # the waiting group freed too

        cluster.add_node(num_cpus=3, num_gpus=3)
        cluster.wait_for_nodes()
        placement = place_ranks(4, tp=2)
        assert len(placement.groups) == 2
        where = run(placement, 4)
        nodes = [n for n, _ in where]
        assert nodes[0] == nodes[1] == head and nodes[2] == nodes[3] != head  # by node, the driver's first
        assert all(held == {"CPU": 1.0, "GPU": 1.0} for _, held in where)
        with pytest.raises(
            PlacementError, match=r"actor\.world_size=6 ranks of 1 CPU \+ 1 GPU, in groups of 2"
        ):
            place_ranks(6, tp=2)
        assert states().count("CREATED") == 2  # nothing more was reserved
        placement.remove()
        placement.remove()  # twice is harmless
        assert set(states()) == {"REMOVED"}
    finally:
        ray.shutdown()
        cluster.shutdown()
