"""Reading official annotation files as released: JSON (any shape), JSONL, Parquet, CSV, plain text.

Every error names the file (and line or record) so a user can find the broken record.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from services.eval.benchmarks.errors import BenchmarkError


def read_json(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise BenchmarkError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno})") from None


def read_jsonl(path: Path) -> list[tuple[int, Any]]:
    """(line number, value) of every non-empty line."""
    rows = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if line.strip():
                try:
                    rows.append((n, json.loads(line)))
                except json.JSONDecodeError as exc:
                    raise BenchmarkError(f"{path}:{n}: invalid JSON ({exc.msg})") from None
    return rows


def read_parquet(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow raises its own error types for unreadable files
        raise BenchmarkError(f"{path}: not a readable Parquet file ({exc})") from None


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def read_rows(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """Row-shaped files (a JSON list, JSONL, Parquet or CSV) as (where, record) pairs."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        rows = [(f"{path}#{i}", r) for i, r in enumerate(read_parquet(path))]
    elif suffix == ".jsonl":
        rows = [(f"{path}:{n}", r) for n, r in read_jsonl(path)]
    elif suffix == ".csv":
        rows = [(f"{path}:{i + 2}", r) for i, r in enumerate(read_csv(path))]
    elif suffix == ".json":
        data = read_json(path)
        if not isinstance(data, list):
            raise BenchmarkError(f"{path}: expected a JSON list of records, got {type(data).__name__}")
        rows = [(f"{path}#{i}", r) for i, r in enumerate(data)]
    else:
        raise BenchmarkError(f"{path}: unsupported annotation format {suffix!r}")
    for where, record in rows:
        if not isinstance(record, dict):
            raise BenchmarkError(f"{where}: a record must be an object, got {type(record).__name__}")
    return rows


def require(record: dict[str, Any], name: str, where: str) -> Any:
    """``record[name]``, or an error naming the record and the missing field."""
    value = record.get(name)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise BenchmarkError(f"{where}: missing field {name!r}")
    return value
