"""VCR-Bench: multiple choice, intervals right at IoU > 0.7, boxes at IoU > 0.5 (converted into the
model family's space), free text by the open-ended score or the judge."""

from __future__ import annotations

import pytest

from tests.eval.conftest import write_json

ITEMS = [
    {"id": 0, "video_path": "video/videoEspresso/a.mp4", "duration": 45, "dimension": "Temporal Spatial Reasoning",
     "question": "Where is the cat?\nA. sofa\nB. bed\nC. floor\nD. table", "multiple-choice": True,
     "choices": {"A": "sofa", "B": "bed", "C": "floor", "D": "table"}, "answer": "D", "reasoning": ["1. …"]},
    {"id": 1, "video_path": "video/b.mp4", "duration": 120, "dimension": "Temporal Perception",
     "question": "When does the door open?", "multiple-choice": False, "choices": {}, "answer": "[10, 20]"},
    {"id": 2, "video_path": "video/c.mp4", "duration": 400, "dimension": "Temporal Perception",
     "question": "When does it rain?", "multiple-choice": False, "choices": {}, "answer": "[0, 10]"},
    {"id": 3, "video_path": "video/d.mp4", "duration": 30, "dimension": "Visual Perception",
     "question": "What vehicle passes?", "multiple-choice": False, "choices": {}, "answer": "a red car"},
    {"id": 4, "video_path": "video/e.mp4", "duration": 30, "dimension": "Spatial Perception",
     "question": "Where is the dog?", "multiple-choice": False, "choices": {}, "answer": "[64, 48, 320, 240]"},
]  # fmt: skip
CLIP = [{"source_width": 640, "source_height": 480, "width": 320, "height": 240, "duration": 30.0}]


def test_official_thresholds(tmp_path, evaluate):
    write_json(tmp_path / "meta_info_video.json", ITEMS)
    responses = {
        "0": "D",  # right
        "1": "from 11 to 20 seconds",  # IoU 9/10 = 0.9 > 0.7: right
        "2": "[5, 10]",  # IoU 5/10 = 0.5 ≤ 0.7: wrong
        "3": "A red car.",  # short truth: exact match after normalising
    }
    # the box is in pixels of the 640×480 original: [100, 100, 500, 500] in Qwen3-VL's 0-1000 space
    boxed = {"id": "4", "response": "[100, 100, 500, 500]", "clip_meta": CLIP}
    out = evaluate("vcrbench", tmp_path, responses, predictions=[boxed])
    assert out.by_id["0"].problem == "Where is the cat?"
    assert [out.by_id[i].problem_type for i in "1234"] == [
        "temporal grounding", "temporal grounding", "open-ended", "spatial grounding",
    ]  # fmt: skip
    assert out.results["1"].details == {"iou": pytest.approx(0.9), "correct": 1.0}
    assert out.results["2"].details == {"iou": pytest.approx(0.5), "correct": 0.0}
    assert out.results["4"].details["correct"] == 1.0
    assert out.summary.overall == pytest.approx(80.0)  # 4 of 5
    assert out.cell("dimension", "Temporal Perception") == pytest.approx(50.0)
    assert out.cell("duration", "300s+") == pytest.approx(0.0)


def test_box_without_clip_size_is_an_error_not_a_silent_zero(tmp_path, evaluate):
    write_json(tmp_path / "meta_info_video.json", ITEMS[4:])
    out = evaluate("vcrbench", tmp_path, {"4": "[100, 100, 500, 500]"})
    assert "frame size" in out.summary.errors["4"]


STEPS = ["1. 0:07-0:20 The cat walks to the table.", "2. So the cat is at the table."]


def steps(*pairs):
    return [
        {"step": f"s{i}", "step_type": kind, "judgment": judgment} for i, (kind, judgment) in enumerate(pairs)
    ]


VD, LI, BR = "Video Description Steps", "Logical Inference Steps", "Background Review Steps"


def test_cot_step_score(tmp_path, evaluate):
    """cot=true with the judge's replies. Item 0: recall over video/inference steps = 1 matched of 2
    (the background step does not count) = 0.5; precision = matched / (matched + wrong) = 2 / 3 (the
    redundant step counts in neither; "Match" is read as "Matched"), efficiency 3 of 4 steps not
    redundant = 0.75. Item 3: recall 1.0, its precision reply is no step list (left out).
    Means: precision 66.67, recall 75, F1 = 2·(2/3)·(3/4) / (2/3 + 3/4) = 12/17 = 70.59."""
    import json

    items = [{**ITEMS[0], "reasoning": STEPS}, {**ITEMS[3], "reasoning": STEPS[:1]}, ITEMS[1]]
    write_json(tmp_path / "meta_info_video.json", items)
    recall_0 = "```json\n" + json.dumps(steps((VD, "Matched"), (LI, "Unmatched"), (BR, "Matched"))) + "\n```"
    precision_0 = json.dumps(steps((VD, "Matched"), (LI, "Wrong"), (LI, "Match"), (BR, "Redundant")))
    predictions = [
        {"id": "0", "response": "The cat walks. D", "rubric_replies": {"recall": recall_0, "precision": precision_0}},
        {"id": "3", "response": "a red car", "rubric_replies": {"recall": json.dumps(steps((VD, "Matched"))),
                                                              "precision": "I cannot judge this."}},
        {"id": "1", "response": "[10, 20]"},
    ]  # fmt: skip
    out = evaluate("vcrbench", tmp_path, {}, predictions=predictions, cot=True)
    first = out.results["0"].details
    assert first["cot_recall"] == 0.5 and first["cot_precision"] == pytest.approx(2 / 3)
    assert first["cot_efficiency"] == 0.75 and out.results["0"].accuracy == 1.0  # the answer still decides
    assert out.results["3"].details["cot_unreadable"] == ["precision"]
    metrics = out.summary.metrics
    assert metrics["cot_precision"] == pytest.approx(200 / 3)
    assert metrics["cot_recall"] == pytest.approx(75.0)
    assert metrics["cot_f1"] == pytest.approx(1200 / 17)
    assert metrics["accuracy"] == pytest.approx(100.0)
    assert any("not step lists" in note for note in out.summary.notes)


def test_cot_questions_use_the_official_prompts(tmp_path):
    from services.eval.benchmarks import get_benchmark

    write_json(tmp_path / "meta_info_video.json", [{**ITEMS[0], "reasoning": STEPS}])
    (sample,) = get_benchmark("vcrbench").load([tmp_path / "meta_info_video.json"])
    assert get_benchmark("vcrbench").rubric_questions(sample, "D") == {}  # cot off by default
    questions = get_benchmark("vcrbench", cot=True).rubric_questions(sample, "It is on the table. D")
    assert set(questions) == {"recall", "precision"}
    recall = questions["recall"].prompt
    assert recall.startswith("You are an expert system for verifying solutions to video-based problems.")
    assert recall.endswith(
        "[Problem]\nWhere is the cat?\nA. sofa\nB. bed\nC. floor\nD. table\n\n[Answer]\nD\n\n"
        "[Solution]\nIt is on the table. D\n\n[Ground Truth Information]\n" + "\n".join(STEPS) + "\n"
    )
    assert '"judgment": "Matched|Wrong|Redundant"' in questions["precision"].prompt
    assert questions["precision"].system is None
