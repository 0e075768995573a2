"""Run outputs, written atomically (temp file + rename): per-benchmark summary JSON and a Markdown table,
per-sample JSONL, and the run manifest."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from services.common.atomic_files import atomic_text
from services.eval.benchmarks import Summary


def _write_atomic(path: Path, text: str) -> Path:
    with atomic_text(path) as fh:
        fh.write(text)
    return Path(path)


def write_json_atomic(path: Path, data: Any) -> Path:
    return _write_atomic(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def write_jsonl_atomic(path: Path, rows: Iterable[dict[str, Any]]) -> Path:
    return _write_atomic(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def markdown_table(summaries: Sequence[Summary]) -> str:
    """One row per benchmark (headline and named metrics), then one table per breakdown."""
    lines = [
        "| benchmark | metric | overall | robust reader | unreadable | samples | missing | errors | judged |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        robust = "" if s.robust_overall is None else f"{s.robust_overall:.2f}"
        lines.append(
            f"| {s.benchmark} | {s.metric} | {s.overall:.2f} | {robust} | {s.unreadable} | {s.count} | "
            f"{len(s.missing)} | {len(s.errors)} | {s.judged} |"
        )
    for s in summaries:
        lines += ["", f"## {s.benchmark}", ""]
        if s.metrics:
            lines += ["| metric | value |", "|---|---|"]
            lines += [f"| {k} | {v:.2f} |" for k, v in s.metrics.items()]
        for name, cells in s.breakdowns.items():
            lines += ["", f"**{name}**", "", f"| {name} | score | n |", "|---|---|---|"]
            lines += [f"| {key} | {c.score:.2f} | {c.count} |" for key, c in cells.items()]
        for note in s.notes:
            lines += ["", f"> {note}"]
    return "\n".join(lines) + "\n"


def write_summaries(out_dir: Path, summaries: Sequence[Summary]) -> dict[str, Path]:
    """``<name>.summary.json`` per benchmark, ``summary.json`` (all) and ``summary.md``."""
    paths = {}
    for s in summaries:
        paths[s.benchmark] = write_json_atomic(
            out_dir / f"{s.benchmark}.summary.json", s.model_dump(mode="json")
        )
    paths["summary.json"] = write_json_atomic(
        out_dir / "summary.json", {s.benchmark: s.model_dump(mode="json") for s in summaries}
    )
    paths["summary.md"] = _write_atomic(out_dir / "summary.md", markdown_table(summaries))
    return paths
