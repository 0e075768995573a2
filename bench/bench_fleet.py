"""Rollout fleet benchmark: tokens/s of one batch on 2 engines ÷ on 1, side by side in one run, on a tiny
Qwen2.5-VL checkpoint (CPU), beside the machine's own 2-process ceiling.

    $VENV/bin/python -m bench.bench_fleet [--prompts 64] [--small-prompts 16] [--n 8] [--max-tokens 64]
                                          [--repeats 5]

One engine is one share of the machine, as one GPU is on a cluster: on these 2 cores, one core.

- disaggregated (the headline): each engine is a Ray actor (``RayRolloutEngine``) whose slot pins the
  actor (it prepares every request and reads every output) and vLLM's engine core and worker to one
  core: engine A to core 0, B to core 1. "1 engine" is A alone, "2 engines" the fleet of A and B
  splitting the same batch.
- driver (printed and recorded beside): both engines in this process (placement ``driver``): each
  worker on its own core, their frontends in this one process, which floats; so does each engine
  core. One engine alone then also uses the other core for its frontend and scheduler, which is why
  this layout cannot show the fleet's scaling on 2 cores.

Two batches: the headline one, ``--prompts`` × ``--n`` sequences (512 by default), is twice what one
engine runs at once (vLLM's ``max_num_seqs``: 256 on the CPU, 1,024 on an H200), as an RL step's batch
is at scale (the seed: 2,048 responses a step); the small one (``--small-prompts`` × ``--n``, 128) fits
in one engine's single wave, where the tiny model's decode step costs nearly the same at any width.

Groups are balanced by estimated tokens and requests are seeded, so every side samples the same tokens
(asserted). Responses have a fixed length (``ignore_eos``); the sides alternate, so drift on a shared
machine hits both; medians of ``--repeats``.

  rollout_fleet_scaling_2e          tokens/s with 2 engines ÷ with 1 (disaggregated, one core each)
  rollout_fleet_tokens_per_s_1e     tokens/s of one engine on one core (the worked estimate's figure)
  rollout_fleet_tokens_per_s_2e     tokens/s of the 2-engine fleet on two cores
  rollout_fleet_scaling_2e_small    the same ratio for the small batch (one engine's single wave)
  rollout_fleet_scaling_2e_driver   the headline batch with both engines in this process (driver)
  rollout_fleet_machine_ceiling_2p  pure-CPU 2-process speedup measured around the runs (the ceiling)
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.frame_store import machine_parallelism
from bench.results import LoadWatch, add_load_argument, record
from services.common.frames import FrameStore
from services.common.tiny_models import build_tiny_model
from services.reward.config import RewardConfig
from services.rollout.config import EngineConfig, RolloutConfig
from services.rollout.engine import RolloutEngine
from services.rollout.environment import core_share
from services.rollout.fleet import Fleet
from services.rollout.samples import RolloutSample
from services.rollout.seeds import SeedKey

FAMILY = "qwen2_5_vl"
Runs = dict[int, list[tuple[float, int]]]
Batch = list[RolloutSample]


def timed(fleet: Fleet, samples: list[RolloutSample], step: int, max_tokens: int) -> tuple[float, int]:
    """Seconds and tokens for one batch on ``fleet``, its engines' caches emptied first."""
    for member in fleet.members:
        member.engine.reset_caches()
    started = time.perf_counter()
    groups = fleet.rollout(
        samples, key=SeedKey(step), prompt_tokens=[len(s.prompt.split()) for s in samples],
        max_tokens=max_tokens, ignore_eos=True,
    )  # fmt: skip
    return time.perf_counter() - started, sum(len(r.token_ids) for g in groups for r in g.responses)


def compare(a: Any, b: Any, batches: list[Batch], args: argparse.Namespace) -> list[Runs]:
    """For each batch, alternating runs on engine ``a`` alone and on the fleet of ``a`` and ``b``."""
    one = Fleet([a], max_tokens=args.max_tokens, n=args.n)
    two = Fleet([a, b], max_tokens=args.max_tokens, n=args.n)
    out = []
    for samples in batches:
        timed(one, samples, 0, args.max_tokens)  # warm-up of both engines
        timed(two, samples, 0, args.max_tokens)
        runs: Runs = {1: [], 2: []}
        for repeat in range(1, args.repeats + 1):
            runs[1].append(timed(one, samples, repeat, args.max_tokens))
            runs[2].append(timed(two, samples, repeat, args.max_tokens))
        out.append(runs)
    return out


def with_two(start: Callable[[int], Any], use: Callable[[Any, Any], list[Runs]]) -> list[Runs]:
    """``use(a, b)`` on two engines ``start(0)`` and ``start(1)``, both stopped after."""
    engines: list[Any] = []
    try:
        engines.append(start(0))
        engines.append(start(1))
        return use(*engines)
    finally:
        for engine in engines:
            engine.shutdown()


def disaggregated(model: Path, config: RolloutConfig, frames: Path, batches, args) -> list[Runs]:
    import ray

    from services.trainer.ray_rollout import RayRolloutEngine

    engine = config.engine.model_copy(
        update={"in_process": {"auto": None, "true": True, "false": False}[args.in_process]}
    )
    config = config.model_copy(update={"engine": engine})

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:

        def start(index: int) -> RayRolloutEngine:
            engine = RayRolloutEngine(
                str(model), config, source=FrameStore(frames), reward=RewardConfig(), cpus=1.0,
                cpu_slot=(index, 2),
            )  # fmt: skip
            print(f"engine {index}: cores {engine.affinity()}", flush=True)
            return engine

        return with_two(start, lambda a, b: compare(a, b, batches, args))
    finally:
        ray.shutdown()


def driver(model: Path, config: RolloutConfig, frames: Path, batches, args) -> list[Runs]:
    cores = sorted(os.sched_getaffinity(0))

    def start(index: int) -> RolloutEngine:
        # each worker on its half of the cores, as the disaggregated side's slots split them
        return RolloutEngine(model, config, source=FrameStore(frames), cpu_cores=core_share(cores, index, 2))

    return with_two(start, lambda a, b: compare(a, b, batches, args))


def batch(prompts: int) -> Batch:
    # prompts of different lengths, so the split has something to balance
    return [
        RolloutSample(id=f"p{i}", prompt=" ".join(["describe the moving square"] * (4 + 3 * (i % 5))))
        for i in range(prompts)
    ]


def tokens_per_s(label: str, runs: Runs) -> dict[int, float]:
    print(label, flush=True)
    for engines, seen in runs.items():
        print(f"  {engines} engine(s): {', '.join(f'{s:.2f}' for s, _ in seen)} s", flush=True)
    tokens = runs[1][0][1]
    assert all(t == tokens for _, t in runs[1] + runs[2]), "both sides must generate the same tokens"
    per_s = {k: tokens / statistics.median(s for s, _ in v) for k, v in runs.items()}
    print(f"  {tokens} tokens: 1 engine {per_s[1]:.1f} tokens/s | 2 engines {per_s[2]:.1f} → "
          f"{per_s[2] / per_s[1]:.2f}x", flush=True)  # fmt: skip
    return per_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--small-prompts", type=int, default=16)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--in-process", choices=("auto", "true", "false"), default="auto",
        help="the disaggregated engines' engine.in_process (auto: in the actor's process on the CPU, "
        "as the trainer runs them)",
    )  # fmt: skip
    add_load_argument(parser)
    args = parser.parse_args()
    watch = LoadWatch.begin("bench_fleet", args.allow_load)

    config = RolloutConfig(
        n=args.n, max_tokens=args.max_tokens,
        engine=EngineConfig(dtype="float32", max_model_len=2048, kv_cache_gib=0.5),
    )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        root = Path(tmp)
        model = build_tiny_model(FAMILY, root / "model", seed=0)
        ceiling_before = machine_parallelism()
        big, small = disaggregated(
            model, config, root / "frames", [batch(args.prompts), batch(args.small_prompts)], args
        )
        (on_driver,) = driver(model, config, root / "frames", [batch(args.prompts)], args)
        ceiling = (ceiling_before + machine_parallelism()) / 2

    print()
    per_s = tokens_per_s(f"disaggregated, one core an engine, {args.prompts} prompts x n={args.n}:", big)
    small_per_s = tokens_per_s(f"the same, {args.small_prompts} prompts x n={args.n}:", small)
    driver_per_s = tokens_per_s(f"driver (frontends in this process), {args.prompts} prompts:", on_driver)
    print(f"machine ceiling: 2 processes of pure CPU work run {ceiling:.2f}x as fast as 1 (ideal 2.00)")
    record(
        {
            "rollout_fleet_scaling_2e": round(per_s[2] / per_s[1], 3),
            "rollout_fleet_tokens_per_s_1e": round(per_s[1], 1),
            "rollout_fleet_tokens_per_s_2e": round(per_s[2], 1),
            "rollout_fleet_scaling_2e_small": round(small_per_s[2] / small_per_s[1], 3),
            "rollout_fleet_scaling_2e_driver": round(driver_per_s[2] / driver_per_s[1], 3),
            "rollout_fleet_tokens_per_s_1e_driver": round(driver_per_s[1], 1),
            "rollout_fleet_tokens_per_s_2e_driver": round(driver_per_s[2], 1),
            "rollout_fleet_machine_ceiling_2p": round(ceiling, 2),
        },
        watch,
    )


if __name__ == "__main__":
    main()
