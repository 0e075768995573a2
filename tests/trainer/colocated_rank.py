"""One rank of tests/trainer/test_colocated.py (run by ``torchrun``): an FSDP2 actor and, in the same
process, the engine shard it hosts; writes what it observed to ``OUT/rank{r}.json``."""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from services.rollout.colocated import ColocatedShard
from services.rollout.config import EngineConfig, RolloutConfig
from services.trainer.weight_buckets import weight_buckets

BUCKET_MB = 1 / 32  # 32 KiB: many buckets, layers split across them


def hf_logprobs(model: torch.nn.Module, prompt: list[int], response: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    return logits.log_softmax(-1).gather(1, torch.tensor(response)[:, None])[:, 0]


def generate(shard: ColocatedShard, prompt: list[int]) -> tuple[list[int], list[float]]:
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=6, temperature=0.0, logprobs=0, ignore_eos=True)
    (output,) = shard.llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)
    completion = output.outputs[0]
    ids = list(completion.token_ids)
    return ids, [float(pos[t].logprob) for pos, t in zip(completion.logprobs, ids, strict=True)]


def load_lora_actor(
    shard: ColocatedShard, base: torch.nn.Module, prompt: list[int], generator: torch.Generator
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
    shard = ColocatedShard(model_path, config)
    try:
        old = AutoModelForImageTextToText.from_pretrained(model_path, dtype=torch.float32).eval()
        new = copy.deepcopy(old)
        generator = torch.Generator().manual_seed(7)  # the same on every rank, as an update would be
        with torch.no_grad():
            for p in new.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=generator))
        actor = fully_shard(copy.deepcopy(new))  # the FSDP actor holding the "updated" weights
        prompt = [11 + rank, 42, 7, 99, 5 + 3 * rank]  # each engine serves requests of its own
        ids, before = generate(shard, prompt)
        before_gap = (hf_logprobs(old, prompt, ids) - torch.tensor(before)).abs().max().item()
        slept = shard.sleep()
        buckets = shard.load_from(weight_buckets(actor, torch.float32, BUCKET_MB))
        woke = shard.wake_up()
        ids, after = generate(shard, prompt)
        weight_version = shard.weight_version
        lora_gaps = load_lora_actor(shard, old, prompt, generator)
        result = {
            **lora_gaps,
            "rank": rank,
            "engine_index": shard.engine_index,
            "cores": sorted(os.sched_getaffinity(0)),  # this rank's process, where its shard runs
            "shard_cores": shard.cpu_cores,
            "buckets": buckets,
            "weight_version": weight_version,
            "slept": slept,
            "woke": woke,
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
