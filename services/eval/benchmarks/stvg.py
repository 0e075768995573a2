"""Spatio-temporal video grounding on HC-STVG (tzhhhh123/HC-STVG): when and where is the described person.

File: the HC-STVG v2 annotation JSON (``val_v2.json`` / ``test_v2.json``): "<video>.mp4" → {img_num,
img_size [h, w], st_frame (1-based), bbox [[x, y, w, h] per frame from st_frame], st_time, ed_time,
English (the caption)}. Videos ``videos/<video>.mp4``, 20 s each (``video_seconds``).

The model answers ``{"time": [s, e], "boxes": {"<second>": [x1, y1, x2, y2]}}``; the ground truth is the
tube's interval and its box at each whole second inside it (pixels of the original frame, converted into
the model family's space by the shared converter). Metrics (percent): m_tIoU, m_vIoU, vIoU@0.3, vIoU@0.5,
with vIoU = Σ_{s ∈ both intervals} IoU(box_s, box̂_s) / |seconds in either interval| on the whole-second
grid; the reward library's composite (0.5·tIoU + 0.5·mean box IoU) is reported as ``reward_accuracy``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from services.common.coords import RELATIVE_SCALE
from services.common.families import FamilyName
from services.common.samples import Sample, SampleError
from services.eval.benchmarks.aggregate import percent, summary
from services.eval.benchmarks.base import Benchmark, fixed, make_sample
from services.eval.benchmarks.errors import BenchmarkError
from services.eval.benchmarks.files import read_json, require
from services.eval.benchmarks.registry import register
from services.eval.benchmarks.results import ItemResult, Summary
from services.reward.metrics.iou import box_iou, interval_iou

Box = tuple[float, float, float, float]


def seconds_grid(interval: Sequence[float]) -> set[int]:
    """The whole seconds inside ``[s, e]``."""
    return set(range(math.ceil(interval[0]), math.floor(interval[1]) + 1))


def viou(
    pred_time: Sequence[float] | None,
    pred_boxes: Mapping[int, Box],
    true_time: Sequence[float],
    true_boxes: Mapping[int, Box],
) -> float:
    """Σ over seconds in both intervals of IoU(predicted box, true box) / seconds in either interval; a
    second without a predicted (or true) box scores 0 there."""
    truth = seconds_grid(true_time)
    pred = seconds_grid(pred_time) if pred_time else set()
    union = truth | pred
    if not union:
        return 0.0
    hits = sum(
        box_iou(pred_boxes[s], true_boxes[s]) for s in truth & pred if s in pred_boxes and s in true_boxes
    )
    return hits / len(union)


def per_second(boxes: Mapping[str, Sequence[float]] | None) -> dict[int, Box]:
    """``{"3": box}`` (keys as text, whole seconds) → ``{3: box}``; other keys are ignored."""
    out = {}
    for key, box in (boxes or {}).items():
        try:
            second = float(key)
        except ValueError:
            continue
        if second == int(second) and len(box) == 4:
            out[int(second)] = tuple(float(v) for v in box)
    return out


class STVGOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    video_seconds: float = Field(
        20.0, gt=0, description="length of every HC-STVG clip (frame rate = img_num / it)"
    )


@register
class STVG(Benchmark):
    name = "stvg"
    title = "STVG (HC-STVG v2)"
    annotations = ("*_v2.json", "*.json")
    video = fixed({"fps": 2.0, "max_frames": 64})
    official_source = (
        "tzhhhh123/HC-STVG · eval_hcvg.py · hcvg_eval (m_vIoU, m_tIoU, vIoU@0.3/0.5; no official "
        "generative prompt or text reader: the robust JSON reader)"
    )
    Options = STVGOptions
    templates = fixed(
        {
            "prompt": "Find the person described below in the video: when the described action happens and where "
            "the person is at every whole second of it.\nDescription: {question}\nAnswer in JSON as "
            '{{"time": [start, end], "boxes": {{"<second>": [x1, y1, x2, y2], ...}}}} with times in seconds.'
        }
    )

    def load(self, files: Sequence[Path]) -> list[Sample]:
        samples = []
        for path in files:
            data = read_json(path)
            if not isinstance(data, dict):
                raise BenchmarkError(f"{path}: expected {{'<video>.mp4': annotation}}")
            for video, anno in data.items():
                where = f"{path}[{video}]"
                if not isinstance(anno, dict):
                    raise BenchmarkError(f"{where}: an annotation must be an object")
                samples.append(self._sample(video, anno, where))
        return samples

    def _sample(self, video: str, anno: dict[str, Any], where: str) -> Sample:
        boxes = require(anno, "bbox", where)
        fps = float(require(anno, "img_num", where)) / self.options.video_seconds
        first = int(anno.get("st_frame", 1))
        start, end = float(require(anno, "st_time", where)), float(require(anno, "ed_time", where))
        if not (0 <= start < end):
            raise BenchmarkError(f"{where}: tube [{start}, {end}] is not an interval")
        track = {}
        for second in sorted(seconds_grid((start, end))):
            index = round(second * fps) + 1 - first  # frame numbers are 1-based
            if 0 <= index < len(boxes):
                x, y, w, h = (float(v) for v in boxes[index])
                if w > 0 and h > 0:
                    track[str(second)] = [x, y, x + w, y + h]
        if not track:
            raise BenchmarkError(f"{where}: no box at a whole second inside the tube")
        height, width = anno.get("img_size") or (anno.get("height"), anno.get("width"))
        caption = anno.get("English") or anno.get("caption")
        return make_sample(
            {
                "id": Path(video).stem,
                "problem": require({"caption": caption}, "caption", where),
                "problem_type": "spatial-temporal grounding",
                "data_type": "video",
                "videos": [f"videos/{video}"],
                "answer": {"time": [start, end], "boxes": track},
                "box_space": "pixels",
                "source_width": width,
                "source_height": height,
            },
            where=where,
        )

    def reward_sample(
        self, sample: Sample, family: FamilyName | str, clip_meta: list[dict[str, Any]] | None
    ) -> dict[str, Any]:
        """Without a stored clip (re-scoring saved predictions), relative-coordinate families need only the
        annotation's frame size; Qwen2.5-VL's pixel space needs the clip's resized size."""
        if clip_meta is None:
            if FamilyName(family) is FamilyName.qwen2_5_vl:
                raise SampleError(
                    f"sample {sample.id!r}: scoring boxes for qwen2_5_vl needs the clip's resized frame size; "
                    "give predictions with their 'clip_meta' (the per-sample output of `reelrl eval run`)"
                )
            size = {
                "source_width": sample.extra("source_width"),
                "source_height": sample.extra("source_height"),
            }
            clip_meta = [{**size, "width": RELATIVE_SCALE, "height": RELATIVE_SCALE}]
        return super().reward_sample(sample, family, clip_meta)

    def item_details(
        self, sample: Sample, reward_sample: dict[str, Any], result: ItemResult
    ) -> dict[str, Any]:
        truth = reward_sample["answer"]
        extracted = result.extracted or {}
        pred_time = extracted.get("time")
        t_iou = interval_iou(tuple(pred_time), tuple(truth["time"])) if pred_time else 0.0
        v_iou = viou(pred_time, per_second(extracted.get("boxes")), truth["time"], per_second(truth["boxes"]))
        return {"tiou": t_iou, "viou": v_iou}

    def aggregate(self, samples: Sequence[Sample], results: Mapping[str, ItemResult]) -> Summary:
        tious = [results[s.id].details.get("tiou", 0.0) for s in samples]
        vious = [results[s.id].details.get("viou", 0.0) for s in samples]
        metrics = {
            "m_tIoU": percent(tious),
            "m_vIoU": percent(vious),
            "vIoU@0.3": percent(1.0 if v >= 0.3 else 0.0 for v in vious),
            "vIoU@0.5": percent(1.0 if v >= 0.5 else 0.0 for v in vious),
            "reward_accuracy": percent(results[s.id].accuracy for s in samples),
        }
        return summary(
            self.name, samples, results, metric="m_vIoU", overall=metrics["m_vIoU"], metrics=metrics
        )
