"""`reelrl train` answers the user's own mistakes with exit 2 and one line naming the input, never a
traceback and exit 1: a resume folder that is no checkpoint, a model folder without ``model_type``,
a data file holding invalid JSON."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from services.cli import app
from services.common.tiny_models import build_tiny_model

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return build_tiny_model("qwen2_5_vl", tmp_path_factory.mktemp("cli-model") / "m", seed=0)


def train(tmp_path: Path, *overrides: str) -> tuple[int, str]:
    args = ["train", str(ROOT / "examples" / "tiny_cpu.yaml"), f"trainer.output_dir={tmp_path / 'run'}"]
    result = runner.invoke(app, [*args, "trainer.total_steps=1", "trainer.loggers=[jsonl]", *overrides])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, " ".join((result.stdout + result.stderr).split())


def test_a_resume_folder_that_is_no_checkpoint(reelrl_home, tmp_path, model):
    code, shown = train(tmp_path, f"actor.model_path={model}", f"trainer.resume={tmp_path / 'nonexistent'}")
    assert code == 2, shown
    assert f"error: trainer.resume={tmp_path / 'nonexistent'}: not a complete checkpoint" in shown


def test_a_model_folder_without_model_type(reelrl_home, tmp_path):
    folder = tmp_path / "not-a-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"hidden_size": 8}))
    code, shown = train(tmp_path, f"actor.model_path={folder}")
    assert code == 2, shown
    assert f"error: {folder}: not a model checkpoint transformers can read" in shown and "model_type" in shown


def test_a_data_file_with_invalid_json(reelrl_home, tmp_path, model):
    data = tmp_path / "bad.jsonl"
    data.write_text('{"id": "a", "problem": "p", "answer": "A"}\n{bad json\n')
    code, shown = train(tmp_path, f"actor.model_path={model}", f"data.train_files=[{data}]")
    assert code == 2, shown
    assert f"error: {data}:2: invalid JSON" in shown


def test_an_output_folder_holding_files_of_no_run_is_refused_untouched(reelrl_home, tmp_path, model):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "config.yaml").write_text("mine: true\n")
    (folder / "metrics.jsonl").write_text('{"step": 1}\n')
    code, shown = train(tmp_path, f"actor.model_path={model}")
    assert code == 2, shown
    assert f"error: {folder}: holds files and is not a training run's folder (no .lock)" in shown
    assert (folder / "config.yaml").read_text() == "mine: true\n"
    assert (folder / "metrics.jsonl").read_text() == '{"step": 1}\n'
    assert sorted(p.name for p in folder.iterdir()) == ["config.yaml", "metrics.jsonl"]
