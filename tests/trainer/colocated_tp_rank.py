"""One rank of tests/trainer/test_colocated_tp.py (run by ``torchrun`` with 2 ranks): ONE colocated vLLM
engine at tensor parallel 2 over both ranks (each rank hosts one TP shard of it, in its own process),
beside an FSDP2 actor sharded over the same ranks; writes what it observed to ``OUT/rank{r}.json``."""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from services.rollout.colocated import ColocatedRolloutEngine
from services.rollout.config import EngineConfig, RolloutConfig
from services.rollout.sources import RealtimeSource
from services.trainer.weight_buckets import weight_buckets
from tests.trainer.colocated_rank import BUCKET_MB, counted, generate, hf_logprobs

TP = 2
SHM = Path("/dev/shm")
#: engine parameters whose TP slice the test compares (the CPU backend repacks linear *weights* into
#: its own layout, leaving those parameters of shape (0,); embeddings and biases stay readable)
EMBED = "language_model.model.embed_tokens.weight"
LM_HEAD = "language_model.lm_head.weight"
TEXT_QKV_BIAS = "language_model.model.layers.0.self_attn.qkv_proj.bias"
VISION_QKV_BIAS = "visual.blocks.0.attn.qkv.bias"
SHARDED = (EMBED, LM_HEAD, TEXT_QKV_BIAS, VISION_QKV_BIAS)


def tp_layout(worker: Any) -> dict[str, Any]:
    """The groups vLLM built in this rank's worker, and the communicator its TP group talks through."""
    from vllm.distributed import parallel_state as ps

    tp = ps.get_tp_group()
    communicator = tp.device_communicator
    return {
        "tp_size": ps.get_tensor_model_parallel_world_size(),
        "tp_rank": ps.get_tensor_model_parallel_rank(),
        "tp_ranks": list(tp.ranks),
        "dp_ranks": list(ps.get_dp_group().ranks),
        "pp_ranks": list(ps.get_pp_group().ranks),
        "tp_unique_name": tp.unique_name,
        "communicator": type(communicator).__name__,
        "transport": type(communicator.dist_module).__name__,  # _CPUSHMDistributed: shared memory
        "dist_ident": os.environ["VLLM_DIST_IDENT"],  # the worker set it from its init method
    }


def loaded_shard(worker: Any) -> dict[str, Any]:
    """After a bucketed push: the engine parameter names the push loaded, the ones it expected, and the
    local (TP-sharded) values of a few parameters."""
    params = dict(worker.model_runner.get_model().named_parameters())
    return {
        "loaded": sorted(worker._reelrl_loaded),
        "expected": sorted(worker._reelrl_expected),
        "values": {name: params[name].detach().clone() for name in SHARDED},
    }


def expected_shard(model: torch.nn.Module, rank: int) -> dict[str, torch.Tensor]:
    """What TP rank ``rank`` of 2 should hold of the HF ``model``'s weights: its half of the vocabulary
    rows; its query heads with the single KV head replicated (1 KV head < TP 2); its third of each of
    the vision tower's fused q, k, v."""
    text = model.config.text_config
    layer = model.model.language_model.layers[0].self_attn
    vocab = model.model.language_model.embed_tokens.weight
    rows = vocab.shape[0] // TP
    heads = text.num_attention_heads // TP
    head_dim = text.hidden_size // text.num_attention_heads
    assert text.num_key_value_heads == 1, "the expectation below replicates one KV head"
    query = layer.q_proj.bias.detach()[rank * heads * head_dim : (rank + 1) * heads * head_dim]
    q, k, v = model.model.visual.blocks[0].attn.qkv.bias.detach().chunk(3)
    part = q.numel() // TP
    return {
        EMBED: vocab.detach()[rank * rows : (rank + 1) * rows],
        LM_HEAD: model.lm_head.weight.detach()[rank * rows : (rank + 1) * rows],
        TEXT_QKV_BIAS: torch.cat([query, layer.k_proj.bias.detach(), layer.v_proj.bias.detach()]),
        VISION_QKV_BIAS: torch.cat([t[rank * part : (rank + 1) * part] for t in (q, k, v)]),
    }


def shm_segments(ident: str, layout: dict[str, Any]) -> list[str]:
    """The shared-memory segments of the TP group's communicator (one per rank): vLLM names them
    ``{VLLM_DIST_IDENT}-{group}-[{ranks}]-cpushm_{rank}`` and glibc's ``shm_open`` drops the leading
    slashes."""
    ranks = "-".join(str(r) for r in layout["tp_ranks"])
    stem = f"{ident}-{layout['tp_unique_name']}-[{ranks}]-cpushm".lstrip("/")
    return [f"{stem}_{r}" for r in range(len(layout["tp_ranks"]))]


def main(model_path: str, out: Path) -> None:
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForImageTextToText

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    config = EngineConfig(dtype="float32", max_model_len=512, kv_cache_gib=0.125, tensor_parallel_size=TP)
    engine = ColocatedRolloutEngine(model_path, RolloutConfig(n=1, engine=config), source=RealtimeSource({}))
    try:
        (layout,) = engine.llm.collective_rpc(tp_layout)
        segments = shm_segments(layout["dist_ident"], layout)
        # named at once, so the test removes these (and nothing another run made) if a rank dies
        (out / f"segments_rank{rank}.txt").write_text("\n".join(segments))
        old = AutoModelForImageTextToText.from_pretrained(model_path, dtype=torch.float32).eval()
        new = copy.deepcopy(old)
        generator = torch.Generator().manual_seed(7)  # the same on every rank, as an update would be
        with torch.no_grad():
            for p in new.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=generator))
        actor = fully_shard(copy.deepcopy(new))  # the FSDP actor holding the "updated" weights
        prompt = [11, 42, 7, 99, 5]  # the same request on both ranks: they are shards of one engine
        ids_before, before = generate(engine, prompt)
        buckets = [0]
        version = engine.load_from(counted(weight_buckets(actor, torch.float32, BUCKET_MB), buckets))
        ids_after, after = generate(engine, prompt)
        (shard,) = engine.llm.collective_rpc(loaded_shard)
        expected = expected_shard(new, rank)
        result = {
            "rank": rank,
            "engine_index": engine.engine_index,
            "cores": sorted(os.sched_getaffinity(0)),
            "layout": layout,
            "segments": segments,
            "segments_during_run": [s for s in segments if (SHM / s).exists()],
            "ids_before": ids_before,
            "ids_after": ids_after,
            "logprobs_after": after,
            "buckets": buckets[0],
            "weight_version": version,
            "loaded": shard["loaded"],
            "expected": shard["expected"],
            "shapes": {name: list(value.shape) for name, value in shard["values"].items()},
            "slice_gaps": {name: (value - expected[name]).abs().max().item() for name, value in shard["values"].items()},
            "gap_before_vs_old": (hf_logprobs(old, prompt, ids_before) - torch.tensor(before)).abs().max().item(),
            "gap_after_vs_new": (hf_logprobs(new, prompt, ids_after) - torch.tensor(after)).abs().max().item(),
            "gap_after_vs_old": (hf_logprobs(old, prompt, ids_after) - torch.tensor(after)).abs().max().item(),
        }  # fmt: skip
        (out / f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        engine.shutdown()  # vLLM's cleanup destroys the ranks' process group with its own
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
