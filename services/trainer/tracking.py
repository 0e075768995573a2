"""Where step metrics go: ``OUTPUT_DIR/metrics.jsonl``, the ``train_runs`` / ``train_step_metrics`` tables
the status page reads, optionally TensorBoard, wandb and MLflow, and any hook a job runner attaches. A
step is written once: resuming from a checkpoint first removes what later steps had written (the
append-only trackers instead skip the steps they already hold, ``services.common.trackers``). The
steps' rollout records (``trainer.rollout_log``) reach wandb and MLflow too, under the same rule."""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select

from services.common.db.engine import session_scope
from services.common.db.models import TrainRun, TrainStepMetrics, utcnow
from services.common.rollout_files import ROLLOUTS_DIR, rollout_name
from services.common.trackers import MlflowConfig, Trackers, WandbConfig
from services.trainer.rollout_log import records_text

METRICS_FILE = "metrics.jsonl"
# Which samples each step trained on: what a resumed run is checked against, and where to look first
# when a step's numbers look odd.
BATCHES_FILE = "batches.jsonl"
StepHook = Callable[[int, dict[str, float]], None]
#: the columns of wandb's ``rollouts`` table: one row per response of the logged groups
ROLLOUT_COLUMNS = (
    "step", "group", "sample_id", "problem_type", "prompt", "response", "overall", "accuracy", "format",
    "advantage", "length", "offline", "parts", "engine", "error",
)  # fmt: skip
_HEADLINE = ("overall", "accuracy", "format")


def run_id_for(output_dir: Path) -> str:
    """A run is its output folder: the same folder resumes the same run."""
    return hashlib.sha256(str(Path(output_dir).resolve()).encode()).hexdigest()[:32]


def clean(metrics: dict[str, Any]) -> dict[str, float | int | None]:
    """JSON-safe numbers: non-finite values become None (JSON has no NaN) rather than corrupt a line."""
    out: dict[str, float | int | None] = {}
    for k, v in metrics.items():
        value = float(v) if not isinstance(v, int) or isinstance(v, bool) else v
        out[k] = value if not isinstance(value, float) or math.isfinite(value) else None
    return out


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Every step object of a ``metrics.jsonl`` (a torn last line from a kill is ignored)."""
    rows = []
    if not path.exists():
        return rows
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def rollout_rows(records: Iterable[dict[str, Any]]) -> list[list[Any]]:
    """The rows of the ``rollouts`` table (:data:`ROLLOUT_COLUMNS`) of a step's rollout records."""
    rows = []
    for record in records:
        head = [record[k] for k in ("step", "group", "sample_id", "problem_type", "prompt")]
        for response in record["responses"]:
            reward = response["reward"]
            rewards = [reward[k] for k in _HEADLINE]
            tail = [response[k] for k in ("advantage", "length", "offline")]
            # a reward mix's other parts (builtin, each function, the judge) as one JSON cell
            parts = json.dumps({k: v for k, v in sorted(reward.items()) if k not in _HEADLINE})
            rows.append(
                [*head, response["text"], *rewards, *tail, parts, response["engine"], response["error"]]
            )
    return rows


def _wandb_rollouts(target: Any, step: int, records: list[dict[str, Any]]) -> None:
    import wandb

    target.run.log(
        {"rollouts": wandb.Table(columns=list(ROLLOUT_COLUMNS), data=rollout_rows(records))}, step=step
    )


def _mlflow_rollouts(target: Any, step: int, records: list[dict[str, Any]]) -> None:
    target.client.log_text(target.run_id, records_text(records), f"{ROLLOUTS_DIR}/{rollout_name(step)}")


#: how each tracker takes a step's rollout records: wandb as a table under "rollouts" in the step's
#: history row, MLflow as the artifact rollouts/step_NNNNNN.jsonl (the file's own text)
ROLLOUT_SENDERS: dict[str, Callable[[Any, int, list[dict[str, Any]]], None]] = {
    "wandb": _wandb_rollouts,
    "mlflow": _mlflow_rollouts,
}


def _append_line(path: Path, row: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


class MetricsLogger:
    def __init__(
        self,
        output_dir: Path,
        *,
        name: str,
        config: dict[str, Any],
        loggers: Iterable[str],
        job_id: str | None = None,
        hooks: Iterable[StepHook] = (),
        wandb: WandbConfig | None = None,
        mlflow: MlflowConfig | None = None,
        resume: dict[str, Any] | None = None,
    ) -> None:
        """``resume``: the tracker state of the checkpoint being resumed (None: a fresh start)."""
        self.output_dir = Path(output_dir)
        self.path = self.output_dir / METRICS_FILE
        self.batches_path = self.output_dir / BATCHES_FILE
        self.loggers = set(loggers)
        self.run_id = run_id_for(self.output_dir)
        self.hooks = list(hooks)
        self._tb = None
        if "db" in self.loggers:
            with session_scope() as s:
                run = s.get(TrainRun, self.run_id)
                if run is None:
                    s.add(
                        TrainRun(
                            id=self.run_id, name=name, output_dir=str(self.output_dir.resolve()),
                            config=config, status="running", job_id=job_id, last_step=0,
                        )
                    )  # fmt: skip
                else:
                    run.config, run.status, run.error, run.updated_at = config, "running", None, utcnow()
                    run.job_id = job_id or run.job_id
        if "tensorboard" in self.loggers:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as exc:
                raise RuntimeError(
                    "trainer.loggers includes tensorboard but the tensorboard package is not installed "
                    "(pip install tensorboard)"
                ) from exc
            self._tb = SummaryWriter(str(self.output_dir / "tensorboard"))
        self.trackers = Trackers(
            self.loggers, output_dir=self.output_dir, name=name, config=config, wandb=wandb, mlflow=mlflow,
            resume=resume, job_id=job_id,
        )  # fmt: skip

    def truncate_after(self, step: int) -> None:
        """Forget every step after ``step`` (resuming from that step's checkpoint recomputes them)."""
        if "jsonl" in self.loggers:
            for path in (self.path, self.batches_path):
                if path.exists():
                    kept = [r for r in read_metrics(path) if int(r.get("step", 0)) <= step]
                    tmp = path.with_name(f".{path.name}.tmp")
                    tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
                    os.replace(tmp, path)
        if "db" in self.loggers:
            with session_scope() as s:
                s.execute(
                    delete(TrainStepMetrics).where(
                        TrainStepMetrics.run_id == self.run_id, TrainStepMetrics.step > step
                    )
                )

    def log(self, step: int, metrics: dict[str, Any], samples: list[str] | None = None) -> None:
        row = {"step": step, **clean(metrics)}
        if "jsonl" in self.loggers:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if samples is not None:
                _append_line(self.batches_path, {"step": step, "samples": samples})
            _append_line(self.path, row)
        if "db" in self.loggers:
            with session_scope() as s:
                existing = s.scalar(
                    select(TrainStepMetrics).where(
                        TrainStepMetrics.run_id == self.run_id, TrainStepMetrics.step == step
                    )
                )
                if existing is None:
                    s.add(TrainStepMetrics(run_id=self.run_id, step=step, metrics=row))
                else:
                    existing.metrics = row
                run = s.get(TrainRun, self.run_id)
                if run is not None:
                    run.last_step, run.updated_at = step, utcnow()
        if self._tb is not None:
            for k, v in row.items():
                if k != "step" and isinstance(v, int | float):
                    self._tb.add_scalar(k, v, step)
        self.trackers.log(step, row)
        for hook in self.hooks:
            hook(step, row)

    def log_rollouts(self, step: int, records: list[dict[str, Any]]) -> None:
        """A step's rollout records (``services.trainer.rollout_log``) to every tracker that does not hold
        the step yet (a step a resume recomputes keeps what was sent first, like its metrics)."""
        trackers = self.trackers
        for name, target in trackers.trackers.items():
            if step > trackers.last_step[name]:
                ROLLOUT_SENDERS[name](target, step, records)

    def finish(self, status: str, error: str | None = None) -> None:
        if "db" in self.loggers:
            with session_scope() as s:
                run = s.get(TrainRun, self.run_id)
                if run is not None:
                    run.status, run.error, run.updated_at = status, error, utcnow()
        if self._tb is not None:
            self._tb.close()
        self.trackers.finish(status)

    def log_checkpoint(self, step: int, folder: Path) -> None:
        """Trackers learn where a checkpoint is (by reference: the weights are not copied)."""
        self.trackers.log_checkpoint(step, folder)

    def tracker_state(self) -> dict[str, Any]:
        """The tracker runs a checkpoint continues when resumed."""
        return self.trackers.state()
