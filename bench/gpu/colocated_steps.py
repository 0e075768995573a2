"""Steps of the colocated update cycle on one device, then the same steps with the engine in the driver:
tokens/s, sleep, wake and weight-sync seconds, peak device memory. Run by bench/gpu/run.sh (one rank:
``torchrun --nproc_per_node 1``); ``--dry-run`` is the same code on CPU with the tiny model.

Each step: generate a batch of text prompts (greedy, fixed length), one policy-gradient-shaped update of
the FSDP2 actor on the generated responses (token-mean NLL, AdamW), then the new weights into the
engine. Colocated: the engine is a ``ColocatedRolloutEngine`` in this process, driven by the loop's own
cycle (``hand_back`` at sleep level 2, then ``take_back``: the optimizer parked, the weights woken, the
bucketed load from the FSDP parameters, the actor parked, the KV cache woken), with the actor's
weights and moments in host memory while the engine generates; the device memory in use after each
phase is printed and recorded (``gpu_colocated_memory_after_<phase>_gib``). Driver: a ``RolloutEngine``
(its own processes, the same device) and a full state-dict push. This is the cycle of the training
loop, not the loop itself (no videos, no reward service).
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


def device_used_gib() -> float:
    """The device memory in use by anyone (this process's PyTorch, vLLM's sleep-mode pool, other
    processes): what a phase of the cycle left for the next. 0 on the CPU (host and device are one)."""
    if not torch.cuda.is_available():
        return 0.0
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return (total - free) / 2**30


def run(
    mode: str, model: str, steps: int, max_tokens: int, bucket_mb: float, dry_run: bool
) -> dict[str, float]:
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForImageTextToText

    from services.rollout.colocated import HAND_BACK, TAKE_BACK, ColocatedRolloutEngine
    from services.rollout.config import EngineConfig, RolloutConfig
    from services.rollout.sources import RealtimeSource
    from services.trainer.offload import HostCopies, optimizer_tensors, own_storage
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
    own_storage(actor)  # parkable (from_pretrained maps the file on the CPU)
    optimizer = torch.optim.AdamW(actor.parameters(), lr=1e-6)
    vocab = actor.config.get_text_config().vocab_size
    figures: dict[str, list[float]] = {
        k: [] for k in ("tokens_per_s", "update_s", "sleep_s", "wake_s", "sync_s", "step_s")
    }
    weights_home, moments_home = HostCopies(), HostCopies()  # the actor's, while the engine generates
    phases: dict[str, list[float]] = {p: [] for p in (*HAND_BACK, *TAKE_BACK)}
    stamps: dict[str, float] = {}  # when each phase of the current step ended

    def observe(phase: str) -> None:
        stamps[phase] = time.perf_counter()
        used = device_used_gib()
        phases[phase].append(used)
        print(f"[colocated] after {phase}: {used:.2f} GiB of device memory in use", flush=True)

    def park_optimizer() -> None:
        moments_home.park([*optimizer_tensors(optimizer), *(p.grad for p in actor.parameters())])
        weights_home.restore()

    def park_actor() -> None:
        weights_home.park([*actor.parameters(), *actor.buffers()])

    def reload() -> None:
        weights_home.restore()
        moments_home.restore()

    if mode == "colocated":
        park_actor()  # the engine sizes its KV cache in the room the actor leaves
        shard = ColocatedRolloutEngine(model, config, source=RealtimeSource({}))
    else:
        from services.rollout.engine import RolloutEngine

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
            if mode == "colocated":
                shard.hand_back(2, reload=reload, observe=observe)
                figures["sleep_s"].append(stamps["sleep"] - t)
            else:
                figures["sleep_s"].append(0.0)
            figures["update_s"].append(update(actor, optimizer, batch, responses))
            t = time.perf_counter()
            if mode == "colocated":
                shard.take_back(
                    weight_buckets(actor, dtype, bucket_mb, device), park_optimizer=park_optimizer,
                    park_actor=park_actor, observe=observe,
                )  # fmt: skip
                # its two wake-ups (the weights before the push, the KV cache after it)
                figures["wake_s"].append(
                    stamps["wake_weights"]
                    - stamps["park_optimizer"]
                    + stamps["wake_kv_cache"]
                    - stamps["park_actor"]
                )
            else:
                shard.push_weights(
                    {
                        k: v.full_tensor() if hasattr(v, "full_tensor") else v
                        for k, v in actor.state_dict().items()
                    }
                )
                figures["wake_s"].append(0.0)
            figures["sync_s"].append(time.perf_counter() - t)
            figures["step_s"].append(time.perf_counter() - started)
    finally:
        shard.shutdown()
        reload()
    out = {
        f"gpu_{mode}_{k}": sum(v[1:] or v) / len(v[1:] or v) for k, v in figures.items()
    }  # step 1 warms up
    out[f"gpu_{mode}_peak_memory_gib"] = peak_gib()
    if mode == "colocated":
        out.update({f"gpu_colocated_memory_after_{p}_gib": sum(v) / len(v) for p, v in phases.items()})
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
