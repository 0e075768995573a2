"""Video-Holmes: dict options, the official think/answer prompt, per-type accuracy."""

from __future__ import annotations

import pytest

from services.eval.benchmarks import get_benchmark
from tests.eval.conftest import write_json

OPTIONS = {"A": "neighbor", "B": "brother", "C": "stranger", "D": "boss", "E": "teacher", "F": "friend"}
ITEMS = [
    {"video ID": "fH6bbNJJfqk", "Question ID": 1, "Question Type": "SR",
     "Question": "What is the relationship between the two men?", "Options": OPTIONS, "Answer": "F", "Explanation": "…"},
    {"video ID": "fH6bbNJJfqk", "Question ID": 2, "Question Type": "SR",
     "Question": "Who is the woman to the man?", "Options": OPTIONS, "Answer": "B", "Explanation": "…"},
    {"video ID": "zz9", "Question ID": 1, "Question Type": "TCI",
     "Question": "What caused the fall?", "Options": OPTIONS, "Answer": "C", "Explanation": "…"},
]  # fmt: skip


def test_types_and_prompt(tmp_path, evaluate):
    write_json(tmp_path / "test_Video-Holmes.json", ITEMS)
    responses = {
        "fH6bbNJJfqk/1": "<think>They hug like old pals.</think><answer>F</answer>",  # right
        "fH6bbNJJfqk/2": "<think>…</think><answer>A</answer>",  # wrong
        "zz9/1": "<think>The stranger pushed him.</think><answer>C</answer>",  # right
    }
    out = evaluate("video_holmes", tmp_path, responses)
    assert out.by_id["zz9/1"].videos == ("videos_cropped/zz9.mp4",)
    assert out.summary.overall == pytest.approx(100 * 2 / 3)
    assert out.cell("question_type", "SR") == pytest.approx(50.0)
    assert out.cell("question_type", "TCI") == pytest.approx(100.0)
    prompt = get_benchmark("video_holmes").prompt(out.by_id["zz9/1"], "qwen2_5_vl")
    assert prompt.endswith(
        "The question is: What caused the fall?. The options are: A: neighbor, B: brother, C: stranger, D: boss, "
        "E: teacher, F: friend. Your answer:"
    )
