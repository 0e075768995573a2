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


SUBTITLED = [
    {**ITEMS[0], "subtitle_path": "86CxyhFV9MI_en.json", "starting_timestamp_for_subtitles": 10.0, "duration": 9.0},
    {**ITEMS[1], "subtitle_path": "aaa_en.json", "starting_timestamp_for_subtitles": 0, "duration": 8.0},
    {**ITEMS[2], "subtitle_path": "gone_en.json", "duration": 8.0},
]  # fmt: skip
# official cue formats: "start"/"end" clock strings with "line", or "timestamp" [s, e] with "text"
CLOCK_CUES = [
    {"start": "00:00:10.500", "end": "00:00:12.000", "line": "Hello there."},
    {"start": "00:00:11.900", "end": "00:00:12.300", "line": "uh"},
    {"start": "00:00:12.600", "end": "00:00:13.200", "line": "Short line."},
    {"start": "00:00:13.000", "end": "00:00:15.000", "line": "Edge case."},
    {"start": "00:00:16.000", "end": "00:00:20.000", "line": "Last words."},
]
SPAN_CUES = [{"timestamp": [0.2, 0.4], "text": "blink"}, {"timestamp": [6.5, None], "text": "to the end"}]
FRAMES = [{"timestamps": [1.0, 3.0, 5.0, 7.0]}]  # the clip's sampled frame times (frame-store metadata)


def test_subtitles_follow_the_official_selection_rule(tmp_path):
    """Cue times minus starting_timestamp_for_subtitles (10 s for the first item), frames at 1, 3, 5, 7 s:
    Hello 0.5–2.0 holds 1 → kept; "uh" 1.9–2.3 is under 1 s → 1.6–2.6, no frame → dropped; Short
    2.6–3.2 → 2.4–3.4 holds 3 → kept; Edge 3.0–5.0 holds frames only at its ends (strict) → dropped;
    Last 6–10 holds 7 → kept. Second item: blink 0.2–0.4 → −0.2–0.8 → dropped; an open end runs to the
    duration (6.5–8 holds 7) → kept."""
    from services.eval.benchmarks import get_benchmark

    write_json(tmp_path / "lvb_val.json", SUBTITLED)
    write_json(tmp_path / "subtitles" / "86CxyhFV9MI_en.json", CLOCK_CUES)
    write_json(tmp_path / "subtitles" / "aaa_en.json", SPAN_CUES)
    with_subs = get_benchmark("longvideobench", tmp_path, subtitles=True)
    first, second, third = with_subs.load(with_subs.find_annotations(tmp_path))
    answer = "Answer with the option's letter from the given choices directly."
    assert with_subs.prompt(first, "qwen2_5_vl", clip_meta=FRAMES) == (
        "Hello there.\nShort line.\nLast words.\nQuestion: What is on the table?\n"
        f"A. a cup\nB. a book\nC. a phone\nD. a key\n{answer}"
    )
    assert with_subs.prompt(second, "qwen2_5_vl", clip_meta=FRAMES).startswith(
        "to the end\nQuestion: What happens last?\nA. rain\n"
    )
    with pytest.raises(FileNotFoundError, match=r"gone_en\.json"):  # recorded as that sample's error
        with_subs.prompt(third, "qwen2_5_vl", clip_meta=FRAMES)
    plain = get_benchmark("longvideobench", tmp_path)
    assert plain.prompt(first, "qwen2_5_vl", clip_meta=FRAMES) == (
        f"Question: What is on the table?\nA. a cup\nB. a book\nC. a phone\nD. a key\n{answer}"
    )
    assert plain.prompt_version(first) != with_subs.prompt_version(first)


@pytest.mark.parametrize(
    "cue",
    [
        {"timestamp": [None, 3]},
        {"timestamp": None},
        {"timestamp": [1]},
        {"timestamp": ["a", 2]},
        {"text": "x"},
    ],
)
def test_a_malformed_cue_is_a_benchmark_error(tmp_path, cue):
    """A broken cue fails its sample with the file and cue named (before: a TypeError that stopped the
    run, or a KeyError)."""
    from services.eval.benchmarks import BenchmarkError
    from services.eval.benchmarks.subtitles import read_lvb_subtitles

    path = write_json(tmp_path / "bad_en.json", [{"timestamp": [0, 1], "text": "ok"}, cue])
    with pytest.raises(BenchmarkError, match=r"bad_en\.json#1: "):
        read_lvb_subtitles(path, 0.0, 10.0)


def test_a_subtitle_path_outside_the_data_roots_fails_its_sample(tmp_path, reelrl_home, monkeypatch):
    """With data roots configured, a subtitle_path that climbs out of them is a BenchmarkError (the
    sample's error) instead of a read of that file."""
    from services.common.settings import reset_settings_cache
    from services.eval.benchmarks import BenchmarkError, get_benchmark

    root = tmp_path / "root" / "lvb"
    write_json(tmp_path / "secret.json", SPAN_CUES)
    write_json(root / "lvb_val.json", [{**SUBTITLED[1], "subtitle_path": "../../../secret.json"}])
    (root / "subtitles").mkdir()
    monkeypatch.setenv("REELRL_DATA_ROOTS", str(tmp_path / "root"))
    reset_settings_cache()
    adapter = get_benchmark("longvideobench", root, subtitles=True)
    (sample,) = adapter.load(adapter.find_annotations(root))
    with pytest.raises(BenchmarkError, match=r"subtitle_path of .*outside the data roots"):
        adapter.prompt(sample, "qwen2_5_vl", clip_meta=FRAMES)
    monkeypatch.delenv("REELRL_DATA_ROOTS")
    reset_settings_cache()
    assert adapter.prompt(sample, "qwen2_5_vl", clip_meta=FRAMES).startswith("to the end\n")
