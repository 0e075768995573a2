"""TempCompass (llyx97/TempCompass): temporal perception in four answer formats.

Files: the official ``questions/{multi-choice,yes_no,caption_matching,captioning}.json`` (video_id → dim
→ [{question, answer}]) or HF lmms-lab/TempCompass ``<format>/test-*.parquet`` rows {video_id, question,
answer, dim, (mc_question, mc_answer)}. Videos ``videos/<video_id>.mp4``.

Formats: multi-choice (options in the question, answer "A. …"), yes/no, caption matching ("Caption A:
…" / "Option 1: …" / "Sentence A: …" lines), captioning (the model writes a caption; officially an LLM
then answers the format's multiple-choice question from it). Without a judge a caption is read by the
reward library as an answer to that question (it must name exactly one option's text).
The headline is the mean of the four formats' accuracies.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from services.common.families import FamilyName
from services.common.samples import Sample
from services.eval.benchmarks.aggregate import accuracy_summary
from services.eval.benchmarks.base import Benchmark, fixed, make_sample
from services.eval.benchmarks.errors import BenchmarkError
from services.eval.benchmarks.files import read_json, read_rows, require
from services.eval.benchmarks.options import split_embedded
from services.eval.benchmarks.registry import register
from services.eval.benchmarks.results import ItemResult, Summary
from services.reward import RewardResult, score_items

FORMATS = ("multi-choice", "yes_no", "caption_matching", "captioning")
_CAPTION_LINE = re.compile(r"^\s*(?:Caption|Option|Sentence)\s+([A-Z0-9]+)\s*:\s*(.+?)\s*$", re.I)
_INFO_LINE = re.compile(r"^\s*(?:Information\s+)?\(?([A-Z])[.:)]\s*(.+?)\s*$")
_LEAD_LETTER = re.compile(r"^\s*\(?([A-Z])[.):]")


def _format_of(path: Path) -> str:
    for candidate in (path.stem, path.parent.name):
        normalised = candidate.replace("multi_choice", "multi-choice")
        if normalised in FORMATS:
            return normalised
    raise BenchmarkError(
        f"{path}: cannot tell the TempCompass format (file or folder named one of {FORMATS})"
    )


def _caption_options(question: str, where: str) -> tuple[list[str], list[str]]:
    """(labels as written, options "A. text") of a caption-matching question."""
    labels, options = [], []
    for line in question.splitlines():
        match = _CAPTION_LINE.match(line)
        if match:
            labels.append(match.group(1))
            options.append(f"{string.ascii_uppercase[len(options)]}. {match.group(2)}")
    if len(options) < 2:
        raise BenchmarkError(f"{where}: no 'Caption A: …' style options in the caption-matching question")
    return labels, options


def _info_options(question: str, where: str) -> list[str]:
    options = [
        f"{m.group(1)}. {m.group(2)}" for line in question.splitlines() if (m := _INFO_LINE.match(line))
    ]
    if len(options) < 2:
        raise BenchmarkError(f"{where}: no lettered options in the question")
    return options


def _lead_letter(answer: str, where: str) -> str:
    match = _LEAD_LETTER.match(answer)
    if not match:
        raise BenchmarkError(f"{where}: answer {answer[:60]!r} does not start with an option letter")
    return match.group(1)


@register
class TempCompass(Benchmark):
    name = "tempcompass"
    title = "TempCompass"
    annotations = ("questions/*.json", "*/test-*.parquet")
    video = fixed({"fps": 1.0, "max_pixels": 720 * 720})  # the official Qwen2-VL runner's settings
    # captioning keeps the robust reader (and the judge): its official rule is ChatGPT's; caption
    # matching's rule reads the original option lines (given to its reader by reward_sample)
    official_formats = fixed(
        {
            "multi-choice": "tempcompass_mc",
            "yes_no": "tempcompass_yes_no",
            "caption_matching": "tempcompass_caption",
        }
    )
    official_readers = fixed({"multiple choice": "tempcompass_mc", "boolean": "tempcompass_yes_no"})
    official_source = (
        "llyx97/TempCompass · eval_multi-choice.py · main / eval_yes_no.py · extract_pred / "
        "eval_caption_matching.py · eval_rule (their matching rules, as with --disable_llm: what needs ChatGPT "
        "scores 0; accuracy per format, the mean of formats)"
    )
    templates = fixed(
        {
            "multi-choice": "{question}\n{options}\nPlease directly give the best option:",
            "yes_no": "{question}\nPlease answer yes or no:",
            "caption_matching": "{original}\nPlease directly give the best option:",
            "captioning": "{original}",
        }
    )

    def load(self, files: Sequence[Path]) -> list[Sample]:
        samples = []
        for path in files:
            fmt = _format_of(path)
            for sample_id, where, record in _records(path):
                samples.append(self._sample(fmt, sample_id, where, record))
        return samples

    def _sample(self, fmt: str, sample_id: str, where: str, record: dict[str, Any]) -> Sample:
        question = str(require(record, "question", where))
        answer = str(require(record, "answer", where)).strip()
        video_id = str(require(record, "video_id", where))
        fields: dict[str, Any] = {
            "id": f"{fmt}/{sample_id}",
            "data_type": "video",
            "videos": [f"videos/{video_id}.mp4"],
            "format": fmt,
            "dim": record.get("dim"),
            "original": question,
        }
        if fmt == "multi-choice":
            problem, options = split_embedded(question, where)
            fields.update(problem=problem, problem_type="multiple choice", options=options)
            fields["answer"] = _lead_letter(answer, where)
        elif fmt == "yes_no":
            fields.update(problem=question, problem_type="boolean", answer=answer)
        elif fmt == "caption_matching":
            labels, options = _caption_options(question, where)
            match = _CAPTION_LINE.match(answer)
            if not match or match.group(1) not in labels:
                raise BenchmarkError(f"{where}: answer {answer[:60]!r} names none of the captions {labels}")
            first_line = question.splitlines()[0]
            fields.update(problem=first_line, problem_type="multiple choice", options=options)
            fields["answer"] = string.ascii_uppercase[labels.index(match.group(1))]
            fields["caption_answer"] = answer  # eval_rule compares the reply with the answer line
        else:  # captioning: scored as the multiple-choice question the caption must answer
            mc_question = record.get("mc_question") or question
            mc_answer = str(record.get("mc_answer") or answer)
            fields.update(problem=question, problem_type="multiple choice")
            fields["options"] = _info_options(mc_question, where)
            fields["answer"] = _lead_letter(mc_answer, where)
            fields["judge_question"] = mc_question
        return make_sample(fields, where=where)

    def official_reader(self, sample: Sample) -> str | None:
        return self.official_formats.get(sample.extra("format"))

    def reward_sample(
        self, sample: Sample, family: FamilyName | str, clip_meta: list[dict[str, Any]] | None
    ) -> dict[str, Any]:
        """Caption matching's official rule reads the question's option lines and the answer line."""
        fields = super().reward_sample(sample, family, clip_meta)
        if sample.extra("format") == "caption_matching":
            fields.update(
                caption_question=sample.extra("original"), caption_answer=sample.extra("caption_answer")
            )
        return fields

    def template_for(self, sample: Sample) -> str:
        return self.templates[sample.extra("format")]

    def prompt_fields(self, sample: Sample, clip_meta: list[dict[str, Any]] | None) -> dict[str, Any]:
        return {**super().prompt_fields(sample, clip_meta), "original": sample.extra("original")}

    def uses_judge(self, sample: Sample) -> bool:
        return sample.extra("format") == "captioning"

    def judge_prompt(self, sample: Sample, response: str) -> str:
        """The official captioning check: answer the format's question from the caption alone."""
        return (
            "Here is a caption that describes a video:\n"
            f"{response.strip()}\n\n"
            "Based only on the caption, answer the following multiple-choice question.\n"
            f"{sample.extra('judge_question')}\n"
            "Answer with the option's letter from the given choices directly."
        )

    def read_judge(self, sample: Sample, reply: str) -> RewardResult:
        """The judge's reply answers the sample's own multiple-choice question, read as any answer is."""
        view = {**self.prompt_view(sample), "id": f"{sample.id}#judge", "answer": sample.answer}
        return score_items([(view, reply)])[0]

    def aggregate(self, samples: Sequence[Sample], results: Mapping[str, ItemResult]) -> Summary:
        return accuracy_summary(
            self.name,
            samples,
            results,
            {
                "format": "format",
                "dim": "dim",
                "format/dim": lambda s: f"{s.extra('format')}/{s.extra('dim')}",
            },
            macro_over="format",
        )


def _records(path: Path) -> list[tuple[str, str, dict[str, Any]]]:
    """(id within the format, where, record) for the official nested JSON or flat HF rows."""
    if path.suffix.lower() == ".json":
        data = read_json(path)
        if not isinstance(data, dict):
            raise BenchmarkError(f"{path}: expected {{video_id: {{dim: [questions]}}}}")
        out = []
        for video_id, dims in data.items():
            if not isinstance(dims, dict):
                raise BenchmarkError(f"{path}: video {video_id!r} must map dimensions to question lists")
            for dim, questions in dims.items():
                for i, question in enumerate(questions if isinstance(questions, list) else [questions]):
                    where = f"{path}[{video_id}][{dim}][{i}]"
                    if not isinstance(question, dict):
                        raise BenchmarkError(f"{where}: a question must be an object")
                    out.append(
                        (f"{video_id}/{dim}/{i}", where, {**question, "video_id": video_id, "dim": dim})
                    )
        return out
    return [(str(i), where, row) for i, (where, row) in enumerate(read_rows(path))]
