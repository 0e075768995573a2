"""Evaluation benchmark: the vanilla pipeline vs ReelRL's on an LVBench-shaped synthetic set (long
videos, many questions each), tiny Qwen2.5-VL on CPU, side by side in one run.

    $VENV/bin/python -m bench.bench_eval [--videos 3] [--seconds 120] [--questions 10] [--batch 8]

vanilla: the way lmms-eval runs. Each sample's video is decoded, sampled and resized by the reference
reader when the sample is reached (the frame store's own decode, so frames are bit-identical), and
samples go through synchronous ``LLM.generate`` in fixed batches; responses are scored at the end.
ours:    the eval pipeline (services/eval/pipeline.py): clips cached in the frame store, an IO pool
feeding a bounded queue, requests streamed into ``AsyncLLM`` with a concurrency limit, every sample
scored and written to the database as it finishes.

Both sides first answer one warm-up question about an extra video (kernel compilation and first-call
allocations), which the timed samples never touch. Both read the same LVBench-format annotations through the ``lvbench`` adapter (same prompts), use the
same engine settings and generate the same fixed number of tokens per answer (``ignore_eos``). Engine
start-up is not timed; preprocessing (decoding each video once into the store) is timed separately.
Writes ``eval_async_speedup`` (vanilla ÷ ours wall time), ``eval_samples_per_s`` (ours) and
``eval_first_result_s`` (ours: start → first scored sample) to bench/results.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.results import LoadWatch, add_load_argument, record

FAMILY = "qwen2_5_vl"


def make_lvbench(root: Path, videos: int, seconds: float, questions: int) -> Path:
    """Synthetic videos and a ``video_info.meta.jsonl`` in LVBench's official layout."""
    from services.common.frames.synthetic import make_video

    (root / "videos").mkdir(parents=True)
    lines = []
    for v in range(videos):
        key = f"vid{v:02d}"
        make_video(root / "videos" / f"{key}.mp4", seconds=seconds, fps=30, width=640, height=360)
        qa = [
            {"uid": str(q), "question": f"What happens at minute {q}?\n(A) red\n(B) green\n(C) blue\n(D) none",
             "answer": "ABCD"[q % 4], "question_type": ["event understanding"], "time_reference": ""}
            for q in range(questions)
        ]  # fmt: skip
        lines.append(json.dumps({"key": key, "type": "synthetic", "video_info": {}, "qa": qa}))
    (root / "video_info.meta.jsonl").write_text("\n".join(lines) + "\n")
    return root


def vanilla(
    model: Path, config, tasks, warmup, params, family: str, batch: int, max_tokens: int, repeats: int
) -> dict:
    """Decode on the fly with the reference reader; synchronous LLM.generate in fixed batches."""
    from services.eval.pipeline import rollout_sample
    from services.eval.scoring import score_one
    from services.rollout.engine import RolloutEngine
    from services.rollout.sources import RealtimeSource

    every = [*tasks, warmup]
    clips = {
        key: (path, params) for t in every for key, path in zip(t.planned.keys, t.planned.files, strict=True)
    }
    engine = RolloutEngine(model, config, source=RealtimeSource(clips))
    try:
        requests = [
            rollout_sample(
                t,
                t.adapter.prompt(t.sample, family),
                t.adapter.system_prompt(t.sample),
                t.adapter.assistant_prefix(t.sample),
            )
            for t in every
        ]
        # first-call allocations and kernel compilation, on a video the timed passes never see
        engine.rollout(requests[-1:] * batch, n=1, max_tokens=max_tokens, ignore_eos=True)
        requests, walls = requests[:-1], []
        for _ in range(repeats):
            engine.reset_caches()
            started = time.perf_counter()
            responses = []
            for i in range(0, len(requests), batch):
                groups = engine.rollout(requests[i : i + batch], n=1, max_tokens=max_tokens, ignore_eos=True)
                responses += [g.responses[0] for g in groups]
            scored = [
                score_one(
                    t.adapter, t.sample, r.text, family, assistant_prefix=t.adapter.assistant_prefix(t.sample)
                )
                for t, r in zip(tasks, responses, strict=True)
            ]
            walls.append(time.perf_counter() - started)
    finally:
        engine.shutdown()
    return {"wall_s": statistics.median(walls), "walls": walls, "scored": len(scored)}


async def ours(
    model: Path, config, tasks, warmup, store, family: str, concurrency: int, max_tokens: int, repeats: int
) -> dict:
    from services.eval.manifest import run_manifest
    from services.eval.pipeline import Pipeline
    from services.eval.store import open_run
    from services.rollout.async_engine import AsyncRolloutEngine

    manifest = run_manifest(str(model), "bench", family, config, False)
    sampling = {"max_tokens": max_tokens, "ignore_eos": True}
    engine = AsyncRolloutEngine(model, config, source=store)
    walls, firsts, written = [], [], []
    try:
        for attempt in range(repeats + 1):  # attempt 0 warms up on a video the timed passes never see
            run_id = f"bench-{attempt}"  # every pass writes all of its results afresh
            open_run(
                run_id, model=str(model), family=family, benchmarks=["lvbench"], identity={}, config={},
                manifest=manifest, output_dir="-",
            )  # fmt: skip
            await engine.engine.reset_encoder_cache()  # no pass reuses another's vision encodings
            first: list[float] = []
            started = time.perf_counter()
            pipeline = Pipeline(
                engine, run_id=run_id, run_manifest=manifest, family=family, thinking=False,
                concurrency=concurrency, io_threads=2, queue_size=2 * concurrency, sampling=sampling,
                on_result=lambda b, item, first=first, started=started: first or first.append(time.perf_counter() - started),
            )  # fmt: skip
            count = await pipeline.run([warmup] if attempt == 0 else tasks)
            if attempt:
                walls.append(time.perf_counter() - started)
                firsts.append(first[0])
                written.append(count)
    finally:
        await engine.aclose()
    return {
        "wall_s": statistics.median(walls),
        "walls": walls,
        "first_s": statistics.median(firsts),
        "written": min(written),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--videos", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--questions", type=int, default=10, help="questions per video")
    parser.add_argument("--frames", type=int, default=32, help="frames per clip")
    parser.add_argument("--batch", type=int, default=8, help="vanilla batch size (lmms-eval style)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per side (median reported)")
    parser.add_argument("--no-record", action="store_true", help="print only; leave bench/results.json alone")
    add_load_argument(parser)
    args = parser.parse_args()
    watch = LoadWatch.begin("bench_eval", args.allow_load)

    with tempfile.TemporaryDirectory(prefix="bench-eval-") as tmp:
        root = Path(tmp)
        os.environ["REELRL_HOME"] = str(root / "home")  # a private database and frame store
        from services.common.frames import FrameStore, decode_clip
        from services.common.settings import reset_settings_cache
        from services.common.tiny_models import build_tiny_model
        from services.eval.benchmarks import get_benchmark
        from services.eval.clips import ClipPlanner, clip_params
        from services.eval.pipeline import Task
        from services.rollout.config import EngineConfig, RolloutConfig

        reset_settings_cache()
        model = build_tiny_model(FAMILY, root / "model", seed=0)
        print(
            f"making {args.videos} videos of {args.seconds:.0f} s × {args.questions} questions ...",
            flush=True,
        )
        data = make_lvbench(root / "lvbench", args.videos + 1, args.seconds, args.questions)
        bench = get_benchmark("lvbench", data)
        samples = bench.load_checked(bench.find_annotations(data))
        # fixed frame count, small frames: the tiny model's time is not the point, the data path is
        params = clip_params(
            FAMILY,
            bench.video,
            {"nframes": args.frames, "min_pixels": 16 * 28 * 28, "max_pixels": 64 * 28 * 28},
        )
        store = FrameStore.from_settings()
        planned = ClipPlanner(store).plan(samples, data, params)
        tasks = [Task("lvbench", bench, p) for p in planned]
        # the warm-up question is about the last video, which the timed samples leave out
        warmup, tasks = tasks[-1], [t for t in tasks if t.planned.files != tasks[-1].planned.files]
        config = RolloutConfig(
            n=1, temperature=0.0, max_tokens=args.max_tokens,
            engine=EngineConfig(
                dtype="float32", max_model_len=4096, kv_cache_gib=0.5, enable_chunked_prefill=True,
                enable_prefix_caching=False, mm_processor_cache_gb=0,
            ),
        )  # fmt: skip

        started = time.perf_counter()
        for key, path in {
            k: f for t in [*tasks, warmup] for k, f in zip(t.planned.keys, t.planned.files, strict=True)
        }.items():
            store.put(key, *decode_clip(path, params))
        preprocess_s = time.perf_counter() - started

        print(f"vanilla: {len(tasks)} samples, batches of {args.batch} ...", flush=True)
        slow = vanilla(
            model, config, tasks, warmup, params, FAMILY, args.batch, args.max_tokens, args.repeats
        )
        print(f"ours: concurrency {args.concurrency} ...", flush=True)
        fast = asyncio.run(
            ours(model, config, tasks, warmup, store, FAMILY, args.concurrency, args.max_tokens, args.repeats)
        )

    n = len(tasks)
    speedup = slow["wall_s"] / fast["wall_s"]
    print(
        f"\n{n} samples ({args.videos} videos × {args.questions} questions, {args.frames} frames, {args.max_tokens} tokens each)"
    )
    print(f"{'':30}{'vanilla':>12}{'ours':>12}")
    print(f"{'wall time (s)':30}{slow['wall_s']:>12.2f}{fast['wall_s']:>12.2f}")
    print(f"{'samples/s':30}{n / slow['wall_s']:>12.2f}{n / fast['wall_s']:>12.2f}")
    print(
        f"first scored sample (ours): {fast['first_s']:.2f} s; preprocessing the {args.videos} videos once: {preprocess_s:.1f} s"
    )
    print(
        f"passes (s): vanilla {[round(w, 2) for w in slow['walls']]}, ours {[round(w, 2) for w in fast['walls']]}"
    )
    print(f"speed-up: {speedup:.2f}x")
    assert fast["written"] == n == slow["scored"], "both sides must score every sample"
    if args.no_record:
        return
    record(
        {
            "eval_async_speedup": round(speedup, 2),
            "eval_samples_per_s": round(n / fast["wall_s"], 2),
            "eval_first_result_s": round(fast["first_s"], 2),
        },
        watch,
    )


if __name__ == "__main__":
    main()
