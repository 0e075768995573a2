"""The Video-R1 / EasyVideoR1 unified JSON as a generic benchmark (what many users already have).

Files: a JSON list or JSONL of {problem_id, problem, data_type, problem_type, options, solution
("<answer>X</answer>"), path (relative to the video root), data_source, …}, read by the shared
converter. EasyVideoR1's OVO types map onto the reward library: "REC" (repetition count) → counting,
"SSR" / "CRR" → boolean (the reward library's "rec" alias is referring-expression grounding, so the
exact upper-case names are mapped first). Ids: ``problem_id``, else the file stem and record index.
Headline: mean accuracy over every item; accuracy over non-regression items and MRA over regression items
are reported beside it (EasyVideoR1's mean_acc / mean_mra), with breakdowns by type and data source.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from services.common.coords import parse_answer
from services.common.samples import Sample, to_sample
from services.eval.benchmarks.aggregate import by_key, percent, summary
from services.eval.benchmarks.base import Benchmark, fixed
from services.eval.benchmarks.files import read_rows
from services.eval.benchmarks.registry import register
from services.eval.benchmarks.results import ItemResult, Summary

EASYVIDEOR1_TYPES = {"REC": "counting", "SSR": "boolean", "CRR": "boolean"}
BREAKDOWN_FIELDS = (
    "data_source",
    "duration",
    "task_type",
    "original_question_type",
    "ovo_task",
    "q_type_livesports",
)


def without_empty_boxes(answer: Any) -> Any:
    """EasyVideoR1 writes temporal answers as ``{"time": [s, e], "boxes": {}}``: an empty ``boxes`` holds
    nothing to convert, but would make the box converter ask for a frame size."""
    value = parse_answer(answer)
    if isinstance(value, dict) and "boxes" in value and not value["boxes"]:
        return {k: v for k, v in value.items() if k != "boxes"}
    return answer


@register
class VideoR1(Benchmark):
    name = "video_r1"
    title = "Video-R1 / EasyVideoR1 unified JSON"
    annotations = ("*.json", "*.jsonl")
    # multiple choice follows EasyVideoR1's extract_answer; its other types keep the robust reader
    official_readers = fixed({"multiple choice": "video_r1"})
    official_source = (
        "cyuQ1n/EasyVideoR1 · eval/code/AsyncLLMEngine_eval_videobench_qwen3vl_multi_task.py · extract_answer "
        "(multiple choice; mean_acc over the non-regression items, mean_mra over regression)"
    )

    def load(self, files: Sequence[Path]) -> list[Sample]:
        samples = []
        for path in files:
            for index, (where, record) in enumerate(read_rows(path)):
                record = dict(record)
                kind = record.get("problem_type")
                if isinstance(kind, str) and kind in EASYVIDEOR1_TYPES:
                    record["problem_type"] = EASYVIDEOR1_TYPES[kind]
                if record.get("problem_id") is None and not record.get("id"):
                    record["id"] = f"{path.stem}/{index}"
                sample = to_sample(record, where=where)
                samples.append(sample.model_copy(update={"answer": without_empty_boxes(sample.answer)}))
        return samples

    def aggregate(self, samples: Sequence[Sample], results: Mapping[str, ItemResult]) -> Summary:
        regression = [s for s in samples if s.problem_type == "regression"]
        other = [s for s in samples if s.problem_type != "regression"]
        breakdowns = {"problem_type": by_key(samples, results, lambda s: s.problem_type)}
        for field in BREAKDOWN_FIELDS:
            cells = by_key(samples, results, lambda s, f=field: s.extra(f))
            if cells:
                breakdowns[field] = cells
        overall = percent(results[s.id].accuracy for s in samples)
        metrics = {"mean": overall}
        if other:
            metrics["mean_acc"] = percent(results[s.id].accuracy for s in other)
        if regression:
            metrics["mean_mra"] = percent(results[s.id].accuracy for s in regression)
        return summary(
            self.name,
            samples,
            results,
            metric="mean accuracy",
            overall=overall,
            metrics=metrics,
            breakdowns=breakdowns,
        )
