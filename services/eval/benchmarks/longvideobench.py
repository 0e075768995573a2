"""LongVideoBench (longvideobench/LongVideoBench): referring reasoning over videos of 8 s to 1 h.

Files: ``lvb_val.json`` (a list of {id, video_path, question, candidates [4-5 texts], correct_choice
(0-based), duration_group, question_category, topic_category, level, …}) or the Parquet release with
``option0``…``option4`` ("N/A" when absent). The test file has no ``correct_choice``: such items are
skipped. Videos ``videos/<video_path>``. Subtitles (the interleaved variant) are not used.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from services.common.samples import Sample
from services.eval.benchmarks.base import Benchmark, fixed, make_sample
from services.eval.benchmarks.files import read_rows, require
from services.eval.benchmarks.options import letter_of_index, lettered
from services.eval.benchmarks.registry import register


@register
class LongVideoBench(Benchmark):
    name = "longvideobench"
    title = "LongVideoBench"
    annotations = ("lvb_val.json", "*.parquet")
    video = fixed({"fps": None, "nframes": 64})
    templates = fixed(
        {"prompt": "{question}\n{options}\nAnswer with the option's letter from the given choices directly."}
    )
    breakdowns = fixed(
        {
            "duration_group": "duration_group",
            "question_category": "question_category",
            "topic_category": "topic_category",
            "level": "level",
        }
    )

    def load(self, files: Sequence[Path]) -> list[Sample]:
        samples = []
        for path in files:
            for where, row in read_rows(path):
                if row.get("correct_choice") is None:
                    continue  # the test split's answers are not public
                candidates = row.get("candidates")
                if candidates is None:
                    candidates = [
                        row[f"option{i}"] for i in range(5) if row.get(f"option{i}") not in (None, "N/A")
                    ]
                samples.append(
                    make_sample(
                        {
                            "id": str(require(row, "id", where)),
                            "problem": require(row, "question", where),
                            "problem_type": "multiple choice",
                            "data_type": "video",
                            "videos": [f"videos/{require(row, 'video_path', where)}"],
                            "options": lettered(candidates),
                            "answer": letter_of_index(row["correct_choice"], len(candidates), where),
                            "duration_group": row.get("duration_group"),
                            "question_category": row.get("question_category"),
                            "topic_category": row.get("topic_category"),
                            "level": row.get("level"),
                        },
                        where=where,
                    )
                )
        return samples
