"""LoRA adapters (``actor.lora``) against full tuning on the same model, side by side in one run (CPU).

    $VENV/bin/python -m bench.bench_lora [--work DIR] [--steps 4] [--repeats 2]

The model is the tiny Qwen2.5-VL's layout widened so that weights, not activations, fill the memory as
they do at scale: 8 decoder layers of width 1,024 (16 heads of 64, 4 KV heads, MLP 2,816), ~93M
parameters. Each variant runs in a process of its own (so its peak RSS is its own), alternating full,
LoRA, full, ... ``--repeats`` times: it builds the actor (fp32 master weights, as on the CPU; the LoRA
base frozen in the compute dtype, here fp32 too), then runs ``--steps`` update steps (forward, backward
and AdamW over 4 sequences of 64 prompt + 192 response tokens). LoRA: rank 16, alpha 32, on q, k, v, o,
gate, up and down of every decoder layer.

  lora_trainable_params / full_trainable_params    parameters AdamW steps
  lora_optimizer_mib / full_optimizer_mib          AdamW's state after a step (the moments)
  lora_peak_rss_mib / full_peak_rss_mib            the process's peak resident memory (loading included)
  lora_step_s / full_step_s                        median update step, after the first
  lora_step_speedup                                full ÷ LoRA step time
  lora_optimizer_ratio                             full ÷ LoRA optimizer bytes

How the rollout engine sees a LoRA policy after a step (``--only serve``; each way in a vLLM engine of
its own process, alternating, ``--repeats`` times): the trainer's way, the merged weights (W + scale·B·A)
through the bucketed push, against vLLM's LoRA serving (``enable_lora``: the adapters written in peft's
format and added as a new adapter id, the step's requests naming it); then 16 prompts × 64 sampled
tokens, timed:

  lora_sync_merged_push_s / lora_sync_vllm_adapter_s            making the engine serve the new policy
  lora_generate_merged_s / lora_generate_vllm_adapter_s         the batch's generation
  lora_generate_vllm_adapter_over_merged                        the adapter's decode cost, a ratio
  lora_generate_vllm_adapter_over_none                          the same engine, adapter named ÷ not
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.results import LoadWatch, add_load_argument, record

WIDTH = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
             num_key_value_heads=4)  # fmt: skip
LORA = {"rank": 16, "alpha": 32.0}
SEQUENCES, PROMPT, RESPONSE = 4, 64, 192
SERVE_PROMPTS, SERVE_TOKENS = 16, 64
MiB = 1 << 20


def build_model(work: Path) -> Path:
    """The tiny checkpoint's processor and tokenizer with a widened language model (random weights)."""
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    from services.common.tiny_models import build_tiny_model

    out = work / "wide-qwen2_5_vl"
    if (out / "config.json").exists():
        return out
    tiny = (
        build_tiny_model("qwen2_5_vl", work / "tiny-qwen2_5_vl", seed=0)
        if not (work / "tiny-qwen2_5_vl" / "config.json").exists()
        else work / "tiny-qwen2_5_vl"
    )
    config = AutoConfig.from_pretrained(tiny)
    for key, value in WIDTH.items():
        setattr(config.text_config, key, value)
    if getattr(config.text_config, "layer_types", None):  # one entry a layer
        config.text_config.layer_types = [config.text_config.layer_types[0]] * WIDTH["num_hidden_layers"]
    config.vision_config.out_hidden_size = WIDTH["hidden_size"]  # the merger feeds the wider model
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    staging = work / ".wide.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging)
    for path in tiny.iterdir():  # tokenizer, processor, chat template, generation config
        if not path.name.endswith(".safetensors") and path.name != "config.json":
            shutil.copy2(path, staging / path.name)
    staging.rename(out)
    return out


def child(variant: str, model: Path, steps: int) -> dict[str, float]:
    """One variant in this process: the actor, then ``steps`` update steps; its figures."""
    import random

    import torch

    from services.trainer.actor import Actor
    from services.trainer.batch import PromptInputs, TokenSequence
    from services.trainer.config import ActorConfig

    torch.manual_seed(0)
    config = ActorConfig.model_validate(
        {
            "model_path": str(model), "compute_dtype": "float32", "param_dtype": "float32",
            "micro_batch_tokens": SEQUENCES * (PROMPT + RESPONSE), "lora": LORA if variant == "lora" else None,
            "optim": {"lr": 1e-4},
        }
    )  # fmt: skip
    actor = Actor(config, total_steps=steps)
    rng = random.Random(0)
    sequences = [
        TokenSequence(
            PromptInputs(f"p{i}", [rng.randrange(100, 1000) for _ in range(PROMPT)]),
            [rng.randrange(100, 1000) for _ in range(RESPONSE)],
        )
        for i in range(SEQUENCES)
    ]
    micro = actor.micro_batches(sequences, actor.positions(sequences))
    seconds = []
    for _ in range(steps):
        started = time.perf_counter()
        for mb in micro:
            logp, _ = actor.forward(mb)
            mask = mb.response_mask.to(logp.device)
            (-(logp * mask).sum() / mask.sum()).backward()
        actor.step_optimizer()
        seconds.append(time.perf_counter() - started)
    moments = sum(
        t.numel() * t.element_size()
        for state in actor.optimizer.state.values()
        for t in state.values()
        if torch.is_tensor(t)
    )
    return {
        "trainable_params": sum(p.numel() for p in actor.model.parameters() if p.requires_grad),
        "params": sum(p.numel() for p in actor.model.parameters()),
        "optimizer_mib": moments / MiB,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "step_s": statistics.median(seconds[1:] or seconds),
    }


def serve(model: Path, work: Path, variant: str) -> dict[str, float]:
    """How the engine sees a LoRA policy after a step, one way per process: ``merged``, the trainer's
    way (the merged weights through the bucketed push into the rollout engine), or ``adapter``,
    vLLM's LoRA serving (the adapters written in peft's format and loaded as a new adapter id); each
    then generates the same batch, timed."""
    import torch
    from vllm import SamplingParams

    from services.rollout.config import RolloutConfig
    from services.trainer import lora
    from services.trainer.actor import Actor
    from services.trainer.config import ActorConfig
    from services.trainer.weight_buckets import weight_buckets

    torch.manual_seed(0)
    actor = Actor(
        ActorConfig.model_validate({"model_path": str(model), "compute_dtype": "float32", "lora": LORA}),
        total_steps=1,
    )
    with torch.no_grad():  # a trained adapter: B no longer zero
        for name, param in actor.model.named_parameters():
            if ".lora_B." in name:
                param.normal_(0.0, 0.01)
    rollout = RolloutConfig.model_validate(
        {"engine": {"dtype": "float32", "max_model_len": 1024, "kv_cache_gib": 0.5, "in_process": True}}
    )
    prompts = [
        {"prompt_token_ids": [100 + (7 * i + j) % 900 for j in range(PROMPT)]} for i in range(SERVE_PROMPTS)
    ]
    params = SamplingParams(max_tokens=SERVE_TOKENS, temperature=1.0, seed=0, ignore_eos=True)
    out: dict[str, float] = {}
    if variant == "merged":
        from services.rollout.engine import RolloutEngine

        engine = RolloutEngine(model, rollout)
        try:
            llm = engine.llm
            llm.generate(prompts[:2], params, use_tqdm=False)  # warm
            started = time.perf_counter()
            engine.push_weights(weight_buckets(actor.model, torch.float32, 512.0))
            out["sync_s"] = time.perf_counter() - started
            started = time.perf_counter()
            llm.generate(prompts, params, use_tqdm=False)
            out["generate_s"] = time.perf_counter() - started
        finally:
            engine.shutdown()
        return out
    from vllm import LLM
    from vllm.lora.request import LoRARequest

    from services.rollout.vllm_bridge import engine_kwargs

    kwargs = engine_kwargs(str(model), rollout)
    kwargs.pop("worker_extension_cls")
    llm = LLM(**kwargs, enable_lora=True, max_lora_rank=LORA["rank"], max_loras=1)
    llm.generate(prompts[:2], params, use_tqdm=False)  # warm
    started = time.perf_counter()
    folder = work / "serve-adapter"
    shutil.rmtree(folder, ignore_errors=True)
    lora.save_adapter(actor.model, folder, actor.config.lora, str(model), rank=0, gather=actor.gather)
    request = LoRARequest("step-1", 1, str(folder))
    llm.llm_engine.add_lora(request)
    out["sync_s"] = time.perf_counter() - started
    started = time.perf_counter()
    llm.generate(prompts, params, lora_request=request, use_tqdm=False)
    out["generate_s"] = time.perf_counter() - started
    started = time.perf_counter()
    llm.generate(prompts, params, use_tqdm=False)
    out["generate_s_without_adapter"] = time.perf_counter() - started
    return out


def run_child(*args: str) -> dict[str, float]:
    proc = subprocess.run([sys.executable, "-m", "bench.bench_lora", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"[{' '.join(args)}] failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    # vLLM logs to stdout too: the figures are the last JSON object printed
    return json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/reelrl-bench-lora"))
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--only", default="train,serve", help="train (full vs LoRA), serve (merged push vs vLLM LoRA)"
    )
    parser.add_argument("--child", choices=("full", "lora", "merged", "adapter"), help=argparse.SUPPRESS)
    parser.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    add_load_argument(parser)
    args = parser.parse_args()
    if args.child in ("merged", "adapter"):
        print(json.dumps(serve(args.model, args.work, args.child)))
        return
    if args.child:
        print(json.dumps(child(args.child, args.model, args.steps)))
        return
    watch = LoadWatch.begin("bench_lora", args.allow_load)
    args.work.mkdir(parents=True, exist_ok=True)
    model = build_model(args.work)
    only = set(args.only.split(","))
    figures: dict[str, float] = {}
    if "train" in only:
        figures.update(train_figures(args, model))
    if "serve" in only:
        figures.update(serve_figures(args, model))
    print(json.dumps(figures, indent=2))
    record(figures, watch)


def alternate(variants: tuple[str, ...], repeats: int, *options: str) -> list[dict[str, float]]:
    """Each variant's child process, in turn, ``repeats`` times; the median of each figure per variant."""
    runs: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    for repeat in range(repeats):
        for variant in variants:
            result = run_child("--child", variant, *options)
            runs[variant].append(result)
            print(f"[{repeat + 1}/{repeats}] {variant}: {result}", flush=True)
    return [{k: statistics.median(r[k] for r in runs[v]) for k in runs[v][0]} for v in variants]


def serve_figures(args: argparse.Namespace, model: Path) -> dict[str, float]:
    merged, adapter = alternate(
        ("merged", "adapter"), args.repeats, "--model", str(model), "--work", str(args.work)
    )
    return {
        "lora_sync_merged_push_s": round(merged["sync_s"], 3),
        "lora_sync_vllm_adapter_s": round(adapter["sync_s"], 3),
        "lora_generate_merged_s": round(merged["generate_s"], 3),
        "lora_generate_vllm_adapter_s": round(adapter["generate_s"], 3),
        "lora_generate_vllm_adapter_over_merged": round(adapter["generate_s"] / merged["generate_s"], 2),
        # the same engine without naming the adapter: the LoRA kernels' own cost, engine for engine
        "lora_generate_vllm_adapter_over_none": round(
            adapter["generate_s"] / adapter["generate_s_without_adapter"], 2
        ),
    }


def train_figures(args: argparse.Namespace, model: Path) -> dict[str, float]:
    full, lora = alternate(("full", "lora"), args.repeats, "--model", str(model), "--steps", str(args.steps))
    return {
        "full_trainable_params": int(full["trainable_params"]),
        "lora_trainable_params": int(lora["trainable_params"]),
        "full_optimizer_mib": round(full["optimizer_mib"], 1),
        "lora_optimizer_mib": round(lora["optimizer_mib"], 2),
        "lora_optimizer_ratio": round(full["optimizer_mib"] / lora["optimizer_mib"], 1),
        "full_peak_rss_mib": round(full["peak_rss_mib"]),
        "lora_peak_rss_mib": round(lora["peak_rss_mib"]),
        "full_step_s": round(full["step_s"], 3),
        "lora_step_s": round(lora["step_s"], 3),
        "lora_step_speedup": round(full["step_s"] / lora["step_s"], 2),
    }


if __name__ == "__main__":
    main()
