"""JSON answers (bare or in ``` fences), time intervals and boxes.

Validation is part of reading: a NaN/inf coordinate, an empty interval, a negative start or a box with
x2 ≤ x1 is not an answer at all. An answer's interval written end first is swapped, and of several
intervals the first is the answer, as the reference temporal-grounding readers do (lmms-eval's and
TimeChat's ``extract_time``); a ground truth must be one ordered interval.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

# A fenced block: group 1 the language ("json", "svg", may be empty), group 2 the content. The rest of the
# info line ("```python title=x") is skipped only when a newline ends it, so "```{"a": 1}```" keeps its body.
FENCE = re.compile(r"```[ \t]*([\w+-]*)(?:[^\n`]*\n)?(.*?)```", re.S)
_DECODER = json.JSONDecoder()
_JSON_START = re.compile(r"[{\[]")
_MAX_JSON_STARTS = 32
_NUM = r"[-+]?\d+(?:\.\d+)?"
_CLOCK = r"\d{1,2}:\d{2}(?::\d{2})?(?:\.\d+)?"
_TIME = rf"(?:{_CLOCK}|{_NUM})"
_UNIT = r"\s*(?:s|sec|secs|second|seconds)?\b"
# A start or end keyword, then up to 40 characters without a digit before its time: "starts at",
# "Start time:", "Starting time:", "The start time for this event is", "start:".
_GAP = r"[^\d\n]{0,40}?"
# "starts at 3.2 s and ends at 5", "Start time: 4.2 seconds\nEnd time: 9.8 seconds", "start: 3.0s, end: 7.5s",
# "from 12.5 to 20 seconds", "between 3 and 7 s", "12.5 - 20.0 seconds", "00:12 to 00:20", "[3.0, 7.5]",
# "(3.0, 7.5)", "[3.0s, 7.5s]"
_INTERVAL_PATTERNS = (
    re.compile(
        rf"\bstart(?:s|ing)?(?:\s+time)?\b{_GAP}(?P<s>{_TIME}){_UNIT}.{{0,60}}?"
        rf"\bend(?:s|ing)?(?:\s+time)?\b{_GAP}(?P<e>{_TIME}){_UNIT}",
        re.I | re.S,
    ),
    re.compile(
        rf"(?:from|between)\s+(?P<s>{_TIME}){_UNIT}\s*(?:to|and|-|–|until)\s*(?P<e>{_TIME}){_UNIT}", re.I
    ),
    re.compile(rf"(?<![\w.:])(?P<s>{_TIME}){_UNIT}\s*(?:-|–|~|to|until)\s*(?P<e>{_TIME}){_UNIT}", re.I),
    re.compile(rf"[\[(]\s*(?P<s>{_NUM}){_UNIT}\s*,\s*(?P<e>{_NUM}){_UNIT}\s*[\])]", re.I),
)


def _json_in(source: str) -> list[Any]:
    values: list[Any] = []
    attempts, at = 0, 0
    while attempts < _MAX_JSON_STARTS and (start := _JSON_START.search(source, at)) is not None:
        attempts += 1
        try:
            value, end = _DECODER.raw_decode(source, start.start())
        except (ValueError, RecursionError):  # not JSON (or nested beyond reason) from here on
            at = start.start() + 1
            continue
        values.append(value)
        at = end
    return values


def json_values(text: str) -> list[Any]:
    """Every top-level JSON object or array in ``text``, in order: those in fenced blocks when they hold
    any, else those in the whole text. At most ``_MAX_JSON_STARTS`` decoding attempts per source."""
    fenced = [value for m in FENCE.finditer(text) for value in _json_in(m.group(2))]
    return fenced or _json_in(text)


_INTERVAL_KEYS = ("time", "timestamps", "timestamp", "interval", "segment")
_START_END_KEYS = (("start", "end"), ("start_time", "end_time"), ("begin", "end"))


def find_json(text: str) -> Any | None:
    """The JSON object or array ``text`` answers with (fenced blocks first), or None: none, or several
    different ones ("[3.2, 5.0] or [10, 12]" hedges just like two intervals in prose)."""
    values = json_values(text)
    if not values or any(v != values[0] for v in values[1:]):
        return None
    return values[0]


def as_json(value: Any) -> Any:
    """A ground truth as JSON data: strings are searched for JSON, anything else is taken as is."""
    return find_json(value) if isinstance(value, str) else value


def finite_number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _seconds(token: str) -> float:
    if ":" in token:
        parts = [float(p) for p in token.split(":")]
        return sum(p * 60.0**i for i, p in enumerate(reversed(parts)))
    return float(token)


def as_interval(value: Any, *, swap: bool = False) -> tuple[float, float] | None:
    """``[s, e]`` with finite 0 ≤ s < e, else None; with ``swap`` an interval written end first
    (``[e, s]``) is read as ``[s, e]`` (answers), without it it is invalid (ground truths)."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        return None
    start, end = finite_number(value[0]), finite_number(value[1])
    if start is None or end is None:
        return None
    if swap and end < start:
        start, end = end, start
    if start < 0 or end <= start:
        return None
    return (start, end)


def interval_from_json(value: Any, *, swap: bool = False) -> tuple[float, float] | bool | None:
    """``{"time": [s, e]}``, ``{"start": s, "end": e}`` or ``[s, e]``; False when ``value`` has no time
    field at all."""
    if isinstance(value, dict):
        for key in _INTERVAL_KEYS:
            if key in value:
                return as_interval(value[key], swap=swap)
        for start, end in _START_END_KEYS:
            if start in value and end in value:
                return as_interval([value[start], value[end]], swap=swap)
        return False
    if isinstance(value, list) and len(value) == 2:
        return as_interval(value, swap=swap)
    return False


def find_interval(text: str, *, answer: bool = False) -> tuple[float, float] | None:
    """One time interval from JSON or prose.

    ``answer`` (reading a response): an interval written end first is swapped and of several different
    intervals the first counts, as the reference readers do; several cannot raise the expected IoU,
    since only the first is scored. Otherwise (a ground truth) several are ambiguous → None."""
    parsed = find_json(text)
    if parsed is not None:
        interval = interval_from_json(parsed, swap=answer)
        if interval is not False:
            return interval  # type: ignore[return-value]
    for pattern in _INTERVAL_PATTERNS:
        found = [(_seconds(m.group("s")), _seconds(m.group("e"))) for m in pattern.finditer(text)]
        if not found:
            continue
        if answer:
            return as_interval(found[0], swap=True)
        return as_interval(found[0]) if len(set(found)) == 1 else None
    return None


def as_box(value: Any) -> tuple[float, float, float, float] | None:
    """``[x1, y1, x2, y2]`` with finite coordinates, x2 > x1 and y2 > y1, else None."""
    if not isinstance(value, list | tuple) or len(value) != 4:
        return None
    coords = [finite_number(v) for v in value]
    if any(c is None for c in coords):
        return None
    x1, y1, x2, y2 = coords  # type: ignore[misc]
    if x2 <= x1 or y2 <= y1:
        return None
    return (x1, y1, x2, y2)


# Keys under which answers put a box, and under which per-frame records name their frame.
BOX_KEYS = ("bbox_2d", "bbox", "box", "boxes", "box_2d")
FRAME_KEYS = ("frame", "frame_id", "frame_index", "frame_idx", "time", "timestamp", "second")


def boxes_in(value: Any) -> list[Any]:
    """Raw box candidates in a JSON answer: a 4-list, a list of them, or dicts keyed bbox_2d/bbox/box(es)."""
    if isinstance(value, dict):
        for key in BOX_KEYS:
            if key in value:
                return boxes_in(value[key])
        return []
    if isinstance(value, list):
        if len(value) == 4 and all(not isinstance(v, list | dict) for v in value):
            return [value]
        return [box for item in value for box in boxes_in(item)]
    return []


def single_box(value: Any) -> tuple[float, float, float, float] | None:
    """The one box a JSON answer gives; several different boxes are a hedge → None."""
    raw = boxes_in(value)
    distinct = {tuple(b) if isinstance(b, list) else b for b in raw}
    if len(distinct) != 1:
        return None
    return as_box(raw[0])


def frame_key(key: Any) -> float | None:
    """Frame keys ("3", "3.0", 3) as one float so "3" and "3.0" name the same frame."""
    number = finite_number(key)
    return None if number is None or number < 0 else round(number, 3)


def _frame_records(records: list[Any]) -> dict[float, Any]:
    """``[{"frame": 0, "bbox_2d": box}, …]`` → ``{0.0: box, …}``; records without a usable frame or a box
    are dropped."""
    pairs = {}
    for record in records:
        frame = frame_key(next((record[k] for k in FRAME_KEYS if k in record), None))
        box = next((record[k] for k in BOX_KEYS if k in record), None)
        if frame is not None and box is not None:
            pairs[frame] = box
    return pairs


def boxes_by_frame(
    value: Any, frame_keys: Sequence[float] | None = None
) -> dict[float, tuple[float, float, float, float]] | None:
    """Valid boxes by frame from ``{"<sec>": box}``, ``[{"frame": f, "bbox_2d": box}, …]`` or a bare list of
    boxes (optionally under ``"boxes"``); invalid entries are dropped.

    A bare list says nothing about which frames its boxes belong to. With ``frame_keys`` (the truth's
    frames, sorted) it is mapped onto them only when the lengths are equal, and is otherwise unreadable
    (None); without them (reading a truth) index = frame. None also when ``value`` is no per-frame form.
    """
    if isinstance(value, dict) and "boxes" in value:
        value = value["boxes"]
    if isinstance(value, list):
        if value and all(isinstance(item, dict) for item in value):
            value = _frame_records(value)
        elif frame_keys is None:
            value = dict(enumerate(value))
        elif len(value) == len(frame_keys):
            value = dict(zip(frame_keys, value, strict=True))
        else:
            return None
    if not isinstance(value, dict):
        return None
    frames: dict[float, tuple[float, float, float, float]] = {}
    for key, raw in value.items():
        frame, box = frame_key(key), as_box(raw)
        if frame is not None and box is not None:
            frames[frame] = box
    return frames
