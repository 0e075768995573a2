"""Box coordinates in each model family's own space (FINDINGS.md, "Box coordinates differ by model family").

Qwen2-VL reads and writes boxes relative to the frame in [0, 1000); Qwen2.5-VL in absolute pixels of the
*resized* frame; Qwen3-VL and Qwen3.5 relative in [0, 1000]. A ground truth left in another space scores
~0 IoU for a perfect model without any error, so trainer and eval convert through this one module.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from services.common.families import FamilyName

BoxSpace = Literal["pixels", "relative", "relative1000"]
RELATIVE_SCALE = 1000.0
_PIXEL_FAMILIES = {FamilyName.qwen2_5_vl}


def family_frame_size(family: FamilyName | str, resized: tuple[float, float]) -> tuple[float, float]:
    """(width, height) of a whole frame in ``family``'s box space, given the resized frame size."""
    if FamilyName(family) in _PIXEL_FAMILIES:
        return float(resized[0]), float(resized[1])
    return RELATIVE_SCALE, RELATIVE_SCALE


def to_family_box(
    box: list[float] | tuple[float, ...],
    family: FamilyName | str,
    original: tuple[float, float],
    resized: tuple[float, float],
    space: BoxSpace = "pixels",
) -> list[float]:
    """``[x1, y1, x2, y2]`` written in ``space`` of an ``original`` (w, h) frame, in ``family``'s space.

    Example: ``[128, 72, 640, 360]`` on a 1280×720 frame resized to 448×252 is ``[44.8, 25.2, 224, 126]``
    for Qwen2.5-VL and ``[100, 100, 500, 500]`` for Qwen2-VL / Qwen3-VL.
    """
    if len(box) != 4:
        raise ValueError(f"a box is [x1, y1, x2, y2], got {list(box)!r}")
    ow, oh = (float(v) for v in original)
    if ow <= 0 or oh <= 0:
        raise ValueError(f"original frame size must be positive, got {original!r}")
    if space == "pixels":
        rel = [box[0] / ow, box[1] / oh, box[2] / ow, box[3] / oh]
    elif space == "relative":
        rel = [float(v) for v in box]
    elif space == "relative1000":
        rel = [float(v) / RELATIVE_SCALE for v in box]
    else:
        raise ValueError(f"unknown box space {space!r}; use pixels, relative or relative1000")
    width, height = family_frame_size(family, resized)
    return [rel[0] * width, rel[1] * height, rel[2] * width, rel[3] * height]


def _is_box(value: Any) -> bool:
    return (
        isinstance(value, list | tuple)
        and len(value) == 4
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    )


def _convert(value: Any, convert) -> Any:
    if _is_box(value):
        return convert(value)
    if isinstance(value, list | tuple):
        return [_convert(v, convert) for v in value]
    if isinstance(value, dict):
        return {k: _convert(v, convert) for k, v in value.items()}
    return value


def parse_answer(answer: Any) -> Any:
    """Structured answers are often stored as JSON text; decode those, leave everything else alone."""
    if isinstance(answer, str) and answer.lstrip().startswith("{"):
        try:
            return json.loads(answer)
        except json.JSONDecodeError:
            return answer
    return answer


def has_boxes(answer: Any) -> bool:
    """Whether ``answer`` holds boxes to convert (EasyVideoR1 writes ``"boxes": {}`` on temporal answers)."""
    value = parse_answer(answer)
    return isinstance(value, dict) and bool(value.get("boxes"))


def convert_answer_boxes(
    answer: Any,
    family: FamilyName | str,
    original: tuple[float, float] | None,
    resized: tuple[float, float] | None,
    space: BoxSpace = "pixels",
) -> Any:
    """``answer`` with every box under its ``"boxes"`` key (one box, a list of boxes, or a
    ``{"<sec>": box}`` track) in ``family``'s space; answers without boxes come back unchanged."""
    if not has_boxes(answer):
        return answer
    answer = parse_answer(answer)
    if original is None or resized is None:
        raise ValueError("a box answer needs the clip's original and resized frame size to be converted")
    return {
        **answer,
        "boxes": _convert(answer["boxes"], lambda b: to_family_box(b, family, original, resized, space)),
    }
