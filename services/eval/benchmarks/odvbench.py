"""ODV-Bench (MCG-NJU/StreamForest): online driving-video understanding, MVBench-style records.

Files: one JSON list per task (``*.json``) of {video, question, candidates [texts], answer (text),
start, end (the query window), task, subtask, subsubtask?}; ids are the file stem and record index.
Videos ``videos/<video>``. The protocol cuts each video to [start, end]: point the video root at the cut
clips (EasyVideoR1 names them ``<index>_<stem>_s<start>_e<end>.mp4``) or give cut videos in ``video``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from services.common.samples import Sample
from services.eval.benchmarks.base import Benchmark, fixed, make_sample
from services.eval.benchmarks.files import read_rows, require
from services.eval.benchmarks.options import letter_of_text, lettered
from services.eval.benchmarks.registry import register


@register
class ODVBench(Benchmark):
    name = "odvbench"
    title = "ODV-Bench"
    annotations = ("*.json",)
    templates = fixed(
        {"prompt": "{question}\n{options}\nAnswer with the option's letter from the given choices directly."}
    )
    breakdowns = fixed({"task": "task", "subtask": "subtask"})

    def load(self, files: Sequence[Path]) -> list[Sample]:
        samples = []
        for path in files:
            for index, (where, row) in enumerate(read_rows(path)):
                candidates = require(row, "candidates", where)
                samples.append(
                    make_sample(
                        {
                            "id": f"{path.stem}/{index}",
                            "problem": require(row, "question", where),
                            "problem_type": "multiple choice",
                            "data_type": "video",
                            "videos": [f"videos/{require(row, 'video', where)}"],
                            "options": lettered(candidates),
                            "answer": letter_of_text(candidates, require(row, "answer", where), where),
                            "task": row.get("task") or path.stem,
                            "subtask": row.get("subtask"),
                            "start": row.get("start"),
                            "end": row.get("end"),
                        },
                        where=where,
                    )
                )
        return samples
