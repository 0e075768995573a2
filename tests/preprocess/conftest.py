import json
import shutil
from pathlib import Path

import pytest


@pytest.fixture
def write_dataset():
    """Write rows (dicts, or raw strings for malformed lines) as a JSONL file."""

    def write(path: Path, rows: list) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
        return path

    return write


@pytest.fixture
def data_dir(tmp_path, video_dir) -> Path:
    """A data root holding copies of the session's clips."""
    root = tmp_path / "data"
    (root / "videos").mkdir(parents=True)
    for name in ("short.mp4", "wide.mp4", "tall.mp4"):
        shutil.copy(video_dir / name, root / "videos" / name)
    return root
