"""The experiment trackers users already read, beside the project's own logs: Weights & Biases and MLflow.

Training and evaluation share them. A tracker's history is append-only (neither wandb nor MLflow can
take a logged step back), so each step reaches it once: what a run has sent is recorded in
``OUTPUT_DIR/trackers.json`` (its tracker run ids and last logged step), a resumed run continues the same
tracker run, and steps it recomputes after a rewind are not sent again (their first values stay there;
``metrics.jsonl`` and the database hold the recomputed ones).
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import os
import re
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

log = logging.getLogger(__name__)

TrackerName = Literal["wandb", "mlflow"]
STATE_FILE = "trackers.json"
# tracker -> (module it needs, the reelrl extra that installs it)
REQUIREMENTS: dict[str, tuple[str, str]] = {"wandb": ("wandb", "wandb"), "mlflow": ("mlflow", "mlflow")}


class WandbConfig(BaseModel):
    """``wandb``: where the run goes. ``WANDB_MODE=offline`` keeps it on disk (``wandb sync`` later)."""

    model_config = ConfigDict(extra="forbid")

    project: str = Field("reelrl", min_length=1)
    entity: str | None = Field(None, description="team or user (null: the account's default)")
    name: str | None = Field(None, description="run name (null: the experiment name)")
    tags: list[str] = Field(default_factory=list)


class MlflowConfig(BaseModel):
    """``mlflow``: the store (null: ``MLFLOW_TRACKING_URI``, else ``mlruns/mlflow.db`` under the output
    folder, artifacts beside it)."""

    model_config = ConfigDict(extra="forbid")

    tracking_uri: str | None = None
    experiment: str | None = Field(None, description="experiment name (null: the experiment name)")
    run_name: str | None = Field(None, description="null: the experiment name")


class TrackerNotInstalled(RuntimeError):
    """A configured tracker whose package is missing; the message names the extra that installs it."""


def require(names: Iterable[str], key: str = "trainer.loggers") -> None:
    """Fail at start, naming the extra, when a selected tracker's package is not installed."""
    for name in names:
        if name not in REQUIREMENTS:
            continue
        module, extra = REQUIREMENTS[name]
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise TrackerNotInstalled(
                f"{key} includes {name} but the {module} package is not installed: "
                f"pip install 'reelrl[{extra}]'"
            ) from exc


def flatten(tree: Mapping[str, Any], sep: str = ".", prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level of ``a.b.c`` keys (lists and scalars are leaves)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{sep}{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, sep, name))
        else:
            out[name] = value
    return out


def numeric(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers among ``metrics`` (booleans, strings, None and NaN are not plotted)."""
    return {
        k: float(v)
        for k, v in metrics.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }


def continued_run(
    name: str, *, resume: Mapping[str, Any] | None, record: Mapping[str, Any] | None, job_id: str | None
) -> tuple[str | None, int]:
    """Which tracker run this start continues (None: a new one) and the last step that run holds.

    ``resume`` is the tracker state saved in the checkpoint being resumed (None: no checkpoint, a fresh
    start); ``record`` is what ``trackers.json`` says was sent (it may be ahead of the checkpoint: steps
    logged after it, before the run died). A fresh start continues the recorded run only when it is a
    retry of the same job, so a retried job never opens a second run and a new run never appends to an
    old one."""
    record = record or {}
    saved = (resume or {}).get(name)
    if saved and saved.get("id"):
        last = record.get("last_step", -1) if record.get("id") == saved["id"] else saved.get("last_step", -1)
        return str(saved["id"]), int(last)
    if record.get("id") and job_id is not None and record.get("job_id") == job_id:
        return str(record["id"]), int(record.get("last_step", -1))
    return None, -1


class Tracker(Protocol):
    run_id: str

    def log(self, step: int, metrics: dict[str, float]) -> None: ...

    def log_checkpoint(self, step: int, path: Path) -> None: ...

    def finish(self, status: str) -> None: ...


class WandbTracker:
    def __init__(
        self, cfg: WandbConfig, *, output_dir: Path, name: str, config: dict[str, Any], run_id: str | None
    ) -> None:
        import wandb

        self.run = wandb.init(
            project=cfg.project, entity=cfg.entity, name=cfg.name or name, tags=cfg.tags or None,
            config=config, dir=str(output_dir), id=run_id or uuid.uuid4().hex[:16], resume="allow",
        )  # fmt: skip
        self.run_id = self.run.id
        # Online, a resumed run knows its last step; wandb drops (with a warning) any step below it.
        self.server_last_step = int(getattr(self.run, "step", 0) or 0) - 1

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def log_checkpoint(self, step: int, path: Path) -> None:
        self.run.summary.update({"checkpoint/path": str(path), "checkpoint/step": step})

    def finish(self, status: str) -> None:
        self.run.finish(exit_code=0 if status in ("finished", "stopped", "succeeded", "cancelled") else 1)


# What MLflow refuses in a metric or param name (it takes word characters, ``/ . - :`` and spaces); a
# breakdown key such as Video-MME's "Humanity & History" would otherwise fail the whole batch.
_MLFLOW_REFUSED = re.compile(r"[^\w/.\- :]")
_MLFLOW_KEY_MAX = 250


def mlflow_key(name: str) -> str:
    """``name`` as MLflow stores it: each refused character as ``_``, and no empty, ``.`` or ``..`` path
    segment (MLflow rejects a name that normalises to another)."""
    parts = [_MLFLOW_REFUSED.sub("_", part) for part in name.split("/")]
    return "/".join(part if part not in ("", ".", "..") else "_" for part in parts)[:_MLFLOW_KEY_MAX]


def local_store(root: Path) -> str:
    """The tracking URI of the default MLflow store under ``root`` (``OUTPUT_DIR/mlruns``)."""
    return f"sqlite:///{Path(root).resolve() / 'mlflow.db'}"


class MlflowTracker:
    server_last_step = -1

    def __init__(
        self, cfg: MlflowConfig, *, output_dir: Path, name: str, config: dict[str, Any], run_id: str | None
    ) -> None:
        from mlflow import MlflowClient
        from mlflow.entities import Param, RunStatus

        uri = cfg.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        artifacts = None
        if uri is None:
            # A local store beside the run's files: an SQLite file, not MLflow's folder store, where a
            # metric is a file and so ``val/accuracy`` and ``val/accuracy/<type>`` cannot both exist.
            root = (output_dir / "mlruns").resolve()
            root.mkdir(parents=True, exist_ok=True)
            uri, artifacts = local_store(root), (root / "artifacts").as_uri()
        self.client = MlflowClient(tracking_uri=uri)
        params: dict[str, str] = {}
        for k, v in flatten(config).items():
            params.setdefault(mlflow_key(k), json.dumps(v) if not isinstance(v, str) else v)
        if run_id is not None and not self._in_store(run_id):
            # a checkpoint from another folder (its own default store) or a store since moved
            log.warning("mlflow run %s is not in the store %s: starting a new run", run_id, uri)
            run_id = None
        if run_id is not None:
            run = self.client.get_run(run_id)
            self.client.update_run(run_id, status=RunStatus.to_string(RunStatus.RUNNING))
            known = run.data.params
            changed = sorted(k for k, v in params.items() if k in known and known[k] != v[:6000])
            if changed:  # MLflow params cannot change: the run keeps the first values
                log.warning("mlflow run %s keeps its first values of changed params %s", run_id, changed[:10])
            params = {k: v for k, v in params.items() if k not in known}
        else:
            experiment = cfg.experiment or name
            found = self.client.get_experiment_by_name(experiment)
            experiment_id = (
                found.experiment_id if found else self.client.create_experiment(experiment, artifacts)
            )
            run = self.client.create_run(experiment_id, run_name=cfg.run_name or name)
        self.run_id = run.info.run_id
        items = [Param(k, v[:6000]) for k, v in params.items()]
        for i in range(0, len(items), 100):  # MLflow takes at most 100 params a batch
            self.client.log_batch(self.run_id, params=items[i : i + 100])

    def _in_store(self, run_id: str) -> bool:
        from mlflow.exceptions import MlflowException
        from mlflow.protos.databricks_pb2 import RESOURCE_DOES_NOT_EXIST, ErrorCode

        try:
            self.client.get_run(run_id)
        except MlflowException as exc:
            if exc.error_code == ErrorCode.Name(RESOURCE_DOES_NOT_EXIST):
                return False
            raise
        return True

    def log(self, step: int, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        named: dict[str, float] = {}
        for k, v in metrics.items():
            named.setdefault(mlflow_key(k), v)
        items = [Metric(k, v, now, step) for k, v in named.items()]
        for i in range(0, len(items), 1000):
            self.client.log_batch(self.run_id, metrics=items[i : i + 1000])

    def log_checkpoint(self, step: int, path: Path) -> None:
        # A pointer, not a copy: the weights stay in the checkpoint folder.
        pointer = {"step": step, "path": str(Path(path).resolve()), "uri": Path(path).resolve().as_uri()}
        self.client.log_dict(self.run_id, pointer, f"checkpoints/step_{step:06d}.json")
        self.client.set_tag(self.run_id, "reelrl.checkpoint", pointer["path"])

    def finish(self, status: str) -> None:
        state = {"finished": "FINISHED", "succeeded": "FINISHED", "stopped": "KILLED", "cancelled": "KILLED"}
        self.client.set_terminated(self.run_id, status=state.get(status, "FAILED"))


class Trackers:
    """The configured trackers of one run folder, and the record of what each was sent."""

    def __init__(
        self,
        names: Iterable[str],
        *,
        output_dir: Path,
        name: str,
        config: dict[str, Any],
        wandb: WandbConfig | None = None,
        mlflow: MlflowConfig | None = None,
        resume: Mapping[str, Any] | None = None,
        job_id: str | None = None,
        key: str = "trainer.loggers",
    ) -> None:
        names = [n for n in dict.fromkeys(names) if n in REQUIREMENTS]
        require(names, key)
        self.output_dir = Path(output_dir)
        self.path = self.output_dir / STATE_FILE
        self.job_id = job_id
        self.record: dict[str, dict[str, Any]] = self._read()
        self.trackers: dict[str, Tracker] = {}
        self.last_step: dict[str, int] = {}
        for tracker in names:
            run_id, last = continued_run(
                tracker, resume=resume, record=self.record.get(tracker), job_id=job_id
            )
            kind = WandbTracker if tracker == "wandb" else MlflowTracker
            settings = (wandb or WandbConfig()) if tracker == "wandb" else (mlflow or MlflowConfig())
            started = kind(settings, output_dir=self.output_dir, name=name, config=config, run_id=run_id)
            self.trackers[tracker] = started
            self.last_step[tracker] = max(last, started.server_last_step)
            self.record[tracker] = {
                "id": started.run_id,
                "last_step": self.last_step[tracker],
                "job_id": job_id,
            }
        if self.trackers:
            self._write()

    def __bool__(self) -> bool:
        return bool(self.trackers)

    def _read(self) -> dict[str, dict[str, Any]]:
        return _read_json(self.path)

    def _write(self) -> None:
        self.output_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(json.dumps(self.record, indent=1))
        os.replace(tmp, self.path)

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Send ``step`` to every tracker that does not hold it yet."""
        values = numeric({k: v for k, v in metrics.items() if k != "step"})
        sent = False
        try:
            for tracker, target in self.trackers.items():
                if step <= self.last_step[tracker]:
                    continue
                target.log(step, values)
                self.last_step[tracker] = step
                self.record[tracker]["last_step"] = step
                sent = True
        finally:  # also when a later tracker failed: what the earlier ones hold must not be sent again
            if sent:
                self._write()

    def next_step(self) -> int:
        """One past the newest step any tracker holds (for runs without a step of their own)."""
        return max(self.last_step.values(), default=-1) + 1

    def log_checkpoint(self, step: int, path: Path) -> None:
        for target in self.trackers.values():
            target.log_checkpoint(step, path)

    def state(self) -> dict[str, dict[str, Any]]:
        """What a checkpoint stores so that a run resuming from it continues the same tracker runs."""
        return {
            t: {"id": target.run_id, "last_step": self.last_step[t]} for t, target in self.trackers.items()
        }

    def finish(self, status: str) -> None:
        for tracker, target in self.trackers.items():
            try:
                target.finish(status)
            except Exception:  # one tracker's shutdown must not hide the run's own outcome
                log.exception("could not close the %s run", tracker)


def summary_metrics(summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """Every number of each benchmark's summary, whatever fields it has, as ``eval/<benchmark>/<path>``
    (``eval/mvbench/overall``, ``eval/mvbench/breakdowns/task/action_count/score``)."""
    out: dict[str, float] = {}
    for benchmark, summary in summaries.items():
        flat = numeric(flatten(summary, sep="/"))
        out.update({f"eval/{benchmark}/{key}": value for key, value in flat.items()})
    return out


def log_eval_summaries(
    names: Iterable[str],
    *,
    output_dir: Path,
    name: str,
    config: dict[str, Any],
    summaries: Mapping[str, Mapping[str, Any]],
    status: str,
    wandb: WandbConfig | None = None,
    mlflow: MlflowConfig | None = None,
    job_id: str | None = None,
) -> None:
    """An eval run's summaries into its trackers: one step per attempt of the run, in the tracker runs
    ``OUTPUT_DIR/trackers.json`` names (a restarted eval continues them; its newer figures come one
    step later instead of logging a step twice)."""
    names = [n for n in names if n in REQUIREMENTS]
    if not names:
        return
    recorded = {k: v for k, v in _read_json(Path(output_dir) / STATE_FILE).items() if isinstance(v, dict)}
    trackers = Trackers(
        names, output_dir=output_dir, name=name, config=config, wandb=wandb, mlflow=mlflow,
        resume=recorded, job_id=job_id, key="eval.loggers",
    )  # fmt: skip
    try:
        trackers.log(trackers.next_step(), summary_metrics(summaries))
    finally:
        trackers.finish(status)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
