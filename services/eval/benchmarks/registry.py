"""The benchmark registry: one adapter class per name; adding a benchmark adds one registered module."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from services.eval.benchmarks.base import Benchmark
from services.eval.benchmarks.errors import BenchmarkError

_ADAPTERS: dict[str, type[Benchmark]] = {}


def register(cls: type[Benchmark]) -> type[Benchmark]:
    if cls.name in _ADAPTERS and _ADAPTERS[cls.name] is not cls:
        raise ValueError(
            f"benchmark {cls.name!r} is registered twice ({_ADAPTERS[cls.name].__name__}, {cls.__name__})"
        )
    _ADAPTERS[cls.name] = cls
    return cls


def benchmark_names() -> list[str]:
    return sorted(_ADAPTERS)


def adapter_class(name: str) -> type[Benchmark]:
    try:
        return _ADAPTERS[name]
    except KeyError:
        raise BenchmarkError(
            f"unknown benchmark {name!r}; registered benchmarks: {', '.join(benchmark_names())}"
        ) from None


def get_benchmark(name: str, root: Path | None = None, **options: Any) -> Benchmark:
    """An adapter instance; its options are validated (unknown keys rejected, naming the benchmark)."""
    cls = adapter_class(name)
    try:
        return cls(root, **options)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise BenchmarkError(f"benchmark {name!r} options: {problems}") from None
