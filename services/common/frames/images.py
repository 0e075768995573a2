"""Still images (frame-folder frames, image samples) as 8-bit RGB, whatever their bit depth.

Pillow opens a 16-bit grayscale PNG (or TIFF) as mode ``I;16`` (``I;16B``, or ``I`` for 32-bit
integers), and its ``convert("RGB")`` clips those values to 255: every pixel brighter than 255/65535 of
full scale comes out white. qwen-vl-utils converts the same way; here we depart from it and scale.

The scale is the top byte (``v >> 8``), the rule Pillow itself applies when it opens a 48-bit RGB PNG
as 8-bit RGB, so a 16-bit gray image and the same picture stored as 48-bit RGB give the same bytes.
(It differs from rounding ``v / 257`` by at most one level.)
"""

from __future__ import annotations

import numpy as np
from PIL import Image

# Modes whose samples are integers wider than 8 bits; "I" (32-bit) is what some readers give 16-bit
# grayscale as, so its values are taken as 16-bit (clipped to 0..65535).
WIDE_GRAY_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N", "I"})


def to_8bit(values: np.ndarray) -> np.ndarray:
    """16-bit samples (any integer dtype, clipped to 0..65535) → uint8 by their top byte."""
    return (np.clip(values, 0, 65535).astype(np.uint32) >> 8).astype(np.uint8)


def rgb8(image: Image.Image) -> Image.Image:
    """``image`` as 8-bit RGB, wide grayscale scaled (not clipped) to 8 bits."""
    if image.mode in WIDE_GRAY_MODES:
        gray = to_8bit(np.asarray(image))
        return Image.fromarray(gray).convert("RGB")  # uint8 (H, W): mode L
    return image.convert("RGB")
