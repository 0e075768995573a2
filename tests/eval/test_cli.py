"""`reelrl eval --list-benchmarks`, `eval samples` and `eval score` (no model), run in-process."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from services.cli import app
from services.eval.benchmarks import benchmark_names
from tests.eval.benchmarks.test_vsibench import ROWS as VSI_ROWS
from tests.eval.conftest import write_jsonl, write_parquet

runner = CliRunner()


def test_list_benchmarks_both_spellings():
    for args in (["eval", "--list-benchmarks"], ["eval", "run", "--list-benchmarks"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert result.output.split() == benchmark_names()


def test_samples_prints_normalised_jsonl(tmp_path):
    write_parquet(tmp_path / "vsi" / "test-00000-of-00001.parquet", VSI_ROWS)
    result = runner.invoke(
        app, ["eval", "samples", "--benchmark", "vsibench", "--annotations", str(tmp_path / "vsi"),
              "--video-root", "/data/vsi"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [r["id"] for r in rows] == ["0", "1", "2", "3", "4"]
    assert rows[0]["problem_type"] == "regression" and rows[0]["answer"] == "4"
    assert rows[0]["videos"] == ["/data/vsi/arkitscenes/41069025.mp4"]
    assert rows[2]["options"] == ["A. left", "B. right", "C. back", "D. front"]
    assert rows[2]["question_type"] == "object_rel_direction_easy"  # breakdown fields come along


def test_score_reports_overall_breakdowns_and_missing(tmp_path):
    write_parquet(tmp_path / "vsi" / "test-00000-of-00001.parquet", VSI_ROWS)
    predictions = [{"id": "0", "response": "4"}, {"id": "2", "response": "A"}, {"id": "4", "response": "B"}]
    write_jsonl(tmp_path / "pred.jsonl", predictions)
    out = tmp_path / "summary.json"
    result = runner.invoke(
        app, ["eval", "score", "--benchmark", "vsibench", "--annotations", str(tmp_path / "vsi"),
              "--predictions", str(tmp_path / "pred.jsonl"), "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    # tasks: counting 100, abs_distance 0 (missing), rel_direction mean(easy 100, hard 0 missing) = 50,
    # route_planning 100 → 62.5
    assert summary["overall"] == 62.5
    assert summary["missing"] == ["1", "3"]
    assert summary["breakdowns"]["task"]["object_rel_direction"]["score"] == 50.0
    assert json.loads(out.read_text()) == summary


def test_score_reader_official_or_robust(tmp_path):
    write_parquet(tmp_path / "vsi" / "test-00000-of-00001.parquet", VSI_ROWS)
    # VSI-Bench reads float(first word): "about 4" is no float (unreadable, 0)
    # where the robust reader reads 4; "A." is read by both
    predictions = [
        {"id": "0", "response": "about 4"}, {"id": "2", "response": "A."}, {"id": "4", "response": "B"},
    ]  # fmt: skip
    write_jsonl(tmp_path / "pred.jsonl", predictions)
    args = ["eval", "score", "--benchmark", "vsibench", "--annotations", str(tmp_path / "vsi"),
            "--predictions", str(tmp_path / "pred.jsonl")]  # fmt: skip
    official = json.loads(runner.invoke(app, args).stdout)
    robust = json.loads(runner.invoke(app, [*args, "--reader", "robust"]).stdout)
    # official: counting 0 → tasks 0, 0, 50, 100 → 37.5; robust: counting 100 → 62.5
    assert (official["reader"], official["overall"], official["robust_overall"]) == ("official", 37.5, 62.5)
    assert official["unreadable"] == 1
    assert official["details"]["official_reader"] == ["vsibench_choice", "vsibench_number"]
    assert (robust["reader"], robust["overall"], robust["robust_overall"]) == ("robust", 62.5, 62.5)
    bad = runner.invoke(app, [*args, "--reader", "lenient"])
    assert bad.exit_code != 0 and "official or robust" in bad.output


def test_bad_inputs_fail_with_a_message(tmp_path):
    write_parquet(tmp_path / "vsi" / "test-00000-of-00001.parquet", VSI_ROWS)
    (tmp_path / "pred.jsonl").write_text('{"id": "0", "response": "4"}\n{"id": "0", "response": "5"}\n')
    result = runner.invoke(
        app, ["eval", "score", "--benchmark", "vsibench", "--annotations", str(tmp_path / "vsi"),
              "--predictions", str(tmp_path / "pred.jsonl")],
    )  # fmt: skip
    assert result.exit_code == 2 and "pred.jsonl:2: a second prediction for id '0'" in result.output
    # a line nested too deep: exit 2 naming it (was a RecursionError traceback and exit 1)
    (tmp_path / "pred.jsonl").write_text('{"id": "0", "response": "4"}\n' + "[" * 5000 + "]" * 5000 + "\n")
    result = runner.invoke(
        app, ["eval", "score", "--benchmark", "vsibench", "--annotations", str(tmp_path / "vsi"),
              "--predictions", str(tmp_path / "pred.jsonl")],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "pred.jsonl:2: nested 5000 levels deep (at most 64)" in " ".join(result.output.split())
    result = runner.invoke(app, ["eval", "samples", "--benchmark", "nope", "--annotations", str(tmp_path)])
    assert result.exit_code == 2 and "unknown benchmark 'nope'" in result.output


def test_run_rejects_a_bad_config_before_starting_anything(tmp_path):
    result = runner.invoke(app, ["eval", "run", "--benchmarks", "mvbench", "--data-root", str(tmp_path)])
    assert result.exit_code == 2 and "model: Field required" in result.output
    result = runner.invoke(
        app,
        [
            "eval",
            "run",
            "--model",
            str(tmp_path),
            "--benchmarks",
            "mvbench,nope",
            "--data-root",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 2 and "unknown benchmark(s) ['nope']" in result.output
    result = runner.invoke(
        app,
        [
            "eval",
            "run",
            "--model",
            str(tmp_path),
            "--benchmarks",
            "mvbench",
            "--data-root",
            str(tmp_path),
            "oops",
        ],
    )
    assert result.exit_code == 2 and "override 'oops' is not KEY=VALUE" in result.output


def test_run_refuses_an_output_dir_holding_files_of_no_evaluation(reelrl_home, tmp_path):
    from services.common.tiny_models import build_tiny_model

    model = build_tiny_model("qwen2_5_vl", tmp_path / "model", seed=0)
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "mvbench.samples.jsonl").write_text("my notes\n")
    result = runner.invoke(
        app, ["eval", "run", "--model", str(model), "--benchmarks", "mvbench", "--data-root", str(tmp_path),
              f"output_dir={folder}"],
    )  # fmt: skip
    shown = " ".join(result.output.split())
    assert result.exit_code == 2, shown
    assert "holds files and is not a evaluation run's folder (no manifest.json)" in shown
    assert (folder / "mvbench.samples.jsonl").read_text() == "my notes\n"
    assert [p.name for p in folder.iterdir()] == ["mvbench.samples.jsonl"]
