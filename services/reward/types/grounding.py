"""Grounding in time and space: temporal (1-D IoU), spatial (box IoU), spatial-temporal, tracking.

Hedging defences beyond what IoU already charges: when the sample states its extent (``duration``;
``frame_size`` [w, h] in the answer's coordinate space, else ``width``/``height``), an interval covering
nearly the whole video or a box covering nearly the whole frame earns 0 unless the truth is itself large.
Without the extent the IoU is the honest share (a whole-video interval earns |truth| / |video|).
"""

from __future__ import annotations

from typing import Any

from services.reward.errors import InvalidSample
from services.reward.extract.structured import (
    as_json,
    boxes_by_frame,
    find_interval,
    find_json,
    interval_from_json,
    single_box,
)
from services.reward.metrics.iou import Box, Interval, box_area, box_iou, interval_iou, mean_frame_iou
from services.reward.registry import ProblemType, ScoreContext, register
from services.reward.sample import RewardSample

# A prediction covering at least this share of the video/frame "covers everything"…
COVER_ALL = 0.9
# …which earns nothing unless the truth covers at least this share.
LARGE_TRUTH = 0.5


def frame_size(sample: RewardSample) -> tuple[float, float] | None:
    size = sample.extra_field("frame_size")
    if isinstance(size, list | tuple) and len(size) == 2 and all(isinstance(v, int | float) for v in size):
        return (float(size[0]), float(size[1])) if size[0] > 0 and size[1] > 0 else None
    if sample.width and sample.height:
        return (sample.width, sample.height)
    return None


def covers_frame(box: Box, truth: Box, sample: RewardSample) -> bool:
    """True when ``box`` covers ≥ 90 % of a known frame while the truth covers < 50 % of it."""
    size = frame_size(sample)
    if size is None:
        return False
    width, height = size
    inside = max(0.0, min(box[2], width) - max(box[0], 0.0)) * max(
        0.0, min(box[3], height) - max(box[1], 0.0)
    )
    return inside >= COVER_ALL * width * height and box_area(truth) < LARGE_TRUTH * width * height


def covers_video(pred: Interval, truth: Interval, sample: RewardSample) -> bool:
    """True when ``pred`` covers ≥ 90 % of a known duration while the truth covers < 50 % of it."""
    if sample.duration is None:
        return False
    inter = max(0.0, min(pred[1], sample.duration) - max(pred[0], 0.0))
    return inter >= COVER_ALL * sample.duration and (truth[1] - truth[0]) < LARGE_TRUTH * sample.duration


def _interval_truth(sample: RewardSample) -> Interval:
    raw = sample.answer
    interval = find_interval(raw) if isinstance(raw, str) else interval_from_json(raw)
    if not interval:
        raise InvalidSample(f"{sample.label}: temporal answer {str(raw)[:80]!r} has no valid [start, end]")
    return interval  # type: ignore[return-value]


def _frames_truth(sample: RewardSample, kind: str) -> dict[float, Box]:
    frames = boxes_by_frame(as_json(sample.answer))
    if not frames:
        raise InvalidSample(f"{sample.label}: {kind} answer has no valid per-frame boxes {{'<frame>': box}}")
    return frames


def _truth_frame_keys(sample: RewardSample) -> list[float]:
    """The truth's frames in order, onto which a bare list of predicted boxes is mapped. ``extract`` sees
    the sample, not the parsed truth, so it is read again (small, and validated already)."""
    return sorted(boxes_by_frame(as_json(sample.answer)) or {})


def _honest_frames(pred: dict[float, Box], truth: dict[float, Box], sample: RewardSample) -> dict[float, Box]:
    """Drop predicted frames whose box covers the whole frame (scored as missing)."""
    return {k: b for k, b in pred.items() if not (k in truth and covers_frame(b, truth[k], sample))}


def _answer_time(value: dict[str, Any], text: str) -> Interval | None:
    """A spatial-temporal answer's interval: its JSON time, read with any interval in the text around the
    JSON (as temporal grounding reads them), so '{"time": [10, 20], …} or from 30 to 40 s' is a hedged
    time, not [10, 20]. A time given only in prose is not this type's form and stays unread."""
    return find_interval(text) if interval_from_json(value) else None


def _frames_jsonable(frames: dict[float, Box]) -> dict[str, list[float]]:
    return {f"{k:g}": list(b) for k, b in frames.items()}


@register
class TemporalGrounding(ProblemType):
    name = "temporal grounding"
    aliases = ("temporal_grounding", "tvg", "moment retrieval")
    description = 'One interval: {"time": [s, e]} or "from X to Y seconds"; 1-D IoU.'
    narrow_phrases = False

    def parse_truth(self, sample: RewardSample) -> Interval:
        return _interval_truth(sample)

    def extract(self, text: str, sample: RewardSample) -> Interval | None:
        return find_interval(text)

    def accuracy(self, parsed: Any, truth: Any, sample: RewardSample, ctx: ScoreContext) -> float:
        return 0.0 if covers_video(parsed, truth, sample) else interval_iou(parsed, truth)

    def jsonable(self, parsed: Any) -> Any:
        return {"time": list(parsed)}


@register
class SpatialGrounding(ProblemType):
    name = "spatial grounding"
    aliases = ("spatial_grounding", "rec", "referring expression comprehension", "visual grounding")
    description = 'One box [x1, y1, x2, y2] (bare, {"boxes": …} or {"bbox_2d": …}); box IoU.'
    narrow_phrases = False

    def parse_truth(self, sample: RewardSample) -> Box:
        box = single_box(as_json(sample.answer))
        if box is None:
            raise InvalidSample(f"{sample.label}: spatial answer {str(sample.answer)[:80]!r} is not one box")
        return box

    def extract(self, text: str, sample: RewardSample) -> Box | None:
        return single_box(find_json(text))

    def accuracy(self, parsed: Any, truth: Any, sample: RewardSample, ctx: ScoreContext) -> float:
        return 0.0 if covers_frame(parsed, truth, sample) else box_iou(parsed, truth)

    def jsonable(self, parsed: Any) -> Any:
        return {"boxes": list(parsed)}


@register
class SpatialTemporalGrounding(ProblemType):
    name = "spatial-temporal grounding"
    aliases = ("stvg", "spatio-temporal grounding", "spatial temporal grounding")
    description = '{"time": [s, e], "boxes": {"<sec>": box}}; 0.5·tIoU + 0.5·mean box IoU over truth frames.'
    narrow_phrases = False

    def parse_truth(self, sample: RewardSample) -> tuple[Interval, dict[float, Box]]:
        value = as_json(sample.answer)
        interval = interval_from_json(value) if isinstance(value, dict) else None
        if not interval:
            raise InvalidSample(f"{sample.label}: spatial-temporal answer needs a valid 'time': [s, e]")
        return interval, _frames_truth(sample, self.name)  # type: ignore[return-value]

    def extract(self, text: str, sample: RewardSample) -> tuple[Interval | None, dict[float, Box]] | None:
        value = find_json(text)
        if not isinstance(value, dict):
            return None
        interval = _answer_time(value, text)
        frames = boxes_by_frame(value, _truth_frame_keys(sample))
        if interval is None and not frames:
            return None
        return interval, frames or {}

    def accuracy(self, parsed: Any, truth: Any, sample: RewardSample, ctx: ScoreContext) -> float:
        (pred_time, pred_frames), (true_time, true_frames) = parsed, truth
        t_iou = 0.0
        if pred_time is not None and not covers_video(pred_time, true_time, sample):
            t_iou = interval_iou(pred_time, true_time)
        s_iou = mean_frame_iou(_honest_frames(pred_frames, true_frames, sample), true_frames)
        return 0.5 * t_iou + 0.5 * s_iou

    def jsonable(self, parsed: Any) -> Any:
        interval, frames = parsed
        return {"time": list(interval) if interval else None, "boxes": _frames_jsonable(frames)}


@register
class Tracking(ProblemType):
    name = "tracking"
    aliases = ("object tracking", "sot")
    description = '{"boxes": {"<frame>": box}}; mean box IoU over truth frames, a missing frame scores 0.'
    narrow_phrases = False

    def parse_truth(self, sample: RewardSample) -> dict[float, Box]:
        return _frames_truth(sample, self.name)

    def extract(self, text: str, sample: RewardSample) -> dict[float, Box] | None:
        frames = boxes_by_frame(find_json(text), _truth_frame_keys(sample))
        return frames or None

    def accuracy(self, parsed: Any, truth: Any, sample: RewardSample, ctx: ScoreContext) -> float:
        return mean_frame_iou(_honest_frames(parsed, truth, sample), truth)

    def jsonable(self, parsed: Any) -> Any:
        return {"boxes": _frames_jsonable(parsed)}
