"""Weight sync benchmark: a full state-dict push vs a bucketed one into a running vLLM engine, with the
peak extra memory (RSS of this process and the engine's processes, plus /dev/shm, above what they
held before) of each.

    $VENV/bin/python -m bench.bench_weight_sync [--family qwen2_5_vl] [--size tiny] [--bucket-mb 1]
                                                [--pushes 3] [--allow-load]

``--size``: the random-weight checkpoint's size (``make-tiny-model --size``: tiny, or a real model's
dimensions, which needs the host memory for three copies of the model: this process's, the engine's
and the full push's file; ``--family qwen2_vl --size 2b``, 4.9 GB in bf16, fits a 24 GiB host). The full push
is today's driver path (``actor.full_state_dict`` then a safetensors file the workers reload); the
bucketed one is ``rollout.weight_bucket_mb`` (``services.trainer.weight_buckets``). Both push the same
weights, and the engine's logprobs are not compared here (tests/rollout/test_weight_sync.py does that).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import torch

from bench.results import LoadWatch, add_load_argument, record
from services.common.tiny_models import build_tiny_model
from services.rollout.config import EngineConfig, RolloutConfig
from services.rollout.engine import RolloutEngine
from services.rollout.sources import RealtimeSource
from services.trainer.weight_buckets import weight_buckets


def tree_rss() -> int:
    """Resident bytes of this process and all of its children (the engine core and its workers), plus
    what /dev/shm holds (the full push's safetensors file lives there, outside any RSS)."""
    me = psutil.Process()
    total = shutil.disk_usage("/dev/shm").used if Path("/dev/shm").is_dir() else 0
    for proc in (me, *me.children(recursive=True)):
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            continue
    return total


def peak_extra_rss(action: Callable[[], float], interval_s: float = 0.005) -> tuple[float, int]:
    """(what ``action`` returns, the highest tree RSS while it ran minus the RSS before it)."""
    before = tree_rss()
    peak = before
    done = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, tree_rss())
            time.sleep(interval_s)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        result = action()
    finally:
        done.set()
        thread.join()
    return result, max(0, max(peak, tree_rss()) - before)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="qwen2_5_vl", help="model family (make-tiny-model --family)")
    parser.add_argument("--size", default="tiny", help="checkpoint size (make-tiny-model --size)")
    parser.add_argument("--bucket-mb", type=float, default=1.0, help="rollout.weight_bucket_mb")
    parser.add_argument("--pushes", type=int, default=3)
    add_load_argument(parser)
    args = parser.parse_args()
    watch = LoadWatch.begin("bench_weight_sync", args.allow_load)
    with tempfile.TemporaryDirectory(prefix="bench-wsync-") as tmp:
        path = build_tiny_model(args.family, Path(tmp) / "model", size=args.size)
        from transformers import AutoModelForImageTextToText

        dtype = torch.float32 if args.size == "tiny" else torch.bfloat16
        model = AutoModelForImageTextToText.from_pretrained(path, dtype=dtype).eval()
        config = RolloutConfig(
            n=1,
            max_tokens=4,
            engine=EngineConfig(
                dtype=str(dtype).removeprefix("torch."), max_model_len=2048, kv_cache_gib=0.25
            ),
        )
        with RolloutEngine(str(path), config, source=RealtimeSource({})) as engine:
            stream = weight_buckets(model, dtype, args.bucket_mb)
            weights_mb = stream.nbytes / 2**20
            full_s, full_rss, bucket_s, bucket_rss = [], [], [], []
            for _ in range(args.pushes):
                seconds, extra = peak_extra_rss(lambda: engine.push_weights(model.state_dict()))
                full_s.append(seconds)
                full_rss.append(extra)
                seconds, extra = peak_extra_rss(lambda: engine.push_weights(stream))
                bucket_s.append(seconds)
                bucket_rss.append(extra)
    # the default family's keys carry the size only (tiny: none); another family's carry its name too
    suffix = ("" if args.family == "qwen2_5_vl" else f"_{args.family}") + (
        "" if args.size == "tiny" else f"_{args.size}"
    )
    figures = {
        f"weight_sync_s_full{suffix}": statistics.median(full_s),
        f"weight_sync_s_bucketed{suffix}": statistics.median(bucket_s),
        f"weight_sync_peak_extra_rss_mb_full{suffix}": max(full_rss) / 2**20,
        f"weight_sync_peak_extra_rss_mb_bucketed{suffix}": max(bucket_rss) / 2**20,
    }
    figures = {k: round(v, 4) for k, v in figures.items()}
    print(
        f"model {args.family} {args.size} ({weights_mb:.1f} MiB in {dtype}), buckets of {args.bucket_mb:g} MiB"
    )
    for key, value in figures.items():
        print(f"  {key}: {value}")
    record(figures, watch)


if __name__ == "__main__":
    main()
