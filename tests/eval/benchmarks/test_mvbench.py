"""MVBench: per-task JSON files with text answers, the task folder of each video, the mean over tasks."""

from __future__ import annotations

import pytest

from services.eval.benchmarks import BenchmarkError, get_benchmark
from tests.eval.conftest import write_json

SEQUENCE = [
    {"video": "3MSZA.mp4", "question": "What happened after the person took the food?",
     "candidates": ["Ate the medicine.", "Tidied up the blanket.", "Put down the cup/glass/bottle."],
     "answer": "Ate the medicine.", "start": 11.1, "end": 19.2},
    {"video": "4XYZB.mp4", "question": "What did the person do first?",
     "candidates": ["Opened the door.", "Sat on the bed."], "answer": "Sat on the bed.", "start": 0.0, "end": 8.5},
]  # fmt: skip
SHUFFLE = [
    {"video": "video_10009.mp4", "question": f"Where is the ball {i}?",
     "candidates": ["Under the first object.", "Under the second object.", "Under the third object."],
     "answer": ["Under the first object.", "Under the second object.", "Under the third object."][i]}
    for i in range(3)
]  # fmt: skip
RESPONSES = {
    "action_sequence/0": "(A) Ate the medicine.",  # right
    "action_sequence/1": "A",  # wrong (B)
    "object_shuffle/0": "A",  # right
    "object_shuffle/1": "Best option: (B)",  # right
    "object_shuffle/2": "Under the third object.",  # right, by option text
}


def test_mean_over_tasks(tmp_path, evaluate):
    write_json(tmp_path / "json" / "action_sequence.json", SEQUENCE)
    write_json(tmp_path / "json" / "object_shuffle.json", SHUFFLE)
    out = evaluate("mvbench", tmp_path, RESPONSES)
    sample = out.by_id["action_sequence/1"]
    assert sample.videos == ("video/star/Charades_v1_480/4XYZB.mp4",)
    assert sample.options == ["A. Opened the door.", "B. Sat on the bed."] and sample.answer == "B"
    # action_sequence 1/2 = 50, object_shuffle 3/3 = 100 → mean of tasks 75; micro 4/5 = 80
    assert out.cell("task", "action_sequence") == pytest.approx(50.0)
    assert out.cell("task", "object_shuffle") == pytest.approx(100.0)
    assert out.summary.overall == pytest.approx(75.0)
    assert out.summary.metrics["accuracy"] == pytest.approx(80.0)


def test_prompt_and_system_follow_videochat2(tmp_path):
    write_json(tmp_path / "json" / "action_sequence.json", SEQUENCE[1:])
    bench = get_benchmark("mvbench")
    (sample,) = bench.load(bench.find_annotations(tmp_path))
    assert bench.prompt(sample, "qwen2_5_vl") == (
        "Question: What did the person do first?\nOptions:\n(A) Opened the door.\n(B) Sat on the bed.\n"
        "Only give the best option."
    )
    assert bench.system_prompt(sample).startswith("Carefully watch the video")
    assert bench.system_prompt(sample, thinking=True) is None


def test_unknown_task_and_unknown_answer_are_errors(tmp_path):
    bench = get_benchmark("mvbench")
    write_json(tmp_path / "a" / "json" / "made_up_task.json", SEQUENCE)
    with pytest.raises(BenchmarkError, match="unknown MVBench task 'made_up_task'"):
        bench.load(bench.find_annotations(tmp_path / "a"))
    bad = [{**SEQUENCE[0], "answer": "Flew away."}]
    write_json(tmp_path / "b" / "json" / "action_sequence.json", bad)
    with pytest.raises(BenchmarkError, match=r"action_sequence.json#0: answer 'Flew away.'"):
        bench.load(bench.find_annotations(tmp_path / "b"))
