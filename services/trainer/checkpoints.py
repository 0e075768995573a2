"""Checkpoints: ``OUTPUT_DIR/checkpoints/step_NNNNNN/`` holding ``model/`` (HF format, loadable by
transformers and vLLM), ``optim_rank{r}.pt`` (optimizer and scheduler state of each rank) and
``state.json`` (step, data position, RNG states, KL coefficient). A folder is complete only once its
``state.json`` exists: it is written last, after everything else was renamed into place."""

from __future__ import annotations

import base64
import json
import os
import pickle
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

STATE_FILE = "state.json"
MODEL_DIR = "model"
_STEP = re.compile(r"^step_(\d+)$")


def checkpoint_dir(output_dir: Path, step: int) -> Path:
    return Path(output_dir) / "checkpoints" / f"step_{step:06d}"


def complete_checkpoints(output_dir: Path) -> list[tuple[int, Path]]:
    """(step, folder) of every complete checkpoint, oldest first."""
    root = Path(output_dir) / "checkpoints"
    found = []
    if root.is_dir():
        for child in root.iterdir():
            match = _STEP.match(child.name)
            if match and (child / STATE_FILE).is_file():
                found.append((int(match.group(1)), child))
    return sorted(found)


def resolve_resume(output_dir: Path, resume: str) -> Path | None:
    """``auto``: the newest complete checkpoint of this run (None if there is none); ``none``: None;
    else the given folder, which must be a complete checkpoint."""
    if resume == "none":
        return None
    if resume == "auto":
        found = complete_checkpoints(output_dir)
        return found[-1][1] if found else None
    path = Path(resume)
    if not (path / STATE_FILE).is_file():
        raise FileNotFoundError(f"trainer.resume={resume}: not a complete checkpoint (no {STATE_FILE})")
    return path


def rng_state() -> dict[str, str]:
    """Python, numpy and torch generator states, as text for ``state.json``."""
    states = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    return {k: base64.b64encode(pickle.dumps(v)).decode() for k, v in states.items()}


def set_rng_state(states: dict[str, str]) -> None:
    loaded = {k: pickle.loads(base64.b64decode(v)) for k, v in states.items()}
    random.setstate(loaded["python"])
    np.random.set_state(loaded["numpy"])
    torch.set_rng_state(loaded["torch"])


def write_state(folder: Path, state: dict[str, Any]) -> None:
    """The completion marker: written to a temp file, fsynced and renamed."""
    tmp = folder / f".{STATE_FILE}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(state, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, folder / STATE_FILE)
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_torch(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def read_state(folder: Path) -> dict[str, Any]:
    return json.loads((Path(folder) / STATE_FILE).read_text())


def prune(output_dir: Path, keep: int) -> None:
    """Remove all but the newest ``keep`` complete checkpoints, and incomplete leftovers older than them."""
    found = complete_checkpoints(output_dir)
    for _, folder in found[:-keep]:
        shutil.rmtree(folder, ignore_errors=True)
    if found:
        newest = found[-1][0]
        root = Path(output_dir) / "checkpoints"
        for child in root.iterdir():
            match = _STEP.match(child.name)
            if match and int(match.group(1)) < newest and not (child / STATE_FILE).is_file():
                shutil.rmtree(child, ignore_errors=True)
