"""TempCompass: the four answer formats from the official nested files, the judge-free captioning
rule, and the mean of the four formats."""

from __future__ import annotations

import pytest

from services.eval.benchmarks import get_benchmark
from tests.eval.conftest import write_json, write_parquet

MC_Q = "What is the man doing in the video?\nA. dunking a basketball\nB. dribbling a basketball\nC. passing a basketball"
FILES = {
    "multi-choice": {"1001": {
        "action": [{"question": MC_Q, "answer": "A. dunking a basketball"}],
        "speed": [{"question": "How fast does he move?\nA. slowly\nB. quickly", "answer": "B. quickly"}],
    }},
    "yes_no": {"1001": {"action": [
        {"question": "Is the man dunking a basketball?", "answer": "yes"},
        {"question": "Is the man passing a basketball?", "answer": "no"},
    ]}},
    "caption_matching": {"1001": {"direction": [{
        "question": "Which caption matches the video better?\nCaption A: The ball goes up.\nCaption B: The ball goes down.",
        "answer": "Caption B: The ball goes down.",
    }]}},
    "captioning": {"1001": {"action": [{
        "question": "You will be presented with a video and several pieces of information. Write a caption for the "
                    "video using the correct information.\nInformation A: dunking a basketball\n"
                    "Information B: dribbling a basketball\nGenerated Caption:",
        "answer": "A. dunking a basketball",
    }]}},
}  # fmt: skip
RESPONSES = {
    "multi-choice/1001/action/0": "A",  # right
    "multi-choice/1001/speed/0": "A. slowly",  # wrong
    "yes_no/1001/action/0": "Yes.",  # right
    "yes_no/1001/action/1": "Yes, he is.",  # wrong (truth no)
    "caption_matching/1001/direction/0": "Caption B",  # right
    "captioning/1001/action/0": "The man is dunking a basketball.",  # names option A's text → right
}


def test_four_formats(tmp_path, evaluate):
    for name, data in FILES.items():
        write_json(tmp_path / "questions" / f"{name}.json", data)
    out = evaluate("tempcompass", tmp_path, RESPONSES)
    mc = out.by_id["multi-choice/1001/action/0"]
    assert mc.problem == "What is the man doing in the video?" and mc.answer == "A"
    assert out.by_id["caption_matching/1001/direction/0"].answer == "B"
    assert out.by_id["yes_no/1001/action/1"].problem_type == "boolean"
    # multi-choice 1/2 = 50, yes/no 1/2 = 50, caption matching 1/1 = 100, captioning 1/1 = 100
    assert out.cell("format", "multi-choice") == pytest.approx(50.0)
    assert out.cell("format", "yes_no") == pytest.approx(50.0)
    assert out.cell("format", "caption_matching") == pytest.approx(100.0)
    assert out.cell("format", "captioning") == pytest.approx(100.0)
    assert out.summary.overall == pytest.approx(75.0)  # mean of the formats
    assert out.summary.metrics["accuracy"] == pytest.approx(100 * 4 / 6)


def test_hf_parquet_rows_and_the_captioning_judge(tmp_path, evaluate):
    rows = [{"video_id": "1001", "question": FILES["captioning"]["1001"]["action"][0]["question"],
             "answer": "A. dunking a basketball", "dim": "action",
             "mc_question": MC_Q, "mc_answer": "A. dunking a basketball"}]  # fmt: skip
    write_parquet(tmp_path / "captioning" / "test-00000-of-00001.parquet", rows)
    bench = get_benchmark("tempcompass")
    (sample,) = bench.load(bench.find_annotations(tmp_path))
    assert bench.uses_judge(sample)
    assert MC_Q in bench.judge_prompt(sample, "A man dunks.")
    # the judge answered the format's question from the caption with "C": wrong, though the caption
    # itself names option A
    judged = evaluate(
        "tempcompass", tmp_path, {},
        predictions=[{"id": "captioning/0", "response": "A man dunking a basketball", "judge_response": "C"}],
    )  # fmt: skip
    assert judged.results["captioning/0"].judged and judged.summary.overall == 0.0
