"""VideoMathQA (mbzuai-oryx/VideoMathQA): mathematical reasoning in videos, two question forms.

Files: HF MBZUAI/VideoMathQA ``mcq/test-*.parquet`` (five options) and ``multi_binary/test-*.parquet``
(each question as 4 two-option rows sharing its ``question_id``), rows {videoID, question_id, category,
question, options ["A. 24", …], answer, steps, length}. Videos ``videos/<videoID>.mp4``.
Multi-binary: a question counts only if ALL its binary rows are right. Headline: MCQ accuracy (the
multi-binary score is reported beside it; it is the headline when only multi-binary rows are given).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

from services.common.samples import Sample
from services.eval.benchmarks.aggregate import by_key, cell, summary
from services.eval.benchmarks.base import Benchmark, fixed, make_sample
from services.eval.benchmarks.files import read_rows, require
from services.eval.benchmarks.registry import register
from services.eval.benchmarks.results import Cell, ItemResult, Summary

# videomathqa_doc_to_text joins its parts with "\n" and the yaml's post_prompt starts with one more:
# a blank line before the closing instruction
_PROMPT = (
    "Select the best answer to the following multiple-choice question based on the video. Respond with the "
    "letter ({letters}) of the correct option.\n{question}\n{options}\n\nAnswer with the option's letter "
    "({letters}) from the given choices directly."
)


def _mode(path: Path, options: list) -> str:
    names = {part.lower() for part in path.parts}
    if {"multi_binary", "mbin"} & names or "multi_binary" in path.stem.lower():
        return "mbin"
    if "mcq" in names or "mcq" in path.stem.lower():
        return "mcq"
    return "mbin" if len(options) == 2 else "mcq"


def all_correct(groups: Mapping[str, list[float]]) -> dict[str, float]:
    """1 for a group whose items are all right (accuracy 1), else 0."""
    return {key: 1.0 if all(v == 1.0 for v in values) else 0.0 for key, values in groups.items()}


@register
class VideoMathQA(Benchmark):
    name = "videomathqa"
    title = "VideoMathQA"
    annotations = ("mcq/*.parquet", "multi_binary/*.parquet")
    templates = fixed(
        {
            "mcq": _PROMPT.replace("{letters}", "A, B, C, D or E"),
            "mbin": _PROMPT.replace("{letters}", "A or B"),
        }
    )
    official_readers = fixed({"multiple choice": "videomathqa"})
    official_source = (
        "EvolvingLMMs-Lab/lmms-eval · lmms_eval/tasks/videomathqa/utils.py · extract_characters_regex + "
        "videomathqa_mcq_aggregate_results / videomathqa_multi_binary_aggregate_results (the authors' lmms-eval task; MCQ "
        "accuracy; a multi-binary question counts when all its rows are right)"
    )

    def load(self, files: Sequence[Path]) -> list[Sample]:
        samples = []
        for path in files:
            seen: dict[str, int] = defaultdict(int)
            for where, row in read_rows(path):
                options = list(require(row, "options", where))
                mode = _mode(path, options)
                qid = str(require(row, "question_id", where))
                sample_id = f"mcq/{qid}" if mode == "mcq" else f"mbin/{qid}/{seen[qid]}"
                seen[qid] += 1
                samples.append(
                    make_sample(
                        {
                            "id": sample_id,
                            "problem": require(row, "question", where),
                            "problem_type": "multiple choice",
                            "data_type": "video",
                            "videos": [f"videos/{require(row, 'videoID', where)}.mp4"],
                            "options": options,
                            "answer": require(row, "answer", where),
                            "mode": mode,
                            "question_id": qid,
                            "category": row.get("category"),
                            "length": row.get("length"),
                        },
                        where=where,
                    )
                )
        return samples

    def template_for(self, sample: Sample) -> str:
        return self.templates[sample.extra("mode")]

    def aggregate(self, samples: Sequence[Sample], results: Mapping[str, ItemResult]) -> Summary:
        mcq = [s for s in samples if s.extra("mode") == "mcq"]
        mbin = [s for s in samples if s.extra("mode") == "mbin"]
        metrics: dict[str, float] = {}
        breakdowns: dict[str, dict[str, Cell]] = {}
        if mcq:
            metrics["mcq"] = cell(results[s.id].accuracy for s in mcq).score
            for field in ("length", "category"):
                breakdowns[f"mcq/{field}"] = by_key(mcq, results, lambda s, f=field: s.extra(f))
        if mbin:
            groups: dict[str, list[float]] = defaultdict(list)
            info: dict[str, Sample] = {}
            for s in mbin:
                groups[s.extra("question_id")].append(results[s.id].accuracy)
                info[s.extra("question_id")] = s
            verdicts = all_correct(groups)
            metrics["multi_binary"] = cell(verdicts.values()).score
            for field in ("length", "category"):
                per: dict[str, list[float]] = defaultdict(list)
                for qid, verdict in verdicts.items():
                    per[str(info[qid].extra(field))].append(verdict)
                breakdowns[f"multi_binary/{field}"] = {k: cell(v) for k, v in sorted(per.items())}
        headline = "mcq" if mcq else "multi_binary"
        return summary(
            self.name,
            samples,
            results,
            metric="MCQ accuracy" if mcq else "multi-binary accuracy (all 4 binary rows right)",
            overall=metrics.get(headline, 0.0),
            metrics=metrics,
            breakdowns=breakdowns,
        )
