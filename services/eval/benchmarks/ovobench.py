"""OVO-Bench (JoeLeelyf/OVO-Bench): online video understanding at a query time.

File: ``ovo_bench_new.json``, a list of items. Backward-tracing (EPM, HLD, ASI) and real-time (STU, OJR,
ATR, ACR, OCR, FPD) items {id, task, video, realtime, question, options [texts], gt (0-based)} are
multiple choice on the video cut at the query time (``chunked_videos/<id>.mp4``). Forward items are
probed at several times (``test_info``), each probe a sample on ``chunked_videos/<id>_<i>.mp4``: REC
(repetition count: "How many times did they <activity>?", a number), SSR (is this step happening now?
type 1 = yes) and CRR (is there enough to answer yet? type 1 = yes).

Score: accuracy per task → mean of tasks per category (backward, realtime, forward) → mean of the three.
The official reader counts a backward/real-time answer right when the right letter occurs anywhere in
the response; the reward library's stricter reader (one option named) is used here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from services.common.samples import Sample
from services.eval.benchmarks.aggregate import by_key, macro, summary
from services.eval.benchmarks.base import Benchmark, fixed, make_sample
from services.eval.benchmarks.errors import BenchmarkError
from services.eval.benchmarks.files import read_rows, require
from services.eval.benchmarks.options import letter_of_index, lettered
from services.eval.benchmarks.registry import register
from services.eval.benchmarks.results import ItemResult, Summary

CATEGORIES = {
    "backward": ("EPM", "ASI", "HLD"),
    "realtime": ("OCR", "ACR", "ATR", "STU", "FPD", "OJR"),
    "forward": ("REC", "SSR", "CRR"),
}
CATEGORY_OF = {task: category for category, tasks in CATEGORIES.items() for task in tasks}

_ANSWER_ONLY = "Do not include any additional text or explanation in your response.\n"
_YES_NO = "Answer only with “Yes” or “No”.\n" + _ANSWER_ONLY


@register
class OVOBench(Benchmark):
    name = "ovobench"
    title = "OVO-Bench"
    annotations = ("ovo_bench_new.json", "*.json")
    video = fixed({"fps": None, "nframes": 64})
    official_readers = fixed(
        {"multiple choice": "ovobench_choice", "counting": "ovobench_count", "boolean": "ovobench_yes_no"}
    )
    official_source = (
        "JoeLeelyf/OVO-Bench · utils/OVOBenchScore.py · OVOBenchOfflineScore.calculate_score_backward_realtime "
        "/ calculate_score_forward / score (task means; category means; the mean of the three)"
    )
    templates = fixed(
        {
            "choice": "\nQuestion: {question}\nOptions:\n{options}\n\nRespond only with the letter corresponding to "
            "your chosen option (e.g., A, B, C). \n" + _ANSWER_ONLY,
            "REC": "\nYou're watching a video in which people may perform a certain type of action repetively. \n"
            "The person performing this kind of action are referred to as 'they' in the following statement.\n"
            "You're task is to count how many times have different people in the video perform this kind of action "
            "in total.\nOne complete motion counts as one. \nNow, answer the following question: {question}\n"
            "Provide your answer as a single number (e.g., 0, 1, 2, 3…) indicating the total count.\n"
            + _ANSWER_ONLY,
            "SSR": "\nYou're watching a tutorial video which contain a sequential of steps. \nThe following is one "
            "step from the whole procedures: \n{question}\nYour task is to determine if the man or woman in the "
            "video is currently performing this step.\n" + _YES_NO,
            "CRR": "\nYou're responsible of answering questions based on the video content. \nThe following question "
            "are relevant to the latest frames, i.e. the end of the video.\n{question}\nDecide whether existing "
            "visual content, especially latest frames, i.e. frames that near the end of the video, provide enough "
            "information for answering the question.\n" + _YES_NO,
        }
    )
    option_style = "{letter}. {text};"
    option_sep = " "

    def load(self, files: Sequence[Path]) -> list[Sample]:
        samples = []
        for path in files:
            for where, item in read_rows(path):
                task = str(require(item, "task", where))
                if task not in CATEGORY_OF:
                    raise BenchmarkError(f"{where}: unknown OVO-Bench task {task!r}")
                if CATEGORY_OF[task] == "forward":
                    samples.extend(self._probes(item, task, where))
                else:
                    samples.append(self._choice(item, task, where))
        return samples

    def _choice(self, item: dict[str, Any], task: str, where: str) -> Sample:
        item_id = str(require(item, "id", where))
        options = require(item, "options", where)
        return make_sample(
            {
                "id": item_id,
                "problem": require(item, "question", where),
                "problem_type": "multiple choice",
                "data_type": "video",
                "videos": [f"chunked_videos/{item_id}.mp4"],
                "options": lettered(options),
                "answer": letter_of_index(require(item, "gt", where), len(options), where),
                "task": task,
                "category": CATEGORY_OF[task],
                "realtime": item.get("realtime"),
            },
            where=where,
        )

    def _probes(self, item: dict[str, Any], task: str, where: str) -> list[Sample]:
        item_id = str(require(item, "id", where))
        probes = require(item, "test_info", where)
        out = []
        for i, probe in enumerate(probes):
            at = f"{where}.test_info[{i}]"
            if task == "REC":
                question = f"How many times did they {require(item, 'activity', where)}?"
                kind, answer = "counting", require(probe, "count", at)
            else:
                question = str(
                    require(probe, "step", at) if task == "SSR" else require(item, "question", where)
                )
                kind, answer = "boolean", "yes" if int(require(probe, "type", at)) == 1 else "no"
            out.append(
                make_sample(
                    {
                        "id": f"{item_id}/{i}",
                        "problem": question,
                        "problem_type": kind,
                        "data_type": "video",
                        "videos": [f"chunked_videos/{item_id}_{i}.mp4"],
                        "answer": answer,
                        "task": task,
                        "category": "forward",
                        "realtime": probe.get("realtime"),
                    },
                    where=at,
                )
            )
        return out

    def template_for(self, sample: Sample) -> str:
        return self.templates["choice" if sample.extra("category") != "forward" else sample.extra("task")]

    def aggregate(self, samples: Sequence[Sample], results: Mapping[str, ItemResult]) -> Summary:
        tasks = by_key(samples, results, lambda s: s.extra("task"))
        categories = {
            category: macro({t: tasks[t] for t in names if t in tasks})
            for category, names in CATEGORIES.items()
            if any(t in tasks for t in names)
        }
        overall = sum(categories.values()) / len(categories) if categories else 0.0
        return summary(
            self.name,
            samples,
            results,
            metric="mean of the category scores (each the mean of its task accuracies)",
            overall=overall,
            metrics={f"{c}_avg": v for c, v in categories.items()},
            breakdowns={"task": tasks},
        )
