"""IoU of intervals and boxes: hand-computed tables and properties."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.reward.metrics.iou import box_iou, interval_iou, mean_frame_iou


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ((0, 10), (0, 10), 1.0),
        ((2, 6), (4, 8), 2 / 6),  # ∩ = [4,6] = 2; ∪ = 4 + 4 − 2 = 6
        ((0, 10), (2, 4), 2 / 10),  # containment: ∩ = 2, ∪ = 10
        ((0, 1), (2, 3), 0.0),  # disjoint
        ((0, 1), (1, 2), 0.0),  # touching: ∩ = 0
        ((24.3, 30.4), (24.296875, 30.40625), (30.4 - 24.3) / (30.40625 - 24.296875)),  # fp16-rounded truth
    ],
)
def test_interval_iou(a, b, expected):
    assert interval_iou(a, b) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ((0, 0, 10, 10), (0, 0, 10, 10), 1.0),
        ((0, 0, 10, 10), (5, 0, 15, 10), 50 / 150),  # ∩ = 5·10 = 50; ∪ = 100 + 100 − 50 = 150
        ((0, 0, 10, 10), (5, 5, 15, 15), 25 / 175),  # ∩ = 5·5 = 25; ∪ = 200 − 25 = 175
        ((0, 0, 100, 100), (10, 10, 20, 20), 100 / 10000),  # full frame vs small truth: 1 %
        ((0, 0, 1, 1), (2, 2, 3, 3), 0.0),
    ],
)
def test_box_iou(a, b, expected):
    assert box_iou(a, b) == pytest.approx(expected)


def test_mean_frame_iou_counts_missing_truth_frames_as_zero():
    truth = {0.0: (0, 0, 10, 10), 1.0: (0, 0, 10, 10), 2.0: (0, 0, 10, 10), 3.0: (0, 0, 10, 10)}
    pred = {0.0: (0, 0, 10, 10), 1.0: (5, 0, 15, 10), 9.0: (0, 0, 10, 10)}
    # frames 0 → 1, 1 → 50/150, 2 and 3 missing → 0; frame 9 is not a truth frame (ignored)
    assert mean_frame_iou(pred, truth) == pytest.approx((1 + 1 / 3 + 0 + 0) / 4)
    assert mean_frame_iou(pred, {}) == 0.0


coord = st.floats(min_value=-1e4, max_value=1e4, allow_nan=False, allow_infinity=False)
size = st.floats(min_value=1e-3, max_value=1e4, allow_nan=False, allow_infinity=False)
intervals = st.tuples(coord, size).map(lambda p: (p[0], p[0] + p[1]))
boxes = st.tuples(coord, coord, size, size).map(lambda p: (p[0], p[1], p[0] + p[2], p[1] + p[3]))


@given(intervals, intervals)
def test_interval_iou_bounded_and_symmetric(a, b):
    iou = interval_iou(a, b)
    assert 0.0 <= iou <= 1.0
    assert iou == pytest.approx(interval_iou(b, a))


@given(intervals)
def test_interval_iou_self_is_one(a):
    assert interval_iou(a, a) == pytest.approx(1.0)


@given(boxes, boxes)
def test_box_iou_bounded_and_symmetric(a, b):
    iou = box_iou(a, b)
    assert 0.0 <= iou <= 1.0
    assert iou == pytest.approx(box_iou(b, a))


@given(boxes, st.floats(min_value=-100, max_value=100, allow_nan=False))
def test_box_iou_translation_invariant(a, shift):
    b = (a[0] + 1, a[1], a[2] + 1, a[3])
    moved = lambda box: (box[0] + shift, box[1] + shift, box[2] + shift, box[3] + shift)  # noqa: E731
    assert box_iou(moved(a), moved(b)) == pytest.approx(box_iou(a, b), abs=1e-6)
