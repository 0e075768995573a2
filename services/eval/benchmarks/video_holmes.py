"""Video-Holmes (TencentARC/Video-Holmes): reasoning over suspense short films, six options, 7 types.

File: ``test_Video-Holmes.json``, a list of {"video ID", "Question ID", "Question Type" (SR, IMC, TCI,
TA, MHR, PAR, CTI), "Question", "Options" {"A": …, "F": …}, "Answer", "Explanation"}. Videos
``videos_cropped/<video ID>.mp4``. The official Qwen prompt asks for <think> then <answer>.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from services.common.samples import Sample
from services.eval.benchmarks.base import Benchmark, fixed, make_sample
from services.eval.benchmarks.files import read_rows, require
from services.eval.benchmarks.registry import register


@register
class VideoHolmes(Benchmark):
    name = "video_holmes"
    title = "Video-Holmes"
    annotations = ("test_Video-Holmes.json", "*.json")
    templates = fixed(
        {
            "prompt": "Based on the given video, reason and answer the single-choice question. Provide your "
            "reasoning between the <think> and </think> tags, and then give your final answer between the "
            "<answer> and </answer> tags. The question is: {question}. The options are: {options}. Your answer:"
        }
    )
    option_style = "{letter}: {text}"
    option_sep = ", "
    breakdowns = fixed({"question_type": "question_type"})
    official_readers = fixed({"multiple choice": "video_holmes"})
    official_source = (
        "TencentARC/Video-Holmes · evaluate.py · the answer matching after generation (accuracy overall "
        "and per question type)"
    )

    def load(self, files: Sequence[Path]) -> list[Sample]:
        samples = []
        for path in files:
            for where, row in read_rows(path):
                video = str(require(row, "video ID", where))
                samples.append(
                    make_sample(
                        {
                            "id": f"{video}/{require(row, 'Question ID', where)}",
                            "problem": require(row, "Question", where),
                            "problem_type": "multiple choice",
                            "data_type": "video",
                            "videos": [f"videos_cropped/{video}.mp4"],
                            "options": require(row, "Options", where),
                            "answer": require(row, "Answer", where),
                            "question_type": row.get("Question Type"),
                        },
                        where=where,
                    )
                )
        return samples
