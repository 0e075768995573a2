"""MLVU (JUNJIE99/MLVU): multi-task long-video understanding; the headline M-Avg is the mean of the
multiple-choice tasks' accuracies.

Files: dev ``json/<n>_<task>.json`` lists of {video, duration, question, candidates [texts], answer
(text), question_type}, videos ``video/<n>_<task>/<video>``; test ``test_question.json`` items
{question_id, question_type, video, candidates, answer}, videos ``video/<video>``.

Generation tasks (``generation: true``; dev ``8_sub_scene`` "subPlot" and ``9_summary`` "summary": no
candidates, a reference ``answer``, sub-scene items ``scoring_points``) are asked with the official
open-ended system prompt and graded by the judge with the official rubrics: sub-scene captioning by
accuracy against the scoring points and relevance to the question, summaries by completeness and
reliability against the reference, each 1-5 and summed (out of 10). G-Avg is the mean of the two
tasks' mean totals. Without a judge they are scored by the reward library's open-ended score and G-Avg
is not reported.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from services.common.samples import Sample
from services.eval.benchmarks.aggregate import accuracy_summary, summary
from services.eval.benchmarks.base import Benchmark, JudgeQuestion, Rubric, fixed, make_sample
from services.eval.benchmarks.files import read_rows, require
from services.eval.benchmarks.options import letter_of_text, lettered
from services.eval.benchmarks.registry import register
from services.eval.benchmarks.results import ItemResult, Summary

_GENERATION_SYSTEM = (
    "Carefully watch this video and pay attention to every detail. Based on your observations, answer the "
    "given questions."
)
_SSC_RUBRIC = """##TASK DESCRIPTION:
You are required to evaluate a respondent's answer based on a provided question, some scoring points, and the respondent's answer. You should provide two scores. The first is the accuracy score, which should range from 1 to 5. The second is the relevance score, which should also range from 1 to 5. Below are the criteria for each scoring category.
##ACCURACY Scoring Criteria:
Evaluate the respondent's answer against specific scoring points as follows:
Score 1: The response completely misses the scoring point.
Score 3: The response mentions content related to the scoring point but is not entirely correct.
Score 5: The response accurately addresses the scoring point.
Calculate the average score across all scoring points to determine the final accuracy score.
##RELEVANCE Scoring Criteria:
Assess how the respondent's answer relates to the original question:
Score 1: The response is completely off-topic from the question.
Score 2: The response is partially related to the question but contains a significant amount of irrelevant content.
Score 3: The response primarily addresses the question, but the respondent seems uncertain about their own answer.
Score 4: The response mostly addresses the question and the respondent appears confident in their answer.
Score 5: The response is fully focused on addressing the question with no irrelevant content and demonstrates complete certainty.
----
##INSTRUCTION:
1. Evaluate Accuracy: First, assess and score each scoring point based on the respondent's answer. Calculate the average of these scores to establish the final accuracy score. Provide a detailed rationale before assigning your score.
2. Evaluate RELEVANCE: Assess the relevance of the respondent's answer to the question. Note that when evaluating relevance, the correctness of the answer is not considered; focus solely on how relevant the answer is to the question. Provide a comprehensive rationale before assigning your score.
3. Output Scores in JSON Format: Present the scores in JSON format as follows:
{'score_accuracy': score_acc, 'score_relevance': score_rele, 'total_score': score_acc + score_rele}"""
_VS_RUBRIC = """##TASK DESCRIPTION:
You are required to evaluate the performance of the respondent in the video summarization task based on the standard answer and the respondent's answer. You should provide two scores. The first is the COMPLETENESS score, which should range from 1 to 5. The second is the RELIABILITY score, which should also range from 1 to 5. Below are the criteria for each scoring category:
##COMPLETENESS Scoring Criteria:
The completeness score focuses on whether the summary covers all key points and main information from the video.
Score 1: The summary hardly covers any of the main content or key points of the video.
Score 2: The summary covers some of the main content and key points but misses many.
Score 3: The summary covers most of the main content and key points.
Score 4: The summary is very comprehensive, covering most to nearly all of the main content and key points.
Score 5: The summary completely covers all the main content and key points of the video.
##RELIABILITY Scoring Criteria:
The reliability score evaluates the correctness and clarity of the video summary. It checks for factual errors, misleading statements, and contradictions with the video content. If the respondent's answer includes details that are not present in the standard answer, as long as these details do not conflict with the correct answer and are reasonable, points should not be deducted.
Score 1: Contains multiple factual errors and contradictions; presentation is confusing.
Score 2: Includes several errors and some contradictions; needs clearer presentation.
Score 3: Generally accurate with minor errors; minimal contradictions; reasonably clear presentation.
Score 4: Very accurate with negligible inaccuracies; no contradictions; clear and fluent presentation.
Score 5: Completely accurate with no errors or contradictions; presentation is clear and easy to understand.
----
##INSTRUCTION:
1. Evaluate COMPLETENESS: First, analyze the respondent's answer according to the scoring criteria, then provide an integer score between 1 and 5 based on sufficient evidence.
2. Evaluate RELIABILITY: First, analyze the respondent's answer according to the scoring criteria, then provide an integer score between 1 and 5 based on sufficient evidence.
3. Output Scores in JSON Format: Present the scores in JSON format as follows:
{'score_completeness': score_comp, 'score_reliability': score_reli, 'total_score': score_comp + score_reli}"""
_ASK = "Please score the respondent's answer according to the steps in the Instructions. You must end with a JSON dict to store the scores."
# task (question_type) → (rubric, the two score names it asks for)
_RUBRICS = {
    "subPlot": (_SSC_RUBRIC, ("score_accuracy", "score_relevance")),
    "summary": (_VS_RUBRIC, ("score_completeness", "score_reliability")),
}
_SHORT = {"subPlot": "SSC", "summary": "VS"}


def judge_score(reply: str, name: str) -> float | None:
    """The number the judge gave ``name`` in its closing dict (quoted with ' or "), or None."""
    found = re.findall(rf"""['"]{name}['"]\s*:\s*(\d+(?:\.\d+)?)""", reply)
    return float(found[-1]) if found else None


class MLVUOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    generation: bool = Field(
        False, description="also the judge-scored generation tasks (sub-scene captioning, summary: G-Avg)"
    )


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
    templates = fixed(
        {
            # dev: evaluation/models/videollava/choice_bench.py main (videochat2/choice_bench.py's
            # question_prompt alike) writes qa_template's rstripped options, a newline, then the
            # instruction. (The model-agnostic multiple_choice_evaluation/choice_bench.py has only a
            # commented-out template, without the newline, and says models join the parts differently.)
            "prompt": "Question: {question}\nOptions:\n{options}\nOnly give the best option.",
            # test: evaluation_test/test_bench.py main, the same text
            "test": "Question: {question}\nOptions:\n{options}\nOnly give the best option.",
            "generation": "{question}",
        }
    )
    # the official prompt opens the answer; the model continues with the letter and ")"
    answer_prefix = "Best Option: ("
    official_readers = fixed({"multiple choice": "mlvu"})
    official_source = (
        "JUNJIE99/MLVU · evaluation/multiple_choice_evaluation/choice_bench.py · check_ans + main "
        "(accuracy per task; M-Avg the mean of tasks); test split: evaluation_test/test_bench.py · main; "
        "prompt: evaluation/models/videollava/choice_bench.py · main"
    )
    option_style = "({letter}) {text}"
    breakdowns = fixed({"task": "task"})
    macro_over = "task"
    Options = MLVUOptions
    rubric_max_tokens = 1024  # the official judge writes a rationale before its scores

    def load(self, files: Sequence[Path]) -> list[Sample]:
        samples = []
        for path in files:
            test = path.name == "test_question.json"
            for index, (where, row) in enumerate(read_rows(path)):
                candidates = row.get("candidates")
                if row.get("answer") is None:
                    continue  # unanswered test items
                answer = str(row["answer"]).strip()
                video = require(row, "video", where)
                fields = {
                    "id": str(row["question_id"]) if test else f"{path.stem}/{index}",
                    "problem": require(row, "question", where),
                    "data_type": "video",
                    "videos": [f"video/{video}" if test else f"video/{path.stem}/{video}"],
                    "task": require(row, "question_type", where),
                    "duration": row.get("duration"),
                    "split": "test" if test else "dev",
                }
                if candidates:
                    fields.update(
                        problem_type="multiple choice",
                        options=lettered(candidates),
                        answer=_answer_letter(candidates, answer, where),
                    )
                elif self.options.generation:
                    if fields["task"] not in _RUBRICS:
                        continue  # a generation task without an official rubric here (test SSC/VS)
                    fields.update(
                        problem_type="open-ended", answer=answer, scoring_points=row.get("scoring_points")
                    )
                else:
                    continue  # generation tasks: judge-scored G-Avg, `generation: true`
                samples.append(make_sample(fields, where=where))
        return samples

    @staticmethod
    def generative(sample: Sample) -> bool:
        return sample.problem_type != "multiple choice"

    def template_for(self, sample: Sample) -> str:
        if self.generative(sample):
            return self.templates["generation"]
        return self.templates["test" if sample.extra("split") == "test" else "prompt"]

    def official_reader(self, sample: Sample) -> str | None:
        if self.generative(sample):
            return None
        return "mlvu_test" if sample.extra("split") == "test" else "mlvu"

    def system_prompt(self, sample: Sample, thinking: bool = False) -> str | None:
        if thinking:
            return None
        return _GENERATION_SYSTEM if self.generative(sample) else self.system

    def assistant_prefix(self, sample: Sample, thinking: bool = False) -> str | None:
        return None if self.generative(sample) else super().assistant_prefix(sample, thinking)

    def prompt_version(self, sample: Sample, thinking: bool = False) -> str:
        version = super().prompt_version(sample, thinking)
        if thinking or not self.generative(sample):
            return version
        return hashlib.sha256(f"{version}\n{_GENERATION_SYSTEM}".encode()).hexdigest()[:12]

    def rubric_questions(self, sample: Sample, response: str) -> dict[str, JudgeQuestion]:
        if not self.generative(sample):
            return {}
        task = sample.extra("task")
        rubric, _ = _RUBRICS[task]
        question = sample.problem.replace("\n", "")  # as the official script sends it
        if task == "subPlot":
            points = sample.extra("scoring_points") or sample.answer
            asked = f"Question: {question}\nScoring Points: {points}\nRespondent's Answer: {response}"
        else:
            asked = f"Standard Answer: {sample.answer}\nRespondent's Answer: {response}"
        return {_SHORT[task]: JudgeQuestion(prompt=f"{_ASK}\n{asked}", system=rubric)}

    def rubric_scores(self, sample: Sample, replies: Mapping[str, str]) -> Rubric:
        """Both scores from the judge's closing dict; one missing counts 0 (as the official totals do)."""
        task = sample.extra("task")
        if not self.generative(sample) or _SHORT[task] not in replies:
            return super().rubric_scores(sample, replies)
        _, names = _RUBRICS[task]
        reply = replies[_SHORT[task]]
        scores = {name: judge_score(reply, name) for name in names}
        details = {name: value or 0.0 for name, value in scores.items()}
        details["total"] = sum(details.values())
        if None in scores.values():
            details["unreadable"] = True
        return Rubric(accuracy=min(details["total"] / 10.0, 1.0), details=details)

    def aggregate(self, samples: Sequence[Sample], results: Mapping[str, ItemResult]) -> Summary:
        """M-Avg over the multiple-choice tasks; with generation tasks, G-Avg (out of 10) from the
        judge's totals: the mean of the sub-scene and summary tasks' mean totals."""
        choice = [s for s in samples if not self.generative(s)]
        generated = [s for s in samples if self.generative(s)]
        base = accuracy_summary(self.name, choice, results, self.breakdowns, macro_over=self.macro_over)
        if not generated:
            return base
        metrics, notes = dict(base.metrics), list(base.notes)
        judged = [s for s in generated if "total" in results[s.id].details]
        if len(judged) < len(generated):
            notes.append(
                f"{len(generated) - len(judged)} of {len(generated)} generation items have no judge scores "
                "(no judge configured, missing or failed); G-Avg is over the judged ones only"
            )
        task_means = {}
        for task, short in _SHORT.items():
            rows = [results[s.id].details for s in judged if s.extra("task") == task]
            if rows:
                task_means[short] = sum(r["total"] for r in rows) / len(rows)
                for name in _RUBRICS[task][1]:
                    metrics[f"{short} {name.removeprefix('score_')}"] = sum(r[name] for r in rows) / len(rows)
        metrics.update(task_means)
        if task_means:
            metrics["G-Avg"] = sum(task_means.values()) / len(task_means)
        unreadable = sum(1 for s in judged if results[s.id].details.get("unreadable"))
        if unreadable:
            notes.append(f"{unreadable} judge replies lacked a score (counted 0, as officially)")
        return summary(
            self.name, samples, results, metric=base.metric, overall=base.overall, metrics=metrics,
            breakdowns=base.breakdowns, notes=notes,
        )  # fmt: skip


def _answer_letter(candidates: list, answer: str, where: str) -> str:
    """Test answers may be a letter or the option text; dev answers are the text."""
    if len(answer) == 1 and answer.isupper() and answer not in [str(c).strip() for c in candidates]:
        return answer
    return letter_of_text(candidates, answer, where)
