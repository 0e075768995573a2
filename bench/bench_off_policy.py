"""Generation beside the update: step wall time with ``trainer.off_policy_steps: 0`` ÷ with ``1``, side by
side in one run, through the real loop (tiny Qwen2.5-VL on the CPU, one actor rank and one
disaggregated engine, each a Ray actor).

    $VENV/bin/python -m bench.bench_off_policy [--work DIR] [--steps 8] [--repeats 2] [--max-tokens 48]

On-policy, a step is generation, then rewards, log-probs and the update, then the push; one step
off-policy, the engine generates the next batch during the update, so a step costs about the longer of
the two. The runs alternate (0, 1, 0, 1, ...), so drift hits both settings; each run's figure is its
training wall time per step over the steps after the second (``perf/train_s``): step 1 generates
on-policy in both, and the engine's first batches of new shapes are slower (warm-up). Medians over
``--repeats`` runs of each.

  off_policy_step_speedup        seconds per step on-policy ÷ one step off-policy
  off_policy_step_s_0            seconds per step, off_policy_steps 0
  off_policy_step_s_1            seconds per step, off_policy_steps 1
  off_policy_gen_share_0         share of an on-policy step spent generating (the most overlap can save)
  off_policy_step_speedup_oversubscribed   the same ratio when the rank keeps every core's thread
                                 (trainer.torch_threads = the cores) instead of leaving the engine's
                                 core to it (ray_group.rank_threads): why the rank's share counts it
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

from bench.bench_learning import CONFIG, prepare, run_train
from bench.results import LoadWatch, add_load_argument, record

WARM_STEPS = 2  # step 1 generates on-policy either way; the engine warms up over the first batches


def seconds_per_step(rows: list[dict]) -> float:
    """Training wall seconds per step after the warm-up steps."""
    steps = {r["step"]: r for r in rows if r.get("step", 0) >= WARM_STEPS and "perf/train_s" in r}
    first, last = min(steps), max(steps)
    return (steps[last]["perf/train_s"] - steps[first]["perf/train_s"]) / (last - first)


def gen_share(rows: list[dict]) -> float:
    timed = [r for r in rows if r.get("step", 0) > WARM_STEPS and "timing/gen_s" in r]
    return statistics.mean(r["timing/gen_s"] / r["timing/step_s"] for r in timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/reelrl-bench-off-policy"))
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=48)
    add_load_argument(parser)
    args = parser.parse_args()
    watch = LoadWatch.begin("bench_off_policy", args.allow_load)
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    prepare(work)
    common = [
        f"trainer.total_steps={args.steps}", "trainer.val_before_train=false", "data.val_files=[]",
        "trainer.save_freq=0", "trainer.use_ray=true", "rollout.placement=disaggregated",
        f"rollout.max_tokens={args.max_tokens}", "actor.world_size=1",
    ]  # fmt: skip
    variants = {
        "lag0": ["trainer.off_policy_steps=0"],
        "lag1": ["trainer.off_policy_steps=1"],
        "lag1-oversubscribed": ["trainer.off_policy_steps=1", f"trainer.torch_threads={os.cpu_count()}"],
    }
    per_step: dict[str, list[float]] = {name: [] for name in variants}
    shares: list[float] = []
    for repeat in range(args.repeats):
        for name, extra in variants.items():
            rows = run_train(CONFIG, [*common, *extra], work, f"{name}-{repeat}")
            per_step[name].append(seconds_per_step(rows))
            if name == "lag0":
                shares.append(gen_share(rows))
            print(f"{name} run {repeat + 1}: {per_step[name][-1]:.2f} s a step", flush=True)
    on, off, over = (statistics.median(per_step[n]) for n in variants)
    print(f"\non-policy {on:.2f} s a step, one step off-policy {off:.2f} s: {on / off:.2f}x")
    print(f"one step off-policy with the rank on every core: {over:.2f} s: {on / over:.2f}x")
    record(
        {
            "off_policy_step_speedup": round(on / off, 3),
            "off_policy_step_s_0": round(on, 3),
            "off_policy_step_s_1": round(off, 3),
            "off_policy_gen_share_0": round(statistics.mean(shares), 3),
            "off_policy_step_speedup_oversubscribed": round(on / over, 3),
        },
        watch,
    )


if __name__ == "__main__":
    main()
