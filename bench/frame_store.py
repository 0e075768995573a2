"""Frame store benchmarks: cached load vs decode, worker scaling, bytes per frame, decoders.

    python -m bench.frame_store            # all, ~5 minutes on 2 cores
    python -m bench.frame_store --quick    # smaller clips, for a smoke run

Side by side in one run; figures go to bench/results.json:
  cache_load_speedup       decode+sample+resize time ÷ cached load time (60 s 720p, 64 frames)
  preprocess_scaling_2w    clips/s with 2 worker processes ÷ with 1 (one decode thread each)
  preprocess_scaling_2w_vs_best_1w   ÷ the better of 1 worker × 1 thread and 1 worker × 2 threads
  cache_bytes_vs_float32   stored bytes per frame ÷ float32 bytes per frame
  machine_parallel_scaling_2p   pure-CPU 2-process speedup of this machine (the ceiling for the pool)
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bench.results import LoadWatch, add_load_argument, record
from services.common.frames import FrameStore, VideoParams, clip_key, decode_clip
from services.common.frames.hashing import content_hash
from services.common.frames.synthetic import make_video

CACHE = Path(os.environ.get("REELRL_BENCH_CACHE", Path.home() / ".cache" / "reelrl" / "bench"))


def clip(name: str, seconds: float, width: int, height: int) -> Path:
    path = CACHE / f"{name}.mp4"
    if not path.exists():
        print(f"  making {path.name} ({seconds:g} s {width}x{height}) ...", flush=True)
        make_video(path, seconds=seconds, fps=30, width=width, height=height, gop_seconds=None)
    return path


def median_time(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_cache_load(seconds: float, repeat: int) -> dict[str, float]:
    video = clip(f"h264_{seconds:g}s_720p", seconds, 1280, 720)
    params = VideoParams(max_frames=64)  # 2 fps capped at 64, Qwen2.5-VL default pixel budget
    with tempfile.TemporaryDirectory() as tmp:
        store = FrameStore(tmp)
        frames, meta = decode_clip(video, params)
        key = clip_key(content_hash(video), params)
        store.put(key, frames, meta)
        decode_s = median_time(lambda: decode_clip(video, params), repeat)
        # Full read (no lazy mapping) so the comparison is bytes in memory either way.
        load_s = median_time(lambda: store.load(key, params, mmap=False), repeat * 5)
        mmap_s = median_time(lambda: store.load(key, params)[0].clone(), repeat * 5)
        frames = store.load(key)[0]
        per_frame = (store.path_for(key) / "frames.npy").stat().st_size / frames.shape[0]
    float32_per_frame = frames[0].numel() * 4
    print(f"cache load, {seconds:g} s 720p → {tuple(frames.shape)}:")
    print(f"  decode+sample+resize {decode_s:.3f} s | cached load {load_s * 1e3:.1f} ms "
          f"| mmap + copy {mmap_s * 1e3:.1f} ms | speedup {decode_s / load_s:.0f}x")  # fmt: skip
    print(f"  bytes/frame {per_frame:,.0f} uint8 vs {float32_per_frame:,} float32 "
          f"→ {per_frame / float32_per_frame:.3f}")  # fmt: skip
    return {
        "cache_load_speedup": round(decode_s / load_s, 1),
        "cache_decode_s": round(decode_s, 3),
        "cache_load_ms": round(load_s * 1e3, 2),
        "cache_bytes_per_frame": round(per_frame),
        "cache_bytes_vs_float32": round(per_frame / float32_per_frame, 4),
    }


def bench_decoders(seconds: float) -> dict[str, float]:
    video = clip(f"h264_{seconds:g}s_480p", seconds, 854, 480)
    params = VideoParams(max_frames=64)
    out = {}
    for name in ("decord", "pyav"):
        out[name] = median_time(lambda n=name: decode_clip(video, params, decoders=[n]), 3)
    print(f"decoders, {seconds:g} s 480p, 64 frames: decord {out['decord']:.2f} s | pyav {out['pyav']:.2f} s")
    return {"decoder_pyav_vs_decord": round(out["pyav"] / out["decord"], 2)}


def _run_pool(videos: list[Path], workers: int, threads: int) -> float:
    """Clips per second of a fresh embedded store with ``workers`` processes × ``threads``."""
    from sqlalchemy import func, select

    from services.common.db import FrameClip, session_scope
    from services.common.settings import reset_settings_cache
    from services.preprocess.dispatch import run_preprocess

    with tempfile.TemporaryDirectory() as home:
        os.environ["REELRL_HOME"] = home
        os.environ["REELRL_DECODE_THREADS"] = str(threads)
        reset_settings_cache()
        dataset = Path(home) / "in.jsonl"
        dataset.write_text("".join(f'{{"videos": ["{v}"]}}\n' for v in videos))
        report = run_preprocess(
            dataset, Path(home) / "out.jsonl", VideoParams(max_frames=64), workers=workers
        )
        assert report.failed == 0, report.errors
        with session_scope() as session:
            first, last = session.execute(
                select(func.min(FrameClip.started_at), func.max(FrameClip.finished_at))
            ).one()
        # Busy span of the pool (first claim to last result): worker start-up is not throughput.
        return len(videos) / (last - first).total_seconds()


def _spin(n: int) -> float:
    t0 = time.perf_counter()
    total = 0
    for i in range(n):
        total += i * i
    return time.perf_counter() - t0


def machine_parallelism(n: int = 10_000_000) -> float:
    """How much faster 2 processes finish 2 units of pure CPU work than 1 process does (ideal 2.0).

    The ceiling for any 2-worker scaling on this machine at this moment; measured beside the pool runs.
    """
    import multiprocessing as mp

    one = statistics.median(_spin(n) for _ in range(3))
    with mp.get_context("fork").Pool(2) as pool:
        two = statistics.median(max(pool.map(_spin, [n, n])) for _ in range(3))
    return 2 * one / two


def bench_scaling(n_clips: int, seconds: float) -> dict[str, float]:
    base = clip(f"h264_{seconds:g}s_480p_pool", seconds, 854, 480)
    videos = []
    for i in range(n_clips):  # distinct bytes so nothing deduplicates: re-encode with a different crf
        path = CACHE / f"pool_{seconds:g}s_{i}.mp4"
        if not path.exists():
            make_video(path, seconds=seconds, fps=30, width=854, height=480, crf=20 + i, gop_seconds=None)
        videos.append(path)
    del base
    ceiling_before = machine_parallelism()
    one = _run_pool(videos, 1, 1)
    one_two = _run_pool(videos, 1, 2)
    two = _run_pool(videos, 2, 1)
    ceiling = (ceiling_before + machine_parallelism()) / 2
    print(f"pool, {n_clips} clips of {seconds:g} s 480p: 1w×1t {one:.2f} clips/s | 1w×2t {one_two:.2f} | "
          f"2w×1t {two:.2f} → 2w/1w {two / one:.2f}x, vs best single worker {two / max(one, one_two):.2f}x")  # fmt: skip
    print(f"  machine ceiling: 2 processes of pure CPU work run {ceiling:.2f}x as fast as 1 (ideal 2.00)")
    return {
        "preprocess_scaling_2w": round(two / one, 2),
        "preprocess_scaling_2w_vs_best_1w": round(two / max(one, one_two), 2),
        "preprocess_clips_per_s_2w": round(two, 3),
        "machine_parallel_scaling_2p": round(ceiling, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    add_load_argument(parser)
    args = parser.parse_args()
    watch = LoadWatch.begin("frame_store", args.allow_load)
    torch.set_num_threads(2)
    np.random.seed(0)
    CACHE.mkdir(parents=True, exist_ok=True)
    figures = {}
    figures.update(bench_cache_load(10 if args.quick else 60, 3))
    figures.update(bench_decoders(10 if args.quick else 60))
    figures.update(bench_scaling(4 if args.quick else 10, 5 if args.quick else 20))
    if not args.quick:
        record(figures, watch)
        print("recorded in bench/results.json")


if __name__ == "__main__":
    main()
