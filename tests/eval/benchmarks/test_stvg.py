"""STVG on HC-STVG v2 annotations: per-second ground-truth boxes, converted into the family's space;
tIoU and vIoU by hand."""

from __future__ import annotations

import pytest

from services.eval.benchmarks.stvg import viou
from tests.eval.conftest import write_json

# 200 frames over 20 s → 10 fps; frame 11 is t = 1.0 s; the tube spans 1.0–4.0 s (frames 11…41).
# Every box is [32, 24, 128, 96] xywh on a 320×240 frame = [32, 24, 160, 120] xyxy = [100, 100, 500, 500]
# in Qwen3-VL's relative 0-1000 space.
ANNOTATIONS = {
    "50_TM5MPJNBWNA.mp4": {"img_num": 200, "img_size": [240, 320], "st_frame": 11,
                           "bbox": [[32, 24, 128, 96]] * 31, "st_time": 1.0, "ed_time": 4.0,
                           "English": "The man in the white shirt turns and walks to the door."},
    "51_other.mp4": {"img_num": 200, "img_size": [240, 320], "st_frame": 1, "bbox": [[0, 0, 32, 24]] * 50,
                     "st_time": 0.0, "ed_time": 4.9, "English": "The woman sits down."},
}  # fmt: skip
PREDICTION = '{"time": [2, 4], "boxes": {"2": [100, 100, 500, 500], "3": [100, 100, 300, 500], "4": [100, 100, 500, 500]}}'


def test_tiou_viou(tmp_path, evaluate):
    write_json(tmp_path / "val_v2.json", ANNOTATIONS)
    out = evaluate("stvg", tmp_path, {"50_TM5MPJNBWNA": PREDICTION, "51_other": "no idea"})
    truth = out.by_id["50_TM5MPJNBWNA"].answer
    assert truth["time"] == [1.0, 4.0] and sorted(truth["boxes"]) == ["1", "2", "3", "4"]
    assert truth["boxes"]["2"] == [32.0, 24.0, 160.0, 120.0]
    details = out.results["50_TM5MPJNBWNA"].details
    assert details["tiou"] == pytest.approx(2 / 3)  # [2, 4] vs [1, 4]
    # seconds in either interval {1, 2, 3, 4}; in both {2, 3, 4}: IoU 1 + 0.5 + 1 → 2.5 / 4
    assert details["viou"] == pytest.approx(0.625)
    # the reward library's composite: 0.5·tIoU + 0.5·mean IoU over the 4 truth seconds (0, 1, 0.5, 1)
    assert out.results["50_TM5MPJNBWNA"].accuracy == pytest.approx(0.5 * 2 / 3 + 0.5 * 0.625)
    metrics = out.summary.metrics
    assert metrics["m_tIoU"] == pytest.approx(100 / 3)
    assert out.summary.overall == metrics["m_vIoU"] == pytest.approx(31.25)
    assert metrics["vIoU@0.3"] == metrics["vIoU@0.5"] == pytest.approx(50.0)


def test_pixel_family_needs_the_clip_size(tmp_path, evaluate):
    write_json(tmp_path / "val_v2.json", {k: v for k, v in ANNOTATIONS.items() if k.startswith("50")})
    out = evaluate("stvg", tmp_path, {"50_TM5MPJNBWNA": PREDICTION}, family="qwen2_5_vl")
    assert "needs the clip's resized frame size" in out.summary.errors["50_TM5MPJNBWNA"]
    # with the clip: the 320×240 original was resized to 160×120 → truth box [16, 12, 80, 60] in pixels
    clip = [{"source_width": 320, "source_height": 240, "width": 160, "height": 120, "duration": 20.0}]
    response = '{"time": [1, 4], "boxes": {"1": [16, 12, 80, 60], "2": [16, 12, 80, 60], "3": [16, 12, 80, 60], "4": [16, 12, 80, 60]}}'
    out = evaluate(
        "stvg", tmp_path, {}, family="qwen2_5_vl",
        predictions=[{"id": "50_TM5MPJNBWNA", "response": response, "clip_meta": clip}],
    )  # fmt: skip
    assert out.results["50_TM5MPJNBWNA"].details == {"tiou": 1.0, "viou": 1.0}


def test_viou_counts_seconds_without_boxes_as_zero():
    box = (0.0, 0.0, 10.0, 10.0)
    assert viou([0, 1], {0: box}, [0, 1], {0: box, 1: box}) == pytest.approx(0.5)
    assert viou(None, {}, [0, 1], {0: box}) == 0.0
