"""VCR-Bench (zhishuifeiqian/VCR-Bench): video chain-of-thought reasoning, half multiple choice.

File: ``meta_info_video.json``, a list of {id, video_path, duration, dimension, question (options
appended for MC), "multiple-choice" bool, choices {"A": …}, answer: a letter, free text, "[s, e]" or
"[x1, y1, x2, y2]", reasoning [steps]}. Videos at ``video_path``.

Scoring follows the official rules with the reward library as the reader: a time interval is right at
IoU > 0.7, a box at IoU > 0.5 (boxes in pixels of the original frame), free text by an LLM judge when
configured (else the reward library's open-ended score). The CoT step score (GPT-4o) is not computed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from services.common.samples import Sample
from services.eval.benchmarks.aggregate import by_key, percent, summary
from services.eval.benchmarks.base import Benchmark, fixed, make_sample
from services.eval.benchmarks.files import read_rows, require
from services.eval.benchmarks.options import split_embedded
from services.eval.benchmarks.registry import register
from services.eval.benchmarks.results import ItemResult, Summary

THRESHOLDS = {"temporal grounding": 0.7, "spatial grounding": 0.5}


def duration_bucket(seconds: Any) -> str | None:
    if not isinstance(seconds, int | float):
        return None
    return "0-60s" if seconds < 60 else "60-300s" if seconds < 300 else "300s+"


def _open_answer(answer: str) -> tuple[str, Any]:
    """(problem type, answer) of an open question: an interval, a box or free text."""
    try:
        value = json.loads(answer)
    except (json.JSONDecodeError, TypeError):
        return "open-ended", answer
    if isinstance(value, list) and all(isinstance(v, int | float) for v in value):
        if len(value) == 2:
            return "temporal grounding", {"time": value}
        if len(value) == 4:
            return "spatial grounding", {"boxes": value}
    return "open-ended", answer


@register
class VCRBench(Benchmark):
    name = "vcrbench"
    title = "VCR-Bench"
    annotations = ("meta_info_video.json", "*.json")
    templates = fixed(
        {
            "multiple choice": "{question}\n{options}\nAnswer with the option's letter from the given choices directly.",
            "open": "{question}\nAnswer the question directly.",
        }
    )
    judged_types = frozenset({"open-ended"})

    def load(self, files: Sequence[Path]) -> list[Sample]:
        samples = []
        for path in files:
            for where, row in read_rows(path):
                question = str(require(row, "question", where))
                answer = str(require(row, "answer", where)).strip()
                fields: dict[str, Any] = {
                    "id": str(require(row, "id", where)),
                    "data_type": "video",
                    "videos": [require(row, "video_path", where)],
                    "dimension": row.get("dimension"),
                    "duration": row.get("duration"),
                    "duration_bucket": duration_bucket(row.get("duration")),
                }
                if row.get("multiple-choice"):
                    choices = row.get("choices")
                    if choices:
                        problem = question.split("\nA.")[0].strip() if "\nA." in question else question
                        options: Any = choices
                    else:
                        problem, options = split_embedded(question, where)
                    fields.update(
                        problem=problem, problem_type="multiple choice", options=options, answer=answer
                    )
                else:
                    problem_type, value = _open_answer(answer)
                    fields.update(problem=question, problem_type=problem_type, answer=value)
                samples.append(make_sample(fields, where=where))
        return samples

    def template_for(self, sample: Sample) -> str:
        return self.templates["multiple choice" if sample.problem_type == "multiple choice" else "open"]

    def item_details(
        self, sample: Sample, reward_sample: dict[str, Any], result: ItemResult
    ) -> dict[str, Any]:
        threshold = THRESHOLDS.get(sample.problem_type)
        if threshold is None:
            return {}
        return {"iou": result.accuracy, "correct": 1.0 if result.accuracy > threshold else 0.0}

    def aggregate(self, samples: Sequence[Sample], results: Mapping[str, ItemResult]) -> Summary:
        def value(result: ItemResult) -> float:
            return result.details.get("correct", result.accuracy)

        cells = {
            name: by_key(samples, results, lambda s, f=field: s.extra(f), value)
            for name, field in (("dimension", "dimension"), ("duration", "duration_bucket"))
        }
        cells["answer_type"] = by_key(samples, results, lambda s: s.problem_type, value)
        overall = percent(value(results[s.id]) for s in samples)
        return summary(
            self.name, samples, results, metric="accuracy", overall=overall,
            metrics={"accuracy": overall}, breakdowns=cells,
        )  # fmt: skip
