"""LongVideoBench (longvideobench/LongVideoBench): referring reasoning over videos of 8 s to 1 h.

Files: ``lvb_val.json`` (a list of {id, video_path, question, candidates [4-5 texts], correct_choice
(0-based), duration_group, question_category, topic_category, level, …}) or the Parquet release with
``option0``…``option4`` ("N/A" when absent). The test file has no ``correct_choice``: such items are
skipped. Videos ``videos/<video_path>``, subtitles ``subtitles/<subtitle_path>`` (JSON cues).

``subtitles: true`` (``bench.longvideobench.options.subtitles``) follows the official interleaved
input as far as one clip allows: the cues the official rule keeps for the sampled frames, in time
order, before "Question: …" (officially they sit between the frames; the rollout sends the video as
one clip, so they follow it).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from services.common.data_roots import inside_roots
from services.common.samples import Sample
from services.common.settings import get_settings
from services.eval.benchmarks.base import Benchmark, fixed, make_sample
from services.eval.benchmarks.errors import BenchmarkError
from services.eval.benchmarks.files import read_rows, require
from services.eval.benchmarks.options import letter_of_index, lettered
from services.eval.benchmarks.registry import register
from services.eval.benchmarks.subtitles import Cue, frame_times, lvb_subtitles_at, read_lvb_subtitles

_ANSWER = "Answer with the option's letter from the given choices directly."


class LongVideoBenchOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    subtitles: bool = Field(False, description="the subtitle cues at the sampled frames before the question")


@register
class LongVideoBench(Benchmark):
    name = "longvideobench"
    title = "LongVideoBench"
    annotations = ("lvb_val.json", "*.parquet")
    video = fixed({"fps": None, "nframes": 64})
    Options = LongVideoBenchOptions
    prompt_options = ("subtitles",)
    templates = fixed(
        {
            # longvideobench_dataset.py's __getitem__: "Question: " + question, the options, the instruction
            "prompt": "Question: {question}\n{options}\n" + _ANSWER,
            # the official dataloader's text after the interleaved frames and cues
            "subtitles": "{subtitles}Question: {question}\n{options}\n" + _ANSWER,
        }
    )
    official_readers = fixed({"multiple choice": "longvideobench"})
    official_source = (
        "EvolvingLMMs-Lab/lmms-eval · lmms_eval/tasks/longvideobench/utils.py · parse_multi_choice_response + "
        "evaluate_longvideobench (the release ships a dataloader, no scorer; lmms-eval's parser is the "
        "authors' own, per its docstring; accuracy over all items)"
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
                            "subtitle_path": row.get("subtitle_path"),
                            "subtitle_offset": row.get("starting_timestamp_for_subtitles"),
                            "video_duration": row.get("duration"),
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
            lines = lvb_subtitles_at(self.subtitle_cues(sample), frame_times(clip_meta))
            fields["subtitles"] = "".join(f"{line}\n" for line in lines)
        return fields

    def subtitle_cues(self, sample: Sample) -> list[Cue]:
        """The item's cues on the video's clock; an item without ``subtitle_path`` has none, a named
        file that is missing is an error (the sample is recorded with it)."""
        name = sample.extra("subtitle_path")
        if not name:
            return []
        path = (self.root or Path(".")) / "subtitles" / name
        roots = get_settings().data_roots
        if roots:
            # the name comes from the annotation file: with data roots configured it must stay inside
            try:
                path = inside_roots(path.resolve(), [r.resolve() for r in roots])
            except ValueError as exc:
                raise BenchmarkError(f"longvideobench: subtitle_path of {sample.id}: {exc}") from None
        if not path.is_file():
            raise FileNotFoundError(
                f"longvideobench: subtitle file {path} (subtitle_path of {sample.id}) not found"
            )
        duration = sample.extra("video_duration")
        return read_lvb_subtitles(
            path, float(sample.extra("subtitle_offset") or 0.0), float(duration) if duration else None
        )
