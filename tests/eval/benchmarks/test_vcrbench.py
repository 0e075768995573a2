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
