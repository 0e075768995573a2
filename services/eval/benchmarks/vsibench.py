"""VSI-Bench (vision-x-nyu/thinking-in-space; HF nyu-visionx/VSI-Bench): visual-spatial intelligence.

File: ``test-*.parquet`` rows {id, dataset, scene_name, question_type, question, options ["A. …"] or
null, ground_truth}. Videos ``<dataset>/<scene_name>.mp4``. Multiple-choice types are scored by exact
option, numerical ones by mean relative accuracy (the reward library's regression type). The three
``object_rel_direction_*`` difficulties are averaged into one task; the headline is the unweighted mean
of the 8 task scores.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from services.common.samples import Sample
from services.eval.benchmarks.aggregate import by_key, macro, percent, summary
from services.eval.benchmarks.base import Benchmark, fixed, make_sample
from services.eval.benchmarks.files import read_rows, require
from services.eval.benchmarks.registry import register
from services.eval.benchmarks.results import Cell, ItemResult, Summary

_DIRECTION = "object_rel_direction"


def task_scores(per_type: Mapping[str, Cell]) -> dict[str, Cell]:
    """Per-type cells with the rel-direction difficulties merged by their unweighted mean."""
    tasks = {k: v for k, v in per_type.items() if not k.startswith(_DIRECTION)}
    directions = [v for k, v in per_type.items() if k.startswith(_DIRECTION)]
    if directions:
        tasks[_DIRECTION] = Cell(
            score=sum(c.score for c in directions) / len(directions), count=sum(c.count for c in directions)
        )
    return dict(sorted(tasks.items()))


@register
class VSIBench(Benchmark):
    name = "vsibench"
    title = "VSI-Bench"
    annotations = ("test-*.parquet", "*.parquet")
    templates = fixed(
        {
            "multiple choice": "These are frames of a video.\n{question}\nOptions:\n{options}\nAnswer with the "
            "option's letter from the given choices directly.",
            "regression": "These are frames of a video.\n{question}\nPlease answer the question using a single word "
            "or phrase.",
        }
    )
    official_readers = fixed({"multiple choice": "vsibench_choice", "regression": "vsibench_number"})
    official_source = (
        "vision-x-nyu/thinking-in-space · lmms_eval/tasks/vsibench/utils.py · vsibench_process_results + "
        "vsibench_aggregate_results (per question type; rel-direction merged; the mean of 8 task scores)"
    )

    def load(self, files: Sequence[Path]) -> list[Sample]:
        samples = []
        for path in files:
            for where, row in read_rows(path):
                options = row.get("options")
                fields: dict[str, Any] = {
                    "id": str(require(row, "id", where)),
                    "problem": require(row, "question", where),
                    "data_type": "video",
                    "videos": [f"{require(row, 'dataset', where)}/{require(row, 'scene_name', where)}.mp4"],
                    "answer": str(require(row, "ground_truth", where)).strip(),
                    "question_type": require(row, "question_type", where),
                    "dataset": row.get("dataset"),
                }
                if options:
                    fields.update(problem_type="multiple choice", options=list(options))
                else:
                    fields["problem_type"] = "regression"
                samples.append(make_sample(fields, where=where))
        return samples

    def template_for(self, sample: Sample) -> str:
        return self.templates[sample.problem_type]

    def aggregate(self, samples: Sequence[Sample], results: Mapping[str, ItemResult]) -> Summary:
        per_type = by_key(samples, results, lambda s: s.extra("question_type"))
        tasks = task_scores(per_type)
        overall = macro(tasks)
        mc = [results[s.id].accuracy for s in samples if s.problem_type == "multiple choice"]
        na = [results[s.id].accuracy for s in samples if s.problem_type == "regression"]
        return summary(
            self.name,
            samples,
            results,
            metric="mean of the 8 task scores (accuracy for multiple choice, MRA for numbers)",
            overall=overall,
            metrics={"mean_of_tasks": overall, "mc_accuracy": percent(mc), "na_mra": percent(na)},
            breakdowns={
                "task": tasks,
                "question_type": per_type,
                "dataset": by_key(samples, results, lambda s: s.extra("dataset")),
            },
        )
