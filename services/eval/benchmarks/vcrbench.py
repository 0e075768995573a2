"""VCR-Bench (zhishuifeiqian/VCR-Bench): video chain-of-thought reasoning, half multiple choice.

File: ``meta_info_video.json``, a list of {id, video_path, duration, dimension, question (options
appended for MC), "multiple-choice" bool, choices {"A": …}, answer: a letter, free text, "[s, e]" or
"[x1, y1, x2, y2]", reasoning [steps]}. Videos at ``video_path``.

Scoring follows the official rules with the reward library as the reader: a time interval is right at
IoU > 0.7, a box at IoU > 0.5 (boxes in pixels of the original frame), free text by an LLM judge when
configured (else the reward library's open-ended score).

``cot: true`` (with a judge) adds the official CoT step score: the judge matches the annotated
``reasoning`` steps against the response (recall) and splits the response into steps judged against
them (precision), with the official prompts; recall and precision are averaged over the items that
have them and F1 is taken of the two means, as ``eval_code/cau_total.py`` does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from services.common.samples import Sample
from services.eval.benchmarks.aggregate import by_key, percent, summary
from services.eval.benchmarks.base import Benchmark, JudgeQuestion, Rubric, fixed, make_sample
from services.eval.benchmarks.files import read_rows, require
from services.eval.benchmarks.options import split_embedded
from services.eval.benchmarks.registry import register
from services.eval.benchmarks.results import ItemResult, Summary

THRESHOLDS = {"temporal grounding": 0.7, "spatial grounding": 0.5}
# Both official judge prompts define the step types alike.
_STEP_TYPES = """1. Logical Inference Steps
   - Contains exactly one logical deduction
   - Must produce a new derived conclusion
   - Cannot be just a summary or observation

2. Video Description Steps
   - Pure visual observations
   - Only includes directly visible elements
   - No inferences or assumptions
   - Contains event time

3. Background Review Steps:
   - Repetition or review of the problem
   - Not directly related to solving the problem.
"""
_RECALL = """You are an expert system for verifying solutions to video-based problems. Your task is to match the ground truth middle steps with the provided solution.

INPUT FORMAT:
1. Problem: The original question/task
2. A Solution of a model
3. Ground Truth: Essential steps required for a correct answer

MATCHING PROCESS:

You need to match each ground truth middle step with the solution:

Match Criteria:
- The middle step should exactly match in the content or is directly entailed by a certain content in the solution
- All the details must be matched, including the specific value and content
- You should judge all the middle steps for whethere there is a match in the solution

Step Types:
{step_types}
OUTPUT FORMAT:
JSON array of judgments:
[
  {{
    "step": ground truth middle step,
    "step_type": "Video Description Steps|Logical Inference Steps|Background Review Steps",
    "judgment": "Matched" | "Unmatched",
  }}
]

ADDITIONAL RULES:
1. Only output the json array with no additional information.
2. Judge each ground truth middle step in order without omitting any step.

Here is the problem, answer, solution, and the ground truth middle steps:

[Problem]
{question}

[Answer]
{answer}

[Solution]
{solution}

[Ground Truth Information]
{steps}
"""
_RECALL = _RECALL.replace("{step_types}", _STEP_TYPES)
_PRECISION = """
# Task Overview
Given a solution with multiple reasoning steps for an video-based problem, reformat it into well-structured steps and evaluate their correctness.

# Step 1: Reformatting the Solution
Convert the unstructured solution into distinct reasoning steps while:
- Preserving all original content and order
- Not adding new interpretations
- Not omitting any steps

## Step Types
{step_types}
## Step Requirements
- Each step must be atomic (one conclusion per step)
- No content duplication across steps
- Initial analysis counts as background information
- Final answer determination counts as logical inference

# Step 2: Evaluating Correctness
Evaluate each step against:

## Ground Truth Matching
For video descriptions:
- Key elements must match ground truth descriptions

For logical inferences:
- Conclusion must EXACTLY match or be DIRECTLY entailed by ground truth

For Background review:
-  Without special circumstances are deemed to be redundant

## Reasonableness Check (if no direct match)
If Step:
- Premises must not contradict any ground truth or correct answer
- Logic is valid
- Conclusion must not contradict any ground truth
- Conclusion must support or be neutral to correct answer
- Helpful in solving the problem, non-redundant steps
this Step be viewed as matched.

## Judgement Categories
- "Match": Aligns with ground truth
- "Wrong": Contradictory with ground truth
- "Redundant": Redundant steps that do not help solve the problem

# Output Requirements
1. The output format MUST be in valid JSON format without ANY other content.
2. For highly repetitive patterns, output it as a single step.
3. Output maximum 35 steps. Always include the final step that contains the answer.

Here is the json output format:
## Output Format
[
  {{
    "step": "reformatted the solution step",
    "step_type": "Video Description Steps|Logical Inference Steps|Background Review Steps",
    "reasons_for_judgment": "The reason for judging the matching result of the step in the solution based on Ground Truth Information. Sufficient evidence needs to be found in Ground Truth Information to determine the correctness of the reformatted the solution step. The video event description time error is no more than 3 seconds and is considered correct. If the solution step does not specify the time, it is considered wrong.",
    "judgment": "Matched|Wrong|Redundant",
  }}
]

Here is the problem, and the solution that needs to be reformatted to steps:

[Problem]
{question}

[Solution]
{solution}

[Ground Truth Information]
{steps}
"""
_PRECISION = _PRECISION.replace("{step_types}", _STEP_TYPES)
# the steps that count in the official recall and precision (background review steps do not)
_COUNTED = ("Video Description Steps", "Logical Inference Steps")
_JSON_BLOCK = re.compile(r"```json\s*(.*?)```", re.S)


def judged_steps(reply: str) -> list[dict[str, Any]] | None:
    """The judge's step list: the ```json block (what the official reader takes), else the outermost
    [...]; None when neither is a JSON list of objects."""
    block = _JSON_BLOCK.search(reply)
    text = block.group(1) if block else reply[reply.find("[") : reply.rfind("]") + 1]
    try:
        steps = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        return None
    return steps


def _matched(judgment: Any) -> bool:
    return str(judgment).strip() in ("Matched", "Match")  # the precision prompt names both spellings


def step_recall(steps: list[dict[str, Any]]) -> float | None:
    """Share of the annotated video-description and inference steps the response matches (None: the
    judge listed none of those)."""
    counted = [s for s in steps if s.get("step_type") in _COUNTED]
    return sum(_matched(s.get("judgment")) for s in counted) / len(counted) if counted else None


def step_precision(steps: list[dict[str, Any]]) -> tuple[float | None, float | None]:
    """(precision, efficiency) of the response's own steps: matched / (matched + wrong) over
    video-description and inference steps (redundant ones count in neither), and the share of all
    steps that are not redundant."""
    counted = [s for s in steps if s.get("step_type") in _COUNTED]
    matched = sum(_matched(s.get("judgment")) for s in counted)
    wrong = sum(str(s.get("judgment")).strip() == "Wrong" for s in counted)
    redundant = sum(str(s.get("judgment")).strip() == "Redundant" for s in steps)
    precision = matched / (matched + wrong) if matched + wrong else None
    efficiency = (len(steps) - redundant) / len(steps) if steps else None
    return precision, efficiency


class VCRBenchOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cot: bool = Field(False, description="the judge's CoT step score (two long judge replies per item)")


def duration_bucket(seconds: Any) -> str | None:
    if not isinstance(seconds, int | float):
        return None
    return "0-60s" if seconds < 60 else "60-300s" if seconds < 300 else "300s+"


def _open_answer(answer: str) -> tuple[str, Any]:
    """(problem type, answer) of an open question: an interval, a box or free text."""
    try:
        value = json.loads(answer)
    except (json.JSONDecodeError, TypeError):
        return "open-ended", answer
    if isinstance(value, list) and all(isinstance(v, int | float) for v in value):
        if len(value) == 2:
            return "temporal grounding", {"time": value}
        if len(value) == 4:
            return "spatial grounding", {"boxes": value}
    return "open-ended", answer


@register
class VCRBench(Benchmark):
    name = "vcrbench"
    title = "VCR-Bench"
    annotations = ("meta_info_video.json", "*.json")
    templates = fixed(
        {
            "multiple choice": "{question}\n{options}\nAnswer with the option's letter from the given choices directly.",
            "open": "{question}\nAnswer the question directly.",
        }
    )
    judged_types = frozenset({"open-ended"})
    # the official evaluation has GPT-4o extract every answer before the IoU and judge rules
    official_source = (
        "zhishuifeiqian/VCR-Bench · eval_code/eval.py · extract_answer + match_answer (GPT-4o extracts the "
        "answer; intervals right at IoU > 0.7, boxes at IoU > 0.5, the rest judged; eval_code/cau_acc.py · "
        "calculate_accuracy) — the robust reader extracts"
    )
    Options = VCRBenchOptions
    rubric_max_tokens = 2048  # the official judge calls allow 2048 tokens for the step lists

    def load(self, files: Sequence[Path]) -> list[Sample]:
        samples = []
        for path in files:
            for where, row in read_rows(path):
                question = str(require(row, "question", where))
                answer = str(require(row, "answer", where)).strip()
                fields: dict[str, Any] = {
                    "id": str(require(row, "id", where)),
                    "data_type": "video",
                    "videos": [require(row, "video_path", where)],
                    "dimension": row.get("dimension"),
                    "duration": row.get("duration"),
                    "duration_bucket": duration_bucket(row.get("duration")),
                    "reasoning": row.get("reasoning"),
                    "question_text": question,
                    "answer_text": answer,
                }
                if row.get("multiple-choice"):
                    choices = row.get("choices")
                    if choices:
                        problem = question.split("\nA.")[0].strip() if "\nA." in question else question
                        options: Any = choices
                    else:
                        problem, options = split_embedded(question, where)
                    fields.update(
                        problem=problem, problem_type="multiple choice", options=options, answer=answer
                    )
                else:
                    problem_type, value = _open_answer(answer)
                    fields.update(problem=question, problem_type=problem_type, answer=value)
                samples.append(make_sample(fields, where=where))
        return samples

    def template_for(self, sample: Sample) -> str:
        return self.templates["multiple choice" if sample.problem_type == "multiple choice" else "open"]

    def rubric_questions(self, sample: Sample, response: str) -> dict[str, JudgeQuestion]:
        steps = sample.extra("reasoning")
        if not self.options.cot or not steps:
            return {}
        # the annotated steps one per line; question and answer as the file writes them (MC options
        # inside the question), as the official script fills its prompts
        annotated = "\n".join(map(str, steps)) if isinstance(steps, list) else str(steps)
        fields = {"question": sample.extra("question_text"), "solution": response, "steps": annotated}
        return {
            "recall": JudgeQuestion(_RECALL.format(answer=sample.extra("answer_text"), **fields)),
            "precision": JudgeQuestion(_PRECISION.format(**fields)),
        }

    def rubric_scores(self, sample: Sample, replies: Mapping[str, str]) -> Rubric:
        """Step recall, precision and efficiency of one response; a reply that is not a step list
        leaves its figures out (listed under ``cot_unreadable``)."""
        details: dict[str, Any] = {}
        unreadable = []
        for name in ("recall", "precision"):
            if name not in replies:
                continue
            steps = judged_steps(replies[name])
            if steps is None:
                unreadable.append(name)
            elif name == "recall":
                details["cot_recall"] = step_recall(steps)
            else:
                details["cot_precision"], details["cot_efficiency"] = step_precision(steps)
        if unreadable:
            details["cot_unreadable"] = unreadable
        return Rubric(accuracy=None, details=details)

    def item_details(
        self, sample: Sample, reward_sample: dict[str, Any], result: ItemResult
    ) -> dict[str, Any]:
        threshold = THRESHOLDS.get(sample.problem_type)
        if threshold is None:
            return {}
        return {"iou": result.accuracy, "correct": 1.0 if result.accuracy > threshold else 0.0}

    def aggregate(self, samples: Sequence[Sample], results: Mapping[str, ItemResult]) -> Summary:
        def value(result: ItemResult) -> float:
            return result.details.get("correct", result.accuracy)

        cells = {
            name: by_key(samples, results, lambda s, f=field: s.extra(f), value)
            for name, field in (("dimension", "dimension"), ("duration", "duration_bucket"))
        }
        cells["answer_type"] = by_key(samples, results, lambda s: s.problem_type, value)
        overall = percent(value(results[s.id]) for s in samples)
        metrics, notes = {"accuracy": overall}, []
        cot = {
            name: [results[s.id].details.get(f"cot_{name}") for s in samples]
            for name in ("precision", "recall", "efficiency")
        }
        cot = {name: [v for v in values if v is not None] for name, values in cot.items()}
        if cot["precision"] or cot["recall"]:
            means = {name: percent(values) for name, values in cot.items() if values}
            p, r = means.get("precision", 0.0), means.get("recall", 0.0)
            metrics.update({f"cot_{name}": v for name, v in means.items()})
            metrics["cot_f1"] = 2 * p * r / (p + r) if p + r else 0.0
            unreadable = sum(1 for s in samples if results[s.id].details.get("cot_unreadable"))
            if unreadable:
                notes.append(f"{unreadable} items' CoT judge replies were not step lists (left out)")
        if self.options.cot:
            unjudged = sum(
                1 for s in samples if s.extra("reasoning") and "rubric_replies" not in results[s.id].details
            )
            if unjudged:
                notes.append(
                    f"{unjudged} items have no CoT judge replies (no judge, judge failed or missing); "
                    "the CoT scores are over the others"
                )
        return summary(
            self.name, samples, results, metric="accuracy", overall=overall,
            metrics=metrics, breakdowns=cells, notes=notes,
        )  # fmt: skip
