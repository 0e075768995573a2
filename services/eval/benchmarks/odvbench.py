"""ODV-Bench (MCG-NJU/StreamForest): online driving-video understanding, MVBench-style records.

Files: one JSON list per task (``*.json``) of {video, question, candidates [texts], answer (text),
start, end (the query window), task, subtask, subsubtask?}; ids are the file stem and record index.
Videos ``videos/<video>``. The protocol cuts each video to [start, end]: that window becomes the clip's
window, so only that span is sampled (option ``windows: false`` when the video root holds clips already
cut to it, as EasyVideoR1's ``<index>_<stem>_s<start>_e<end>.mp4``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from services.common.samples import Sample
from services.eval.benchmarks.base import Benchmark, fixed, make_sample
from services.eval.benchmarks.files import read_rows, require
from services.eval.benchmarks.mvbench import WindowOptions, clip_overrides
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
    official_readers = fixed({"multiple choice": "odvbench"})
    official_source = (
        "MCG-NJU/StreamForest · lmms_eval/tasks/odvbench/utils.py · mcq_acc + odvbench_aggregate_results "
        "(accuracy per task and subtask over the replies that are not empty)"
    )
    # odvbench_aggregate_results counts only results whose raw reply is not ""
    official_denominator = "nonempty"
    Options = WindowOptions

    def load(self, files: Sequence[Path]) -> list[Sample]:
        samples = []
        for path in files:
            for index, (where, row) in enumerate(read_rows(path)):
                candidates = require(row, "candidates", where)
                start, end = row.get("start"), row.get("end")
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
                            "start": start,
                            "end": end,
                            "video_params": clip_overrides(start, end, self.options),
                        },
                        where=where,
                    )
                )
        return samples
