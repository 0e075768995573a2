"""How the actor's ranks share the model: one FSDP group over every rank, or (``actor.fsdp_size``)
hybrid sharding, FSDP2 on a 2-D device mesh.

With ``fsdp_size = s`` of ``world`` ranks the mesh is ``(world / s, s)``, dimensions ("replicate",
"shard"): each run of ``s`` consecutive ranks (one node's GPUs, as a launcher numbers them) shards the
model among itself, and the ``world / s`` groups hold the same shards. A layer's all-gather and its
gradients' reduce-scatter then stay inside a group; only the gradients' all-reduce of 1/s of the
model crosses groups (verl's ``fsdp_size``, PyTorch's HSDP). Every rank holds 1/s of the parameters,
their gradients and AdamW's moments instead of 1/world: the price of keeping the gathers on the fast
links.
"""

from __future__ import annotations

from typing import Any


def mesh_shape(world: int, fsdp_size: int | None) -> tuple[int, ...]:
    """``(world,)`` for one group over every rank, else ``(world // fsdp_size, fsdp_size)``.

    Examples: (8, None) → (8,); (8, 8) → (8,); (32, 8) → (4, 8); (4, 2) → (2, 2).
    """
    if fsdp_size is None or fsdp_size == world:
        return (world,)
    if fsdp_size < 1 or world % fsdp_size:
        raise ValueError(f"actor.fsdp_size={fsdp_size} must divide actor.world_size={world}")
    return (world // fsdp_size, fsdp_size)


def device_mesh(device_type: str, world: int, fsdp_size: int | None) -> Any:
    """The mesh ``fully_shard`` shards over: 1-D, or 2-D ("replicate", "shard") for hybrid sharding."""
    from torch.distributed.device_mesh import init_device_mesh

    shape = mesh_shape(world, fsdp_size)
    if len(shape) == 1:
        return init_device_mesh(device_type, shape)
    return init_device_mesh(device_type, shape, mesh_dim_names=("replicate", "shard"))
