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


def test_both_splits_send_the_official_multiple_choice_prompt(tmp_path):
    """JUNJIE99/MLVU: evaluation/models/videollava/choice_bench.py main (dev) and
    evaluation_test/test_bench.py main (test) send qa_template's rstripped "Question: …\nOptions:\n(A) …"
    + "\nOnly give the best option.", the system text conv.system and the assistant turn "Best Option: (".
    The strings below are written out by hand from that code."""
    from services.eval.benchmarks import get_benchmark

    write_json(tmp_path / "json" / "4_count.json", COUNT[:1])
    items = [{"question_id": "AR_0", "question_type": "anomaly_reco", "video": "a.mp4", "question": "Anything odd?",
              "candidates": ["fire", "flood", "fight", "theft", "none", "crash"], "answer": "fight"}]  # fmt: skip
    write_json(tmp_path / "test_question.json", items)
    bench = get_benchmark("mlvu")
    by_split = {s.extra("split"): s for s in bench.load(bench.find_annotations(tmp_path))}
    assert sorted(by_split) == ["dev", "test"]
    assert bench.prompt(by_split["dev"], "qwen2_5_vl") == (
        "Question: How many dogs?\nOptions:\n(A) 1\n(B) 2\n(C) 3\n(D) 4\nOnly give the best option."
    )
    assert bench.prompt(by_split["test"], "qwen2_5_vl") == (
        "Question: Anything odd?\nOptions:\n(A) fire\n(B) flood\n(C) fight\n(D) theft\n(E) none\n(F) crash\n"
        "Only give the best option."
    )
    for sample in by_split.values():
        assert bench.system_prompt(sample) == (
            "Carefully watch this video and pay attention to every detail. Based on your observations, "
            "select the best option that accurately addresses the question."
        )
        assert bench.assistant_prefix(sample) == "Best Option: ("


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


SUB_SCENE = [
    {"video": "subPlot_1.mp4", "duration": 400, "question": "Describe the scene where\nthe boy finds the key.",
     "answer": "The boy lifts a rug and picks up a key.", "question_type": "subPlot",
     "scoring_points": ["The boy lifts the rug", "He picks up a key"]},
    {"video": "subPlot_2.mp4", "duration": 500, "question": "Describe the dinner scene.",
     "answer": "A family eats dinner.", "question_type": "subPlot", "scoring_points": ["A family eats"]},
]  # fmt: skip
SUMMARY_TASK = [
    {"video": "summary_1.mp4", "duration": 900, "question": "Please summarize this video.",
     "answer": "A day at the beach.", "question_type": "summary"},
    {"video": "summary_2.mp4", "duration": 800, "question": "Please summarize this video.",
     "answer": "A city tour.", "question_type": "summary"},
]  # fmt: skip


def test_generation_tasks_are_judged_with_the_official_rubrics(tmp_path, evaluate):
    """generation=true: sub-scene items are graded for accuracy (scoring points) + relevance, summaries
    for completeness + reliability, each 1-5 summed. SSC totals 4+5 = 9 and 2.5+3 = 5.5 → 7.25; VS
    totals 3+4 = 7 and an unreadable reply counted 0 → 3.5; G-Avg = (7.25 + 3.5) / 2 = 5.375.
    M-Avg stays the mean of the multiple-choice tasks: plotQA 1/2 = 50."""
    write_json(tmp_path / "json" / "1_plotQA.json", PLOT)
    write_json(tmp_path / "json" / "8_sub_scene.json", SUB_SCENE)
    write_json(tmp_path / "json" / "9_summary.json", SUMMARY_TASK)

    def judged(sample_id, name, reply):
        return {"id": sample_id, "response": "some description", "rubric_replies": {name: reply}}

    predictions = [
        judged("8_sub_scene/0", "SSC", "Both points hit.\n{'score_accuracy': 4, 'score_relevance': 5, 'total_score': 9}"),
        judged("8_sub_scene/1", "SSC", 'Partly.\n{"score_accuracy": 2.5, "score_relevance": 3, "total_score": 5.5}'),
        judged("9_summary/0", "VS", "{'score_completeness': 3, 'score_reliability': 4, 'total_score': 7}"),
        judged("9_summary/1", "VS", "I think it is fine."),
    ]  # fmt: skip
    out = evaluate(
        "mlvu", tmp_path, {"1_plotQA/0": "A", "1_plotQA/1": "A"}, predictions=predictions, generation=True
    )
    assert len(out.samples) == 6
    metrics = out.summary.metrics
    assert metrics["SSC"] == pytest.approx(7.25) and metrics["VS"] == pytest.approx(3.5)
    assert metrics["G-Avg"] == pytest.approx(5.375)
    assert metrics["SSC accuracy"] == pytest.approx(3.25) and metrics["VS reliability"] == pytest.approx(2.0)
    assert out.summary.overall == pytest.approx(50.0)  # M-Avg over plotQA only
    assert set(out.summary.breakdowns["task"]) == {"plotQA"}
    first = out.results["8_sub_scene/0"]
    assert first.judged and first.accuracy == pytest.approx(0.9) and first.details["total"] == 9.0
    assert out.results["9_summary/1"].details["unreadable"] is True
    assert any("lacked a score" in note for note in out.summary.notes)


def test_generation_prompts_and_judge_questions(tmp_path):
    from services.eval.benchmarks import get_benchmark

    write_json(tmp_path / "json" / "1_plotQA.json", PLOT)
    write_json(tmp_path / "json" / "8_sub_scene.json", SUB_SCENE)
    write_json(tmp_path / "json" / "9_summary.json", SUMMARY_TASK)
    assert len(get_benchmark("mlvu").load(get_benchmark("mlvu").find_annotations(tmp_path))) == 2  # off
    bench = get_benchmark("mlvu", generation=True)
    samples = {s.id: s for s in bench.load(bench.find_annotations(tmp_path))}
    scene, choice = samples["8_sub_scene/0"], samples["1_plotQA/0"]
    assert bench.prompt(scene, "qwen2_5_vl") == scene.problem
    assert bench.system_prompt(scene).endswith("answer the given questions.")
    assert bench.assistant_prefix(scene) is None and bench.assistant_prefix(choice) == "Best Option: ("
    assert bench.prompt_version(scene) != bench.prompt_version(choice)
    (ssc,) = bench.rubric_questions(scene, "The boy finds a key.").values()
    assert ssc.system.startswith("##TASK DESCRIPTION:") and "'score_relevance'" in ssc.system
    assert ssc.prompt.endswith(
        "Question: Describe the scene wherethe boy finds the key.\n"
        "Scoring Points: ['The boy lifts the rug', 'He picks up a key']\n"
        "Respondent's Answer: The boy finds a key."
    )
    (vs,) = bench.rubric_questions(samples["9_summary/0"], "Sand.").values()
    assert vs.prompt.endswith("Standard Answer: A day at the beach.\nRespondent's Answer: Sand.")
    assert bench.rubric_questions(choice, "A") == {}


def test_generation_without_a_judge_reports_no_g_avg(tmp_path, evaluate):
    write_json(tmp_path / "json" / "9_summary.json", SUMMARY_TASK)
    write_json(tmp_path / "json" / "1_plotQA.json", PLOT)
    out = evaluate("mlvu", tmp_path, {"9_summary/0": "A beach day."}, generation=True)
    assert "G-Avg" not in out.summary.metrics
    assert any("2 of 2 generation items have no judge scores" in note for note in out.summary.notes)
