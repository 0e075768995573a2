"""Step metrics reach every configured logger: metrics.jsonl, TensorBoard's event files, a wandb offline run
and an MLflow local store, each read back with its library's own reader; the trackers hold every step once,
also across a resume that recomputes steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.trainer.tracking import MetricsLogger, read_metrics

ROOT = Path(__file__).resolve().parents[2]
#: reading a few records takes well under a second alone; this is minutes of margin for a loaded machine
INSPECT_TIMEOUT_S = 180


def test_tensorboard_and_jsonl_get_every_step(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = MetricsLogger(tmp_path, name="t", config={}, loggers=["jsonl", "tensorboard"])
    logger.log(1, {"reward/accuracy": 0.25, "timing/gen_s": 1.5})
    logger.log(2, {"reward/accuracy": 0.75, "timing/gen_s": 0.5})
    logger.finish("succeeded")

    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2]
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert set(events.Tags()["scalars"]) == {"reward/accuracy", "timing/gen_s"}
    accuracy = [(e.step, e.value) for e in events.Scalars("reward/accuracy")]
    assert accuracy == [(1, 0.25), (2, 0.75)]


# ---------------------------------------------------------------- wandb and MLflow -------------------------


def test_continued_run_rules() -> None:
    from services.common.trackers import continued_run

    record = {"id": "r1", "last_step": 7, "job_id": "job-a"}
    # resuming a checkpoint: its run, and the record's last step when the record is about that run
    assert continued_run(
        "wandb", resume={"wandb": {"id": "r1", "last_step": 4}}, record=record, job_id=None
    ) == ("r1", 7)
    assert continued_run(
        "wandb", resume={"wandb": {"id": "r0", "last_step": 4}}, record=record, job_id=None
    ) == ("r0", 4)
    # a fresh start continues only a retry of the same job
    assert continued_run("wandb", resume=None, record=record, job_id="job-a") == ("r1", 7)
    assert continued_run("wandb", resume=None, record=record, job_id="job-b") == (None, -1)
    assert continued_run("wandb", resume=None, record=record, job_id=None) == (None, -1)
    assert continued_run("mlflow", resume={"wandb": {"id": "r1"}}, record=None, job_id=None) == (None, -1)


def _wandb_history(output_dir: Path) -> tuple[set[str], list[dict]]:
    """Every history row of every offline run under ``output_dir``, read by wandb's own reader."""
    import subprocess
    import sys

    wandb_cli = Path(sys.executable).with_name("wandb")
    run_ids, rows = set(), []
    for path in sorted((output_dir / "wandb").glob("offline-run-*/run-*.wandb")):
        try:
            out = subprocess.run(
                [str(wandb_cli), "leet", "inspect", "--json", str(path)],
                capture_output=True,
                text=True,
                check=True,
                timeout=INSPECT_TIMEOUT_S,
            ).stdout
        except subprocess.TimeoutExpired as exc:
            # a reader that never returns fails this test by name, not the whole session by the watchdog
            pytest.fail(
                f"`wandb leet inspect` did not finish in {INSPECT_TIMEOUT_S} s on {path}: {exc.stderr!r}"
            )
        for line in out.splitlines():
            record = json.loads(line)
            if record["type"] == "run":
                run_ids.add(record["run"]["run_id"])
                run = record["run"]
            elif record["type"] == "history":
                rows.append(record["history"]["item"])
    return run_ids, rows, run


def test_wandb_offline_run_holds_every_step_once_across_a_resume(tmp_path: Path, monkeypatch) -> None:
    from services.common.trackers import WandbConfig

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    settings = WandbConfig(project="reelrl-test", name="colour", tags=["tiny", "cpu"])
    config = {"trainer": {"total_steps": 4}, "data": {"batch_size": 8}}
    first = MetricsLogger(tmp_path, name="t", config=config, loggers=["jsonl", "wandb"], wandb=settings)
    for step in range(4):
        first.log(step, {"reward/overall": step / 10, "actor/lr": 1e-6, "val/accuracy": float("nan")})
    saved = first.tracker_state()  # a checkpoint at step 3 ...
    saved["wandb"]["last_step"] = 2  # ... as if it was taken at step 2 and step 3 logged after it
    first.finish("failed")

    # Resumed from the step-2 checkpoint: step 3 is recomputed (a rewind) and must not be sent again.
    second = MetricsLogger(
        tmp_path, name="t", config=config, loggers=["jsonl", "wandb"], wandb=settings, resume=saved
    )
    second.truncate_after(2)
    second.log(3, {"reward/overall": 0.9, "actor/lr": 1e-6})
    second.log(4, {"reward/overall": 0.4, "actor/lr": 1e-6})
    second.finish("finished")

    run_ids, rows, run = _wandb_history(tmp_path)
    assert run_ids == {saved["wandb"]["id"]}  # one wandb run, continued
    assert sorted(r["_step"] for r in rows) == [0, 1, 2, 3, 4]  # each step once
    assert {r["_step"]: r["reward/overall"] for r in rows} == {0: 0, 1: 0.1, 2: 0.2, 3: 0.3, 4: 0.4}
    assert all("val/accuracy" not in r for r in rows)  # non-finite values are not plotted
    assert (run["project"], run["display_name"], run["tags"]) == ("reelrl-test", "colour", ["tiny", "cpu"])
    assert run["config"]["update"]["trainer"] == {"total_steps": 4}
    # metrics.jsonl holds the recomputed step
    assert [r["reward/overall"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0, 0.1, 0.2, 0.9, 0.4]


def test_a_retried_job_continues_its_wandb_run_and_a_new_run_does_not(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    first = MetricsLogger(tmp_path, name="t", config={}, loggers=["wandb"], job_id="job-1")
    first.log(0, {"val/accuracy": 0.1})
    first.log(1, {"reward/overall": 0.1})
    first.finish("failed")  # died before its first checkpoint
    retry = MetricsLogger(tmp_path, name="t", config={}, loggers=["wandb"], job_id="job-1")
    assert retry.tracker_state()["wandb"]["id"] == first.tracker_state()["wandb"]["id"]
    for step in range(3):
        retry.log(step, {"reward/overall": 0.5})
    retry.finish("finished")
    run_ids, rows, _ = _wandb_history(tmp_path)
    assert len(run_ids) == 1 and sorted(r["_step"] for r in rows) == [0, 1, 2]
    other = MetricsLogger(tmp_path, name="t", config={}, loggers=["wandb"], job_id="job-2")
    assert other.tracker_state()["wandb"]["id"] != first.tracker_state()["wandb"]["id"]
    other.finish("finished")


def test_mlflow_local_store_holds_every_step_once_params_and_checkpoint_pointers(
    tmp_path: Path, monkeypatch
) -> None:
    from mlflow import MlflowClient

    from services.common.trackers import MlflowConfig, local_store

    config = {"trainer": {"total_steps": 4, "loggers": ["jsonl", "mlflow"]}, "actor": {"optim": {"lr": 1e-6}}}
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    settings = MlflowConfig(experiment="reelrl-test")
    first = MetricsLogger(tmp_path, name="t", config=config, loggers=["mlflow"], mlflow=settings)
    for step in range(4):
        # a name that is also the prefix of another (the loop logs both): MLflow's folder store cannot
        first.log(step, {"reward/overall": step / 10, "reward/overall/mc": 1.0, "val/accuracy": float("nan")})
    ckpt = tmp_path / "checkpoints" / "step_000002"
    (ckpt / "model").mkdir(parents=True)
    (ckpt / "model" / "model.safetensors").write_bytes(b"\0" * 4096)
    first.log_checkpoint(2, ckpt)
    saved = first.tracker_state()
    saved["mlflow"]["last_step"] = 2
    first.finish("failed")

    second = MetricsLogger(
        tmp_path, name="t", config=config, loggers=["mlflow"], mlflow=settings, resume=saved
    )
    second.log(3, {"reward/overall": 0.9})
    second.log(4, {"reward/overall": 0.4})
    second.finish("finished")

    client = MlflowClient(tracking_uri=local_store(tmp_path / "mlruns"))
    experiment = client.get_experiment_by_name("reelrl-test")
    runs = client.search_runs([experiment.experiment_id])
    assert [r.info.run_id for r in runs] == [saved["mlflow"]["id"]]
    run = runs[0]
    assert run.info.status == "FINISHED"
    history = client.get_metric_history(run.info.run_id, "reward/overall")
    assert sorted((m.step, m.value) for m in history) == [(0, 0), (1, 0.1), (2, 0.2), (3, 0.3), (4, 0.4)]
    assert client.get_metric_history(run.info.run_id, "val/accuracy") == []
    assert [m.step for m in client.get_metric_history(run.info.run_id, "reward/overall/mc")] == [0, 1, 2, 3]
    assert run.data.params["trainer.total_steps"] == "4"
    assert run.data.params["actor.optim.lr"] == "1e-06"
    assert json.loads(run.data.params["trainer.loggers"]) == ["jsonl", "mlflow"]
    # the checkpoint by reference: a pointer file names the folder, no weights were copied
    artifacts = [a.path for a in client.list_artifacts(run.info.run_id, "checkpoints")]
    assert artifacts == ["checkpoints/step_000002.json"]
    local = Path(
        client.download_artifacts(run.info.run_id, "checkpoints/step_000002.json", str(tmp_path / "dl"))
    )
    assert json.loads(local.read_text())["path"] == str(ckpt.resolve())
    assert run.data.tags["reelrl.checkpoint"] == str(ckpt.resolve())
    stored = [p for p in (tmp_path / "mlruns").rglob("*") if p.is_file()]
    assert not [p for p in stored if p.name == "model.safetensors"]


def test_mlflow_tracking_uri_from_the_environment(tmp_path: Path, monkeypatch) -> None:
    from mlflow import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")

    store = tmp_path / "elsewhere"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store.as_uri())
    logger = MetricsLogger(tmp_path / "run", name="t", config={}, loggers=["mlflow"])
    logger.log(1, {"reward/overall": 0.5})
    logger.finish("finished")
    assert not (tmp_path / "run" / "mlruns").exists()
    run = MlflowClient(tracking_uri=store.as_uri()).get_run(logger.tracker_state()["mlflow"]["id"])
    assert run.data.metrics == {"reward/overall": 0.5}


@pytest.mark.parametrize("tracker", ["wandb", "mlflow"])
def test_a_tracker_that_is_not_installed_fails_at_start_naming_the_extra(
    tmp_path: Path, tracker: str
) -> None:
    import subprocess
    import sys

    # The package hidden (a None entry in sys.modules makes its import fail); the train command stops
    # before it loads a model or creates the output folder, with a one-line config error (exit 2).
    code = (
        f"import sys; sys.modules[{tracker!r}] = None; from services.cli import app; "
        f"sys.argv = ['reelrl', *sys.argv[1:]]; app()"
    )
    args = ["train", str(ROOT / "examples" / "tiny_cpu.yaml"), f"trainer.loggers=[jsonl,{tracker}]",
            f"trainer.output_dir={tmp_path / 'run'}"]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    [line] = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert f"trainer.loggers includes {tracker}" in line and f"pip install 'reelrl[{tracker}]'" in line
    assert not (tmp_path / "run").exists()


def test_mlflow_key_replaces_what_mlflow_refuses() -> None:
    from services.common.trackers import mlflow_key

    assert mlflow_key("reward/accuracy/multiple_choice") == "reward/accuracy/multiple_choice"
    assert mlflow_key("a/Humanity & History/score") == "a/Humanity _ History/score"
    assert mlflow_key("a/(x), y+z/b") == "a/_x__ y_z/b"
    assert mlflow_key("eval/x/breakdowns/task//score") == "eval/x/breakdowns/task/_/score"
    assert mlflow_key("a/../b/.") == "a/_/b/_"
    assert mlflow_key("Größe/temps: 1") == "Größe/temps: 1"  # word characters of any script, colons


def test_a_checkpoint_from_another_folder_starts_a_new_mlflow_run_in_this_store(
    tmp_path: Path, monkeypatch
) -> None:
    from mlflow import MlflowClient

    from services.common.trackers import local_store

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    first = MetricsLogger(tmp_path / "a", name="t", config={}, loggers=["mlflow"])
    for step in range(3):
        first.log(step, {"reward/overall": step / 10})
    saved = first.tracker_state()  # in a checkpoint of folder a, resumed by a run in folder b
    first.finish("finished")
    second = MetricsLogger(tmp_path / "b", name="t", config={}, loggers=["mlflow"], resume=saved)
    second.log(3, {"reward/overall": 0.3})
    second.finish("finished")
    run_id = second.tracker_state()["mlflow"]["id"]
    assert run_id != saved["mlflow"]["id"]
    history = MlflowClient(tracking_uri=local_store(tmp_path / "b" / "mlruns")).get_metric_history(
        run_id, "reward/overall"
    )
    assert [(m.step, m.value) for m in history] == [(3, 0.3)]


def test_a_tracker_failing_mid_step_keeps_the_record_of_those_that_took_it(
    tmp_path: Path, monkeypatch
) -> None:
    from mlflow import MlflowClient

    from services.common.trackers import Trackers, local_store

    class Unreachable:  # a tracker whose server is down (not a stand-in for either library)
        run_id = "down"

        def log(self, step: int, metrics: dict[str, float]) -> None:
            raise ConnectionError("tracker unreachable")

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    trackers = Trackers(["mlflow"], output_dir=tmp_path, name="t", config={}, job_id="job-1")
    trackers.trackers["down"], trackers.last_step["down"] = Unreachable(), -1
    trackers.record["down"] = {"id": "down", "last_step": -1, "job_id": "job-1"}
    with pytest.raises(ConnectionError):
        trackers.log(0, {"reward/overall": 0.5})  # MLflow took step 0, then the run died
    run_id = trackers.state()["mlflow"]["id"]
    retry = Trackers(["mlflow"], output_dir=tmp_path, name="t", config={}, job_id="job-1")
    retry.log(0, {"reward/overall": 0.5})  # the retry recomputes step 0
    retry.log(1, {"reward/overall": 0.7})
    retry.finish("finished")
    assert retry.state()["mlflow"]["id"] == run_id
    history = MlflowClient(tracking_uri=local_store(tmp_path / "mlruns")).get_metric_history(
        run_id, "reward/overall"
    )
    assert sorted((m.step, m.value) for m in history) == [(0, 0.5), (1, 0.7)]
