"""The frame store: content-addressed clip directories under one root, read by every service.

Layout ``<root>/<k[0:2]>/<k[2:4]>/<key>/`` holding ``frames.npy`` (uint8 T×H×W×3, memory-mappable)
and ``meta.json``. An entry is written in ``<root>/.tmp`` and renamed into place, so a reader sees a
whole entry or none; the files, the entry and the folder it is renamed into are fsynced, so an entry
the index records as ready survives a crash.
"""

from __future__ import annotations

import enum
import errno
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from services.common.frames.hashing import content_hash
from services.common.frames.params import VideoParams, check_params, clip_key
from services.common.frames.pipeline import DEFAULT_DECODERS, decode_clip

FRAMES_FILE = "frames.npy"
META_FILE = "meta.json"


class CacheMode(enum.StrEnum):
    prefer_cached = "prefer_cached"  # load if stored, else decode with the same code
    cached_only = "cached_only"  # a missing clip is an error
    realtime_only = "realtime_only"  # always decode (the baseline the cache is measured against)


class ClipNotCached(LookupError):
    pass


class FrameStore:
    def __init__(
        self, root: str | Path, decoders: tuple[str, ...] = DEFAULT_DECODERS, threads: int = 1
    ) -> None:
        self.root = Path(root)
        self.decoders = tuple(decoders)
        self.threads = threads

    @classmethod
    def from_settings(cls) -> FrameStore:
        from services.common.settings import get_settings

        s = get_settings()
        return cls(s.resolved_frame_root, tuple(s.decoders), s.decode_threads)

    def path_for(self, key: str) -> Path:
        return self.root / key[0:2] / key[2:4] / key

    def has(self, key: str) -> bool:
        return (self.path_for(key) / META_FILE).is_file()

    def put(self, key: str, frames: torch.Tensor | np.ndarray, meta: dict[str, Any]) -> Path:
        """Store a clip atomically; if another writer got there first, keep theirs."""
        final = self.path_for(key)
        if self.has(key):
            return final
        array = frames.numpy() if isinstance(frames, torch.Tensor) else frames
        if array.dtype != np.uint8 or array.ndim != 4 or array.shape[-1] != 3:
            raise ValueError(
                f"clip {key}: frames must be uint8 (T, H, W, 3), got {array.dtype} {array.shape}"
            )
        tmp_root = self.root / ".tmp"
        tmp_root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=tmp_root))
        try:
            try:
                np.save(tmp / FRAMES_FILE, np.ascontiguousarray(array))
            except OSError as exc:
                raise _short_write(exc, tmp_root, int(array.nbytes), key) from exc
            entry = {**meta, "key": key, "nbytes": int(array.nbytes), "shape": list(array.shape)}
            (tmp / META_FILE).write_text(json.dumps(entry, indent=1))
            for name in (FRAMES_FILE, META_FILE):
                with open(tmp / name, "rb") as fh:
                    os.fsync(fh.fileno())
            _fsync_dir(tmp)
            final.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(tmp, final)
            except OSError:
                if not self.has(key):
                    raise
            else:
                # The rename is durable only once the folders holding the new names are synced.
                _fsync_dir(final.parent)
                _fsync_dir(final.parent.parent)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return final

    def entry_problem(self, key: str) -> str | None:
        """Why the stored entry of ``key`` is unusable (absent, incomplete, inconsistent), or None.

        Reads ``meta.json`` and the header of ``frames.npy``, not the frames.
        """
        entry = self.path_for(key)
        if not entry.is_dir():
            return "no entry folder"
        try:
            meta = json.loads((entry / META_FILE).read_text())
        except FileNotFoundError:
            return f"no {META_FILE}"
        except (OSError, ValueError) as exc:
            return f"unreadable {META_FILE}: {exc}"
        try:
            array = np.load(entry / FRAMES_FILE, mmap_mode="r")
        except FileNotFoundError:
            return f"no {FRAMES_FILE}"
        except (OSError, ValueError) as exc:
            return f"unreadable {FRAMES_FILE}: {exc}"
        if list(array.shape) != meta.get("shape") or array.dtype != np.uint8:
            return f"{FRAMES_FILE} holds {array.dtype} {list(array.shape)}, meta.json says uint8 {meta.get('shape')}"
        return None

    def entry_folders(self) -> list[str]:
        """Keys of every entry folder on disk, complete or not (``keys()`` lists complete ones)."""
        return [p.name for p in self.root.glob("??/??/*") if p.is_dir()]

    def remove(self, key: str) -> bool:
        """Delete the entry of ``key``: renamed out of place first, so no reader sees half of it."""
        entry = self.path_for(key)
        if not entry.exists():
            return False
        tmp_root = self.root / ".tmp"
        tmp_root.mkdir(parents=True, exist_ok=True)
        doomed = Path(tempfile.mkdtemp(prefix=f"{key}.removed.", dir=tmp_root))
        os.rename(entry, doomed / key)
        _fsync_dir(entry.parent)
        shutil.rmtree(doomed, ignore_errors=True)
        return True

    def load(
        self, key: str, expect: VideoParams | dict[str, Any] | None = None, *, mmap: bool = True
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Frames (T, H, W, 3) uint8 and metadata of a stored clip.

        With ``expect``, the stored decode parameters must equal it; otherwise ParamsMismatch names
        every differing field (a clip decoded under other settings is never used silently).
        """
        entry = self.path_for(key)
        try:
            meta = json.loads((entry / META_FILE).read_text())
        except FileNotFoundError:
            raise ClipNotCached(f"clip {key} is not in the frame store at {self.root}") from None
        check_params(key, meta.get("params", {}), expect)
        # copy-on-write mapping: pages are shared between processes through the page cache.
        array = np.load(entry / FRAMES_FILE, mmap_mode="c" if mmap else None)
        return torch.from_numpy(array), meta

    def get(
        self,
        path: str | Path,
        params: VideoParams,
        mode: CacheMode = CacheMode.prefer_cached,
        *,
        source_hash: str | None = None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Frames of the video at ``path`` under ``params``, from the store or decoded, per ``mode``."""
        mode = CacheMode(mode)
        if mode is not CacheMode.realtime_only:
            source_hash = source_hash or content_hash(Path(path))
            key = clip_key(source_hash, params)
            try:
                return self.load(key, params)
            except ClipNotCached:
                if mode is CacheMode.cached_only:
                    raise ClipNotCached(
                        f"clip {key} of {path} is not cached (mode cached_only); run `reelrl preprocess` first"
                    ) from None
        frames, meta = decode_clip(path, params, decoders=self.decoders, threads=self.threads)
        return frames, meta

    def keys(self) -> list[str]:
        return [p.parent.name for p in self.root.glob(f"??/??/*/{META_FILE}")]

    def disk_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.root.glob(f"??/??/*/{FRAMES_FILE}"))

    def sweep_tmp(self, older_than_s: float = 3600.0) -> int:
        """Remove partial entries left by killed writers; returns how many."""
        tmp_root = self.root / ".tmp"
        removed = 0
        if tmp_root.is_dir():
            cutoff = time.time() - older_than_s
            for p in tmp_root.iterdir():
                if p.stat().st_mtime < cutoff:
                    shutil.rmtree(p, ignore_errors=True)
                    removed += 1
        return removed


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _short_write(exc: OSError, folder: Path, nbytes: int, key: str) -> OSError:
    """``exc`` with the errno numpy leaves out: on a full disk its write ends in "N requested and M
    written" with no errno, which would read as a property of the clip instead of the machine's."""
    if exc.errno is not None:
        return exc
    free = shutil.disk_usage(folder).free
    if free >= nbytes:
        return exc
    return OSError(
        errno.ENOSPC, f"{os.strerror(errno.ENOSPC)}: clip {key} needs {nbytes} bytes, {free} free in {folder}"
    )
