"""Eval summaries reach the configured trackers: every number a summary holds (overall, named metrics,
each breakdown's cells), read back from a real wandb offline run and a real MLflow local store; a
restarted eval continues the same tracker runs one step later instead of logging a step twice."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from services.common.trackers import (
    MlflowConfig,
    WandbConfig,
    local_store,
    log_eval_summaries,
    summary_metrics,
)
from services.eval.benchmarks.results import Cell, Summary
from services.eval.config import EvalConfig


def _summary(overall: float) -> Summary:
    return Summary(
        benchmark="mvbench", metric="accuracy", overall=overall, count=4, metrics={"M-Avg": overall},
        breakdowns={"task": {"action_count": Cell(score=50.0, count=2), "scene": Cell(score=100.0, count=2)}},
        missing=["v3"], errors={"v4": "no answer"}, notes=["a note"],
    )  # fmt: skip


def test_summary_metrics_are_every_number_of_the_summary() -> None:
    metrics = summary_metrics({"mvbench": _summary(75.0).model_dump(mode="json")})
    expected = {
        "eval/mvbench/overall": 75.0,
        "eval/mvbench/count": 4.0,
        "eval/mvbench/metrics/M-Avg": 75.0,
        "eval/mvbench/breakdowns/task/action_count/score": 50.0,
        "eval/mvbench/breakdowns/task/action_count/count": 2.0,
        "eval/mvbench/breakdowns/task/scene/score": 100.0,
        "eval/mvbench/breakdowns/task/scene/count": 2.0,
        "eval/mvbench/judged": 0.0,
    }
    assert expected.items() <= metrics.items()  # a summary's newer numeric fields come along as well
    # text fields (metric's name, ids missing, error messages, notes) are not metrics
    assert not [
        k for k in metrics if k.split("/")[2] in ("benchmark", "metric", "missing", "errors", "notes")
    ]


def test_eval_config_takes_trackers_and_rejects_others(tmp_path: Path) -> None:
    cfg = EvalConfig(
        model=tmp_path,
        benchmarks=["mvbench"],
        data_root=tmp_path,
        loggers=["wandb", "mlflow"],
        wandb={"project": "p"},
    )
    assert cfg.wandb.project == "p"
    with pytest.raises(ValueError, match="loggers"):
        EvalConfig(model=tmp_path, benchmarks=["mvbench"], data_root=tmp_path, loggers=["tensorboard"])


def test_eval_summaries_reach_wandb_and_mlflow_once_per_attempt(tmp_path: Path, monkeypatch) -> None:
    from mlflow import MlflowClient

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    common = dict(
        output_dir=tmp_path, name="eval-abc", config={"benchmarks": ["mvbench"]}, status="succeeded",
        wandb=WandbConfig(project="reelrl-eval-test"), mlflow=MlflowConfig(experiment="reelrl-eval"),
    )  # fmt: skip
    for overall in (50.0, 75.0):  # the run, then a restart of it that finished more samples
        log_eval_summaries(
            ["wandb", "mlflow"], summaries={"mvbench": _summary(overall).model_dump()}, **common
        )

    record = json.loads((tmp_path / "trackers.json").read_text())
    client = MlflowClient(tracking_uri=local_store(tmp_path / "mlruns"))
    runs = client.search_runs([client.get_experiment_by_name("reelrl-eval").experiment_id])
    assert [r.info.run_id for r in runs] == [record["mlflow"]["id"]]
    history = client.get_metric_history(runs[0].info.run_id, "eval/mvbench/overall")
    assert sorted((m.step, m.value) for m in history) == [(0, 50.0), (1, 75.0)]
    assert runs[0].data.metrics["eval/mvbench/breakdowns/task/scene/score"] == 100.0

    wandb_cli = Path(sys.executable).with_name("wandb")
    ids, rows = set(), []
    for path in sorted((tmp_path / "wandb").glob("offline-run-*/run-*.wandb")):
        out = subprocess.run(
            [str(wandb_cli), "leet", "inspect", "--json", str(path)],
            capture_output=True,
            text=True,
            check=True,
        )
        for line in out.stdout.splitlines():
            item = json.loads(line)
            if item["type"] == "run":
                ids.add(item["run"]["run_id"])
            elif item["type"] == "history":
                rows.append(item["history"]["item"])
    assert ids == {record["wandb"]["id"]}
    assert sorted((r["_step"], r["eval/mvbench/overall"]) for r in rows) == [(0, 50.0), (1, 75.0)]
    assert all(r["eval/mvbench/breakdowns/task/action_count/score"] == 50.0 for r in rows)


def test_an_eval_selecting_a_tracker_that_is_not_installed_fails_at_start_naming_the_extra(
    tmp_path: Path,
) -> None:
    # the package hidden (a None entry in sys.modules makes its import fail); nothing is loaded or run
    code = (
        "import sys; sys.modules['mlflow'] = None\n"
        "from pathlib import Path\n"
        "from services.eval.config import EvalConfig\n"
        "from services.eval.runner import run_eval\n"
        "root = Path(sys.argv[1])\n"
        "run_eval(EvalConfig(model=root, benchmarks=['mvbench'], data_root=root, loggers=['mlflow']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode != 0
    assert "TrackerNotInstalled: eval.loggers includes mlflow" in done.stderr
    assert "pip install 'reelrl[mlflow]'" in done.stderr


def test_eval_run_command_names_the_missing_extra_in_one_line_and_exits_2(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['wandb'] = None; from services.cli import app; "
        "sys.argv = ['reelrl', *sys.argv[1:]]; app()"
    )
    args = ["eval", "run", "--model", str(tmp_path), "--benchmarks", "mvbench", "--data-root", str(tmp_path),
            "--output", str(tmp_path / "run"), "loggers=[wandb]"]  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    [line] = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert "eval.loggers includes wandb" in line and "pip install 'reelrl[wandb]'" in line


def test_breakdown_keys_mlflow_refuses_reach_it_under_safe_names(tmp_path: Path, monkeypatch) -> None:
    from mlflow import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    # Video-MME's sub-categories are written like this one
    summary = Summary(
        benchmark="videomme", metric="accuracy", overall=50.0, count=2,
        breakdowns={"sub_category": {"Humanity & History": Cell(score=50.0, count=2)}},
    )  # fmt: skip
    log_eval_summaries(
        ["mlflow"], output_dir=tmp_path, name="eval-vm", config={"benchmarks": ["videomme"]},
        summaries={"videomme": summary.model_dump(mode="json")}, status="succeeded",
    )  # fmt: skip
    run_id = json.loads((tmp_path / "trackers.json").read_text())["mlflow"]["id"]
    client = MlflowClient(tracking_uri=local_store(tmp_path / "mlruns"))
    key = "eval/videomme/breakdowns/sub_category/Humanity _ History/score"
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, key)] == [(0, 50.0)]
    assert client.get_run(run_id).data.metrics["eval/videomme/overall"] == 50.0
