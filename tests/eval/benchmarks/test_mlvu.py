"""MLVU: dev task files with text answers, generation tasks skipped, M-Avg = mean of task accuracies;
the test file's question ids."""

from __future__ import annotations

import pytest

from tests.eval.conftest import write_json

PLOT = [
    {"video": "movie101_66.mp4", "duration": 246, "question": "What colour is the car?",
     "candidates": ["Yellow", "Red", "Green", "Blue"], "answer": "Yellow", "question_type": "plotQA"},
    {"video": "movie101_67.mp4", "duration": 300, "question": "Who drives?",
     "candidates": ["Tom", "Ann", "Bob", "Eve"], "answer": "Bob", "question_type": "plotQA"},
]  # fmt: skip
COUNT = [
    {"video": f"count_{i}.mp4", "duration": 500, "question": "How many dogs?",
     "candidates": ["1", "2", "3", "4"], "answer": str(i + 1), "question_type": "count"}
    for i in range(3)
]  # fmt: skip
SUMMARY = [{"video": "s.mp4", "duration": 900, "question": "Summarise the video.", "answer": "A long story.",
            "question_type": "summary"}]  # fmt: skip


def test_m_avg_is_the_mean_of_tasks(tmp_path, evaluate):
    write_json(tmp_path / "json" / "1_plotQA.json", PLOT)
    write_json(tmp_path / "json" / "4_count.json", COUNT)
    write_json(tmp_path / "json" / "9_summary.json", SUMMARY)
    responses = {
        "1_plotQA/0": "(A) Yellow",
        "1_plotQA/1": "C",
        "4_count/0": "A",
        "4_count/1": "C",
        "4_count/2": "A",
    }
    out = evaluate("mlvu", tmp_path, responses)
    assert len(out.samples) == 5  # the summary (generation) task is skipped
    assert out.by_id["4_count/2"].videos == ("video/4_count/count_2.mp4",)
    # plotQA 2/2 = 100, count 1/3 = 33.3 → M-Avg 66.7; micro 3/5 = 60
    assert out.cell("task", "plotQA") == pytest.approx(100.0)
    assert out.cell("task", "count") == pytest.approx(100 / 3)
    assert out.summary.overall == pytest.approx((100 + 100 / 3) / 2)
    assert out.summary.metrics["accuracy"] == pytest.approx(60.0)


def test_test_split_question_ids(tmp_path, evaluate):
    items = [{"question_id": "AR_0", "question_type": "anomaly_reco", "video": "a.mp4", "question": "Anything odd?",
              "candidates": ["fire", "flood", "fight", "theft", "none", "crash"], "answer": "fight"}]  # fmt: skip
    write_json(tmp_path / "test_question.json", items)
    out = evaluate("mlvu", tmp_path / "test_question.json", {"AR_0": "C"})
    assert out.by_id["AR_0"].videos == ("video/a.mp4",)
    assert out.summary.overall == 100.0


def test_answers_are_read_after_the_assistant_prefix(tmp_path, evaluate):
    """The official prompt ends the assistant turn with "Best Option: (" and the model writes the letter
    next, so the answer is read from prefix + response. "A) Tom. B) was not there" names two letters
    (a hedge, no answer) on its own; after the prefix, the final-answer phrase "Best Option" reads A."""
    from services.eval.benchmarks import get_benchmark

    write_json(tmp_path / "json" / "1_plotQA.json", PLOT)
    bench = get_benchmark("mlvu")
    (first, _) = bench.load(bench.find_annotations(tmp_path))
    assert bench.assistant_prefix(first) == "Best Option: ("
    assert bench.assistant_prefix(first, thinking=True) is None
    hedge = "A) Tom. B) was not there"
    out = evaluate(
        "mlvu",
        tmp_path,
        {},
        predictions=[
            {"id": "1_plotQA/0", "response": hedge},  # no field: the protocol's prefix
            {"id": "1_plotQA/1", "response": hedge, "assistant_prefix": ""},  # a run without one
        ],
    )
    assert out.results["1_plotQA/0"].extracted == "A" and out.results["1_plotQA/0"].accuracy == 1.0
    assert out.results["1_plotQA/0"].response == hedge  # stored as generated
    assert out.results["1_plotQA/1"].extracted is None and out.results["1_plotQA/1"].accuracy == 0.0


def test_the_prefix_is_part_of_the_prompt_version(tmp_path):
    from services.eval.benchmarks import get_benchmark
    from services.eval.benchmarks.mlvu import MLVU

    write_json(tmp_path / "json" / "1_plotQA.json", PLOT)
    bench = get_benchmark("mlvu")
    (sample, _) = bench.load(bench.find_annotations(tmp_path))

    class NoPrefix(MLVU):
        answer_prefix = None

    assert bench.prompt_version(sample) != NoPrefix().prompt_version(sample)
