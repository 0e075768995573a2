"""LongVideoBench: index answers (correct_choice), items without answers skipped, the Parquet
option0..option4 columns."""

from __future__ import annotations

import pytest

from tests.eval.conftest import write_json, write_parquet

ITEMS = [
    {"video_id": "86CxyhFV9MI", "question": "What is on the table?", "candidates": ["a cup", "a book", "a phone", "a key"],
     "correct_choice": 1, "id": "86CxyhFV9MI_0", "video_path": "86CxyhFV9MI.mp4", "duration_group": 15,
     "question_category": "S2E", "topic_category": "NP-News-Programs", "level": "L1-Perception"},
    {"video_id": "aaa", "question": "What happens last?", "candidates": ["rain", "snow", "sun", "fog", "wind"],
     "correct_choice": 4, "id": "aaa_1", "video_path": "aaa.mp4", "duration_group": 600,
     "question_category": "T3O", "topic_category": "KS", "level": "L2-Relation"},
    {"video_id": "bbb", "question": "Who speaks?", "candidates": ["he", "she", "they", "nobody"],
     "correct_choice": 0, "id": "bbb_2", "video_path": "bbb.mp4", "duration_group": 600,
     "question_category": "T3O", "topic_category": "KS", "level": "L2-Relation"},
    {"video_id": "ccc", "question": "A test question?", "candidates": ["x", "y"], "id": "ccc_3",
     "video_path": "ccc.mp4", "duration_group": 60},
]  # fmt: skip
RESPONSES = {"86CxyhFV9MI_0": "B", "aaa_1": "E", "bbb_2": "B"}


def test_val_json(tmp_path, evaluate):
    write_json(tmp_path / "lvb_val.json", ITEMS)
    out = evaluate("longvideobench", tmp_path, RESPONSES)
    assert [s.id for s in out.samples] == ["86CxyhFV9MI_0", "aaa_1", "bbb_2"]  # ccc_3 has no answer
    assert out.by_id["aaa_1"].answer == "E" and out.by_id["aaa_1"].videos == ("videos/aaa.mp4",)
    assert out.summary.overall == pytest.approx(100 * 2 / 3)
    assert out.cell("duration_group", "15") == pytest.approx(100.0)
    assert out.cell("duration_group", "600") == pytest.approx(50.0)


def test_parquet_option_columns(tmp_path, evaluate):
    rows = []
    for item in ITEMS[:3]:
        row = {k: v for k, v in item.items() if k != "candidates"}
        for i in range(5):
            row[f"option{i}"] = item["candidates"][i] if i < len(item["candidates"]) else "N/A"
        rows.append(row)
    write_parquet(tmp_path / "validation.parquet", rows)
    out = evaluate("longvideobench", tmp_path, RESPONSES)
    assert out.by_id["86CxyhFV9MI_0"].options == ["A. a cup", "B. a book", "C. a phone", "D. a key"]
    assert out.summary.overall == pytest.approx(100 * 2 / 3)
