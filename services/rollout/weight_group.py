"""A weight-broadcast group: rank 0 of the actor and every worker of every disaggregated engine in one
process group of their own (gloo on the CPU, NCCL on GPUs), through which a push travels bucket by
bucket, each bucket one broadcast of its bytes.

Measured beside Ray's object store (bench/bench_weight_transport.py, docs/benchmarks.md): ~9x faster
for 1 GiB to one or two engines, since nothing is copied into a store and pulled out again. The group
is separate from every group the processes already belong to (the actor ranks' FSDP group, vLLM's
own): it is built on a TCPStore of its own, served from rank 0's node, and is never the default group.

The layout of a bucket (:func:`layout`) is pure and shared by both sides: each tensor's bytes at an
offset aligned to :data:`ALIGN`, so the receiver views its buffer as tensors without copying. Before
each bucket a header goes out (:func:`header`): the bucket's index and size, or :data:`ABORT` when the
sender failed to make it, so receivers fail at once instead of waiting for the group's timeout.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch

ALIGN = 64  # bytes: every tensor of a bucket starts at a multiple of this (any dtype can view it)
ABORT = -1  # a header index: the sender could not make the bucket

#: one tensor of a bucket: (name, full shape, dtype name), the order and names of the announced push
Slot = tuple[str, tuple[int, ...], str]


class WeightGroupError(RuntimeError):
    """The group broke (a member left, refused, or timed out): every member's bucket is void, and this
    member has left the group (its connections closed, so the others fail at once, not at the timeout)."""


class SenderFailed(WeightGroupError):
    """The sender could not make a bucket and said so (the receivers did not wait for the timeout); the
    group is still in step."""


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def to_dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"{name!r} is not a torch dtype")
    return dtype


def _nbytes(shape: Sequence[int], dtype: str) -> int:
    numel = 1
    for dim in shape:
        numel *= int(dim)
    return numel * torch.empty((), dtype=to_dtype(dtype)).element_size()


def layout(slots: Sequence[Slot]) -> tuple[list[int], int]:
    """Each slot's byte offset in a bucket, and the bucket's size: slots in order, each starting at the
    next multiple of :data:`ALIGN`."""
    offsets, end = [], 0
    for _, shape, dtype in slots:
        start = -(-end // ALIGN) * ALIGN
        offsets.append(start)
        end = start + _nbytes(shape, dtype)
    return offsets, end


def slots_of(bucket: Mapping[str, torch.Tensor]) -> list[Slot]:
    return [(name, tuple(t.shape), dtype_name(t.dtype)) for name, t in bucket.items()]


def pack(
    bucket: Mapping[str, torch.Tensor], slots: Sequence[Slot], device: torch.device | str
) -> torch.Tensor:
    """The bucket as one byte tensor on ``device``, per :func:`layout`; the tensors must match ``slots``
    (names, order, shapes and dtypes): a sender sends exactly what the receivers expect."""
    got = slots_of(bucket)
    if got != [(n, tuple(s), d) for n, s, d in slots]:
        diff = next((f"{g} != {p}" for g, p in zip(got, slots, strict=False) if g != tuple(p)), "")
        raise ValueError(f"a bucket of {len(got)} tensors is not the planned {len(slots)}: {diff}")
    flat, offsets = empty_bucket(slots, device)
    for offset, tensor in zip(offsets, bucket.values(), strict=True):
        place(flat, offset, tensor)
    return flat


def empty_bucket(slots: Sequence[Slot], device: torch.device | str) -> tuple[torch.Tensor, list[int]]:
    """An uninitialised byte buffer for a bucket of ``slots`` (the padding is never read) and each
    slot's offset in it."""
    offsets, size = layout(slots)
    return torch.empty(size, dtype=torch.uint8, device=device), offsets


def place(flat: torch.Tensor, offset: int, tensor: torch.Tensor, dtype: torch.dtype | None = None) -> None:
    """Write ``tensor`` into ``flat`` at ``offset`` as ``dtype`` (default its own), cast and moved in
    the one copy (no cast copy of it is made first)."""
    dtype = dtype or tensor.dtype
    count = tensor.numel() * torch.empty((), dtype=dtype).element_size()
    flat[offset : offset + count].view(dtype).copy_(tensor.detach().reshape(-1))


def unpack(flat: torch.Tensor, slots: Sequence[Slot]) -> dict[str, torch.Tensor]:
    """The tensors of a bucket received as ``flat`` bytes: views into it, no copy."""
    offsets, size = layout(slots)
    if flat.numel() != size:
        raise ValueError(f"a bucket of {flat.numel()} bytes where the plan has {size}")
    out = {}
    for offset, (name, shape, dtype) in zip(offsets, slots, strict=True):
        count = _nbytes(shape, dtype)
        out[name] = flat[offset : offset + count].view(to_dtype(dtype)).view(tuple(shape))
    return out


def header(index: int, size: int, device: torch.device | str) -> torch.Tensor:
    return torch.tensor([index, size], dtype=torch.int64, device=device)


# -- the group ------------------------------------------------------------------------------------------


def backend_for(device: torch.device | str) -> str:
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def join(address: str, rank: int, world: int, timeout_s: float, backend: str) -> Member:
    """This process's member of the group at ``address`` ("host:port"; rank 0 serves the store there).
    Blocks until all ``world`` members have joined (or ``timeout_s`` passed)."""
    import torch.distributed as dist

    if backend not in ("gloo", "nccl"):
        raise ValueError(f"unknown weight group backend {backend!r}; use gloo or nccl")
    host, port = address.rsplit(":", 1)
    timeout = timedelta(seconds=timeout_s)
    try:
        store = dist.TCPStore(
            host, int(port), world, is_master=rank == 0, timeout=timeout, wait_for_workers=False
        )
        store = dist.PrefixStore("reelrl-weights", store)
        if backend == "gloo":
            options = dist.ProcessGroupGloo._Options()
            options._timeout = timeout
            # the interface that reaches rank 0: gloo's default resolves the hostname, which some hosts
            # map to 127.0.1.1, where members on other nodes cannot connect
            options._devices = [dist.ProcessGroupGloo.create_device(hostname=local_ip_towards(host))]
            group = dist.ProcessGroupGloo(store, rank, world, options)
        else:
            group = _nccl_group(store, rank, world, timeout)
    except RuntimeError as exc:  # a member that never came, a port taken: the group's failure, not ours
        raise WeightGroupError(f"weight group (rank {rank} of {world}) at {address}: {exc}") from None
    member = Member(group, store, rank, world, backend)
    if backend == "nccl":
        # NCCL connects lazily: meet every member now, so a peer that cannot be reached fails the join
        member.broadcast(torch.zeros(1, device=torch.device("cuda", torch.cuda.current_device())))
    return member


def _nccl_group(store: Any, rank: int, world: int, timeout: timedelta) -> Any:
    """An NCCL group whose ``wait()`` blocks and raises on a failure or past ``timeout`` instead of
    tearing the process down (NCCL's default: it would take the actor's rank 0, an FSDP rank, with it).
    torch reads both settings when it builds a group, so they are set around this one only."""
    import os

    import torch.distributed as dist

    from services.rollout.environment import restored_environ

    settings = {
        "TORCH_NCCL_BLOCKING_WAIT": "1",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "0",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "0",
    }
    with restored_environ(settings):
        os.environ.update(settings)
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, world, options)


def local_ip_towards(host: str) -> str:
    """This machine's address on the interface that routes to ``host`` (no packet is sent)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect((host, 9))
            return sock.getsockname()[0]
        except OSError:
            return host


@dataclass
class Member:
    """One process's place in a weight group. After a failed collective it leaves the group (the group
    and its store are dropped, their connections close) and refuses every later call."""

    group: Any
    store: Any
    rank: int
    world: int
    backend: str

    @property
    def open(self) -> bool:
        return self.group is not None

    def close(self) -> None:
        group, self.group, self.store = self.group, None, None
        abort = getattr(group, "abort", None) if self.backend == "nccl" else None
        if abort is not None:  # a stuck NCCL communicator would block its destructor
            with contextlib.suppress(RuntimeError):
                abort()

    def broadcast(self, tensor: torch.Tensor) -> None:
        import torch.distributed as dist

        if self.group is None:
            raise WeightGroupError(f"weight group (rank {self.rank} of {self.world}): this member left it")
        options = dist.BroadcastOptions()
        options.rootRank, options.rootTensor = 0, 0
        try:
            self.group.broadcast([tensor], options).wait()
        except RuntimeError as exc:
            self.close()
            raise WeightGroupError(f"weight group (rank {self.rank} of {self.world}): {exc}") from None


def send(
    member: Member, index: int, make: Callable[[], torch.Tensor], size: int, device: torch.device | str
) -> int:
    """Rank 0: make bucket ``index`` (``make`` returns its bytes, ``size`` of them, per :func:`layout`)
    and broadcast it; when making it fails, every receiver is told (:data:`ABORT`) and the error is
    raised here. Returns the bytes sent."""
    try:
        flat = make()
        if flat.numel() != size:
            raise ValueError(f"weight bucket {index} is {flat.numel()} bytes where the plan has {size}")
    except BaseException:
        with contextlib.suppress(WeightGroupError):  # the group is gone too: the bucket's error is the one
            member.broadcast(header(ABORT, 0, device))
        raise
    member.broadcast(header(index, flat.numel(), device))
    member.broadcast(flat)
    return flat.numel()


def send_bucket(member: Member, index: int, make: Callable[[], Mapping[str, torch.Tensor]], slots: Sequence[Slot],
                device: torch.device | str) -> int:  # fmt: skip
    """:func:`send` for a bucket made as a dict of tensors (packed here: it is held twice meanwhile)."""
    return send(member, index, lambda: pack(make(), slots, device), layout(slots)[1], device)


def receive(
    member: Member, index: int, slots: Sequence[Slot], device: torch.device | str
) -> dict[str, torch.Tensor]:
    """An engine worker: bucket ``index`` from rank 0, as tensors on ``device``. A bucket other than
    the one expected is refused and this member leaves the group (rank 0 then fails at once)."""
    head = header(0, 0, device)
    member.broadcast(head)
    got, size = (int(v) for v in head.tolist())
    if got == ABORT:
        raise SenderFailed(
            f"the actor's rank 0 could not make weight bucket {index} (its error is the push's)"
        )
    expected = layout(slots)[1]
    if got != index or size != expected:
        member.close()
        raise WeightGroupError(
            f"weight group out of step: bucket {got} of {size} bytes arrived where bucket {index} of "
            f"{expected} bytes was expected"
        )
    flat = torch.empty(size, dtype=torch.uint8, device=device)
    member.broadcast(flat)
    return unpack(flat, slots)
