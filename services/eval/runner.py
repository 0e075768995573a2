"""`reelrl eval run` and the ``eval`` job: read every benchmark's samples, open (or resume) the run,
preprocess missing clips, stream the rest through one engine, then aggregate from the database and
write the outputs. A restarted run skips the samples that already have a result."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.common.frames import FrameStore
from services.common.outputs import check_run_folder
from services.common.samples import Sample
from services.common.settings import get_settings
from services.common.trackers import TrackerNotInstalled, log_eval_summaries, require
from services.eval.benchmarks import Benchmark, ItemResult, Summary, get_benchmark
from services.eval.clips import (
    ClipPlanner,
    PlannedSample,
    PreprocessStopped,
    clip_params,
    preprocess_missing,
)
from services.eval.config import RUN_MARKER, EvalConfig, model_fingerprint
from services.eval.manifest import run_manifest
from services.eval.outputs import write_json_atomic, write_jsonl_atomic, write_summaries
from services.eval.pipeline import Pipeline, Task
from services.eval.reward_functions import load_functions
from services.eval.scoring import missing
from services.eval.store import as_item, current_ids, finish_run, open_run, stored_results

log = logging.getLogger(__name__)


@dataclass
class BenchmarkPlan:
    adapter: Benchmark
    samples: list[Sample]
    params: Any
    planned: list[PlannedSample]


@dataclass
class RunReport:
    run_id: str
    output_dir: Path
    summaries: dict[str, Summary] = field(default_factory=dict)
    resumed: bool = False
    skipped: int = 0  # samples already finished by an earlier attempt
    redone: int = 0  # finished by an earlier attempt with another prompt version, so run again
    written: int = 0
    stopped: bool = False
    timings: dict[str, float] = field(default_factory=dict)


@dataclass
class Hooks:
    """How a caller watches a run: every scored sample, every benchmark summary, and a stop flag."""

    on_result: Callable[[str, ItemResult, int, int], None] | None = None  # benchmark, item, done, total
    on_summary: Callable[[Summary, dict[str, Any]], None] | None = None
    stop: Callable[[], bool] | None = None


def prompt_version(adapter: Benchmark, sample: Sample, thinking: bool) -> str:
    """The sample's current prompt template version; "" when the adapter fails on it (its stored result,
    if any, is then redone, and preparing it records the adapter's error)."""
    try:
        return adapter.prompt_version(sample, thinking)
    except Exception:
        log.exception("%s: no prompt version", sample.id)
        return ""


def checkpoint_family(model: Path) -> str:
    from transformers import AutoConfig

    from services.rollout.checkpoint import family_of

    return family_of(AutoConfig.from_pretrained(str(model))).name.value


def plan_benchmarks(config: EvalConfig, family: str, planner: ClipPlanner) -> dict[str, BenchmarkPlan]:
    plans = {}
    for name in config.benchmarks:
        settings, root = config.settings(name), config.root(name)
        adapter = get_benchmark(name, root, **settings.options)
        samples = adapter.load_checked(adapter.find_annotations(settings.annotations or root))
        if config.limit is not None:
            samples = samples[: config.limit]
        params = clip_params(family, adapter.video, config.video, settings.video)
        planned = planner.plan(samples, settings.video_root or root, params)
        plans[name] = BenchmarkPlan(adapter, samples, params, planned)
    return plans


async def _stream(
    config: EvalConfig,
    tasks: list[Task],
    pipeline_args: dict[str, Any],
    store: FrameStore,
    functions: dict[str, Callable[..., Any]],
) -> int:
    from services.reward.functions import FunctionRunner
    from services.rollout.async_engine import AsyncRolloutEngine

    engine = AsyncRolloutEngine(config.model, config.rollout, source=store)
    judge_engine = None
    runners: list[FunctionRunner] = []  # one per reward function for the whole run, closed with it
    try:
        for name, fn in functions.items():
            # at most one call per request in flight: `concurrency` bounds both
            runners.append(FunctionRunner(name, fn, config.reward_function_timeout_s, config.concurrency))
        if config.judge is not None:
            judge_engine = (
                engine
                if config.judge.model == "self"
                else AsyncRolloutEngine(config.judge.model, config.rollout, source=store)
            )
        pipeline = Pipeline(
            engine,
            judge_engine=judge_engine,
            judge_max_tokens=config.judge.max_tokens if config.judge else 16,
            concurrency=config.concurrency,
            io_threads=config.io_threads,
            queue_size=config.queue_size,
            thinking=config.thinking,
            reward_functions=runners,
            **pipeline_args,
        )
        return await pipeline.run(tasks)
    finally:
        for runner in runners:
            runner.close()
        if judge_engine is not None and judge_engine is not engine:
            await judge_engine.aclose()
        await engine.aclose()


def run_eval(config: EvalConfig, hooks: Hooks | None = None, job_id: str | None = None) -> RunReport:
    hooks = hooks or Hooks()
    require(config.loggers, "eval.loggers")
    started = time.perf_counter()
    run_id = config.resolved_run_id()
    output_dir = Path(config.output_dir or get_settings().home / "eval" / run_id)
    check_run_folder(output_dir, RUN_MARKER, "evaluation")  # before anything is written there
    # imported before any clip or engine work: a missing file or function fails the run at once
    functions = load_functions(config.reward_functions)
    report = RunReport(run_id, output_dir)
    family = checkpoint_family(config.model)
    store = FrameStore.from_settings()
    planner = ClipPlanner(store, stop=hooks.stop)
    try:
        plans = plan_benchmarks(config, family, planner)
    except PreprocessStopped:  # a cancel before the run was opened: nothing to record
        report.stopped = True
        return report
    manifest = run_manifest(
        str(config.model.resolve()), model_fingerprint(config.model), family, config.rollout, config.thinking
    )
    # the folder is this run's from now on (a retry or a rerun continues in it); completed at the end
    output_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(output_dir / RUN_MARKER, {"run_id": run_id, **manifest})
    report.resumed = open_run(
        run_id, model=str(config.model.resolve()), family=family, benchmarks=config.benchmarks,
        identity=config.identity(), config=config.model_dump(mode="json"), manifest=manifest,
        output_dir=str(output_dir), job_id=job_id,
    )  # fmt: skip

    tasks: list[Task] = []
    for name, plan in plans.items():
        versions = {
            p.sample.id: prompt_version(plan.adapter, p.sample, config.thinking) for p in plan.planned
        }
        done, stale = current_ids(run_id, name, versions)
        if stale:
            log.warning(
                "%s: %d stored results were made with another prompt template version; redoing them",
                name, stale,
            )  # fmt: skip
        report.redone += stale
        todo = [p for p in plan.planned if p.sample.id not in done]
        report.skipped += len(plan.planned) - len(todo)
        try:
            preprocess_missing(
                todo, store, plan.params, workers=config.preprocess_workers,
                timeout_s=config.preprocess_timeout_s, work_dir=output_dir, stop=hooks.stop,
            )  # fmt: skip
        except PreprocessStopped:
            # a cancel while clips decode: nothing is generated; the run ends "cancelled" below with
            # what earlier attempts stored
            tasks = []
            break
        tasks += [Task(name, plan.adapter, p) for p in todo]
    report.timings["prepare_s"] = time.perf_counter() - started

    total, done_count = len(tasks), 0

    def on_result(benchmark: str, item: ItemResult) -> None:
        nonlocal done_count
        done_count += 1
        if hooks.on_result:
            hooks.on_result(benchmark, item, done_count, total)

    if tasks:
        args = {
            "run_id": run_id,
            "run_manifest": manifest,
            "family": family,
            "on_result": on_result,
            "stop": hooks.stop,
        }
        try:
            report.written = asyncio.run(_stream(config, tasks, args, store, functions))
        except BaseException as exc:  # the engine died or the run was interrupted: not left "running"
            finish_run(run_id, "failed", None, error=f"{type(exc).__name__}: {exc}"[:4000])
            raise
    report.stopped = bool(hooks.stop and hooks.stop())
    report.timings["generate_s"] = time.perf_counter() - started - report.timings["prepare_s"]

    for name, plan in plans.items():
        summary = write_benchmark_outputs(run_id, name, plan, output_dir)
        report.summaries[name] = summary
        if hooks.on_summary:
            hooks.on_summary(summary, {**manifest, "clip": plan.params.canonical()})
    write_summaries(output_dir, list(report.summaries.values()))
    write_json_atomic(
        output_dir / RUN_MARKER,
        {
            "run_id": run_id,
            **manifest,
            "benchmarks": {n: {"clip": p.params.canonical()} for n, p in plans.items()},
        },
    )
    finish_run(
        run_id, "cancelled" if report.stopped else "succeeded",
        {n: s.model_dump(mode="json") for n, s in report.summaries.items()},
    )  # fmt: skip
    # after the results are stored: a tracker that cannot be reached fails the call, loses nothing
    log_eval_summaries(
        config.loggers, output_dir=output_dir, name=f"eval-{run_id}", config=config.model_dump(mode="json"),
        summaries={n: s.model_dump(mode="json") for n, s in report.summaries.items()},
        status="cancelled" if report.stopped else "succeeded", wandb=config.wandb,
        mlflow=config.mlflow.model_copy(update={"experiment": config.mlflow.experiment or "reelrl-eval"}),
        job_id=job_id,
    )  # fmt: skip
    report.timings["total_s"] = time.perf_counter() - started
    return report


def write_benchmark_outputs(run_id: str, name: str, plan: BenchmarkPlan, output_dir: Path) -> Summary:
    """Aggregate a benchmark from its stored rows (this attempt's and earlier ones') and write its
    per-sample JSONL, whose lines ``reelrl eval score`` reads back."""
    rows = {row.sample_id: row for row in stored_results(run_id, name)}
    results = {s.id: as_item(rows[s.id]) if s.id in rows else missing(s) for s in plan.samples}
    summary = plan.adapter.summarise(plan.samples, results)
    lines = []
    for sample in plan.samples:
        row = rows.get(sample.id)
        if row is None:
            lines.append({"id": sample.id, "response": None, "missing": True})
            continue
        lines.append(
            {
                "id": sample.id, "response": row.response, "accuracy": row.accuracy, "format": row.format,
                "extracted": row.extracted, "details": row.details, "error": row.error, "judged": row.judged,
                "judge_response": row.judge_response, "clip_meta": row.clip_meta,
                "finish_reason": row.finish_reason, "prompt_tokens": row.prompt_tokens,
                "response_tokens": row.response_tokens, "latency_s": row.latency_s, "manifest": row.manifest,
                # "" when none: a missing field would mean the benchmark's protocol prefix on re-scoring
                "assistant_prefix": (row.manifest or {}).get("assistant_prefix") or "",
                "rubric_replies": (row.details or {}).get("rubric_replies"),
            }
        )  # fmt: skip
    write_jsonl_atomic(output_dir / f"{name}.samples.jsonl", lines)
    return summary


def run_command(
    model: Path | None,
    benchmarks: str | None,
    data_root: Path | None,
    limit: int | None,
    output: Path | None,
    config_path: Path | None,
    overrides: list[str],
    reward_functions: list[str] | None = None,
) -> int:
    """`reelrl eval run`: flags and dotted overrides over an optional YAML config. ``reward_functions``:
    the ``--reward-function`` values, which replace the config's ``reward_functions`` as every flag
    replaces its key."""
    import typer
    from rich.console import Console

    from services.common.text import plain
    from services.eval.cli import errors, parse_assignments, parse_reward_function
    from services.eval.config import ConfigError, load_config
    from services.eval.store import RunMismatch

    given: dict[str, Any] = {
        "model": model,
        "benchmarks": benchmarks,
        "data_root": data_root,
        "limit": limit,
        "output_dir": output,
    }
    values = {k: str(v) if isinstance(v, Path) else v for k, v in given.items() if v is not None}
    try:
        if reward_functions:
            values["reward_functions"] = [parse_reward_function(text) for text in reward_functions]
        config = load_config({**values, **parse_assignments(overrides, "override")}, config_path)
    except (ConfigError, typer.BadParameter) as exc:
        errors.print(f"error: {plain(exc)}")
        return 2

    def progress(benchmark: str, item: ItemResult, done: int, total: int) -> None:
        status = "error" if item.error else f"{item.accuracy:.2f}"
        errors.print(plain(f"[{done}/{total}] {benchmark} {item.id}: {status}"))

    try:
        report = run_eval(config, Hooks(on_result=progress))
    except (RunMismatch, TrackerNotInstalled, ValueError, OSError) as exc:
        errors.print(f"error: {plain(exc)}")
        return 2
    out = Console(highlight=False, soft_wrap=True)
    for summary in report.summaries.values():
        out.print(
            plain(f"{summary.benchmark}: {summary.overall:.2f} ({summary.metric}; {summary.count} samples)")
        )
        for key, value in summary.metrics.items():
            if key.startswith("reward/"):
                out.print(plain(f"  {key}: {value:.4g}"))
        if summary.details.get("reward_function_errors"):
            out.print(plain(f"  reward function errors: {summary.details['reward_function_errors']}"))
        for note in summary.notes:
            if note.startswith("reward function "):
                out.print(plain(f"  {note}"))
    out.print(
        plain(
            f"run {report.run_id}: {report.written} new results, {report.skipped} resumed"
            + (f", {report.redone} redone (prompt changed)" if report.redone else "")
            + f"; {report.output_dir}"
        )
    )
    return 0
