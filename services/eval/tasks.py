"""The ``eval`` job kind: one Celery task, ``reelrl.eval.run`` (kwargs ``{"job_id": …}``), running an
evaluation for a job row. Every scored sample is a progress report, every benchmark summary a
``result`` event (the jobs API relays both). Its worker runs tasks in the worker process itself
(``reelrl worker eval``: solo pool), because vLLM spawns processes of its own.

A redelivered job resumes its run (the run id is the job id): finished samples are skipped.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task
from celery.signals import worker_ready

from services.common.jobs import run_job
from services.common.orphans import sweep_at_worker_start

EVAL_TASK = "reelrl.eval.run"
# A run is bounded by its benchmarks; the broker's visibility timeout must exceed this on Redis.
_EVAL_LIMIT_S = 7 * 24 * 3600
# Engines a killed worker left behind (services.common.orphans) end when the next worker starts.
worker_ready.connect(sweep_at_worker_start)


def result_event(summary: Any, manifest: dict[str, Any]) -> dict[str, Any]:
    """A summary as the status page's tables read it: scalars beside ``overall``, breakdowns as
    {key: {"score", "n"}}, the manifest as-is."""
    event: dict[str, Any] = {
        "benchmark": summary.benchmark,
        "overall": summary.overall,
        "metric": summary.metric,
        "samples": summary.count,
        "missing": len(summary.missing),
        "errors": len(summary.errors),
        "judged": summary.judged,
        # the official headline's robust counterpart and what the official reader could not read
        "reader": summary.reader,
        "robust_overall": summary.robust_overall,
        "unreadable": summary.unreadable,
        **summary.metrics,
        "manifest": manifest,
    }
    for name, cells in summary.breakdowns.items():
        event[f"by {name}"] = {key: {"score": c.score, "n": c.count} for key, c in cells.items()}
    return event


@shared_task(name=EVAL_TASK, soft_time_limit=_EVAL_LIMIT_S, time_limit=_EVAL_LIMIT_S + 60)
def eval_job(job_id: str) -> None:
    from services.eval.config import EvalConfig
    from services.eval.runner import Hooks, run_eval

    with run_job(job_id) as ctx:
        config = EvalConfig.model_validate({**ctx.config, "run_id": ctx.config.get("run_id") or job_id})

        def on_result(benchmark: str, item: Any, done: int, total: int) -> None:
            ctx.progress(done, total, f"{benchmark} {item.id}")

        def on_summary(summary: Any, manifest: dict[str, Any]) -> None:
            ctx.event("result", result_event(summary, manifest))

        report = run_eval(
            config,
            Hooks(on_result=on_result, on_summary=on_summary, stop=ctx.cancel_requested),
            job_id=job_id,
        )
        ctx.flush_progress()
        ctx.set_result(
            {
                "run_id": report.run_id,
                "output_dir": str(report.output_dir),
                "written": report.written,
                "resumed": report.skipped,
                **{f"{name}/overall": s.overall for name, s in report.summaries.items()},
            }
        )
