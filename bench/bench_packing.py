"""Padding-free packing: the actor's forward + backward over one step's sequences, padded ÷ packed,
side by side in one run (tiny Qwen2.5-VL on the CPU, ``actor.micro_batch_tokens`` the same budget).

    $VENV/bin/python -m bench.bench_packing [--work DIR] [--repeats 3] [--budget 16384]

The batch spreads as video RL does: 16 prompts of 300-3,000 tokens (uniform, seeded: videos of other
lengths and frame counts), each with 2 responses of 20-400 tokens, 32 sequences, in prompt order as a
step holds them. Padded, a micro-batch costs its count × (its longest prompt + its longest response)
tokens; packed, only its real tokens. The budget is verl's default per-GPU token budget (16,384). The modes alternate
(padded, packed, padded, ...), each timed over every micro-batch's forward and backward (the update's
work without the optimizer), medians over ``--repeats``.

  packing_step_speedup              forward+backward seconds padded ÷ packed
  packing_step_s_padded             seconds, padded micro-batches
  packing_step_s_packed             seconds, packed micro-batches
  packing_padded_share_padded       share of the tokens run that are padding, padded layout
  packing_padded_share_packed       the same, packed (0: a packed row holds real tokens only)
  packing_real_tokens               real tokens of the batch
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

import torch

from bench.results import LoadWatch, add_load_argument, record
from services.common.tiny_models import build_tiny_model
from services.trainer.actor import PolicyModel
from services.trainer.batch import PromptInputs, TokenSequence
from services.trainer.config import ActorConfig

PROMPTS, RESPONSES = 16, 2


def batch(seed: int = 0) -> list[TokenSequence]:
    """Text-token prompts and responses with video RL's spread of lengths (ordinary token ids)."""
    rng = random.Random(seed)
    sequences = []
    for i in range(PROMPTS):
        prompt = PromptInputs(f"p{i}", [rng.randrange(100, 1000) for _ in range(rng.randint(300, 3000))])
        for _ in range(RESPONSES):
            sequences.append(
                TokenSequence(prompt, [rng.randrange(100, 1000) for _ in range(rng.randint(20, 400))])
            )
    return sequences


def run_tokens(policy: PolicyModel, sequences: list[TokenSequence]) -> int:
    """Tokens the forwards run over (padding included)."""
    micro = policy.micro_batches(sequences, policy.positions(sequences))
    return sum(mb.inputs["input_ids"].numel() for mb in micro)


def step_seconds(policy: PolicyModel, sequences: list[TokenSequence]) -> float:
    micro = policy.micro_batches(sequences, policy.positions(sequences))
    started = time.perf_counter()
    for mb in micro:
        logp, _ = policy.forward(mb)
        logp.sum().backward()
    seconds = time.perf_counter() - started
    policy.model.zero_grad(set_to_none=True)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/reelrl-bench-packing"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget", type=int, default=16384)
    add_load_argument(parser)
    args = parser.parse_args()
    watch = LoadWatch.begin("bench_packing", args.allow_load)
    torch.manual_seed(0)
    model = args.work / "tiny-qwen2_5_vl"
    if not (model / "config.json").exists():
        build_tiny_model("qwen2_5_vl", model, seed=0)
    sequences = batch()
    real = sum(s.length for s in sequences)
    policies = {
        mode: PolicyModel(
            ActorConfig(model_path=str(model), micro_batch_tokens=args.budget, padding_free=mode == "packed"),
            trainable=True,
            device="cpu",
        )
        for mode in ("padded", "packed")
    }
    run = {mode: run_tokens(policy, sequences) for mode, policy in policies.items()}
    for policy in policies.values():  # warm-up: first calls of new shapes
        step_seconds(policy, sequences[:2])
    seconds: dict[str, list[float]] = {mode: [] for mode in policies}
    for repeat in range(args.repeats):
        for mode, policy in policies.items():
            seconds[mode].append(step_seconds(policy, sequences))
            print(
                f"{mode} run {repeat + 1}: {seconds[mode][-1]:.2f} s ({run[mode]:,} tokens run)", flush=True
            )
    padded, packed = (statistics.median(seconds[m]) for m in ("padded", "packed"))
    print(f"\n{real:,} real tokens: padded {padded:.2f} s, packed {packed:.2f} s: {padded / packed:.2f}x")
    record(
        {
            "packing_step_speedup": round(padded / packed, 3),
            "packing_step_s_padded": round(padded, 3),
            "packing_step_s_packed": round(packed, 3),
            "packing_padded_share_padded": round(1 - real / run["padded"], 3),
            "packing_padded_share_packed": round(1 - real / run["packed"], 3),
            "packing_real_tokens": real,
        },
        watch,
    )


if __name__ == "__main__":
    main()
