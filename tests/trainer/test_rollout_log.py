"""``trainer.rollout_log``: a step's first groups as ``rollouts/step_NNNNNN.jsonl``. The records are built
from hand-made groups and compared with hand-computed values; the writer's files, their removal on
resume and the config are checked on disk; wandb (offline) and MLflow (its local store) are read back
with their own readers; and the real loop resumed from an earlier checkpoint leaves the same folder as
the uninterrupted run."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from services.common.frames import FrameStore
from services.common.samples import Sample
from services.rollout.samples import RolloutGroup, RolloutResponse, RolloutSample
from services.trainer.config import ConfigError, RolloutLogConfig, load_config
from services.trainer.data import TrainSample
from services.trainer.loop import Scored, Timer
from services.trainer.rollout_log import (
    RolloutLog,
    full_prompt,
    records_text,
    response_advantage,
    rollout_file,
    rollout_records,
)
from services.trainer.tracking import ROLLOUT_COLUMNS, MetricsLogger

ROOT = Path(__file__).resolve().parents[2]
CLIP = "ab" + "0" * 62  # a frame-store key


def _response(n: int, text: str, *, offline: bool = False) -> RolloutResponse:
    online = {} if offline else {"weight_version": 0, "weight_versions": ((0, 0),)}
    return RolloutResponse(
        token_ids=[7] * n,
        logprobs=None if offline else [0.0] * n,
        text=text,
        finish_reason="offline" if offline else "stop",
        offline=offline,
        **online,
    )


def _sample(sid: str, ptype: str, prompt: str, answer: object, **media: tuple[str, ...]) -> TrainSample:
    files = {k: tuple(f"{k}/{i}" for i in range(len(v))) for k, v in media.items()}
    sample = Sample(id=sid, problem=prompt, problem_type=ptype, answer=answer, **files)
    rollout = RolloutSample(id=sid, prompt=prompt, check_params=False, **media)
    return TrainSample(sample, ptype, rollout, {"answer": answer, "problem_type": ptype}, prompt_tokens=10)


def _batch() -> tuple[list[TrainSample], list[RolloutGroup], Scored, list[torch.Tensor]]:
    """Three groups (a video, an image, a text sample) of 3, 2 and 2 responses: 7 in flat order."""
    samples = [
        _sample("vid", "multiple choice", "Which colour? A. red B. blue", "B", videos=(CLIP,)),
        _sample(
            "img", "spatial grounding", "Where is the cup?", {"boxes": [1, 2, 3, 4]}, images=("img-key",)
        ),
        _sample("txt", "numerical", "2 + 2?", "4"),
    ]
    groups = [
        RolloutGroup(
            sample_id="vid",
            prompt_token_ids=[1, 2],
            engine=1,  # the fleet's second engine generated it
            responses=[
                _response(3, "<answer>B</answer>"),
                _response(1, "A"),
                _response(2, "B", offline=True),
            ],
        ),
        RolloutGroup(
            sample_id="img", prompt_token_ids=[1], responses=[_response(2, "[1,2,3,4]"), _response(4, "?")]
        ),
        RolloutGroup(sample_id="txt", prompt_token_ids=[1], responses=[_response(1, "4"), _response(1, "5")]),
    ]
    scored = Scored(
        overall=[1.0, 0.0, 0.9, 0.25, 0.0, 1.0, 0.0],
        accuracy=[1.0, 0.0, 1.0, 0.5, 0.0, 1.0, 0.0],
        format=[1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0],
        parts={
            "builtin": [1.0, 0.0, 0.9, 0.3, 0.0, 1.0, 0.0],
            "brevity": [0.5, 1.0, 0.5, 0.5, 0.0, 1.0, 1.0],
        },
        item_errors=[None, None, None, None, "no box in the answer", None, None],
    )
    assert scored.errors == 1  # counted from item_errors
    advantages = [
        torch.tensor([1.0, 2.0, 3.0]),  # mean 2
        torch.tensor([-1.5]),
        torch.tensor([0.25, 0.75]),  # mean 0.5
        torch.tensor([0.5, 0.5]),
        torch.tensor([-1.0, -1.0, -2.0, float("nan")]),  # not finite: null
        torch.tensor([1.0]),
        torch.tensor([-1.0]),
    ]
    return samples, groups, scored, advantages


def _resp(
    index, text, overall, accuracy, fmt, builtin, brevity, advantage, length, offline=False, error=None,
    engine=None,
):  # fmt: skip
    reward = {"overall": overall, "accuracy": accuracy, "format": fmt, "builtin": builtin, "brevity": brevity}
    return {
        "index": index, "text": text, "reward": reward, "advantage": advantage, "length": length,
        "offline": offline, "engine": engine, "error": error,
    }  # fmt: skip


def test_records_of_the_first_groups_read_their_responses_flat_offsets() -> None:
    samples, groups, scored, advantages = _batch()
    records = rollout_records(
        5, samples, groups, scored, advantages, max_groups=2, timestamps={CLIP: [0.0, 0.5, 1.0]},
        prompts_full=["<|im_start|>user ...", None],
    )  # fmt: skip
    assert records == [
        {
            "step": 5, "group": 0, "sample_id": "vid", "problem_type": "multiple choice",
            "prompt": "Which colour? A. red B. blue", "prompt_full": "<|im_start|>user ...", "answer": "B",
            "clips": [{"key": CLIP, "timestamps": [0.0, 0.5, 1.0]}],
            "responses": [
                _resp(0, "<answer>B</answer>", 1.0, 1.0, 1.0, 1.0, 0.5, 2.0, 3, engine=1),
                _resp(1, "A", 0.0, 0.0, 0.0, 0.0, 1.0, -1.5, 1, engine=1),
                _resp(2, "B", 0.9, 1.0, 0.0, 0.9, 0.5, 0.5, 2, offline=True, engine=1),
            ],
        },
        {
            # the image group's responses are flat responses 3 and 4 of the batch
            "step": 5, "group": 1, "sample_id": "img", "problem_type": "spatial grounding",
            "prompt": "Where is the cup?", "prompt_full": None, "answer": {"boxes": [1, 2, 3, 4]},
            "clips": [{"key": "img-key", "timestamps": []}],
            "responses": [
                _resp(0, "[1,2,3,4]", 0.25, 0.5, 1.0, 0.3, 0.5, 0.5, 2),
                _resp(1, "?", 0.0, 0.0, 0.0, 0.0, 0.0, None, 4, error="no box in the answer"),
            ],
        },
    ]  # fmt: skip
    # every group when max_groups allows; a text sample has no clips; a clip without timestamps: []
    everything = rollout_records(1, samples, groups, scored, advantages, max_groups=8, timestamps={})
    assert [r["group"] for r in everything] == [0, 1, 2]
    assert everything[0]["clips"] == [{"key": CLIP, "timestamps": []}] and everything[2]["clips"] == []
    assert [r["reward"]["overall"] for r in everything[2]["responses"]] == [1.0, 0.0]
    # without reward parts or per-item errors, the reward holds the three components, error is null
    plain = Scored(overall=scored.overall, accuracy=scored.accuracy, format=scored.format)
    (first,) = rollout_records(1, samples, groups, plain, advantages, max_groups=1, timestamps={})
    assert first["responses"][0]["reward"] == {"overall": 1.0, "accuracy": 1.0, "format": 1.0}
    assert first["responses"][0]["error"] is None and first["prompt_full"] is None
    # one JSON object a line (no NaN: JSON has none)
    lines = records_text(records).splitlines()
    assert [json.loads(line) for line in lines] == records


def test_a_response_advantage_is_the_mean_over_its_tokens() -> None:
    assert response_advantage(torch.tensor([0.5, -0.25, 1.0, 0.75])) == 0.5
    assert response_advantage(torch.tensor([])) == 0.0
    assert response_advantage(torch.tensor([1.0, float("inf")])) is None


def test_the_full_prompt_shows_one_placeholder_per_image_or_video() -> None:
    from services.common.tiny_models.builder import trained_tokenizer

    tokenizer = trained_tokenizer()
    text = (
        "<|im_start|>user\n<|vision_start|>" + "<|video_pad|>" * 6 + "<|vision_end|><|vision_start|>"
        + "<|image_pad|>" * 3 + "<|vision_end|>Which colour?<|im_end|>\n<|im_start|>assistant\n"
    )  # fmt: skip
    ids = tokenizer(text, add_special_tokens=False).input_ids
    assert full_prompt(tokenizer, ids) == (
        "<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|><|vision_start|><|image_pad|>"
        "<|vision_end|>Which colour?<|im_end|>\n<|im_start|>assistant\n"
    )


def _log(out: Path, every: int, max_groups: int = 2, **kwargs) -> RolloutLog:
    return RolloutLog(out, RolloutLogConfig(every=every, max_groups=max_groups), **kwargs)


def test_every_nth_step_writes_its_file_with_the_clips_timestamps(tmp_path: Path) -> None:
    store = FrameStore(tmp_path / "frames")
    store.put(CLIP, np.zeros((3, 4, 4, 3), dtype=np.uint8), {"timestamps": [0.25, 1.25, 2.25]})
    sent: list[tuple[int, list[dict]]] = []
    log = _log(tmp_path / "run", 2, store=store, sinks=[lambda step, records: sent.append((step, records))])
    samples, groups, scored, advantages = _batch()
    timer = Timer()
    assert log.write(1, samples, groups, scored, advantages, timer=timer) is None
    assert dict(timer.seconds) == {}  # a step that is not due is not timed
    records = log.write(2, samples, groups, scored, advantages, timer=timer)
    assert set(timer.seconds) == {"rollout_log"}
    assert rollout_file(tmp_path / "run", 2) == tmp_path / "run" / "rollouts" / "step_000002.jsonl"
    rows = [json.loads(line) for line in rollout_file(tmp_path / "run", 2).read_text().splitlines()]
    assert rows == records and [r["group"] for r in rows] == [0, 1]
    assert rows[0]["clips"] == [{"key": CLIP, "timestamps": [0.25, 1.25, 2.25]}]
    assert sent == [(2, records)]
    for step in (3, 4, 5, 6):
        log.write(step, samples, groups, scored, advantages)
    assert sorted(p.name for p in (tmp_path / "run" / "rollouts").iterdir()) == [
        "step_000002.jsonl", "step_000004.jsonl", "step_000006.jsonl",
    ]  # fmt: skip
    # off (the default): nothing written, nothing timed
    off = RolloutLog(tmp_path / "off", RolloutLogConfig())
    timer = Timer()
    assert all(off.write(s, samples, groups, scored, advantages, timer=timer) is None for s in range(1, 5))
    assert not (tmp_path / "off").exists() and dict(timer.seconds) == {}


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path: Path) -> None:
    samples, groups, scored, advantages = _batch()
    log = _log(tmp_path, 1)
    log.write(1, samples, groups, scored, advantages)
    before = rollout_file(tmp_path, 1).read_text()
    broken = Scored(overall=[math.nan], accuracy=[], format=[])  # too short: building the records fails
    with pytest.raises(IndexError):
        log.write(1, samples, groups, broken, advantages)
    assert rollout_file(tmp_path, 1).read_text() == before
    assert [p.name for p in (tmp_path / "rollouts").iterdir()] == ["step_000001.jsonl"]


def test_a_resume_removes_the_files_after_its_checkpoint_and_temp_leftovers(tmp_path: Path) -> None:
    folder = tmp_path / "rollouts"
    folder.mkdir()
    for step in (1, 2, 3, 10):
        rollout_file(tmp_path, step).write_text("{}\n")
    (folder / ".step_000004.jsonl.x1y2.tmp").write_text("{")  # a write a kill cut short
    (folder / "notes.txt").write_text("mine")
    log = _log(tmp_path, 1)
    assert log.discard_after(2) == [3, 10]
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt", "step_000001.jsonl", "step_000002.jsonl"]
    assert log.discard_after(0) == [1, 2]  # a fresh start in the folder: nothing earlier counts
    assert _log(tmp_path / "none", 1).discard_after(0) == []


def test_the_config_block_is_validated_and_off_by_default() -> None:
    base = ROOT / "examples" / "tiny_cpu.yaml"
    config = load_config(base)
    assert (config.trainer.rollout_log.every, config.trainer.rollout_log.max_groups) == (0, 4)
    config = load_config(base, ["trainer.rollout_log.every=5", "trainer.rollout_log.max_groups=2"])
    assert (config.trainer.rollout_log.every, config.trainer.rollout_log.max_groups) == (5, 2)
    for override, message in (
        ("trainer.rollout_log.every=-1", "trainer.rollout_log.every"),
        ("trainer.rollout_log.max_groups=0", "trainer.rollout_log.max_groups"),
        ("trainer.rollout_log.groups=2", "unknown key 'trainer.rollout_log.groups'"),
    ):
        with pytest.raises(ConfigError, match=message):
            load_config(base, [override])


# ---------------------------------------------------------------- wandb and MLflow -------------------------


def _records(step: int, text: str) -> list[dict]:
    samples, groups, scored, advantages = _batch()
    records = rollout_records(step, samples, groups, scored, advantages, max_groups=2, timestamps={})
    records[0]["responses"][0]["text"] = text
    return records


def test_wandb_gets_a_rollouts_table_on_each_logged_step_once_across_a_resume(
    tmp_path: Path, monkeypatch
) -> None:
    from tests.trainer.test_tracking import _wandb_history

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    first = MetricsLogger(tmp_path, name="t", config={}, loggers=["wandb"])
    for step in (1, 2):
        first.log_rollouts(step, _records(step, f"first {step}"))
        first.log(step, {"reward/overall": step / 10})
    saved = first.tracker_state()
    saved["wandb"]["last_step"] = 1  # a checkpoint at step 1; step 2 was logged after it
    first.finish("failed")
    second = MetricsLogger(tmp_path, name="t", config={}, loggers=["wandb"], resume=saved)
    for step in (2, 3):  # step 2 recomputed: the tracker keeps its first table
        second.log_rollouts(step, _records(step, f"second {step}"))
        second.log(step, {"reward/overall": step / 10})
    second.finish("finished")

    _, rows, _ = _wandb_history(tmp_path)
    tables = {}
    for row in rows:
        assert "reward/overall" in row  # the table shares the step's history row with its metrics
        # the history row names the table's file (wandb's reader shows nested keys dotted)
        assert (row["rollouts._type"], row["rollouts.nrows"]) == ("table-file", 5)
        (path,) = (tmp_path / "wandb").glob(f"offline-run-*/files/{row['rollouts.path']}")
        tables[row["_step"]] = json.loads(path.read_text())
    assert sorted(tables) == [1, 2, 3]
    for step, text in ((1, "first 1"), (2, "first 2"), (3, "second 3")):
        table = tables[step]
        assert table["columns"] == list(ROLLOUT_COLUMNS)
        assert len(table["data"]) == 5  # 3 + 2 responses of the first two groups
        assert table["data"][0] == [
            step, 0, "vid", "multiple choice", "Which colour? A. red B. blue", text, 1.0, 1.0, 1.0, 2.0, 3, False,
            '{"brevity": 0.5, "builtin": 1.0}', 1, None,
        ]  # fmt: skip
        assert table["data"][4][:6] == [step, 1, "img", "spatial grounding", "Where is the cup?", "?"]
        assert table["data"][4][9] is None  # a non-finite advantage


def test_mlflow_gets_each_steps_file_as_an_artifact_once_across_a_resume(tmp_path: Path, monkeypatch) -> None:
    from mlflow import MlflowClient

    from services.common.trackers import MlflowConfig, local_store

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    settings = MlflowConfig(experiment="reelrl-test")
    first = MetricsLogger(tmp_path, name="t", config={}, loggers=["mlflow"], mlflow=settings)
    for step in (1, 2):
        first.log_rollouts(step, _records(step, f"first {step}"))
        first.log(step, {"reward/overall": step / 10})
    saved = first.tracker_state()
    saved["mlflow"]["last_step"] = 1
    first.finish("failed")
    second = MetricsLogger(tmp_path, name="t", config={}, loggers=["mlflow"], mlflow=settings, resume=saved)
    for step in (2, 3):
        second.log_rollouts(step, _records(step, f"second {step}"))
        second.log(step, {"reward/overall": step / 10})
    second.finish("finished")

    client = MlflowClient(tracking_uri=local_store(tmp_path / "mlruns"))
    run_id = saved["mlflow"]["id"]
    names = sorted(a.path for a in client.list_artifacts(run_id, "rollouts"))
    assert names == ["rollouts/step_000001.jsonl", "rollouts/step_000002.jsonl", "rollouts/step_000003.jsonl"]
    for step, text in ((1, "first 1"), (2, "first 2"), (3, "second 3")):
        local = client.download_artifacts(
            run_id, f"rollouts/step_{step:06d}.jsonl", str(tmp_path / f"dl{step}")
        )
        assert Path(local).read_text() == records_text(_records(step, text))


# ---------------------------------------------------------------- the real loop -----------------------------


@pytest.mark.integration
@pytest.mark.slow
def test_a_resumed_run_leaves_the_uninterrupted_runs_rollouts(
    reelrl_home: Path, tmp_path: Path, monkeypatch
) -> None:
    """Killed after writing step 3's rollouts with only step 1's checkpoint on disk (and, from a history
    it replaces, a step 4 file, a different step 2 and a torn temp file): resumed, the folder is the
    uninterrupted run's, file for file. MLflow holds each step's file once."""
    from mlflow import MlflowClient

    from services.common.trackers import local_store
    from services.trainer.loop import Trainer
    from tests.trainer.loop_runs import colour_config, colour_task, step_metrics

    data, model = colour_task(tmp_path)
    values = {
        "trainer.total_steps": 3, "trainer.save_freq": 1, "trainer.max_keep": 3,
        "trainer.rollout_log.every": 1, "trainer.rollout_log.max_groups": 1, "trainer.loggers": "[jsonl,mlflow]",
    }  # fmt: skip
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    whole = tmp_path / "whole"
    Trainer(colour_config(whole, data, model, **values)).fit()
    files = sorted(p.name for p in (whole / "rollouts").iterdir())
    assert files == ["step_000001.jsonl", "step_000002.jsonl", "step_000003.jsonl"]
    (record,) = [json.loads(line) for line in rollout_file(whole, 1).read_text().splitlines()]
    assert (record["step"], record["group"], len(record["responses"])) == (1, 0, 4)
    assert [r["offline"] for r in record["responses"]] == [False, False, False, True]  # tiny_cpu's mix
    (clip,) = record["clips"]
    assert len(clip["timestamps"]) == 4  # data.video_nframes
    assert record["prompt"] in record["prompt_full"] and record["prompt_full"].count("<|video_pad|>") == 1
    assert all(r["length"] >= 1 and r["engine"] == 0 for r in record["responses"])  # the fleet's one engine
    assert "timing/rollout_log_s" in step_metrics(whole, 1)

    resumed = tmp_path / "resumed"
    shutil.copytree(whole, resumed)
    for step in (2, 3):
        shutil.rmtree(resumed / "checkpoints" / f"step_{step:06d}")
    rollout_file(resumed, 2).write_text('{"step": 2, "from": "another history"}\n')
    rollout_file(resumed, 4).write_text('{"step": 4}\n')
    (resumed / "rollouts" / ".step_000004.jsonl.cut.tmp").write_text("{")
    result = Trainer(colour_config(resumed, data, model, **values)).fit()
    assert result.steps == 3
    assert sorted(p.name for p in (resumed / "rollouts").iterdir()) == files
    for name in files:
        assert (resumed / "rollouts" / name).read_bytes() == (whole / "rollouts" / name).read_bytes(), name
    # the resumed run continued the MLflow run, which holds each step's file once, as first sent
    client = MlflowClient(tracking_uri=local_store(resumed / "mlruns"))
    (run,) = client.search_runs([client.get_experiment_by_name("tiny-cpu-colour").experiment_id])
    artifacts = sorted(a.path for a in client.list_artifacts(run.info.run_id, "rollouts"))
    assert artifacts == [f"rollouts/{name}" for name in files]
    for name in files:
        local = client.download_artifacts(run.info.run_id, f"rollouts/{name}", str(tmp_path / "dl"))
        assert Path(local).read_bytes() == (whole / "rollouts" / name).read_bytes(), name
