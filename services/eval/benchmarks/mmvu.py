"""MMVU (yale-nlp/MMVU): expert-level video understanding, multiple-choice and open-ended.

File: ``validation.json``, a list of {id, video (a URL ending in ``videos/<Subject>/<n>.mp4``),
question_type "multiple-choice" | "open-ended", metadata {subject, …}, question, choices {"A": …} (all
empty for open questions), answer}. Videos ``videos/<Subject>/<n>.mp4``. Officially a GPT-4o judge grades
both types; here multiple choice is read by the reward library and open answers by the configured LLM
judge (else the reward library's open-ended score). Many RL papers report the 625 MC questions only:
see the ``question_type`` breakdown.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from services.common.samples import Sample
from services.eval.benchmarks.base import Benchmark, fixed, make_sample
from services.eval.benchmarks.errors import BenchmarkError
from services.eval.benchmarks.files import read_rows, require
from services.eval.benchmarks.registry import register


def video_path(url: str, where: str) -> str:
    """``https://…/resolve/main/videos/Chemistry/0.mp4`` → ``videos/Chemistry/0.mp4``."""
    marker = url.find("videos/")
    if marker < 0:
        raise BenchmarkError(f"{where}: video {url!r} has no 'videos/<Subject>/<n>.mp4' part")
    return url[marker:]


@register
class MMVU(Benchmark):
    name = "mmvu"
    title = "MMVU"
    annotations = ("validation.json", "*.json")
    templates = fixed(
        {
            "multiple choice": "Question: {question}\n{options}\nDo not generate any intermediate reasoning process. "
            "Answer directly with the option letter from the given choices.",
            "open": "Question: {question}\nDo not generate any intermediate reasoning process. Directly output the "
            "final answer.",
        }
    )
    option_style = "{letter}: {text}"
    judged_types = frozenset({"open-ended"})
    breakdowns = fixed({"question_type": "question_type", "subject": "subject"})
    # the official evaluation has GPT-4o read and grade every answer: no rule reader to re-implement
    official_source = (
        "yale-nlp/MMVU · utils/eval_utils.py · prepare_evaluation_message + get_acc_async (GPT-4o judges "
        "every answer: the configured judge grades open answers, the robust reader reads the rest)"
    )

    def load(self, files: Sequence[Path]) -> list[Sample]:
        samples = []
        for path in files:
            for where, row in read_rows(path):
                kind = str(require(row, "question_type", where))
                metadata = row.get("metadata") or {}
                fields: dict[str, Any] = {
                    "id": str(require(row, "id", where)),
                    "problem": require(row, "question", where),
                    "data_type": "video",
                    "videos": [video_path(str(require(row, "video", where)), where)],
                    "answer": require(row, "answer", where),
                    "question_type": kind,
                    "subject": metadata.get("subject") if isinstance(metadata, dict) else None,
                }
                if kind == "multiple-choice":
                    choices = {k: v for k, v in (row.get("choices") or {}).items() if str(v).strip()}
                    fields.update(problem_type="multiple choice", options=choices)
                elif kind == "open-ended":
                    fields["problem_type"] = "open-ended"
                else:
                    raise BenchmarkError(f"{where}: unknown question_type {kind!r}")
                samples.append(make_sample(fields, where=where))
        return samples

    def template_for(self, sample: Sample) -> str:
        return self.templates["multiple choice" if sample.problem_type == "multiple choice" else "open"]
