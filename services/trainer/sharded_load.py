"""Sharded initialisation, for a policy spread over several ranks: the model is built with its
parameters on the meta device (no memory), sharded by FSDP2 while still there, and only then does each
rank allocate its own shards and read into them its own slices of the checkpoint's tensors
(safetensors ``get_slice``: only those bytes are read). No rank ever holds the whole model, nor even a
whole tensor; nothing is sent between ranks. docs/training.md ("Memory at scale") has the figures and
why this was chosen over rank 0 reading everything and broadcasting it.

Buffers (the rotary ``inv_freq`` and the like, most of them left out of the state dict) are computed
for real while the model is built: only *parameters* go to the meta device. ``to_empty``, which
allocates the shards, would leave them as garbage, so they are put back afterwards.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from services.trainer.lora import is_adapter
from services.trainer.weight_files import WeightFiles, load_names

log = logging.getLogger(__name__)


@contextlib.contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Every parameter registered inside is moved to the meta device as it is registered (before any
    initialiser touches it); buffers and other tensors stay where they are made. Ties survive: a
    parameter that is already on meta (``lm_head.weight = embed_tokens.weight``) is registered as is.
    It patches ``torch.nn.Module.register_parameter`` for the whole process while inside: build nothing
    else on another thread meanwhile."""
    register = torch.nn.Module.register_parameter

    def on_meta(module: torch.nn.Module, name: str, param: torch.nn.Parameter | None) -> None:
        if param is not None and not param.is_meta:
            param = torch.nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        register(module, name, param)

    torch.nn.Module.register_parameter = on_meta  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register  # type: ignore[method-assign]


def empty_model(path: str | Path, dtype: torch.dtype) -> Any:
    """The checkpoint's model with its parameters on meta and its buffers computed, as ``dtype``, with
    what else ``from_pretrained`` gives it: the checkpoint's generation config, and the name transforms
    its files need (:func:`~services.trainer.weight_files.load_names`), which a save reverts."""
    from transformers import AutoConfig, AutoModelForImageTextToText, GenerationConfig

    config = AutoConfig.from_pretrained(path)
    with parameters_on_meta():
        model = AutoModelForImageTextToText.from_config(config, dtype=dtype)
    if (Path(path) / "generation_config.json").is_file():
        model.generation_config = GenerationConfig.from_pretrained(path)
    with WeightFiles(path) as files:  # the checkpoint's naming, found while the model is unwrapped
        untie_differing(model, load_names(model, files.tensor_names()), files)
    return model


def untie_differing(model: Any, names: dict[str, str], files: WeightFiles) -> None:
    """Drop each tie the config asks for (``lm_head`` ↔ ``embed_tokens``) whose two tensors the
    checkpoint holds with different values, as ``from_pretrained`` does (with the same warning): the
    head becomes a parameter of its own. Compared a few rows at a time, never a whole tensor at once."""
    tied = getattr(model, "all_tied_weights_keys", None) or {}
    for target, source in list(tied.items()):
        if target not in names or source not in names or _same(files, names[target], names[source]):
            continue
        log.warning(
            "the config ties %s to %s, but the checkpoint holds both with different values: not tied",
            target, source,
        )  # fmt: skip
        tied.pop(target)
        parent, _, attr = target.rpartition(".")
        like = model.get_parameter(source)
        untied = torch.nn.Parameter(torch.empty_like(like), requires_grad=like.requires_grad)
        setattr(model.get_submodule(parent) if parent else model, attr, untied)


def _same(files: WeightFiles, a: str, b: str, chunk_bytes: int = 64 << 20) -> bool:
    """Whether file tensors ``a`` and ``b`` are equal, read ``chunk_bytes`` (at fp64) of rows at a time."""
    shape = files.shape(a)
    if files.shape(b) != shape:
        return False
    if not shape:
        return torch.equal(files.read(a), files.read(b))
    rows = max(1, chunk_bytes // (8 * max(1, math.prod(shape[1:]))))
    for start in range(0, shape[0], rows):
        index = (slice(start, min(start + rows, shape[0])), *(slice(0, n) for n in shape[1:]))
        if not torch.equal(files.read(a, index), files.read(b, index)):
            return False
    return True


def load_shards(model: Any, path: str | Path, device: torch.device) -> None:
    """Allocate the (already sharded) ``model``'s parameters on ``device`` and fill each rank's part of
    every tensor from the checkpoint at ``path``: a DTensor gets the slice its placement gives this rank,
    a plain tensor the whole. Raises naming the tensors the checkpoint lacks or has in another shape."""
    buffers = {name: value for name, value in model.named_buffers()}  # computed when built
    model.to_empty(device=device)
    with torch.no_grad():
        for name, value in model.named_buffers():
            value.copy_(buffers[name])
        with WeightFiles(path) as files:
            names = load_names(model, files.tensor_names())
            missing = []
            for keys, target in distinct_tensors(model):
                if any(is_adapter(k) for k in keys):  # in no checkpoint: lora.init_adapters fills them
                    continue
                key = next((names[k] for k in keys if k in names), None)
                if key is None:
                    missing += keys
                    continue
                _fill(target, files, key, keys[0], path)
            if missing:
                raise ValueError(
                    f"{path}: the checkpoint has no tensor for {missing[:5]} ({len(missing)} in all)"
                )
            unused = sorted(set(files.tensor_names()) - set(names.values()))
            if unused:
                log.warning("%s: %d checkpoint tensors load nothing, e.g. %s", path, len(unused), unused[:3])


def distinct_tensors(model: Any) -> list[tuple[list[str], torch.Tensor]]:
    """Every distinct tensor of the state dict with all the keys it goes by (tied weights have two)."""
    groups: dict[int, tuple[list[str], torch.Tensor]] = {}
    for key, value in model.state_dict(keep_vars=True).items():
        groups.setdefault(id(value), ([], value))[0].append(key)
    return list(groups.values())


def _fill(target: torch.Tensor, files: WeightFiles, key: str, name: str, path: str | Path) -> None:
    """Copy this rank's part of file tensor ``key`` into ``target`` (model key ``name``), cast to the
    target's dtype as ``from_pretrained`` casts."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    shape = tuple(target.shape)
    if files.shape(key) != shape:
        raise ValueError(f"{path}: {key} has shape {files.shape(key)}, the model's {name} {shape}")
    if isinstance(target, DTensor):
        local = target.to_local()
        part, offset = compute_local_shape_and_global_offset(
            target.shape, target.device_mesh, target.placements
        )
    else:
        local, part, offset = target, shape, (0,) * len(shape)
    if local.numel() == 0:
        return
    whole = tuple(part) == shape
    index = None if whole else tuple(slice(o, o + n) for o, n in zip(offset, part, strict=True))
    local.copy_(files.read(key, index))
