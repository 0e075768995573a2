"""MMVU: video paths from the dataset URLs, dict choices, open-ended answers."""

from __future__ import annotations

import pytest

from tests.eval.conftest import write_json

URL = "https://huggingface.co/datasets/yale-nlp/MMVU/resolve/main/videos/{}.mp4"
ITEMS = [
    {"id": "validation_1", "video": URL.format("Chemistry/0"), "youtube_url": "", "question_type": "multiple-choice",
     "metadata": {"subject": "Chemistry", "textbook": "", "knowledge": [], "rationale": ""},
     "question": "What is the yield?", "choices": {"A": "10.0", "B": "12.5", "C": "15.0", "D": "17.5", "E": "20.0"},
     "answer": "A"},
    {"id": "validation_2", "video": URL.format("Physics/3"), "youtube_url": "", "question_type": "multiple-choice",
     "metadata": {"subject": "Physics"}, "question": "Which force dominates?",
     "choices": {"A": "gravity", "B": "friction", "C": "tension", "D": "drag", "E": "lift"}, "answer": "C"},
    {"id": "validation_3", "video": URL.format("Art/1"), "youtube_url": "", "question_type": "open-ended",
     "metadata": {"subject": "Art"}, "question": "Which camera technique is used?",
     "choices": {"A": "", "B": "", "C": "", "D": "", "E": ""}, "answer": "Dolly Zoom"},
]  # fmt: skip


def test_mc_and_open(tmp_path, evaluate):
    write_json(tmp_path / "validation.json", ITEMS)
    out = evaluate(
        "mmvu", tmp_path, {"validation_1": "A", "validation_2": "B", "validation_3": "dolly zoom."}
    )
    assert out.by_id["validation_1"].videos == ("videos/Chemistry/0.mp4",)
    assert (
        out.by_id["validation_3"].problem_type == "open-ended" and out.by_id["validation_3"].options is None
    )
    assert out.summary.overall == pytest.approx(100 * 2 / 3)
    assert out.cell("question_type", "multiple-choice") == pytest.approx(50.0)
    assert out.cell("question_type", "open-ended") == pytest.approx(100.0)
