"""Frame thumbnails for the status page: one stored frame, downscaled on the server, as JPEG.

A clip's frames are read from the frame store (``frames.npy``, memory-mapped: only the asked frame is
read), shrunk with Pillow to at most ``size`` pixels on the longest side, and kept in a bounded LRU
cache keyed by store key, frame index and size: a store entry is content-addressed, so a thumbnail of
a key never changes and the browser may keep it too (:data:`CACHE_CONTROL`).
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from services.common.frames.store import FrameStore

DEFAULT_SIZE = 160
MIN_SIZE, MAX_SIZE = 16, 640
JPEG_QUALITY = 85
#: the page needs a token to read, so the browser's cache only (private); a key's pixels never change
CACHE_CONTROL = "private, max-age=604800, immutable"


class FrameMissing(LookupError):
    """The clip is not (or no longer) in the frame store, or has no such frame: 404."""


class ThumbnailsUnavailable(RuntimeError):
    """This installation cannot draw thumbnails (no Pillow): 503."""


def render_thumbnail(frame: np.ndarray, size: int) -> bytes:
    """JPEG bytes of ``frame`` (H, W, 3) uint8, shrunk (never enlarged) to fit ``size`` × ``size``."""
    try:
        from PIL import Image
    except ImportError as exc:
        raise ThumbnailsUnavailable(
            f"frame thumbnails need Pillow, which this installation lacks ({exc}); install reelrl[api]"
        ) from None
    image = Image.fromarray(np.ascontiguousarray(frame))  # (H, W, 3) uint8: RGB
    image.thumbnail((size, size), Image.Resampling.LANCZOS)
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=JPEG_QUALITY)
    return out.getvalue()


def frame_store() -> FrameStore:
    """The frame store of this installation's settings (imported on first use: it brings torch, which
    the API does not need to start)."""
    from services.common.frames.store import FrameStore

    return FrameStore.from_settings()


def read_frame(store: FrameStore, key: str, index: int) -> np.ndarray:
    """Frame ``index`` of the stored clip ``key`` (H, W, 3) uint8, copied out of the mapping."""
    from services.common.frames.store import ClipNotCached

    try:
        frames, _ = store.load(key)
    except ClipNotCached:
        raise FrameMissing(
            f"clip {key} is not in the frame store (removed since the step was logged?)"
        ) from None
    if index >= frames.shape[0]:
        raise FrameMissing(f"clip {key} holds {frames.shape[0]} frames: there is no frame {index}")
    return frames[index].numpy().copy()


@dataclass(frozen=True)
class _Key:
    root: str
    key: str
    index: int
    size: int


class ThumbnailCache:
    """Thumbnails by (store root, key, index, size), least recently used dropped past ``max_bytes``.

    Thread-safe (routes run in a thread pool); two first requests of one thumbnail may both render it.
    """

    def __init__(self, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[_Key, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, store: FrameStore, key: str, index: int, size: int) -> bytes:
        """The JPEG of frame ``index`` of clip ``key`` at ``size``: from the cache, else read and drawn."""
        cache_key = _Key(str(store.root), key, index, size)
        with self._lock:
            jpeg = self._items.get(cache_key)
            if jpeg is not None:
                self._items.move_to_end(cache_key)
                self.hits += 1
                return jpeg
            self.misses += 1
        jpeg = render_thumbnail(read_frame(store, key, index), size)
        with self._lock:
            if cache_key not in self._items:
                self._items[cache_key] = jpeg
                self._bytes += len(jpeg)
            while self._bytes > self.max_bytes and self._items:
                _, dropped = self._items.popitem(last=False)
                self._bytes -= len(dropped)
        return jpeg

    def __len__(self) -> int:
        return len(self._items)
