"""Checkpoints: ``OUTPUT_DIR/checkpoints/step_NNNNNN/`` holding ``model/`` (HF format, loadable by
transformers and vLLM; a LoRA run's ``adapter/`` instead, peft's format, see ``reelrl export``),
``optim_rank{r}.pt`` (optimizer and scheduler state of each rank) and
``state.json`` (step, data position, RNG states, KL coefficient, where the KL reference's weights are).
A folder is complete only once its ``state.json`` exists: it is written last, after everything else was
renamed into place.

The reference is written once per run, not per checkpoint: after a warm start (whose weights RL's KL
anchors to) the warmed weights go to ``OUTPUT_DIR/reference/`` and every checkpoint's state names that
folder, relative to itself, so a moved output folder still resumes."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

STATE_FILE = "state.json"
MODEL_DIR = "model"
#: a LoRA run's checkpoint holds its adapters here (peft's format) instead of a ``model/``
ADAPTER_DIR = "adapter"
REFERENCE_DIR = "reference"
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


class ResumeMismatch(ValueError):
    """A checkpoint that cannot continue this run (other data, batch size, ranks, or another run)."""


#: run-identity entries added after checkpoints were first written, and the value a checkpoint
#: without one was written with
IDENTITY_DEFAULTS: dict[str, Any] = {"off_policy_steps": 0, "lora": None}
#: run-identity entries added later whose value an older checkpoint cannot tell: not compared when the
#: checkpoint lacks them
IDENTITY_UNKNOWN_BEFORE = frozenset({"model"})
# config.json entries that name where or with what a model was saved, not what it is
_VOLATILE_CONFIG_KEYS = frozenset({"_name_or_path", "transformers_version"})


def identity_changes(saved: dict[str, Any], now: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The entries of a run's identity that differ between a checkpoint (``saved``) and the run
    resuming from it, as (checkpoint's, now): both ways, an entry missing on one side read as its
    default (entries of :data:`IDENTITY_UNKNOWN_BEFORE` the checkpoint lacks are not compared)."""
    keys = [*now, *(k for k in saved if k not in now)]
    keys = [k for k in keys if k in saved or k not in IDENTITY_UNKNOWN_BEFORE]
    values = {k: (saved.get(k, IDENTITY_DEFAULTS.get(k)), now.get(k, IDENTITY_DEFAULTS.get(k))) for k in keys}
    return {k: (a, b) for k, (a, b) in values.items() if a != b}


def model_identity(model_path: str | Path) -> dict[str, Any]:
    """What names the model a run trains: its resolved folder, family (``model_type``) and the sha256 of
    its ``config.json`` (canonical JSON, without where or with which library version it was saved)."""
    import hashlib

    path = Path(model_path).resolve()
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        config = {}
    if not isinstance(config, dict):
        config = {}
    kept = {k: v for k, v in config.items() if k not in _VOLATILE_CONFIG_KEYS}
    digest = hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()
    return {"path": str(path), "model_type": config.get("model_type"), "config_sha256": digest}


def check_resume_model(folder: Path, model_path: str | Path) -> None:
    """Raises :class:`ResumeMismatch` when ``folder``'s checkpoint was trained from another model than
    ``model_path`` (resuming would train the checkpoint's model while the run records the other one).
    A checkpoint from before the model was recorded is not checked."""
    saved = read_state(folder).get("run", {}).get("model")
    now = model_identity(model_path)
    if saved is None or saved == now:
        return
    what = [k for k in ("path", "model_type", "config_sha256") if saved.get(k) != now.get(k)]
    raise ResumeMismatch(
        f"cannot resume from {folder}: it trains {saved.get('path')} ({saved.get('model_type')}), not "
        f"actor.model_path={now['path']} ({now['model_type']}; differs in {', '.join(what)}); set "
        f"actor.model_path={saved.get('path')} to continue that run, or start this model in another "
        "trainer.output_dir (or trainer.resume=none)"
    )


def start_weights(folder: Path | None, model_path: str, *, lora: bool) -> tuple[str, str | None]:
    """(the model a run's actor, engine and data start from, the adapters to load or None) for a run
    resuming from ``folder`` (None: a fresh start, ``model_path``). A full-tuning checkpoint's
    ``model/`` holds the trained weights; a LoRA one (``actor.lora``) holds only ``adapter/``, trained
    on ``model_path``. A checkpoint of the other kind is refused by name."""
    if folder is None:
        return model_path, None
    model, adapter = Path(folder) / MODEL_DIR, Path(folder) / ADAPTER_DIR
    if lora:
        if not adapter.is_dir():
            raise ResumeMismatch(
                f"cannot resume from {folder} with actor.lora: it holds a full-tuning model/, no {ADAPTER_DIR}/ "
                "(resume it with actor.lora: null, or start the LoRA run in another trainer.output_dir)"
            )
        return model_path, str(adapter)
    if not model.is_dir():
        raise ResumeMismatch(
            f"cannot resume from {folder} without actor.lora: it holds LoRA adapters ({ADAPTER_DIR}/), no "
            f"{MODEL_DIR}/; resume with the actor.lora it was written with"
        )
    return str(model), None


def check_resume_lora(folder: Path, lora: dict[str, Any] | None) -> None:
    """Raises :class:`ResumeMismatch` when ``folder``'s checkpoint was trained with another
    ``actor.lora`` (as the run records it; None: full tuning) than ``lora``: before any model loads,
    since adapters of another rank or targets would not fit."""
    saved = read_state(folder).get("run", {}).get("lora", IDENTITY_DEFAULTS["lora"])
    if saved != lora:
        raise ResumeMismatch(
            f"cannot resume from {folder}: it was trained with actor.lora={saved}, this run has "
            f"actor.lora={lora}; set it as the checkpoint has it, or start in another trainer.output_dir"
        )


class OutputDirBusy(RuntimeError):
    """Another run holds the output folder."""


# Every run leaves this file in its output folder (its lock): a folder holding files but not this one
# is no run's, and a run refuses to write its fixed names (config.yaml, metrics.jsonl) there.
RUN_MARKER = ".lock"


def lock_output_dir(output_dir: Path) -> Any:
    """An exclusive lock on ``output_dir`` for the life of the returned file: two runs writing one folder
    would prune each other's checkpoints and truncate each other's metrics. Raises
    :class:`~services.common.outputs.OutputTaken` for a folder that holds files and is no run's."""
    import fcntl

    from services.common.outputs import check_run_folder

    check_run_folder(Path(output_dir), RUN_MARKER, "training")
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    handle = open(Path(output_dir) / RUN_MARKER, "a")  # noqa: SIM115 - held open for the whole run
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise OutputDirBusy(
            f"another training run is using {output_dir}; choose another trainer.output_dir"
        ) from None
    return handle


def resolve_resume(output_dir: Path, resume: str) -> Path | None:
    """``auto``: the newest complete checkpoint of this run (None if there is none); ``none``: start
    over, refused when the folder holds checkpoints (they would be mixed with the new run's); else the
    given folder, which must be a complete checkpoint."""
    if resume == "none":
        found = complete_checkpoints(output_dir)
        if found:
            raise ResumeMismatch(
                f"trainer.resume=none but {output_dir} holds checkpoints (newest: step {found[-1][0]}) of "
                "another run; use another trainer.output_dir, remove them, or resume=auto"
            )
        return None
    if resume == "auto":
        found = complete_checkpoints(output_dir)
        return found[-1][1] if found else None
    path = Path(resume)
    if not (path / STATE_FILE).is_file():
        raise ResumeMismatch(
            f"trainer.resume={resume}: not a complete checkpoint (no {STATE_FILE}); name a "
            "checkpoints/step_NNNNNN folder, or use trainer.resume=auto or none"
        )
    return path


def rng_state() -> dict[str, Any]:
    """Python, numpy and torch generator states as plain JSON (no pickle: a checkpoint folder must not be
    able to run code when it is resumed)."""
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": [version, list(internal), gauss],
        "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state().tolist(),
    }


def set_rng_state(states: dict[str, Any]) -> None:
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = states["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.tensor(states["torch"], dtype=torch.uint8))


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


def load_torch(path: Path) -> Any:
    """Tensors and plain containers only (``weights_only``): never code from a checkpoint."""
    return torch.load(path, weights_only=True)


def fsync_tree(folder: Path) -> None:
    """Flush every file below ``folder`` and the folders themselves (before the completion marker)."""
    for path in sorted(Path(folder).rglob("*"), reverse=True):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def read_state(folder: Path) -> dict[str, Any]:
    return json.loads((Path(folder) / STATE_FILE).read_text())


def reference_entry(folder: Path, reference: str | Path) -> str:
    """The reference weights' folder as a checkpoint at ``folder`` records it: relative to ``folder``
    when both lie under one output folder, else absolute (e.g. ``actor.model_path``)."""
    reference, folder = Path(reference).resolve(), Path(folder).resolve()
    root = folder.parent.parent  # OUTPUT_DIR/checkpoints/step_N
    if reference.is_relative_to(root):
        return os.path.relpath(reference, folder)
    return str(reference)


def reference_source(folder: Path, state: dict[str, Any], *, warm_started: bool) -> str | None:
    """The folder whose weights the resumed run's reference must load, from a checkpoint's state (None:
    ``actor.model_path``). A checkpoint that names none but belongs to a warm-started run predates this
    record: its reference cannot be rebuilt, and anchoring KL to the un-warmed model instead would
    silently change the run, so it is refused."""
    entry = state.get("reference")
    if entry is None:
        if warm_started:
            raise ResumeMismatch(
                f"{folder}: the checkpoint does not record the warm-started reference model that KL anchors "
                "to; resume from a newer checkpoint, or start over (trainer.resume=none in a new output_dir)"
            )
        return None
    path = (Path(folder) / entry).resolve()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{folder}: the reference model it names ({path}) is missing")
    return str(path)


def prune(output_dir: Path, keep: int, current: int) -> None:
    """Keep the newest ``keep`` complete checkpoints up to step ``current`` (the one just written);
    remove older ones and any incomplete leftover (a ``.step_N.tmp`` or a folder without its marker)."""
    found = [(step, folder) for step, folder in complete_checkpoints(output_dir) if step <= current]
    for _, folder in found[:-keep]:
        shutil.rmtree(folder, ignore_errors=True)
    root = Path(output_dir) / "checkpoints"
    for child in root.iterdir() if root.is_dir() else ():
        match = _STEP.match(child.name.lstrip(".").removesuffix(".tmp"))
        if match and int(match.group(1)) < current and not (child / STATE_FILE).is_file():
            shutil.rmtree(child, ignore_errors=True)


def discard_after(output_dir: Path, step: int) -> list[int]:
    """Remove complete checkpoints newer than ``step`` (resuming from an older one branches the run:
    the newer ones belong to a history that is being replaced). Returns the steps removed."""
    removed = []
    for s, folder in complete_checkpoints(output_dir):
        if s > step:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(s)
    return removed
