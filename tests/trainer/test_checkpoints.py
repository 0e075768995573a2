"""Checkpoint folders: completion markers, pruning that never removes what was just written, resume
rules, the output-folder lock, and RNG states as plain JSON (no pickle)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from services.trainer import checkpoints as ckpt

ROOT = Path(__file__).resolve().parents[2]


def _complete(out: Path, step: int) -> Path:
    folder = ckpt.checkpoint_dir(out, step)
    folder.mkdir(parents=True)
    ckpt.write_state(folder, {"step": step})
    return folder


def test_prune_keeps_what_was_just_written(tmp_path: Path) -> None:
    for step in (90, 100):
        _complete(tmp_path, step)
    ckpt.discard_after(tmp_path, 4)  # a run resuming from before them replaces that history
    _complete(tmp_path, 5)
    leftover = tmp_path / "checkpoints" / ".step_000003.tmp"
    leftover.mkdir()
    ckpt.prune(tmp_path, keep=2, current=5)
    assert [s for s, _ in ckpt.complete_checkpoints(tmp_path)] == [5]
    assert not leftover.exists()
    for step in (6, 7):
        _complete(tmp_path, step)
        ckpt.prune(tmp_path, keep=2, current=step)
    assert [s for s, _ in ckpt.complete_checkpoints(tmp_path)] == [6, 7]


def test_resume_rules(tmp_path: Path) -> None:
    assert ckpt.resolve_resume(tmp_path, "auto") is None
    assert ckpt.resolve_resume(tmp_path, "none") is None
    (ckpt.checkpoint_dir(tmp_path, 3)).mkdir(parents=True)  # incomplete: no state.json
    assert ckpt.resolve_resume(tmp_path, "auto") is None
    folder = _complete(tmp_path, 2)
    assert ckpt.resolve_resume(tmp_path, "auto") == folder
    with pytest.raises(ckpt.ResumeMismatch, match="holds checkpoints"):
        ckpt.resolve_resume(tmp_path, "none")
    with pytest.raises(ckpt.ResumeMismatch, match="not a complete checkpoint"):
        ckpt.resolve_resume(tmp_path, str(ckpt.checkpoint_dir(tmp_path, 3)))


def test_one_run_per_output_folder(tmp_path: Path) -> None:
    held = ckpt.lock_output_dir(tmp_path)
    with pytest.raises(ckpt.OutputDirBusy, match="another training run"):
        ckpt.lock_output_dir(tmp_path)
    held.close()
    ckpt.lock_output_dir(tmp_path).close()


def test_rng_state_round_trips_as_json() -> None:
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    state = json.loads(json.dumps(ckpt.rng_state()))  # what state.json holds
    expected = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    random.seed(9)
    np.random.seed(9)
    torch.manual_seed(9)
    ckpt.set_rng_state(state)
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expected


def test_optimizer_files_load_without_code(tmp_path: Path) -> None:
    path = tmp_path / "optim_rank0.pt"
    ckpt.save_torch(path, {"state": {0: {"step": torch.tensor(3.0)}}, "param_groups": [{"lr": 0.1}]})
    assert ckpt.load_torch(path)["param_groups"][0]["lr"] == 0.1

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    torch.save({"x": Evil()}, path)
    with pytest.raises(Exception, match="Weights only load failed"):
        ckpt.load_torch(path)


def test_resume_refuses_another_model_before_recording_it(tmp_path: Path) -> None:
    """``trainer.resume=<run A's checkpoint> actor.model_path=<model B>`` trained A's model and wrote B
    into config.yaml; now `reelrl train` exits 2 naming both, and writes nothing."""
    models = {}
    for name, layers in (("a", 2), ("b", 4)):
        models[name] = tmp_path / f"model-{name}"
        models[name].mkdir()
        config = {"model_type": "qwen2_5_vl", "num_hidden_layers": layers, "_name_or_path": "x"}
        (models[name] / "config.json").write_text(json.dumps(config))
    folder = ckpt.checkpoint_dir(tmp_path / "run-a", 1)
    folder.mkdir(parents=True)
    ckpt.write_state(folder, {"step": 1, "run": {"model": ckpt.model_identity(models["a"])}})
    # the same model (another save's _name_or_path and library version) is the same model
    same = json.loads((models["a"] / "config.json").read_text()) | {"_name_or_path": "y"}
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "config.json").write_text(json.dumps(same, indent=4))
    assert (
        ckpt.model_identity(tmp_path / "copy")["config_sha256"]
        == ckpt.model_identity(models["a"])["config_sha256"]
    )
    ckpt.check_resume_model(folder, models["a"])
    with pytest.raises(ckpt.ResumeMismatch, match="differs in path"):
        ckpt.check_resume_model(folder, tmp_path / "copy")  # a moved copy: set the path it trained

    out = tmp_path / "run-b"
    args = [
        sys.executable, "-m", "services.cli", "train", str(ROOT / "examples" / "tiny_cpu.yaml"),
        f"actor.model_path={models['b']}", f"trainer.resume={folder}", f"trainer.output_dir={out}",
        "trainer.loggers=[jsonl]",
    ]  # fmt: skip
    env = {**os.environ, "REELRL_HOME": str(tmp_path / "home")}
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    text = " ".join(done.stderr.split())
    assert f"it trains {models['a']} (qwen2_5_vl), not actor.model_path={models['b']}" in text
    assert "differs in path, config_sha256" in text and f"set actor.model_path={models['a']}" in text
    assert "Traceback" not in done.stderr and not (out / "config.yaml").exists()
