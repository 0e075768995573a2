"""The frame store: decode each video once, load it everywhere (SPEC §3)."""

from services.common.frames.decoders import DecodeError, DecodeTimeout
from services.common.frames.params import ParamsMismatch, VideoParams, check_params, clip_key
from services.common.frames.pipeline import decode_clip
from services.common.frames.store import CacheMode, ClipNotCached, FrameStore

__all__ = [
    "CacheMode",
    "ClipNotCached",
    "DecodeError",
    "DecodeTimeout",
    "FrameStore",
    "ParamsMismatch",
    "VideoParams",
    "check_params",
    "clip_key",
    "decode_clip",
]
