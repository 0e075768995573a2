"""MotionBench (THUDM/MotionBench): fine-grained motion questions, options written in the question.

File: ``video_info.meta.jsonl``, one line per video {key, video_path, video_type, question_type,
qa: [{uid, question "…\\nA. …\\nB. …", answer "C" | "NA"}]}. Test-split answers are "NA" (scored by the
official leaderboard only): they are skipped, as the official script does. Videos ``videos/<video_path>``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from services.common.samples import Sample
from services.eval.benchmarks.base import Benchmark, fixed, make_sample
from services.eval.benchmarks.errors import BenchmarkError
from services.eval.benchmarks.files import read_jsonl, require
from services.eval.benchmarks.options import split_embedded
from services.eval.benchmarks.registry import register

log = logging.getLogger(__name__)


@register
class MotionBench(Benchmark):
    name = "motionbench"
    title = "MotionBench"
    annotations = ("video_info.meta.jsonl", "*.jsonl")
    templates = fixed(
        {"prompt": "{question}\n{options}\nAnswer with only the option letter (A, B, C, D, E, or F)."}
    )
    breakdowns = fixed({"question_type": "question_type", "video_type": "video_type"})
    official_readers = fixed({"multiple choice": "motionbench"})
    official_source = (
        "THUDM/MotionBench · motionbench/utils/answer_util.py · polish_answer + "
        "motionbench/metrics/compute_accuracy.py · compute_accuracy (accuracy over the questions with an "
        "answer; per question_type)"
    )
    official_denominator = "answered"

    def load(self, files: Sequence[Path]) -> list[Sample]:
        samples, skipped = [], 0
        for path in files:
            for line, video in read_jsonl(path):
                where = f"{path}:{line}"
                if not isinstance(video, dict) or not isinstance(video.get("qa"), list):
                    raise BenchmarkError(f"{where}: expected a video object with a 'qa' list")
                video_path = require(video, "video_path", where)
                for j, qa in enumerate(video["qa"]):
                    at = f"{where}.qa[{j}]"
                    answer = str(require(qa, "answer", at)).strip()
                    if answer.upper() == "NA":
                        skipped += 1
                        continue
                    problem, options = split_embedded(str(require(qa, "question", at)), at)
                    samples.append(
                        make_sample(
                            {
                                "id": str(require(qa, "uid", at)),
                                "problem": problem,
                                "problem_type": "multiple choice",
                                "data_type": "video",
                                "videos": [f"videos/{video_path}"],
                                "options": options,
                                "answer": answer,
                                "question_type": video.get("question_type"),
                                "video_type": video.get("video_type"),
                            },
                            where=at,
                        )
                    )
        if skipped:
            log.info("motionbench: skipped %d questions without a public answer (NA)", skipped)
        return samples
