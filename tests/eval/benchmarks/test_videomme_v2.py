"""Video-MME-v2: group scores by the official non-linear rules, plain accuracy beside them, and the
group taxonomy read from the group's last question."""

from __future__ import annotations

import pytest

from services.eval.benchmarks.videomme_v2 import logic_score, relevance_score
from tests.eval.conftest import write_parquet

OPTIONS = "\n".join(f"{letter}. option {letter}" for letter in "ABCDEFGH")


def group(video: str, kind: str, structure: str, answers: str, level: int, head: str) -> list[dict]:
    rows = []
    for i, answer in enumerate(answers, start=1):
        last = i == len(answers)
        rows.append({
            "video_id": video, "question_id": f"{video}-{i}", "question": f"Q{i} about {video}?",
            "options": OPTIONS, "answer": answer, "group_type": kind, "group_structure": structure,
            "level": level if last else None, "second_head": head if last else None, "third_head": None,
            "url": "",
        })  # fmt: skip
    return rows


ROWS = (
    group("001", "relevance", "[1, 2, 3, 4]", "ABCD", 1, "perception")
    + group("002", "logic", "[1, [2, 3], 4]", "EFGH", 2, "reasoning")
    + group("003", "logic", "[[1, 2], 3, 4]", "AAAA", 2, "reasoning")
)
RESPONSES = {
    # 001 relevance: right, right, wrong, right → 3 right → 100·9/16 = 56.25
    "001-1": "A", "001-2": "B", "001-3": "A", "001-4": "D",
    # 002 logic [1,[2,3],4]: right, wrong, right, right → chain 1, Q1 and Q3 right → 2 → 400/12 = 33.33
    "002-1": "E", "002-2": "A", "002-3": "G", "002-4": "H",
    # 003 logic [[1,2],3,4]: wrong, right, right, right → chain 0, Q2 right → 1 → 10
    "003-1": "B", "003-2": "A", "003-3": "A", "003-4": "Final Answer: A.",
}  # fmt: skip


def test_group_scores_and_accuracy(tmp_path, evaluate):
    write_parquet(tmp_path / "test.parquet", ROWS)
    out = evaluate("videomme_v2", tmp_path, RESPONSES)
    assert out.by_id["002-1"].videos == ("data/002.mp4",)
    expected_groups = [56.25, 400 / 12, 10.0]
    assert out.summary.overall == pytest.approx(sum(expected_groups) / 3)  # 33.194…
    assert out.summary.metrics["accuracy"] == pytest.approx(100 * 9 / 12)  # 9 of 12 questions right
    assert out.cell("group_type", "relevance") == pytest.approx(56.25)
    assert out.cell("group_type", "logic") == pytest.approx((400 / 12 + 10.0) / 2)
    # level and second_head sit on each group's last question only
    assert out.cell("level", "1") == pytest.approx(56.25)
    assert out.cell("level", "2") == pytest.approx((400 / 12 + 10.0) / 2)
    assert out.summary.breakdowns["second_head"]["reasoning"].count == 2


def test_rule_tables():
    assert [relevance_score([True] * k + [False] * (4 - k)) for k in range(5)] == [0, 6.25, 25, 56.25, 100]
    assert logic_score([True, True, True, False], "[1, 2, 3, 4]") == 56.25
    assert logic_score([False, True, True, True], "[1, 2, 3, 4]") == 0.0  # a broken chain scores 0
    assert logic_score([True, False, False, True], "[1, [2, 3], 4]") == pytest.approx(100 / 12)
    assert logic_score([True, True, True, True], "[[1, 2], 3, 4]") == 100.0


def test_subtitles_are_the_whole_word_transcript(tmp_path):
    """subtitles=true: every word of subtitle/<video_id>.jsonl in file order (the official script's
    concatenated mode); a video without a file gets an empty transcript, as officially."""
    from services.eval.benchmarks import get_benchmark
    from tests.eval.conftest import write_jsonl

    write_parquet(tmp_path / "test.parquet", ROWS)
    words = [("Hello", 0.5, 0.8), ("world.", 0.8, 1.2), ("Bye", 30.0, 30.4)]
    write_jsonl(
        tmp_path / "subtitle" / "001.jsonl",
        [{"text": w, "start_time": s, "end_time": e} for w, s, e in words],
    )
    bench = get_benchmark("videomme_v2", tmp_path, subtitles=True)
    samples = {s.id: s for s in bench.load(bench.find_annotations(tmp_path))}
    instruct = (
        "Select the best answer to the following multiple-choice question based on the video. Respond with "
        "only the letter (A, B, C, D, E, F, G, or H) of the correct option."
    )
    assert bench.prompt(samples["001-1"], "qwen3_vl") == (
        "These are the frames of a video. This video's subtitles are listed below:\nHello world. Bye\n"
        f"Question: Q1 about 001?\n{OPTIONS}\n{instruct}"
    )
    assert bench.prompt(samples["002-1"], "qwen3_vl").startswith(
        "These are the frames of a video. This video's subtitles are listed below:\n\nQuestion: Q1 about 002?"
    )
    plain = get_benchmark("videomme_v2", tmp_path)
    assert plain.prompt(samples["001-1"], "qwen3_vl") == (
        f"These are the frames of a video.\nQuestion: Q1 about 001?\n{OPTIONS}\n{instruct}"
    )
    assert plain.prompt_version(samples["001-1"]) != bench.prompt_version(samples["001-1"])
