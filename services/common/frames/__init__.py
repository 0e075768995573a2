"""The frame store: decode each video once, load it everywhere (SPEC §3)."""

from services.common.frames.decoders import DecodeError, DecodeTimeout
from services.common.frames.params import VideoParams, clip_key
from services.common.frames.pipeline import decode_clip
from services.common.frames.store import CacheMode, ClipNotCached, FrameStore, ParamsMismatch

__all__ = [
    "CacheMode",
    "ClipNotCached",
    "DecodeError",
    "DecodeTimeout",
    "FrameStore",
    "ParamsMismatch",
    "VideoParams",
    "clip_key",
    "decode_clip",
]
