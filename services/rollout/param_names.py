"""The tensor names a weight push must carry, and the check that runs before anything is sent.

vLLM's in-place ``reload_weights`` does not fail on a state dict with missing or foreign names: the
worker logs "weights were not loaded" and keeps the old values, so a bad push would silently train
against stale rollouts. Every push is checked here first and refused with the names that differ.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

EXAMPLES = 3  # names quoted per kind of difference in an error message


@dataclass(frozen=True)
class ParameterNames:
    """Accepted name sets of one checkpoint.

    ``layouts``: each a complete set of names a push may use: the model's ``state_dict()`` names, and
    the names in the checkpoint's own files (transformers renames some on save, e.g. Qwen2.5-VL's
    ``model.language_model.*`` is stored as ``model.*``; vLLM maps both). ``optional``: tied weights
    (``lm_head.weight`` when the embeddings are tied), which a push may leave out.
    """

    layouts: tuple[frozenset[str], ...]
    optional: frozenset[str] = frozenset()

    def problems(self, names: Iterable[str]) -> tuple[list[str], list[str], int]:
        """(missing, unexpected, layout size) against the closest layout; both empty when accepted."""
        given = set(names)
        best: tuple[list[str], list[str], int] | None = None
        for layout in self.layouts:
            missing = sorted(layout - given - self.optional)
            unexpected = sorted(given - layout)
            if best is None or len(missing) + len(unexpected) < len(best[0]) + len(best[1]):
                best = (missing, unexpected, len(layout))
        if best is None:
            raise ValueError("no parameter layout to check weight names against")
        return best

    def check(self, names: Iterable[str], what: str) -> None:
        """Raise ValueError naming counts and examples of missing and unexpected tensor names."""
        missing, unexpected, size = self.problems(names)
        if not missing and not unexpected:
            return
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing (e.g. {missing[:EXAMPLES]})")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected (e.g. {unexpected[:EXAMPLES]})")
        raise ValueError(
            f"{what} does not match the checkpoint's {size} parameters: {' and '.join(parts)}; "
            "nothing was pushed (vLLM would keep the old values of every tensor it was not given)"
        )


def safetensors_header_names(data: bytes | bytearray | memoryview) -> list[str]:
    """Tensor names in the header of safetensors ``data``, without reading the tensors.

    Format: an 8-byte little-endian header length N, then N bytes of JSON mapping name → dtype/shape/
    offsets (plus an optional ``__metadata__`` entry).
    """
    view = memoryview(data)
    if len(view) < 8:
        raise ValueError(f"safetensors data of {len(view)} bytes is too short for a header")
    (size,) = struct.unpack("<Q", view[:8])
    if 8 + size > len(view):
        raise ValueError(f"safetensors header claims {size} bytes but the data holds {len(view) - 8}")
    header = json.loads(bytes(view[8 : 8 + size]))
    return [name for name in header if name != "__metadata__"]


def safetensors_files(folder: str | Path) -> list[Path]:
    """A checkpoint folder's weight files: the ``*.safetensors`` files its index names
    (``model.safetensors.index.json``, as vLLM's loader keeps), else all of them."""
    files = sorted(Path(folder).glob("*.safetensors"))
    index = Path(folder) / "model.safetensors.index.json"
    if index.is_file():
        named = set(json.loads(index.read_text())["weight_map"].values())
        files = [f for f in files if f.name in named]
    return files


def folder_names(folder: str | Path) -> list[str]:
    """Tensor names in the weight files of a checkpoint folder (:func:`safetensors_files`; headers only)."""
    from safetensors import safe_open

    files = safetensors_files(folder)
    if not files:
        raise ValueError(f"weights folder {folder} holds no *.safetensors file")
    names: list[str] = []
    for path in files:
        with safe_open(str(path), framework="pt") as handle:
            names += list(handle.keys())
    return names


def checkpoint_names(hf_config: object, path: str | Path) -> ParameterNames:
    """The names a checkpoint accepts: its model's state dict (built on the meta device, so no memory
    or time goes into weights) and, for a local folder, the names its safetensors files hold."""
    import torch
    from transformers import AutoModelForImageTextToText

    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(hf_config)
    layouts = [frozenset(model.state_dict())]
    if Path(path).is_dir() and any(Path(path).glob("*.safetensors")):
        stored = frozenset(folder_names(path))
        if stored != layouts[0]:
            layouts.append(stored)
    tied = frozenset(getattr(model, "all_tied_weights_keys", None) or {})
    return ParameterNames(tuple(layouts), tied)
