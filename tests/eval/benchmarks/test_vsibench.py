"""VSI-Bench: MC by letter, numbers by MRA, the rel-direction difficulties merged, mean of tasks."""

from __future__ import annotations

import pytest

from services.eval.benchmarks import get_benchmark
from tests.eval.conftest import write_parquet

MC = ["A. left", "B. right", "C. back", "D. front"]
ROWS = [
    {"id": 0, "dataset": "arkitscenes", "scene_name": "41069025", "question_type": "object_counting",
     "question": "How many table(s) are in this room?", "ground_truth": "4", "options": None},
    {"id": 1, "dataset": "scannet", "scene_name": "scene0001", "question_type": "object_abs_distance",
     "question": "How far apart are the bed and the door (in meters)?", "ground_truth": "2.0", "options": None},
    {"id": 2, "dataset": "scannet", "scene_name": "scene0001", "question_type": "object_rel_direction_easy",
     "question": "Where is the lamp?", "ground_truth": "A", "options": MC},
    {"id": 3, "dataset": "scannetpp", "scene_name": "abc", "question_type": "object_rel_direction_hard",
     "question": "Where is the sink?", "ground_truth": "C", "options": MC},
    {"id": 4, "dataset": "scannetpp", "scene_name": "abc", "question_type": "route_planning",
     "question": "Which turn comes next?", "ground_truth": "B", "options": MC},
]  # fmt: skip


def test_mean_of_tasks(tmp_path, evaluate):
    write_parquet(tmp_path / "test-00000-of-00001.parquet", ROWS)
    responses = {
        "0": "4",  # MRA 1.0
        "1": "2.3",  # error 15 %: passes θ = 0.50…0.85 (8 of 10) → MRA 0.8
        "2": "A",  # right
        "3": "A",  # wrong
        "4": "B",  # right
    }
    out = evaluate("vsibench", tmp_path, responses)
    assert out.by_id["1"].problem_type == "regression" and out.by_id["1"].videos == ("scannet/scene0001.mp4",)
    tasks = out.summary.breakdowns["task"]
    assert tasks["object_counting"].score == pytest.approx(100.0)
    assert tasks["object_abs_distance"].score == pytest.approx(80.0)
    assert tasks["object_rel_direction"].score == pytest.approx(50.0)  # mean of easy 100 and hard 0
    assert tasks["route_planning"].score == pytest.approx(100.0)
    assert out.summary.overall == pytest.approx((100 + 80 + 50 + 100) / 4)  # 82.5
    assert out.summary.metrics["mc_accuracy"] == pytest.approx(100 * 2 / 3)
    assert out.summary.metrics["na_mra"] == pytest.approx(90.0)
    assert get_benchmark("vsibench").prompt(out.by_id["0"], "qwen3_vl") == (
        "These are frames of a video.\nHow many table(s) are in this room?\n"
        "Please answer the question using a single word or phrase."
    )
