"""Turn evaluation summaries (``result`` events) into the eval page's tables.

A summary is a dict per benchmark: ``benchmark`` (its name), ``overall``, other scalar fields (sample
counts, …), and breakdowns: a dict of numbers (``{"temporal": 0.5, …}``) or of dicts of numbers
(``{"A": {"accuracy": 0.5, "n": 10}, …}``). ``manifest`` is shown as-is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

_SCALAR = (int, float, str, bool)
_SKIP = {"benchmark", "overall", "manifest"}


@dataclass
class Breakdown:
    benchmark: str
    name: str
    columns: list[str]
    rows: list[tuple[str, list[Any]]]


@dataclass
class EvalTables:
    columns: list[str] = field(default_factory=list)  # scalar fields beyond benchmark and overall
    rows: list[dict[str, Any]] = field(default_factory=list)
    breakdowns: list[Breakdown] = field(default_factory=list)


def _breakdown(benchmark: str, name: str, value: dict[str, Any]) -> Breakdown | None:
    if value and all(isinstance(v, _SCALAR) or v is None for v in value.values()):
        return Breakdown(benchmark, name, ["value"], [(str(k), [v]) for k, v in value.items()])
    if value and all(isinstance(v, dict) for v in value.values()):
        columns: list[str] = []
        for inner in value.values():
            columns += [c for c in inner if c not in columns and isinstance(inner[c], _SCALAR)]
        return Breakdown(
            benchmark, name, columns, [(str(k), [v.get(c) for c in columns]) for k, v in value.items()]
        )
    return None


def eval_tables(results: list[dict[str, Any]]) -> EvalTables:
    tables = EvalTables()
    for result in results:
        benchmark = str(result.get("benchmark", "?"))
        row = {"benchmark": benchmark, "overall": result.get("overall"), "manifest": result.get("manifest")}
        for key, value in result.items():
            if key in _SKIP:
                continue
            if isinstance(value, _SCALAR) or value is None:
                row[key] = value
                if key not in tables.columns:
                    tables.columns.append(key)
            elif isinstance(value, dict):
                table = _breakdown(benchmark, key, value)
                if table is not None:
                    tables.breakdowns.append(table)
        tables.rows.append(row)
    return tables
