"""Scoring a benchmark's responses: every accuracy comes from the reward library (``score_items``: a bad
item fails alone), and a judge's verdict is itself read by the reward library. A sample without a
prediction scores 0 and is listed as missing."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from services.common.families import FamilyName
from services.common.samples import Sample
from services.eval.benchmarks import Benchmark, ItemResult
from services.reward import RewardConfig, score_items
from services.reward.official import score_official
from services.rollout.samples import continued_response


class Prediction(BaseModel):
    """One line of a predictions file: ``{"id", "response"}``, optionally the clip's frame-store metadata
    (needed to place boxes in Qwen2.5-VL's pixel space) and a judge's reply."""

    model_config = ConfigDict(extra="ignore")

    id: str
    response: str | None = Field(description="null: no answer (scored as missing)")
    clip_meta: list[dict[str, Any]] | None = None
    judge_response: str | None = Field(None, description="the LLM judge's reply, when one graded this answer")
    assistant_prefix: str | None = Field(
        None,
        description="the assistant-turn text the response continues; null: the benchmark's protocol "
        "prefix (MLVU's 'Best Option: ('), '': none (e.g. a thinking run)",
    )
    rubric_replies: dict[str, str] | None = Field(
        None, description="the judge's replies to the benchmark's rubric questions, by question name"
    )


def read_predictions(path: Path) -> dict[str, Prediction]:
    """``id`` → prediction from a JSONL file; a bad line or a repeated id is an error naming the line."""
    from services.common.json_lines import RecordError, loads_record

    out: dict[str, Prediction] = {}
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                prediction = Prediction.model_validate(loads_record(line))
            except RecordError as exc:
                raise ValueError(f"{path}:{n}: {exc}") from None
            except ValidationError as exc:
                problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
                raise ValueError(f"{path}:{n}: {problems}") from None
            if prediction.id in out:
                raise ValueError(f"{path}:{n}: a second prediction for id {prediction.id!r}")
            out[prediction.id] = prediction
    return out


def missing(sample: Sample) -> ItemResult:
    return ItemResult(id=sample.id, accuracy=0.0, missing=True, problem_type=sample.problem_type)


class Answer(NamedTuple):
    """One response to score. ``response`` is what the model generated; ``assistant_prefix`` the text
    its turn started with (read together with the response, stored apart from it)."""

    sample: Sample
    response: str
    clip_meta: list[dict[str, Any]] | None = None
    judge_response: str | None = None
    assistant_prefix: str | None = None
    rubric_replies: Mapping[str, str] | None = None


def score_one(
    benchmark: Benchmark,
    sample: Sample,
    response: str,
    family: FamilyName | str,
    clip_meta: list[dict[str, Any]] | None = None,
    judge_response: str | None = None,
    config: RewardConfig | None = None,
    assistant_prefix: str | None = None,
    rubric_replies: Mapping[str, str] | None = None,
    reader: str = "official",
) -> ItemResult:
    """The item result of one response (and, if the benchmark's judge graded it, the judge's replies)."""
    answer = Answer(sample, response, clip_meta, judge_response, assistant_prefix, rubric_replies)
    return score_many(benchmark, [answer], family, config, reader=reader)[0]


def official_details(
    benchmark: Benchmark, sample: Sample, view: dict[str, Any], answer: Answer, robust: ItemResult
) -> dict[str, Any]:
    """Both readers' verdicts for one scored answer: ``robust_accuracy`` and ``official`` (reader name,
    accuracy, what it read, readable, random). A judged item keeps the judge's verdict under both; a
    sample without an official reader is read by the robust one under both."""
    name = benchmark.official_reader(sample)
    if robust.judged or robust.error or name is None:
        return {}  # one reader decided: the accuracy is both readers'

    try:
        official = score_official(name, view, answer.response, answer.assistant_prefix or "")
    except ValueError as exc:  # the truth is unreadable: the robust reader already reported it
        return {"robust_accuracy": robust.accuracy, "official_error": str(exc)}
    return {
        "robust_accuracy": robust.accuracy,
        "official": {
            "reader": name,
            "accuracy": official.accuracy,
            "extracted": official.extracted,
            "readable": official.readable,
            "random": official.random,
        },
    }


def score_many(
    benchmark: Benchmark,
    items: Sequence[Answer | tuple[Sample, str, list[dict[str, Any]] | None, str | None]],
    family: FamilyName | str,
    config: RewardConfig | None = None,
    reader: str = "official",
) -> list[ItemResult]:
    """Answers (or ``(sample, response, clip_meta, judge_response)`` tuples) → item results, in order.
    Each result carries both readers' accuracies in its details; ``accuracy`` is ``reader``'s."""
    if reader not in ("official", "robust"):
        raise ValueError(f"unknown reader {reader!r}; known: official, robust")
    config = config or RewardConfig()
    answers = [Answer(*item) for item in items]
    views: list[dict[str, Any] | None] = []
    errors: list[str | None] = []
    for sample, _, clip_meta, *_ in answers:
        try:
            views.append(benchmark.reward_sample(sample, family, clip_meta))
            errors.append(None)
        except ValueError as exc:  # e.g. box answers without the clip's frame size
            views.append(None)
            errors.append(str(exc))
    pairs = [
        (view or {"problem_type": sample.problem_type}, continued_response(prefix, response))
        for (sample, response, _, _, prefix, _), view in zip(answers, views, strict=True)
    ]
    scored = iter(score_items(pairs, config))
    results = []
    for answer, view, error in zip(answers, views, errors, strict=True):
        sample, response, _, judge, _, replies = answer
        rule = next(scored)
        verdict = benchmark.read_judge(sample, judge) if judge is not None else None
        chosen = verdict if verdict is not None else rule
        rubric = benchmark.rubric_scores(sample, replies) if replies else None
        accuracy = rubric.accuracy if rubric is not None and rubric.accuracy is not None else chosen.accuracy
        item = ItemResult(
            id=sample.id,
            accuracy=0.0 if error else accuracy,
            format=rule.format,
            response=response,
            extracted=rule.extracted,
            problem_type=rule.problem_type or sample.problem_type,
            error=error or rule.error or (verdict.error if verdict else None),
            judged=verdict is not None or bool(rubric and rubric.details),
        )
        details: dict[str, Any] = {}
        if view is not None and not item.error:
            details = benchmark.item_details(sample, view, item)
        if rubric is not None and rubric.details:
            # the replies travel with the result, so a saved run is re-scored without the judge
            details = {**details, **rubric.details, "rubric_replies": dict(replies or {})}
        if view is not None:
            readers = official_details(benchmark, sample, view, answer, item)
            details = {**details, **readers}
            if reader == "official" and "official" in readers:
                item = item.model_copy(update={"accuracy": readers["official"]["accuracy"]})
        results.append(item.model_copy(update={"details": details}) if details else item)
    return results


def score_predictions(
    benchmark: Benchmark,
    samples: Sequence[Sample],
    predictions: Mapping[str, Prediction],
    family: FamilyName | str,
    config: RewardConfig | None = None,
    reader: str = "official",
) -> dict[str, ItemResult]:
    """Every sample's result; samples without a prediction are missing (scored 0)."""
    given = []
    for s in samples:
        p = predictions.get(s.id)
        if p is None or p.response is None:
            continue
        prefix = benchmark.assistant_prefix(s) if p.assistant_prefix is None else p.assistant_prefix
        given.append(Answer(s, p.response, p.clip_meta, p.judge_response, prefix, p.rubric_replies))
    results = {r.id: r for r in score_many(benchmark, given, family, config, reader=reader)}
    return {s.id: results.get(s.id) or missing(s) for s in samples}


def unknown_predictions(samples: Iterable[Sample], predictions: Mapping[str, Prediction]) -> list[str]:
    """Prediction ids that name no sample (a wrong file, or ids from another tool)."""
    ids = {s.id for s in samples}
    return sorted(p for p in predictions if p not in ids)
