"""One ground-truth box through each family's coordinate space (FINDINGS.md)."""

from __future__ import annotations

import pytest

from services.common.coords import convert_answer_boxes, family_frame_size, to_family_box

# A 1280x720 original resized to 448x252; the box covers x 10%-50%, y 10%-50%.
ORIGINAL = (1280.0, 720.0)
RESIZED = (448.0, 252.0)
BOX = [128.0, 72.0, 640.0, 360.0]


@pytest.mark.parametrize(
    ("family", "expected"),
    [
        ("qwen2_vl", [100.0, 100.0, 500.0, 500.0]),  # 0.1*1000, 0.5*1000
        ("qwen2_5_vl", [44.8, 25.2, 224.0, 126.0]),  # 0.1*448, 0.1*252, 0.5*448, 0.5*252
        ("qwen3_vl", [100.0, 100.0, 500.0, 500.0]),
        ("qwen3_5", [100.0, 100.0, 500.0, 500.0]),
    ],
)
def test_pixel_box_in_each_family(family: str, expected: list[float]) -> None:
    assert to_family_box(BOX, family, ORIGINAL, RESIZED) == pytest.approx(expected)


def test_relative_spaces() -> None:
    assert to_family_box([0.1, 0.1, 0.5, 0.5], "qwen2_5_vl", ORIGINAL, RESIZED, "relative") == pytest.approx(
        [44.8, 25.2, 224.0, 126.0]
    )
    assert to_family_box(
        [100, 100, 500, 500], "qwen3_vl", ORIGINAL, RESIZED, "relative1000"
    ) == pytest.approx([100.0, 100.0, 500.0, 500.0])


def test_frame_size_per_family() -> None:
    assert family_frame_size("qwen2_5_vl", RESIZED) == (448.0, 252.0)
    assert family_frame_size("qwen3_vl", RESIZED) == (1000.0, 1000.0)


def test_answer_boxes_track_and_json_text() -> None:
    answer = {"time": [1.0, 2.0], "boxes": {"1.0": BOX, "2.0": [0, 0, 1280, 720]}}
    out = convert_answer_boxes(answer, "qwen2_vl", ORIGINAL, RESIZED)
    assert out["time"] == [1.0, 2.0]
    assert out["boxes"]["1.0"] == pytest.approx([100, 100, 500, 500])
    assert out["boxes"]["2.0"] == pytest.approx([0, 0, 1000, 1000])
    text = '{"boxes": [128, 72, 640, 360]}'
    assert convert_answer_boxes(text, "qwen2_5_vl", ORIGINAL, RESIZED)["boxes"] == pytest.approx(
        [44.8, 25.2, 224.0, 126.0]
    )
    assert convert_answer_boxes("B", "qwen2_vl", None, None) == "B"


def test_box_answer_without_frame_size_is_refused() -> None:
    with pytest.raises(ValueError, match="frame size"):
        convert_answer_boxes({"boxes": BOX}, "qwen2_vl", None, None)
    with pytest.raises(ValueError, match="x1, y1"):
        to_family_box([1, 2, 3], "qwen2_vl", ORIGINAL, RESIZED)


def test_empty_boxes_need_no_frame_size() -> None:
    answer = {"time": [1.0, 2.0], "boxes": {}}
    assert convert_answer_boxes(answer, "qwen2_vl", None, None) == answer
