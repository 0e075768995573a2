"""LiveSports-3K QA: the JSON release and the CSV with options as list text; q_type and OCR breakdowns."""

from __future__ import annotations

import csv

import pytest

from tests.eval.conftest import write_json

ITEMS = [
    {"video_id": "I0rOeSG6_Y4", "question_id": "I0rOeSG6_Y4_e10_q1", "q_type": "Who", "OCR": 0,
     "question": "Who scores?", "options": ["A. #10", "B. #7", "C. #9", "D. #3"], "answer": "B",
     "begin": 300.745, "end": 350.676},
    {"video_id": "I0rOeSG6_Y4", "question_id": "I0rOeSG6_Y4_e11_q1", "q_type": "When", "OCR": 1,
     "question": "When is the score shown?", "options": ["A. 1st", "B. 2nd", "C. 3rd", "D. 4th"], "answer": "D",
     "begin": 400.0, "end": 420.0},
]  # fmt: skip
RESPONSES = {"I0rOeSG6_Y4/I0rOeSG6_Y4_e10_q1": "B", "I0rOeSG6_Y4/I0rOeSG6_Y4_e11_q1": "A"}


def test_json(tmp_path, evaluate):
    write_json(tmp_path / "LiveSports-3K-QA.json", ITEMS)
    out = evaluate("livesports3k", tmp_path, RESPONSES)
    assert out.summary.overall == pytest.approx(50.0)
    assert out.cell("q_type", "Who") == pytest.approx(100.0)
    assert out.cell("ocr", "1") == pytest.approx(0.0)


def test_csv(tmp_path, evaluate):
    path = tmp_path / "LiveSports-3K-QA.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(ITEMS[0]))
        writer.writeheader()
        for item in ITEMS:
            writer.writerow({**item, "options": str(item["options"])})
    out = evaluate("livesports3k", path, RESPONSES)
    assert out.by_id["I0rOeSG6_Y4/I0rOeSG6_Y4_e10_q1"].options == ITEMS[0]["options"]
    assert out.summary.overall == pytest.approx(50.0)


def test_the_event_window_reaches_the_planned_clip_params(tmp_path):
    from services.common.frames import FrameStore
    from services.common.frames.params import ClipWindow
    from services.eval.benchmarks import get_benchmark
    from services.eval.clips import ClipPlanner, clip_params

    # the CSV release: begin/end arrive as text, and a record may leave them empty
    path = tmp_path / "LiveSports-3K-QA.csv"
    rows = [*ITEMS, {**ITEMS[1], "question_id": "I0rOeSG6_Y4_e12_q1", "begin": "", "end": ""}]
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(ITEMS[0]))
        writer.writeheader()
        for item in rows:
            writer.writerow({**item, "options": str(item["options"])})
    (tmp_path / "videos").mkdir()
    (tmp_path / "videos" / "I0rOeSG6_Y4.mp4").write_bytes(b"a broadcast")
    bench = get_benchmark("livesports3k")
    samples = bench.load(bench.find_annotations(path))
    planned = ClipPlanner(FrameStore(tmp_path / "frames")).plan(
        samples, tmp_path, clip_params("qwen2_5_vl", bench.video)
    )
    assert [p.error for p in planned] == [None] * 3
    assert [p.params.window for p in planned] == [
        ClipWindow(start=300.745, end=350.676),
        ClipWindow(start=400.0, end=420.0),
        None,
    ]
    assert len({p.keys[0] for p in planned}) == 3
