"""LongVideo-Reason (NVlabs/Long-RL; HF LongVideo-Reason/longvideo-reason): long-video reasoning.

File: ``test.jsonl`` lines {videos (relative path), problem (the question, options written in it),
answer (a letter)}; ids are the file stem and line number unless a record carries ``id``. Videos at
``videos`` (``longvila_videos/…``). The official prompt asks for <think> then <answer>.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from services.common.samples import Sample
from services.eval.benchmarks.base import Benchmark, fixed, make_sample
from services.eval.benchmarks.errors import BenchmarkError
from services.eval.benchmarks.files import read_rows, require
from services.eval.benchmarks.options import split_embedded
from services.eval.benchmarks.registry import register


@register
class LongVideoReason(Benchmark):
    name = "longvideo_reason"
    title = "LongVideo-Reason"
    annotations = ("test.jsonl", "*.jsonl")
    video = fixed({"fps": None, "nframes": 64})
    official_readers = fixed({"multiple choice": "longvideo_reason", "open-ended": "longvideo_reason"})
    official_source = "NVlabs/Long-RL · eval/eval.py · accuracy_reward (accuracy over every item)"
    templates = fixed(
        {
            "prompt": "You are a helpful assistant. The user asks a question, and then you solves it.\n\n"
            "Please first think deeply about the question based on the given video, and then provide the final "
            "answer. The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> "
            "tags, respectively, i.e., <think> reasoning process here </think> <answer> answer here </answer>.\n\n"
            " Question: {question}\n{options}"
        }
    )

    def load(self, files: Sequence[Path]) -> list[Sample]:
        samples = []
        for path in files:
            for index, (where, row) in enumerate(read_rows(path)):
                videos = require(row, "videos", where)
                problem = str(require(row, "problem", where))
                answer = str(require(row, "answer", where)).strip()
                fields: dict[str, Any] = {
                    "id": str(row.get("id") or f"{path.stem}/{index}"),
                    "data_type": "video",
                    "videos": videos if isinstance(videos, list) else [videos],
                    "answer": answer,
                }
                try:
                    question, options = split_embedded(problem, where)
                    fields.update(problem=question, problem_type="multiple choice", options=options)
                except BenchmarkError:
                    fields.update(problem=problem, problem_type="open-ended")
                samples.append(make_sample(fields, where=where))
        return samples
