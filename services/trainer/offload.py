"""The actor's state parked in host memory and brought back: parameters, gradients and AdamW's moments
leave the accelerator while something else needs it (colocated vLLM generating) and return for the
update, bit for bit.

:class:`HostCopies` copies each distinct storage behind a set of tensors (an FSDP2 shard's padded
buffer, a tied weight once) to the host, pinned where a GPU can read it back asynchronously, and then
shrinks the storage to nothing: the allocator gets the bytes back while every tensor object (the
parameters the optimizer and FSDP hold, their DTensor wrappers) stays as it is. :meth:`restore` grows
each storage again and copies the bytes back. Storages rather than tensors, so what a view leaves out
(FSDP2's shard padding) comes back too; the same code runs on the CPU, where the tests hold its
invariants (storages emptied while parked, the update after a round trip equal to one without).

The config's ``actor.offload_params`` is another mechanism (FSDP2's ``CPUOffloadPolicy``: parameters,
gradients and the optimizer step live on the host, each unit streamed in for its pass); this is the
call around generation (``Actor.offload`` / ``Actor.reload``) and, with ``actor.offload_optimizer``,
the moments' home between updates.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch


def local(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor holding this rank's bytes: a DTensor's local shard, else the tensor itself."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _bytes(storage: torch.UntypedStorage, device: torch.device, size: int) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=device).set_(storage, 0, (size,))


@dataclass
class _Parked:
    storage: torch.UntypedStorage
    device: torch.device
    host: torch.Tensor  # uint8, the storage's bytes


class HostCopies:
    """Storages parked on the host: :meth:`park` them, :meth:`restore` them (each once)."""

    def __init__(self) -> None:
        self._parked: list[_Parked] = []

    @property
    def parked(self) -> bool:
        return bool(self._parked)

    @property
    def nbytes(self) -> int:
        return sum(p.host.numel() for p in self._parked)

    def park(self, tensors: Iterable[torch.Tensor | None]) -> int:
        """Copy the storages behind ``tensors`` to the host and empty them; returns the bytes freed.
        Tensors that are None, empty or already parked are skipped."""
        seen = {p.storage.data_ptr() for p in self._parked}
        moved = []
        for tensor in tensors:
            if tensor is None:
                continue
            data = local(tensor)
            storage = data.untyped_storage()
            size = storage.nbytes()
            if size == 0 or storage.data_ptr() in seen:
                continue
            if not storage.resizable():
                raise ValueError(
                    f"a tensor of shape {tuple(data.shape)} does not own its bytes (a mapped file?): it "
                    "cannot be parked; give the model its own storages first (own_storage)"
                )
            seen.add(storage.data_ptr())
            pin = data.device.type == "cuda"
            host = torch.empty(size, dtype=torch.uint8, device="cpu", pin_memory=pin)
            host.copy_(_bytes(storage, data.device, size), non_blocking=pin)
            moved.append(_Parked(storage, data.device, host))
        if any(p.device.type == "cuda" for p in moved):
            torch.cuda.synchronize()  # the copies are done before the storages go
        for parked in moved:
            parked.storage.resize_(0)
        self._parked.extend(moved)
        return sum(p.host.numel() for p in moved)

    def restore(self) -> int:
        """Give every parked storage its bytes back; returns how many."""
        total = 0
        for parked in self._parked:
            size = parked.host.numel()
            parked.storage.resize_(size)
            _bytes(parked.storage, parked.device, size).copy_(parked.host, non_blocking=True)
            total += size
        if any(p.device.type == "cuda" for p in self._parked):
            torch.cuda.synchronize()
        self._parked = []
        return total


def own_storage(model: torch.nn.Module, device: torch.device | str | None = None) -> None:
    """Give every parameter and buffer on ``device`` (None: anywhere) whose bytes are not its own
    (``from_pretrained`` on the CPU, and the sharded load's buffers, map the checkpoint file: such
    storages cannot be resized, so neither parked nor freed) a storage of its own. A tied parameter is
    one object: it stays tied. Shards FSDP keeps pinned on the host for a GPU are left alone: pinned
    memory is never resizable, nothing parks them, and a clone would lose the pinning."""
    here = None if device is None else torch.device(device)

    def owned(tensor: torch.Tensor) -> bool:
        return (here is not None and local(tensor).device.type != here.type) or owns_its_bytes(tensor)

    with torch.no_grad():
        for param in model.parameters():
            if not owned(param):
                param.data = param.data.clone()
        for module in model.modules():
            for name, value in list(module._buffers.items()):
                if value is not None and not owned(value):
                    module._buffers[name] = value.clone()


def own_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Give every tensor of the optimizer's state whose bytes are not its own a storage of its own: a
    resumed state comes from a mapped checkpoint file, and ``load_state_dict`` keeps such a tensor as it
    is where device and dtype already match (every ``step`` counter, and on the CPU the moments too)."""
    for state in optimizer.state.values():
        for key, value in list(state.items()):
            if isinstance(value, torch.Tensor) and not owns_its_bytes(value):
                state[key] = value.clone()


def owns_its_bytes(tensor: torch.Tensor) -> bool:
    """Whether ``tensor``'s storage can be emptied and grown again (:class:`HostCopies` parks only such
    storages): not a mapped file's, numpy's or pinned memory."""
    return local(tensor).untyped_storage().resizable()


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Every tensor of the optimizer's state (AdamW: ``exp_avg``, ``exp_avg_sq``; its ``step`` counters
    too, small)."""
    return [v for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)]
