"""lmms-eval itself as the evaluation pipeline's speed peer: the same tiny Qwen2.5-VL, the same local
LVBench-shaped files, the same prompts, greedy, the same token budget and frame count, both in one run.

    $VENV/bin/python -m bench.bench_lmms_eval [--videos 3] [--seconds 120] [--questions 10] [--allow-load]

lmms-eval runs in a side environment (bench/peers/side_env.py: a cached venv keyed by
bench/peers/lmms-eval-lock.txt, reusing this venv's torch, vLLM and transformers), with its vLLM
backend (``--backend vllm``, lmms-eval's ``--model vllm``; or ``vllm_generate``) on a task pointed at
the local files (bench/peers/lmms_eval_task, lmms-eval's ``--include_path``). Its driver
(bench/peers/lmms_eval_driver.py) times lmms-eval's own ``simple_evaluate`` loop after a warm-up task
on an extra video; ReelRL's eval pipeline then answers the same samples after the same warm-up.
Engine start-up is timed on neither side. Writes ``eval_vs_lmms_eval_speedup`` (lmms-eval's median
wall time ÷ ours, same samples; ours reads clips the frame store holds),
``eval_vs_lmms_eval_speedup_cold`` (ours also paying for decoding the videos into the store once) and
``eval_vs_lmms_eval_same_answers`` (samples whose greedy answers are the same text on both sides).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.bench_eval import FAMILY, make_lvbench
from bench.peers.side_env import SideEnvError, side_python
from bench.results import LoadWatch, add_load_argument, record

PEERS = Path(__file__).with_name("peers")
LOCK = PEERS / "lmms-eval-lock.txt"
TASKS = PEERS / "lmms_eval_task"
DRIVER = PEERS / "lmms_eval_driver.py"
#: the results.json keys of each lmms-eval backend
KEYS = {"vllm": "eval_vs_lmms_eval", "vllm_generate": "eval_vs_lmms_eval_generate"}


class PeerFailed(RuntimeError):
    """lmms-eval could not run here; the message says where and why."""


def peer_docs(tasks, family: str) -> list[dict]:
    """One lmms-eval doc per sample: ReelRL's adapter prompt, so both sides ask the same words."""
    docs = []
    for t in tasks:
        if t.adapter.system_prompt(t.sample) or t.adapter.assistant_prefix(t.sample):
            raise ValueError(
                f"{t.adapter.name}: a system prompt or answer prefix has no lmms-eval task field"
            )
        (video,) = t.planned.files
        docs.append(
            {"id": t.sample.id, "video": str(Path(video).resolve()), "prompt": t.adapter.prompt(t.sample, family),
             "answer": t.sample.answer}
        )  # fmt: skip
    return docs


def write_jsonl(path: Path, docs: list[dict]) -> None:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))


def run_peer(python: Path, model: Path, data: Path, args: argparse.Namespace, log: Path) -> dict:
    out = data / "peer.json"
    command = [
        str(python), str(DRIVER), "--model", str(model), "--tasks", str(TASKS), "--out", str(out),
        "--backend", args.backend, "--frames", str(args.frames), "--batch", str(args.batch),
        "--max-tokens", str(args.max_tokens), "--repeats", str(args.repeats),
    ]  # fmt: skip
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(data / "hf"),
        "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto"),
        "VLLM_ENABLE_V1_MULTIPROCESSING": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    with log.open("w") as fh:
        done = subprocess.run(command, cwd=data, env=env, stdout=fh, stderr=subprocess.STDOUT)
    if done.returncode or not out.exists():
        tail = log.read_text().strip().splitlines()[-25:]
        raise PeerFailed(f"lmms-eval exited with {done.returncode}:\n" + "\n".join(tail))
    return json.loads(out.read_text())


async def ours(
    model: Path, config, tasks, warmup, store, concurrency: int, max_tokens: int, repeats: int
) -> dict:
    """The eval pipeline on the same samples; every pass's wall time and the last pass's answers."""
    from services.eval.manifest import run_manifest
    from services.eval.pipeline import Pipeline
    from services.eval.store import open_run
    from services.rollout.async_engine import AsyncRolloutEngine

    manifest = run_manifest(str(model), "bench", FAMILY, config, False)
    counting = PromptCounter(None)
    # lmms-eval stops at the end-of-sequence token and cannot be told otherwise: so does ours here
    sampling = {"max_tokens": max_tokens}
    engine = counting.engine = AsyncRolloutEngine(model, config, source=store)
    walls, answers = [], {}
    try:
        for attempt in range(repeats + 1):  # attempt 0 warms up on the video the timed passes never see
            run_id = f"bench-lmms-{attempt}"
            open_run(
                run_id, model=str(model), family=FAMILY, benchmarks=["lvbench"], identity={}, config={},
                manifest=manifest, output_dir="-",
            )  # fmt: skip
            await engine.engine.reset_encoder_cache()
            answers = {}
            started = time.perf_counter()
            pipeline = Pipeline(
                counting if attempt == 0 else engine, run_id=run_id, run_manifest=manifest, family=FAMILY, thinking=False,
                concurrency=concurrency, io_threads=2, queue_size=2 * concurrency, sampling=sampling,
                on_result=lambda b, item, answers=answers: answers.__setitem__(item.id, item.response),
            )  # fmt: skip
            await pipeline.run([warmup] if attempt == 0 else tasks)
            if attempt:
                walls.append(time.perf_counter() - started)
    finally:
        await engine.aclose()
    return {"walls": walls, "answers": answers, "warmup_prompt_tokens": counting.prompt_tokens}


class PromptCounter:
    """The engine as the pipeline calls it, noting each prompt's token count (the warm-up pass only)."""

    def __init__(self, engine) -> None:
        self.engine, self.prompt_tokens = engine, []

    async def generate(self, *args, **kwargs):
        prompt_ids, responses = await self.engine.generate(*args, **kwargs)
        self.prompt_tokens.append(len(prompt_ids))
        return prompt_ids, responses

    def __getattr__(self, name):
        return getattr(self.engine, name)


def same_answers(peer: dict[str, str], mine: dict[str, str | None]) -> tuple[int, list[str]]:
    """How many samples got the same greedy text on both sides, and the ids that did not."""
    differ = [i for i, text in peer.items() if (mine.get(i) or "").strip() != (text or "").strip()]
    return len(peer) - len(differ), differ


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--videos", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--questions", type=int, default=10, help="questions per video")
    parser.add_argument("--frames", type=int, default=32, help="frames per clip, both sides")
    parser.add_argument("--batch", type=int, default=8, help="lmms-eval's batch size")
    parser.add_argument("--concurrency", type=int, default=16, help="ours: requests in flight")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per side (median reported)")
    parser.add_argument("--backend", default="vllm", choices=sorted(KEYS), help="lmms-eval's vLLM model")
    parser.add_argument("--no-record", action="store_true", help="print only; leave bench/results.json alone")
    add_load_argument(parser)
    args = parser.parse_args()
    watch = LoadWatch.begin("bench_lmms_eval", args.allow_load)

    try:
        python = side_python("lmms-eval", LOCK)
    except SideEnvError as exc:
        sys.exit(f"lmms-eval cannot run here: its side environment did not build.\n{exc}")

    with tempfile.TemporaryDirectory(prefix="bench-lmms-eval-") as tmp:
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
        # the sizes lmms-eval's driver passes to qwen-vl-utils (its defaults, 16 and 64 patches)
        params = clip_params(
            FAMILY,
            bench.video,
            {"nframes": args.frames, "min_pixels": 16 * 28 * 28, "max_pixels": 64 * 28 * 28},
        )
        store = FrameStore.from_settings()
        tasks = [Task("lvbench", bench, p) for p in ClipPlanner(store).plan(samples, data, params)]
        warmup, tasks = tasks[-1], [t for t in tasks if t.planned.files != tasks[-1].planned.files]
        config = RolloutConfig(
            n=1, temperature=0.0, max_tokens=args.max_tokens,
            engine=EngineConfig(
                dtype="float32", max_model_len=4096, kv_cache_gib=0.5, enable_chunked_prefill=True,
                enable_prefix_caching=False, mm_processor_cache_gb=0,
            ),
        )  # fmt: skip

        peer_dir = root / "peer"
        peer_dir.mkdir()
        write_jsonl(peer_dir / "samples.jsonl", peer_docs(tasks, FAMILY))
        write_jsonl(peer_dir / "warmup.jsonl", peer_docs([warmup], FAMILY))
        print(f"lmms-eval ({args.backend}): {len(tasks)} samples, batches of {args.batch} ...", flush=True)
        log = Path(tempfile.gettempdir()) / f"bench_lmms_eval-{os.getpid()}.log"
        try:
            peer = run_peer(python, model, peer_dir, args, log)
        except PeerFailed as exc:
            sys.exit(f"lmms-eval cannot run here (full log: {log}).\n{exc}")

        started = time.perf_counter()
        for key, path in {
            k: f for t in [*tasks, warmup] for k, f in zip(t.planned.keys, t.planned.files, strict=True)
        }.items():
            store.put(key, *decode_clip(path, params))
        preprocess_s = time.perf_counter() - started
        print(f"ours: concurrency {args.concurrency} ...", flush=True)
        mine = asyncio.run(
            ours(model, config, tasks, warmup, store, args.concurrency, args.max_tokens, args.repeats)
        )

    n = len(tasks)
    theirs_s, ours_s = statistics.median(peer["walls"]), statistics.median(mine["walls"])
    # item ids are "<benchmark>/<sample id>" on our side
    answers = {i.removeprefix("lvbench/"): text for i, text in mine["answers"].items()}
    equal, differ = same_answers(peer["responses"], answers)
    speedup, cold = theirs_s / ours_s, theirs_s / (ours_s + preprocess_s)
    print(
        f"\n{n} samples, {args.frames} frames, ≤{args.max_tokens} tokens, greedy; lmms-eval {peer['lmms_eval_version']}"
    )
    print(f"{'':30}{'lmms-eval':>12}{'ours':>12}")
    print(f"{'wall time (s), median':30}{theirs_s:>12.2f}{ours_s:>12.2f}")
    print(f"{'samples/s':30}{n / theirs_s:>12.2f}{n / ours_s:>12.2f}")
    print(f"{'engine start-up (s, untimed)':30}{peer['engine_s']:>12.1f}")
    print(
        f"passes (s): lmms-eval {[round(w, 2) for w in peer['walls']]}, ours {[round(w, 2) for w in mine['walls']]}"
    )
    print(
        f"prompt tokens per sample (warm-up video): lmms-eval {sorted(set(peer['warmup_prompt_tokens']))}, ours {sorted(set(mine['warmup_prompt_tokens']))}"
    )
    print(f"ours' one-off decode of {args.videos + 1} videos into the frame store: {preprocess_s:.2f} s")
    print(f"speed-up: {speedup:.2f}x (with ours' decode: {cold:.2f}x)")
    print(f"same answers: {equal}/{n}" + (f"; differing e.g. {differ[:3]}" if differ else ""))
    for i in differ[:3]:
        print(f"  {i}: lmms-eval {peer['responses'][i]!r} | ours {answers.get(i)!r}")
    if len(answers) != n or len(peer["responses"]) != n:
        sys.exit(
            f"both sides must answer every sample: lmms-eval {len(peer['responses'])}, ours {len(answers)}, of {n}"
        )
    if args.no_record:
        return
    key = KEYS[args.backend]
    record(
        {
            f"{key}_speedup": round(speedup, 2),
            f"{key}_speedup_cold": round(cold, 2),
            f"{key}_same_answers": equal,
        },
        watch,
    )


if __name__ == "__main__":
    main()
