"""VideoReasonBench: dict-of-questions files, the open-ended fallback and the judge's verdict."""

from __future__ import annotations

import pytest

from services.eval.benchmarks import get_benchmark
from tests.eval.conftest import write_json

CARD = {
    "0": {"video": "videos/card/state1_op5_start.mp4", "question": "Which cards are face up? Provide a summary of the "
          "final answer after 'Final Answer:'", "answer": "1st: Queen of Clubs, pile0\n2nd: Two of Hearts, pile1",
          "dim": "order_operation", "num_state": 1, "num_operation": 5, "visible_time": "start"},
    "1": {"video": "videos/card/state2_op3_end.mp4", "question": "What is the order of the cards?",
          "answer": "Ace of Spades then King of Hearts then Five of Clubs", "dim": "order_state", "num_state": 2,
          "num_operation": 3, "visible_time": "end"},
}  # fmt: skip
CUP = {"0": {"video": "videos/cup/s.mp4", "question": "Where is the ball?", "answer": "under the left cup now",
             "dim": "counting_state", "num_state": 1, "num_operation": 3, "visible_time": "start"}}  # fmt: skip


def test_without_and_with_judge(tmp_path, evaluate):
    write_json(tmp_path / "questions" / "card.json", CARD)
    write_json(tmp_path / "questions" / "cup.json", CUP)
    responses = {
        "card/0": "1st: Queen of Clubs, pile0\n2nd: Two of Hearts, pile1",  # identical: ROUGE 1
        "card/1": "zebra umbrella",  # no overlap: ROUGE 0
    }  # cup/0 missing
    out = evaluate("videoreasonbench", tmp_path, responses)
    assert out.summary.overall == pytest.approx(100 / 3)
    # order_state and counting_state fold into infer_state
    assert out.cell("dim", "infer_state") == pytest.approx(0.0)
    assert out.summary.judged == 0 and "without the LLM judge" in out.summary.notes[0]
    judged = evaluate(
        "videoreasonbench", tmp_path, responses,
        predictions=[{"id": "card/1", "response": "zebra umbrella", "judge_response": "Correct"}],
    )  # fmt: skip
    assert judged.results["card/1"].judged and judged.results["card/1"].accuracy == 1.0
    assert judged.summary.overall == pytest.approx(200 / 3)


def test_judge_prompt_names_question_truth_and_response(tmp_path):
    write_json(tmp_path / "questions" / "cup.json", CUP)
    bench = get_benchmark("videoreasonbench")
    (sample,) = bench.load(bench.find_annotations(tmp_path))
    prompt = bench.judge_prompt(sample, "  left cup  ")
    assert (
        "Question: Where is the ball?" in prompt and "Ground-truth answer: under the left cup now" in prompt
    )
    assert "Model response: left cup\n" in prompt and prompt.endswith("'Correct' or 'Incorrect'.")
