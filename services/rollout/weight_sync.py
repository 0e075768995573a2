"""Pushing a trainer's weights into a running vLLM engine.

Two transports, both ending in vLLM's in-place ``reload_weights`` on every worker (which re-packs the
CPU backend's linear layers; calling ``model.load_weights`` directly leaves parameters of shape (0,)):
- file: the state dict is written as safetensors to a private folder (under /dev/shm when it exists,
  so it never touches a disk) and each worker reads it; the folder is removed after the push;
- bytes: the safetensors bytes travel in the RPC and :class:`WeightSyncExtension` loads them.
Tensors themselves cannot travel in RPC arguments (they arrive as lists).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

SHM = Path("/dev/shm")
WEIGHTS_FILE = "model.safetensors"
EXTENSION = "services.rollout.weight_sync.WeightSyncExtension"


def checkpoint_tensors(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Contiguous CPU tensors under checkpoint names; tensors sharing storage (tied weights) are copied,
    since safetensors refuses shared storage."""
    out: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, int]] = set()
    for name, tensor in state_dict.items():
        value = tensor.detach().to("cpu").contiguous()
        ident = (value.untyped_storage().data_ptr(), value.storage_offset())
        if ident in seen:
            value = value.clone()
        seen.add((value.untyped_storage().data_ptr(), value.storage_offset()))
        out[name] = value
    return out


def safetensors_bytes(state_dict: Mapping[str, torch.Tensor]) -> bytes:
    from safetensors.torch import save

    return save(checkpoint_tensors(state_dict))


@contextmanager
def weights_folder(state_dict: Mapping[str, torch.Tensor]) -> Iterator[Path]:
    """A temporary folder holding ``state_dict`` as one safetensors file; removed on exit."""
    from safetensors.torch import save_file

    parent = SHM if SHM.is_dir() else None
    folder = Path(tempfile.mkdtemp(prefix="reelrl-weights-", dir=parent))
    try:
        save_file(checkpoint_tensors(state_dict), folder / WEIGHTS_FILE)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


Weights = Mapping[str, torch.Tensor] | bytes | str | Path
TRANSPORTS = ("file", "bytes")


@contextmanager
def reload_call(weights: Weights, transport: str = "file") -> Iterator[tuple[str, tuple, dict[str, Any]]]:
    """The worker RPC ``(method, args, kwargs)`` that loads ``weights``; valid inside the ``with``.

    ``weights``: a state dict under checkpoint names (the HF model's ``state_dict()``), the bytes of
    a safetensors file, or a folder of safetensors files. A state dict travels by ``transport``.
    """
    if transport not in TRANSPORTS:
        raise ValueError(f"unknown weight transport {transport!r}; use one of {TRANSPORTS}")
    if isinstance(weights, str | Path):
        yield "reload_weights", (), {"weights_path": str(weights)}
    elif isinstance(weights, bytes):
        yield "reelrl_reload_from_bytes", (weights,), {}
    elif transport == "bytes":
        yield "reelrl_reload_from_bytes", (safetensors_bytes(weights),), {}
    else:
        with weights_folder(weights) as folder:
            yield "reload_weights", (), {"weights_path": str(folder)}


class WeightSyncExtension:
    """Methods added to vLLM's worker (``worker_extension_cls``), called through ``collective_rpc``."""

    def reelrl_reload_from_bytes(self, data: bytes) -> int:
        """Load safetensors ``data`` in place; returns how many tensors it held."""
        from safetensors.torch import load

        weights = load(data)
        self.reload_weights(weights_iterator=iter(weights.items()))  # type: ignore[attr-defined]
        return len(weights)

    def reelrl_runtime(self) -> dict[str, Any]:
        """How torchvision fares in this worker process (tests check the install recipe took effect)."""
        import os

        import torchvision.transforms.v2.functional  # noqa: F401  (what transformers' video processors use)

        import services.common.compat.torchvision_ops as compat

        return {
            "pid": os.getpid(),
            "torchvision_ok": True,
            "extension_loads": compat.extension_loads(),
            "compat_applied": compat.apply(),
        }
