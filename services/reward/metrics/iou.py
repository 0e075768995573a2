"""Intersection over union for time intervals and boxes. Inputs are validated upstream (finite, ordered)."""

from __future__ import annotations

from collections.abc import Mapping

Interval = tuple[float, float]
Box = tuple[float, float, float, float]


def interval_iou(a: Interval, b: Interval) -> float:
    """1-D IoU of ``[s, e]`` intervals (s < e): |a ∩ b| / |a ∪ b| in [0, 1]."""
    inter = max(0.0, min(a[1], b[1]) - max(a[0], b[0]))
    union = (a[1] - a[0]) + (b[1] - b[0]) - inter
    return inter / union if union > 0 else 0.0


def box_area(box: Box) -> float:
    return max(0.0, box[2] - box[0]) * max(0.0, box[3] - box[1])


def box_iou(a: Box, b: Box) -> float:
    """IoU of ``[x1, y1, x2, y2]`` boxes (x2 > x1, y2 > y1): area(a ∩ b) / area(a ∪ b) in [0, 1]."""
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    union = box_area(a) + box_area(b) - inter
    return inter / union if union > 0 else 0.0


def mean_frame_iou(pred: Mapping[float, Box], truth: Mapping[float, Box]) -> float:
    """Mean box IoU over the ground-truth frames; a frame the prediction lacks scores 0.

    ``pred``/``truth`` map a frame key (seconds or index) to one box. Frames only in ``pred`` are ignored.
    """
    if not truth:
        return 0.0
    return sum(box_iou(pred[k], box) if k in pred else 0.0 for k, box in truth.items()) / len(truth)
