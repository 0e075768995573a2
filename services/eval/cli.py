"""What the ``reelrl eval`` commands do (services/cli.py declares them): list benchmarks, print a
benchmark's normalised samples, and re-score saved predictions with no model."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.console import Console

from services.common.text import plain
from services.eval.benchmarks import BenchmarkError, benchmark_names, get_benchmark

# Messages name files and quote their contents: printed through `plain` (literal markup, visible bidi
# controls). The JSON that samples and score write to stdout is data for other programs, left as is.
errors = Console(stderr=True, highlight=False, soft_wrap=True)


def parse_assignments(pairs: list[str], what: str = "option") -> dict[str, Any]:
    """``["key=value", …]`` → ``{"key": value}`` with YAML-typed values; dotted keys nest."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{what} {pair!r} is not KEY=VALUE")
        node = out
        *parents, leaf = key.strip().split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise typer.BadParameter(f"{what} {pair!r}: {part!r} is already a value")
        node[leaf] = yaml.safe_load(raw) if raw.strip() else ""
    return out


def parse_reward_function(text: str) -> dict[str, str]:
    """``--reward-function`` → ``{"name", "path"}``: ``NAME=path/file.py:function``, or
    ``path/file.py:function`` alone, named for the function. The name must be a metric name."""
    from pydantic import ValidationError

    from services.reward.config import RewardFunctionConfig
    from services.reward.functions import RewardFunctionError, parse_target

    name, sep, target = text.partition("=")
    if not sep:
        name, target = "", text
    try:
        _, function = parse_target(target.strip())
    except RewardFunctionError as exc:
        raise typer.BadParameter(f"--reward-function {text!r}: {exc}") from None
    name = name.strip() or function
    try:
        spec = RewardFunctionConfig(name=name, path=target.strip())
    except ValidationError:
        raise typer.BadParameter(
            f"--reward-function {text!r}: {name!r} is not a metric name (a lower-case letter, then up to 63 "
            "lower-case letters, digits or _); name it: NAME=path/file.py:function"
        ) from None
    return {"name": spec.name, "path": spec.path or ""}


def list_command() -> int:
    for name in benchmark_names():
        typer.echo(name)
    return 0


def _fail(message: str) -> int:
    errors.print(f"error: {plain(message)}")
    return 2


def samples_command(name: str, annotations: Path, video_root: Path | None, options: list[str]) -> int:
    """One JSON line per normalised sample: id, problem_type, problem, options, answer, videos and the
    benchmark's breakdown fields."""
    try:
        benchmark = get_benchmark(name, video_root or _root_of(annotations), **parse_assignments(options))
        samples = benchmark.load_checked(benchmark.find_annotations(annotations))
    except (BenchmarkError, ValueError, OSError) as exc:
        return _fail(str(exc))
    for sample in samples:
        record = sample.model_dump(mode="json", exclude_none=True)
        if video_root is not None:
            record["videos"] = [str(video_root / v) for v in sample.videos]
        sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
    return 0


def score_command(
    name: str,
    annotations: Path,
    predictions: Path,
    family: str,
    options: list[str],
    out: Path | None,
    reader: str = "official",
) -> int:
    """Score saved predictions and print the summary JSON (overall and every breakdown). ``reader``:
    "official" (the benchmark's own reader and aggregation) or "robust" (the reward library's reader,
    the one training rewards use); the summary carries the other figure beside it."""
    from services.eval.outputs import write_json_atomic
    from services.eval.scoring import read_predictions, score_predictions, unknown_predictions

    try:
        benchmark = get_benchmark(name, _root_of(annotations), **parse_assignments(options))
        samples = benchmark.load_checked(benchmark.find_annotations(annotations))
        given = read_predictions(predictions)
        results = score_predictions(benchmark, samples, given, family, reader=reader)
        summary = benchmark.summarise(samples, results, reader)
    except (BenchmarkError, ValueError, OSError) as exc:
        return _fail(str(exc))
    unknown = unknown_predictions(samples, given)
    if unknown:
        summary.notes.append(f"{len(unknown)} predictions name no sample of the annotations: {unknown[:5]}")
    if summary.missing:
        typer.echo(f"{len(summary.missing)} samples have no prediction (scored 0)", err=True)
    text = summary.model_dump_json(indent=2)
    if out is not None:
        write_json_atomic(out, summary.model_dump(mode="json"))
    typer.echo(text)
    return 0


def _root_of(annotations: Path) -> Path:
    """Side files (subtitles) are looked up beside the annotations when no root is given."""
    return annotations if annotations.is_dir() else annotations.parent
