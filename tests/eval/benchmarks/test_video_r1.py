"""The Video-R1 / EasyVideoR1 unified JSON: solutions in <answer> tags, EasyVideoR1's OVO types, mean
accuracy beside mean_acc (non-regression) and mean_mra (regression)."""

from __future__ import annotations

import pytest

from tests.eval.conftest import write_json, write_jsonl

RECORDS = [
    {"problem_id": "mc1", "problem": "What colour is the car?", "data_type": "video", "problem_type": "multiple choice",
     "options": ["A: red", "B: blue"], "solution": "<answer>B</answer>", "path": "videomme/a.mp4",
     "data_source": "videomme", "duration": "short"},
    {"problem_id": "num1", "problem": "How many birds?", "data_type": "video", "problem_type": "numerical",
     "options": [], "solution": "<answer>3</answer>", "path": "b.mp4", "data_source": "vsibench"},
    {"problem_id": "reg1", "problem": "How far (m)?", "data_type": "video", "problem_type": "regression",
     "options": None, "solution": "<answer>2.0</answer>", "path": "c.mp4", "data_source": "vsibench"},
    {"problem_id": "ovo1", "problem": "How many times did they jump?", "data_type": "video", "problem_type": "REC",
     "options": [], "solution": "<answer>2</answer>", "path": "d.mp4", "data_source": "ovobench", "ovo_task": "REC"},
    {"problem_id": "ovo2", "problem": "Is the step happening?", "data_type": "video", "problem_type": "SSR",
     "options": [], "solution": "<answer>Yes</answer>", "path": "e.mp4", "data_source": "ovobench", "ovo_task": "SSR"},
    {"problem_id": "tg1", "problem": "When does it rain?", "data_type": "video", "problem_type": "temporal grounding",
     "options": [], "solution": '<answer>{"time": [2.0, 6.0], "boxes": {}}</answer>', "path": "f.mp4",
     "data_source": "charades_sta"},
]  # fmt: skip
RESPONSES = {
    "mc1": "<answer>B</answer>",  # 1
    "num1": "<answer>4</answer>",  # 0
    "reg1": "<answer>2.3</answer>",  # MRA 0.8
    "ovo1": "2",  # 1 (counting)
    "ovo2": "yes",  # 1 (boolean)
    "tg1": '{"time": [4.0, 6.0]}',  # IoU 2/4 = 0.5
}


def test_unified_json(tmp_path, evaluate):
    write_json(tmp_path / "eval_mix.json", RECORDS)
    out = evaluate("video_r1", tmp_path, RESPONSES)
    assert out.by_id["ovo1"].problem_type == "counting" and out.by_id["ovo2"].problem_type == "boolean"
    assert out.by_id["mc1"].answer == "B" and out.by_id["mc1"].videos == ("videomme/a.mp4",)
    assert out.summary.overall == pytest.approx(100 * (1 + 0 + 0.8 + 1 + 1 + 0.5) / 6)
    assert out.summary.metrics["mean_acc"] == pytest.approx(100 * (1 + 0 + 1 + 1 + 0.5) / 5)
    assert out.summary.metrics["mean_mra"] == pytest.approx(80.0)
    assert out.cell("data_source", "vsibench") == pytest.approx(40.0)


def test_jsonl_without_problem_ids(tmp_path, evaluate):
    rows = [{k: v for k, v in r.items() if k != "problem_id"} for r in RECORDS[:2]]
    write_jsonl(tmp_path / "videomathqa.jsonl", rows)
    out = evaluate("video_r1", tmp_path / "videomathqa.jsonl", {"videomathqa/0": "B"})
    assert [s.id for s in out.samples] == ["videomathqa/0", "videomathqa/1"]
    assert out.summary.overall == pytest.approx(50.0)
