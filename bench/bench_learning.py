"""Does a tiny model learn from rewards, through the real loop (vLLM rollouts, the reward library, the HF
actor)? And what does the frame cache save per training step?

    python -m bench.bench_learning [--work DIR] [--steps N] [--rl-steps N] [--cache-steps N]

Runs, one at a time (two at once would share the 2 cores):
1. ``mix``: the colour task from random weights with mixed groups (7 sampled + the offline answer):
   ``learning_heldout_accuracy`` (held-out accuracy at the end), ``learning_minutes`` (training wall
   minutes until held-out accuracy first reached 0.9; the whole budget if it never did);
2. ``nomix``: the same budget without offline trajectories: ``learning_mix_gain`` = accuracy with ÷
   accuracy without (the latter floored at chance, 0.25, so a run that never answers cannot divide by 0);
3. ``offpolicy``: ``mix`` again with ``trainer.off_policy_steps: 1`` (each batch generated during the
   previous update, one update stale): ``learning_off_policy_heldout_accuracy``,
   ``learning_off_policy_minutes``;
4. ``lora``: ``mix`` again training LoRA adapters (``actor.lora``: rank 16, alpha 32, on every projection
   of the language model and every linear layer of the tower's blocks, lr 1e-3) on the frozen random
   base: ``learning_lora_heldout_accuracy``,
   ``learning_lora_minutes``;
5. ``rl``: the direction task by pure RL: a format warm start whose offline answers are uniformly random
   letters, then GRPO on data with no correct answer anywhere: ``learning_rl_only_accuracy``;
6. ``cached`` / ``realtime``: the same steps with clips from the frame store vs decoded every time
   (360p, 10 s sources): ``train_step_realtime_over_cached`` and ``train_tokens_per_s``, plus the
   per-phase breakdown printed and written to docs/benchmarks.md by hand.
Curves go to docs/learning_curves.png. Figures go to bench/results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.results import LoadWatch, add_load_argument, record

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "tiny_cpu.yaml"
RL_CONFIG = ROOT / "examples" / "tiny_cpu_rl.yaml"
CHANCE = 0.25
#: the LoRA run's lr. An AdamW step moves B by ~lr a coordinate, so W moves by ~(alpha/r)·lr·|A|·√r
#: ≈ 0.4·lr here (A ~ U(±1/√128)): 1e-3 moves the weights about as fast as full tuning's 3e-4 does.
#: 3e-3 overshot (held-out accuracy rose, then fell back to 0.5), 1e-2 collapsed to 0
LORA_LR = 1.0e-3
LORA_RANK = 16


def run_train(config: Path, overrides: list[str], work: Path, name: str) -> list[dict]:
    out = work / name
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "services.cli", "train", str(config), *overrides,
           f"trainer.output_dir={out}", "trainer.resume=none", "trainer.loggers=[jsonl]"]  # fmt: skip
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "WARNING", "REELRL_HOME": str(work / "home")}
    started = time.monotonic()
    print(f"[{name}] {' '.join(cmd[3:])}", flush=True)
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"[{name}] failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    print(f"[{name}] done in {time.monotonic() - started:.0f} s", flush=True)
    return rows


def earlier_run(work: Path, name: str) -> list[dict] | None:
    """A run of an earlier invocation in the same work folder (``--only`` skipped it), if it finished:
    its curve and figures are reported again, so ``--only cache`` keeps every curve of the plot."""
    path = work / name / "metrics.jsonl"
    if not path.exists():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    config = (work / name / "config.yaml").read_text()
    total = int(config.split("total_steps:", 1)[1].split()[0])
    return rows if rows and rows[-1]["step"] == total else None


def val_curve(rows: list[dict]) -> list[tuple[int, float, float]]:
    """(step, training minutes, held-out accuracy) of every validation."""
    return [
        (r["step"], r.get("perf/elapsed_s", 0.0) / 60, r["val/accuracy"]) for r in rows if "val/accuracy" in r
    ]


def minutes_to(rows: list[dict], target: float) -> float | None:
    for _, minutes, acc in val_curve(rows):
        if acc >= target:
            return minutes
    return None


def held_out(rows: list[dict], prefix: str, figures: dict[str, float]) -> tuple[float, float | None]:
    """A colour run's figures into ``figures``: ``<prefix>heldout_accuracy`` (at the end) and
    ``<prefix>minutes`` (until it first reached 0.9, the whole run's when it never did); returns the
    final accuracy and the minutes to 0.9 (None: never)."""
    final, reached = val_curve(rows)[-1][2], minutes_to(rows, 0.9)
    figures[f"{prefix}heldout_accuracy"] = round(final, 3)
    figures[f"{prefix}minutes"] = round(
        reached if reached is not None else rows[-1]["perf/elapsed_s"] / 60, 2
    )
    return final, reached


def plot(curves: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for name, rows in curves.items():
        vc = val_curve(rows)
        left.plot([s for s, _, _ in vc], [a for _, _, a in vc], marker="o", ms=3, label=name)
        steps = [r["step"] for r in rows if "reward/accuracy" in r]
        reward = [r["reward/accuracy"] for r in rows if "reward/accuracy" in r]
        right.plot(steps, reward, lw=1, label=name)
    left.axhline(CHANCE, color="grey", ls=":", label="chance")
    left.set(xlabel="step", ylabel="held-out accuracy (greedy)", ylim=(-0.02, 1.02), title="validation")
    right.set(
        xlabel="step", ylabel="accuracy of sampled responses", ylim=(-0.02, 1.02), title="training reward"
    )
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def prepare(work: Path) -> None:
    """Datasets (tiny clips for learning, 360p clips for the cache benchmark) and the tiny model."""
    from services.common.synthetic_tasks import make_task_datasets
    from services.common.tiny_models import build_tiny_model

    data = work / "reelrl-data"
    if not (data / "colour_mix.jsonl").exists():
        make_task_datasets(data, train_videos=64, val_videos=32)
    big = work / "reelrl-data-360p"
    if not (big / "colour_mix.jsonl").exists():
        make_task_datasets(big, train_videos=16, val_videos=4, size=360, seconds=10.0, fps=24)
    if not (data / "tiny-qwen2_5_vl").exists():
        build_tiny_model("qwen2_5_vl", data / "tiny-qwen2_5_vl", seed=0)


def phase_means(rows: list[dict], skip: int = 2) -> dict[str, float]:
    timed = [r for r in rows if "timing/step_s" in r][skip:]
    keys = sorted({k for r in timed for k in r if k.startswith("timing/")})
    return {k: statistics.mean(r.get(k, 0.0) for r in timed) for k in keys}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / ".work" / "learning")
    parser.add_argument("--steps", type=int, default=400, help="budget of the mix and no-mix runs")
    parser.add_argument("--rl-steps", type=int, default=400)
    parser.add_argument("--cache-steps", type=int, default=8)
    parser.add_argument("--lora-lr", type=float, default=LORA_LR, help="the lora run's learning rate")
    parser.add_argument("--lora-rank", type=int, default=LORA_RANK, help="the lora run's rank (alpha 2x)")
    parser.add_argument("--only", default="mix,nomix,rl,offpolicy,lora,cache")
    add_load_argument(parser)
    args = parser.parse_args()
    watch = LoadWatch.begin("bench_learning", args.allow_load)
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    prepare(work)
    only = set(args.only.split(","))
    figures: dict[str, float] = {}
    curves: dict[str, list[dict]] = {}
    budget = [f"trainer.total_steps={args.steps}", "trainer.val_freq=25", "trainer.save_freq=0"]

    mix = run_train(CONFIG, budget, work, "mix") if "mix" in only else earlier_run(work, "mix")
    if mix is not None:
        curves["mix-policy (colour)"] = mix
        final, reached = held_out(mix, "learning_", figures)
        print(f"mix: held-out {final:.3f} (best {max(a for *_, a in val_curve(mix)):.3f}), "
              f"reached 0.9 after {reached} min", flush=True)  # fmt: skip
    nomix_args = [*budget, "data.train_files=[reelrl-data/colour_train.jsonl]", "rollout.mix_policy=false"]
    nomix = run_train(CONFIG, nomix_args, work, "nomix") if "nomix" in only else earlier_run(work, "nomix")
    if nomix is not None:
        curves["no offline data (colour)"] = nomix
        without = val_curve(nomix)[-1][2]
        if "learning_heldout_accuracy" in figures:
            figures["learning_mix_gain"] = round(
                figures["learning_heldout_accuracy"] / max(without, CHANCE), 2
            )
        figures["learning_nomix_accuracy"] = round(without, 3)
        print(f"no mix: held-out {without:.3f}", flush=True)
    offpolicy_args = [*budget, "trainer.off_policy_steps=1"]
    off = (
        run_train(CONFIG, offpolicy_args, work, "offpolicy")
        if "offpolicy" in only
        else earlier_run(work, "offpolicy")
    )
    if off is not None:
        curves["mix-policy, one step off-policy (colour)"] = off
        final, reached = held_out(off, "learning_off_policy_", figures)
        print(f"one step off-policy: held-out {final:.3f}, reached 0.9 after {reached} min", flush=True)
    lora_args = [
        *budget,
        # the tower adapted too: the task is the clip's colour, which the random tower's frozen blocks
        # pass on poorly (language-model adapters alone plateaued near 0.6)
        f"actor.lora={{rank: {args.lora_rank}, alpha: {2 * args.lora_rank}, vision: true}}",
        f"actor.optim.lr={args.lora_lr}",
    ]
    lora = run_train(CONFIG, lora_args, work, "lora") if "lora" in only else earlier_run(work, "lora")
    if lora is not None:
        curves["mix-policy, LoRA adapters (colour)"] = lora
        final, reached = held_out(lora, "learning_lora_", figures)
        print(f"lora: held-out {final:.3f}, reached 0.9 after {reached} min", flush=True)
    rl_args = [f"trainer.total_steps={args.rl_steps}", "trainer.val_freq=20", "trainer.save_freq=0"]
    rl = run_train(RL_CONFIG, rl_args, work, "rl") if "rl" in only else earlier_run(work, "rl")
    if rl is not None:
        curves["pure RL after a random-letter warm start (direction)"] = rl
        figures["learning_rl_only_accuracy"] = round(val_curve(rl)[-1][2], 3)
        figures["learning_rl_only_start_accuracy"] = round(val_curve(rl)[0][2], 3)
        print(f"rl: held-out {val_curve(rl)[0][2]:.3f} -> {val_curve(rl)[-1][2]:.3f}", flush=True)
    if "cache" in only:
        common = [
            f"trainer.total_steps={args.cache_steps}", "trainer.val_freq=0", "trainer.val_before_train=false",
            "trainer.save_freq=0", "data.train_files=[reelrl-data-360p/colour_mix.jsonl]", "data.val_files=[]",
        ]  # fmt: skip
        cached = run_train(CONFIG, common, work, "cached")
        realtime = run_train(CONFIG, [*common, "data.source_mode=realtime_only"], work, "realtime")
        c, r = phase_means(cached), phase_means(realtime)
        figures["train_step_realtime_over_cached"] = round(r["timing/step_s"] / c["timing/step_s"], 2)
        figures["train_tokens_per_s"] = round(statistics.mean(x["perf/tokens_per_s"] for x in cached[2:]), 1)
        print("phase means (s)  cached  realtime")
        for k in sorted(set(c) | set(r)):
            print(f"  {k:28s} {c.get(k, 0):7.3f} {r.get(k, 0):8.3f}")
        figures["train_step_s_cached"] = round(c["timing/step_s"], 3)
        figures["train_step_s_realtime"] = round(r["timing/step_s"], 3)
    if curves:
        plot(curves, ROOT / "docs" / "learning_curves.png")
    print(json.dumps(figures, indent=2))
    record(figures, watch)


if __name__ == "__main__":
    main()
