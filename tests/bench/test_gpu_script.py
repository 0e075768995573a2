"""bench/gpu/run.sh --dry-run on CPU: the GPU script's code path (the trainer's half of a step, then the
colocated cycle and the driver engine) with the tiny model, so it cannot rot while no GPU is lent; the
pure parts of its figures against hand-computed values; its results file and wheel list."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench.gpu.actor_steps import bf16_master_step, device_seconds, moved, shares
from bench.gpu.results import ENVIRONMENT_KEY, LOAD_KEY, merge
from bench.results import is_busy
from services.rollout.colocated import HAND_BACK, TAKE_BACK

ROOT = Path(__file__).resolve().parents[2]
ENGINE_KEYS = ("tokens_per_s", "update_s", "sleep_s", "wake_s", "sync_s", "step_s", "peak_memory_gib")
ACTOR_KEYS = (
    "logprob_s", "logprob_tokens_per_s", "update_s", "update_tokens_per_s", "update_peak_memory_gib",
    "update_peak_reserved_gib", "moved_fp32_master", "moved_bf16_copy", "moved_bf16_master",
    "stream_buckets", "stream_bucketed_s", "stream_bucketed_peak_extra_gib", "stream_packed_s",
    "stream_packed_peak_extra_gib", "state_dict_full_s", "state_dict_full_peak_extra_gib", "step_s",
    "tokens", "params_b", "steps", "vision_forward_s", "vision_forward_device_s", "vision_attention_calls",
    "offload_params_gib", "offload_grads_gib", "offload_optimizer_gib", "offload_device_freed_gib",
    "offload_reloaded_gib",
    # packed (the steps) against padded (--padded-steps): model FLOPs over each layout's time
    "logprob_tflops", "logprob_mfu", "update_tflops", "update_mfu", "logprob_s_padded", "logprob_mfu_padded",
    "update_s_padded", "update_mfu_padded", "update_peak_memory_gib_padded", "vision_attention_calls_padded",
    "micro_batch_tokens", "offload_optimizer", "peak_tflops",
)  # fmt: skip


LORA_KEYS = (
    "logprob_s", "update_s", "update_tokens_per_s", "update_peak_memory_gib", "resident_gib",
    "trainable_params_m", "params_b",
)  # fmt: skip


@pytest.mark.integration
@pytest.mark.slow
def test_the_gpu_script_dry_run_writes_every_figure(tmp_path: Path) -> None:
    results = tmp_path / "gpu_results.json"
    env = {**os.environ, "PYTHON": sys.executable, "RESULTS": str(results)}
    env.pop("OUT", None)
    env.pop("WHEELS", None)
    done = subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu" / "run.sh"), "--dry-run"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    figures = json.loads(results.read_text())
    expected = {f"gpu_{mode}_{key}" for mode in ("colocated", "driver") for key in ENGINE_KEYS}
    # the colocated cycle's phases (the loop's own code path), each with the device memory it left
    phases = [f"gpu_colocated_memory_after_{p}_gib" for p in (*HAND_BACK, *TAKE_BACK)]
    expected |= set(phases)
    expected |= {f"gpu_actor_{key}" for key in ACTOR_KEYS}
    expected |= {f"gpu_lora_{key}" for key in LORA_KEYS}
    assert set(figures) == expected | {"gpu_engine_cycle_ran", ENVIRONMENT_KEY, LOAD_KEY}
    assert figures["gpu_engine_cycle_ran"] == 1  # vLLM imports here, so the engine cycle ran
    assert figures["gpu_colocated_tokens_per_s"] > 0 and figures["gpu_driver_tokens_per_s"] > 0
    assert figures["gpu_colocated_sync_s"] > 0 and figures["gpu_driver_sync_s"] > 0
    assert all(figures[key] == 0 for key in phases)  # the CPU: host and device are one memory
    order = [
        line.split("after ")[1].split(":")[0]
        for line in done.stdout.splitlines()
        if "[colocated] after" in line
    ]
    assert order == [*HAND_BACK, *TAKE_BACK] * 3  # the cycle's order, each of the 3 steps
    assert figures["gpu_actor_steps"] == 3 and figures["gpu_actor_update_tokens_per_s"] > 0
    # the LoRA steps train a small share of the same model
    assert figures["gpu_lora_params_b"] > figures["gpu_actor_params_b"]  # the adapters come on top
    # (rank 64 on the tiny model's width of 128 is a large share; on the 3B, rank 64 is ~3 %)
    assert 0 < figures["gpu_lora_trainable_params_m"] < 1e3 * figures["gpu_actor_params_b"]
    assert figures["gpu_lora_update_tokens_per_s"] > 0
    assert figures["gpu_actor_step_s"] > figures["gpu_actor_update_s"]
    # the fp32 master moves nearly every element a step; the tiny model's weights are drawn with std
    # 0.02, where bf16 rounds an lr 1e-6 step away, so a bf16 master moves only the few near zero
    assert figures["gpu_actor_moved_fp32_master"] > 0.5
    assert figures["gpu_actor_moved_bf16_master"] < 0.1 * figures["gpu_actor_moved_fp32_master"]
    # on the CPU SDPA runs once per window and layer (the one-call kernel is a GPU's): the tiny tower has
    # 2 layers, one of them windowed
    assert figures["gpu_actor_vision_attention_calls"] > 2 and figures["gpu_actor_vision_forward_s"] > 0
    assert figures["gpu_actor_stream_buckets"] >= 1 and figures["gpu_actor_stream_bucketed_s"] > 0
    # the offload parks the fp32 weights and AdamW's two moments, and all of it comes back
    parked = figures["gpu_actor_offload_params_gib"] + figures["gpu_actor_offload_optimizer_gib"]
    assert figures["gpu_actor_offload_optimizer_gib"] >= 1.9 * figures["gpu_actor_offload_params_gib"] > 0
    assert figures["gpu_actor_offload_reloaded_gib"] == pytest.approx(
        parked + figures["gpu_actor_offload_grads_gib"]
    )
    assert figures["gpu_actor_offload_device_freed_gib"] == 0  # the CPU: host and device are one memory
    # the same model FLOPs over each pass's time; no peak is known for a CPU, so no MFU
    assert figures["gpu_actor_logprob_tflops"] > 0 and figures["gpu_actor_update_tflops"] > 0
    assert all(
        math.isnan(figures[f"gpu_actor_{k}"]) for k in ("update_mfu", "logprob_mfu", "update_mfu_padded")
    )
    # the padded layout's tower counted too; on a CPU both layouts run SDPA once per window (the
    # one-call kernel is a GPU's), so the counts agree here
    assert figures["gpu_actor_vision_attention_calls_padded"] == figures["gpu_actor_vision_attention_calls"]
    assert figures["gpu_actor_update_s_padded"] > 0 and figures["gpu_actor_micro_batch_tokens"] == 16384
    assert set(figures[LOAD_KEY]) == {"start", "end"}
    assert figures[ENVIRONMENT_KEY]["device"] == "cpu" and figures[ENVIRONMENT_KEY]["torch"]


def test_bf16_master_rounds_small_updates_away() -> None:
    # 0.02 is stored as 164·2^-13 (spacing 2^-13): +1e-6 rounds back; 1e-4 as 210·2^-21: +1e-6 → 212·2^-21
    master = torch.tensor([0.02, 1e-4]).to(torch.bfloat16)
    assert master.float().tolist() == [164 * 2**-13, 210 * 2**-21]
    stepped = bf16_master_step(master, torch.tensor([1e-6, 1e-6]))
    assert stepped.dtype == torch.bfloat16
    assert stepped.float().tolist() == [164 * 2**-13, 212 * 2**-21]
    assert moved(master, stepped) == 1


def test_device_seconds_count_each_kernel_once() -> None:
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    def event(device: DeviceType, us: float, annotation: bool = False) -> SimpleNamespace:
        return SimpleNamespace(device_type=device, self_device_time_total=us, is_user_annotation=annotation)

    # aten::addmm carries its kernel's 60 us as its own device time; the kernel's entry is the one counted
    events = [event(DeviceType.CPU, 60.0), event(DeviceType.CUDA, 60.0), event(DeviceType.CUDA, 15.0),
              event(DeviceType.CUDA, 500.0, annotation=True)]  # fmt: skip
    assert device_seconds(events) == 75e-6


def test_moved_and_shares_count_elements() -> None:
    assert moved(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 5.0, 3.0])) == 1
    assert shares({"a": 1, "b": 3}, 4) == {"a": 0.25, "b": 0.75}


def load(load1: float, cores: int = 2, busy: list | None = None) -> dict:
    return {"load1": load1, "load5": 0.0, "load15": 0.0, "cores": cores, "busy_processes": busy or []}


def test_busy_load_scales_with_the_cores() -> None:
    assert is_busy(load(0.8), at_start=True) and not is_busy(load(0.6), at_start=True)
    assert not is_busy(load(5.0, cores=16), at_start=True) and is_busy(load(6.0, cores=16), at_start=True)
    assert not is_busy(load(9.0), at_start=False)  # at the end only other processes count
    assert is_busy(load(0.1, busy=[{"pid": 1, "cpu_percent": 90.0, "command": "x"}]), at_start=False)


def test_merge_replaces_the_last_gpu_run_and_refuses_busy_or_partial_files(tmp_path: Path) -> None:
    into = tmp_path / "results.json"
    into.write_text(json.dumps({"other": 1.0, "gpu_driver_step_s": 9.0, "gpu_actor_update_s": 9.0}))
    run = tmp_path / "gpu.json"
    record = {"start": load(0.2, cores=16), "end": load(0.1, cores=16)}
    run.write_text(json.dumps({"gpu_actor_update_s": 2.5, "gpu_engine_cycle_ran": 0, LOAD_KEY: record,
                               ENVIRONMENT_KEY: {"device": "NVIDIA H200"}}))  # fmt: skip
    merged = merge(run, into)
    on_disk = json.loads(into.read_text())
    assert on_disk == merged
    assert on_disk["other"] == 1.0 and "gpu_driver_step_s" not in on_disk  # the old run's figure is gone
    assert on_disk["gpu_actor_update_s"] == 2.5 and on_disk[ENVIRONMENT_KEY]["device"] == "NVIDIA H200"
    assert on_disk[LOAD_KEY]["figures"] == ["gpu_actor_update_s", "gpu_engine_cycle_ran"]

    gpu = {ENVIRONMENT_KEY: {"device": "NVIDIA H200"}}
    refused = {
        "busy": {LOAD_KEY: {"start": load(7.0, cores=16), "end": record["end"]}, **gpu},
        "no load record at both ends": {LOAD_KEY: {"start": record["start"]}, **gpu},
        "not taken on a GPU": {LOAD_KEY: record, ENVIRONMENT_KEY: {"device": "cpu"}},
        "did not run it": {LOAD_KEY: record, **gpu, "gpu_engine_cycle_ran": 0, "gpu_driver_step_s": 1.0},
    }
    for reason, extra in refused.items():
        run.write_text(json.dumps({"gpu_actor_update_s": 1.0, **extra}))
        with pytest.raises(SystemExit, match=reason):
            merge(run, into)
    assert json.loads(into.read_text())["gpu_actor_update_s"] == 2.5  # nothing written by a refusal


def test_every_wheel_the_device_needs_is_pinned_in_the_lock() -> None:
    def key(name: str) -> str:
        return name.strip().lower().replace("_", "-")

    lock = {key(line.split("==")[0]) for line in (ROOT / "requirements" / "cpu-lock.txt").read_text().splitlines()
            if "==" in line and not line.startswith("#")}  # fmt: skip
    names = [key(n) for n in (ROOT / "bench" / "gpu" / "wheels.txt").read_text().splitlines()
             if n.strip() and not n.startswith("#")]  # fmt: skip
    assert names and len(names) == len(set(names))
    assert [n for n in names if n not in lock] == []


# Every module bench/gpu/run.sh imports on the way to its figures (the engine cycle aside: it needs vLLM,
# which a machine without it skips by name).
GPU_SCRIPT_MODULES = (
    "bench.gpu.build_model", "bench.gpu.actor_steps", "bench.gpu.lora_steps", "bench.gpu.results",
    "services.trainer.actor", "services.trainer.lora", "peft",
    "services.trainer.algorithms", "services.trainer.batch", "services.trainer.config",
    "services.trainer.update", "services.trainer.weight_buckets", "services.rollout.weight_group",
    "services.rollout.config", "services.rollout.consistency", "services.rollout.media",
    "services.rollout.prompts", "services.rollout.samples", "services.common.tiny_models",
    "services.common.tiny_models.qwen_bpe",
)  # fmt: skip
ONLY_LISTED = r"""
import importlib.abc, importlib.metadata, importlib.util, sys
allowed = set(sys.argv[1].split(","))
owners = importlib.metadata.packages_distributions()

def permitted(name):
    top = name.split(".")[0]
    dists = owners.get(top)
    return not dists or top in ("services", "bench") or any(d.lower().replace("_", "-") in allowed for d in dists)

class OnlyListed(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if not permitted(name):
            raise ImportError(f"{name.split('.')[0]} ({', '.join(owners[name.split('.')[0]])}) is in neither bench/gpu list")
        return None

# transformers asks importlib.util.find_spec whether an optional package is there: answer as a machine
# without it would (None); an actual import of one fails above
real_find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, package=None: real_find_spec(name, package) if permitted(name) else None
sys.meta_path.insert(0, OnlyListed())
import importlib, tempfile
from pathlib import Path
for module in sys.argv[2].split(","):
    importlib.import_module(module)
# what runs lazily on the way: the checkpoint's build and its processor making a video prompt
from transformers import AutoProcessor
from bench.gpu.actor_steps import video_prompts
from services.common.tiny_models import build_tiny_model
model = build_tiny_model("qwen2_5_vl", Path(tempfile.mkdtemp()) / "model")
(prompt,) = video_prompts(AutoProcessor.from_pretrained(model), prompts=1, frames=2, side=56, seed=0)
print("imported", len(sys.argv[2].split(",")), "prompt", len(prompt.input_ids) > 0)
"""


def listed(name: str) -> set[str]:
    lines = (ROOT / "bench" / "gpu" / name).read_text().splitlines()
    return {n.strip().lower().replace("_", "-") for n in lines if n.strip() and not n.startswith("#")}


def test_the_gpu_script_imports_only_the_base_image_and_its_wheels() -> None:
    allowed = listed("base_image.txt") | listed("wheels.txt")
    done = subprocess.run(
        [sys.executable, "-c", ONLY_LISTED, ",".join(sorted(allowed)), ",".join(GPU_SCRIPT_MODULES)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == f"imported {len(GPU_SCRIPT_MODULES)} prompt True"
