"""MINERVA: answer_choice_* columns with an index answer; skills as multi-label categories."""

from __future__ import annotations

import pytest

from tests.eval.conftest import write_json

ITEMS = [
    {"key": "k1", "video_id": "yt1", "question": "How many times is the ball kicked?", "answer": "three",
     **{f"answer_choice_{i}": t for i, t in enumerate(["one", "two", "three", "four", "five"])}, "answer_id": 2,
     "reasoning": "…", "question type": "Counting, Temporal Reasoning", "split": "sports", "category": "Sports"},
    {"key": "k2", "video_id": "yt2", "question": "What is mixed first?", "answer": "flour",
     **{f"answer_choice_{i}": t for i, t in enumerate(["flour", "eggs", "milk", "salt", "sugar"])}, "answer_id": 0,
     "reasoning": "…", "question type": "Temporal Reasoning", "split": "cooking", "category": "Food"},
]  # fmt: skip


def test_index_answers_and_skills(tmp_path, evaluate):
    write_json(tmp_path / "minerva.json", ITEMS)
    out = evaluate("minerva", tmp_path, {"k1": "C", "k2": "The answer is B"})
    assert out.by_id["k1"].answer == "C" and out.by_id["k1"].options[2] == "C. three"
    assert out.summary.overall == pytest.approx(50.0)
    assert out.cell("skill", "Counting") == pytest.approx(100.0)
    assert out.cell("skill", "Temporal Reasoning") == pytest.approx(50.0)  # k1 right, k2 wrong
