"""The shared Sample model: validation, ids, loaders for JSON / JSONL / Parquet, the Video-R1 schema."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from services.common.samples import Sample, SampleError, from_video_r1, load_samples, reward_fields

MC = {
    "id": "q1",
    "problem": "What colour is the square?",
    "problem_type": "multiple choice",
    "videos": ["v/a.mp4"],
    "options": ["A. red", "B. blue"],
    "answer": "<answer>B</answer>",
    "source": "synthetic",
}


def test_fields_defaults_and_extra() -> None:
    s = Sample.model_validate(MC)
    assert s.data_type == "video" and s.videos == ("v/a.mp4",) and s.answer == "B"
    assert s.extra("source") == "synthetic"
    text = Sample.model_validate({"problem": "2+2?", "problem_type": "numerical", "answer": 4})
    assert text.data_type == "text" and len(text.id) == 16
    # The derived id depends on the content only.
    assert Sample.model_validate({"problem": "2+2?", "problem_type": "numerical", "answer": 4}).id == text.id


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"images": ["x.png"]}, "never both"),
        ({"data_type": "image"}, "lists no images"),
        ({"problem": ""}, "problem"),
        ({"clips": ["k1", "k2"]}, "2 clip keys for 1 media"),
        ({"answer": float("nan")}, "answer"),
    ],
)
def test_invalid_samples(patch: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Sample.model_validate({**MC, **patch})


def test_video_r1_record() -> None:
    record = {
        "problem_id": 7,
        "problem": "How many?",
        "data_type": "video",
        "problem_type": "free-form",
        "options": [],
        "process": "<think>count them</think>",
        "solution": "<answer>three</answer>",
        "path": "./data/v.mp4",
        "data_source": "LLaVA-Video",
    }
    fields = from_video_r1(record)
    s = Sample.model_validate(fields)
    assert (s.id, s.videos, s.problem_type, s.answer) == ("7", ("./data/v.mp4",), "open-ended", "three")
    assert s.offline_output == "<think>count them</think>\n<answer>three</answer>"
    assert s.extra("data_source") == "LLaVA-Video"


def test_loaders_agree(tmp_path: Path) -> None:
    rows = [MC, {**MC, "id": "q2", "answer": "A"}]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "d.json").write_text(json.dumps({"data": rows}))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    for name in ("d.jsonl", "d.json", "d.parquet"):
        loaded = load_samples(tmp_path / name)
        assert [s.id for s in loaded] == ["q1", "q2"] and loaded[1].answer == "A", name


def test_loader_errors_name_the_record(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(MC) + "\n" + json.dumps({**MC, "id": "q9", "videos": 3}) + "\n")
    with pytest.raises(SampleError, match=r"bad\.jsonl:2: videos"):
        load_samples(path)
    path.write_text(json.dumps(MC) + "\n" + json.dumps(MC) + "\n")
    with pytest.raises(SampleError, match="duplicate id 'q1'"):
        load_samples(path)
    path.write_text("{not json\n")
    with pytest.raises(SampleError, match=r"bad\.jsonl:1: invalid JSON"):
        load_samples(path)
    with pytest.raises(SampleError, match="unknown dataset format"):
        load_samples(tmp_path / "x.csv")


META = {"source_width": 1280, "source_height": 720, "width": 448, "height": 252, "duration": 12.5}


def test_reward_fields_in_family_space() -> None:
    s = Sample.model_validate(
        {
            "id": "g1",
            "problem": "Where is the dog?",
            "problem_type": "spatial grounding",
            "videos": ["v.mp4"],
            "answer": {"boxes": [128, 72, 640, 360]},
        }
    )
    qwen25 = reward_fields(s, "qwen2_5_vl", [META])
    assert qwen25["answer"]["boxes"] == pytest.approx([44.8, 25.2, 224.0, 126.0])
    assert (qwen25["width"], qwen25["height"], qwen25["duration"]) == (448.0, 252.0, 12.5)
    qwen3 = reward_fields(s, "qwen3_vl", [META])
    assert qwen3["answer"]["boxes"] == pytest.approx([100, 100, 500, 500])
    assert (qwen3["width"], qwen3["height"]) == (1000.0, 1000.0)
    with pytest.raises(SampleError, match=r"'g1'.*frame size"):
        reward_fields(s, "qwen3_vl", None)


def test_reward_fields_score_through_the_library() -> None:
    from services.reward import score

    fields = reward_fields(Sample.model_validate(MC), "qwen2_5_vl")
    assert score(fields, "<answer>B</answer>").accuracy == 1.0
    assert score(fields, "<answer>A</answer>").accuracy == 0.0


def test_dataset_fields_do_not_shadow_clip_facts() -> None:
    # Video-MME's "duration" is a category; the reward sample's duration comes from the clip.
    s = Sample.model_validate({**MC, "duration": "short"})
    assert s.extra("duration") == "short"
    fields = reward_fields(s, "qwen2_5_vl", [META])
    assert fields["duration"] == 12.5
    assert "duration" not in reward_fields(s, "qwen2_5_vl")
