"""Video-MME-v2 (MME-Benchmarks/Video-MME-v2): 800 videos × a group of 4 eight-option questions.

Files: ``test.parquet`` rows {video_id, question_id "001-1".."-4", question, options (one newline-joined
"A. …\\nB. …" string), answer A–H, level, group_type relevance|logic, group_structure, second_head,
third_head}. Videos ``data/<video_id>.mp4``, word-level subtitles ``subtitle/<video_id>.jsonl``. Scored
per group (non-linear, official rules below); plain question accuracy is reported beside it.

``subtitles: true`` is the official script's "concatenated" subtitle mode: every word of the transcript
in the prompt (its interleaved mode puts sentences between frames, which one clip cannot).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from services.common.samples import Sample
from services.eval.benchmarks.aggregate import percent, summary
from services.eval.benchmarks.base import Benchmark, fixed, make_sample
from services.eval.benchmarks.errors import BenchmarkError
from services.eval.benchmarks.files import read_rows, require
from services.eval.benchmarks.registry import register
from services.eval.benchmarks.results import Cell, ItemResult, Summary
from services.eval.benchmarks.subtitles import read_word_transcript

# score (percent) of a group by its number of correct answers / length of its correct chain
_SQUARES = {0: 0.0, 1: 100.0 / 16, 2: 100.0 * 4 / 16, 3: 100.0 * 9 / 16, 4: 100.0}
_LOGIC_MAPS = {
    "[1, 2, 3, 4]": _SQUARES,
    "[1, [2, 3], 4]": {0: 0.0, 1: 100.0 / 12, 2: 100.0 * 4 / 12, 3: 100.0 * 7 / 12, 4: 100.0},
    "[[1, 2], 3, 4]": {0: 0.0, 1: 100.0 / 10, 2: 100.0 * 2 / 10, 3: 100.0 * 5 / 10, 4: 100.0},
}


def relevance_score(correct: Sequence[bool]) -> float:
    """Quadratic in the number right: 0, 1, 2, 3, 4 of 4 → 0, 6.25, 25, 56.25, 100."""
    return _SQUARES[sum(correct)]


def logic_score(correct: Sequence[bool], structure: str) -> float:
    """By the length of the correct chain from the first question. ``[1, [2, 3], 4]``: questions 2 and 3
    are parallel, so Q1 right with Q2 wrong but Q3 right still reaches step 2; ``[[1, 2], 3, 4]``: Q1 and
    Q2 are parallel, so Q2 right alone counts as step 1."""
    key = str(ast.literal_eval(structure)) if isinstance(structure, str) else str(structure)
    if key not in _LOGIC_MAPS:
        raise BenchmarkError(f"unknown Video-MME-v2 group_structure {structure!r}")
    chain = 0
    for right in correct:
        if not right:
            break
        chain += 1
    if key == "[1, [2, 3], 4]" and chain == 1 and correct[2]:
        chain = 2
    elif key == "[[1, 2], 3, 4]" and chain == 0 and correct[1]:
        chain = 1
    return _LOGIC_MAPS[key][chain]


_INSTRUCT = (
    "Select the best answer to the following multiple-choice question based on the video. Respond with only "
    "the letter (A, B, C, D, E, F, G, or H) of the correct option."
)


class VideoMMEv2Options(BaseModel):
    model_config = ConfigDict(extra="forbid")

    subtitles: bool = Field(
        False, description="the video's whole transcript (subtitle/<video_id>.jsonl) before the question"
    )


@register
class VideoMMEv2(Benchmark):
    name = "videomme_v2"
    title = "Video-MME-v2"
    annotations = ("*.parquet", "*.json", "*.jsonl")
    video = fixed({"fps": None, "nframes": 64})  # the official default of 64 frames
    Options = VideoMMEv2Options
    prompt_options = ("subtitles",)
    # The official script (evaluation/test_video_mme_v2.py) sends the frames, this opening, then
    # "Question: {question}\n{options}\n" and the instruction; its two text parts are joined by a newline.
    templates = fixed(
        {
            "prompt": "These are the frames of a video.\nQuestion: {question}\n{options}\n" + _INSTRUCT,
            "subtitles": "These are the frames of a video. This video's subtitles are listed below:\n"
            "{subtitles}\nQuestion: {question}\n{options}\n" + _INSTRUCT,
        }
    )
    official_readers = fixed({"multiple choice": "videomme_v2"})
    official_source = (
        "MME-Benchmarks/Video-MME-v2 · evaluation/test_video_mme_v2.py · extract_characters_regex_v2 + "
        "get_final_rating (cal_relevance / cal_logic: the group score per video of 4 questions)"
    )

    def load(self, files: Sequence[Path]) -> list[Sample]:
        samples = []
        for path in files:
            for where, row in read_rows(path):
                video_id = str(require(row, "video_id", where))
                samples.append(
                    make_sample(
                        {
                            "id": str(require(row, "question_id", where)),
                            "problem": require(row, "question", where),
                            "problem_type": "multiple choice",
                            "data_type": "video",
                            "videos": [f"data/{video_id}.mp4"],
                            "options": [
                                line
                                for line in str(require(row, "options", where)).splitlines()
                                if line.strip()
                            ],
                            "answer": require(row, "answer", where),
                            "video_id": video_id,
                            "group_type": require(row, "group_type", where),
                            "group_structure": row.get("group_structure"),
                            "level": row.get("level"),
                            "second_head": row.get("second_head"),
                            "third_head": row.get("third_head"),
                        },
                        where=where,
                    )
                )
        return samples

    def template_for(self, sample: Sample) -> str:
        return self.templates["subtitles" if self.options.subtitles else "prompt"]

    def prompt_fields(self, sample: Sample, clip_meta: list[dict[str, Any]] | None) -> dict[str, Any]:
        fields = super().prompt_fields(sample, clip_meta)
        if self.options.subtitles:
            path = (self.root or Path(".")) / "subtitle" / f"{sample.extra('video_id')}.jsonl"
            fields["subtitles"] = read_word_transcript(path)
        return fields

    def aggregate(self, samples: Sequence[Sample], results: Mapping[str, ItemResult]) -> Summary:
        groups: dict[str, list[Sample]] = defaultdict(list)
        for sample in samples:
            groups[sample.extra("video_id")].append(sample)
        scored: list[tuple[float, dict[str, str]]] = []
        for video_id, members in sorted(groups.items()):
            members.sort(key=lambda s: int(s.id.rsplit("-", 1)[-1]))
            correct = [results[s.id].accuracy == 1.0 for s in members]
            kind = members[0].extra("group_type")
            if len(members) != 4:
                raise BenchmarkError(f"videomme_v2: video {video_id} has {len(members)} questions, not 4")
            if kind == "relevance":
                value = relevance_score(correct)
            elif kind == "logic":
                value = logic_score(correct, members[0].extra("group_structure"))
            else:
                raise BenchmarkError(f"videomme_v2: video {video_id} has unknown group_type {kind!r}")
            # the taxonomy is carried by the group's last question that has it
            labels = {"group_type": str(kind)}
            for field in ("level", "second_head", "third_head"):
                values = [s.extra(field) for s in members if s.extra(field) not in (None, "")]
                if values:
                    labels[field] = str(values[-1])
            scored.append((value, labels))
        breakdowns: dict[str, dict[str, Cell]] = {}
        for field in ("group_type", "level", "second_head", "third_head"):
            cells: dict[str, list[float]] = defaultdict(list)
            for value, labels in scored:
                if field in labels:
                    cells[labels[field]].append(value)
            breakdowns[field] = {
                k: Cell(score=sum(v) / len(v), count=len(v)) for k, v in sorted(cells.items())
            }
        group_score = sum(v for v, _ in scored) / len(scored) if scored else 0.0
        accuracy = percent(results[s.id].accuracy for s in samples)
        return summary(
            self.name,
            samples,
            results,
            metric="group score (non-linear, per video group of 4)",
            overall=group_score,
            metrics={"group_score": group_score, "accuracy": accuracy},
            breakdowns=breakdowns,
        )
