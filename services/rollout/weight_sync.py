"""Pushing a trainer's weights into a running vLLM engine.

Two transports, both ending in vLLM's in-place ``reload_weights`` on every worker (which re-packs the
CPU backend's linear layers; calling ``model.load_weights`` directly leaves parameters of shape (0,)):
- file: the state dict is written as safetensors to a private folder and each worker reads it; the
  folder is removed after the push. The folder lives under ``$REELRL_WEIGHTS_DIR`` when set, else under
  /dev/shm when it exists and has room for the payload (so it never touches a disk), else under the
  system temp directory;
- bytes: the safetensors bytes travel in the RPC and :class:`WeightSyncExtension` loads them.
Tensors themselves cannot travel in RPC arguments (they arrive as lists).

Every push is checked against the checkpoint's parameter names first (:mod:`services.rollout.param_names`):
vLLM would otherwise keep the old value of each tensor it was not given, without an error.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import torch

from services.rollout.param_names import ParameterNames, folder_names, safetensors_header_names

SHM = Path("/dev/shm")
WEIGHTS_DIR_ENV = "REELRL_WEIGHTS_DIR"
# safetensors adds a JSON header (~100 bytes a tensor); keep this much room on top of the tensor bytes
HEADER_MARGIN = 1 << 20
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


def payload_bytes(state_dict: Mapping[str, torch.Tensor]) -> int:
    """Bytes the tensors of ``state_dict`` take in a safetensors file, header aside."""
    return sum(t.numel() * t.element_size() for t in state_dict.values())


def weights_dir(
    size: int,
    environ: Mapping[str, str] = os.environ,
    shm: Path = SHM,
    free: Callable[[Path], int] = lambda path: shutil.disk_usage(path).free,
) -> Path:
    """Where the file transport writes a payload of ``size`` bytes: ``$REELRL_WEIGHTS_DIR`` if set (the
    operator's choice, used as is), else /dev/shm if it exists with room for it, else the temp dir."""
    if environ.get(WEIGHTS_DIR_ENV):
        return Path(environ[WEIGHTS_DIR_ENV])
    if shm.is_dir() and free(shm) >= size + HEADER_MARGIN:
        return shm
    return Path(tempfile.gettempdir())


@contextmanager
def weights_folder(state_dict: Mapping[str, torch.Tensor]) -> Iterator[Path]:
    """A temporary folder holding ``state_dict`` as one safetensors file; removed on exit."""
    from safetensors.torch import save_file

    parent = weights_dir(payload_bytes(state_dict))
    folder = Path(tempfile.mkdtemp(prefix="reelrl-weights-", dir=parent))
    try:
        save_file(checkpoint_tensors(state_dict), folder / WEIGHTS_FILE)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


Weights = Mapping[str, torch.Tensor] | bytes | str | Path
TRANSPORTS = ("file", "bytes")


class ReloadCall(NamedTuple):
    """A worker RPC that loads weights, and how many tensors it carries."""

    method: str
    args: tuple
    kwargs: dict[str, Any]
    tensors: int


@contextmanager
def reload_call(
    weights: Weights, transport: str = "file", expected: ParameterNames | None = None
) -> Iterator[ReloadCall]:
    """The worker RPC that loads ``weights``; valid inside the ``with``.

    ``weights``: a state dict under checkpoint names (the HF model's ``state_dict()``), the bytes of
    a safetensors file, or a folder of safetensors files. A state dict travels by ``transport``.
    With ``expected``, the tensor names are checked before anything is serialised or sent (ValueError
    naming missing and unexpected names).
    """
    if transport not in TRANSPORTS:
        raise ValueError(f"unknown weight transport {transport!r}; use one of {TRANSPORTS}")
    if isinstance(weights, str | Path):
        names = folder_names(weights) if expected is not None else []
        what = f"weights folder {weights}"
    elif isinstance(weights, bytes):
        names = safetensors_header_names(weights)
        what = "safetensors bytes"
    else:
        names = list(weights)
        what = "state dict"
    if expected is not None:
        expected.check(names, what)
    if isinstance(weights, str | Path):
        yield ReloadCall("reload_weights", (), {"weights_path": str(weights)}, len(names))
    elif isinstance(weights, bytes):
        yield ReloadCall("reelrl_reload_from_bytes", (weights,), {}, len(names))
    elif transport == "bytes":
        yield ReloadCall("reelrl_reload_from_bytes", (safetensors_bytes(weights),), {}, len(names))
    else:
        with weights_folder(weights) as folder:
            yield ReloadCall("reload_weights", (), {"weights_path": str(folder)}, len(names))


def check_reload_results(call: ReloadCall, results: Sequence[Any]) -> None:
    """Each worker that reports a count (the bytes RPC does; vLLM's ``reload_weights`` returns None)
    must have loaded every tensor sent."""
    for rank, loaded in enumerate(results):
        if loaded is not None and loaded != call.tensors:
            raise RuntimeError(
                f"worker {rank} loaded {loaded} tensors of the {call.tensors} pushed ({call.method}); "
                "its weights are now a mix of old and new: push again"
            )


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
