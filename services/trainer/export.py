"""``reelrl export CHECKPOINT OUT [--merge]``: a training checkpoint as a model others load.

- A full-tuning checkpoint (``model/``, the fp32 master weights) becomes an HF model in bf16, half the
  size, loadable by ``from_pretrained`` and vLLM.
- A LoRA checkpoint (``adapter/``, :mod:`services.trainer.lora`) becomes a peft adapter folder
  (``PeftModel.from_pretrained(base, OUT)``; vLLM's ``enable_lora``), or with ``--merge`` the base with
  every adapter merged in (W + scale · B·A in fp32, cast to bf16, the very rule the trainer's weight push
  uses), an HF model in bf16.

The output folder is written whole under a temporary name and renamed into place; an existing
``OUT`` is never overwritten."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from services.trainer import checkpoints as ckpt
from services.trainer import lora as lora_files

EXPORT_DTYPE = "bfloat16"


class ExportError(ValueError):
    """A checkpoint that cannot be exported as asked (the message says why)."""


def export_checkpoint(checkpoint: Path, out: Path, *, merge: bool = False) -> str:
    """Export ``checkpoint`` (a ``checkpoints/step_NNNNNN`` folder) into ``out``; returns what was
    written: ``"model"`` (an HF model in bf16) or ``"adapter"`` (a peft adapter folder)."""
    checkpoint, out = Path(checkpoint), Path(out)
    if not (checkpoint / ckpt.STATE_FILE).is_file():
        raise ExportError(
            f"{checkpoint}: not a complete checkpoint (no {ckpt.STATE_FILE}); name a checkpoints/step_NNNNNN folder"
        )
    from services.common.outputs import OutputTaken, check_usable

    try:  # a name the file system refuses, or under a file: refused now, not after the merge
        check_usable(out, "Choose a new output folder.")
    except OutputTaken as exc:
        raise ExportError(str(exc)) from None
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out} exists and is not an empty folder: choose a new output folder")
    model, adapter = checkpoint / ckpt.MODEL_DIR, checkpoint / ckpt.ADAPTER_DIR
    if model.is_dir():
        _export_model(model, out, lora=None, adapter=None)  # --merge: nothing to merge, the same export
        return "model"
    if not adapter.is_dir():
        raise ExportError(f"{checkpoint}: holds neither {ckpt.MODEL_DIR}/ nor {ckpt.ADAPTER_DIR}/")
    lora, base = _lora_of(checkpoint, adapter)
    if merge:
        _export_model(base, out, lora=lora, adapter=adapter)
        return "model"
    _copy_into(adapter, out)
    return "adapter"


def _lora_of(checkpoint: Path, adapter: Path) -> tuple[dict, str]:
    """The checkpoint's ``actor.lora`` (as its run recorded it) and the base model the adapters train."""
    run = ckpt.read_state(checkpoint).get("run", {})
    lora = run.get("lora")
    if not lora:
        raise ExportError(f"{checkpoint}: holds {ckpt.ADAPTER_DIR}/ but its state records no actor.lora")
    trained = run.get("model") or {}
    base = trained.get("path") or json.loads((adapter / lora_files.CONFIG_FILE).read_text()).get(
        "base_model_name_or_path"
    )
    if not base or not (Path(base) / "config.json").is_file():
        raise ExportError(
            f"{adapter}: its base model ({base}) is not there; the merge needs the model the run trained"
        )
    now = ckpt.model_identity(base)
    if trained and trained.get("config_sha256") != now["config_sha256"]:
        raise ExportError(
            f"{base} is not the model {checkpoint} was trained on (its config.json changed since); "
            "restore that model to merge the adapters into it"
        )
    return lora, base


def _export_model(source: Path | str, out: Path, *, lora: dict | None, adapter: Path | None) -> None:
    """``source`` (with ``adapter`` merged in when ``lora``) as an HF model in bf16 at ``out``: loaded
    by the trainer's own model class in fp32 and saved by its writer, which merges one tensor at a time
    in fp32 and rounds each once to bf16 (a bf16 base would round twice). Host memory: 4 bytes a
    parameter (28 GB for a 7B model)."""
    import torch

    from services.trainer.actor import PolicyModel
    from services.trainer.config import ActorConfig

    lora = dict(lora) if lora is not None else None
    # QLoRA: the base re-quantised as training loaded it (lora.run_identity), else merged in fp32
    compute = (lora or {}).pop("quantized_from", "float32")
    config = ActorConfig.model_validate(
        {"model_path": str(source), "compute_dtype": compute, "param_dtype": "float32", "lora": lora}
    )
    # trainable only so that the adapters are built (PolicyModel holds a frozen model without them);
    # nothing is stepped
    policy = PolicyModel(config, trainable=lora is not None, device="cpu", adapter=adapter)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.", dir=_parent(out)) as tmp:
        written = policy.save_pretrained(Path(tmp) / "model", dtype=getattr(torch, EXPORT_DTYPE))
        assert written is not None  # one rank: rank 0
        _move_into(written, out)


def _parent(out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    return out.parent


def _copy_into(folder: Path, out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.", dir=_parent(out)) as tmp:
        staged = Path(tmp) / "out"
        shutil.copytree(folder, staged)
        _move_into(staged, out)


def _move_into(staged: Path, out: Path) -> None:
    """``staged`` renamed to ``out`` (an empty ``out`` made by the user is replaced)."""
    if out.is_dir():
        out.rmdir()  # empty (checked before anything was written); fails rather than lose a file
    staged.rename(out)


def export_command(checkpoint: Path, out: Path, merge: bool) -> int:
    """Exit status: 0 written, 2 a checkpoint or folder that cannot be exported as asked."""
    from rich.console import Console

    from services.common.text import plain

    console = Console(stderr=True)
    try:
        with console.status(f"exporting {checkpoint}"):
            kind = export_checkpoint(checkpoint, out, merge=merge)
    except (ExportError, OSError) as exc:
        console.print(f"[red]error:[/red] {plain(exc)}", soft_wrap=True)
        return 2
    what = "peft adapter folder" if kind == "adapter" else f"HF model ({EXPORT_DTYPE})"
    console.print(f"wrote {what}: {plain(out)}")
    return 0
