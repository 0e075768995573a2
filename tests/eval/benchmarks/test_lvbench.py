"""LVBench: "(A) …" options in the question, a question counted in every category it lists."""

from __future__ import annotations

import pytest

from services.eval.benchmarks import get_benchmark
from tests.eval.conftest import write_jsonl

LINE = {
    "key": "Cm73ma6Ibcs", "type": "cartoon",
    "video_info": {"duration_minutes": 118.4, "fps": 29.97, "resolution": {"width": 640, "height": 360}},
    "qa": [
        {"uid": "0", "question": "What year appears in the opening caption?\n(A) 1636\n(B) 1366\n(C) 1363\n(D) 1633",
         "answer": "D", "question_type": ["key information retrieval"], "time_reference": "00:15-00:19"},
        {"uid": "1", "question": "Who is the man in red?\n(A) the king\n(B) a guard\n(C) a cook\n(D) a thief",
         "answer": "A", "question_type": ["entity recognition", "reasoning"], "time_reference": ""},
        {"uid": "2", "question": "Why does he leave?\n(A) war\n(B) love\n(C) money\n(D) exile",
         "answer": "C", "question_type": ["reasoning"], "time_reference": ""},
    ],
}  # fmt: skip


def test_multi_label_categories(tmp_path, evaluate):
    write_jsonl(tmp_path / "video_info.meta.jsonl", [LINE])
    out = evaluate("lvbench", tmp_path, {"Cm73ma6Ibcs/0": "(D)", "Cm73ma6Ibcs/1": "B", "Cm73ma6Ibcs/2": "C"})
    assert out.by_id["Cm73ma6Ibcs/0"].options == ["A. 1636", "B. 1366", "C. 1363", "D. 1633"]
    assert out.summary.overall == pytest.approx(100 * 2 / 3)
    assert out.cell("question_type", "key information retrieval") == pytest.approx(100.0)
    assert out.cell("question_type", "entity recognition") == pytest.approx(0.0)
    assert out.cell("question_type", "reasoning") == pytest.approx(50.0)  # uid 1 wrong, uid 2 right
    bench = get_benchmark("lvbench")
    assert bench.prompt(out.by_id["Cm73ma6Ibcs/2"], "qwen3_vl") == (
        "Why does he leave?\n(A) war\n(B) love\n(C) money\n(D) exile\nAnswer the question with the option letter."
    )
