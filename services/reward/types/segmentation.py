"""Segmentation prompts: a box plus positive/negative points, as fed to a promptable segmenter (SAM).

The answer is ``{"bbox": [x1, y1, x2, y2], "positive_points": [[x, y], …], "negative_points": […]}``
(``bbox_2d``/``box``, ``points``/``point_2d``/``points_pos`` and ``points_neg`` accepted; also as Qwen's
one-element list ``[{"bbox_2d": …, "point_2d": [x, y]}]``). Every box key and every points key counts, as in
grounding: two that give different values are a hedge and read as no answer; one value under two keys is
one answer. Without running a segmenter the prompts are checked against the ground-truth box:

    accuracy = 0.5 · IoU(bbox, truth) + 0.5 · pos_share · neg_share

``pos_share`` = share of positive points inside the truth box (0 without positive points), ``neg_share``
= share of negative points outside it (1 without negative points): negative points can only lower the
score, so scattering them in a corner earns nothing.
"""

from __future__ import annotations

from typing import Any

from services.reward.errors import InvalidSample
from services.reward.extract.structured import as_json, every_key, find_json, finite_number, single_box, sole
from services.reward.metrics.iou import Box, box_iou
from services.reward.registry import ProblemType, ScoreContext, register
from services.reward.sample import RewardSample
from services.reward.types.grounding import covers_frame

MAX_POINTS = 10  # per kind; more is spraying, not prompting
Point = tuple[float, float]
# "points" and Qwen's "point_2d" (one point) are positive prompts.
_POS_KEYS = ("positive_points", "points_pos", "pos_points", "points", "point_2d")
_NEG_KEYS = ("negative_points", "points_neg", "neg_points")


def _point_list(raw: Any) -> list[Point] | None:
    """``[[x, y], …]`` (or one point written flat, ``[x, y]``) as sorted points; None when invalid."""
    if not isinstance(raw, list) or len(raw) > MAX_POINTS:
        return None
    if len(raw) == 2 and all(not isinstance(v, list) for v in raw):
        raw = [raw]  # a single point written flat
    points = []
    for item in raw:
        coords = [finite_number(v) for v in item] if isinstance(item, list) and len(item) == 2 else [None]
        if any(c is None for c in coords):
            return None
        points.append((coords[0], coords[1]))
    return sorted(points)  # type: ignore[arg-type]


def _points(value: dict[str, Any], keys: tuple[str, ...]) -> list[Point] | None:
    """The points under ``keys`` ([] when none is given). Every key counts, as every box key does: two
    that give different points are a hedge (None), the same points under two keys are one answer."""
    given = every_key(value, keys)
    return sole([_point_list(raw) for raw in given]) if given else []


def _inside(point: Point, box: Box) -> bool:
    return box[0] <= point[0] <= box[2] and box[1] <= point[1] <= box[3]


@register
class Segmentation(ProblemType):
    name = "segmentation"
    aliases = ("reasoning segmentation", "seg")
    description = "Box + positive/negative point prompts; 0.5·box IoU + 0.5·(pos inside · neg outside)."
    narrow_phrases = False

    def parse_truth(self, sample: RewardSample) -> Box:
        box = single_box(as_json(sample.answer))
        if box is None:
            raise InvalidSample(
                f"{sample.label}: segmentation answer needs one box {{'bbox': [x1,y1,x2,y2]}}"
            )
        return box

    def extract(self, text: str, sample: RewardSample) -> dict[str, Any] | None:
        value = find_json(text)
        if isinstance(value, list) and len(value) == 1:
            value = value[0]  # Qwen-style [{"bbox_2d": …, "point_2d": …}]
        if not isinstance(value, dict):
            return None
        box = single_box(value)
        positive, negative = _points(value, _POS_KEYS), _points(value, _NEG_KEYS)
        if box is None or positive is None or negative is None:
            return None
        return {"bbox": box, "positive_points": positive, "negative_points": negative}

    def accuracy(self, parsed: Any, truth: Any, sample: RewardSample, ctx: ScoreContext) -> float:
        box_score = 0.0 if covers_frame(parsed["bbox"], truth, sample) else box_iou(parsed["bbox"], truth)
        positive, negative = parsed["positive_points"], parsed["negative_points"]
        pos_share = sum(_inside(p, truth) for p in positive) / len(positive) if positive else 0.0
        neg_share = sum(not _inside(p, truth) for p in negative) / len(negative) if negative else 1.0
        return 0.5 * box_score + 0.5 * pos_share * neg_share

    def jsonable(self, parsed: Any) -> Any:
        return {key: [list(v) for v in val] if key != "bbox" else list(val) for key, val in parsed.items()}
