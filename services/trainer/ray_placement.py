"""Where the actor ranks sit on a Ray cluster: one STRICT_PACK placement group per node, its ranks
numbered in node order, so the ``tensor_parallel_size`` consecutive ranks that host one colocated
engine (ranks ``[i*tp, (i+1)*tp)`` host engine ``i``) are always on one node; a single PACK group over
the world could cut such a pair between two nodes.

:func:`rank_layout` is the pure part: from the alive nodes, in the order :func:`fill_order` gives, and
what one rank asks for, how many ranks go on each node, refused before anything is reserved when the
world cannot be split so. :func:`place_ranks` reserves the groups on Ray. verl does the same
(``RayResourcePool``: a STRICT_PACK group per node, the groups sorted by node).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from services.trainer.layout import PlacementError

CPUS_PER_RANK = 0.5  # two ranks fit a 2-CPU local Ray; their threads: ray_group.rank_threads
# A GPU rank also prepares its colocated engine's video inputs (the processor's resizing) on the CPU:
# a few threads for it, and 8 ranks x 4 = 32 CPUs still leave most 8-GPU nodes CPUs for engines of
# their own (trainer.ray_cpus_rollout), Ray's daemons and the driver
GPU_RANK_CPUS = 4
PLACEMENT_TIMEOUT_S = 300.0
EPS = 1e-9  # Ray's resources are decimals: 3 x 0.1 CPU must fit a 0.3-CPU node


@dataclass(frozen=True)
class RayNode:
    """An alive node and its total resources (what it can hold, whatever holds them now)."""

    node_id: str
    address: str
    cpus: float
    gpus: float

    def __str__(self) -> str:
        return f"node {self.node_id[:8]} at {self.address} ({self.cpus:g} CPU, {self.gpus:g} GPU)"


@dataclass(frozen=True)
class NodeShare:
    """The ranks ``first_rank .. first_rank + ranks - 1``, in one placement group on ``node``."""

    node: RayNode
    first_rank: int
    ranks: int


def fill_order(nodes: Sequence[RayNode], first: str | None = None) -> list[RayNode]:
    """The order nodes are filled in: node ``first`` (the driver's: rank 0 and the weights it gathers
    stay beside the driver), then by address and id, so a run's layout does not change with the order
    Ray lists its nodes in."""
    return sorted(nodes, key=lambda n: (n.node_id != first, n.address, n.node_id))


def default_cpus_per_rank(nodes: Sequence[RayNode], gpus_per_rank: float) -> float:
    """``ray_group.cpus_per_rank: null``: :data:`CPUS_PER_RANK` for CPU ranks (their threads come from
    the node, ``ray_group.rank_threads``); for GPU ranks the CPUs each GPU of the poorest GPU node has,
    in whole CPUs, at most :data:`GPU_RANK_CPUS` (all of them where it has less than one per GPU), so
    every GPU of every node can hold a rank."""
    if not gpus_per_rank:
        return CPUS_PER_RANK
    shares = [n.cpus / n.gpus * gpus_per_rank for n in nodes if n.gpus + EPS >= gpus_per_rank]
    if not shares:
        return CPUS_PER_RANK  # no node holds a GPU rank: rank_layout says so
    share = min(shares)
    return float(min(GPU_RANK_CPUS, math.floor(share + EPS))) if share + EPS >= 1 else share


def rank_capacity(node: RayNode, cpus_per_rank: float, gpus_per_rank: float) -> int:
    """How many ranks of ``cpus_per_rank`` CPUs and ``gpus_per_rank`` GPUs the node holds."""
    fits = [math.floor(node.cpus / cpus_per_rank + EPS)] if cpus_per_rank else []
    if gpus_per_rank:
        fits.append(math.floor(node.gpus / gpus_per_rank + EPS))
    return min(fits) if fits else 0


def rank_layout(
    nodes: Sequence[RayNode], world_size: int, tp: int, cpus_per_rank: float, gpus_per_rank: float
) -> list[NodeShare]:
    """The ranks each node holds, filling ``nodes`` in the order given, each with as many whole groups
    of ``tp`` consecutive ranks (a colocated engine's ``tensor_parallel_size``; 1: no such groups) as it
    holds; nodes that hold none are left out. A :class:`PlacementError` saying what to change when
    the nodes cannot hold ``world_size`` ranks so."""
    if world_size % tp:
        raise PlacementError(
            f"actor.world_size={world_size} is not a multiple of rollout.engine.tensor_parallel_size={tp}"
        )
    layout: list[NodeShare] = []
    placed = 0
    for node in nodes:
        take = min(world_size - placed, rank_capacity(node, cpus_per_rank, gpus_per_rank) // tp * tp)
        if take:
            layout.append(NodeShare(node, placed, take))
            placed += take
    if placed < world_size:
        raise PlacementError(_unplaceable(nodes, world_size, tp, cpus_per_rank, gpus_per_rank))
    return layout


def _unplaceable(
    nodes: Sequence[RayNode], world_size: int, tp: int, cpus_per_rank: float, gpus_per_rank: float
) -> str:
    """Why ``world_size`` ranks do not fit ``nodes``, each node's share and the ways out."""
    rank = f"{cpus_per_rank:g} CPU" + (f" + {gpus_per_rank:g} GPU" if gpus_per_rank else "")
    holds = [rank_capacity(n, cpus_per_rank, gpus_per_rank) for n in nodes]
    fit = sum(h // tp * tp for h in holds)
    each = "; ".join(f"{n}: {h}" for n, h in zip(nodes, holds, strict=True)) or "no alive node"
    fixes = [f"lower actor.world_size to {fit} or less" if fit else "lower actor.world_size", "add nodes"]
    if tp > 1 and sum(holds) >= world_size:  # the ranks fit, not in whole groups
        fixes.insert(0, "set a rollout.engine.tensor_parallel_size that divides the ranks each node holds")
    # CPUs, not GPUs, are what is short on some node
    if any(
        rank_capacity(n, cpus_per_rank, 0)
        < (rank_capacity(n, 0, gpus_per_rank) if gpus_per_rank else math.inf)
        for n in nodes
    ):
        fixes.append(f"lower ray_group.cpus_per_rank={cpus_per_rank:g}")
    grouped = (
        f", in groups of {tp} on one node (rollout.engine.tensor_parallel_size: a colocated engine's ranks)"
    )
    return (
        f"actor.world_size={world_size} ranks of {rank}{grouped if tp > 1 else ''} do not fit the Ray "
        f"cluster's alive nodes, which hold (ranks each): {each}; to fix: {', '.join(fixes[:-1])} or {fixes[-1]}"
    )


# -- on Ray ------------------------------------------------------------------------------------------


@dataclass
class RankPlacement:
    """The reserved groups (one per node of ``layout``, in rank order) and what each rank asks for."""

    layout: list[NodeShare]
    groups: list[Any]
    cpus_per_rank: float
    gpus_per_rank: float

    def strategy(self, rank: int) -> Any:
        """The scheduling strategy that puts rank ``rank`` in its bundle."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        for share, group in zip(self.layout, self.groups, strict=True):
            if share.first_rank <= rank < share.first_rank + share.ranks:
                return PlacementGroupSchedulingStrategy(
                    group, placement_group_bundle_index=rank - share.first_rank
                )
        raise IndexError(f"rank {rank}: not among the {sum(s.ranks for s in self.layout)} ranks placed")

    def remove(self) -> None:
        """Free every group. Safe to call twice."""
        from ray.util.placement_group import remove_placement_group

        groups, self.groups = self.groups, []
        for group in groups:
            remove_placement_group(group)


def alive_nodes() -> list[RayNode]:
    import ray

    return [
        RayNode(
            n["NodeID"],
            n["NodeManagerAddress"],
            n["Resources"].get("CPU", 0.0),
            n["Resources"].get("GPU", 0.0),
        )
        for n in ray.nodes()
        if n.get("Alive")
    ]


def place_ranks(
    world_size: int, tp: int, cpus_per_rank: float | None = None, gpus_per_rank: float | None = None
) -> RankPlacement:
    """Reserve ``world_size`` ranks' bundles, a STRICT_PACK group per node (:func:`rank_layout` over the
    alive nodes, the driver's first), and wait until every group is placed. ``gpus_per_rank`` None: one
    GPU when the cluster has GPUs; ``cpus_per_rank`` None: :func:`default_cpus_per_rank`. Nothing stays
    reserved when it fails."""
    import ray
    from ray.util.placement_group import placement_group

    nodes = alive_nodes()
    if gpus_per_rank is None:
        gpus_per_rank = 1.0 if any(n.gpus for n in nodes) else 0.0
    if cpus_per_rank is None:
        cpus_per_rank = default_cpus_per_rank(nodes, gpus_per_rank)
    order = fill_order(nodes, ray.get_runtime_context().get_node_id())
    layout = rank_layout(order, world_size, tp, cpus_per_rank, gpus_per_rank)
    bundle = {"CPU": cpus_per_rank, **({"GPU": gpus_per_rank} if gpus_per_rank else {})}
    placement = RankPlacement(layout, [], cpus_per_rank, gpus_per_rank)
    try:
        for share in layout:
            # a hint, not a pin: STRICT_PACK keeps the group on one node wherever Ray puts it, and the
            # hint keeps a smaller group from taking the node a larger one was laid out on
            placement.groups.append(
                placement_group(
                    [dict(bundle)] * share.ranks, "STRICT_PACK", _soft_target_node_id=share.node.node_id
                )
            )
        for share, group in zip(layout, placement.groups, strict=True):
            last = share.first_rank + share.ranks - 1
            wait_placed(
                group,
                f"actor ranks {share.first_rank}-{last} of actor.world_size={world_size} on {share.node} "
                f"(STRICT_PACK: {share.ranks} bundles of {bundle} on one node)",
            )
    except BaseException:
        placement.remove()
        raise
    return placement


def wait_placed(group: Any, what: str) -> None:
    """Wait for a placement group's bundles to be reserved; a RuntimeError naming ``what`` and the
    cluster's free resources when they cannot be."""
    import ray

    try:
        ray.get(group.ready(), timeout=PLACEMENT_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError:
        raise RuntimeError(
            f"Ray could not place {what} within {PLACEMENT_TIMEOUT_S:.0f} s; "
            f"available: {ray.available_resources()}"
        ) from None
