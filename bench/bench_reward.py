"""Reward scoring throughput: in-process (one core) and over HTTP at 1, 10 and 50 concurrent clients.

    $VENV/bin/python -m bench.bench_reward [--items 6000] [--seconds 8] [--batch 16] [--workers 2]

The corpus mixes all 15 problem types in equal shares, with correct, wrong, hedged, untagged and thinking
responses (seeded, so every run scores the same items). Math answers are numbers (as in
the video benchmarks) 4 times in 5 and polynomials otherwise (these go through math-verify's helper process
at tens of milliseconds each; the per-type table shows it).
The in-process figure recorded is the best of ``--repeats`` runs over fresh corpora, with the median
beside it: on a shared machine the best run is the one least disturbed by other work.
Figures are stored in bench/results.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from bench.results import LoadWatch, add_load_argument, record
from services.reward import RewardConfig, score_batch

Item = tuple[dict[str, Any], str]


def _wrap(rng: random.Random, answer: str) -> str:
    style = rng.randrange(4)
    if style == 0:
        return f"<think>Looking at the frames step by step.</think><answer>{answer}</answer>"
    if style == 1:
        return f"<answer>{answer}</answer>"
    if style == 2:
        return f"Let me look again at the clip. The answer is {answer}."
    return f"<think>unsure</think><answer>{answer}</answer><answer>{answer}</answer>"


def _box(rng: random.Random) -> list[float]:
    x, y = rng.uniform(0, 500), rng.uniform(0, 300)
    return [round(x, 1), round(y, 1), round(x + rng.uniform(20, 200), 1), round(y + rng.uniform(20, 200), 1)]


def _jitter(box: list[float], rng: random.Random) -> list[float]:
    return [round(v + rng.uniform(-15, 15), 1) for v in box[:2]] + [
        round(v + rng.uniform(-15, 15), 1) for v in box[2:]
    ]


def corpus(n: int, seed: int = 0) -> list[Item]:
    """``n`` (sample, response) pairs, the 15 problem types in turn."""
    rng = random.Random(seed)
    words = [
        "man",
        "woman",
        "dog",
        "car",
        "red",
        "blue",
        "walks",
        "runs",
        "street",
        "park",
        "ball",
        "throws",
        "catches",
        "opens",
        "door",
        "left",
        "right",
    ]
    makers = []

    def mcq() -> Item:
        options = [f"{L}. {' '.join(rng.sample(words, 3))}" for L in "ABCD"]
        truth = rng.choice("ABCD")
        said = rng.choice([truth, rng.choice("ABCD"), f"({truth})", "A, B", options[rng.randrange(4)][3:]])
        return {"problem_type": "multiple choice", "answer": truth, "options": options}, _wrap(rng, said)

    def numerical() -> Item:
        truth = round(rng.uniform(0, 100), 2)
        return {"problem_type": "numerical", "answer": str(truth)}, _wrap(
            rng, f"{truth + rng.choice([0, 0, 1.5])}"
        )

    def regression() -> Item:
        truth = round(rng.uniform(1, 20), 1)
        return {"problem_type": "regression", "answer": truth}, _wrap(
            rng, f"{truth * rng.uniform(0.5, 1.5):.2f} m"
        )

    def boolean() -> Item:
        truth = rng.choice(["yes", "no"])
        return {"problem_type": "boolean", "answer": truth}, _wrap(
            rng, rng.choice(["Yes", "No", "yes or no"])
        )

    def counting() -> Item:
        truth = rng.randrange(10)
        return {"problem_type": "counting", "answer": truth}, _wrap(
            rng, rng.choice([str(truth), "three", "2"])
        )

    def ocr() -> Item:
        truth = " ".join(rng.sample(words, 6))
        said = " ".join(rng.sample(truth.split(), 5))
        return {"problem_type": "ocr", "answer": truth}, _wrap(rng, said)

    def open_ended() -> Item:
        truth = " ".join(rng.choices(words, k=12))
        said = " ".join(rng.choices(words, k=rng.randrange(3, 20)))
        return {"problem_type": "open-ended", "answer": truth}, _wrap(rng, said)

    def math() -> Item:
        if rng.random() < 0.8:  # numeric answers, written in the ways models write them
            a, b = rng.randrange(1, 99), rng.randrange(2, 99)
            truth = rng.choice([f"\\frac{{{a}}}{{{b}}}", str(a * b), f"{a}/{b}"])
            said = rng.choice([f"{a}/{b}", f"\\frac{{{a}}}{{{b}}}", str(a * b), str(a + b), f"{a / b:.6f}"])
        else:  # symbolic: each one costs math-verify tens of milliseconds in the helper process
            k = rng.randrange(1, 1000)  # wide, so the checker's verdict cache rarely helps
            truth, said = f"x^2+{2 * k}x+{k * k}", rng.choice([f"(x+{k})^2", f"(x+{k + 1})^2"])
        return {"problem_type": "math", "answer": truth}, _wrap(rng, f"\\boxed{{{said}}}")

    def temporal() -> Item:
        s = round(rng.uniform(0, 50), 1)
        truth = [s, round(s + rng.uniform(2, 20), 1)]
        said = [round(truth[0] + rng.uniform(-3, 3), 1), round(truth[1] + rng.uniform(-3, 3), 1)]
        text = rng.choice([json.dumps({"time": said}), f"from {said[0]} to {said[1]} seconds"])
        return {"problem_type": "temporal grounding", "answer": {"time": truth}, "duration": 90.0}, _wrap(
            rng, text
        )

    def spatial() -> Item:
        truth = _box(rng)
        said = json.dumps([{"bbox_2d": _jitter(truth, rng), "label": "dog"}])
        return {
            "problem_type": "spatial grounding",
            "answer": {"boxes": truth},
            "width": 720,
            "height": 480,
        }, _wrap(rng, said)

    def stvg() -> Item:
        truth = {"time": [2.0, 5.0], "boxes": {str(t): _box(rng) for t in range(2, 6)}}
        said = {
            "time": [2.5, 5.0],
            "boxes": {k: _jitter(v, rng) for k, v in list(truth["boxes"].items())[:3]},
        }
        return {"problem_type": "spatial-temporal grounding", "answer": truth}, _wrap(rng, json.dumps(said))

    def tracking() -> Item:
        truth = {"boxes": {str(t): _box(rng) for t in range(8)}}
        said = {"boxes": {k: _jitter(v, rng) for k, v in truth["boxes"].items() if rng.random() < 0.8}}
        return {"problem_type": "tracking", "answer": truth}, _wrap(rng, json.dumps(said))

    def segmentation() -> Item:
        truth = _box(rng)
        said = {"bbox": _jitter(truth, rng), "positive_points": [[truth[0] + 10, truth[1] + 10]]}
        return {"problem_type": "segmentation", "answer": {"bbox": truth}}, _wrap(rng, json.dumps(said))

    def code() -> Item:
        shapes = "".join(f'<rect x="{i}" y="{i}" width="5" height="5"/>' for i in range(rng.randrange(1, 5)))
        truth = f'<svg xmlns="http://www.w3.org/2000/svg">{shapes}<circle r="3"/></svg>'
        said = rng.choice([truth, f"<svg>{shapes}</svg>", "<svg><rect></svg>"])
        return {"problem_type": "svg-code", "answer": truth}, _wrap(rng, f"```svg\n{said}\n```")

    def preference() -> Item:
        truth = rng.choice(["Response 1", "Response 2"])
        said = rng.choice(["Response 1 is better.", "Response 2 is better", "Tie"])
        return {"problem_type": "critic", "answer": truth}, _wrap(rng, said)

    makers = [mcq, numerical, regression, boolean, counting, ocr, open_ended, math, temporal, spatial, stvg,
              tracking, segmentation, code, preference]  # fmt: skip
    return [makers[i % len(makers)]() for i in range(n)]


@contextmanager
def one_core() -> Iterator[str]:
    """Pin this process (and the math helper it starts) to one CPU, so "one core" is literal."""
    if not hasattr(os, "sched_setaffinity"):
        yield "not pinned (no sched_setaffinity)"
        return
    before = os.sched_getaffinity(0)
    core = min(before)
    os.sched_setaffinity(0, {core})
    try:
        yield f"pinned to CPU {core}"
    finally:
        os.sched_setaffinity(0, before)


def bench_inprocess(size: int, repeats: int) -> list[float]:
    """Items/s of ``repeats`` runs, each over a fresh corpus (so no math verdict is cached)."""
    config = RewardConfig()
    score_batch(corpus(300, seed=1), config)  # start the math helper, compile regexes (other items)
    rates = []
    for repeat in range(repeats):
        items = corpus(size, seed=100 + repeat)
        started = time.perf_counter()
        results = score_batch(items, config)
        rates.append(len(results) / (time.perf_counter() - started))
    return rates


def per_type_micros(items: list[Item]) -> dict[str, float]:
    """Mean microseconds per item by problem type (a fresh corpus, so math verdicts are not cached)."""
    config = RewardConfig()
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    for sample, response in items:
        started = time.perf_counter()
        score_batch([(sample, response)], config)
        kind = sample["problem_type"]
        totals[kind] = totals.get(kind, 0.0) + time.perf_counter() - started
        counts[kind] = counts.get(kind, 0) + 1
    return {kind: 1e6 * totals[kind] / counts[kind] for kind in totals}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_server(port: int, workers: int) -> subprocess.Popen[bytes]:
    reelrl = Path(sys.executable).with_name("reelrl")
    cmd = [str(reelrl), "serve", "reward", "--port", str(port), "--workers", str(workers)]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=os.environ.copy())
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return server
        except httpx.TransportError:
            time.sleep(0.2)
    server.kill()
    raise RuntimeError(
        f"reward service did not come up on port {port}: {server.stderr.read().decode()[-2000:]}"
    )


async def _http_load(
    url: str, items: list[Item], clients: int, seconds: float, batch: int
) -> dict[str, float]:
    latencies: list[float] = []
    errors = 0
    scored = 0
    stop = time.monotonic() + seconds

    async def client(index: int, http: httpx.AsyncClient) -> None:
        nonlocal errors, scored
        cursor = index * batch
        while time.monotonic() < stop:
            chunk = [items[(cursor + i) % len(items)] for i in range(batch)]
            cursor += clients * batch
            body = {"items": [{"sample": s, "response": r} for s, r in chunk]}
            started = time.perf_counter()
            response = await http.post("/v1/score", json=body)
            latencies.append(time.perf_counter() - started)
            results = response.json().get("results", []) if response.status_code == 200 else []
            errors += (response.status_code != 200) + sum(r["error"] is not None for r in results)
            scored += len(results)

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
        started = time.perf_counter()
        await asyncio.gather(*(client(i, http) for i in range(clients)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "items_per_s": scored / elapsed,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        "requests": len(latencies),
        "errors": errors,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=6000, help="in-process corpus size")
    parser.add_argument("--repeats", type=int, default=3, help="in-process runs (best and median reported)")
    parser.add_argument("--seconds", type=float, default=8.0, help="HTTP load duration per concurrency level")
    parser.add_argument("--batch", type=int, default=16, help="items per HTTP request")
    parser.add_argument("--workers", type=int, default=2, help="uvicorn workers of the served app")
    add_load_argument(parser)
    args = parser.parse_args()
    watch = LoadWatch.begin("bench_reward", args.allow_load)

    with one_core() as pinned:
        rates = bench_inprocess(args.items, args.repeats)
        rate = max(rates)
        print(
            f"in-process, {pinned}: best {rate:,.0f}, median {statistics.median(rates):,.0f} items/s "
            f"({args.repeats} runs of {args.items} mixed items; target ≥ 2,000)"
        )
        print("mean µs per item by type:")
        for kind, micros in sorted(per_type_micros(corpus(1500, seed=2)).items(), key=lambda kv: -kv[1]):
            print(f"  {kind:<28} {micros:>9,.0f}")
    figures: dict[str, float] = {
        "reward_items_per_s_inprocess": round(rate, 1),
        "reward_items_per_s_inprocess_median": round(statistics.median(rates), 1),
    }

    items = corpus(args.items)
    port = _free_port()
    server = _start_server(port, args.workers)
    try:
        print(
            f"\nHTTP, {args.workers} uvicorn workers, {args.batch} items/request, {args.seconds:.0f}s per level"
        )
        print(f"{'clients':>8} {'items/s':>10} {'req':>6} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}")
        for clients in (1, 10, 50):
            stats = asyncio.run(
                _http_load(f"http://127.0.0.1:{port}", items, clients, args.seconds, args.batch)
            )
            print(
                f"{clients:>8} {stats['items_per_s']:>10,.0f} {stats['requests']:>6.0f} {stats['p50_ms']:>8.1f} "
                f"{stats['p99_ms']:>8.1f} {stats['errors']:>7.0f}"
            )
            figures[f"reward_http_items_per_s_{clients}c"] = round(stats["items_per_s"], 1)
            figures[f"reward_http_p50_ms_{clients}c"] = round(stats["p50_ms"], 2)
            figures[f"reward_http_p99_ms_{clients}c"] = round(stats["p99_ms"], 2)
            figures[f"reward_http_errors_{clients}c"] = stats["errors"]
    finally:
        server.terminate()
        server.wait(timeout=30)
    record(figures, watch)
    print("\nrecorded in bench/results.json:", ", ".join(sorted(figures)))


if __name__ == "__main__":
    main()
