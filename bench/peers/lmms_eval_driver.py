"""lmms-eval's side of bench/bench_lmms_eval.py, run by the side environment's python (it imports
lmms-eval and nothing of ReelRL's):

    SIDE_PYTHON bench/peers/lmms_eval_driver.py --model DIR --tasks bench/peers/lmms_eval_task --out F.json

The working directory holds ``samples.jsonl`` and ``warmup.jsonl`` (the tasks' data files). The
driver builds lmms-eval's vLLM model once (start-up is not timed, as on ReelRL's side), answers the
warm-up task, then times ``lmms_eval.evaluator.simple_evaluate`` on the timed task ``--repeats``
times: lmms-eval's own loop (requests, its video reading, batched ``LLM.chat`` / ``LLM.generate``,
scoring). It writes every pass's wall time and the last pass's per-sample responses to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import time
from importlib.metadata import version
from pathlib import Path


def model_kwargs(args: argparse.Namespace) -> dict:
    """lmms-eval's vLLM model arguments (what ``--model_args`` would hold); the engine keywords
    after ``max_new_tokens`` go to ``vllm.LLM`` as they are."""
    return {
        "model": args.model,
        "batch_size": args.batch,
        "nframes": args.frames,
        "max_frame_num": args.frames,
        "max_pixels": args.max_pixels,
        "min_image_pixels": args.min_pixels,
        "max_new_tokens": args.max_tokens,
        "dtype": "float32",
        "max_model_len": args.max_model_len,
        "kv_cache_memory_bytes": int(args.kv_cache_gib * 2**30),
        "enable_prefix_caching": False,
        "enable_chunked_prefill": True,
        "mm_processor_cache_gb": 0,
        "limit_mm_per_prompt": {"image": args.frames + 1, "video": 1},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--tasks", required=True, help="the task folder (lmms-eval's --include_path)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--backend", default="vllm", choices=["vllm", "vllm_generate"])
    parser.add_argument("--frames", type=int, default=32)
    parser.add_argument("--min-pixels", type=int, default=16 * 28 * 28)
    parser.add_argument("--max-pixels", type=int, default=64 * 28 * 28)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--kv-cache-gib", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from lmms_eval.evaluator import simple_evaluate
    from lmms_eval.models import get_model
    from lmms_eval.tasks import TaskManager

    started = time.perf_counter()
    tasks = TaskManager("WARNING", include_path=str(Path(args.tasks).resolve()), include_defaults=False)
    lm = get_model(args.backend)(**model_kwargs(args))
    engine_s = time.perf_counter() - started

    def evaluate(task: str) -> dict:
        return simple_evaluate(
            model=lm, tasks=[task], task_manager=tasks, batch_size=args.batch, log_samples=True,
            verbosity="WARNING",
        )  # fmt: skip

    engine = lm.client
    lm.client = counting = PromptCounter(engine)  # the warm-up only: the timed passes run unwrapped
    started = time.perf_counter()
    evaluate("reelrl_lvbench_warmup")  # first-call allocations, on a video the timed passes never see
    warmup_s = time.perf_counter() - started
    lm.client = engine
    walls, results = [], {}
    for _ in range(args.repeats):
        started = time.perf_counter()
        results = evaluate("reelrl_lvbench")
        walls.append(time.perf_counter() - started)
    samples = results["samples"]["reelrl_lvbench"]
    report = {
        "lmms_eval_version": version("lmms-eval"),
        "backend": args.backend,
        "model_kwargs": model_kwargs(args),
        "engine_s": engine_s,
        "warmup_s": warmup_s,
        "warmup_prompt_tokens": counting.prompt_tokens,
        "walls": walls,
        "responses": {s["doc"]["id"]: _text(s["resps"]) for s in samples},
        "correct": {s["doc"]["id"]: bool(s["lvbench_score"]) for s in samples},
        "score": results["results"]["reelrl_lvbench"].get("lvbench_score,none"),
    }
    Path(args.out).write_text(json.dumps(report, indent=2))


class PromptCounter:
    """``vllm.LLM`` as lmms-eval calls it, noting each prompt's token count (what its frames became)."""

    def __init__(self, llm) -> None:
        self.llm, self.prompt_tokens = llm, []

    def _note(self, outputs):
        self.prompt_tokens += [len(o.prompt_token_ids) for o in outputs]
        return outputs

    def chat(self, *args, **kwargs):
        return self._note(self.llm.chat(*args, **kwargs))

    def generate(self, *args, **kwargs):
        return self._note(self.llm.generate(*args, **kwargs))

    def __getattr__(self, name):
        return getattr(self.llm, name)


def _text(resps: list) -> str:
    # one generation per request, possibly nested as [[text]]
    while isinstance(resps, list):
        resps = resps[0]
    return resps


if __name__ == "__main__":
    main()
