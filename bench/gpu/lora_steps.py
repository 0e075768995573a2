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

import torch

from bench.gpu.actor_steps import (
    GiB,
    Measure,
    measured_update,
    parse_step_arguments,
    responses,
    sized_run,
    step_arguments,
    video_prompts,
    write_figures,
)


def run(args: argparse.Namespace) -> dict[str, float]:
    from services.trainer.actor import Actor
    from services.trainer.algorithms import AlgorithmConfig
    from services.trainer.batch import TokenSequence
    from services.trainer.config import ActorConfig

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
        seconds, peak_gib, _ = measured_update(actor, sequences, old, algorithm, measured)
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
    parser = step_arguments(__doc__.splitlines()[0])
    parser.add_argument("--rank", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-5, help="the LoRA recipe's lr")
    args = parse_step_arguments(parser)
    write_figures(args.out, run(args))


if __name__ == "__main__":
    main()
