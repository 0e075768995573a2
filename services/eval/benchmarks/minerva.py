"""MINERVA (Google): complex multi-step video reasoning, five options.

File: ``minerva.json``, a list of {key, video_id, question, answer (free text), answer_choice_0 …
answer_choice_4, answer_id (0-based), reasoning, "question type" (comma-separated skills), split,
category}. Videos ``videos/<video_id>.mp4``. A question counts in every skill it lists.
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
class Minerva(Benchmark):
    name = "minerva"
    title = "MINERVA"
    annotations = ("minerva.json", "*.json")
    video = fixed({"fps": None, "nframes": 64})
    templates = fixed(
        {"prompt": "{question}\n{options}\nAnswer with the option's letter from the given choices directly."}
    )
    breakdowns = fixed({"skill": "skills", "split": "split", "category": "category"})
    # google-deepmind/neptune releases MINERVA's data (minerva.json) without a scorer: lmms-eval's
    # task is the public rule-based one
    official_readers = fixed({"multiple choice": "minerva"})
    official_source = (
        "EvolvingLMMs-Lab/lmms-eval · lmms_eval/tasks/minerva/utils.py · _extract_choice_letter + "
        "minerva_process_results (the release, google-deepmind/neptune, has no scorer; accuracy)"
    )

    def load(self, files: Sequence[Path]) -> list[Sample]:
        samples = []
        for path in files:
            for where, row in read_rows(path):
                choices = [
                    row[f"answer_choice_{i}"] for i in range(5) if row.get(f"answer_choice_{i}") is not None
                ]
                skills = [s.strip() for s in str(row.get("question type") or "").split(",") if s.strip()]
                samples.append(
                    make_sample(
                        {
                            "id": str(require(row, "key", where)),
                            "problem": require(row, "question", where),
                            "problem_type": "multiple choice",
                            "data_type": "video",
                            "videos": [f"videos/{require(row, 'video_id', where)}.mp4"],
                            "options": lettered(choices),
                            "answer": letter_of_index(require(row, "answer_id", where), len(choices), where),
                            "skills": skills,
                            "split": row.get("split"),
                            "category": row.get("category"),
                        },
                        where=where,
                    )
                )
        return samples
