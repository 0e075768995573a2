"""Frame sources besides the frame store itself."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from services.common.frames import VideoParams, check_params, decode_clip
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


def image_size(path: str | Path, factor: int, min_pixels: int, max_pixels: int) -> dict[str, int]:
    """The image's size and the size it is read at (the processor's own resize rule, so the processor
    leaves it as it is), from the file's header alone."""
    from PIL import Image
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    with Image.open(path) as image:
        width, height = image.size
    h, w = smart_resize(height, width, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels)
    return {"source_width": width, "source_height": height, "width": w, "height": h}


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

    def load(self, key: str, expect: VideoParams | dict[str, Any] | None) -> tuple[torch.Tensor, dict]:
        from PIL import Image

        try:
            path = self.images[key]
        except KeyError:
            raise KeyError(f"image {key} is not known to this image source") from None
        if expect:
            raise ValueError(f"image {key} ({path}) has no decode parameters to check, got {expect}")
        size = image_size(path, self.factor, self.min_pixels, self.max_pixels)
        with Image.open(path) as image:
            rgb = image.convert("RGB")
            if (size["width"], size["height"]) != rgb.size:
                rgb = rgb.resize((size["width"], size["height"]), Image.Resampling.BICUBIC)
            array = np.asarray(rgb, dtype=np.uint8)
        meta = {"source": path, "kind": "image", "params": {}, **size}
        return torch.from_numpy(array.copy()).unsqueeze(0), meta


class WithImages:
    """A frame source (the store or a realtime source) that also serves still images by key."""

    def __init__(self, frames: Any, images: ImageFiles) -> None:
        self.frames, self.images = frames, images

    def load(self, key: str, expect: VideoParams | dict[str, Any] | None) -> tuple[torch.Tensor, dict]:
        if key in self.images:
            return self.images.load(key, expect)
        return self.frames.load(key, expect)
