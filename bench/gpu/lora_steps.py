"""The trainer's half of a step with LoRA adapters (``actor.lora``) on the real-size model, beside the full
tuning figures of ``bench/gpu/actor_steps.py`` in the same run: what the adapters save on the device.

    python -m bench.gpu.lora_steps --model DIR --out FILE [--steps 3] [--rank 64] [--dry-run]

The base frozen in bf16, rank-64 adapters (alpha 128) on q, k, v, o, gate, up and down of every decoder
layer in fp32 with their AdamW moments; the same 32-frame video prompts, micro-batch and packing as the
full-tuning steps. Figures (``gpu_lora_*``), each the mean over the steps after the first:

  trainable_params_m        adapter parameters (millions)
  params_b                  every parameter (billions)
  update_peak_memory_gib    the update's peak allocated device memory (the full run's: gpu_actor_*)
  update_s, logprob_s       the update and the scoring pass, seconds
  update_tokens_per_s       tokens of the step over the update's seconds
  resident_gib              device memory held between steps (the base, the adapters, their moments)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from bench.gpu.actor_steps import GiB, Measure, responses, sized_run, video_prompts


def run(args: argparse.Namespace) -> dict[str, float]:
    from services.trainer.actor import Actor
    from services.trainer.algorithms import AlgorithmConfig
    from services.trainer.batch import TokenSequence
    from services.trainer.config import ActorConfig
    from services.trainer.update import SequenceTargets, update_policy

    device = torch.device("cpu" if args.dry_run else "cuda")
    plan = sized_run(args, device)  # the full run's micro-batch, so the two compare
    config = ActorConfig(
        model_path=str(args.model), param_dtype="float32", compute_dtype="bfloat16",
        gradient_checkpointing=True, micro_batch_tokens=plan["micro_batch_tokens"], padding_free=True,
        optim={"lr": args.lr, "grad_clip": 1.0}, lora={"rank": args.rank, "alpha": 2.0 * args.rank},
    )  # fmt: skip
    actor = Actor(config, total_steps=args.steps, device=str(device))
    prompts = video_prompts(actor.processor, args.prompts, args.frames, args.side, seed=0)
    measured = Measure(device)
    algorithm = AlgorithmConfig()
    series: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        series.setdefault(key, []).append(value)

    for step in range(args.steps):
        answers = responses(actor.processor.tokenizer, args.prompts * args.n, args.response_tokens, step)
        sequences = [TokenSequence(prompts[i // args.n], answers[i]) for i in range(len(answers))]
        tokens = sum(s.length for s in sequences)
        old, seconds, _, _, _ = measured(lambda s=sequences: actor.log_probs(s))
        add("logprob_s", seconds)
        targets = [
            SequenceTargets(torch.full((len(s.response_ids),), 1.0 if i % 2 == 0 else -1.0), o)
            for i, (s, o) in enumerate(zip(sequences, old, strict=True))
        ]
        _, seconds, _, peak_gib, _ = measured(
            lambda s=sequences, t=targets: update_policy(
                actor, s, t, algorithm, kl_coef=0.0, entropy_coef=0.0, temperature=1.0,
                offline_term="likelihood",
            )
        )  # fmt: skip
        add("update_s", seconds)
        add("update_tokens_per_s", tokens / seconds)
        add("update_peak_memory_gib", peak_gib)
        if device.type == "cuda":
            add("resident_gib", torch.cuda.memory_allocated(device) / GiB)
        print(f"lora step {step + 1}/{args.steps}: " + ", ".join(f"{k} {v[-1]:.4g}" for k, v in series.items()),
              flush=True)  # fmt: skip
    out = {f"gpu_lora_{k}": sum(v[1:] or v) / len(v[1:] or v) for k, v in series.items()}
    out.setdefault("gpu_lora_resident_gib", 0.0)  # the CPU: host and device are one memory
    out["gpu_lora_trainable_params_m"] = (
        sum(p.numel() for p in actor.model.parameters() if p.requires_grad) / 1e6
    )
    out["gpu_lora_params_b"] = sum(p.numel() for p in actor.model.parameters()) / 1e9
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rank", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--n", type=int, default=4, help="responses per prompt")
    parser.add_argument("--frames", type=int, default=32)
    parser.add_argument("--side", type=int, default=448, help="frame width and height (a multiple of 28)")
    parser.add_argument("--response-tokens", type=int, default=512)
    parser.add_argument("--micro-batch-tokens", type=int, default=16384)
    parser.add_argument("--lr", type=float, default=2e-5, help="the LoRA recipe's lr")
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny model: the same code path")
    parser.add_argument("--out", type=Path, required=True, help="JSON file the figures are merged into")
    args = parser.parse_args()
    if not args.dry_run and not torch.cuda.is_available():
        parser.error("no CUDA device here: give --dry-run for the CPU path")
    from bench.results import write_atomic

    figures = run(args)
    for key, value in figures.items():
        print(f"{key}: {value:.4f}")
    old = json.loads(args.out.read_text()) if args.out.exists() else {}
    write_atomic(args.out, {**old, **figures})


if __name__ == "__main__":
    main()
