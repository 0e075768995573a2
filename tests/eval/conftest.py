"""Helpers for the eval tests: write annotation files in a benchmark's official format, then load,
score and aggregate them through the adapter exactly as ``reelrl eval score`` does."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from services.eval.benchmarks import ItemResult, Summary, get_benchmark
from services.eval.scoring import Prediction, score_predictions


def write_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return path


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


class Evaluated:
    """The samples an adapter read, their item results and the summary."""

    def __init__(self, samples: list, results: dict[str, ItemResult], summary: Summary) -> None:
        self.samples = samples
        self.by_id = {s.id: s for s in samples}
        self.results = results
        self.summary = summary

    def cell(self, breakdown: str, key: str) -> float:
        return self.summary.breakdowns[breakdown][key].score


@pytest.fixture
def evaluate() -> Callable[..., Evaluated]:
    """``evaluate(name, annotations, responses, family=..., root=..., predictions=..., **options)``.

    ``responses`` maps sample id → response text; ``predictions`` (full Prediction dicts) may add clip
    metadata or a judge's reply; ``reader`` picks the protocol of ``overall`` (as ``eval score
    --reader``)."""

    def run(
        name: str,
        annotations: Path,
        responses: dict[str, str],
        *,
        family: str = "qwen3_vl",
        root: Path | None = None,
        predictions: list[dict[str, Any]] | None = None,
        reader: str = "official",
        **options: Any,
    ) -> Evaluated:
        benchmark = get_benchmark(name, root, **options)
        samples = benchmark.load_checked(benchmark.find_annotations(annotations))
        given = {i: Prediction(id=i, response=r) for i, r in responses.items()}
        for p in predictions or []:
            given[p["id"]] = Prediction.model_validate(p)
        unknown = set(given) - {s.id for s in samples}
        assert not unknown, f"test predictions name unknown ids {unknown}"
        results = score_predictions(benchmark, samples, given, family, reader=reader)
        return Evaluated(samples, results, benchmark.summarise(samples, results, reader))

    return run
