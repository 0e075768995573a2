"""LVBench (THUDM/LVBench): hour-long videos, four options written in the question, multi-label types.

File: ``video_info.meta.jsonl``, one line per video {key, type, video_info, qa: [{uid, question
"…\\n(A) …\\n(B) …", answer "D", question_type [..], time_reference}]}. Videos ``videos/<key>.mp4``.
A question counts in every category it lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from services.common.samples import Sample
from services.eval.benchmarks.base import Benchmark, fixed, make_sample
from services.eval.benchmarks.errors import BenchmarkError
from services.eval.benchmarks.files import read_jsonl, require
from services.eval.benchmarks.options import split_embedded
from services.eval.benchmarks.registry import register


@register
class LVBench(Benchmark):
    name = "lvbench"
    title = "LVBench"
    annotations = ("video_info.meta.jsonl", "*.jsonl")
    video = fixed({"fps": None, "nframes": 64})
    templates = fixed({"prompt": "{question}\n{options}\nAnswer the question with the option letter."})
    option_style = "({letter}) {text}"
    breakdowns = fixed({"question_type": "question_type", "video_type": "video_type"})
    official_readers = fixed({"multiple choice": "lvbench"})
    official_source = (
        "THUDM/LVBench · lvbench/utils/answer_util.py · polish_answer + lvbench/metrics/compute_accuracy.py · "
        "compute_accuracy (accuracy over the questions with an answer; per category, multi-label)"
    )
    official_denominator = "answered"

    def load(self, files: Sequence[Path]) -> list[Sample]:
        samples = []
        for path in files:
            for line, video in read_jsonl(path):
                where = f"{path}:{line}"
                if not isinstance(video, dict) or not isinstance(video.get("qa"), list):
                    raise BenchmarkError(f"{where}: expected a video object with a 'qa' list")
                key = str(require(video, "key", where))
                for j, qa in enumerate(video["qa"]):
                    at = f"{where}.qa[{j}]"
                    problem, options = split_embedded(str(require(qa, "question", at)), at)
                    categories = qa.get("question_type") or []
                    samples.append(
                        make_sample(
                            {
                                "id": f"{key}/{require(qa, 'uid', at)}",
                                "problem": problem,
                                "problem_type": "multiple choice",
                                "data_type": "video",
                                "videos": [f"videos/{key}.mp4"],
                                "options": options,
                                "answer": require(qa, "answer", at),
                                "question_type": categories if isinstance(categories, list) else [categories],
                                "video_type": video.get("type"),
                                "time_reference": qa.get("time_reference"),
                            },
                            where=at,
                        )
                    )
        return samples
