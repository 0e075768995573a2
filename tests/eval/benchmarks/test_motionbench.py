"""MotionBench: options inside the question, test answers "NA" skipped, breakdown by question type."""

from __future__ import annotations

import pytest

from tests.eval.conftest import write_jsonl

LINES = [
    {"key": "v1", "video_path": "v1.mp4", "video_type": "MedVid", "question_type": "Motion Recognition", "qa": [
        {"uid": "u1", "question": "What is the hand doing?\nA. waving\nB. pointing\nC. clapping", "answer": "C"},
        {"uid": "u2", "question": "Which way does it move?\nA. left\nB. right", "answer": "A"},
    ]},
    {"key": "v2", "video_path": "v2.mp4", "video_type": "SelfCollected", "question_type": "Camera Motion", "qa": [
        {"uid": "u3", "question": "How does the camera move?\nA. pan\nB. zoom\nC. static\nD. tilt", "answer": "B"},
        {"uid": "u4", "question": "Test question?\nA. x\nB. y", "answer": "NA"},
    ]},
]  # fmt: skip


def test_scored_by_question_type(tmp_path, evaluate):
    write_jsonl(tmp_path / "video_info.meta.jsonl", LINES)
    out = evaluate("motionbench", tmp_path, {"u1": "C", "u2": "B", "u3": "Answer: B"})
    assert [s.id for s in out.samples] == ["u1", "u2", "u3"]  # u4 (NA) skipped
    assert out.by_id["u1"].problem == "What is the hand doing?"
    assert out.by_id["u1"].options == ["A. waving", "B. pointing", "C. clapping"]
    # polish_answer reads "Answer: B" as "A" (the first character of its first word): wrong officially,
    # right for the robust reader
    assert out.summary.overall == pytest.approx(100 * 1 / 3)
    assert out.summary.robust_overall == pytest.approx(100 * 2 / 3)
    assert out.cell("question_type", "Motion Recognition") == pytest.approx(50.0)
    assert out.cell("question_type", "Camera Motion") == pytest.approx(0.0)
