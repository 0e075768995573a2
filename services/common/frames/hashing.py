"""Content hashes of sources: the same bytes under two paths are one video."""

from __future__ import annotations

from pathlib import Path

import blake3

_CHUNK = 1 << 20


def content_hash(path: Path) -> str:
    """``blake3:<hex>`` of a file's bytes (costs about one extra read of the file); for a frame
    folder, ``blake3-frames:<hex>`` over its frame files (:func:`frames.folder.folder_hash`)."""
    path = Path(path)
    if path.is_dir():
        from services.common.frames.folder import folder_hash

        return folder_hash(path)
    hasher = blake3.blake3()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            hasher.update(chunk)
    return f"blake3:{hasher.hexdigest()}"


def source_size(path: Path) -> int:
    """Bytes of a source: the file, or a frame folder's frame files."""
    path = Path(path)
    if path.is_dir():
        from services.common.frames.folder import folder_size

        return folder_size(path)
    return path.stat().st_size
