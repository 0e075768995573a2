"""Files replaced whole or not at all: written to a temp file beside the target, flushed to disk, then
renamed over it, with the permissions a plain ``open()`` would give (a temp file's 0600 would leave a
dataset or summary unreadable to the other users of a shared folder)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO


def _umask() -> int:
    # read, not set: os.umask(x) changes it for every thread of the process meanwhile
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


@contextmanager
def atomic_text(path: Path) -> Iterator[TextIO]:
    """``with atomic_text(path) as fh: fh.write(...)``: ``path`` holds the new text after the block, or
    its old content if the block raised (the temp file is removed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
