"""Steps of the colocated update cycle on one device, then the same steps with the engine in the driver:
tokens/s, sleep, wake and weight-sync seconds, peak device memory. Run by bench/gpu/run.sh (one rank:
``torchrun --nproc_per_node 1``); ``--dry-run`` is the same code on CPU with the tiny model.

Each step: generate a batch of text prompts (greedy, fixed length), one policy-gradient-shaped update of
the FSDP2 actor on the generated responses (token-mean NLL, AdamW), then the new weights into the
engine. Colocated: the engine is a ``ColocatedShard`` in this process (sleep level 1 before the update,
``wake_up(["weights"])``, bucketed load from the FSDP parameters, ``wake_up(["kv_cache"])``). Driver: a
``RolloutEngine`` (its own processes, the same device) and a full state-dict push. This is the cycle
of the training loop, not the loop itself (no videos, no reward service).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

PROMPTS, PROMPT_TOKENS = 8, 64


def prompts(vocab: int, seed: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(100, min(vocab, 30000), (PROMPTS, PROMPT_TOKENS), generator=generator).tolist()


def generate(llm: Any, batch: list[list[int]], max_tokens: int) -> tuple[list[list[int]], float]:
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    started = time.perf_counter()
    outputs = llm.generate([{"prompt_token_ids": p} for p in batch], params, use_tqdm=False)
    seconds = time.perf_counter() - started
    responses = [list(o.outputs[0].token_ids) for o in outputs]
    return responses, sum(len(r) for r in responses) / seconds


def update(
    actor: torch.nn.Module, optimizer: Any, batch: list[list[int]], responses: list[list[int]]
) -> float:
    """One step of token-mean NLL on the responses (the shape of a policy-gradient update)."""
    device = next(actor.parameters()).device
    started = time.perf_counter()
    for prompt, response in zip(batch, responses, strict=True):
        ids = torch.tensor([prompt + response], device=device)
        logits = actor(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
        target = torch.tensor(response, device=device)
        loss = torch.nn.functional.cross_entropy(logits, target) / len(batch)
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - started


def peak_gib() -> float:
    return torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else float("nan")


def run(
    mode: str, model: str, steps: int, max_tokens: int, bucket_mb: float, dry_run: bool
) -> dict[str, float]:
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForImageTextToText

    from services.rollout.config import EngineConfig, RolloutConfig
    from services.trainer.weight_buckets import weight_buckets

    dtype = torch.float32 if dry_run else torch.bfloat16
    device = "cpu" if dry_run else "cuda"
    engine = EngineConfig(
        dtype="float32" if dry_run else "bfloat16", max_model_len=PROMPT_TOKENS + max_tokens + 16,
        enable_sleep_mode=not dry_run, gpu_memory_utilization=0.35,
        kv_cache_gib=0.25 if dry_run else None, enforce_eager=dry_run,
    )  # fmt: skip
    config = RolloutConfig(n=1, engine=engine)
    actor = AutoModelForImageTextToText.from_pretrained(model, dtype=dtype).to(device)
    actor = fully_shard(actor)
    optimizer = torch.optim.AdamW(actor.parameters(), lr=1e-6)
    vocab = actor.config.get_text_config().vocab_size
    figures: dict[str, list[float]] = {
        k: [] for k in ("tokens_per_s", "update_s", "sleep_s", "wake_s", "sync_s", "step_s")
    }
    if mode == "colocated":
        from services.rollout.colocated import ColocatedShard

        shard = ColocatedShard(model, config)
        llm = shard.llm
    else:
        from services.rollout.engine import RolloutEngine
        from services.rollout.sources import RealtimeSource

        shard = RolloutEngine(
            model,
            config.model_copy(update={"engine": engine.model_copy(update={"enable_sleep_mode": False})}),
            source=RealtimeSource({}),
        )
        llm = shard.llm
    try:
        for step in range(steps):
            started = time.perf_counter()
            batch = prompts(vocab, step)
            responses, tokens_per_s = generate(llm, batch, max_tokens)
            figures["tokens_per_s"].append(tokens_per_s)
            t = time.perf_counter()
            slept = mode == "colocated" and shard.sleep(1)
            figures["sleep_s"].append(time.perf_counter() - t)
            figures["update_s"].append(update(actor, optimizer, batch, responses))
            t = time.perf_counter()
            if slept:
                shard.wake_up(["weights"])
            wake = time.perf_counter() - t
            t = time.perf_counter()
            if mode == "colocated":
                shard.load_from(weight_buckets(actor, dtype, bucket_mb, device))
            else:
                shard.push_weights(
                    {
                        k: v.full_tensor() if hasattr(v, "full_tensor") else v
                        for k, v in actor.state_dict().items()
                    }
                )
            figures["sync_s"].append(time.perf_counter() - t)
            t = time.perf_counter()
            if slept:
                shard.wake_up(["kv_cache"])
            figures["wake_s"].append(wake + time.perf_counter() - t)
            figures["step_s"].append(time.perf_counter() - started)
    finally:
        shard.shutdown()
    out = {
        f"gpu_{mode}_{k}": sum(v[1:] or v) / len(v[1:] or v) for k, v in figures.items()
    }  # step 1 warms up
    out[f"gpu_{mode}_peak_memory_gib"] = peak_gib()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--mode", choices=("colocated", "driver"), required=True)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--bucket-mb", type=float, default=512.0)
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny model: the same code path")
    parser.add_argument("--out", type=Path, required=True, help="JSON file the figures are merged into")
    args = parser.parse_args()
    dist.init_process_group("gloo" if args.dry_run else "nccl")
    if not args.dry_run:
        torch.cuda.set_device(0)
    rank = dist.get_rank()  # a colocated shard's shutdown destroys the process group (vLLM's cleanup)
    figures = run(args.mode, args.model, args.steps, args.max_tokens, args.bucket_mb, args.dry_run)
    for key, value in figures.items():
        print(f"{key}: {value:.4f}")
    if rank == 0:
        old = json.loads(args.out.read_text()) if args.out.exists() else {}
        args.out.write_text(json.dumps({**old, **figures}, indent=2, sort_keys=True))
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
