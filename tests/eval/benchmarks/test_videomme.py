"""Video-MME: the HF Parquet rows and the official nested JSON template, duration breakdowns, and the
subtitle rule (only cues on screen at a sampled frame)."""

from __future__ import annotations

import pytest

from services.eval.benchmarks import get_benchmark
from services.eval.benchmarks.subtitles import parse_srt, subtitles_at
from tests.eval.conftest import write_json, write_parquet

ROWS = [
    {"video_id": "001", "duration": "short", "domain": "Knowledge", "sub_category": "Humanity & History",
     "url": "https://www.youtube.com/watch?v=fFjv93ACGo8", "videoID": "fFjv93ACGo8", "question_id": "001-1",
     "task_type": "Counting Problem", "question": "Which kind is most numerous?",
     "options": ["A. Apples.", "B. Candles.", "C. Berries.", "D. The three kinds are of the same number."],
     "answer": "C"},
    {"video_id": "001", "duration": "short", "domain": "Knowledge", "sub_category": "Humanity & History",
     "url": "", "videoID": "fFjv93ACGo8", "question_id": "001-2", "task_type": "OCR Problems",
     "question": "What year is shown?", "options": ["A. 1990.", "B. 1991.", "C. 1992.", "D. 1993."], "answer": "B"},
    {"video_id": "002", "duration": "medium", "domain": "Film", "sub_category": "Animation", "url": "",
     "videoID": "mEdIuM00001", "question_id": "002-1", "task_type": "Action Reasoning",
     "question": "Why does the cat jump?", "options": ["A. Fear.", "B. Play.", "C. Food.", "D. Noise."], "answer": "B"},
    {"video_id": "003", "duration": "long", "domain": "Sports", "sub_category": "Football", "url": "",
     "videoID": "LoNg0000001", "question_id": "003-1", "task_type": "Counting Problem",
     "question": "How many goals?", "options": ["A. 0.", "B. 1.", "C. 2.", "D. 3."], "answer": "D"},
]  # fmt: skip
RESPONSES = {
    "001-1": "C",  # right
    "001-2": "A. 1990.",  # wrong
    "002-1": "The best answer is: B",  # right
}  # 003-1 has no prediction: wrong, and listed as missing


def test_parquet_rows_scored_with_duration_breakdown(tmp_path, evaluate):
    write_parquet(tmp_path / "videomme" / "test-00000-of-00001.parquet", ROWS)
    out = evaluate("videomme", tmp_path, RESPONSES)
    assert [s.id for s in out.samples] == ["001-1", "001-2", "002-1", "003-1"]
    sample = out.by_id["001-1"]
    assert sample.videos == ("data/fFjv93ACGo8.mp4",)
    assert sample.answer == "C" and sample.extra("duration") == "short"
    # eval_your_results.py divides by the questions with a readable answer: 2 right of 3 answered
    assert out.summary.overall == pytest.approx(200 / 3)
    assert out.summary.details["official_left_out"] == 1
    # short: 001-1 right, 001-2 wrong → 50; medium: 002-1 right → 100; long: no answered question
    assert out.cell("duration", "short") == pytest.approx(50.0)
    assert out.cell("duration", "medium") == pytest.approx(100.0)
    assert "long" not in out.summary.breakdowns["duration"]
    assert out.cell("task_type", "Counting Problem") == pytest.approx(100.0)
    assert out.summary.missing == ["003-1"] and out.summary.count == 4
    # the robust figure divides by every question: 2 of 4
    assert out.summary.robust_overall == pytest.approx(50.0)
    robust = evaluate("videomme", tmp_path, RESPONSES, reader="robust")
    assert robust.summary.overall == pytest.approx(50.0) and robust.summary.reader == "robust"
    assert robust.cell("duration", "long") == pytest.approx(0.0)


def test_official_nested_template_reads_the_same_questions(tmp_path, evaluate):
    videos = {}
    for row in ROWS:
        video = videos.setdefault(
            row["video_id"],
            {k: row[k] for k in ("video_id", "duration", "domain", "sub_category", "url", "videoID")},
        )
        video.setdefault("questions", []).append(
            {k: row[k] for k in ("question_id", "task_type", "question", "options", "answer")}
        )  # fmt: skip
    write_json(tmp_path / "videomme.json", list(videos.values()))
    out = evaluate("videomme", tmp_path / "videomme.json", RESPONSES)
    assert [s.id for s in out.samples] == ["001-1", "001-2", "002-1", "003-1"]
    assert out.summary.overall == pytest.approx(200 / 3)


def test_prompt_is_the_official_one(tmp_path):
    write_parquet(tmp_path / "videomme" / "test-00000-of-00001.parquet", ROWS[:1])
    bench = get_benchmark("videomme")
    (sample,) = bench.load(bench.find_annotations(tmp_path))
    assert bench.prompt(sample, "qwen3_vl") == (
        "Select the best answer to the following multiple-choice question based on the video. Respond with "
        "only the letter (A, B, C, or D) of the correct option.\nWhich kind is most numerous?\nA. Apples.\n"
        "B. Candles.\nC. Berries.\nD. The three kinds are of the same number.\nThe best answer is:"
    )


SRT = """1
00:00:00,500 --> 00:00:01,500
<font color="white" size=".72c">Hello there</font>

2
00:00:02,000 --> 00:00:03,000
unseen line

3
00:00:04,500 --> 00:00:06,000
Bye
"""


def test_subtitles_keep_only_cues_at_sampled_frames(tmp_path):
    assert parse_srt(SRT) == [(0.5, 1.5, "Hello there"), (2.0, 3.0, "unseen line"), (4.5, 6.0, "Bye")]
    # frames at 1.0 s and 5.0 s (indices 10 and 50 of a 10 fps source) see cues 1 and 3 only
    assert subtitles_at(parse_srt(SRT), [1.0, 5.0]) == ["Hello there", "Bye"]
    (tmp_path / "subtitle").mkdir()
    (tmp_path / "subtitle" / "fFjv93ACGo8.srt").write_text(SRT)
    write_parquet(tmp_path / "videomme" / "test-00000-of-00001.parquet", ROWS[:1])
    bench = get_benchmark("videomme_subtitles", tmp_path)
    (sample,) = bench.load(bench.find_annotations(tmp_path))
    meta = [{"fps": 10.0, "frames_indices": [10, 50]}]
    prompt = bench.prompt(sample, "qwen2_5_vl", clip_meta=meta)
    assert prompt.startswith(
        "This video's subtitles are listed below:\nHello there\nBye\nSelect the best answer"
    )
    assert bench.prompt_version(sample) != get_benchmark("videomme").prompt_version(sample)
