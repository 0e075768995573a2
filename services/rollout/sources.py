"""Frame sources besides the frame store itself."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from services.common.frames import VideoParams, check_params, decode_clip
from services.common.frames.images import rgb8
from services.common.frames.params import canonical_json
from services.common.frames.pipeline import DEFAULT_DECODERS


class RealtimeSource:
    """Decodes every clip when it is loaded, with the frame store's own pipeline (so the frames are
    bit-identical to the cached ones): the baseline the cache is measured against, and the path for
    videos that were never preprocessed. ``clips`` maps a clip key to its video file and parameters.

    ``load`` takes ``expect`` like the store, without a default: the caller states the parameters the
    clip must have (ParamsMismatch otherwise) or passes None to opt out explicitly.
    """

    def __init__(
        self,
        clips: Mapping[str, tuple[str | Path, VideoParams]],
        decoders: tuple[str, ...] = DEFAULT_DECODERS,
        threads: int = 1,
    ) -> None:
        self.clips = dict(clips)
        self.decoders = decoders
        self.threads = threads

    def load(self, key: str, expect: VideoParams | dict[str, Any] | None) -> tuple[torch.Tensor, dict]:
        try:
            path, params = self.clips[key]
        except KeyError:
            raise KeyError(f"clip {key} is not known to this realtime source") from None
        check_params(key, params.canonical(), expect)
        return decode_clip(path, params, decoders=self.decoders, threads=self.threads)


def image_key(content_hash: str, min_pixels: int, max_pixels: int) -> str:
    """Key of a still image read within a pixel budget (hex sha256, like a clip key)."""
    payload = canonical_json(
        {"content": content_hash, "image": {"min_pixels": min_pixels, "max_pixels": max_pixels}}
    )
    return hashlib.sha256(payload.encode()).hexdigest()


class ImageError(ValueError):
    """An image that cannot be used: unreadable, or no size within the budget that the processor keeps."""


def read_image(path: str | Path, factor: int, min_pixels: int, max_pixels: int) -> tuple[np.ndarray, dict]:
    """``(H, W, 3)`` uint8 pixels of the image as the model sees it, and its sizes.

    Decoded in full (a truncated file fails here, not mid-run), turned upright by its EXIF orientation,
    resized to the processor's own rule within the pixel budget; that size must be one the rule keeps
    (an extreme aspect ratio cannot be), or the engine and the actor would resize it again.
    """
    from PIL import Image, ImageOps
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    try:
        with Image.open(path) as image:
            rgb = rgb8(ImageOps.exif_transpose(image))
        width, height = rgb.size
        h, w = smart_resize(height, width, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels)
        if smart_resize(h, w, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels) != (h, w):
            raise ValueError(f"its resized size {w}x{h} would be resized again by the processor")
    except Exception as exc:  # PIL's and smart_resize's errors alike: one reason per image
        raise ImageError(f"image {path}: {exc}") from exc
    if (w, h) != rgb.size:
        rgb = rgb.resize((w, h), Image.Resampling.BICUBIC)
    meta = {"source_width": width, "source_height": height, "width": w, "height": h}
    return np.asarray(rgb, dtype=np.uint8), meta


class ImageFiles:
    """Still images, read from their files when loaded and resized once into the pixel budget (images
    decode in milliseconds, so they are not copied into the frame store). ``images`` maps an
    :func:`image_key` to its file; a key this source does not know is a KeyError."""

    def __init__(
        self, images: Mapping[str, str | Path], *, factor: int, min_pixels: int, max_pixels: int
    ) -> None:
        self.images = {k: str(v) for k, v in images.items()}
        self.factor, self.min_pixels, self.max_pixels = factor, min_pixels, max_pixels

    def __contains__(self, key: str) -> bool:
        return key in self.images

    def read(self, key: str) -> tuple[np.ndarray, dict]:
        return read_image(self.images[key], self.factor, self.min_pixels, self.max_pixels)

    def load(self, key: str, expect: VideoParams | dict[str, Any] | None) -> tuple[torch.Tensor, dict]:
        if key not in self.images:
            raise KeyError(f"image {key} is not known to this image source")
        if expect:
            raise ValueError(
                f"image {key} ({self.images[key]}) has no decode parameters to check, got {expect}"
            )
        array, size = self.read(key)
        meta = {"source": self.images[key], "kind": "image", "params": {}, **size}
        return torch.from_numpy(array.copy()).unsqueeze(0), meta


class WithImages:
    """A frame source (the store or a realtime source) that also serves still images by key."""

    def __init__(self, frames: Any, images: ImageFiles) -> None:
        self.frames, self.images = frames, images

    def load(self, key: str, expect: VideoParams | dict[str, Any] | None) -> tuple[torch.Tensor, dict]:
        if key in self.images:
            return self.images.load(key, expect)
        return self.frames.load(key, expect)
