"""Rollout benchmark: one batch from cached clips vs the same videos decoded on the fly, engine
start-up, and weight-push time, on a tiny Qwen2.5-VL checkpoint (CPU).

    $VENV/bin/python -m bench.bench_rollout [--clips 8] [--seconds 10] [--repeats 3]

Both rollouts use the same engine, batch, sampling and (bit-identical) frames; the only difference is
where the frames come from: the frame store (memory-mapped uint8) or decode → sample → resize now.
vLLM's prefix, encoder and processed-input caches are reset before every measured rollout, and
responses have a fixed length (``ignore_eos``), so both sides generate the same number of tokens.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from bench.results import LoadWatch, add_load_argument, record
from services.common.frames import FrameStore, VideoParams, clip_key, decode_clip
from services.common.frames.hashing import content_hash
from services.common.frames.synthetic import make_video
from services.common.tiny_models import build_tiny_model
from services.rollout.config import EngineConfig, RolloutConfig
from services.rollout.engine import RolloutEngine
from services.rollout.samples import RolloutSample
from services.rollout.sources import RealtimeSource

FAMILY = "qwen2_5_vl"


def prepare_clips(root: Path, count: int, seconds: float, params: VideoParams):
    store = FrameStore(root / "frames")
    clips = {}
    for i in range(count):
        # distinct videos (different sizes), 480p-ish, 30 fps, a keyframe per second
        video = make_video(root / f"clip{i}.mp4", seconds=seconds, fps=30, width=640 - 16 * i, height=480)
        key = clip_key(content_hash(video), params)
        frames, meta = decode_clip(video, params)
        store.put(key, frames, meta)
        clips[key] = (video, params)
    return store, clips


def timed_rollout(engine: RolloutEngine, samples: list[RolloutSample], max_tokens: int) -> tuple[float, int]:
    engine.reset_caches()
    started = time.perf_counter()
    groups = engine.rollout(samples, max_tokens=max_tokens, ignore_eos=True)
    elapsed = time.perf_counter() - started
    return elapsed, sum(len(r.token_ids) for g in groups for r in g.responses)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clips", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pushes", type=int, default=5)
    add_load_argument(parser)
    args = parser.parse_args()
    watch = LoadWatch.begin("bench_rollout", args.allow_load)

    # 2 fps, at most 16 frames, frames within 64 merged patches (50,176 px): ~500 video tokens a clip
    params = VideoParams(
        family=FAMILY, fps=2.0, max_frames=16, min_pixels=16 * 28 * 28, max_pixels=64 * 28 * 28
    )
    config = RolloutConfig(
        n=args.n,
        max_tokens=args.max_tokens,
        engine=EngineConfig(dtype="float32", max_model_len=4096, kv_cache_gib=0.5),
    )
    with tempfile.TemporaryDirectory(prefix="bench-rollout-") as tmp:
        root = Path(tmp)
        model = build_tiny_model(FAMILY, root / "model", seed=0)
        print(f"preparing {args.clips} clips of {args.seconds:.0f} s ...", flush=True)
        store, clips = prepare_clips(root, args.clips, args.seconds, params)
        samples = [
            RolloutSample(
                id=f"s{i}",
                prompt="What happens in the video?",
                videos=(key,),
                video_params=params.model_dump(),
            )
            for i, key in enumerate(clips)
        ]
        engine = RolloutEngine(model, config, source=store)
        try:
            cached_source, realtime_source = store, RealtimeSource(clips)
            timed_rollout(engine, samples, args.max_tokens)  # warm-up (first-call allocations)
            cached, realtime = [], []
            for _ in range(args.repeats):  # interleaved, so drift on a shared machine hits both sides
                engine.source = cached_source
                cached.append(timed_rollout(engine, samples, args.max_tokens))
                engine.source = realtime_source
                realtime.append(timed_rollout(engine, samples, args.max_tokens))
            tokens = cached[0][1]
            assert all(t == tokens for _, t in cached + realtime), "both sides must generate the same tokens"
            cached_s = statistics.median(s for s, _ in cached)
            realtime_s = statistics.median(s for s, _ in realtime)

            from transformers import AutoModelForImageTextToText

            state = AutoModelForImageTextToText.from_pretrained(model).state_dict()
            pushes = {transport: [] for transport in ("file", "bytes")}
            for _ in range(args.pushes):
                for transport, times in pushes.items():
                    times.append(engine.push_weights(state, transport=transport))
            push_file = statistics.median(pushes["file"])
            push_bytes = statistics.median(pushes["bytes"])
            startup = engine.startup_s
        finally:
            engine.shutdown()

    weights_mb = sum(t.numel() * t.element_size() for t in state.values()) / 1e6
    print(f"\nbatch: {args.clips} clips × n={args.n} × {args.max_tokens} tokens = {tokens} tokens")
    print(f"{'':28}{'cached':>12}{'realtime':>12}")
    print(f"{'rollout wall time (s)':28}{cached_s:>12.2f}{realtime_s:>12.2f}")
    print(f"{'tokens/s':28}{tokens / cached_s:>12.1f}{tokens / realtime_s:>12.1f}")
    print(f"speed-up cached vs realtime: {realtime_s / cached_s:.2f}x")
    print(f"engine start-up: {startup:.1f} s")
    print(
        f"weight push ({weights_mb:.1f} MB fp32): file {push_file * 1000:.0f} ms, bytes {push_bytes * 1000:.0f} ms"
    )
    record(
        {
            "rollout_cached_vs_realtime_speedup": round(realtime_s / cached_s, 3),
            "rollout_tokens_per_s_cached": round(tokens / cached_s, 1),
            "rollout_tokens_per_s_realtime": round(tokens / realtime_s, 1),
            "engine_startup_s": round(startup, 2),
            "weight_push_s": round(push_file, 4),
            "weight_push_bytes_s": round(push_bytes, 4),
        },
        watch,
    )


if __name__ == "__main__":
    main()
