"""The ``train`` job kind: one Celery task that runs the training loop (the Ray driver, with
``trainer.use_ray``) for a job row, reporting every step's metrics as job events.

Its worker runs tasks in the worker process itself (``reelrl worker train``: solo pool): the loop
starts vLLM and Ray, which spawn processes, and a prefork pool's children are daemons that may not.

A job whose worker died is retried (the kind's ``max_retries``): the retry continues from the job's
newest checkpoint, and the steps it recomputes are announced by a ``metrics_rewind`` event.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from celery import shared_task
from celery.signals import worker_ready

from services.common.jobs import METRICS_EVENT, METRICS_REWIND_EVENT, JobContext, metrics_steps, run_job
from services.common.orphans import sweep_at_worker_start

if TYPE_CHECKING:
    from services.trainer.config import TrainConfig

log = logging.getLogger(__name__)
# Engines a killed worker left behind (services.common.orphans) end when the next worker starts.
worker_ready.connect(sweep_at_worker_start)

TRAIN_TASK = "reelrl.train.run"
# A run is bounded by its own total_steps; the broker's visibility timeout must exceed this on Redis.
_TRAIN_LIMIT_S = 30 * 24 * 3600


class ForeignCheckpoint(RuntimeError):
    """``trainer.resume=auto`` would continue a checkpoint another job (or a run outside jobs) wrote."""


def _continue_own_run(config: TrainConfig, job_id: str, attempt: int) -> None:
    """A job continues only its own checkpoints by itself.

    A retry (attempt 2, 3, …) continues the run its earlier attempts checkpointed, whatever
    ``trainer.resume`` says: ``none`` would refuse the folder holding those checkpoints, and a PATH
    would start again from there. Only when the folder's newest checkpoint is this job's (its
    ``state.json`` names the job): another run's checkpoint there leaves the setting standing.

    ``resume=auto`` never adopts another's newest checkpoint (a resubmitted duplicate would otherwise
    "succeed" at once on the first job's last step): that raises :class:`ForeignCheckpoint`, and
    continuing another run is asked for by naming its checkpoint folder in ``trainer.resume``.
    """
    from services.trainer.checkpoints import complete_checkpoints, read_state

    saved = complete_checkpoints(Path(config.trainer.output_dir))
    if not saved:
        return
    step, folder = saved[-1]
    owner = read_state(folder).get("job_id")
    if owner == job_id:
        if attempt > 1 and config.trainer.resume != "auto":
            log.warning(
                "attempt %d: resuming from this job's checkpoint of step %d (trainer.resume=%s was for "
                "the first attempt)", attempt, step, config.trainer.resume,
            )  # fmt: skip
            config.trainer.resume = "auto"
        return
    writer = f"job {owner}" if owner else "a run outside the jobs API"
    if config.trainer.resume == "auto":
        raise ForeignCheckpoint(
            f"trainer.output_dir {config.trainer.output_dir} holds a checkpoint of {writer} (step {step}); "
            f"a job does not continue another's run by itself: set trainer.resume={folder} to continue "
            "it on purpose, or choose another trainer.output_dir"
        )
    if attempt > 1:
        log.warning(
            "attempt %d: the newest checkpoint in %s (step %d) is %s's, not this job's; trainer.resume=%s "
            "stands", attempt, config.trainer.output_dir, step, writer, config.trainer.resume,
        )  # fmt: skip


class _Rewind:
    """Says once per attempt, before its first step, that a retry recomputes steps reported before.

    A retry resumes from the last checkpoint (``trainer.resume=auto``) and recomputes the steps after
    it, which the earlier attempt may have reported. Their new values are the run's history (the
    trainer truncates ``metrics.jsonl`` the same way), so they are reported again after a
    ``metrics_rewind`` event: the metrics endpoint and the status page keep each step once, as of the
    latest report, and an event-stream client drops its steps above ``after_step`` when it sees one.
    """

    def __init__(self, ctx: JobContext) -> None:
        self._ctx = ctx
        self._checked = False

    def before(self, step: int) -> None:
        if self._checked:
            return
        self._checked = True
        reported, _, _ = metrics_steps(self._ctx.job_id)
        recomputed = [s["step"] for s in reported if isinstance(s.get("step"), int) and s["step"] >= step]
        if recomputed:
            self._ctx.event(
                METRICS_REWIND_EVENT,
                {"after_step": step - 1, "superseded": recomputed, "attempt": self._ctx.attempt},
            )


def run_train_job(job_id: str, *, on_step: Sequence[Callable[[int, dict], None]] = ()) -> dict[str, Any]:
    """Run the train job ``job_id`` here (claim, heartbeat, events, final state); ``on_step`` hooks see
    every step too (the demo's progress bar). Returns the job's result."""
    from services.trainer.config import parse_config
    from services.trainer.loop import Hooks, run

    summary: dict[str, Any] = {}  # stays empty when a cancel stops the run during its setup
    with run_job(job_id) as ctx:
        config = parse_config(ctx.config)
        _continue_own_run(config, job_id, ctx.attempt)
        total = config.trainer.total_steps
        rewind = _Rewind(ctx)

        def report(step: int, metrics: dict) -> None:
            rewind.before(step)
            ctx.event(METRICS_EVENT, metrics)
            ctx.progress(step, total, "steps")

        # A cancel stops the loop after the current step, which is then checkpointed (the job ends
        # "cancelled" with its last checkpoint kept).
        hooks = Hooks(on_step=[report, *on_step], stop=ctx.cancel_requested)
        result = run(config, hooks=hooks, job_id=job_id)
        summary = {
            "output_dir": str(result.output_dir),
            "steps": result.steps,
            "stopped": result.stopped,
            "checkpoint": str(result.checkpoint) if result.checkpoint else None,
            **{k: v for k, v in result.last_val.items() if v == v},
        }
        ctx.set_result(summary)
    return summary


@shared_task(name=TRAIN_TASK, soft_time_limit=_TRAIN_LIMIT_S, time_limit=_TRAIN_LIMIT_S + 60)
def train_job(job_id: str) -> None:
    run_train_job(job_id)
