"""Video-MME (BradyFU/Video-MME; HF lmms-lab/Video-MME): 900 videos × 3 four-option questions.

Files: ``videomme/test-*.parquet`` rows {video_id, duration, domain, sub_category, videoID, question_id,
task_type, question, options ["A. …"], answer "C"}, or the same rows as a JSON list, or the official
JSON template (a list of videos, each with ``questions``). Videos ``data/<videoID>.mp4``, subtitles
``subtitle/<videoID>.srt``. Reported with and without subtitles (``videomme_subtitles``); the official
rule keeps only subtitle lines shown at a sampled frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from services.common.samples import Sample
from services.eval.benchmarks.base import Benchmark, fixed, make_sample
from services.eval.benchmarks.errors import BenchmarkError
from services.eval.benchmarks.files import read_json, read_rows, require
from services.eval.benchmarks.registry import register
from services.eval.benchmarks.subtitles import frame_times, parse_srt, subtitles_at

_INSTRUCTION = (
    "Select the best answer to the following multiple-choice question based on the video. "
    "Respond with only the letter (A, B, C, or D) of the correct option.\n{question}\n{options}\n"
    "The best answer is:"
)


@register
class VideoMME(Benchmark):
    name = "videomme"
    title = "Video-MME (without subtitles)"
    annotations = ("videomme/*.parquet", "*.parquet", "*.json")
    # Qwen3-VL's official Video-MME settings (evaluation/VideoMME/infer_instruct.sh)
    video = fixed({"fps": 2.0, "min_frames": 4, "max_frames": 512})
    templates = fixed({"prompt": _INSTRUCTION})
    official_readers = fixed({"multiple choice": "videomme"})
    official_source = (
        "thanku-all/parse_answer · eval_your_results.py · extract_characters_regex + eval_your_results (the "
        "script BradyFU/Video-MME's README links; accuracy over the questions with a readable answer, per "
        "duration / category / task type)"
    )
    official_denominator = "readable"
    breakdowns = fixed(
        {
            "duration": "duration",
            "domain": "domain",
            "sub_category": "sub_category",
            "task_type": "task_type",
        }
    )

    def load(self, files: Sequence[Path]) -> list[Sample]:
        samples = []
        for path in files:
            for where, row in _rows(path):
                video_name = require(row, "videoID", where)
                samples.append(
                    make_sample(
                        {
                            "id": str(require(row, "question_id", where)),
                            "problem": require(row, "question", where),
                            "problem_type": "multiple choice",
                            "data_type": "video",
                            "videos": [f"data/{video_name}.mp4"],
                            "options": list(require(row, "options", where)),
                            "answer": require(row, "answer", where),
                            "video_id": str(row.get("video_id", "")),
                            "duration": row.get("duration"),
                            "domain": row.get("domain"),
                            "sub_category": row.get("sub_category"),
                            "task_type": row.get("task_type"),
                            "subtitle": f"subtitle/{video_name}.srt",
                        },
                        where=where,
                    )
                )
        return samples


@register
class VideoMMESubtitles(VideoMME):
    name = "videomme_subtitles"
    title = "Video-MME (with subtitles)"
    templates = fixed({"prompt": "This video's subtitles are listed below:\n{subtitles}\n" + _INSTRUCTION})

    def prompt_fields(self, sample: Sample, clip_meta: list[dict[str, Any]] | None) -> dict[str, Any]:
        fields = super().prompt_fields(sample, clip_meta)
        path = (self.root or Path(".")) / sample.extra("subtitle")
        cues = parse_srt(path.read_text(encoding="utf-8", errors="replace")) if path.is_file() else []
        fields["subtitles"] = "\n".join(subtitles_at(cues, frame_times(clip_meta)))
        return fields


def _rows(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """Flat question rows; the official template nests questions under each video."""
    if path.suffix.lower() == ".json":
        data = read_json(path)
        if isinstance(data, list) and data and isinstance(data[0], dict) and "questions" in data[0]:
            rows = []
            for i, video in enumerate(data):
                for j, question in enumerate(video.get("questions") or []):
                    if not isinstance(question, dict):
                        raise BenchmarkError(f"{path}#{i}.questions[{j}]: a question must be an object")
                    row = {k: v for k, v in video.items() if k != "questions"}
                    rows.append((f"{path}#{i}.questions[{j}]", {**row, **question}))
            return rows
    return read_rows(path)
