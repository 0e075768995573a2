"""LongVideo-Reason: JSONL with options inside the problem, ids from the file stem and line."""

from __future__ import annotations

import pytest

from tests.eval.conftest import write_jsonl

LINES = [
    {"videos": "longvila_videos/a.mp4", "problem": "Why did she return?\nA. forgot keys\nB. saw a friend\nC. rain\nD. call",
     "answer": "B"},
    {"videos": "longvila_videos/b.mp4", "problem": "What breaks?\nA. cup\nB. plate\nC. glass\nD. vase", "answer": "D"},
]  # fmt: skip


def test_thinking_answers(tmp_path, evaluate):
    write_jsonl(tmp_path / "test.jsonl", LINES)
    responses = {
        "test/0": "<think>She waved at someone.</think> <answer>B</answer>",
        "test/1": "<answer>C</answer>",
    }
    out = evaluate("longvideo_reason", tmp_path, responses)
    assert out.by_id["test/0"].problem == "Why did she return?" and out.by_id["test/0"].answer == "B"
    assert out.summary.overall == pytest.approx(50.0)
