"""Rollout fleet benchmark: tokens/s of one batch on 2 engines ÷ on 1, side by side in one run, on a tiny
Qwen2.5-VL checkpoint (CPU), beside the machine's own 2-process ceiling.

    $VENV/bin/python -m bench.bench_fleet [--prompts 16] [--n 4] [--max-tokens 64] [--repeats 3]

Engine A's vLLM worker is pinned to core 0 and engine B's to core 1 (``VLLM_CPU_OMP_THREADS_BIND``),
so "1 engine" is one core's worth of generation and "2 engines" is the fleet this issue adds, splitting
the same batch (groups balanced by estimated tokens, requests seeded, so both sides sample the same
tokens). Responses have a fixed length (``ignore_eos``); the two sides alternate, so drift on a shared
machine hits both.

  rollout_fleet_scaling_2e        tokens/s with 2 engines ÷ with 1 (same batch)
  rollout_fleet_tokens_per_s_1e   tokens/s of one engine (the per-engine figure of the worked estimate)
  rollout_fleet_tokens_per_s_2e   tokens/s of the 2-engine fleet
  rollout_fleet_machine_ceiling_2p  pure-CPU 2-process speedup measured around the runs (the ceiling)
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.frame_store import machine_parallelism
from bench.results import LoadWatch, add_load_argument, record
from services.common.frames import FrameStore
from services.common.tiny_models import build_tiny_model
from services.rollout.config import EngineConfig, RolloutConfig
from services.rollout.engine import RolloutEngine
from services.rollout.fleet import Fleet
from services.rollout.samples import RolloutSample
from services.rollout.seeds import SeedKey

FAMILY = "qwen2_5_vl"


def start_engine(model: Path, config: RolloutConfig, store: FrameStore, core: int) -> RolloutEngine:
    # read by the engine's worker process when it starts (services.rollout.environment uncaches it)
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = str(core)
    try:
        return RolloutEngine(model, config, source=store)
    finally:
        os.environ.pop("VLLM_CPU_OMP_THREADS_BIND", None)


def timed(fleet: Fleet, samples: list[RolloutSample], step: int, max_tokens: int) -> tuple[float, int]:
    for member in fleet.members:
        member.engine.reset_caches()
    started = time.perf_counter()
    groups = fleet.rollout(
        samples, key=SeedKey(step), prompt_tokens=[len(s.prompt.split()) for s in samples],
        max_tokens=max_tokens, ignore_eos=True,
    )  # fmt: skip
    return time.perf_counter() - started, sum(len(r.token_ids) for g in groups for r in g.responses)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    add_load_argument(parser)
    args = parser.parse_args()
    watch = LoadWatch.begin("bench_fleet", args.allow_load)

    config = RolloutConfig(
        n=args.n, max_tokens=args.max_tokens,
        engine=EngineConfig(dtype="float32", max_model_len=2048, kv_cache_gib=0.5),
    )  # fmt: skip
    # prompts of different lengths, so the split has something to balance
    samples = [
        RolloutSample(id=f"p{i}", prompt=" ".join(["describe the moving square"] * (4 + 3 * (i % 5))))
        for i in range(args.prompts)
    ]
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        root = Path(tmp)
        model = build_tiny_model(FAMILY, root / "model", seed=0)
        store = FrameStore(root / "frames")
        ceiling_before = machine_parallelism()
        a = start_engine(model, config, store, core=0)
        b = None
        try:
            b = start_engine(model, config, store, core=1)
            one = Fleet([a], max_tokens=args.max_tokens, n=args.n)
            two = Fleet([a, b], max_tokens=args.max_tokens, n=args.n)
            timed(one, samples, 0, args.max_tokens)  # warm-up of both engines
            timed(two, samples, 0, args.max_tokens)
            runs: dict[int, list[tuple[float, int]]] = {1: [], 2: []}
            for repeat in range(1, args.repeats + 1):
                runs[1].append(timed(one, samples, repeat, args.max_tokens))
                runs[2].append(timed(two, samples, repeat, args.max_tokens))
        finally:
            for engine in (a, b):
                if engine is not None:
                    engine.shutdown()
        ceiling = (ceiling_before + machine_parallelism()) / 2

    tokens = runs[1][0][1]
    assert all(t == tokens for _, t in runs[1] + runs[2]), "both sides must generate the same tokens"
    per_s = {k: tokens / statistics.median(s for s, _ in v) for k, v in runs.items()}
    scaling = per_s[2] / per_s[1]
    print(f"\nbatch: {args.prompts} prompts × n={args.n} × {args.max_tokens} tokens = {tokens} tokens")
    print(f"1 engine: {per_s[1]:.1f} tokens/s | 2 engines: {per_s[2]:.1f} tokens/s → {scaling:.2f}x")
    print(f"machine ceiling: 2 processes of pure CPU work run {ceiling:.2f}x as fast as 1 (ideal 2.00)")
    record(
        {
            "rollout_fleet_scaling_2e": round(scaling, 3),
            "rollout_fleet_tokens_per_s_1e": round(per_s[1], 1),
            "rollout_fleet_tokens_per_s_2e": round(per_s[2], 1),
            "rollout_fleet_machine_ceiling_2p": round(ceiling, 2),
        },
        watch,
    )


if __name__ == "__main__":
    main()
