"""OVO-Bench: backward/real-time multiple choice, forward probes (count, yes/no), and the macro average
task → category → total."""

from __future__ import annotations

import pytest

from services.eval.benchmarks import get_benchmark
from tests.eval.conftest import write_json

ITEMS = [
    {"id": 0, "task": "EPM", "video": "Ego4D/a.mp4", "realtime": 30.0, "question": "Where did I put the keys?",
     "answer": "table", "options": ["sofa", "table", "bag", "floor"], "gt": 1},
    {"id": 1, "task": "STU", "video": "b.mp4", "realtime": 12.0, "question": "What is happening now?",
     "answer": "cooking", "options": ["cooking", "eating", "reading", "sleeping"], "gt": 0},
    {"id": 2, "task": "OCR", "video": "c.mp4", "realtime": 5.0, "question": "What is written?",
     "answer": "EXIT", "options": ["STOP", "OPEN", "EXIT", "PUSH"], "gt": 2},
    {"id": 3, "task": "REC", "video": "d.mp4", "activity": "jump", "start_times": [1, 5], "end_times": [2, 6],
     "test_info": [{"realtime": 3.0, "count": 2}, {"realtime": 7.0, "count": 3}]},
    {"id": 4, "task": "SSR", "video": "e.mp4", "tutorial": "soup", "all_steps": ["cut the onion", "boil"],
     "start_time": 0, "end_time": 20,
     "test_info": [{"realtime": 4.0, "step": "cut the onion", "type": 1}, {"realtime": 15.0, "step": "cut the onion", "type": 0}]},
    {"id": 5, "task": "CRR", "video": "f.mp4", "question": "What colour is the car?", "answer": "red",
     "ask_time": 3.0, "clue_time": 10.0, "test_info": [{"realtime": 4.0, "type": 0}]},
]  # fmt: skip
RESPONSES = {
    "0": "B", "1": "B", "2": "C",  # EPM right, STU wrong, OCR right
    "3/0": "2", "3/1": "4",  # REC: 1 of 2
    "4/0": "Yes", "4/1": "Yes",  # SSR: 1 of 2
    "5/0": "No",  # CRR: right
}  # fmt: skip


def test_macro_average(tmp_path, evaluate):
    write_json(tmp_path / "ovo_bench_new.json", ITEMS)
    out = evaluate("ovobench", tmp_path, RESPONSES)
    assert out.by_id["3/1"].problem == "How many times did they jump?" and out.by_id["3/1"].answer == 3
    assert out.by_id["3/1"].videos == ("chunked_videos/3_1.mp4",) and out.by_id["0"].videos == (
        "chunked_videos/0.mp4",
    )
    assert out.by_id["4/1"].answer == "no"
    metrics = out.summary.metrics
    assert metrics["backward_avg"] == pytest.approx(100.0)  # EPM
    assert metrics["realtime_avg"] == pytest.approx(50.0)  # STU 0, OCR 100
    assert metrics["forward_avg"] == pytest.approx((50 + 50 + 100) / 3)  # REC, SSR, CRR
    assert out.summary.overall == pytest.approx((100 + 50 + 200 / 3) / 3)  # 72.22…


def test_official_prompts(tmp_path):
    write_json(tmp_path / "ovo_bench_new.json", ITEMS[:1] + ITEMS[4:5])
    bench = get_benchmark("ovobench")
    choice, step, _ = bench.load(bench.find_annotations(tmp_path))
    assert bench.prompt(choice, "qwen2_5_vl") == (
        "\nQuestion: Where did I put the keys?\nOptions:\nA. sofa; B. table; C. bag; D. floor;\n\n"
        "Respond only with the letter corresponding to your chosen option (e.g., A, B, C). \n"
        "Do not include any additional text or explanation in your response.\n"
    )
    assert "The following is one step from the whole procedures: \ncut the onion\n" in bench.prompt(
        step, "qwen2_5_vl"
    )
