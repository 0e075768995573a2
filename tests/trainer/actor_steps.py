"""What actor tests build without a rollout engine: a tiny Qwen2.5-VL checkpoint, one real clip in a
frame store, and response groups written by hand (token ids the engine could have sampled), so the
FSDP and Ray actor groups can be compared with the single-process one on identical steps."""

from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from services.common.frames import FrameStore, VideoParams, clip_key, decode_clip
from services.common.frames.hashing import content_hash
from services.common.frames.synthetic import make_video
from services.common.tiny_models import build_tiny_model
from services.rollout.checkpoint import Checkpoint
from services.rollout.config import RolloutConfig
from services.rollout.samples import RolloutGroup, RolloutResponse, RolloutSample
from services.trainer.config import TrainConfig
from services.trainer.group import LocalActorGroup
from services.trainer.sequences import prompt_inputs
from services.trainer.update import SequenceTargets

FAMILY = "qwen2_5_vl"
# 8 frames of 56x56 (grid (4, 4, 4)): the temporal extent exceeds the spatial one, where the HF and
# vLLM M-RoPE rules differ, so the actor must be scoring with vLLM's positions.
CLIP = dict(seconds=2.0, fps=30, width=320, height=240)
PARAMS = VideoParams(family=FAMILY, fps=None, nframes=8, min_pixels=4 * 28**2, max_pixels=6 * 28**2)


@dataclass(frozen=True)
class World:
    model: Path
    frames: Path
    samples: tuple[RolloutSample, ...]
    output: Path

    @property
    def store(self) -> FrameStore:
        return FrameStore(self.frames)


def build_world(root: Path, samples: int = 2) -> World:
    """A tiny checkpoint, one decoded clip and ``samples`` prompts asking about it."""
    model = build_tiny_model(FAMILY, root / "model", seed=0)
    store = FrameStore(root / "frames")
    video = make_video(root / "clip.mp4", **CLIP)
    key = clip_key(content_hash(video), PARAMS)
    frames, meta = decode_clip(video, PARAMS)
    store.put(key, frames, meta)
    made = tuple(
        RolloutSample(
            id=f"s{i}",
            prompt=f"Question {i}: what colour is the moving square?",
            videos=(key,),
            clip_params=(PARAMS.canonical(),),
            offline_output=f"<answer>{'ABCD'[i % 4]}</answer>",
        )
        for i in range(samples)
    )
    return World(model=model, frames=store.root, samples=made, output=root / "out")


IMAGE_SIZE = (56, 84)  # (H, W): 4 x 6 patches of 14, 6 image tokens after the 2 x 2 merge


def with_modalities(world: World) -> World:
    """``world`` with two still images in its store and its samples replaced by: two image questions,
    two video questions (the first two video samples) and one text-only question, in that order."""
    store = world.store
    made = []
    for i in range(2):
        key = f"still-{i}"
        pixels = torch.randint(
            0, 256, (1, *IMAGE_SIZE, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(i)
        )
        # single-frame entries carry no decode parameters (the processor sizes them)
        store.put(key, pixels, {"source": "synthetic", "params": {}})
        made.append(
            RolloutSample(id=f"img{i}", prompt=f"Image {i}: what is in the picture?", images=(key,),
                          offline_output="<answer>A</answer>")
        )  # fmt: skip
    made += list(world.samples[:2])
    made.append(
        RolloutSample(id="text", prompt="Which letter comes after A?", offline_output="<answer>B</answer>")
    )
    return dataclasses.replace(world, samples=tuple(made))


def train_config(world: World, *, batch_size: int = 2, **actor: Any) -> TrainConfig:
    """fp32, AdamW with eps 1: its first step is lr·g/(|g|+1) ≈ lr·g, not lr·sign(g), so equal weights
    after a step mean equal gradients (scale included); no clipping to hide a scale error either."""
    optim = {"lr": 0.1, "eps": 1.0, "weight_decay": 0.0, "grad_clip": None}
    return TrainConfig.model_validate(
        {
            "data": {"train_files": ["unused.jsonl"], "batch_size": batch_size},
            "actor": {"model_path": str(world.model), "compute_dtype": "float32", "optim": optim, **actor},
            "rollout": {"n": 2, "max_tokens": 12, "engine": {"dtype": "float32"}},
            "trainer": {"output_dir": str(world.output), "total_steps": 4},
        }
    )


def make_groups(
    world: World, config: RolloutConfig, lengths: list[list[int]], samples: list[RolloutSample] | None = None
) -> list[RolloutGroup]:
    """One group per sample (``samples``, default the world's first ``len(lengths)``) with responses of
    the given lengths:
    random ordinary tokens (no vision placeholder or special token), the prompt ids exactly as the
    processor makes them."""
    checkpoint = Checkpoint.load(world.model)
    special = set(checkpoint.tokenizer.all_special_ids) | set(checkpoint.placeholder_token_ids)
    ordinary = [i for i in range(len(checkpoint.tokenizer)) if i not in special]
    generator = torch.Generator().manual_seed(0)
    groups = []
    for sample, row in zip(samples or world.samples[: len(lengths)], lengths, strict=True):
        prompt = prompt_inputs(sample, checkpoint, world.store, config).input_ids
        responses = [
            RolloutResponse(
                token_ids=[ordinary[int(j)] for j in torch.randint(len(ordinary), (n,), generator=generator)],
                logprobs=None,
                text="",
                finish_reason="length",
                weight_version=0,
                weight_versions=((0, 0),),
            )
            for n in row
        ]
        groups.append(RolloutGroup(sample_id=sample.id, prompt_token_ids=prompt, responses=responses))
    return groups


def advantages(groups: list[RolloutGroup]) -> list[torch.Tensor]:
    """A distinct constant advantage per response (+1.5, -0.5, +1.0, -1.0, ...), every token alike."""
    lengths = [len(r.token_ids) for g in groups for r in g.responses]
    return [torch.full((n,), (1.5, -0.5, 1.0, -1.0)[i % 4]) for i, n in enumerate(lengths)]


UPDATE = dict(kl_coef=0.0, entropy_coef=0.0, temperature=1.0, offline_term="likelihood")


def run_step(
    world: World, config: TrainConfig, groups: list[RolloutGroup], samples: list[RolloutSample] | None = None
) -> dict[str, Any]:
    """One on-policy step on this rank (the only one, or one of an initialised process group): old
    log-probs from their own pass, then the update. Returns what the comparisons need; the full
    weights (before and after) on rank 0 only."""
    group = LocalActorGroup(config, str(world.model), world.store, config.effective_rollout())
    try:
        # the parameter elements this rank stores (its shards under FSDP)
        local = sum(
            (p.to_local() if hasattr(p, "to_local") else p).numel() for p in group.actor.model.parameters()
        )
        initial = {k: v.clone() for k, v in group.state_dict().items()}
        group.load_batch(samples or list(world.samples[: len(groups)]), groups)
        actor = group.actor
        micro = actor.micro_batches(group.sequences, actor.positions(group.sequences))
        ran = actor.aligned(micro)
        old = group.log_probs(temperature=1.0)
        every = advantages(groups)
        share = group.share
        metrics = group.update(
            [SequenceTargets(every[i], o) for i, o in zip(share, old, strict=True)], **UPDATE
        )
        final = {k: v.clone() for k, v in group.state_dict().items()}
    finally:
        group.shutdown()
    return {
        "initial": initial, "final": final, "old": old, "metrics": metrics,
        "micro_batches": len(micro), "forwards": len(ran), "local_params": local, "share": share,
    }  # fmt: skip


def in_step_order(*ranks: dict[str, Any], key: str = "old") -> list[Any]:
    """The ranks' per-sequence results (``key``) put back in the step's order by the shares they held
    (whole response groups balanced by tokens, not contiguous halves)."""
    placed = {i: value for r in ranks for i, value in zip(r["share"], r[key], strict=True)}
    return [placed[i] for i in range(len(placed))]


def spawn_ranks(fn: Any, args: tuple, nprocs: int, timeout_s: float, what: str = "the ranks") -> None:
    """Run ``fn(rank, *args)`` in ``nprocs`` spawned processes and wait for all of them; a test failure
    naming ``what`` when they do not finish within ``timeout_s`` (every process left is killed)."""
    import time

    import pytest

    context = torch.multiprocessing.start_processes(
        fn, args=args, nprocs=nprocs, join=False, start_method="spawn"
    )
    try:
        deadline = time.monotonic() + timeout_s
        while not context.join(timeout=5):
            if time.monotonic() > deadline:
                pytest.fail(f"{what} did not finish within {timeout_s:.0f} s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
                process.join(10)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fsdp_rank(
    rank: int, world_size: int, port: int, world: World, cases: dict[str, tuple], out: Path
) -> None:
    """A spawned FSDP rank: ``run_step`` for every case (``(config, groups)`` or ``(config, groups,
    samples)``), results to ``out/<case>-rank<r>.pt``. A hang
    becomes an error after two minutes (the gloo timeout), not a stuck test."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=120))
    try:
        for name, case in cases.items():
            torch.save(run_step(world, *case), out / f"{name}-rank{rank}.pt")
    finally:
        dist.destroy_process_group()
