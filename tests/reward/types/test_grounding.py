"""Temporal, spatial, spatial-temporal grounding and tracking, table-driven through ``score``."""

import json

import pytest

from services.reward import InvalidSample, score


def answer(value) -> str:
    return f"<answer>{json.dumps(value)}</answer>"


@pytest.mark.parametrize(
    ("truth", "response", "accuracy", "fmt"),
    [
        ({"time": [2, 6]}, answer({"time": [2, 6]}), 1.0, 1.0),
        ({"time": [2, 6]}, answer({"time": [4, 8]}), 2 / 6, 1.0),  # ∩ 2, ∪ 6
        ('{"time": [2, 6]}', "<answer>from 4 to 8 seconds</answer>", 2 / 6, 1.0),  # truth as a JSON string
        ("<answer>2 - 6</answer>", "<answer>[3, 5]</answer>", 2 / 4, 1.0),  # inside: ∩ 2, ∪ 4
        ({"time": [2, 6]}, "The event happens in the 2.0 - 6.0 seconds.", 1.0, 0.0),
        ({"time": [2, 6]}, answer({"time": [6, 2]}), 0.0, 0.5),  # inverted: no interval
        ({"time": [2, 6]}, answer({"time": [10, 12]}), 0.0, 1.0),
    ],
)
def test_temporal_grounding(truth, response, accuracy, fmt):
    result = score({"problem_type": "temporal grounding", "answer": truth}, response)
    assert (result.accuracy, result.format) == (pytest.approx(accuracy), fmt)


@pytest.mark.parametrize(
    ("truth", "response", "accuracy"),
    [
        ({"boxes": [0, 0, 10, 10]}, answer([0, 0, 10, 10]), 1.0),
        ({"boxes": [0, 0, 10, 10]}, answer([{"bbox_2d": [5, 0, 15, 10], "label": "cup"}]), 50 / 150),
        ([0, 0, 10, 10], answer({"bbox": [5, 5, 15, 15]}), 25 / 175),  # ∩ 25, ∪ 100 + 100 − 25
        ("[0, 0, 10, 10]", "```json\n[0, 0, 10, 10]\n```", 1.0),  # fenced, no tag
        ({"boxes": [0, 0, 10, 10]}, answer([20, 20, 30, 30]), 0.0),
    ],
)
def test_spatial_grounding(truth, response, accuracy):
    assert score({"problem_type": "spatial grounding", "answer": truth}, response).accuracy == pytest.approx(
        accuracy
    )


STVG = {"time": [0, 4], "boxes": {"1": [0, 0, 10, 10], "2": [0, 0, 10, 10]}}


@pytest.mark.parametrize(
    ("response", "accuracy"),
    [
        (answer(STVG), 1.0),
        # tIoU 1; frame 1 → 1, frame 2 missing → 0: 0.5·1 + 0.5·(1 + 0)/2 = 0.75
        (answer({"time": [0, 4], "boxes": {"1": [0, 0, 10, 10]}}), 0.75),
        # tIoU [2,4] vs [0,4] = 2/4; frames "1.0" (same key as "1") → 1, "2" → 50/150:
        # 0.5·0.5 + 0.5·(1 + 1/3)/2 = 0.25 + 1/3
        (answer({"time": [2, 4], "boxes": {"1.0": [0, 0, 10, 10], "2": [5, 0, 15, 10]}}), 0.25 + 1 / 3),
        # no time: 0.5·0 + 0.5·(1 + 1)/2 = 0.5
        (answer({"boxes": {"1": [0, 0, 10, 10], "2": [0, 0, 10, 10]}}), 0.5),
    ],
)
def test_spatial_temporal_grounding(response, accuracy):
    result = score({"problem_type": "stvg", "answer": STVG}, response)
    assert result.accuracy == pytest.approx(accuracy)
    assert result.problem_type == "spatial-temporal grounding"


TRACK = {"boxes": {"0": [0, 0, 10, 10], "1": [10, 10, 20, 20], "2": [20, 20, 30, 30], "3": [30, 30, 40, 40]}}


@pytest.mark.parametrize(
    ("response", "accuracy"),
    [
        (answer(TRACK), 1.0),
        # frames 0, 1 exact, frame 2 shifted by 5 in x (50/150), frame 3 missing: (1 + 1 + 1/3 + 0)/4
        (
            answer({"boxes": {"0": [0, 0, 10, 10], "1": [10, 10, 20, 20], "2": [25, 20, 35, 30]}}),
            (2 + 1 / 3) / 4,
        ),
        (answer([[0, 0, 10, 10], [10, 10, 20, 20]]), 0.5),  # list form, index = frame: (1 + 1 + 0 + 0)/4
    ],
)
def test_tracking(response, accuracy):
    assert score({"problem_type": "tracking", "answer": TRACK}, response).accuracy == pytest.approx(accuracy)


@pytest.mark.parametrize(
    ("kind", "truth"),
    [
        ("temporal grounding", {"time": [5, 1]}),
        ("spatial grounding", {"boxes": [[0, 0, 1, 1], [2, 2, 3, 3]]}),
        ("spatial-temporal grounding", {"boxes": {"1": [0, 0, 1, 1]}}),
        ("tracking", {"boxes": {}}),
    ],
)
def test_unusable_truths_are_rejected(kind, truth):
    with pytest.raises(InvalidSample):
        score({"problem_type": kind, "answer": truth, "id": "g1"}, "<answer>x</answer>")
