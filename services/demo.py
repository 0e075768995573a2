"""``reelrl demo``: the whole system on embedded defaults, no servers to install.

Synthetic task videos and a tiny random-weight model → the frame store through the worker pool → an
evaluation of the untrained model → a few minutes of GRPO with mixed offline/online groups on vLLM →
the same evaluation of the trained model → a summary (accuracy before → after) → the status page with
this run's jobs, curves and tables. Training and evaluation run as jobs (the same job rows, events and
task bodies the API's workers use), so the status page shows them as it would any submitted job.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

console = Console(stderr=True)
ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "tiny_cpu.yaml"
SUMMARY = "summary.json"  # in the demo's folder: the before/after figures the table shows


def _phase(text: str) -> None:
    console.rule(f"[bold]{escape(text)}")


def prepare_data(folder: Path, train_videos: int, val_videos: int) -> dict[str, Path]:
    from services.common.synthetic_tasks import make_task_datasets
    from services.common.tiny_models import build_tiny_model

    files = make_task_datasets(folder, train_videos=train_videos, val_videos=val_videos)
    model = folder / "tiny-qwen2_5_vl"
    if not model.exists():
        build_tiny_model("qwen2_5_vl", model, seed=0)
    return {**files, "model": model}


def preprocess(files: dict[str, Path], workers: int) -> None:
    """Decode every clip the demo uses once, with local worker processes and a progress bar."""
    from services.common.frames import VideoParams
    from services.preprocess.dispatch import run_preprocess

    params = VideoParams(family="qwen2_5_vl", fps=None, nframes=4, min_pixels=3136, max_pixels=3136)
    for stem in ("colour_mix", "colour_val"):
        with Progress(
            TextColumn(f"[bold]preprocess {stem}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=console,
        ) as bar:  # fmt: skip
            task = bar.add_task(stem, total=None)
            report = run_preprocess(
                files[stem], files[stem].with_suffix(".clips.jsonl"), params, workers=workers,
                progress=lambda done, total, t=task, b=bar: b.update(t, completed=done, total=total),
            )  # fmt: skip
        console.print(
            f"{stem}: {report.clips} clips, {report.cached} cached, {report.decoded} decoded, "
            f"{report.failed} failed rows"
        )


@dataclass(frozen=True)
class Evaluation:
    accuracy: float
    samples: int  # scored samples of the benchmark (from its result event)
    job_id: str


def evaluate(model: Path, files: dict[str, Path], label: str, output: Path) -> Evaluation:
    """The synthetic benchmark (the colour validation split, other videos than training) as an eval job."""
    from services.common.jobs import create_job, get_job, job_events
    from services.eval.tasks import eval_job

    config = {
        "model": str(model),
        "benchmarks": ["video_r1"],
        "bench": {"video_r1": {"root": str(files["colour_val"].parent), "annotations": str(files["colour_val"])}},
        "video": {"fps": None, "nframes": 4, "min_pixels": 3136, "max_pixels": 3136},
        "rollout": {"n": 1, "temperature": 0.0, "max_tokens": 8,
                    "engine": {"dtype": "float32", "max_model_len": 1024, "kv_cache_gib": 0.25}},
        "output_dir": str(output),
    }  # fmt: skip
    job_id = create_job("eval", config)
    console.print(f"evaluating the {label} model (job {job_id[:8]}) …")
    started = time.monotonic()
    eval_job(job_id)
    job = get_job(job_id)
    if job.state.value != "succeeded":
        raise RuntimeError(f"the {label} evaluation ended {job.state.value}: {job.reason}")
    # eval summaries are percentages (as benchmarks publish them); the demo shows fractions, like the
    # training curves' val/accuracy
    accuracy = float(job.result["video_r1/overall"]) / 100
    (summary,) = [e.data for e in job_events(job_id, types=["result"]) if e.data["benchmark"] == "video_r1"]
    console.print(
        f"{label}: accuracy {accuracy:.3f} on {summary['samples']} samples ({time.monotonic() - started:.0f} s)"
    )
    return Evaluation(accuracy, int(summary["samples"]), job_id)


def train(files: dict[str, Path], steps: int, output: Path) -> dict[str, Any]:
    from services.common.jobs import create_job
    from services.trainer.config import load_config
    from services.trainer.tasks import run_train_job

    config = load_config(
        CONFIG,
        [
            f"data.train_files=[{files['colour_mix']}]", f"data.val_files=[{files['colour_val']}]",
            f"actor.model_path={files['model']}", f"trainer.total_steps={steps}",
            f"trainer.val_freq={max(10, steps // 6)}", f"trainer.save_freq={steps}",
            f"trainer.output_dir={output}", "trainer.loggers=[jsonl,db]", "trainer.resume=none",
        ],
    )  # fmt: skip
    job_id = create_job("train", config.model_dump(mode="json"))
    console.print(f"training job {job_id[:8]}: {steps} steps of GRPO with mixed groups on vLLM (CPU)")
    with Progress(
        TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(), console=console,
    ) as bar:  # fmt: skip
        task = bar.add_task("train", total=steps, info="starting vLLM …")

        def on_step(step: int, metrics: dict) -> None:
            shown = [f"{k}={metrics[k]:.2f}" for k in ("reward/accuracy", "reward/format", "val/accuracy")
                     if metrics.get(k) is not None]  # fmt: skip
            bar.update(task, completed=step, info=" ".join(shown))

        return run_train_job(job_id, on_step=[on_step])


def write_summary(
    path: Path, before: Evaluation, after: Evaluation, result: dict[str, Any], videos: int, minutes: float
) -> None:
    """What the table shows, for scripts (bench/bench_demo.py): accuracies as fractions, job ids whole."""
    from services.eval.outputs import write_json_atomic

    val_format = result.get("val/format")
    write_json_atomic(
        path,
        {
            "before": {"accuracy": before.accuracy, "samples": before.samples, "job_id": before.job_id},
            "after": {"accuracy": after.accuracy, "samples": after.samples, "job_id": after.job_id},
            "steps": result["steps"],
            "train_videos": videos,
            "val_format": val_format if val_format is not None and math.isfinite(val_format) else None,
            "minutes": round(minutes, 2),
        },
    )


def serve(port: int) -> int:
    """The status page until stopped; 0 after SIGTERM, 130 after Ctrl-C (``serve_api``'s status)."""
    from services.api.cli import serve_api

    console.print(f"status page: [bold]http://127.0.0.1:{port}/[/bold] (Ctrl-C to stop)")
    return serve_api(host="127.0.0.1", port=port)


def demo_command(
    folder: Path | None,
    steps: int,
    workers: int,
    no_serve: bool,
    port: int,
    videos: int,
    verbose: bool = False,
) -> int:
    """``videos``: task videos in the training split; the held-out split gets half as many. Without
    ``verbose`` the console shows only the demo's own lines: vLLM's, torch's and the workers' output
    goes to ``<folder>/demo.log``, named at the end."""
    global console
    from services.common.console_capture import third_party_to_log
    from services.common.settings import get_settings

    folder = (folder or get_settings().home / "demo").resolve()
    log = folder / "demo.log"
    if not verbose:
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "INFO")  # all of it, into the log
    with third_party_to_log(log, verbose=verbose) as terminal:
        console = Console(file=terminal)
        try:
            return _run_demo(folder, steps, workers, no_serve, port, videos, log if not verbose else None)
        except BaseException:
            if not verbose:  # what went wrong inside vLLM, torch or a worker is in the log: say where
                console.print(f"the demo stopped; vLLM, torch and worker output: {escape(str(log))}")
            raise
        finally:
            console = Console(stderr=True)


def _run_demo(
    folder: Path, steps: int, workers: int, no_serve: bool, port: int, videos: int, log: Path | None
) -> int:
    started = time.monotonic()
    (folder / SUMMARY).unlink(missing_ok=True)  # a failed rerun must not leave the last run's figures
    _phase("1/5 synthetic task videos and a tiny random-weight Qwen2.5-VL")
    files = prepare_data(folder / "data", train_videos=videos, val_videos=max(1, videos // 2))
    console.print(f"data and model in {escape(str(folder / 'data'))}")
    _phase("2/5 decode each video once into the frame store (worker pool)")
    preprocess(files, workers)
    _phase("3/5 evaluate the untrained model")
    before = evaluate(files["model"], files, "untrained", folder / "eval-before")
    _phase("4/5 train")
    run_dir = folder / f"run-{int(time.time())}"
    result = train(files, steps, run_dir)
    _phase("5/5 evaluate the trained model")
    after = evaluate(Path(result["checkpoint"]) / "model", files, "trained", run_dir / "eval-after")

    table = Table(title="ReelRL demo: the colour question on videos the model never trained on")
    for column in ("", "held-out accuracy", "samples", "format", "eval job"):
        table.add_column(column)
    table.add_row("before training", f"{before.accuracy:.3f}", str(before.samples), "", before.job_id[:8])
    table.add_row(
        f"after {result['steps']} steps", f"{after.accuracy:.3f}", str(after.samples),
        f"{result.get('val/format', float('nan')):.2f}", after.job_id[:8],
    )  # fmt: skip
    console.print(table)
    minutes = (time.monotonic() - started) / 60
    write_summary(folder / SUMMARY, before, after, result, videos, minutes)
    console.print(
        f"metrics: {escape(str(run_dir / 'metrics.jsonl'))}; curves: `reelrl serve api`; "
        f"whole demo {minutes:.1f} min; summary: {escape(str(folder / SUMMARY))}"
    )
    if log is not None:
        console.print(f"vLLM, torch and worker output: {escape(str(log))} (shown with --verbose)")
    return 0 if no_serve else serve(port)
