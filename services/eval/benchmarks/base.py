"""What a benchmark adapter is: official annotation files in, shared ``Sample``s out, the benchmark's
prompt protocol, and its own aggregation of per-item scores (which come from the reward library).

An adapter is one class in one module, registered by name (:mod:`services.eval.benchmarks.registry`).
Paths: ``annotations`` are globs relative to the benchmark's root folder (``<data-root>/<name>``), and
every ``Sample.videos`` path is relative to that root (or to a configured video root).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, NamedTuple

from pydantic import BaseModel, ConfigDict

from services.common.families import FamilyName
from services.common.samples import Sample, reward_fields, to_sample
from services.eval.benchmarks.aggregate import accuracy_summary
from services.eval.benchmarks.errors import BenchmarkError
from services.eval.benchmarks.options import render
from services.eval.benchmarks.results import ItemResult, Summary
from services.reward import render_prompt, template_version
from services.reward.judge import judge_prompt, read_verdict
from services.reward.result import RewardResult


class JudgeQuestion(NamedTuple):
    """One question put to the judge model: the user turn and an optional system turn."""

    prompt: str
    system: str | None = None


class Rubric(NamedTuple):
    """What a benchmark reads from its rubric replies: the item's accuracy when the rubric decides it
    (MLVU's generation scores), else None (the answer's own score stands), and per-item figures."""

    accuracy: float | None
    details: dict[str, Any]


def fixed(values: Mapping[str, Any]) -> Mapping[str, Any]:
    """A read-only mapping for an adapter's class-level tables (shared by every instance)."""
    return MappingProxyType(dict(values))


class NoOptions(BaseModel):
    """Adapters without options of their own; unknown keys are an error."""

    model_config = ConfigDict(extra="forbid")


class Benchmark:
    """Subclasses set the class attributes and implement :meth:`load`. The defaults render
    ``templates["prompt"]`` with ``{question}`` and ``{options}`` (in ``option_style``) and aggregate
    accuracy with the ``breakdowns`` (name → extra field), macro-averaged over ``macro_over`` if set."""

    name: ClassVar[str]
    title: ClassVar[str]
    # Globs (relative to the benchmark root) that find the official annotation files.
    annotations: ClassVar[tuple[str, ...]]
    # Protocol defaults of the clip parameters (VideoParams fields except family).
    video: ClassVar[Mapping[str, Any]] = fixed({"fps": None, "nframes": 32})
    Options: ClassVar[type[BaseModel]] = NoOptions
    # Options that change the prompt (e.g. ``subtitles``): hashed into the prompt template version.
    prompt_options: ClassVar[tuple[str, ...]] = ()
    # The protocol's prompt texts; hashed into the prompt version recorded in every result's manifest.
    templates: ClassVar[Mapping[str, str]] = fixed({})
    system: ClassVar[str | None] = None
    # Text the protocol writes at the start of the assistant turn (MLVU's "Best Option: ("): the model
    # continues it, and scoring reads the answer from prefix + response.
    answer_prefix: ClassVar[str | None] = None
    option_style: ClassVar[str] = "{letter}. {text}"
    option_sep: ClassVar[str] = "\n"
    breakdowns: ClassVar[Mapping[str, str]] = fixed({})
    macro_over: ClassVar[str | None] = None
    # Problem types whose answers an LLM judge grades when one is configured.
    judged_types: ClassVar[frozenset[str]] = frozenset()
    # Reply tokens a rubric question needs (a rationale, then the scores); the judge config's
    # max_tokens applies when larger.
    rubric_max_tokens: ClassVar[int] = 0
    # The official protocol. ``official_readers``: problem type → a reader registered in
    # services.reward.official (the benchmark's released rule, re-implemented); a type without one is
    # read by the robust reader under both protocols. ``official_source``: "repo · path · function" of
    # the official reader and aggregation (docs/evaluation.md quotes it). ``official_denominator``:
    # "all" items, "readable" (Video-MME: only answers its reader read), "answered" (LVBench,
    # MotionBench: only questions with a prediction), "nonempty" (ODV-Bench: its aggregation drops an
    # empty reply; the rest count, unreadable ones wrong) or "all_but_empty_open" (Video-MMMU: every
    # item counts, a missing, failed, empty or unreadable answer wrong, except an empty reply to an
    # item without an official reader, an open question, which the official parser turns into an
    # "API Error" its aggregation drops).
    official_readers: ClassVar[Mapping[str, str]] = fixed({})
    official_source: ClassVar[str] = ""
    official_denominator: ClassVar[str] = "all"

    def __init__(self, root: Path | None = None, **options: Any) -> None:
        #: the benchmark's root folder (subtitles and other side files are found under it)
        self.root = Path(root) if root is not None else None
        self.options = self.Options.model_validate(options)

    # --- files -------------------------------------------------------------------------------------------

    def find_annotations(self, path: Path) -> list[Path]:
        """The annotation files at ``path``: the file itself, or every match of :attr:`annotations` under
        a folder. Nothing found is an error naming the globs tried."""
        path = Path(path)
        if path.is_file():
            return [path]
        if not path.is_dir():
            raise BenchmarkError(f"{self.name}: annotations {path} do not exist")
        found = sorted({p for pattern in self.annotations for p in path.glob(pattern) if p.is_file()})
        if not found:
            raise BenchmarkError(
                f"{self.name}: no annotation files under {path} (looked for {', '.join(self.annotations)})"
            )
        return found

    def load(self, files: Sequence[Path]) -> list[Sample]:
        """Every scorable sample of the official annotation ``files``, with stable ids."""
        raise NotImplementedError

    def load_checked(self, files: Sequence[Path]) -> list[Sample]:
        """:meth:`load`, refusing duplicate ids (two records sharing one id would share one result)."""
        samples = self.load(files)
        seen: set[str] = set()
        for sample in samples:
            if sample.id in seen:
                raise BenchmarkError(
                    f"{self.name}: duplicate sample id {sample.id!r} in {list(map(str, files))}"
                )
            seen.add(sample.id)
        return samples

    # --- prompts -----------------------------------------------------------------------------------------

    def prompt(
        self,
        sample: Sample,
        family: FamilyName | str,
        thinking: bool = False,
        clip_meta: list[dict[str, Any]] | None = None,
    ) -> str:
        """The user prompt: the benchmark's protocol, or (``thinking``) the shared thinking template that
        training uses, so a model trained with it is evaluated in its own format."""
        if thinking:
            return render_prompt(self.prompt_view(sample), "thinking")
        return self.instruct_prompt(sample, clip_meta)

    def prompt_view(self, sample: Sample) -> dict[str, Any]:
        """What the shared templates read: problem, options and type (never the boxes of the answer)."""
        view = {"problem": sample.problem, "problem_type": sample.problem_type, "answer": "-"}
        if sample.options is not None:
            view["options"] = sample.options
        return view

    def template_for(self, sample: Sample) -> str:
        return self.templates["prompt"]

    def prompt_fields(self, sample: Sample, clip_meta: list[dict[str, Any]] | None) -> dict[str, Any]:
        options = render(sample.options, self.option_style, self.option_sep) if sample.options else ""
        return {"question": sample.problem, "options": options}

    def instruct_prompt(self, sample: Sample, clip_meta: list[dict[str, Any]] | None) -> str:
        if not self.templates:
            return render_prompt(self.prompt_view(sample), "instruct")
        return self.template_for(sample).format(**self.prompt_fields(sample, clip_meta))

    def system_prompt(self, sample: Sample, thinking: bool = False) -> str | None:
        return None if thinking else self.system

    def assistant_prefix(self, sample: Sample, thinking: bool = False) -> str | None:
        """The assistant turn's opening text for ``sample`` (none under the shared thinking template,
        whose own format the answer follows)."""
        return None if thinking else self.answer_prefix

    def prompt_version(self, sample: Sample, thinking: bool = False) -> str:
        """Hash of the prompt templates used for ``sample`` (the manifest's prompt template version)."""
        if thinking or not self.templates:
            return template_version(sample.problem_type, "thinking" if thinking else "instruct")
        protocol: dict[str, Any] = {"templates": dict(self.templates), "system": self.system}
        # absent when unset: earlier runs' versions stay valid
        if self.answer_prefix is not None:
            protocol["answer_prefix"] = self.answer_prefix
        if self.prompt_options:
            protocol["options"] = {name: getattr(self.options, name) for name in self.prompt_options}
        text = json.dumps(protocol, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    # --- scoring -----------------------------------------------------------------------------------------

    def reward_sample(
        self, sample: Sample, family: FamilyName | str, clip_meta: list[dict[str, Any]] | None
    ) -> dict[str, Any]:
        """The reward library's view of ``sample``, with boxes in ``family``'s coordinate space.

        Breakdown fields stay out: a benchmark's ``duration`` ("short") or ``width`` is not the clip
        extent the reward library reads under those names (that comes from ``clip_meta``)."""
        core = Sample.model_validate(sample.model_dump(include=set(Sample.model_fields)))
        return reward_fields(core, family, clip_meta)

    def item_details(
        self, sample: Sample, reward_sample: dict[str, Any], result: ItemResult
    ) -> dict[str, Any]:
        """Extra per-item figures the aggregation needs beyond accuracy (none by default)."""
        return {}

    def uses_judge(self, sample: Sample) -> bool:
        """Whether a configured LLM judge grades ``sample`` (its verdict replaces the rule-based score)."""
        return sample.problem_type in self.judged_types

    def judge_prompt(self, sample: Sample, response: str) -> str:
        """What the judge model is asked about one response (VideoReasonBench's official judge wording)."""
        return judge_prompt(sample.problem, sample.answer, response)

    def read_judge(self, sample: Sample, reply: str) -> RewardResult:
        """The judge's verdict on one answer, read strictly as training reads it (services/reward/judge.py
        ``read_verdict``): "Correct" 1, "Incorrect" 0; a hedged, negated or qualified reply reads nothing
        and scores 0."""
        verdict = read_verdict(reply)
        extracted = None if verdict is None else ("Correct" if verdict else "Incorrect")
        return RewardResult(
            overall=verdict or 0.0, accuracy=verdict or 0.0, format=float(verdict is not None),
            extracted=extracted, problem_type="judge verdict",
        )  # fmt: skip

    def rubric_questions(self, sample: Sample, response: str) -> dict[str, JudgeQuestion]:
        """Named judge questions grading ``response`` on the benchmark's own rubric (MLVU's generation
        scores, VCR-Bench's CoT steps), asked when a judge is configured; none by default."""
        return {}

    def rubric_scores(self, sample: Sample, replies: Mapping[str, str]) -> Rubric:
        """The judge's rubric ``replies`` (by question name) read into scores; nothing by default (a
        benchmark without rubric questions has nothing to read in them)."""
        return Rubric(accuracy=None, details={})

    def official_reader(self, sample: Sample) -> str | None:
        """The official reader of ``sample``'s answers, or None (the robust reader reads them)."""
        return self.official_readers.get(sample.problem_type)

    def aggregate(self, samples: Sequence[Sample], results: Mapping[str, ItemResult]) -> Summary:
        """Overall score and the benchmark's own breakdowns over ``samples`` (each has a result)."""
        return accuracy_summary(self.name, samples, results, self.breakdowns, macro_over=self.macro_over)

    def summarise(
        self, samples: Sequence[Sample], results: Mapping[str, ItemResult], reader: str = "official"
    ) -> Summary:
        """The summary under ``reader``'s protocol ("official": the official readers' accuracies over the
        official denominator; "robust": the robust reader over every item), with ``robust_overall``,
        ``unreadable`` and the official bookkeeping beside it."""
        if reader not in READERS:
            raise ValueError(f"unknown reader {reader!r}; known: {', '.join(READERS)}")
        robust = {k: reader_view(r, "robust") for k, r in results.items()}
        robust_summary = self.aggregate(samples, robust)
        random_items = sorted(k for k, r in results.items() if _official(r).get("random"))
        unreadable = sum(1 for s in samples if _official(results[s.id]).get("readable") is False)
        details: dict[str, Any] = {
            "official_reader": sorted({n for s in samples if (n := self.official_reader(s))}),
            "official_random_items": random_items,
        }
        if reader == "robust":
            main = robust_summary
        else:
            official = {k: reader_view(r, "official") for k, r in results.items()}
            kept = [s for s in samples if self._officially_counted(results[s.id])]
            details["official_left_out"] = len(samples) - len(kept)
            main = self.aggregate(kept, official)
            # the bookkeeping covers every sample, whatever the official denominator left out
            items = [results[s.id] for s in samples]
            main = main.model_copy(
                update={
                    "count": len(samples),
                    "missing": [r.id for r in items if r.missing],
                    "errors": {r.id: r.error for r in items if r.error},
                    "judged": sum(1 for r in items if r.judged),
                }
            )
            stale = sum(
                1
                for s in samples
                if self.official_reader(s)
                and not results[s.id].missing
                and not _official(results[s.id])
                and not results[s.id].error
            )
            notes = list(main.notes)
            robust_only = sum(1 for s in samples if self.official_reader(s) is None)
            if robust_only:
                notes.append(
                    f"{robust_only} items have no official rule reader (judged or likelihood-scored "
                    "officially, or no scorer released): the robust reader reads them under both protocols"
                )
            if details["official_left_out"]:
                notes.append(
                    f"{details['official_left_out']} items left out of the official denominator "
                    f"({self.official_denominator} items only, as the official script counts)"
                )
            if stale:
                notes.append(
                    f"{stale} results were scored before official readers existed: their robust score "
                    "stands in (re-score with `reelrl eval score`)"
                )
            main = main.model_copy(update={"notes": notes})
        # the reward functions' figures (services/eval/reward_functions.py), when any scored an item
        from services.eval.reward_functions import summarise_functions

        functions = summarise_functions(results[s.id] for s in samples)
        metrics, notes = dict(main.metrics), list(main.notes)
        if functions is not None:
            metrics.update(functions.metrics)
            notes += functions.notes
            details["reward_function_errors"] = functions.errors
        return main.model_copy(
            update={
                "reader": reader,
                "robust_overall": robust_summary.overall,
                "unreadable": unreadable,
                "metrics": metrics,
                "notes": notes,
                "details": {**main.details, **details},
            }
        )

    def _officially_counted(self, result: ItemResult) -> bool:
        if self.official_denominator == "all":
            return True
        if self.official_denominator == "all_but_empty_open":
            return not (result.response == "" and result.problem_type not in self.official_readers)
        if result.missing or result.error:
            return False
        if self.official_denominator == "answered":
            return True
        if self.official_denominator == "nonempty":
            # only answers the official reader read (open answers keep the robust reader and count)
            return not (_official(result) and result.response == "")
        return _official(result).get("readable", True) is not False


READERS = ("official", "robust")


def _official(result: ItemResult) -> dict[str, Any]:
    return result.details.get("official") or {}


def reader_view(result: ItemResult, reader: str) -> ItemResult:
    """``result`` with the accuracy ``reader`` gave it (results carry both readers' accuracies; one
    scored before official readers existed has only its own)."""
    if reader == "robust":
        accuracy = result.details.get("robust_accuracy", result.accuracy)
    else:
        accuracy = _official(result).get("accuracy", result.accuracy)
    return result if accuracy == result.accuracy else result.model_copy(update={"accuracy": accuracy})


def make_sample(fields: dict[str, Any], *, where: str) -> Sample:
    """A ``Sample`` from an adapter's normalised fields; a bad record raises SampleError naming ``where``."""
    return to_sample(fields, where=where)
