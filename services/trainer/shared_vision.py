"""One vision-tower pass per distinct clip of a micro-batch, its features handed to every sequence.

The n responses of a prompt share its clip, and the actor scores each response as its own sequence.
Left to itself the model would encode the clip n times per forward (and backpropagate through the
tower n times): at true scale that was nearly all of the scoring pass (docs/benchmarks.md, "The GPU
script": sixteen 32-frame clip forwards, of four distinct clips, in 8.8 s). :func:`~services.trainer.
batch.collate` collates each distinct prompt's pixel rows once and records, per item (image or video)
of every sequence, which distinct item it is (``MicroBatch.repeats``). Around the model's forward,
:func:`shared_vision` makes the tower run on the distinct items only (hooks on the tower: its grid
argument becomes the distinct items' grid) and expands every output row-wise back to all items, so
the model's own code (placeholder checks, the split per item, Qwen3-VL's deepstack features) sees the
same tensors as before. The expansion is an index: autograd sums the gradients of a clip's copies,
which is the gradient of the n separate passes (tests/trainer/test_shared_vision.py checks log-probs
and gradients against the unshared forward for every family).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch


class ItemPlan:
    """How one modality's tower output expands: ``grid`` (every item's (t, h, w), in order), ``source``
    (each item's index among the distinct items, first-seen order), ``merge`` (the tower's spatial
    merge size: its merged output has t·h·w / merge² rows per item, its patch-level output t·h·w)."""

    def __init__(self, grid: torch.Tensor, source: Sequence[int], merge: int) -> None:
        if len(source) != len(grid):
            raise ValueError(f"{len(source)} item indices for {len(grid)} grid rows")
        first: dict[int, int] = {}
        for position, item in enumerate(source):
            first.setdefault(item, position)
        if sorted(first) != list(range(len(first))):
            raise ValueError(f"item indices {list(source)} do not number the distinct items 0..k-1")
        self.source = list(source)
        self.grid = grid
        self.distinct_grid = grid[[first[i] for i in range(len(first))]]
        if not torch.equal(self.distinct_grid[self.source], grid):
            raise ValueError("items numbered as one distinct item have different grids")
        patches = [int(n) for n in self.distinct_grid.prod(dim=-1).tolist()]
        merged = [n // merge**2 for n in patches]
        self.rows = sum(patches)  # pixel rows the micro-batch holds for these items
        # rows of a tower output -> its rows per distinct item (patch-level or merged)
        self.sizes = {sum(patches): patches, sum(merged): merged}

    def expand(self, value: Any) -> Any:
        """``value`` (a tensor, a list or tuple of them, or a model output holding them) with each
        tensor's rows repeated per item, as if every item had been encoded."""
        if isinstance(value, torch.Tensor):
            sizes = self.sizes.get(value.shape[0])
            if sizes is None:
                raise RuntimeError(
                    f"a vision output of {value.shape[0]} rows matches neither the patches nor the merged "
                    f"tokens of the distinct items ({sorted(self.sizes)}): cannot share the tower's pass"
                )
            parts = value.split(sizes)
            return torch.cat([parts[i] for i in self.source], dim=0)
        if isinstance(value, (list, tuple)):
            return type(value)(self.expand(v) for v in value)
        if hasattr(value, "keys"):  # transformers' ModelOutput: set the fields it holds
            for key in list(value.keys()):
                if value[key] is not None:
                    value[key] = self.expand(value[key])
            return value
        raise RuntimeError(f"a vision output of type {type(value).__name__}: cannot share the tower's pass")


@contextmanager
def shared_vision(model: Any, inputs: dict[str, Any], repeats: dict[str, list[int]]) -> Iterator[None]:
    """Inside, a forward of ``model`` on ``inputs`` (whose pixel rows hold the distinct items only)
    encodes each distinct item once. ``repeats``: ``MicroBatch.repeats``. A tower call the plan does not
    meet (another modality, a zero-weight FSDP dummy pass) runs untouched; a planned modality the
    tower never saw raises after the forward (transformers changed how it calls its tower)."""
    if not repeats:
        yield
        return
    visual = model.model.visual
    merge = int(visual.spatial_merge_size)
    plans = {id(inputs[name]): ItemPlan(inputs[name], source, merge) for name, source in repeats.items()}
    running: list[ItemPlan] = []
    seen: set[int] = set()

    def before(_module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        grid = _grid(args, kwargs)
        if grid is None:
            return None
        plan = plans.get(id(grid))
        if plan is None:
            # another object with a planned grid's rows (a future transformers copying it on the way):
            # the tower would run the full grid over the distinct pixel rows and fail somewhere inside
            pixels = args[0] if args else kwargs.get("hidden_states")
            rows = pixels.shape[0] if isinstance(pixels, torch.Tensor) else None
            for key, other in plans.items():
                if key not in seen and rows == other.rows and torch.equal(other.grid.cpu(), grid.cpu()):
                    raise RuntimeError(
                        "the vision tower was handed a copy of a shared grid, not the micro-batch's own "
                        "tensor: transformers changed how it calls its tower (services/trainer/shared_vision.py)"
                    )
            return None
        seen.add(id(grid))
        running.append(plan)
        if "grid_thw" in kwargs:
            return args, {**kwargs, "grid_thw": plan.distinct_grid}
        return (args[0], plan.distinct_grid, *args[2:]), kwargs

    def after(_module: Any, args: tuple, kwargs: dict, output: Any) -> Any:
        if not running or _grid(args, kwargs) is not running[-1].distinct_grid:
            return None
        return running.pop().expand(output)

    handles = [
        visual.register_forward_pre_hook(before, with_kwargs=True),
        visual.register_forward_hook(after, with_kwargs=True),
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
    missed = [name for name in repeats if id(inputs[name]) not in seen]
    if missed:
        raise RuntimeError(
            f"the vision tower never encoded {missed}: their pixel rows hold distinct items only, so the "
            "model's forward could not have used them (transformers changed how it calls its tower)"
        )


def _grid(args: tuple, kwargs: dict) -> Any:
    """The grid argument of a tower call: ``grid_thw`` by keyword (as transformers calls it) or second."""
    return kwargs.get("grid_thw", args[1] if len(args) > 1 else None)
