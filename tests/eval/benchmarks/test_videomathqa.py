"""VideoMathQA: MCQ accuracy and the multi-binary rule (a question counts only if all 4 rows are right)."""

from __future__ import annotations

import pytest

from tests.eval.conftest import write_parquet


def mcq(qid: int, answer: str) -> dict:
    return {"videoID": f"v{qid}", "question_id": qid, "category": "Geometry Area", "question": f"Area {qid}?",
            "options": ["A. 24", "B. 30", "C. 36", "D. 48", "E. 60"], "answer": answer, "steps": "[]",
            "length": "short"}  # fmt: skip


def mbin(qid: int, k: int, answer: str, length: str) -> dict:
    return {"videoID": f"v{qid}", "question_id": qid, "category": "Counting", "question": f"Is it {k}?",
            "options": ["A. yes", "B. no"], "answer": answer, "steps": "[]", "length": length}  # fmt: skip


def test_mcq_and_multi_binary(tmp_path, evaluate):
    write_parquet(tmp_path / "mcq" / "test-00000-of-00001.parquet", [mcq(1, "A"), mcq(2, "B"), mcq(3, "C")])
    rows = [mbin(7, k, "A" if k == 0 else "B", "short") for k in range(4)]
    rows += [mbin(8, k, "B", "long") for k in range(4)]
    write_parquet(tmp_path / "multi_binary" / "test-00000-of-00001.parquet", rows)
    responses = {"mcq/1": "A", "mcq/2": "B", "mcq/3": "D"}  # 2 of 3
    responses |= {"mbin/7/0": "A", "mbin/7/1": "B", "mbin/7/2": "B", "mbin/7/3": "B"}  # all 4 right → 1
    responses |= {"mbin/8/0": "B", "mbin/8/1": "B", "mbin/8/2": "A", "mbin/8/3": "B"}  # one wrong → 0
    out = evaluate("videomathqa", tmp_path, responses)
    assert out.by_id["mbin/8/3"].extra("mode") == "mbin"
    assert out.summary.overall == pytest.approx(100 * 2 / 3)  # MCQ
    assert out.summary.metrics["multi_binary"] == pytest.approx(50.0)
    assert out.cell("multi_binary/length", "short") == pytest.approx(100.0)
    assert out.cell("multi_binary/length", "long") == pytest.approx(0.0)


def test_prompt_is_the_lmms_eval_tasks_text(tmp_path):
    # lmms-eval videomathqa_doc_to_text: option_prompt + "\n" + question + "\n" + options + "\n" + post_prompt,
    # and videomathqa_mcq.yaml's post_prompt begins with "\n": a blank line before the instruction
    from services.eval.benchmarks import get_benchmark

    rows = [{"videoID": "v", "question_id": 1, "category": "Counting", "question": "How many?",
             "options": ["A. 1", "B. 2", "C. 3", "D. 4", "E. 5"], "answer": "B", "steps": "[]", "length": "short"}]  # fmt: skip
    write_parquet(tmp_path / "mcq" / "test-00000-of-00001.parquet", rows)
    bench = get_benchmark("videomathqa")
    (sample,) = bench.load(bench.find_annotations(tmp_path))
    assert bench.prompt(sample, "qwen2_5_vl") == (
        "Select the best answer to the following multiple-choice question based on the video. Respond with the "
        "letter (A, B, C, D or E) of the correct option.\nHow many?\nA. 1\nB. 2\nC. 3\nD. 4\nE. 5\n\n"
        "Answer with the option's letter (A, B, C, D or E) from the given choices directly."
    )
