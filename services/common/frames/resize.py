"""Frame size and resampling: qwen-vl-utils ``smart_resize`` and torchvision's antialiased bicubic."""

from __future__ import annotations

import math

import torch

from services.common.frames.params import FRAME_FACTOR, VIDEO_MAX_TOKENS, VideoParams

MAX_RATIO = 200


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: float) -> tuple[int, int]:
    """(H, W) divisible by ``factor``, area within [min_pixels, max_pixels], aspect ratio kept."""
    if min(height, width) <= 0:
        raise ValueError(f"frame size {height}x{width} is empty")
    if max(height, width) / min(height, width) > MAX_RATIO:
        raise ValueError(f"aspect ratio {max(height, width) / min(height, width):.1f} exceeds {MAX_RATIO}")
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = math.floor(height / beta / factor) * factor
        w_bar = math.floor(width / beta / factor) * factor
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    if h_bar < factor or w_bar < factor:
        raise ValueError(f"{height}x{width} cannot fit {max_pixels:.0f} pixels at factor {factor}")
    return h_bar, w_bar


def target_size(params: VideoParams, height: int, width: int, nframes: int) -> tuple[int, int]:
    """Output (H, W) for ``nframes`` frames of ``height``x``width``, as qwen-vl-utils ``fetch_video``."""
    factor = params.factor
    min_pixels = params.resolved_min_pixels
    budget = min(VIDEO_MAX_TOKENS * factor * factor, params.resolved_total_pixels / nframes * FRAME_FACTOR)
    max_pixels = max(budget, int(min_pixels * 1.05))
    if params.max_pixels is not None:
        max_pixels = min(params.max_pixels, max_pixels)
    return smart_resize(height, width, factor, min_pixels, max_pixels)


def resize_frames(frames: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Resize uint8 frames (T, H, W, 3) to (T, height, width, 3).

    Bicubic with antialias on float values, rounded and clamped back to uint8: bit-identical to
    torchvision's ``resize(..., BICUBIC, antialias=True)`` on uint8 input, which the reference uses.
    """
    if frames.shape[1] == height and frames.shape[2] == width:
        return frames.contiguous()
    x = frames.permute(0, 3, 1, 2).float()
    y = torch.nn.functional.interpolate(
        x, size=(height, width), mode="bicubic", antialias=True, align_corners=False
    )
    return y.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous()
