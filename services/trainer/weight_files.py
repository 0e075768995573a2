"""An HF checkpoint's weight files, one tensor (or one slice of one) at a time: which file tensor feeds
which model parameter, reading a rank's slice of a tensor without reading the rest, and writing a
safetensors file tensor by tensor. Nothing here holds more than the tensor (or slice) at hand.

Names follow transformers' own rules (``transformers.conversion_mapping``): a checkpoint may name a
parameter otherwise than the model does (Qwen2/2.5-VL files say ``model.layers.0…`` and ``visual.…``
where the model says ``model.language_model.layers.0…`` and ``model.visual.…``); loading renames as
``from_pretrained`` does, saving reverts as ``save_pretrained`` does. A checkpoint whose tensors must be
*converted* (fused or split, e.g. MoE experts) is refused: a slice of a converted tensor is not a slice
of the file's.
"""

from __future__ import annotations

import ctypes
import json
import math
import struct
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from services.trainer.lora import is_adapter, original_name

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
#: safetensors' dtype names
_SAFETENSORS_DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
    torch.bool: "BOOL",
}  # fmt: skip


def load_names(model: Any, file_keys: Iterable[str]) -> dict[str, str]:
    """Model state-dict key → the file key that loads it, renamed as ``from_pretrained`` renames (keys
    of either side that match nothing are left out: the caller decides what is missing). As
    ``from_pretrained`` does, the transforms that matched are kept on the model
    (``model._weight_conversions``), which is what ``save_pretrained`` (and :func:`save_plan`) revert.
    Call it first on the model before FSDP2 wraps it: transformers finds no transforms for a wrapped
    class, and takes the kept ones afterwards."""
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key

    transforms = getattr(model, "_weight_conversions", None)
    if transforms is None:
        transforms = get_model_conversion_mapping(model)
    renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
    converters = [t for t in transforms if isinstance(t, WeightConverter)]
    # LoRA layers (services/trainer/lora.py) keep the original weight as ``….base_layer.weight``: the
    # checkpoint names it ``….weight``; their adapters are in no checkpoint
    actual = {original_name(k): k for k in model.state_dict() if not is_adapter(k)}
    model_keys = {k: k for k in actual}
    prefix = model.base_model_prefix
    names: dict[str, str] = {}
    for original in sorted(file_keys):
        renamed, converted = rename_source_key(original, renamings, converters, prefix, model_keys)
        if renamed not in model_keys and original in model_keys:  # as from_pretrained: maybe a prefix only
            renamed, converted = rename_source_key(original, [], [], prefix, model_keys)
        if renamed not in model_keys:
            continue
        if converted is not None:
            raise ValueError(
                f"checkpoint tensor {original} becomes {renamed} through a conversion ({converted}) that "
                "sharded loading cannot slice; convert the checkpoint with save_pretrained first"
            )
        names[actual[renamed]] = original
    model._weight_conversions = [t for t in transforms if t.was_used()]
    return names


def save_plan(model: Any, state: Mapping[str, Any] | None = None) -> list[tuple[str, str]]:
    """(model state-dict key, file key) of every tensor ``save_pretrained`` would write, in the order a
    safetensors file keeps them (wider dtypes first, then by name): tied copies and
    ``_keys_to_ignore_on_save`` left out, names reverted to the checkpoint's own (e.g. back to
    ``model.layers.0…`` for Qwen2-VL). Only names and shapes are looked at: nothing is gathered.
    ``state``: what is saved, if not ``model.state_dict()`` (a LoRA model's merged view, by its keys)."""
    from transformers.core_model_loading import revert_weight_conversion
    from transformers.modeling_utils import remove_tied_weights_from_state_dict

    state = model.state_dict() if state is None else state
    ignored = set(getattr(model, "_keys_to_ignore_on_save", None) or ())
    # meta placeholders of the tensors' shapes: transformers finds tied ones through the model's own
    # tensors (and, on meta, takes equal extents for one storage), and a rename hands each placeholder
    # back under its new name
    placeholders = {
        k: torch.empty(v.shape, dtype=v.dtype, device="meta") for k, v in state.items() if k not in ignored
    }
    kept = remove_tied_weights_from_state_dict(dict(placeholders), model)
    owner = {id(v): k for k, v in kept.items()}
    plan = []
    for saved, value in revert_weight_conversion(model, dict(kept)).items():
        if id(value) not in owner:
            raise ValueError(
                f"{saved}: save_pretrained converts (not only renames) this tensor; cannot stream it"
            )
        plan.append((owner[id(value)], saved))
    if len(plan) != len(kept):
        raise ValueError(f"reverting the checkpoint names kept {len(plan)} of {len(kept)} tensors")
    return sorted(plan, key=lambda entry: (-state[entry[0]].dtype.itemsize, entry[1]))


class WeightFiles:
    """The safetensors files of an HF checkpoint folder (one file, or several with an index), open for
    reading single tensors or slices of them. Use as a context manager; it closes the files."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        index = self.folder / INDEX_FILE
        if index.is_file():
            weight_map: dict[str, str] = json.loads(index.read_text())["weight_map"]
        elif (self.folder / SINGLE_FILE).is_file():
            weight_map = {}
        else:
            raise FileNotFoundError(f"{self.folder}: no {SINGLE_FILE} or {INDEX_FILE} (safetensors weights)")
        self._handles: dict[str, Any] = {}
        if not weight_map:
            handle = self._open(SINGLE_FILE)
            weight_map = dict.fromkeys(handle.keys(), SINGLE_FILE)
        self.file_of = weight_map

    def _open(self, name: str) -> Any:
        from safetensors import safe_open

        if name not in self._handles:
            self._handles[name] = safe_open(str(self.folder / name), framework="pt", device="cpu")
        return self._handles[name]

    def tensor_names(self) -> list[str]:
        return list(self.file_of)

    def shape(self, key: str) -> tuple[int, ...]:
        return tuple(self._open(self.file_of[key]).get_slice(key).get_shape())

    def read(self, key: str, index: tuple[slice, ...] | None = None) -> torch.Tensor:
        """The tensor ``key``, or only its part ``index`` (one slice per dimension): only those bytes are
        read from the file."""
        handle = self._open(self.file_of[key])
        if index is None or not index:
            return handle.get_tensor(key)
        return handle.get_slice(key)[index]

    def close(self) -> None:
        self._handles.clear()  # safe_open handles unmap their file when dropped

    def __enter__(self) -> WeightFiles:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def write_safetensors(
    path: Path,
    layout: Mapping[str, tuple[torch.dtype, tuple[int, ...]]],
    tensors: Iterator[tuple[str, torch.Tensor]],
    metadata: Mapping[str, str] | None = None,
) -> None:
    """A safetensors file at ``path`` from ``tensors`` as they come, each written and dropped before the
    next: the header is made from ``layout`` (name → (dtype, shape), in the order the tensors will
    arrive); every tensor must match its entry. Bytes are written little-endian, as the format wants."""
    offsets, position = {}, 0
    for name, (dtype, shape) in layout.items():
        if dtype not in _SAFETENSORS_DTYPES:
            raise ValueError(f"{name}: dtype {dtype} has no safetensors name")
        size = dtype.itemsize * math.prod(shape)
        offsets[name] = (position, position + size)
        position += size
    header: dict[str, Any] = {"__metadata__": dict(metadata or {"format": "pt"})}
    for name, (dtype, shape) in layout.items():
        header[name] = {
            "dtype": _SAFETENSORS_DTYPES[dtype],
            "shape": list(shape),
            "data_offsets": list(offsets[name]),
        }
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the data starts 8-byte aligned
    written = set()
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(encoded)))
        fh.write(encoded)
        for name, tensor in tensors:
            dtype, shape = layout.get(name, (None, None))
            if (tensor.dtype, tuple(tensor.shape)) != (dtype, shape) or name in written:
                raise ValueError(
                    f"{path}: tensor {name} ({tensor.dtype}, {tuple(tensor.shape)}) does not match the next "
                    f"entry of the layout ({dtype}, {shape}) or came twice"
                )
            if fh.tell() - 8 - len(encoded) != offsets[name][0]:
                raise ValueError(f"{path}: tensor {name} came out of the layout's order")
            flat = tensor.detach().to("cpu").contiguous().reshape(-1)
            fh.write(raw_bytes(flat))
            written.add(name)
    if written != set(layout):
        missing = sorted(set(layout) - written)
        raise ValueError(f"{path}: the stream ended without {missing[:5]} ({len(missing)} in all)")


def raw_bytes(flat: torch.Tensor) -> memoryview:
    """The bytes of a contiguous CPU tensor, without a copy and without ``numpy()``: a tensor shared
    with numpy is marked non-resizable for good, and on one rank the tensor written IS the parameter,
    whose storage a colocated engine's turn must be able to empty (``services.trainer.offload``)."""
    nbytes = flat.numel() * flat.element_size()
    if nbytes == 0:
        return memoryview(b"")
    if not flat.is_contiguous() or flat.device.type != "cpu":
        raise ValueError("raw_bytes reads a contiguous CPU tensor")
    array = (ctypes.c_char * nbytes).from_address(flat.data_ptr())
    array._owner = flat  # the view keeps the array, the array keeps the tensor's bytes alive
    return memoryview(array).cast("B")
