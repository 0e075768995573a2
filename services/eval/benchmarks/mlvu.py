"""MLVU (JUNJIE99/MLVU): multi-task long-video understanding; the headline M-Avg is the mean of the
multiple-choice tasks' accuracies.

Files: dev ``json/<n>_<task>.json`` lists of {video, duration, question, candidates [texts], answer
(text), question_type}, videos ``video/<n>_<task>/<video>``; test ``test_question.json`` items
{question_id, question_type, video, candidates, answer}, videos ``video/<video>``. The generation
tasks (sub-scene captioning, summarisation: no candidates) need a GPT judge for G-Avg and are skipped.
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
class MLVU(Benchmark):
    name = "mlvu"
    title = "MLVU (M-Avg)"
    annotations = ("json/*.json", "test_question.json")
    video = fixed({"fps": None, "nframes": 64})
    system = (
        "Carefully watch this video and pay attention to every detail. Based on your observations, select "
        "the best option that accurately addresses the question."
    )
    templates = fixed({"prompt": "Question: {question}\nOptions:\n{options}\nOnly give the best option."})
    # the official prompt opens the answer; the model continues with the letter and ")"
    answer_prefix = "Best Option: ("
    option_style = "({letter}) {text}"
    breakdowns = fixed({"task": "task"})
    macro_over = "task"

    def load(self, files: Sequence[Path]) -> list[Sample]:
        samples = []
        for path in files:
            test = path.name == "test_question.json"
            for index, (where, row) in enumerate(read_rows(path)):
                candidates = row.get("candidates")
                if not candidates or row.get("answer") is None:
                    continue  # generation tasks (judge-scored G-Avg) and unanswered items
                answer = str(row["answer"]).strip()
                video = require(row, "video", where)
                samples.append(
                    make_sample(
                        {
                            "id": str(row["question_id"]) if test else f"{path.stem}/{index}",
                            "problem": require(row, "question", where),
                            "problem_type": "multiple choice",
                            "data_type": "video",
                            "videos": [f"video/{video}" if test else f"video/{path.stem}/{video}"],
                            "options": lettered(candidates),
                            "answer": _answer_letter(candidates, answer, where),
                            "task": require(row, "question_type", where),
                            "duration": row.get("duration"),
                        },
                        where=where,
                    )
                )
        return samples


def _answer_letter(candidates: list, answer: str, where: str) -> str:
    """Test answers may be a letter or the option text; dev answers are the text."""
    if len(answer) == 1 and answer.isupper() and answer not in [str(c).strip() for c in candidates]:
        return answer
    return letter_of_text(candidates, answer, where)
