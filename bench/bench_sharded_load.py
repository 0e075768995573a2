"""Sharded initialisation (issue 40 §1): the peak memory of each rank while it sets up the policy, with
one rank and with two, on one random-weight checkpoint past 1B parameters.

    $VENV/bin/python -m bench.bench_sharded_load [--family qwen2_vl] [--size 1b] [--compare-broadcast]
                                                  [--allow-load]

Each rank is a spawned process (gloo on CPU, as the trainer's ranks) that builds the trained policy
(:class:`services.trainer.actor.PolicyModel`, fp32 master weights) and exits. This process reads every
rank's ``RssAnon`` from ``/proc/<pid>/status`` every 5 ms while the rank sets up: anonymous memory
only, the rank's own allocations; file pages of the memory-mapped checkpoint are left out (they are the
page cache's, shared by the ranks and given back under pressure), which ``VmHWM`` or ``VmRSS`` would
count. Reading from outside the rank misses nothing its GIL would hide; an allocation large enough to
matter (100 MB) takes longer than 5 ms to fill, so its peak is seen.

``--compare-broadcast`` also times the road not taken: rank 0 reads each whole tensor and broadcasts it,
each rank keeping its slice (what ``set_model_state_dict(broadcast_from_rank0=True)`` does).

Figures: ``init_peak_rss_gib_per_rank_{1,2}`` (the highest ``RssAnon`` of any rank during setup),
``init_seconds_{1,2}``, and beside them ``init_model_gib`` (the policy's weights in fp32) and
``init_largest_tensor_gib``.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

GIB = 2**30
POLL_S = 0.005


def rss_anon(pid: int | str = "self") -> int:
    """Resident anonymous bytes of a process (``RssAnon`` in ``/proc/<pid>/status``); 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        return 0
    raise RuntimeError(f"/proc/{pid}/status has no RssAnon line")


@dataclass(frozen=True)
class RankSetup:
    """One rank's setup: ``RssAnon`` before it began (imports and process group done), the highest seen
    while it ran, after it; its seconds."""

    rank: int
    before: int
    peak: int
    after: int
    seconds: float

    @property
    def growth(self) -> int:
        return self.peak - self.before


@dataclass(frozen=True)
class Checkpoint:
    """What the bound is made of: the model's weights at the dtype a rank holds them, the largest one."""

    parameters: int
    model_bytes: int
    largest_bytes: int


def checkpoint_size(path: Path, dtype: torch.dtype = torch.float32) -> Checkpoint:
    """Parameter count, bytes in ``dtype`` and the largest tensor's bytes, from the safetensors header."""
    from services.trainer.weight_files import WeightFiles

    with WeightFiles(path) as files:
        counts = [math.prod(files.shape(k)) for k in files.tensor_names()]
    size = dtype.itemsize
    return Checkpoint(sum(counts), sum(counts) * size, max(counts) * size)


def _rank(rank: int, world_size: int, model: str, method: str, out: Path) -> None:
    """A spawned rank: process group, then ``before`` → setup → ``after`` markers for the watcher."""
    torch.set_num_threads(1)
    import torch.distributed as dist

    from services.trainer import actor
    from services.trainer.config import ActorConfig

    if method == "broadcast":
        actor.load_shards = broadcast_shards  # type: ignore[assignment]
    store = f"file://{out / 'store'}"
    dist.init_process_group(
        "gloo", init_method=store, rank=rank, world_size=world_size, timeout=timedelta(seconds=600)
    )
    try:
        config = ActorConfig(model_path=model, compute_dtype="float32", param_dtype="float32")
        dist.barrier()
        (out / f"before-{rank}").write_text(str(rss_anon()))
        start = time.perf_counter()
        policy = actor.PolicyModel(config, trainable=True, device="cpu")
        seconds = time.perf_counter() - start
        (out / f"after-{rank}").write_text(json.dumps([rss_anon(), seconds]))
        del policy
        dist.barrier()
    finally:
        dist.destroy_process_group()


def broadcast_shards(model: Any, path: str | Path, device: torch.device) -> None:
    """The alternative to :func:`services.trainer.sharded_load.load_shards`, same arguments: rank 0 reads
    each whole tensor and casts it; a broadcast gives it to every rank, which keeps its slice."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    from services.trainer.sharded_load import distinct_tensors
    from services.trainer.weight_files import WeightFiles, load_names

    buffers = dict(model.named_buffers())
    model.to_empty(device=device)
    rank = dist.get_rank()
    with torch.no_grad(), WeightFiles(path) as files:
        for name, value in model.named_buffers():
            value.copy_(buffers[name])
        names = load_names(model, files.tensor_names())
        for keys, target in distinct_tensors(model):
            key = next(names[k] for k in keys if k in names)
            full = (
                files.read(key).to(target.dtype)
                if rank == 0
                else torch.empty(target.shape, dtype=target.dtype)
            )
            dist.broadcast(full, src=0)
            if isinstance(target, DTensor):
                local = target.to_local()
                part, offset = compute_local_shape_and_global_offset(
                    target.shape, target.device_mesh, target.placements
                )
                if local.numel():
                    local.copy_(full[tuple(slice(o, o + n) for o, n in zip(offset, part, strict=True))])
            else:
                target.copy_(full)
            del full


def measure_setup(
    model: Path, world_size: int, method: str = "slices", timeout_s: float = 900.0
) -> list[RankSetup]:
    """Spawn ``world_size`` ranks that set up the policy from ``model`` and watch their ``RssAnon``
    from here every 5 ms between their ``before`` and ``after`` markers."""
    with tempfile.TemporaryDirectory(prefix="sharded-load-") as tmp:
        out = Path(tmp)
        context = torch.multiprocessing.start_processes(
            _rank, args=(world_size, str(model), method, out), nprocs=world_size, join=False,
            start_method="spawn",
        )  # fmt: skip
        pids = context.pids()
        peaks = [0] * world_size
        deadline = time.monotonic() + timeout_s
        try:
            while not context.join(timeout=0):
                for r, pid in enumerate(pids):
                    if (out / f"before-{r}").exists() and not (out / f"after-{r}").exists():
                        peaks[r] = max(peaks[r], rss_anon(pid))
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the {world_size} ranks did not set up within {timeout_s:.0f} s")
                time.sleep(POLL_S)
        finally:
            for process in context.processes:
                if process.is_alive():
                    process.kill()
                    process.join(10)
        found = []
        for r in range(world_size):
            after, seconds = json.loads((out / f"after-{r}").read_text())
            before = int((out / f"before-{r}").read_text())
            found.append(RankSetup(r, before, max(peaks[r], after), after, seconds))
        return found


def main() -> None:
    from bench.results import LoadWatch, add_load_argument, record
    from services.common.tiny_models import build_tiny_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="qwen2_vl", help="model family (make-tiny-model --family)")
    parser.add_argument("--size", default="1b", help="checkpoint size (make-tiny-model --size)")
    parser.add_argument("--compare-broadcast", action="store_true", help="also time rank 0 broadcasting")
    add_load_argument(parser)
    args = parser.parse_args()
    watch = LoadWatch.begin("bench_sharded_load", args.allow_load)
    print(
        f"load at the start: {watch.start['load1']}/{watch.start['load5']}/{watch.start['load15']}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="bench-sharded-load-") as tmp:
        path = build_tiny_model(args.family, Path(tmp) / "model", size=args.size)
        size = checkpoint_size(path)
        print(
            f"{args.family} {args.size}: {size.parameters:,} parameters, {size.model_bytes / GIB:.2f} GiB in fp32"
        )
        runs = {(1, "slices"): measure_setup(path, 1), (2, "slices"): measure_setup(path, 2)}
        if args.compare_broadcast:
            runs[2, "broadcast"] = measure_setup(path, 2, "broadcast")
    for (world, method), ranks in runs.items():
        for r in ranks:
            print(
                f"  {world} rank(s), {method}: rank {r.rank} RssAnon {r.before / GIB:.2f} GiB before, peak "
                f"{r.peak / GIB:.2f} (+{r.growth / GIB:.2f}), {r.after / GIB:.2f} after; {r.seconds:.1f} s"
            )
    suffix = "" if (args.family, args.size) == ("qwen2_vl", "1b") else f"_{args.family}_{args.size}"
    figures = {
        f"init_model_gib{suffix}": size.model_bytes / GIB,
        f"init_largest_tensor_gib{suffix}": size.largest_bytes / GIB,
    }
    for (world, method), ranks in runs.items():
        tag = f"{world}{'' if method == 'slices' else '_' + method}{suffix}"
        figures[f"init_peak_rss_gib_per_rank_{tag}"] = max(r.peak for r in ranks) / GIB
        figures[f"init_seconds_{tag}"] = max(r.seconds for r in ranks)
    figures = {k: round(v, 3) for k, v in figures.items()}
    for key, value in figures.items():
        print(f"  {key}: {value}")
    ratio = (
        figures[f"init_peak_rss_gib_per_rank_2{suffix}"] / figures[f"init_peak_rss_gib_per_rank_1{suffix}"]
    )
    print(f"  two ranks' peak / one rank's: {ratio:.2f} (target <= 0.65)")
    record(figures, watch)


if __name__ == "__main__":
    main()
