"""ODV-Bench: MVBench-style per-task files, ids from file stem and index, task/subtask breakdowns."""

from __future__ import annotations

import pytest

from tests.eval.conftest import write_json

STATIC = [
    {"video": "scene1.mp4", "question": "What is the traffic light?", "candidates": ["red", "green", "yellow"],
     "answer": "red", "start": 0.0, "end": 5.0, "task": "single_static", "subtask": "traffic_light"},
    {"video": "scene2.mp4", "question": "Is there a stop sign?", "candidates": ["yes", "no"],
     "answer": "no", "start": 1.0, "end": 4.0, "task": "single_static", "subtask": "sign"},
]  # fmt: skip
DYNAMIC = [
    {"video": "scene3.mp4", "question": "Where does the car go?", "candidates": ["left", "right", "straight"],
     "answer": "straight", "start": 2.0, "end": 9.0, "task": "single_dynamic", "subtask": "vehicle"},
]  # fmt: skip


def test_tasks(tmp_path, evaluate):
    write_json(tmp_path / "targeting_single_static_objects_v4.json", STATIC)
    write_json(tmp_path / "targeting_single_dynamic_objects_v4.json", DYNAMIC)
    responses = {
        "targeting_single_static_objects_v4/0": "A",
        "targeting_single_static_objects_v4/1": "A",  # wrong
        "targeting_single_dynamic_objects_v4/0": "C. straight",
    }
    out = evaluate("odvbench", tmp_path, responses)
    assert out.by_id["targeting_single_static_objects_v4/1"].answer == "B"
    assert out.summary.overall == pytest.approx(100 * 2 / 3)
    assert out.cell("task", "single_static") == pytest.approx(50.0)
    assert out.cell("subtask", "vehicle") == pytest.approx(100.0)


def test_the_query_window_reaches_the_planned_clip_params(tmp_path):
    from services.common.frames import FrameStore
    from services.common.frames.params import ClipWindow
    from services.eval.benchmarks import get_benchmark
    from services.eval.clips import ClipPlanner, clip_params

    write_json(tmp_path / "targeting_single_static_objects_v4.json", STATIC)
    for name in ("scene1.mp4", "scene2.mp4"):
        (tmp_path / "videos").mkdir(exist_ok=True)
        (tmp_path / "videos" / name).write_bytes(b"same bytes")  # one video, two windows
    for options, windows in (({}, [ClipWindow(start=0.0, end=5.0), ClipWindow(start=1.0, end=4.0)]),
                             ({"windows": False}, [None, None])):  # fmt: skip
        bench = get_benchmark("odvbench", **options)
        samples = bench.load(bench.find_annotations(tmp_path))
        planned = ClipPlanner(FrameStore(tmp_path / "frames")).plan(
            samples, tmp_path, clip_params("qwen3_vl", bench.video)
        )
        assert [p.params.window for p in planned] == windows
        assert [p.params.nframes for p in planned] == [32, 32]
        assert len({p.keys[0] for p in planned}) == (2 if options == {} else 1)
