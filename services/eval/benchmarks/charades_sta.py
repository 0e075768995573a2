"""Charades-STA (temporal sentence grounding): find when a described moment happens.

Files: the official ``charades_sta_test.txt`` (lines "3MSZA 24.3 30.4##person turn a light on.") or the
lmms-eval JSON list {video "3MSZA.mp4", caption, timestamp [s, e]}. Videos ``Charades_v1_480/<id>.mp4``.
Metrics: R@1 at IoU ≥ 0.3 / 0.5 / 0.7 and mIoU (percent); the headline is mIoU (what Qwen reports).
Per-item IoU is the reward library's temporal-grounding accuracy (an unreadable answer scores 0).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from services.common.samples import Sample
from services.eval.benchmarks.aggregate import percent, summary
from services.eval.benchmarks.base import Benchmark, fixed, make_sample
from services.eval.benchmarks.errors import BenchmarkError
from services.eval.benchmarks.files import read_rows, require
from services.eval.benchmarks.registry import register
from services.eval.benchmarks.results import ItemResult, Summary

RECALL_THRESHOLDS = (0.3, 0.5, 0.7)


def recall_at(ious: Sequence[float], threshold: float) -> float:
    """Percent of queries whose IoU reaches ``threshold`` (lmms-eval counts IoU ≥ threshold)."""
    return percent(1.0 if iou >= threshold else 0.0 for iou in ious)


@register
class CharadesSTA(Benchmark):
    name = "charades_sta"
    title = "Charades-STA"
    annotations = ("charades_sta_test.txt", "*.txt", "*.json")
    video = fixed({"fps": 2.0, "max_frames": 128})
    templates = fixed(
        {
            "prompt": "Please find the visual event described by a sentence in the video, determining its starting "
            "and ending times. The format should be: 'The event happens in the start time - end time'. For "
            "example, The event 'person turn a light on' happens in the 24.3 - 30.4 seonds. Now I will give you "
            "the textual sentence: {question}. Please return its start time and end time."
        }
    )
    official_readers = fixed({"temporal grounding": "charades_sta"})
    official_source = (
        "EvolvingLMMs-Lab/lmms-eval · lmms_eval/tasks/charades_sta/utils.py · extract_time + "
        "_temporal_grounding_compute_metrics (mIoU; R@k with IoU >= k; TimeChat metrics/tvg/eval_tvg.py "
        "is the original)"
    )

    def load(self, files: Sequence[Path]) -> list[Sample]:
        samples = []
        for path in files:
            for index, (where, video, start, end, sentence) in enumerate(_queries(path)):
                if not (0 <= start < end):
                    raise BenchmarkError(f"{where}: moment [{start}, {end}] is not an interval")
                samples.append(
                    make_sample(
                        {
                            "id": f"{path.stem}/{index}",
                            "problem": sentence,
                            "problem_type": "temporal grounding",
                            "data_type": "video",
                            "videos": [f"Charades_v1_480/{video}.mp4"],
                            "answer": {"time": [start, end]},
                            "video_id": video,
                        },
                        where=where,
                    )
                )
        return samples

    def aggregate(self, samples: Sequence[Sample], results: Mapping[str, ItemResult]) -> Summary:
        ious = [results[s.id].accuracy for s in samples]
        metrics = {f"R@{t}": recall_at(ious, t) for t in RECALL_THRESHOLDS}
        metrics["mIoU"] = percent(ious)
        return summary(self.name, samples, results, metric="mIoU", overall=metrics["mIoU"], metrics=metrics)


def _queries(path: Path) -> list[tuple[str, str, float, float, str]]:
    """(where, video id, start, end, sentence) per query."""
    out = []
    if path.suffix.lower() == ".txt":
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            head, sep, sentence = line.partition("##")
            parts = head.split()
            if not sep or len(parts) != 3:
                raise BenchmarkError(f"{where}: expected 'VIDEO START END##sentence'")
            out.append(
                (where, parts[0], _seconds(parts[1], where), _seconds(parts[2], where), sentence.strip())
            )
        return out
    for where, row in read_rows(path):
        stamp: Any = require(row, "timestamp", where)
        if isinstance(stamp, str):
            stamp = stamp.strip("[]() ").replace(",", " ").split()
        if not isinstance(stamp, list | tuple) or len(stamp) != 2:
            raise BenchmarkError(f"{where}: timestamp must be [start, end]")
        video = str(require(row, "video", where)).removesuffix(".mp4")
        start, end = (_seconds(v, where) for v in stamp)
        out.append((where, video, start, end, str(require(row, "caption", where)).strip()))
    return out


def _seconds(value: Any, where: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise BenchmarkError(f"{where}: {value!r} is not a time in seconds") from None
