"""Reward functions in evaluation (``reward_functions: [{name, path}]``, ``--reward-function``): every
answered sample is also scored by each function, beside the benchmark's own accuracy, with what training
would give it: the reward library's view of the sample and the response text the library reads.

Per item (its ``details``): ``reward_functions`` = {name: score, "name/key": extra value} and
``reward_function_errors`` = {name: why it has no score}. One item's failure fails nothing else.

Per benchmark (its summary): ``metrics["reward/<key>"]`` = the mean of every key above over the items
that have it (raw, not percent), ``details["reward_function_errors"]`` = the failed calls, and a note for
a function that failed on every item it was called on (a broken function, not an unlucky item).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from services.reward.functions import Outcome, load_function

if TYPE_CHECKING:  # the benchmarks package imports this module for its summaries
    from services.eval.benchmarks.results import ItemResult
    from services.reward.config import RewardFunctionConfig

# what a summary note quotes of a function's first error
_NOTE_CHARS = 300


def load_functions(specs: Sequence[RewardFunctionConfig]) -> dict[str, Callable[..., Any]]:
    """name → the function loaded from its file; RewardFunctionError (a ValueError naming the function)
    for a file or name that cannot be loaded. Called before any clip or engine work."""
    functions = {}
    for spec in specs:
        if spec.path is None:  # EvalConfig refuses it; a config built past validation must not reach here
            raise ValueError(f"reward_functions {spec.name}: no path ('file.py:function')")
        functions[spec.name] = load_function(spec.path)
    return functions


def item_details(outcomes: Mapping[str, Outcome]) -> dict[str, Any]:
    """One item's details from each function's outcome (by function name): the scores and extra values
    of those that gave one, the one-line errors of those that did not; empty keys left out."""
    scores: dict[str, float] = {}
    errors: dict[str, str] = {}
    for name, outcome in outcomes.items():
        if outcome.error is not None:
            errors[name] = outcome.error
            continue
        scores.update(outcome.parts(name))
    details: dict[str, Any] = {}
    if scores:
        details["reward_functions"] = scores
    if errors:
        details["reward_function_errors"] = errors
    return details


class FunctionSummary(NamedTuple):
    """What a benchmark's summary adds for its reward functions."""

    metrics: dict[str, float]  # "reward/<key>" → mean over the items with that key (raw)
    errors: int  # failed calls: (item, function) pairs without a score
    notes: list[str]  # one per function that failed on every item it was called on


def summarise_functions(items: Iterable[ItemResult]) -> FunctionSummary | None:
    """The reward functions' figures over a benchmark's item results; None when no item was scored by
    any (a run without reward functions: its summary stays as it was)."""
    values: dict[str, list[float]] = defaultdict(list)
    failures: dict[str, list[str]] = defaultdict(list)
    for item in items:
        for key, value in (item.details.get("reward_functions") or {}).items():
            values[key].append(value)
        for name, error in (item.details.get("reward_function_errors") or {}).items():
            failures[name].append(error)
    if not values and not failures:
        return None
    metrics = {f"reward/{key}": sum(v) / len(v) for key, v in sorted(values.items())}
    notes = [
        f"reward function {name} failed on all {len(errors)} items it was called on (no reward/{name}); "
        f"the first: {errors[0][:_NOTE_CHARS]}"
        for name, errors in sorted(failures.items())
        if name not in values
    ]
    return FunctionSummary(metrics, sum(len(e) for e in failures.values()), notes)
