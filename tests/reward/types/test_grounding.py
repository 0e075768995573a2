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
        ({"time": [2, 6]}, answer({"time": [6, 2]}), 0.0, 0.5),  # written end first: invalid
        ({"time": [2, 6]}, "Start time: 2 seconds\nEnd time: 6 seconds", 1.0, 0.0),
        (
            {"time": [2, 6]},
            "The start time for this event is 2 seconds, and the end time is 6 seconds.",
            1.0,
            0.0,
        ),
        ({"time": [2, 6]}, answer({"time": [10, 12]}), 0.0, 1.0),
        # other common ways to write [2, 6]; the last one over [2, 8]: ∩ 4, ∪ 6
        ({"time": [2, 6]}, answer({"start": 2, "end": 6}), 1.0, 1.0),
        ({"time": [2, 6]}, answer({"start_time": 2.0, "end_time": 6.0}), 1.0, 1.0),
        ({"time": [2, 6]}, "<answer>(2, 6)</answer>", 1.0, 1.0),
        ({"time": [2, 6]}, "<answer>[2s, 6.0s]</answer>", 1.0, 1.0),
        ({"time": [2, 6]}, "<answer>It starts at 2 seconds and ends at 8 seconds.</answer>", 4 / 6, 1.0),
        # several different intervals are a hedge, whichever comes first (issue 36 §4)
        ({"time": [2, 6]}, "<answer>[2, 6] or [10, 12]</answer>", 0.0, 0.5),
        ({"time": [2, 6]}, "<answer>[10, 12] or [2, 6]</answer>", 0.0, 0.5),
        ({"time": [2, 6]}, '<answer>{"time": [0, 100]} {"time": [2, 6]}</answer>', 0.0, 0.5),
        ({"time": [2, 6]}, "<answer>[2, 6], i.e. [2, 6]</answer>", 1.0, 1.0),  # the same one twice
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
        ({"boxes": [0, 0, 10, 10]}, "<answer>[0, 0, 10, 10] or [0, 0, 640, 480]</answer>", 0.0),  # a hedge
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
        # boxes as a list of two for the truth's two frames, in order: 0.5·1 + 0.5·(1 + 1)/2
        (answer({"time": [0, 4], "boxes": [[0, 0, 10, 10], [0, 0, 10, 10]]}), 1.0),
        # three boxes for two frames: no frames read, the time alone: 0.5·1 + 0.5·0
        (answer({"time": [0, 4], "boxes": [[0, 0, 10, 10]] * 3}), 0.5),
    ],
)
def test_spatial_temporal_grounding(response, accuracy):
    result = score({"problem_type": "stvg", "answer": STVG}, response)
    assert result.accuracy == pytest.approx(accuracy)
    assert result.problem_type == "spatial-temporal grounding"


TRACK = {"boxes": {"0": [0, 0, 10, 10], "1": [10, 10, 20, 20], "2": [20, 20, 30, 30], "3": [30, 30, 40, 40]}}


@pytest.mark.parametrize(
    ("response", "accuracy", "fmt"),
    [
        (answer(TRACK), 1.0, 1.0),
        # frames 0, 1 exact, frame 2 shifted by 5 in x (50/150), frame 3 missing: (1 + 1 + 1/3 + 0)/4
        (
            answer({"boxes": {"0": [0, 0, 10, 10], "1": [10, 10, 20, 20], "2": [25, 20, 35, 30]}}),
            (2 + 1 / 3) / 4,
            1.0,
        ),
        # a bare list of as many boxes as truth frames maps onto them in order: (1 + 1 + 1 + 0)/4
        (answer([[0, 0, 10, 10], [10, 10, 20, 20], [20, 20, 30, 30], [0, 0, 1, 1]]), 0.75, 1.0),
        # …any other length cannot say which box is which frame: unreadable
        (answer([[0, 0, 10, 10], [10, 10, 20, 20]]), 0.0, 0.5),
        # Qwen-style records: frames 0 and 2 exact, frame 1 wrong, frame 3 missing: (1 + 0 + 1 + 0)/4
        (
            answer(
                [
                    {"frame": 0, "bbox_2d": [0, 0, 10, 10]},
                    {"frame": 1, "bbox_2d": [0, 0, 1, 1]},
                    {"frame_id": "2", "bbox": [20, 20, 30, 30]},
                    {"label": "no frame", "bbox_2d": [30, 30, 40, 40]},
                ]
            ),
            0.5,
            1.0,
        ),
        (answer({"boxes": [{"frame": 3, "bbox_2d": [30, 30, 40, 40]}]}), 0.25, 1.0),
        (answer([{"frame": [3], "bbox_2d": [30, 30, 40, 40]}]), 0.0, 0.5),  # a list is no frame
    ],
)
def test_tracking(response, accuracy, fmt):
    result = score({"problem_type": "tracking", "answer": TRACK}, response)
    assert (result.accuracy, result.format) == (pytest.approx(accuracy), fmt)


def test_a_list_of_boxes_maps_onto_the_truths_seconds():
    # truth frames 0.5 s and 1.0 s; two boxes in order → 0.5 → first, 1.0 → second: (1 + 1)/2
    truth = {"boxes": {"1.0": [1, 1, 11, 11], "0.5": [0, 0, 10, 10]}}
    result = score({"problem_type": "tracking", "answer": truth}, answer([[0, 0, 10, 10], [1, 1, 11, 11]]))
    assert (result.accuracy, result.extracted) == (
        1.0,
        {"boxes": {"0.5": [0, 0, 10, 10], "1": [1, 1, 11, 11]}},
    )


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
