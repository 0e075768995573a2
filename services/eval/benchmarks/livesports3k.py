"""LiveSports-3K QA track (showlab/livecc; HF stdKonjac/LiveSports-3K): four-option sports questions.

Files: ``LiveSports-3K-QA.json`` (a list) or the earlier ``LiveSports-3K-QA.csv``, records {video_id,
question_id, q_type (Who/When/What), OCR (0/1), question, options (letter-prefixed; a list, or its
Python/JSON text in the CSV), answer (letter), begin, end}. Videos ``videos/<video_id>.mp4`` (whole
broadcasts); the event window [begin, end] becomes the clip's window, so only the event is sampled, as
in the official cut clips (option ``windows: false`` when the video root holds clips already cut to it).
The official LiveCC scorer compares answer-letter likelihoods; a generated answer is read here instead.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from services.common.samples import Sample
from services.eval.benchmarks.base import Benchmark, fixed, make_sample
from services.eval.benchmarks.errors import BenchmarkError
from services.eval.benchmarks.files import read_rows, require
from services.eval.benchmarks.mvbench import WindowOptions, clip_overrides
from services.eval.benchmarks.registry import register


def _options(raw: Any, where: str) -> list[str]:
    if isinstance(raw, str):
        text = raw.strip()
        try:
            raw = json.loads(text)
        except json.JSONDecodeError:
            try:
                raw = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                raise BenchmarkError(f"{where}: options {text[:60]!r} are not a list") from None
    if not isinstance(raw, list):
        raise BenchmarkError(f"{where}: options must be a list")
    return [str(o) for o in raw]


@register
class LiveSports3K(Benchmark):
    name = "livesports3k"
    title = "LiveSports-3K (QA)"
    annotations = ("LiveSports-3K-QA.json", "LiveSports-3K-QA.csv", "*.json", "*.csv")
    templates = fixed({"prompt": "{question}\n{options}\nPlease select the correct answer."})
    breakdowns = fixed({"q_type": "q_type", "ocr": "ocr"})
    # no text reader to follow: the official score is the argmax over the option letters' logits
    official_source = (
        "showlab/livecc · evaluation/distributed_mcq_predictor.py · preprocess_logits_for_metrics + "
        "evaluation/livesports3kqa/distributed_evaluate_livesports3kqa.py · evaluate_livesports3kqa_results "
        "(letter likelihoods, not text: the robust reader reads the generated answer)"
    )
    Options = WindowOptions

    def load(self, files: Sequence[Path]) -> list[Sample]:
        samples = []
        for path in files:
            for where, row in read_rows(path):
                video = str(require(row, "video_id", where))
                begin, end = row.get("begin"), row.get("end")
                samples.append(
                    make_sample(
                        {
                            "id": f"{video}/{require(row, 'question_id', where)}",
                            "problem": require(row, "question", where),
                            "problem_type": "multiple choice",
                            "data_type": "video",
                            "videos": [f"videos/{video}.mp4"],
                            "options": _options(require(row, "options", where), where),
                            "answer": require(row, "answer", where),
                            "q_type": row.get("q_type"),
                            "ocr": str(row.get("OCR")) if row.get("OCR") is not None else None,
                            "begin": begin,
                            "end": end,
                            "video_params": clip_overrides(begin, end, self.options),
                        },
                        where=where,
                    )
                )
        return samples
