"""One rank of tests/trainer/test_colocated.py (run by ``torchrun``): an FSDP2 actor and, in the same
process, the engine shard it hosts, through one cycle of the loop's path (``hand_back`` at sleep level
2, ``take_back`` with a bucketed push); writes what it observed to ``OUT/rank{r}.json``."""

from __future__ import annotations

import copy
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from services.rollout.colocated import ColocatedRolloutEngine
from services.rollout.config import EngineConfig, RolloutConfig
from services.rollout.sources import RealtimeSource
from services.rollout.weight_sync import WeightBuckets
from services.trainer.weight_buckets import weight_buckets

BUCKET_MB = 1 / 32  # 32 KiB: many buckets, layers split across them
ALONE_S = 120.0  # how long rank 1 waits for rank 0 to generate alone


def torchrun(module: str, model: Path, out: Path) -> list[str]:
    """The command that runs the rank script ``module`` on 2 gloo ranks of this machine."""
    from tests.trainer.actor_steps import free_port

    return [
        str(Path(sys.executable).with_name("torchrun")), "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
        "--master_port", str(free_port()), "-m", module, str(model), str(out),
    ]  # fmt: skip


def counted(weights: WeightBuckets, seen: list[int]) -> WeightBuckets:
    """``weights`` whose passes count their buckets into ``seen``."""

    def open_():
        for bucket in weights.open():
            seen[0] += 1
            yield bucket

    return WeightBuckets(announced=weights.announced, open=open_, nbytes=weights.nbytes)


def generates_alone(shard: ColocatedRolloutEngine, rank: int, out: Path) -> float | None:
    """Rank 0 generates while rank 1 waits for it outside vLLM: engines of a colocated world are
    independent (no vLLM data-parallel group over the ranks), so this ends; engines in one
    data-parallel group would wait for each other's decode steps for good. Returns rank 0's seconds
    (None on rank 1, which fails after ``ALONE_S`` if rank 0 never finished)."""
    flag = out / "rank0_generated_alone"
    if rank == 0:
        started = time.perf_counter()
        generate(shard, [3, 1, 4, 1, 5])
        flag.write_text("done")
        return time.perf_counter() - started
    deadline = time.monotonic() + ALONE_S
    while not flag.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"rank 0 did not generate alone within {ALONE_S:.0f} s (engines in lockstep?)")
        time.sleep(0.2)
    return None


def hf_logprobs(model: torch.nn.Module, prompt: list[int], response: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    return logits.log_softmax(-1).gather(1, torch.tensor(response)[:, None])[:, 0]


def generate(shard: ColocatedRolloutEngine, prompt: list[int]) -> tuple[list[int], list[float]]:
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=6, temperature=0.0, logprobs=0, ignore_eos=True)
    (output,) = shard.llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)
    completion = output.outputs[0]
    ids = list(completion.token_ids)
    return ids, [float(pos[t].logprob) for pos, t in zip(completion.logprobs, ids, strict=True)]


def load_lora_actor(
    shard: ColocatedRolloutEngine, base: torch.nn.Module, prompt: list[int], generator: torch.Generator
) -> dict[str, float]:
    """A LoRA actor (services/trainer/lora.py) sharded over the ranks: its merged view is what the
    engine loads, and the engine then scores as the merged model does."""
    from torch.distributed.fsdp import fully_shard

    from services.trainer import lora
    from services.trainer.config import LoraConfig

    adapted = copy.deepcopy(base)
    lora.inject(adapted, LoraConfig(rank=4, alpha=8.0), torch.float32)
    with torch.no_grad():  # trained adapters: B no longer zero (the same on every rank)
        for name, param in adapted.named_parameters():
            if ".lora_" in name:
                param.copy_(0.2 * torch.randn(param.shape, generator=generator))
    merged = copy.deepcopy(base)
    merged.load_state_dict({k: v.full_tensor() for k, v in lora.merged_state(adapted).items()
                            if isinstance(v, lora.MergedWeight)}, strict=False)  # fmt: skip
    actor = fully_shard(adapted)
    shard.load_from(weight_buckets(actor, torch.float32, BUCKET_MB))  # reads the merged view
    ids, logprobs = generate(shard, prompt)
    return {
        "gap_lora_vs_merged": (hf_logprobs(merged.eval(), prompt, ids) - torch.tensor(logprobs))
        .abs()
        .max()
        .item(),
        "gap_lora_vs_base": (hf_logprobs(base, prompt, ids) - torch.tensor(logprobs)).abs().max().item(),
    }


def main(model_path: str, out: Path) -> None:
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForImageTextToText

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    config = RolloutConfig(n=1, engine=EngineConfig(dtype="float32", max_model_len=512, kv_cache_gib=0.125))
    shard = ColocatedRolloutEngine(model_path, config, source=RealtimeSource({}))
    try:
        old = AutoModelForImageTextToText.from_pretrained(model_path, dtype=torch.float32).eval()
        new = copy.deepcopy(old)
        generator = torch.Generator().manual_seed(7)  # the same on every rank, as an update would be
        with torch.no_grad():
            for p in new.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=generator))
        actor = fully_shard(copy.deepcopy(new))  # the FSDP actor holding the "updated" weights
        prompt = [11 + rank, 42, 7, 99, 5 + 3 * rank]  # each engine serves requests of its own
        alone_s = generates_alone(shard, rank, out)
        ids, before = generate(shard, prompt)
        before_gap = (hf_logprobs(old, prompt, ids) - torch.tensor(before)).abs().max().item()
        phases: list[str] = []
        slept = shard.hand_back(2, reload=lambda: phases.append("(actor back)"), observe=phases.append)
        buckets = [0]
        shard.take_back(
            counted(weight_buckets(actor, torch.float32, BUCKET_MB), buckets),
            park_optimizer=lambda: phases.append("(optimizer parked)"),
            park_actor=lambda: phases.append("(actor parked)"),
            observe=phases.append,
        )
        ids, after = generate(shard, prompt)
        weight_version = shard.weight_version
        lora_gaps = load_lora_actor(shard, old, prompt, generator)
        result = {
            **lora_gaps,
            "rank": rank,
            "engine_index": shard.engine_index,
            "cores": sorted(os.sched_getaffinity(0)),  # this rank's process, where its shard runs
            "shard_cores": shard.cpu_cores,
            "buckets": buckets[0],
            "weight_version": weight_version,
            "slept": slept,
            "phases": phases,
            "alone_s": alone_s,
            "gap_before_vs_old": before_gap,
            "gap_after_vs_new": (hf_logprobs(new, prompt, ids) - torch.tensor(after)).abs().max().item(),
            "gap_after_vs_old": (hf_logprobs(old, prompt, ids) - torch.tensor(after)).abs().max().item(),
        }
        (out / f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        shard.shutdown()  # vLLM's cleanup destroys the ranks' process group with its own
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
