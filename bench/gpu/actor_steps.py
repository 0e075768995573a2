"""The trainer's half of an RL step on one device, at real size, through the project's own classes: the
``Actor`` (fp32 master weights, bf16 forwards under autocast, AdamW, gradient checkpointing), its
scoring pass (``log_probs``) and ``update_policy`` over video prompts made by the checkpoint's own
processor, then the weight streams a push reads (``weight_buckets``). Run by bench/gpu/run.sh;
``--dry-run`` is the same code on CPU with the tiny model.

It needs no rollout engine: the responses are random ordinary tokens of a fixed length (what the
engine could have sampled), the advantages +1/-1 by response. Per step it measures:

- the scoring pass and the update: seconds and tokens/s (prompt + response tokens);
- precision at true scale: the share of weight elements the update moved in the fp32 master, the share
  whose bf16 copy (what the engine is sent) changed, and the share a bf16 master would have moved,
  stepping its own rounded copy by the same update (:func:`bf16_master_step`);
- the colocated push's bucket stream (``group_stream`` on the device, as ``ColocatedRolloutEngine.load_from``
  reads it), the weight group's packed buckets (``packed_buckets``) and a full bf16 state dict: seconds
  and peak extra device memory of each;
- the update's peak device memory, allocated and reserved by the caching allocator (fragmentation
  included), the bench's own copies of the weights subtracted.

Once, after the steps, the vision tower's forward on one clip (:func:`vision_forward`): wall seconds,
the seconds the device was busy, and how many attention calls it made (transformers' SDPA path runs one
per attention window and layer, so a long clip's tower is bound by launching kernels, not computing).

The steps run with ``actor.padding_free`` (packed rows, the tower's windows in one call); then
``--padded-steps`` more with the padded layout (transformers' SDPA, one call per window), and the model
FLOPs utilisation of both layouts' scoring pass and update (bench/gpu/flops.py: the same model FLOPs
over each layout's time, against the chip's dense bf16 peak). The run is sized to the device
(:func:`~bench.gpu.flops.memory_plan`: the micro-batch's tokens, AdamW's moments on the host if
needed) and prints what it chose; the bench's own copies of the weights live on the host.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.gpu.flops import Shape, forward_flops, memory_plan, mfu, peak_flops

GiB = 2**30


# -- precision: pure functions ------------------------------------------------------------------------


def moved(before: torch.Tensor, after: torch.Tensor) -> int:
    """How many elements differ between two copies of one tensor."""
    return int((before != after).sum())


def bf16_master_step(master: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """A bf16 master weight after an update ``delta`` (computed in fp32): the sum rounded back to bf16,
    as an optimizer stepping bf16 weights stores it. Example: 0.02 is stored as 164·2^-13 (bf16's
    spacing there is 2^-13 ≈ 1.2e-4), and adding 1e-6 rounds back to it; 1e-4 is stored as 210·2^-21
    (spacing ≈ 4.8e-7), and adding 1e-6 gives 212·2^-21."""
    return (master.float() + delta.float()).to(torch.bfloat16)


def shares(counts: Mapping[str, int], total: int) -> dict[str, float]:
    """Element counts as fractions of ``total``."""
    return {k: v / total for k, v in counts.items()}


# -- device memory ------------------------------------------------------------------------------------


class Measure:
    """Seconds and device memory of each measured call (each resets the allocator's peak to see its
    own). Off CUDA, where the caching allocator's statistics do not exist, the memory figures are NaN."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"

    def __call__(self, fn: Callable[[], Any]) -> tuple[Any, float, float, float, float]:
        """``fn()``'s result, its seconds, the peak memory it held beyond what was allocated before it,
        and the peak allocated and reserved during it (GiB)."""
        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            base = torch.cuda.memory_allocated(self.device)
        started = time.perf_counter()
        out = fn()
        if self.cuda:
            torch.cuda.synchronize(self.device)
        seconds = time.perf_counter() - started
        if not self.cuda:
            return out, seconds, math.nan, math.nan, math.nan
        peak = torch.cuda.max_memory_allocated(self.device)
        reserved = torch.cuda.max_memory_reserved(self.device)
        return out, seconds, (peak - base) / GiB, peak / GiB, reserved / GiB


def drain(stream: Iterable[Any]) -> int:
    """Walk a bucket stream to its end, holding one bucket at a time; returns how many there were."""
    count = 0
    for bucket in stream:
        del bucket
        count += 1
    return count


def device_seconds(events: Iterable[Any]) -> float:
    """Seconds the device was busy in profiled ``events``: only the device's own (kernel, copy and
    memset) entries count. An operator's entry also carries its kernels' device time, so summing every
    entry would count each kernel twice (the profiler's own table totals it this way too)."""
    from torch.autograd import DeviceType

    return sum(
        e.self_device_time_total for e in events
        if e.device_type == DeviceType.CUDA and not e.is_user_annotation
    ) / 1e6  # fmt: skip


# What counts as one attention call: SDPA (once per window on transformers' own path) and PyTorch's
# variable-length flash kernel (once per layer with actor.padding_free, services/trainer/packing.py).
ATTENTION_OPS = ("aten::scaled_dot_product_attention", "torch_attn::_varlen_attn")


def vision_forward(model: Any, prompt: Any, device: torch.device) -> dict[str, float]:
    """One no-grad forward of ``model``'s vision tower on ``prompt``'s clip under bf16 autocast, after a
    warm-up: wall seconds, device-busy seconds (the profiler's kernel time; NaN off CUDA) and the number
    of attention calls (:data:`ATTENTION_OPS`)."""
    from torch.profiler import ProfilerActivity, profile

    pixels = prompt.vision["pixel_values_videos"].to(device)
    grid = prompt.vision["video_grid_thw"].to(device)
    forward = lambda: model.model.visual(pixels, grid_thw=grid)  # noqa: E731
    measured = Measure(device)  # synchronises the device around each call
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if measured.cuda else [])
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16):
        measured(forward)  # warm-up
        _, seconds, _, _, _ = measured(forward)
        with profile(activities=activities) as prof:
            measured(forward)
    events = prof.key_averages()
    calls = sum(e.count for e in events if e.key in ATTENTION_OPS)
    busy = device_seconds(events) if measured.cuda else math.nan
    return {"vision_forward_s": seconds, "vision_forward_device_s": busy, "vision_attention_calls": calls}


# -- the step's inputs --------------------------------------------------------------------------------


def video_prompts(processor: Any, prompts: int, frames: int, side: int, seed: int) -> list[Any]:
    """``prompts`` questions, each about its own random clip of ``frames`` frames of ``side`` x ``side``
    pixels, processed exactly as the trainer processes stored clips (``processor_inputs``)."""
    from services.rollout.config import RolloutConfig
    from services.rollout.consistency import processor_inputs
    from services.rollout.media import SampleMedia, video_metadata
    from services.rollout.prompts import render_prompt
    from services.rollout.samples import RolloutSample
    from services.trainer.batch import PromptInputs

    rng = np.random.default_rng(seed)
    config = RolloutConfig()
    out = []
    for i in range(prompts):
        clip = rng.integers(0, 256, (frames, side, side, 3), dtype=np.uint8)
        meta = video_metadata(
            {"fps": 2.0, "duration": frames / 2.0, "total_num_frames": frames,
             "frames_indices": list(range(frames)), "width": side, "height": side}
        )  # fmt: skip
        sample = RolloutSample(
            id=f"q{i}", prompt=f"Question {i}: what happens in the video?", videos=(f"clip-{i}",),
            check_params=False,
        )  # fmt: skip
        text = render_prompt(processor, sample)
        inputs = processor_inputs(processor, text, SampleMedia(videos=[(clip, meta)]), config)
        out.append(PromptInputs.from_processor(sample.id, inputs))
    return out


def responses(tokenizer: Any, count: int, length: int, seed: int) -> list[list[int]]:
    """Random ordinary token ids (no special or placeholder token), as an engine could sample them."""
    special = set(tokenizer.all_special_ids) | set(tokenizer.added_tokens_decoder)
    bound = len(tokenizer)
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        ids = torch.randint(0, bound, (length * 2,), generator=generator).tolist()
        kept = [t for t in ids if t not in special][:length]
        if len(kept) < length:
            raise ValueError(f"tokenizer of {bound} ids has too few ordinary ones for {length} tokens")
        out.append(kept)
    return out


# -- the run ------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, float]:
    from services.trainer.actor import Actor
    from services.trainer.algorithms import AlgorithmConfig
    from services.trainer.batch import TokenSequence
    from services.trainer.config import ActorConfig
    from services.trainer.weight_buckets import full, group_stream, manifest, packed_buckets

    device = torch.device("cpu" if args.dry_run else "cuda")
    plan = sized_run(args, device)
    config = ActorConfig(
        model_path=str(args.model), param_dtype="float32", compute_dtype="bfloat16",
        gradient_checkpointing=True, micro_batch_tokens=plan["micro_batch_tokens"], padding_free=True,
        offload_optimizer=plan["offload_optimizer"], optim={"lr": args.lr, "grad_clip": 1.0},
    )  # fmt: skip
    actor = Actor(config, total_steps=args.steps + args.padded_steps, device=str(device))
    params = dict(actor.model.named_parameters())
    total = sum(p.numel() for p in params.values())
    prompts = video_prompts(actor.processor, args.prompts, args.frames, args.side, seed=0)
    algorithm = AlgorithmConfig()
    push = torch.bfloat16
    # the bench's own copies on the host: on the device they would be 6 B a parameter the run does not need
    bf16_master = {k: p.detach().to("cpu", torch.bfloat16) for k, p in params.items()}  # its own rounded copy
    series: dict[str, list[float]] = {}
    measured = Measure(device)
    shape = Shape.of(actor.model)
    peak = peak_flops(torch.cuda.get_device_name(device)) if device.type == "cuda" else math.nan

    def add(key: str, value: float) -> None:
        series.setdefault(key, []).append(value)

    for step in range(args.steps):
        answers = responses(actor.processor.tokenizer, args.prompts * args.n, args.response_tokens, step)
        sequences = [
            TokenSequence(prompts[i // args.n], answers[i]) for i in range(len(answers))
        ]  # n responses per prompt, in prompt order
        tokens = sum(s.length for s in sequences)
        flops = pass_flops(actor, shape, sequences)
        old, seconds, _, _, _ = measured(lambda s=sequences: actor.log_probs(s))
        step_s = seconds
        add("logprob_s", seconds)
        add("logprob_tokens_per_s", tokens / seconds)
        add("logprob_tflops", flops / seconds / 1e12)
        add("logprob_mfu", mfu(flops, seconds, peak))
        before = {k: p.detach().to("cpu", copy=True) for k, p in params.items()}
        seconds, peak_gib, reserved = measured_update(actor, sequences, old, algorithm, measured)
        step_s += seconds
        add("update_s", seconds)
        add("update_tokens_per_s", tokens / seconds)
        add("update_tflops", 3 * flops / seconds / 1e12)  # forward and backward: 3 forwards
        add("update_mfu", mfu(3 * flops, seconds, peak))
        add("update_peak_memory_gib", peak_gib)
        add("update_peak_reserved_gib", reserved)
        counts = {"moved_fp32_master": 0, "moved_bf16_copy": 0, "moved_bf16_master": 0}
        with torch.no_grad():
            for k, p in params.items():  # one tensor at a time on the device
                was, master = before[k].to(device), bf16_master[k].to(device)
                counts["moved_fp32_master"] += moved(was, p)
                counts["moved_bf16_copy"] += moved(was.to(push), p.to(push))
                stepped = bf16_master_step(master, p - was)
                counts["moved_bf16_master"] += moved(master, stepped)
                bf16_master[k] = stepped.cpu()
        del before
        for key, value in shares(counts, total).items():
            add(key, value)

        state = actor.push_state()  # what a push carries (a tied head once, under the embeddings' name)
        entries = manifest(state, push)
        stream = lambda st=state, e=entries: drain(  # noqa: E731
            group_stream(((n, full(t)) for n, t in st.items()), e, args.bucket_mb, device)
        )
        count, seconds, extra, _, _ = measured(stream)
        step_s += seconds
        add("stream_buckets", count)
        add("stream_bucketed_s", seconds)
        add("stream_bucketed_peak_extra_gib", extra)
        _, seconds, extra, _, _ = measured(
            lambda: drain(packed_buckets(actor.model, push, args.bucket_mb, device, keep=True))
        )
        add("stream_packed_s", seconds)
        add("stream_packed_peak_extra_gib", extra)
        _, seconds, extra, _, _ = measured(lambda: len(actor.full_state_dict(push)))
        add("state_dict_full_s", seconds)
        add("state_dict_full_peak_extra_gib", extra)
        # a colocated step's trainer half: scoring, update and its one push (generation aside; the other
        # pushes and the precision counting are the bench's)
        add("step_s", step_s)
        add("tokens", tokens)
        print(f"step {step + 1}/{args.steps}: " + ", ".join(f"{k} {v[-1]:.4g}" for k, v in series.items()),
              flush=True)  # fmt: skip

    out = {f"gpu_actor_{k}": sum(v[1:] or v) / len(v[1:] or v) for k, v in series.items()}  # step 1 warms
    # the precision shares are the last step's (each step counts against its own snapshot)
    for key in ("moved_fp32_master", "moved_bf16_copy", "moved_bf16_master"):
        out[f"gpu_actor_{key}"] = series[key][-1]
    out.update({f"gpu_actor_{k}": v for k, v in vision_forward(actor.model, prompts[0], device).items()})
    out.update(padded_steps(actor, shape, prompts, args, measured, peak, algorithm))
    out["gpu_actor_micro_batch_tokens"] = plan["micro_batch_tokens"]
    out["gpu_actor_offload_optimizer"] = float(plan["offload_optimizer"])
    out["gpu_actor_peak_tflops"] = peak / 1e12
    out["gpu_actor_params_b"] = total / 1e9
    out["gpu_actor_steps"] = args.steps
    out.update(offload_round_trip(actor, device))
    return out


def measured_update(
    actor: Any, sequences: list[Any], old: list[torch.Tensor], algorithm: Any, measured: Measure
) -> tuple[float, float, float]:
    """One update of ``actor`` on ``sequences`` (advantages +1 and -1 in turn, ``old`` their
    log-probs), measured: its seconds and the peak allocated and reserved device memory (GiB)."""
    from services.trainer.update import SequenceTargets, update_policy

    targets = [
        SequenceTargets(torch.full((len(s.response_ids),), 1.0 if i % 2 == 0 else -1.0), o)
        for i, (s, o) in enumerate(zip(sequences, old, strict=True))
    ]
    _, seconds, _, peak_gib, reserved = measured(
        lambda: update_policy(
            actor, sequences, targets, algorithm, kl_coef=0.0, entropy_coef=0.0, temperature=1.0,
            offline_term="likelihood",
        )
    )  # fmt: skip
    return seconds, peak_gib, reserved


def sized_run(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """The micro-batch and offload the device's memory allows (:func:`~bench.gpu.flops.memory_plan`);
    on the CPU (the dry run) what was asked, nothing offloaded. Printed either way."""
    from services.trainer.sharded_load import empty_model

    if device.type != "cuda":
        plan = {"offload_optimizer": False, "micro_batch_tokens": args.micro_batch_tokens}
    else:
        params = sum(p.numel() for p in empty_model(args.model, torch.float32).parameters())
        memory = torch.cuda.get_device_properties(device).total_memory
        plan = memory_plan(params, memory, args.micro_batch_tokens)
        print(f"plan: {params / 1e9:.2f} B parameters on {memory / GiB:.1f} GiB: ~{plan['need_gib']:.1f} GiB "
              f"needed", flush=True)  # fmt: skip
    print(f"plan: actor.micro_batch_tokens {plan['micro_batch_tokens']}, actor.offload_optimizer "
          f"{plan['offload_optimizer']}", flush=True)  # fmt: skip
    return plan


def pass_flops(actor: Any, shape: Shape, sequences: list[Any]) -> float:
    """Model FLOPs of one forward over ``sequences`` as the actor lays them out now: every token through
    the language model, the scored response tokens through the head, one tower pass per clip per
    micro-batch (bench/gpu/flops.py)."""
    clips = []
    for mb in actor.micro_batches(sequences, actor.positions(sequences)):
        for i in sorted({sequences[i].prompt.sample_id: i for i in mb.indices}.values()):
            grid = sequences[i].prompt.vision.get("video_grid_thw")
            clips += [] if grid is None else [tuple(int(x) for x in row) for row in grid]
    lengths = [s.length for s in sequences]
    scored = sum(len(s.response_ids) for s in sequences)
    return sum(forward_flops(shape, lengths, scored, clips).values())


def padded_layout(actor: Any) -> None:
    """The actor's padded layout, as it runs with ``actor.padding_free: false``: padded micro-batches
    through transformers' SDPA attention, the tower one call per window."""
    actor.config = actor.config.model_copy(update={"padding_free": False})
    config = actor.model.config
    for part in (getattr(config, "text_config", None) or config, config.vision_config):
        part._attn_implementation = "sdpa"


def padded_steps(
    actor: Any, shape: Shape, prompts: list[Any], args: argparse.Namespace, measured: Measure, peak: float,
    algorithm: Any,
) -> dict[str, float]:  # fmt: skip
    """``args.padded_steps`` steps' scoring and update in the padded layout (the same sequences' model
    FLOPs over the padded run's time): ``gpu_actor_*_padded`` figures, the last step's, and the tower's
    attention calls in that layout."""
    from services.trainer.batch import TokenSequence

    padded_layout(actor)
    out: dict[str, float] = {}
    for step in range(args.padded_steps):
        answers = responses(actor.processor.tokenizer, args.prompts * args.n, args.response_tokens, step)
        sequences = [TokenSequence(prompts[i // args.n], answers[i]) for i in range(len(answers))]
        flops = pass_flops(actor, shape, sequences)
        old, seconds, _, _, _ = measured(lambda s=sequences: actor.log_probs(s))
        out.update(logprob_s_padded=seconds, logprob_mfu_padded=mfu(flops, seconds, peak))
        seconds, peak_gib, _ = measured_update(actor, sequences, old, algorithm, measured)
        out.update(update_s_padded=seconds, update_mfu_padded=mfu(3 * flops, seconds, peak))
        out["update_peak_memory_gib_padded"] = peak_gib
        print(f"padded step {step + 1}/{args.padded_steps}: " + ", ".join(f"{k} {v:.4g}" for k, v in out.items()),
              flush=True)  # fmt: skip
    calls = vision_forward(actor.model, prompts[0], measured.device)["vision_attention_calls"]
    out["vision_attention_calls_padded"] = calls
    return {f"gpu_actor_{k}": v for k, v in out.items()}


def offload_round_trip(actor: Any, device: torch.device) -> dict[str, float]:
    """What ``Actor.offload()`` (around a colocated engine's generation) parks on the host, by kind, and
    the device memory it hands back (0 on the CPU, where host and device are one memory), then the
    reload: the figures the issue asks the script to print whenever it runs on a GPU."""
    allocated = (lambda: torch.cuda.memory_allocated(device)) if device.type == "cuda" else (lambda: 0)
    before = allocated()
    parked = actor.offload()
    freed = before - allocated()
    back = actor.reload()
    figures = {f"gpu_actor_offload_{kind}_gib": n / GiB for kind, n in parked.items()}
    figures["gpu_actor_offload_device_freed_gib"] = freed / GiB
    figures["gpu_actor_offload_reloaded_gib"] = back / GiB
    print(
        "offload: parked "
        + ", ".join(f"{k} {v / GiB:.3f} GiB" for k, v in parked.items())
        + f"; the device got {freed / GiB:.3f} GiB back; reloaded {back / GiB:.3f} GiB",
        flush=True,
    )
    return figures


def step_arguments(description: str) -> argparse.ArgumentParser:
    """The arguments every actor step script shares (this one and ``bench/gpu/lora_steps.py``): the
    model, the steps' prompts and responses, the micro-batch, the dry run and the results file."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--n", type=int, default=4, help="responses per prompt")
    parser.add_argument("--frames", type=int, default=32)
    parser.add_argument("--side", type=int, default=448, help="frame width and height (a multiple of 28)")
    parser.add_argument("--response-tokens", type=int, default=512)
    parser.add_argument("--micro-batch-tokens", type=int, default=16384)
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny model: the same code path")
    parser.add_argument("--out", type=Path, required=True, help="JSON file the figures are merged into")
    return parser


def parse_step_arguments(parser: argparse.ArgumentParser) -> argparse.Namespace:
    args = parser.parse_args()
    if not args.dry_run and not torch.cuda.is_available():
        parser.error("no CUDA device here: give --dry-run for the CPU path")
    return args


def write_figures(path: Path, figures: dict[str, float], **extra: object) -> None:
    """``figures`` printed and merged into the results file at ``path`` (with ``extra`` entries)."""
    from bench.results import write_atomic

    for key, value in figures.items():
        print(f"{key}: {value:.4f}")
    old = json.loads(path.read_text()) if path.exists() else {}
    write_atomic(path, {**old, **figures, **extra})


def main() -> None:
    parser = step_arguments(__doc__.splitlines()[0])
    parser.add_argument("--lr", type=float, default=1e-6, help="the shipped recipes' lr")
    parser.add_argument("--bucket-mb", type=float, default=512.0, help="rollout.weight_bucket_mb's default")
    parser.add_argument(
        "--padded-steps", type=int, default=1,
        help="steps in the padded layout after the packed ones, for the *_padded figures (the kernels are "
        "warm by then)",
    )  # fmt: skip
    args = parse_step_arguments(parser)
    from bench.gpu.results import LOAD_KEY
    from bench.results import machine_load

    start = machine_load()  # the script's first figure-taking step: its load record begins here
    write_figures(args.out, run(args), **{LOAD_KEY: {"start": start}})


if __name__ == "__main__":
    main()
