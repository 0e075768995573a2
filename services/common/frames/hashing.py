"""Content hashes of source files: the same bytes under two paths are one video."""

from __future__ import annotations

from pathlib import Path

import blake3

_CHUNK = 1 << 20


def content_hash(path: Path) -> str:
    """``blake3:<hex>`` of the file's bytes (costs about one extra read of the file)."""
    hasher = blake3.blake3()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            hasher.update(chunk)
    return f"blake3:{hasher.hexdigest()}"
