"""Reward functions in evaluation: the config and `--reward-function`, a run id untouched by runs without
functions, confinement of a job's functions to the plugin roots, the per-benchmark figures computed by
hand, and one real `reelrl eval run` (tiny Qwen2.5-VL, vLLM on CPU) whose answers every function scores."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from pydantic import ValidationError
from typer.testing import CliRunner

from services.cli import app
from services.common.settings import reset_settings_cache
from services.eval.benchmarks import ItemResult, get_benchmark
from services.eval.cli import parse_reward_function
from services.eval.config import ConfigError, EvalConfig, EvalJobConfig, load_config
from services.eval.reward_functions import item_details, summarise_functions
from services.reward.config import RewardConfig
from services.reward.functions import Outcome
from tests.eval.conftest import write_json

PLUGIN = '''
from services.reward.sample import RewardSample


def shape(sample, response):
    """1 for a RewardSample (what training passes), with the response's length beside it."""
    return {"overall": float(isinstance(sample, RewardSample)), "chars": len(response)}


def flaky(sample, response):
    if "scene 1" in sample.problem or "scene 3" in sample.problem:
        raise RuntimeError("no luck on " + sample.id)
    return 0.5


def broken(sample, response):
    raise KeyError("a field this plugin expected")
'''


@pytest.fixture
def plugin(tmp_path: Path) -> Path:
    path = tmp_path / "plugins" / "evalrewards.py"
    path.parent.mkdir()
    path.write_text(PLUGIN)
    return path


def make(tmp_path: Path, **values) -> EvalConfig:
    model = tmp_path / "model"
    if not model.exists():
        model.mkdir()
        (model / "config.json").write_text("{}")
    return load_config({"model": str(model), "benchmarks": "mvbench", "data_root": str(tmp_path), **values})


# --- config and CLI ------------------------------------------------------------------------------------


def test_the_config_takes_functions_from_files_and_refuses_what_cannot_run(tmp_path, plugin):
    config = make(
        tmp_path,
        reward_functions=[{"name": "shape", "path": f"{plugin}:shape", "weight": 0.3}],
        reward_function_timeout_s=5,
    )
    assert [(f.name, f.path) for f in config.reward_functions] == [("shape", f"{plugin}:shape")]
    assert config.reward_function_timeout_s == 5.0
    # the one default, shared with training's reward.function_timeout_s
    assert make(tmp_path).reward_function_timeout_s == RewardConfig().function_timeout_s
    refused = {
        r"reward_functions\.0\.name: String should match pattern": [{"name": "Shape", "path": "a.py:f"}],
        r"reward_functions\[0\] \(shape\): no path; evaluation loads every function from its file": [
            {"name": "shape"}
        ],
        r"reward_functions\[0\] \(shape\): .*'a\.txt' is not a \.py file": [
            {"name": "shape", "path": "a.txt:f"}
        ],
        r"the names \['shape'\] are used more than once": [
            {"name": "shape", "path": "a.py:f"},
            {"name": "shape", "path": "b.py:g"},
        ],
    }
    for message, functions in refused.items():
        with pytest.raises(ConfigError, match=message):
            make(tmp_path, reward_functions=functions)
    with pytest.raises(ConfigError, match="reward_function_timeout_s: Input should be greater than 0"):
        make(tmp_path, reward_function_timeout_s=0)


def test_the_option_is_name_equals_target_or_the_target_named_for_its_function():
    assert parse_reward_function("short=rewards/my.py:brevity") == {
        "name": "short",
        "path": "rewards/my.py:brevity",
    }
    assert parse_reward_function("rewards/my.py:brevity") == {
        "name": "brevity",
        "path": "rewards/my.py:brevity",
    }
    with pytest.raises(
        typer.BadParameter, match=r"'Brevity' is not a metric name.*NAME=path/file\.py:function"
    ):
        parse_reward_function("rewards/my.py:Brevity")
    with pytest.raises(typer.BadParameter, match=r"expected 'path/to/file\.py:function_name'"):
        parse_reward_function("short=rewards/my.py")
    with pytest.raises(typer.BadParameter, match=r"is not a \.py file"):
        parse_reward_function("rewards/my.txt:brevity")


def test_eval_run_reads_the_option_and_loads_every_function_before_any_work(reelrl_home, tmp_path):
    runner = CliRunner()
    base = ["eval", "run", "--model", str(tmp_path), "--benchmarks", "mvbench", "--data-root", str(tmp_path)]
    result = runner.invoke(app, [*base, "--reward-function", "rewards/x.py:Upper"])
    assert result.exit_code == 2 and "'Upper' is not a metric name" in " ".join(result.output.split())
    missing = tmp_path / "nowhere.py"
    result = runner.invoke(app, [*base, "--reward-function", f"gone={missing}:score"])
    shown = " ".join(result.output.split())
    assert result.exit_code == 2 and f"no file {missing}" in shown, shown
    assert not (reelrl_home / "eval").exists()  # refused before the run folder was made


# --- run id --------------------------------------------------------------------------------------------


def test_the_run_id_of_a_config_without_functions_is_unchanged(tmp_path, plugin):
    config = make(tmp_path, thinking=True)
    # what the id was derived from before reward functions existed, spelled out
    before = config.model_dump(
        mode="json", include={"benchmarks", "data_root", "thinking", "video", "bench", "rollout", "judge"}
    )
    before["model"] = str((tmp_path / "model").resolve())
    before["model_fingerprint"] = config.identity()["model_fingerprint"]
    text = json.dumps(before, sort_keys=True, separators=(",", ":"))
    assert config.resolved_run_id() == hashlib.sha256(text.encode()).hexdigest()[:16]
    assert config.identity() == before

    with_functions = make(
        tmp_path, thinking=True, reward_functions=[{"name": "shape", "path": f"{plugin}:shape"}]
    )
    base = with_functions.resolved_run_id()
    assert base != config.resolved_run_id()
    # the weight is ignored, so it is no part of the run; the timeout and the file's contents are
    weighted = [{"name": "shape", "path": f"{plugin}:shape", "weight": 5}]
    assert make(tmp_path, thinking=True, reward_functions=weighted).resolved_run_id() == base
    assert (
        make(
            tmp_path,
            thinking=True,
            reward_functions=[{"name": "shape", "path": f"{plugin}:shape"}],
            reward_function_timeout_s=1,
        ).resolved_run_id()
        != base
    )
    plugin.write_text(PLUGIN + "\n# edited\n")
    edited = make(tmp_path, thinking=True, reward_functions=[{"name": "shape", "path": f"{plugin}:shape"}])
    assert edited.resolved_run_id() != base


# --- API jobs ------------------------------------------------------------------------------------------


def test_an_eval_job_may_load_functions_only_from_the_plugin_roots(tmp_path, plugin, monkeypatch):
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    job = {"model": "models/tiny", "benchmarks": "mvbench", "data_root": "bench"}
    monkeypatch.setenv("REELRL_DATA_ROOTS", str(tmp_path))
    monkeypatch.delenv("REELRL_PLUGIN_ROOTS", raising=False)
    reset_settings_cache()
    try:
        assert EvalJobConfig.model_validate(job).reward_functions == []  # no functions: no roots needed
        named = {**job, "reward_functions": [{"name": "shape", "path": "evalrewards.py:shape"}]}
        with pytest.raises(
            ValidationError,
            match=r"reward_functions\[0\] \(shape\): .*no plugin roots are configured.*REELRL_PLUGIN_ROOTS",
        ):
            EvalJobConfig.model_validate(named)
        monkeypatch.setenv("REELRL_PLUGIN_ROOTS", str(plugin.parent))
        reset_settings_cache()
        ok = EvalJobConfig.model_validate(named)
        # stored resolved: the worker (EvalConfig over the stored config) loads what was checked
        assert ok.reward_functions[0].path == f"{plugin.resolve()}:shape"
        stored = EvalConfig.model_validate(ok.model_dump(mode="json"))
        assert stored.reward_functions[0].path == f"{plugin.resolve()}:shape"
        outside = tmp_path / "elsewhere.py"
        outside.write_text(PLUGIN)
        for path in [f"{outside}:shape", "../elsewhere.py:shape"]:
            with pytest.raises(
                ValidationError, match=r"reward_functions\[0\] \(shape\): .*not a file inside"
            ):
                EvalJobConfig.model_validate({**job, "reward_functions": [{"name": "shape", "path": path}]})
    finally:
        reset_settings_cache()


# --- per-item details and per-benchmark figures ---------------------------------------------------------


def test_item_details_keep_scores_extras_and_errors_apart():
    outcomes = {
        "shape": Outcome(1.0, {"chars": 12.0}),
        "flaky": Outcome(error="reward function flaky raised RuntimeError: no luck"),
    }
    assert item_details(outcomes) == {
        "reward_functions": {"shape": 1.0, "shape/chars": 12.0},
        "reward_function_errors": {"flaky": "reward function flaky raised RuntimeError: no luck"},
    }
    assert item_details({"shape": Outcome(0.25)}) == {"reward_functions": {"shape": 0.25}}
    assert item_details({}) == {}


def item(i: int, details: dict | None = None, **fields) -> ItemResult:
    return ItemResult(id=f"q{i}", accuracy=1.0, details=details or {}, **fields)


def test_summary_figures_by_hand():
    items = [
        item(0, {"reward_functions": {"shape": 1.0, "shape/chars": 10.0, "flaky": 0.5},
                 "reward_function_errors": {"broken": "reward function broken raised KeyError: 'x'"}}),
        item(1, {"reward_functions": {"shape": 0.0, "shape/chars": 30.0},
                 "reward_function_errors": {"flaky": "no luck", "broken": "reward function broken raised KeyError: 'y'"}}),
        item(2, {"reward_functions": {"shape": 0.5, "shape/chars": 20.0, "flaky": 0.25},
                 "reward_function_errors": {"broken": "reward function broken raised KeyError: 'z'"}}),
        item(3, missing=True),  # no answer: no function was called on it
        item(4, error="generation failed: too long"),
    ]  # fmt: skip
    summary = summarise_functions(items)
    assert summary is not None
    assert summary.metrics == {
        "reward/flaky": 0.375,  # (0.5 + 0.25) / 2: only the items with a value
        "reward/shape": 0.5,  # (1.0 + 0.0 + 0.5) / 3, raw, not percent
        "reward/shape/chars": 20.0,  # (10 + 30 + 20) / 3
    }
    assert summary.errors == 4  # flaky once, broken three times
    assert summary.notes == [
        "reward function broken failed on all 3 items it was called on (no reward/broken); the first: "
        "reward function broken raised KeyError: 'x'"
    ]
    assert summarise_functions([item(0), item(1, missing=True)]) is None  # a run without functions


def test_a_benchmark_summary_carries_the_figures_only_when_functions_ran(tmp_path):
    records = [
        {"video": "v.mp4", "question": f"q{i}", "candidates": ["a", "b"], "answer": "b"} for i in range(2)
    ]
    write_json(tmp_path / "json" / "action_sequence.json", records)
    benchmark = get_benchmark("mvbench", tmp_path)
    samples = benchmark.load_checked(benchmark.find_annotations(tmp_path))
    plain = {s.id: ItemResult(id=s.id, accuracy=1.0, response="(B) b") for s in samples}
    without = benchmark.summarise(samples, plain)
    assert not any(k.startswith("reward/") for k in without.metrics)
    assert "reward_function_errors" not in without.details
    scored = {
        s.id: r.model_copy(
            update={"details": item_details({"shape": Outcome(float(i)), "broken": Outcome(error="x")})}
        )
        for i, (s, r) in enumerate(zip(samples, plain.values(), strict=True))
    }
    summary = benchmark.summarise(samples, scored)
    assert summary.overall == without.overall  # the benchmark's own figures are untouched
    assert summary.metrics == {**without.metrics, "reward/shape": 0.5}
    assert summary.details == {**without.details, "reward_function_errors": 2}
    assert summary.notes[-1].startswith("reward function broken failed on all 2 items")


# --- end to end ----------------------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.slow
def test_eval_run_scores_every_answer_with_each_function(reelrl_home, tmp_path, plugin):
    """A real `reelrl eval run` on the pipeline test's tiny MVBench (4 answers): `shape` scores each,
    `flaky` raises on two, `broken` on all; the run succeeds, the details and the summary say so."""
    from services.common.tiny_models import build_tiny_model
    from tests.eval.test_pipeline import make_data

    model = build_tiny_model("qwen2_5_vl", tmp_path / "model", seed=0)
    data = make_data(tmp_path)
    out = tmp_path / "out"
    overrides = {
        "video.nframes": 4, "video.min_pixels": 3136, "video.max_pixels": 6272, "rollout.max_tokens": 16,
        "rollout.engine.max_model_len": 2048, "rollout.engine.kv_cache_gib": 0.25,
        "rollout.engine.dtype": "float32", "reward_function_timeout_s": 20,
    }  # fmt: skip
    command = [
        sys.executable, "-m", "services.cli", "eval", "run", "--model", str(model), "--benchmarks", "mvbench",
        "--data-root", str(data), "--limit", "4", "--output", str(out),
        "--reward-function", f"{plugin}:shape", "--reward-function", f"flaky={plugin}:flaky",
        "--reward-function", f"broken={plugin}:broken", *(f"{k}={v}" for k, v in overrides.items()),
    ]  # fmt: skip
    done = subprocess.run(command, env=dict(os.environ), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    rows = [json.loads(line) for line in (out / "mvbench.samples.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(row["response"] is not None and not row["error"] for row in rows)
    flaky_failed = 0
    for row in rows:
        scores, errors = row["details"]["reward_functions"], row["details"]["reward_function_errors"]
        # called with a RewardSample and the response the library reads: MVBench's "Best option:(" and
        # the generated text after it
        assert row["assistant_prefix"] == "Best option:("
        assert scores["shape"] == 1.0 and scores["shape/chars"] == len("Best option:(" + row["response"])
        assert errors["broken"].startswith("reward function broken raised KeyError")
        if "flaky" in errors:
            flaky_failed += 1
            assert "flaky" not in scores and "RuntimeError: no luck on" in errors["flaky"]
        else:
            assert scores["flaky"] == 0.5
    assert flaky_failed == 2

    summary = json.loads((out / "mvbench.summary.json").read_text())
    chars = sum(len("Best option:(" + row["response"]) for row in rows) / 4
    assert summary["metrics"]["reward/shape"] == 1.0
    assert summary["metrics"]["reward/shape/chars"] == pytest.approx(chars)
    assert summary["metrics"]["reward/flaky"] == 0.5
    assert "reward/broken" not in summary["metrics"]
    assert summary["details"]["reward_function_errors"] == 6  # flaky twice, broken four times
    assert any(n.startswith("reward function broken failed on all 4 items") for n in summary["notes"])
    assert "reward/shape: 1" in done.stdout and "reward function errors: 6" in done.stdout
