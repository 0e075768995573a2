"""Reading dataset rows and resolving their video paths safely; writing results atomically."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.common.atomic_files import atomic_text
from services.common.frames import DecodeError
from services.common.frames.folder import frame_files
from services.common.json_lines import RecordError, loads_record


class InputError(ValueError):
    """A row or a path that cannot be used; the message names the row and the reason."""


@dataclass
class Row:
    line: int
    data: dict[str, Any]
    error: str | None = None
    videos: list[str] = field(default_factory=list)


_KEPT_LINE = 2000  # characters of an unreadable line kept in the failures file


def read_rows(path: Path) -> list[Row]:
    """JSONL rows with their video lists. Bad lines become rows with an error, never an abort."""
    rows: list[Row] = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                data = loads_record(line)
            except RecordError as exc:
                kept = line.rstrip("\n") if len(line) <= _KEPT_LINE else line[:_KEPT_LINE] + "…"
                rows.append(Row(n, {"_line": kept}, f"line {n}: {exc}"))
                continue
            if not isinstance(data, dict):
                rows.append(Row(n, {"_line": data}, f"line {n}: a row must be a JSON object"))
                continue
            rows.append(_with_videos(n, data))
    return rows


def _with_videos(n: int, data: dict[str, Any]) -> Row:
    videos = data.get("videos")
    if videos is None and data.get("data_type") == "video" and isinstance(data.get("path"), str):
        videos = [data["path"]]  # Video-R1 / EasyVideoR1 rows keep the video in `path`
    if videos is None:
        return Row(n, data)
    if not isinstance(videos, list) or not all(isinstance(v, str) and v for v in videos):
        return Row(n, data, f"line {n}: `videos` must be a list of non-empty paths")
    return Row(n, data, videos=list(videos))


def resolve_video(raw: str, dataset_dir: Path, data_roots: list[Path], *, frame_folders: bool = True) -> Path:
    """The file (or, with ``frame_folders``, frame folder) a row's video path names. A relative path
    is taken beside the dataset file first (as Video-R1 / EasyR1 datasets are written), then under
    each data root in turn. With data roots configured the file must lie inside one. Paths that must
    be files (images, datasets) pass ``frame_folders=False``."""
    given = Path(raw)
    if data_roots:
        roots = [r.resolve() for r in data_roots]
        candidates = (
            [given] if given.is_absolute() else [dataset_dir / given, *(root / given for root in roots)]
        )
        existing = [c.resolve() for c in candidates if c.exists()]
        for path in existing:
            if any(path.is_relative_to(root) for root in roots):
                return _check_file(raw, path, frame_folders)
        if existing:
            raise InputError(
                f"{raw}: resolves to {existing[0]}, outside the data roots {[str(r) for r in roots]}"
            )
        raise InputError(f"{raw}: file not found under the data roots {[str(r) for r in roots]}")
    path = (given if given.is_absolute() else dataset_dir / given).resolve()
    if not path.exists():
        raise InputError(f"{raw}: file not found ({path})")
    return _check_file(raw, path, frame_folders)


def _check_file(raw: str, path: Path, frame_folders: bool) -> Path:
    if frame_folders and path.is_dir():
        # a frame folder (numbered images); its listing problems are input errors, caught here once
        try:
            frame_files(path)
        except DecodeError as exc:
            raise InputError(f"{raw}: not a usable frame folder: {exc}") from None
        return path
    if not path.is_file():
        what = "a regular file or a frame folder" if frame_folders else "a regular file"
        raise InputError(f"{raw}: not {what} ({path})")
    if path.stat().st_size == 0:
        raise InputError(f"{raw}: file is empty (0 bytes)")
    return path


def write_jsonl_atomic(path: Path, rows: Iterable[dict[str, Any]]) -> int:
    """Write rows to ``path`` whole or not at all (:func:`atomic_text`); returns the row count."""
    count = 0
    with atomic_text(path) as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    return count


def failed_path(out: Path) -> Path:
    """``OUT.jsonl`` → ``OUT.failed.jsonl``."""
    return out.with_name(f"{out.stem}.failed{out.suffix or '.jsonl'}")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """All rows of a JSONL file (strict: for files this project wrote)."""
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
