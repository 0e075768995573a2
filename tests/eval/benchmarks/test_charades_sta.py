"""Charades-STA: the official text file and the lmms-eval JSON; R@{0.3,0.5,0.7} and mIoU."""

from __future__ import annotations

import pytest

from tests.eval.conftest import write_json

LINES = "3MSZA 24.3 30.4##person turn a light on.\nABC12 0.0 10.0##a person opens a door.\nXYZ99 2.0 6.0##person sits.\n"
RESPONSES = {
    "charades_sta_test/0": "The event happens in the 24.3 - 30.4 seconds.",  # IoU 1
    "charades_sta_test/1": "from 5 to 10",  # IoU 5/10 = 0.5
    "charades_sta_test/2": "I don't know.",  # nothing read: IoU 0
}


def test_recall_and_miou(tmp_path, evaluate):
    (tmp_path / "charades_sta_test.txt").write_text(LINES)
    out = evaluate("charades_sta", tmp_path, RESPONSES)
    sample = out.by_id["charades_sta_test/0"]
    assert sample.answer == {"time": [24.3, 30.4]} and sample.problem == "person turn a light on."
    assert sample.videos == ("Charades_v1_480/3MSZA.mp4",)
    metrics = out.summary.metrics
    assert metrics["R@0.3"] == pytest.approx(100 * 2 / 3)
    assert metrics["R@0.5"] == pytest.approx(100 * 2 / 3)  # IoU 0.5 counts (≥)
    assert metrics["R@0.7"] == pytest.approx(100 / 3)
    assert out.summary.overall == metrics["mIoU"] == pytest.approx(50.0)  # (1 + 0.5 + 0) / 3


def test_lmms_eval_json(tmp_path, evaluate):
    items = [{"video": "3MSZA.mp4", "caption": "person turn a light on.", "timestamp": [24.3, 30.4]},
             {"video": "ABC12.mp4", "caption": "a person opens a door.", "timestamp": "[0.0, 10.0]"}]  # fmt: skip
    write_json(tmp_path / "charades.json", items)
    out = evaluate(
        "charades_sta", tmp_path / "charades.json", {"charades/0": "24.3 - 30.4", "charades/1": "0 - 5"}
    )
    assert out.summary.overall == pytest.approx(75.0)  # (1 + 0.5) / 2
