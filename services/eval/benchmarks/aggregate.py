"""Pure aggregation helpers: per-item accuracies (0-1) into percentages, breakdowns and macro means."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from services.common.samples import Sample
from services.eval.benchmarks.results import Cell, ItemResult, Summary

KeyFn = Callable[[Sample], Any]
ValueFn = Callable[[ItemResult], float]


def accuracy_of(result: ItemResult) -> float:
    return result.accuracy


def percent(values: Iterable[float]) -> float:
    """Mean of values in [0, 1] as a percentage; 0 for no values."""
    values = list(values)
    return 100.0 * sum(values) / len(values) if values else 0.0


def cell(values: Iterable[float]) -> Cell:
    values = list(values)
    return Cell(score=percent(values), count=len(values))


def field_key(name: str) -> KeyFn:
    """A key function reading an extra field of the sample."""
    return lambda sample: sample.extra(name)


def by_key(
    samples: Sequence[Sample],
    results: Mapping[str, ItemResult],
    key: KeyFn,
    value: ValueFn = accuracy_of,
) -> dict[str, Cell]:
    """Percent per key. A key function may return one key, a list of keys (the item counts in each:
    multi-label categories) or None (the item belongs to no group)."""
    groups: dict[str, list[float]] = defaultdict(list)
    for sample in samples:
        keys = key(sample)
        if keys is None:
            continue
        for k in keys if isinstance(keys, list | tuple | set) else [keys]:
            groups[str(k)].append(value(results[sample.id]))
    return {k: cell(v) for k, v in sorted(groups.items())}


def macro(cells: Mapping[str, Cell]) -> float:
    """Unweighted mean of the cells' scores (0 for none)."""
    return sum(c.score for c in cells.values()) / len(cells) if cells else 0.0


def summary(
    benchmark: str,
    samples: Sequence[Sample],
    results: Mapping[str, ItemResult],
    *,
    metric: str,
    overall: float,
    metrics: Mapping[str, float] | None = None,
    breakdowns: Mapping[str, Mapping[str, Cell]] | None = None,
    notes: Sequence[str] = (),
) -> Summary:
    """A Summary with the bookkeeping every benchmark shares: missing predictions, errors, judged items."""
    items = [results[s.id] for s in samples]
    return Summary(
        benchmark=benchmark,
        metric=metric,
        overall=overall,
        count=len(samples),
        metrics=dict(metrics or {}),
        breakdowns={k: dict(v) for k, v in (breakdowns or {}).items()},
        missing=[r.id for r in items if r.missing],
        errors={r.id: r.error for r in items if r.error},
        judged=sum(1 for r in items if r.judged),
        notes=list(notes),
    )


def accuracy_summary(
    benchmark: str,
    samples: Sequence[Sample],
    results: Mapping[str, ItemResult],
    breakdowns: Mapping[str, KeyFn | str],
    *,
    macro_over: str | None = None,
    notes: Sequence[str] = (),
) -> Summary:
    """Accuracy overall plus one breakdown per entry (a key function or an extra field's name).

    ``macro_over`` names the breakdown whose unweighted mean is the headline figure (MVBench's mean of
    tasks, MLVU's M-Avg); otherwise the headline is the micro accuracy over every item.
    """
    cells = {
        name: by_key(samples, results, field_key(key) if isinstance(key, str) else key)
        for name, key in breakdowns.items()
    }
    micro = percent(results[s.id].accuracy for s in samples)
    metrics = {"accuracy": micro}
    if macro_over is not None:
        overall = macro(cells[macro_over])
        metrics[f"mean over {macro_over}"] = overall
        metric = f"mean of per-{macro_over} accuracies"
    else:
        overall, metric = micro, "accuracy"
    return summary(
        benchmark,
        samples,
        results,
        metric=metric,
        overall=overall,
        metrics=metrics,
        breakdowns=cells,
        notes=notes,
    )
