"""The actor's weights as a stream of bounded buckets, for a push that never holds a full state dict.

A push used to gather every parameter on rank 0 (a second full copy of the model in host memory) and
send it whole. Here the parameters are walked in one fixed order, the order of the model's
``state_dict()``, which is the same on every rank and groups each layer's tensors together (vLLM
processes a layer as soon as all of its tensors arrived, so that order keeps its buffers small too).
Each bucket is gathered with ``full_tensor()`` per parameter and cast to the engine's dtype; the
largest extra memory a push holds is one bucket: at most ``rollout.weight_bucket_mb``, or a single
tensor larger than that. A tied LM head is walked once, as the embeddings it is
(``services.trainer.lora.push_state`` leaves the second name out): the engine ties its own head, so
gathering and sending it again would only cost the largest tensor of a small model twice.

:func:`pack` is the pure part (sizes in, index lists out); :func:`manifest` and :func:`buckets` read a
model (FSDP2 DTensors or plain tensors; every rank must walk the buckets together, since
``full_tensor()`` is a collective).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from services.rollout.weight_sync import WeightBuckets
from services.trainer.lora import push_state

MiB = 1 << 20
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Entry:
    """One tensor of a push: its checkpoint name, full (unsharded) shape and the dtype it travels in."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        numel = 1
        for dim in self.shape:
            numel *= dim
        return numel * torch.empty((), dtype=self.dtype).element_size()


def pack(sizes: Sequence[int], limit: int) -> list[list[int]]:
    """Indices of ``sizes`` grouped in order into buckets of at most ``limit`` bytes; a tensor larger
    than ``limit`` gets a bucket of its own. Order is kept, so a bucket is a contiguous run."""
    if limit <= 0:
        raise ValueError(f"bucket limit must be positive, got {limit}")
    out: list[list[int]] = []
    current: list[int] = []
    held = 0
    for index, size in enumerate(sizes):
        if size < 0:
            raise ValueError(f"tensor {index} has negative size {size}")
        if current and held + size > limit:
            out.append(current)
            current, held = [], 0
        current.append(index)
        held += size
    if current:
        out.append(current)
    return out


def push_dtype(engine_dtype: str, model_dtype: torch.dtype | None) -> torch.dtype | None:
    """The dtype tensors travel in, the one rule for every push: the engine's (``rollout.engine.dtype``)
    when named; with "auto", the dtype of the checkpoint the engine started from (``model_dtype``,
    :func:`checkpoint_dtype`; None: as stored). vLLM's "auto" runs that dtype, except that it downcasts
    an fp32 checkpoint to its platform's choice (bf16 on GPU): fp32 then travels as fp32 and the engine
    rounds it once as it loads, which is exact whatever the platform chose. The actor's compute dtype
    plays no part: casting to it first would round twice into an fp16 engine."""
    if engine_dtype == "auto":
        return model_dtype
    try:
        return DTYPES[engine_dtype]
    except KeyError:
        raise ValueError(
            f"unknown engine dtype {engine_dtype!r}; use auto or one of {sorted(DTYPES)}"
        ) from None


def checkpoint_dtype(hf_config: Any) -> torch.dtype | None:
    """The dtype a checkpoint's ``config.json`` declares, where vLLM's "auto" reads it: the root config's
    ``dtype`` (``torch_dtype`` before transformers 5), else its text model's; None when neither names one."""
    for config in (hf_config, getattr(hf_config, "text_config", None)):
        value = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
        if isinstance(value, str):
            value = DTYPES.get(value.removeprefix("torch."))
        if isinstance(value, torch.dtype):
            return value
    return None


def manifest(state: Mapping[str, torch.Tensor], dtype: torch.dtype | None) -> list[Entry]:
    """Every tensor a push carries, in push order, without gathering anything (a DTensor knows its
    global shape). ``dtype`` None: each floating tensor travels as stored."""
    return [Entry(name, tuple(t.shape), cast_dtype(t.dtype, dtype)) for name, t in state.items()]


def cast_dtype(stored: torch.dtype, dtype: torch.dtype | None) -> torch.dtype:
    """The dtype a tensor stored as ``stored`` travels or is saved in: ``dtype`` for a floating one
    (None: as stored), its own for an integer buffer."""
    return dtype if dtype is not None and stored.is_floating_point else stored


def plan(entries: Sequence[Entry], bucket_mb: float) -> list[list[Entry]]:
    """``entries`` packed into buckets of at most ``bucket_mb`` MiB."""
    groups = pack([e.nbytes for e in entries], max(1, int(bucket_mb * MiB)))
    return [[entries[i] for i in group] for group in groups]


def full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor: gathered from every rank for a DTensor (a collective), itself otherwise."""
    from torch.distributed.tensor import DTensor

    from services.trainer.lora import Dequantized, MergedWeight

    # a LoRA weight merges its gathered parts; a 4-bit one (QLoRA) is unpacked
    if isinstance(tensor, DTensor | MergedWeight | Dequantized):
        return tensor.full_tensor()
    return tensor


def group_stream(
    tensors: Iterable[tuple[str, torch.Tensor]],
    entries: Sequence[Entry],
    bucket_mb: float,
    device: torch.device | str = "cpu",
) -> Iterator[dict[str, torch.Tensor]]:
    """A stream of full ``(name, tensor)`` pairs (in ``entries`` order) grouped into buckets per
    :func:`plan`, as contiguous tensors on ``device`` in each entry's dtype (a colocated engine takes
    them on the rank's own GPU; a push to another process, from host memory)."""
    stream = iter(tensors)
    for group in plan(entries, bucket_mb):
        out: dict[str, torch.Tensor] = {}
        held: set[int] = set()
        for entry, tensor in _paired(stream, group):
            with torch.no_grad():
                value = tensor.detach().to(device=device, dtype=entry.dtype).contiguous()
            # the gathered original (e.g. fp32) goes before the next is gathered: only the bucket stays
            del tensor
            if value.data_ptr() in held:  # tied weights share storage, which safetensors refuses
                value = value.clone()
            held.add(value.data_ptr())
            out[entry.name] = value
        yield out


def buckets(
    model: torch.nn.Module, dtype: torch.dtype | None, bucket_mb: float, device: torch.device | str = "cpu"
) -> Iterator[dict[str, torch.Tensor]]:
    """The model's tensors, bucket by bucket, under checkpoint names, gathered one tensor at a time,
    on ``device``. Every rank yields the same buckets (colocated engines each load their own, on the
    rank's device; a disaggregated push sends rank 0's, from host memory); a caller that stops early
    must stop on every rank."""
    state = push_state(model)
    return group_stream(((n, full(t)) for n, t in state.items()), manifest(state, dtype), bucket_mb, device)


def packed_buckets(
    model: torch.nn.Module,
    dtype: torch.dtype | None,
    bucket_mb: float,
    device: torch.device | str,
    *,
    keep: bool,
) -> Iterator[torch.Tensor | None]:
    """The buckets of :func:`buckets` as the bytes a weight-broadcast group sends
    (``services.rollout.weight_group.layout``), each tensor gathered straight into its place in one
    buffer, so the extra memory is that buffer and one tensor. Every rank walks them together (the
    gathers are collectives); a rank that does not send (``keep`` False) yields None per bucket."""
    from services.rollout.weight_group import empty_bucket, place

    state = push_state(model)
    stream = ((n, full(t)) for n, t in state.items())  # gathered one at a time, as asked for
    for group in plan(manifest(state, dtype), bucket_mb):
        flat, offsets = empty_bucket(slots_for(group), device) if keep else (None, [0] * len(group))
        # a plain loop, not zip or enumerate: their reused result tuple would keep the last tensor
        # alive while the next is gathered
        offsets = iter(offsets)
        for entry, value in _paired(stream, group):
            offset = next(offsets)
            if flat is not None:
                with torch.no_grad():
                    place(flat, offset, value, entry.dtype)
            del value
        yield flat
        # the generator's own reference goes before the next buffer is made: the consumer's is then
        # the last, so a sender that drops a sent bucket holds one buffer, not two
        flat = None


def _paired(
    stream: Iterator[tuple[str, torch.Tensor]], group: Sequence[Entry]
) -> Iterator[tuple[Entry, torch.Tensor]]:
    """The next ``len(group)`` tensors of ``stream``, each with its planned entry (names must agree).
    Holds no tensor while it asks for the next: a gathered one lives only as long as its consumer keeps it,
    so the extra memory of a push is its bucket and the one tensor being gathered."""
    for entry in group:
        name, tensor = next(stream)
        if name != entry.name:
            raise RuntimeError(f"weight stream sent {name!r} where the plan has {entry.name!r}")
        yield entry, tensor
        del tensor


def slots_for(group: Sequence[Entry]) -> list[tuple[str, tuple[int, ...], str]]:
    from services.rollout.weight_group import dtype_name

    return [(e.name, e.shape, dtype_name(e.dtype)) for e in group]


def bucket_slots(entries: Sequence[Entry], bucket_mb: float) -> list[list[tuple[str, tuple[int, ...], str]]]:
    """Each bucket of :func:`plan` as the slots a weight-broadcast group sends
    (``services.rollout.weight_group``: name, full shape, dtype name)."""
    return [slots_for(group) for group in plan(entries, bucket_mb)]


def weight_buckets(
    model: torch.nn.Module, dtype: torch.dtype | None, bucket_mb: float, device: torch.device | str = "cpu"
) -> WeightBuckets:
    """A push of ``model`` in buckets on ``device`` that each engine reads in a pass of its own (a
    model on one rank: nothing is gathered, so passes may run side by side; a sharded one: every rank
    opens its pass together, as colocated engines do)."""
    entries = manifest(push_state(model), dtype)
    return WeightBuckets(
        announced=tuple((e.name, e.shape) for e in entries),
        open=lambda: buckets(model, dtype, bucket_mb, device),
        nbytes=sum(e.nbytes for e in entries),
    )
