"""Frame sources besides the frame store itself."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from services.common.frames import VideoParams, check_params, decode_clip
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
